"""A worker's side of the cluster, independent of PyTorch: membership
(register, heartbeat, assignments), the parameter servers (pull, push,
seed) and the coordinator's progress and model uploads.

The same protocol as ``ps-worker`` (common/membership.h,
worker/parameter_client.h, worker/trainer.h): every call has a deadline;
calls that may be retried (pulls are reads, pushes and seeds are applied
once per (worker, clock) and once per job by the servers, heartbeats and
reports are idempotent) are retried with exponential backoff and full
jitter.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from typing import Callable, Dict, List, Optional, Sequence, Tuple

import grpc
import numpy as np

from paramserver import v1
from paramserver._rpc import RETRYABLE, Backoff, Security, create_channel
from paramserver.errors import (JobStoppedError, ParamServerError, error_for,
                                from_rpc_error)
from paramserver.layout import (BlockRef, TensorLayout, effective_block_elems,
                                split_into_blocks)

log = logging.getLogger("paramserver")

__all__ = ["Membership", "ParameterClient", "Coordinator", "encode_fp16",
           "encode_bf16"]


# Gradients on the wire (common/half_codec.h): round to nearest even, finite
# values beyond the format's largest sent as that value, NaN and Inf kept.

def encode_fp16(values: np.ndarray) -> np.ndarray:
    """float32 to IEEE binary16 bits (uint16), as ``EncodeFp16``."""
    x = np.asarray(values, dtype=np.float32)
    big = np.isfinite(x) & (np.abs(x) > np.float32(65504.0))
    if big.any():
        x = np.where(big, np.copysign(np.float32(65504.0), x), x)
    with np.errstate(over="ignore", invalid="ignore"):
        return x.astype(np.float16).view(np.uint16)


def encode_bf16(values: np.ndarray) -> np.ndarray:
    """float32 to bfloat16 bits (uint16), as ``EncodeBf16``."""
    bits = np.ascontiguousarray(values, dtype=np.float32).view(np.uint32)
    sign = (bits >> 16) & np.uint32(0x8000)
    mag = bits & np.uint32(0x7FFFFFFF)
    b = (mag + np.uint32(0x7FFF) + ((mag >> 16) & np.uint32(1))) >> 16
    b = np.minimum(b, np.uint32(0x7F7F))
    b = np.where(mag == np.uint32(0x7F800000), np.uint32(0x7F80), b)
    b = np.where(mag > np.uint32(0x7F800000),
                 (mag >> 16) | np.uint32(0x0040), b)
    return (b | sign).astype(np.uint16)


def _retryable(code: grpc.StatusCode, not_found: bool = False) -> bool:
    return code in RETRYABLE or (not_found and code == grpc.StatusCode.NOT_FOUND)


class _Stop:
    """Whether the work in progress must end, and why; cancels the calls
    registered with it."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._reason: Optional[ParamServerError] = None
        self._live: set = set()

    def stop(self, reason: ParamServerError) -> None:
        with self._lock:
            if self._reason is None:
                self._reason = reason
            live = list(self._live)
        for call in live:
            call.cancel()

    @property
    def reason(self) -> Optional[ParamServerError]:
        return self._reason

    def track(self, call) -> bool:
        with self._lock:
            if self._reason is not None:
                return False
            self._live.add(call)
            return True

    def untrack(self, call) -> None:
        with self._lock:
            self._live.discard(call)


