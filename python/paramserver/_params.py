"""A worker's calls to the parameter servers: pull, push and seed, to every
server in parallel, as ``ps-worker``'s ParameterClient (worker/
parameter_client.h, worker/server_fanout.h): every call has a deadline, the
failed servers are called again with backoff (the PARAMETERS policy of
paramserver._retry), and the payloads to a server on this host go through
shared memory when the server takes them (docs/architecture.md, "Same-host
payloads").
"""

from __future__ import annotations

import logging
import queue
import time
from typing import Callable, Dict, List, NamedTuple, Optional, Sequence, Tuple

import grpc
import numpy as np

from paramserver import v1
from paramserver._retry import PARAMETERS, Retrier, status_of
from paramserver._rpc import Security, create_channel
from paramserver._shared import (RegionPool, SharedRegion, host_of,
                                 is_loopback_host, remove_orphaned_regions)
from paramserver.errors import ParamServerError, error_for, from_rpc_error
from paramserver._cluster import decode_values, encode_bf16, encode_fp16
from paramserver._map_change import MAP_VERSION, is_moving, server_behind
from paramserver._sparse import SparsePull
from paramserver.layout import (TensorLayout, effective_block_elems,
                                effective_staleness, server_blocks,
                                split_into_blocks)

log = logging.getLogger("paramserver")

__all__ = ["ParameterClient"]


class _Call(NamedTuple):
    """One server's call of an attempt: its gRPC future, and the region it
    lent the server (None: through the socket)."""
    future: grpc.Future
    region: Optional[SharedRegion] = None


class _Failed(ParamServerError):
    """An attempt in which some servers failed for reasons a retry may fix;
    `error` is the last one's (a grpc.RpcError or ParamServerError), from
    server `server`."""

    def __init__(self, code: grpc.StatusCode, server: int,
                 error: Optional[BaseException],
                 servers: Sequence[int] = ()):
        super().__init__("some servers failed", code)
        self.server = server
        self.error = error
        self.servers = list(servers)  # Every server that failed.


