"""A worker's side of the cluster, independent of PyTorch: membership
(register, heartbeat, assignments), the coordinator's progress and model
uploads, and the 16-bit wire encodings of gradients; the parameter servers'
calls are in paramserver._params.

The same protocol as ``ps-worker`` (common/membership.h, worker/trainer.h):
every call has a deadline, and runs through paramserver._retry's Retrier
with the policy of its kind (docs/python.md, "Retries").
"""

from __future__ import annotations

import logging
import threading
from typing import Callable, List, Optional

import grpc
import numpy as np

from paramserver import v1
from paramserver._retry import HEARTBEAT, REGISTER, REPORT, UPLOAD, Retrier
from paramserver._rpc import Security, create_channel
from paramserver.errors import JobStoppedError, ParamServerError, from_rpc_error

log = logging.getLogger("paramserver")

__all__ = ["Membership", "Coordinator", "encode_fp16", "encode_bf16",
           "decode_values"]


# Gradients on the wire (common/half_codec.h): round to nearest even, finite
# values beyond the format's largest sent as that value, NaN and Inf kept.

def encode_fp16(values: np.ndarray) -> np.ndarray:
    """float32 to IEEE binary16 bits (uint16), as ``EncodeFp16``: a NaN is
    quieted and keeps the top 10 bits of its payload."""
    x = np.ascontiguousarray(values, dtype=np.float32)
    big = np.isfinite(x) & (np.abs(x) > np.float32(65504.0))
    if big.any():
        x = np.where(big, np.copysign(np.float32(65504.0), x), x)
    with np.errstate(over="ignore", invalid="ignore"):
        h = x.astype(np.float16).view(np.uint16)
    bits = x.view(np.uint32)
    mag = bits & np.uint32(0x7FFFFFFF)
    nan = mag > np.uint32(0x7F800000)
    if nan.any():
        quiet = (np.uint32(0x7E00) | ((mag >> 13) & np.uint32(0x3FF)) |
                 ((bits >> 16) & np.uint32(0x8000)))
        h = np.where(nan, quiet.astype(np.uint16), h)
    return h


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


def decode_values(data: bytes, encoding: int) -> np.ndarray:
    """Pulled values (``PullResponse.value_encoding``: 0 FP32, 1 FP16,
    2 BF16; little-endian) as float32, exactly (``CopyPulledValues``).
    ValueError for another encoding."""
    if encoding == 0:
        return np.frombuffer(data, dtype="<f4")
    if encoding == 1:
        return np.frombuffer(data, dtype="<f2").astype(np.float32)
    if encoding == 2:
        bits = np.frombuffer(data, dtype="<u2").astype(np.uint32) << 16
        return bits.view(np.float32)
    raise ValueError(f"value_encoding {encoding} is not FP32, FP16 or BF16")


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

    def _register_once(self) -> None:
        request = v1.RegisterRequest(role=v1.WORKER,
                                     model_digest=self._digest,
                                     job_id=self._job_id or "")
        request.held.extend(self._held())
        reply = self.stub.Register(request, timeout=2.0,
                                   metadata=self._security.metadata)
        with self._lock:
            self._node_id = reply.node_id
            self._interval = max(reply.heartbeat_interval_ms, 10) / 1000.0
        log.info("registered with coordinator %s as %s", self.coordinator,
                 reply.node_id)

    def _register(self) -> bool:
        """Registers until it succeeds (True), the worker stops, or the
        coordinator refuses the worker for good (`error`, `on_error`)."""

        def log_retry(e: BaseException) -> bool:
            log.warning("register with coordinator %s failed: %s",
                        self.coordinator, e.details())
            return True

        retrier = Retrier(REGISTER,
                          sleep=lambda d: not self._stopping.wait(d))
        try:
            retrier.run(self._register_once, log_retry)
            return True
        except grpc.RpcError as e:
            if e.code() in REGISTER.codes:  # Stopping.
                return False
            self.error = from_rpc_error(
                e, f"coordinator {self.coordinator} refused the worker")
            log.error("%s", self.error)
            self._on_error(self.error)
            self._stopping.set()
            return False

    def _loop(self) -> None:
        while not self._stopping.is_set():
            if not self.node_id:
                self._register()
                continue
            try:
                # Not retried: the next heartbeat comes after the interval.
                reply = Retrier(HEARTBEAT).run(lambda: self.stub.Heartbeat(
                    v1.HeartbeatRequest(node_id=self.node_id), timeout=1.0,
                    metadata=self._security.metadata))
                self._on_assignments(list(reply.assignments))
                # Shorter while the job's servers move, so that the worker
                # learns the new map at once.
                shortened = reply.heartbeat_interval_ms / 1000.0
            except grpc.RpcError as e:
                shortened = 0.0
                if e.code() == grpc.StatusCode.NOT_FOUND:
                    log.warning("coordinator does not know node %s; "
                                "registering again", self.node_id)
                    with self._lock:
                        self._node_id = ""
                    continue
                log.warning("heartbeat failed: %s", e.details())
            with self._lock:
                interval = self._interval
            if shortened > 0:
                interval = min(interval, max(shortened, 0.01))
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

        def attempt() -> bool:
            report.node_id = self._membership.node_id
            return self._membership.stub.ReportProgress(
                report, timeout=2.0, metadata=self._membership.metadata).stop

        def should_retry(_: BaseException) -> bool:
            # A report of the worker's error is sent even once stopped.
            return must_arrive and (self._stop.reason is None or
                                    bool(report.error))

        try:
            return Retrier(REPORT.with_window(window)).run(attempt,
                                                           should_retry)
        except grpc.RpcError as e:
            log.warning("progress report failed: %s", e.details())
            return False

    def upload(self, request: "v1.UploadModelRequest",
               window: float = 60.0) -> None:
        """Worker 0's trained model, retried with backoff for `window` s.
        Raises JobStoppedError if the job is no longer running."""

        def attempt() -> None:
            request.node_id = self._membership.node_id
            self._membership.stub.UploadModel(
                request, timeout=max(10.0, request.ByteSize() / 20e6),
                metadata=self._membership.metadata)

        def log_retry(e: BaseException) -> bool:
            log.warning("model upload failed, retrying: %s", e.details())
            return True

        try:
            Retrier(UPLOAD.with_window(window)).run(attempt, log_retry)
        except grpc.RpcError as e:
            if e.code() == grpc.StatusCode.FAILED_PRECONDITION:
                raise JobStoppedError(
                    f"model upload: {e.details()}") from None
            raise from_rpc_error(
                e, "model upload to the coordinator") from None