class Membership:
    """Registers with the coordinator and heartbeats on a daemon thread.

    `on_assignments(list)` is called from that thread after every heartbeat
    with the node's assignments (a job no longer listed has ended for it).
    `held()` names the places the node holds, sent when it registers again
    (after a coordinator restart, or a lost lease) so that it gets them
    back. A registration refused for good (a worker for a job its model does
    not fit, a wrong secret) ends the loop; `error` then holds why.
    """

    def __init__(self, coordinator: str, security: Security, model_digest: str,
                 job_id: Optional[str],
                 on_assignments: Callable[[List["v1.Assignment"]], None],
                 held: Callable[[], List["v1.HeldAssignment"]],
                 on_error: Callable[[ParamServerError], None]):
        self.coordinator = coordinator
        self._security = security
        self._digest = model_digest
        self._job_id = job_id
        self._on_assignments = on_assignments
        self._held = held
        self._on_error = on_error
        self._channel = create_channel(coordinator, security, member=True)
        self.stub = v1.ClusterServiceStub(self._channel)
        self._lock = threading.Lock()
        self._node_id = ""
        self._interval = 0.5
        self._stopping = threading.Event()
        self.error: Optional[ParamServerError] = None
        self._thread = threading.Thread(target=self._loop, daemon=True,
                                        name="paramserver-membership")

    @property
    def node_id(self) -> str:
        with self._lock:
            return self._node_id

    @property
    def metadata(self):
        return self._security.metadata

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stopping.set()
        if self._thread.is_alive() and threading.current_thread() is not self._thread:
            self._thread.join(timeout=5)
        self._channel.close()

    def _register(self) -> bool:
        request = v1.RegisterRequest(role=v1.WORKER,
                                     model_digest=self._digest,
                                     job_id=self._job_id or "")
        request.held.extend(self._held())
        try:
            reply = self.stub.Register(request, timeout=2.0,
                                       metadata=self._security.metadata)
        except grpc.RpcError as e:
            if e.code() in RETRYABLE:
                log.warning("register with coordinator %s failed: %s",
                            self.coordinator, e.details())
                return False
            self.error = from_rpc_error(
                e, f"coordinator {self.coordinator} refused the worker")
            log.error("%s", self.error)
            self._on_error(self.error)
            self._stopping.set()
            return False
        with self._lock:
            self._node_id = reply.node_id
            self._interval = max(reply.heartbeat_interval_ms, 10) / 1000.0
        log.info("registered with coordinator %s as %s", self.coordinator,
                 reply.node_id)
        return True

    def _loop(self) -> None:
        backoff = Backoff(0.1, 2.0)
        while not self._stopping.is_set():
            if not self.node_id:
                if self._register():
                    backoff.reset()
                else:
                    self._stopping.wait(backoff.next())
                continue
            try:
                reply = self.stub.Heartbeat(
                    v1.HeartbeatRequest(node_id=self.node_id), timeout=1.0,
                    metadata=self._security.metadata)
                self._on_assignments(list(reply.assignments))
            except grpc.RpcError as e:
                if e.code() == grpc.StatusCode.NOT_FOUND:
                    log.warning("coordinator does not know node %s; "
                                "registering again", self.node_id)
                    with self._lock:
                        self._node_id = ""
                    continue
                log.warning("heartbeat failed: %s", e.details())
            with self._lock:
                interval = self._interval
            self._stopping.wait(interval)


class Coordinator:
    """The worker's calls to the coordinator besides membership: progress
    reports and the final model's upload."""

    def __init__(self, membership: Membership, stop: "_Stop"):
        self._membership = membership
        self._stop = stop

    def report(self, report: "v1.ProgressReport", must_arrive: bool,
               window: float = 300.0) -> bool:
        """Sends a report (once, or until it arrives within `window` s when
        `must_arrive`). Returns the reply's ``stop``: the job is no longer
        running."""
        backoff = Backoff(0.1, 2.0)
        give_up = time.monotonic() + window
        while True:
            report.node_id = self._membership.node_id
            try:
                reply = self._membership.stub.ReportProgress(
                    report, timeout=2.0, metadata=self._membership.metadata)
                return reply.stop
            except grpc.RpcError as e:
                # PERMISSION_DENIED: the node may be registering again under
                # a new id (after a coordinator restart).
                retry = (e.code() in RETRYABLE or
                         e.code() == grpc.StatusCode.PERMISSION_DENIED)
                stopped = self._stop.reason is not None and not report.error
                if (not must_arrive or not retry or stopped or
                        time.monotonic() > give_up):
                    log.warning("progress report failed: %s", e.details())
                    return False
            time.sleep(backoff.next())

    def upload(self, request: "v1.UploadModelRequest",
               window: float = 60.0) -> None:
        """Worker 0's trained model, retried with backoff for `window` s.
        Raises JobStoppedError if the job is no longer running."""
        backoff = Backoff(0.1, 2.0)
        give_up = time.monotonic() + window
        while True:
            request.node_id = self._membership.node_id
            try:
                self._membership.stub.UploadModel(
                    request, timeout=max(10.0, request.ByteSize() / 20e6),
                    metadata=self._membership.metadata)
                return
            except grpc.RpcError as e:
                code = e.code()
                if code == grpc.StatusCode.FAILED_PRECONDITION:
                    raise JobStoppedError(
                        f"model upload: {e.details()}") from None
                retry = code in RETRYABLE or code == grpc.StatusCode.PERMISSION_DENIED
                if not retry or time.monotonic() > give_up:
                    raise from_rpc_error(
                        e, "model upload to the coordinator") from None
                log.warning("model upload failed, retrying: %s", e.details())
            time.sleep(backoff.next())