class ParameterClient:
    """Pulls and pushes one job's parameters, as a flat float32 vector of
    every tensor in the model's order, cut into the shard map's blocks and
    sent to every server in parallel.

    `shared_memory`: pass payloads to servers on a loopback address through
    shared-memory regions (PushShared, PullShared); a server that refuses
    them (UNIMPLEMENTED) is called through the socket from then on.

    `newer_map()` (optional; any thread's callable) says whether the
    coordinator has offered a newer shard map than the assignment's: a call
    then stops retrying (between attempts) and raises FAILED_PRECONDITION
    ``map_version: ...``, for the caller to follow the new map
    (paramserver.torch._follow). A server that has not yet taken the
    client's newer map is retried, as a server refusing a push while the
    job's servers move (at the first step's short delay).

    Threads: one call at a time (the worker's communication thread); cancel
    through the `stop` it was given, from any thread.
    """

    def __init__(self, assignment: "v1.Assignment",
                 tensors: Sequence[TensorLayout], security: Security,
                 stop, pull_timeout: float = 30.0,
                 push_timeout: float = 30.0, retry_window: float = 120.0,
                 shared_memory: bool = True,
                 newer_map: Optional[Callable[[], bool]] = None):
        spec = assignment.spec
        self.job_id = assignment.job_id
        self.worker = assignment.index
        self.map_version = assignment.shard_map.version
        self.tensors = list(tensors)
        self._security = security
        self._stop = stop
        self._newer_map = newer_map or (lambda: False)
        self.pull_timeout = pull_timeout
        self.push_timeout = push_timeout
        self.retry_window = retry_window
        self.encoding = spec.mixed_precision.wire_gradients
        self.staleness = effective_staleness(spec.consistency)
        self.use_cache = (spec.consistency.model == v1.ConsistencySpec.SSP and
                          spec.consistency.worker_cache)
        self.offsets = np.cumsum([0] + [t.numel for t in self.tensors])
        self.size = int(self.offsets[-1])
        shard_map = assignment.shard_map
        self.addresses = list(shard_map.servers)
        block_elems = effective_block_elems(spec, self.tensors,
                                            len(self.addresses))
        try:
            grouped = server_blocks(
                split_into_blocks(self.tensors, block_elems),
                len(self.addresses),
                {p.key: p.server for p in shard_map.blocks})
        except ValueError as e:
            raise error_for(grpc.StatusCode.INVALID_ARGUMENT, str(e)) from None
        self._block_refs = grouped
        # Per server: (key, first flat index, values) of each block.
        self.blocks: List[List[Tuple[int, int, int]]] = [
            [(b.key, int(self.offsets[b.tensor]) + b.offset, b.numel)
             for b in refs] for refs in grouped]
        # The largest pull reply of each server: the blocks' values and, at
        # most, their tags, lengths and keys; the clocks.
        workers = max(1, spec.num_workers)
        self._max_reply_bytes = [
            sum(4 * n + 32 for _, _, n in blocks) + 64 + 11 * workers
            for blocks in self.blocks]
        self._shared = [shared_memory and is_loopback_host(host_of(a))
                        for a in self.addresses]
        self._regions = RegionPool()
        if any(self._shared):
            remove_orphaned_regions()
        self._channels = [create_channel(a, security, member=True)
                          for a in self.addresses]
        self._stubs = [v1.ParameterServiceStub(c) for c in self._channels]
        self._cache: Optional[np.ndarray] = None
        self._cached_min_clock = -1
        self.pulls_made = 0
        self.pulls_saved = 0
        self.pushed_bytes = 0
        self.pulled_bytes = 0

    def close(self) -> None:
        for channel in self._channels:
            channel.close()
        self._regions.close()

    def uses_shared_memory(self, server: int) -> bool:
        """Whether calls to server `server` pass their payloads through
        shared memory now."""
        return self._shared[server]

    # Calls to every server.

    def _for_all_servers(self, what: str, servers: Sequence[int],
                         start: Callable[[int], _Call],
                         retry_window: Optional[float],
                         on_reply: Callable[[int, object, Optional[SharedRegion]],
                                            None]) -> None:
        """Runs `start(s)` for every server in parallel, and again for the
        failed ones, with the PARAMETERS policy's backoff, while their
        error may be retried (`retry_window` s; None: no limit). The first
        server to fail for a reason a retry cannot fix cancels the other
        calls and raises its error, naming `what` and the server."""
        todo = list(servers)
        moving = [False]

        def attempt() -> None:
            if self._stop.reason is not None:
                raise self._stop.reason
            try:
                self._attempt(what, todo, start, on_reply)
            except _Failed as e:
                todo[:] = e.servers  # Only they are called again.
                moving[0] = is_moving(e.error)
                raise

        def sleep(delay: float) -> bool:
            # A server frozen for a move takes the push, or refuses the old
            # map, the moment the move ends: retry at the first step's
            # delay (as ServerFanout). A newer map offered ends the wait.
            if moving[0]:
                delay = min(delay, PARAMETERS.initial_backoff)
            end = time.monotonic() + delay
            while True:
                if self._stop.reason is not None or self._newer_map():
                    return False
                left = end - time.monotonic()
                if left <= 0:
                    return True
                time.sleep(min(left, 0.01))

        retrier = Retrier(PARAMETERS.with_window(retry_window), sleep)
        try:
            retrier.run(attempt, lambda _: self._stop.reason is None and
                        not self._newer_map())
        except _Failed as e:
            if self._stop.reason is not None:
                raise self._stop.reason from None
            if self._newer_map():
                details = (e.error.details() if isinstance(
                    e.error, grpc.RpcError) else e.error)
                raise error_for(
                    grpc.StatusCode.FAILED_PRECONDITION,
                    f"{MAP_VERSION} {what} under shard map version "
                    f"{self.map_version} ended: the coordinator offers a "
                    f"newer map (server {self.addresses[e.server]}: "
                    f"{details})") from None
            message = (f"{what} failed after retrying for "
                       f"{retry_window:.0f} s: server "
                       f"{self.addresses[e.server]}")
            if isinstance(e.error, grpc.RpcError):
                raise from_rpc_error(e.error, message) from None
            raise error_for(e.code, f"{message}: {e.error}") from None

    def _attempt(self, what: str, todo: Sequence[int],
                 start: Callable[[int], _Call],
                 on_reply: Callable[[int, object, Optional[SharedRegion]],
                                    None]) -> List[int]:
        """One attempt at the servers `todo`; returns the ones that failed
        for a reason a retry may fix (raising _Failed if any did), raises
        the refusal of a server that a retry cannot fix."""
        done: "queue.Queue[Tuple[int, _Call]]" = queue.Queue()
        calls: Dict[int, _Call] = {}
        for s in todo:
            call = start(s)
            if not self._stop.track(call.future):
                call.future.cancel()
            calls[s] = call
            call.future.add_done_callback(
                lambda _, s=s, call=call: done.put((s, call)))
        failed: List[int] = []
        refused: Optional[Tuple[int, BaseException]] = None
        last: Optional[Tuple[int, grpc.StatusCode, BaseException]] = None
        for _ in range(len(calls)):
            s, call = done.get()
            self._stop.untrack(call.future)
            error: Optional[BaseException] = None
            if call.future.cancelled():
                error = error_for(grpc.StatusCode.CANCELLED,
                                  f"{what} cancelled")
            else:
                error = call.future.exception()
            if error is None:
                try:
                    on_reply(s, call.future.result(), call.region)
                    self._regions.release(call.region)
                    continue
                except ParamServerError as e:
                    error = e
            # The server may still handle a failed call later, reading or
            # writing its region: remove it, never reuse it.
            if call.region is not None:
                call.region.close()
            failed.append(s)
            code = status_of(error)
            if call.region is not None and code == grpc.StatusCode.UNIMPLEMENTED:
                error = self._shared_refused(s, error)
                code = grpc.StatusCode.ABORTED
            elif server_behind(error, self.map_version):
                # It takes the newer map on its next heartbeat.
                error = error_for(
                    grpc.StatusCode.ABORTED,
                    f"server {self.addresses[s]} has not taken shard map "
                    f"version {self.map_version} yet: {error}")
                code = grpc.StatusCode.ABORTED
            if (refused is None and not call.future.cancelled() and
                    code not in PARAMETERS.codes):
                refused = (s, error)
                for other in calls.values():
                    other.future.cancel()
            elif code in PARAMETERS.codes:
                last = (s, code, error)
        if self._stop.reason is not None:
            raise self._stop.reason
        if refused is not None:
            s, error = refused
            if isinstance(error, ParamServerError):
                raise error
            raise from_rpc_error(
                error, f"{what} from server {self.addresses[s]}") from None
        if failed:
            s, code, error = last if last else (
                failed[0], grpc.StatusCode.UNAVAILABLE, None)
            raise _Failed(code, s, error, failed)
        return failed

    def _shared_refused(self, s: int, error: BaseException
                        ) -> ParamServerError:
        """A server answered a shared-memory call UNIMPLEMENTED: it is
        called through the socket from now on, and the call is retried
        (ABORTED) after the usual backoff (``SharedCallFailed``)."""
        details = (error.details() if isinstance(error, grpc.RpcError)
                   else str(error))
        if self._shared[s]:
            self._shared[s] = False
            log.info("server %s takes no shared-memory payloads from this "
                     "worker (%s): calling it through the socket",
                     self.addresses[s], details)
        return error_for(grpc.StatusCode.ABORTED,
                         "shared-memory payloads refused, calling again "
                         f"through the socket: {details}")

    def _region(self, size: int, s: int, what: str
                ) -> Optional[SharedRegion]:
        """A region for a call to server s, or None (through the socket)."""
        try:
            return self._regions.acquire(size)
        except OSError as e:
            log.warning("%s %s: shared region of %d bytes: %s", what,
                        self.addresses[s], size, e)
            return None

    # Pull.

    def pull(self, clock: int, out: np.ndarray, final: bool = False,
             sparse: Optional[SparsePull] = None,
             servers: Optional[Sequence[int]] = None) -> Tuple[int, int]:
        """Fills `out` (flat float32, `size` values) with parameters holding
        every update of clocks below ``clock - staleness`` (``final``: of
        every worker's every clock below `clock`, whatever the consistency
        model). Returns (slowest worker's clock, this worker's clock) as the
        servers recorded them. Served from the SSP cache when the job asks
        for it and the bound allows (and `sparse` asks for no rows).

        `sparse`: rows of sparse tables to read in the same request to each
        server (``PullRequest.sparse``), placed into ``sparse.rows``.
        `servers`: only these servers' blocks (default: every server's);
        the clocks returned are then theirs."""
        if sparse is not None and sparse.empty():
            sparse = None
        if (sparse is None and not final and self.use_cache and
                self._cached_min_clock >= 0 and
                clock <= self._cached_min_clock + self.staleness):
            self.pulls_saved += 1
            out[:] = self._cache
            return self._cached_min_clock, -1
        self.pulls_made += 1
        request = v1.PullRequest(job_id=self.job_id, worker_index=self.worker,
                                 clock=clock, map_version=self.map_version,
                                 final=final)
        min_clocks: Dict[int, int] = {}
        own_clocks: Dict[int, int] = {}

        def on_reply(s: int, reply, region: Optional[SharedRegion]) -> None:
            reply = self._take_pull_reply(s, reply, region, out, sparse)
            min_clocks[s] = reply.min_clock
            if self.worker < len(reply.worker_clocks):
                own_clocks[s] = reply.worker_clocks[self.worker]

        self._for_all_servers(
            f"{'final pull' if final else 'pull'} of clock {clock}",
            range(len(self._stubs)) if servers is None else servers,
            lambda s: self._start_pull(s, request, sparse),
            # A final read waits for the slowest worker for as long as the
            # job runs.
            None if final else self.retry_window, on_reply)
        min_clock = min(min_clocks.values()) if min_clocks else 0
        own_clock = min(own_clocks.values()) if own_clocks else 0
        if self.use_cache and not final and sparse is None and servers is None:
            self._cache = out.copy()
            self._cached_min_clock = min_clock
        return min_clock, own_clock

    def _start_pull(self, s: int, request: "v1.PullRequest",
                    sparse: Optional[SparsePull]) -> _Call:
        """Starts server s's part of a pull: `request` with the rows
        `sparse` asks of s, its reply in a shared region where s shares
        memory with this worker (else through the socket)."""
        reply_bytes = self._max_reply_bytes[s]
        if sparse is not None and sparse.requests(s):
            server_request = v1.PullRequest()
            server_request.CopyFrom(request)
            server_request.sparse.extend(sparse.requests(s))
            request = server_request
            reply_bytes += sparse.reply_bytes(s)
        if self._shared[s]:
            region = self._region(reply_bytes, s, "pull from")
            if region is not None:
                shared = v1.SharedPullRequest(pull=request)
                shared.reply.region = region.name
                shared.reply.length = region.size
                return _Call(self._stubs[s].PullShared.future(
                    shared, timeout=self.pull_timeout,
                    metadata=self._security.metadata), region)
        return _Call(self._stubs[s].Pull.future(
            request, timeout=self.pull_timeout,
            metadata=self._security.metadata))

    def _take_pull_reply(self, s: int, reply,
                         region: Optional[SharedRegion], out: np.ndarray,
                         sparse: Optional[SparsePull]) -> "v1.PullResponse":
        """Reads server s's pull reply (from `region` when it came through
        one) into `out` and `sparse`; returns the parsed reply."""
        if region is not None:
            if reply.length > region.size:
                raise error_for(grpc.StatusCode.INTERNAL,
                                f"pull reply from {self.addresses[s]}: "
                                "not within its shared region")
            # Parsed from the region itself (Protobuf copies what it
            # keeps), the view released before the region is reused.
            with memoryview(region.buffer) as view:
                reply = v1.PullResponse.FromString(view[:reply.length])
        self._read_pull_reply(s, reply, out)
        if sparse is not None:
            sparse.on_reply(s, reply.sparse, self.addresses[s],
                            reply.value_encoding)
        elif len(reply.sparse):
            raise error_for(grpc.StatusCode.INTERNAL,
                            f"pull reply of server {self.addresses[s]} "
                            "has rows no one asked for")
        return reply

    def _read_pull_reply(self, s: int, reply, out: np.ndarray) -> None:
        expected = self.blocks[s]
        if len(reply.blocks) != len(expected):
            raise error_for(grpc.StatusCode.INTERNAL,
                            f"pull reply of server {self.addresses[s]} "
                            f"has {len(reply.blocks)} blocks, expected "
                            f"{len(expected)}")
        # 16-bit values when the job sets mixed_precision.wire_parameters.
        encoding = reply.value_encoding
        width = {v1.FP32: 4, v1.FP16: 2, v1.BF16: 2}.get(encoding, 0)
        for block, (key, first, n) in zip(reply.blocks, expected):
            if block.key != key or width == 0 or len(block.data) != width * n:
                raise error_for(grpc.StatusCode.INTERNAL,
                                f"pull reply block {block.key} does not "
                                "match")
            out[first:first + n] = decode_values(block.data, encoding)
            self.pulled_bytes += len(block.data)

    def resume_clock(self, out: np.ndarray) -> int:
        """The clock this worker resumes at: the pushes every server
        recorded for its index (0 for a new job). `out` gets the values at
        clock 0's read (which waits for the seed of an EXTERNAL model)."""
        _, own = self.pull(0, out)
        self._cached_min_clock = -1  # Later reads are not served from it.
        return own

    # Push.

    def push(self, clock: int, grads: np.ndarray,
             sparse: Optional[Sequence[Sequence["v1.SparseRows"]]] = None,
             servers: Optional[Sequence[int]] = None) -> bool:
        """Pushes the gradients of `clock` (flat float32) in the job's wire
        format. Returns True if every server had it already (a retry).
        Applied exactly once per (worker, clock) however often retried.

        `sparse`: per server, the row gradients of sparse tables to push in
        the same request (``PushRequest.sparse``; paramserver._sparse.
        push_rows). `servers`: only to these servers (default: every
        server)."""
        if grads.shape != (self.size,) or grads.dtype != np.float32:
            raise error_for(grpc.StatusCode.INVALID_ARGUMENT,
                            f"gradients: {grads.shape} {grads.dtype}, "
                            f"expected ({self.size},) float32")
        if self.encoding == v1.FP16:
            wire = encode_fp16(grads)
        elif self.encoding == v1.BF16:
            wire = encode_bf16(grads)
        else:
            wire = grads
        data = wire.tobytes()  # Little-endian on every supported machine.
        width = wire.itemsize
        requests = []
        for blocks in self.blocks:
            request = v1.PushRequest(job_id=self.job_id,
                                     worker_index=self.worker, clock=clock,
                                     map_version=self.map_version,
                                     gradient_encoding=self.encoding)
            for key, first, n in blocks:
                request.gradients.add(
                    key=key, data=data[first * width:(first + n) * width])
            if sparse is not None:
                request.sparse.extend(sparse[len(requests)])
            requests.append(request)
        duplicates: List[bool] = []
        self._for_all_servers(
            f"push of clock {clock}",
            range(len(self._stubs)) if servers is None else servers,
            lambda s: self._start_push(s, requests[s]), self.retry_window,
            lambda s, reply, region: duplicates.append(reply.duplicate))
        return all(duplicates)

    def _start_push(self, s: int, request: "v1.PushRequest") -> _Call:
        if self._shared[s]:
            data = request.SerializeToString()
            region = self._region(len(data), s, "push to")
            if region is not None:
                region.buffer[:len(data)] = data
                shared = v1.SharedPushRequest()
                shared.request.region = region.name
                shared.request.length = len(data)
                self.pushed_bytes += len(data)
                return _Call(self._stubs[s].PushShared.future(
                    shared, timeout=self.push_timeout,
                    metadata=self._security.metadata), region)
        self.pushed_bytes += request.ByteSize()
        return _Call(self._stubs[s].Push.future(
            request, timeout=self.push_timeout,
            metadata=self._security.metadata))

    # Seed.

    def seed(self, values: np.ndarray, from_worker: Sequence[bool]) -> bool:
        """Worker 0: sends the initial values (flat float32) of the tensors
        whose `from_worker` flag is set to the servers holding their blocks.
        Returns True if every server had been seeded before (this changed
        nothing). Each server applies only the first seed it gets."""
        requests: Dict[int, "v1.SeedRequest"] = {}
        for s, refs in enumerate(self._block_refs):
            blocks = [(b, first) for b, (_, first, _) in
                      zip(refs, self.blocks[s]) if from_worker[b.tensor]]
            if not blocks:
                continue
            request = v1.SeedRequest(job_id=self.job_id,
                                     worker_index=self.worker,
                                     map_version=self.map_version)
            for b, first in blocks:
                request.blocks.add(
                    key=b.key,
                    data=values[first:first + b.numel].astype("<f4").tobytes())
            requests[s] = request
        duplicates: List[bool] = []
        self._for_all_servers(
            "seed", sorted(requests),
            lambda s: _Call(self._stubs[s].Seed.future(
                requests[s], timeout=self.push_timeout,
                metadata=self._security.metadata)),
            self.retry_window,
            lambda s, reply, region: duplicates.append(reply.duplicate))
        return all(duplicates)
