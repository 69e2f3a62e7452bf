"""A dense step's push and pull through the compiled transport (docs/
python.md, "The compiled transport"): ``paramserver._native``, a pybind11
module of the C++ worker's ParameterClient (worker/parameter_client.h),
built with the project when Debian's pybind11-dev and python3-dev are
installed (python/native/). The calls run in C++ on gRPC's callback threads,
through the same-host shared memory and with the retries ``ps-worker`` uses;
the training thread copies the gradients in and the values out, and waits,
without the GIL. Without the module the SDK runs paramserver._pipeline,
which trains the same values bit for bit (tests/python/
test_native_transport.py).

``NativePipeline`` has StepPipeline's methods, so the worker drives either.
A job with sparse tables (paramserver.torch.ShardedEmbedding) also pulls
the rows of a step's ids with its dense values, and pushes their gradients
with its dense gradients, in the same request to each server
(ParameterClient::PullStepAsync, PushStepAsync): ids, rows and row
gradients travel as one numpy buffer per table, copied once in C++.
"""

from __future__ import annotations

from typing import Dict, List, Mapping, NamedTuple, Optional, Tuple

import grpc
import numpy as np

from paramserver import v1
from paramserver._params import ParameterClient
from paramserver._pipeline import Started
from paramserver._rpc import Security
from paramserver._sparse import SparseRouter
from paramserver.errors import ParamServerError, error_for

try:
    from paramserver import _native
except ImportError:  # Not built (docs/python.md): the pure-Python path.
    _native = None

__all__ = ["available", "NativePipeline", "RowsPull"]

_CODES = {code.value[0]: code for code in grpc.StatusCode}


def available() -> bool:
    """Whether the compiled transport was built and imports."""
    return _native is not None


def _error(e: BaseException) -> ParamServerError:
    """The SDK's exception for the module's CallError(code, message)."""
    code, message = e.args
    return error_for(_CODES.get(code, grpc.StatusCode.UNKNOWN), message)


class RowsPull(NamedTuple):
    """A pull with rows in flight (StepPipeline's Started, and what
    SparseStep.install reads): per table name, the distinct int64 ids
    asked for and, once finished, their float32 rows ``[len(ids), dim]``
    (allocated when the pull starts, filled when it ends)."""
    clock: int
    calls: Dict[int, object]
    ids: Dict[str, np.ndarray]
    rows: Dict[str, np.ndarray]


_NO_IDS = np.zeros(0, np.int64)
_NO_ROWS = np.zeros(0, np.float32)


class _Canceller:
    """Registered with the job's stop: ends the client's calls."""

    def __init__(self, client) -> None:
        self._client = client

    def cancel(self) -> None:
        self._client.cancel()