class ParameterClient:
    """Pulls and pushes one job's parameters, as a flat float32 vector of
    every tensor in the model's order, cut into the shard map's blocks and
    sent to every server in parallel.

    Threads: one call at a time (the worker's communication thread); cancel
    through the `stop` it was given, from any thread.
    """

    def __init__(self, assignment: "v1.Assignment",
                 tensors: Sequence[TensorLayout], security: Security,
                 stop: _Stop, pull_timeout: float = 30.0,
                 push_timeout: float = 30.0, retry_window: float = 120.0):
        spec = assignment.spec
        self.job_id = assignment.job_id
        self.worker = assignment.index
        self.map_version = assignment.shard_map.version
        self.tensors = list(tensors)
        self._security = security
        self._stop = stop
        self.pull_timeout = pull_timeout
        self.push_timeout = push_timeout
        self.retry_window = retry_window
        self.encoding = spec.mixed_precision.wire_gradients
        consistency = spec.consistency
        self.staleness = {v1.ConsistencySpec.SSP: consistency.staleness,
                          v1.ConsistencySpec.ASP: 1 << 40}.get(
                              consistency.model, 0)
        self.use_cache = (consistency.model == v1.ConsistencySpec.SSP and
                          consistency.worker_cache)
        self.offsets = np.cumsum([0] + [t.numel for t in self.tensors])
        self.size = int(self.offsets[-1])
        shard_map = assignment.shard_map
        self.addresses = list(shard_map.servers)
        placement = {}
        for p in shard_map.blocks:
            if not 0 <= p.server < len(self.addresses):
                raise error_for(grpc.StatusCode.INVALID_ARGUMENT,
                                f"shard_map: block {p.key} on unknown server "
                                f"{p.server}")
            placement[p.key] = p.server
        block_elems = effective_block_elems(spec, self.tensors,
                                            len(self.addresses))
        # Per server: (key, first flat index, values) of each block.
        self.blocks: List[List[Tuple[int, int, int]]] = [
            [] for _ in self.addresses]
        self._block_refs: List[List[BlockRef]] = [[] for _ in self.addresses]
        for b in split_into_blocks(self.tensors, block_elems):
            if b.key not in placement:
                raise error_for(grpc.StatusCode.INVALID_ARGUMENT,
                                f"shard_map: block {b.key} has no server")
            s = placement[b.key]
            self.blocks[s].append(
                (b.key, int(self.offsets[b.tensor]) + b.offset, b.numel))
            self._block_refs[s].append(b)
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

    # Calls to every server.

    def _for_all_servers(self, what: str, servers: Sequence[int],
                         start: Callable[[int], object], timeout: float,
                         retry_window: Optional[float],
                         on_reply: Callable[[int, object], None]) -> None:
        """Runs `start(s)` (a gRPC future) for every server in parallel,
        retrying the failed ones with backoff while their error may be
        retried (and NOT_FOUND: a server learns of a new job at its next
        heartbeat). The first server to fail for a reason a retry cannot fix
        cancels the other calls and raises its error, naming `what` and the
        server."""
        todo = list(servers)
        backoff = Backoff(0.02, 1.0)
        give_up = (None if retry_window is None
                   else time.monotonic() + retry_window)
        last: Optional[Tuple[int, grpc.RpcError]] = None
        while todo:
            if self._stop.reason is not None:
                raise self._stop.reason
            done: "queue.Queue[Tuple[int, object]]" = queue.Queue()
            calls = {}
            for s in todo:
                call = start(s)
                if not self._stop.track(call):
                    call.cancel()
                calls[s] = call
                call.add_done_callback(lambda c, s=s: done.put((s, c)))
            failed: List[int] = []
            refused: Optional[Tuple[int, BaseException]] = None
            for _ in range(len(calls)):
                s, call = done.get()
                self._stop.untrack(call)
                if call.cancelled():
                    failed.append(s)
                    continue
                error = call.exception()
                if error is None:
                    try:
                        on_reply(s, call.result())
                    except ParamServerError as e:
                        if refused is None:
                            refused = (s, e)
                            for other in calls.values():
                                other.cancel()
                    continue
                failed.append(s)
                code = error.code() if hasattr(error, "code") else None
                if refused is None and not _retryable(code, not_found=True):
                    refused = (s, error)
                    for other in calls.values():
                        other.cancel()
                elif code is not None:
                    last = (s, error)
            if self._stop.reason is not None:
                raise self._stop.reason
            if refused is not None:
                s, error = refused
                if isinstance(error, ParamServerError):
                    raise error
                raise from_rpc_error(
                    error, f"{what} from server {self.addresses[s]}") from None
            if not failed:
                return
            if give_up is not None and time.monotonic() > give_up:
                s, error = last if last else (failed[0], None)
                if error is None:
                    raise error_for(grpc.StatusCode.UNAVAILABLE,
                                    f"{what} failed after retrying")
                raise from_rpc_error(
                    error, f"{what} failed after retrying for "
                    f"{retry_window:.0f} s: server {self.addresses[s]}") from None
            todo = failed
            time.sleep(backoff.next())

    # Pull.

    def pull(self, clock: int, out: np.ndarray, final: bool = False
             ) -> Tuple[int, int]:
        """Fills `out` (flat float32, `size` values) with parameters holding
        every update of clocks below ``clock - staleness`` (``final``: of
        every worker's every clock below `clock`, whatever the consistency
        model). Returns (slowest worker's clock, this worker's clock) as the
        servers recorded them. Served from the SSP cache when the job asks
        for it and the bound allows."""
        if (not final and self.use_cache and self._cached_min_clock >= 0 and
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

        def on_reply(s: int, reply) -> None:
            expected = self.blocks[s]
            if len(reply.blocks) != len(expected):
                raise error_for(grpc.StatusCode.INTERNAL,
                                f"pull reply of server {self.addresses[s]} "
                                f"has {len(reply.blocks)} blocks, expected "
                                f"{len(expected)}")
            for block, (key, first, n) in zip(reply.blocks, expected):
                if block.key != key or len(block.data) != 4 * n:
                    raise error_for(grpc.StatusCode.INTERNAL,
                                    f"pull reply block {block.key} does not "
                                    "match")
                out[first:first + n] = np.frombuffer(block.data, dtype="<f4")
                self.pulled_bytes += len(block.data)
            min_clocks[s] = reply.min_clock
            if self.worker < len(reply.worker_clocks):
                own_clocks[s] = reply.worker_clocks[self.worker]

        self._for_all_servers(
            f"{'final pull' if final else 'pull'} of clock {clock}",
            range(len(self._stubs)),
            lambda s: self._stubs[s].Pull.future(
                request, timeout=self.pull_timeout,
                metadata=self._security.metadata),
            self.pull_timeout,
            # A final read waits for the slowest worker for as long as the
            # job runs.
            None if final else self.retry_window, on_reply)
        min_clock = min(min_clocks.values()) if min_clocks else 0
        own_clock = min(own_clocks.values()) if own_clocks else 0
        if self.use_cache and not final:
            self._cache = out.copy()
            self._cached_min_clock = min_clock
        return min_clock, own_clock

    def resume_clock(self, out: np.ndarray) -> int:
        """The clock this worker resumes at: the pushes every server
        recorded for its index (0 for a new job). `out` gets the values at
        clock 0's read (which waits for the seed of an EXTERNAL model)."""
        _, own = self.pull(0, out)
        self._cached_min_clock = -1  # Later reads are not served from it.
        return own

    # Push.

    def push(self, clock: int, grads: np.ndarray) -> bool:
        """Pushes the gradients of `clock` (flat float32) in the job's wire
        format. Returns True if every server had it already (a retry).
        Applied exactly once per (worker, clock) however often retried."""
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
            requests.append(request)
        duplicates: List[bool] = []

        def start(s: int):
            self.pushed_bytes += requests[s].ByteSize()
            return self._stubs[s].Push.future(
                requests[s], timeout=self.push_timeout,
                metadata=self._security.metadata)

        self._for_all_servers(f"push of clock {clock}",
                              range(len(self._stubs)), start,
                              self.push_timeout, self.retry_window,
                              lambda s, reply: duplicates.append(reply.duplicate))
        return all(duplicates)

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
            lambda s: self._stubs[s].Seed.future(
                requests[s], timeout=self.push_timeout,
                metadata=self._security.metadata),
            self.push_timeout, self.retry_window,
            lambda s, reply: duplicates.append(reply.duplicate))
        return all(duplicates)