class NativePipeline:
    """Starts a dense job's pushes and pulls in C++ and ends them (the
    interface of paramserver._pipeline.StepPipeline).

    Threads: one thread starts and finishes calls; the job's stop cancels
    them from any thread. One push and one pull in flight at a time.
    Requires a job without the SSP worker cache. A job with sparse tables
    passes its `router`: pulls may then name rows (``start_pull(clock,
    ids)``) and pushes carry row gradients (``start_push(..., rows)``).
    Raises ParamServerError (INVALID_ARGUMENT) if the C++ layout of the
    job's tensors or tables differs from the SDK's.
    """

    def __init__(self, client: ParameterClient,
                 assignment: "v1.Assignment", security: Security,
                 router: Optional[SparseRouter] = None):
        if _native is None:
            raise error_for(grpc.StatusCode.FAILED_PRECONDITION,
                            "the compiled transport (paramserver._native) "
                            "is not built")
        self.client = client
        self._options = dict(
            pull_timeout=client.pull_timeout,
            push_timeout=client.push_timeout,
            retry_window=client.retry_window,
            shared_payloads=any(client._shared),
            tls=security.tls,
            ca_pem=(security.root_certificates or b"").decode(),
            cert_pem=(security.certificate_chain or b"").decode(),
            key_pem=(security.private_key or b"").decode(),
            server_name=security.server_name or "",
            metadata=list(security.metadata))
        self._assignment = assignment.SerializeToString()
        self._native = self._connect()
        sizes = [t.numel for t in client.tensors]
        if list(self._native.tensor_sizes) != sizes:
            raise error_for(grpc.StatusCode.INVALID_ARGUMENT,
                            "the compiled transport lays the job's tensors "
                            f"out as {list(self._native.tensor_sizes)}, the "
                            f"SDK as {sizes}")
        self.router = router
        dims = ([] if router is None else
                [r.dim for r in sorted(router.tables.values(),
                                       key=lambda r: r.index)])
        if list(self._native.table_dims) != dims:
            raise error_for(grpc.StatusCode.INVALID_ARGUMENT,
                            "the compiled transport reads sparse tables of "
                            f"dims {list(self._native.table_dims)}, the SDK "
                            f"{dims}")
        self._track()

    def _connect(self):
        try:
            return _native.StepClient(self._assignment, **self._options)
        except _native.CallError as e:
            raise _error(e) from None

    def _track(self) -> None:
        self._canceller = _Canceller(self._native)
        if not self.client._stop.track(self._canceller):
            self._native.cancel()
        self._pushed = 0   # The client's bytes counted into the SDK's.
        self._pulled = 0

    def close(self) -> None:
        """Ends the calls in flight, the client's connections and its
        shared-memory regions (the C++ client is destroyed); idempotent."""
        if self._native is None:
            return
        self.client._stop.untrack(self._canceller)
        self._native.cancel()
        # The last references: the C++ client removes its regions as it
        # goes.
        self._canceller = None
        self._native = None

    def _stopped(self) -> None:
        reason = self.client._stop.reason
        if reason is not None:
            raise reason

    def _counters(self) -> None:
        pushed, pulled = self._native.pushed_bytes, self._native.pulled_bytes
        self.client.pushed_bytes += pushed - self._pushed
        self.client.pulled_bytes += pulled - self._pulled
        self._pushed, self._pulled = pushed, pulled

    def _by_table(self, per_name: Mapping[str, object], empty,
                  what: str) -> List:
        """Per table index (up to the last one named): `per_name`'s entry,
        `empty` for a table not named."""
        if self.router is None:
            raise error_for(grpc.StatusCode.INVALID_ARGUMENT,
                            f"{what}: the job has no sparse tables")
        routes = [self.router.table(name) for name in per_name]
        out = [empty] * (max((r.index for r in routes), default=-1) + 1)
        for route, value in zip(routes, per_name.values()):
            out[route.index] = value
        return out

    def start_push(self, clock: int, grads: np.ndarray,
                   rows: Optional[Mapping[str, Tuple[np.ndarray,
                                                     np.ndarray]]] = None
                   ) -> Started:
        """Starts the push of `clock`'s gradients (flat float32) and, for a
        job with sparse tables, of `rows`' (per table name: distinct int64
        ids and float32 gradients ``[len(ids), dim]``); all may change once
        this returns (they are copied)."""
        client = self.client
        if grads.shape != (client.size,) or grads.dtype != np.float32:
            raise error_for(grpc.StatusCode.INVALID_ARGUMENT,
                            f"gradients: {grads.shape} {grads.dtype}, "
                            f"expected ({client.size},) float32")
        self._stopped()
        try:
            if rows:
                pairs = self._by_table(rows, (_NO_IDS, _NO_ROWS), "rows")
                self._native.start_push(clock, grads,
                                        [ids for ids, _ in pairs],
                                        [g for _, g in pairs])
            else:
                self._native.start_push(clock, grads)
        except _native.CallError as e:
            raise _error(e) from None
        return Started(clock, {})

    def finish_push(self, started: Started, grads: np.ndarray) -> bool:
        """Waits for the started push (retried in C++ as ParameterClient's
        are). Returns False: duplicates are not reported."""
        try:
            self._native.finish_push()
        except _native.CallError as e:
            self._stopped()
            raise _error(e) from None
        self._counters()
        return False

    def start_pull(self, clock: int,
                   ids: Optional[Mapping[str, np.ndarray]] = None
                   ) -> Started:
        """Starts the pull of `clock`'s parameters and, for a job with
        sparse tables, of the rows of `ids` (per table name: distinct int64
        ids, copied): then a RowsPull, whose rows finish_pull fills."""
        self._stopped()
        pull = None
        if ids:
            wanted = {name: np.ascontiguousarray(v, dtype=np.int64)
                      for name, v in ids.items()}
            tables = self._by_table(wanted, _NO_IDS, "ids")
            pull = RowsPull(clock, {}, wanted, {
                name: np.empty((len(v), self.router.table(name).dim),
                               np.float32) for name, v in wanted.items()})
        try:
            if pull is None:
                self._native.start_pull(clock)
            else:
                self._native.start_pull(clock, tables)
        except _native.CallError as e:
            raise _error(e) from None
        self.client.pulls_made += 1
        return Started(clock, {}) if pull is None else pull

    def finish_pull(self, started: Started,
                    out: np.ndarray) -> Tuple[int, int]:
        """Waits for the started pull and writes its values into `out`
        (flat float32), and a RowsPull's rows into its `rows`. Returns
        (-1, -1): the clocks are not reported."""
        try:
            if isinstance(started, RowsPull):
                self._native.finish_pull(out, self._by_table(
                    started.rows, _NO_ROWS, "rows"))
            else:
                self._native.finish_pull(out)
        except _native.CallError as e:
            self._stopped()
            raise _error(e) from None
        self._counters()
        return -1, -1

    def abandon(self, started: Started) -> None:
        """Cancels a started pull that is no longer wanted: the C++ client
        ends its calls and a new one is connected (a pull cannot be
        cancelled alone). A push in flight is waited for first (cancelling
        it could lose it); raises its error, or the new client's."""
        self.finish_push(started, None)
        self.client._stop.untrack(self._canceller)
        self._native.cancel()
        try:
            self._native.finish_pull(np.empty(self.client.size, np.float32))
        except _native.CallError:
            pass
        self._native = self._connect()
        self._track()

    def pull(self, clock: int, out: np.ndarray) -> Tuple[int, int]:
        """A pull started and finished."""
        return self.finish_pull(self.start_pull(clock), out)

    def pull_rows(self, clock: int, out: np.ndarray,
                  ids: Optional[Mapping[str, np.ndarray]]
                  ) -> Optional[RowsPull]:
        """A pull with the rows of `ids` started and finished: the
        RowsPull holding them (None without ids)."""
        started = self.start_pull(clock, ids)
        self.finish_pull(started, out)
        return started if isinstance(started, RowsPull) else None
