"""The job API from Python: submit, watch, get, list, cancel, delete and
export jobs, as ``psctl`` does.

    import paramserver as ps

    with ps.JobClient("127.0.0.1:7000") as client:
        job = client.submit("job.json")            # or a dict, or a ps.v1.JobSpec
        for status in client.watch(job):
            print(status.state, status.progress.epoch)
        params = client.export(job)                # {name: numpy.ndarray}
"""

from __future__ import annotations

import time
import uuid
from typing import Dict, Iterator, List, Optional, Union

import grpc
import numpy as np

from paramserver import v1
from paramserver._retry import JOB_WATCH, NO_RETRY, Retrier
from paramserver._rpc import Security, client_security, create_channel
from paramserver.errors import ParamServerError, error_for, from_rpc_error
from paramserver.spec import SpecLike, to_job_spec

__all__ = ["JobClient", "JobRef", "TERMINAL_STATES"]

#: A job, by id or by any status message that carries its id.
JobRef = Union[str, "v1.JobStatus"]

#: States after which a job never changes again.
TERMINAL_STATES = frozenset({v1.SUCCEEDED, v1.FAILED, v1.CANCELLED})


def _job_id(job: JobRef) -> str:
    if isinstance(job, str):
        return job
    if isinstance(job, v1.JobStatus):
        return job.job_id
    raise TypeError(f"job must be a job id or a ps.v1.JobStatus, not "
                    f"{type(job).__name__}")


class JobClient:
    """A client of the coordinator's JobService, with a deadline on every
    call.

    Args:
        coordinator: The coordinator's address, ``host:port``.
        timeout: Deadline of each call, in seconds (psctl's ``--timeout_ms``).
        tls_ca: PEM file of CA certificates that verify the coordinator; turns
            TLS on (psctl's ``--tls_ca``).
        tls_cert, tls_key: A client certificate and its key, for a
            coordinator that requires one (``--tls_cert``, ``--tls_key``).
        tls_server_name: The name expected in the coordinator's certificate
            instead of the address's host (``--tls_server_name``).
        token: The job API's bearer token (``--token``), or
        token_file: a file whose first token is used (``--token_file``).

    Every method raises the :class:`~paramserver.ParamServerError` subclass
    for the coordinator's status code (``NotFoundError``,
    ``InvalidArgumentError`` naming the field, ``UnauthenticatedError`` ...);
    an unreachable coordinator gives ``UnavailableError`` or
    ``DeadlineExceededError`` naming its address. Thread-safe.
    """

    def __init__(self, coordinator: str = "127.0.0.1:7000", *,
                 timeout: float = 10.0, tls_ca: Optional[str] = None,
                 tls_cert: Optional[str] = None, tls_key: Optional[str] = None,
                 tls_server_name: Optional[str] = None,
                 token: Optional[str] = None,
                 token_file: Optional[str] = None):
        self.coordinator = coordinator
        self.timeout = timeout
        self._security: Security = client_security(
            tls_ca=tls_ca, tls_cert=tls_cert, tls_key=tls_key,
            tls_server_name=tls_server_name, token=token,
            token_file=token_file)
        self._channel = create_channel(coordinator, self._security)
        self._stub = v1.JobServiceStub(self._channel)

    # Lifetime.

    def close(self) -> None:
        """Closes the channel; the client cannot be used after."""
        self._channel.close()

    def __enter__(self) -> "JobClient":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # Calls.

    def _error(self, error: grpc.RpcError) -> ParamServerError:
        context = ""
        if error.code() in (grpc.StatusCode.UNAVAILABLE,
                            grpc.StatusCode.DEADLINE_EXCEEDED):
            context = f"coordinator at {self.coordinator} is not reachable"
        return from_rpc_error(error, context)

    def _call(self, method, request):
        # One attempt, as psctl (docs/python.md, "Retries").
        try:
            return Retrier(NO_RETRY).run(lambda: method(
                request, timeout=self.timeout,
                metadata=self._security.metadata))
        except grpc.RpcError as e:
            raise self._error(e) from None

    def submit(self, spec: SpecLike, request_id: Optional[str] = None) -> str:
        """Validates and queues a job; returns its id ("job-000001").

        `spec` is a dict of the JSON mapping of ``ps.v1.JobSpec``, the path
        of a JSON file holding one (as ``psctl submit``), or a
        ``ps.v1.JobSpec``. Raises InvalidArgumentError naming the field
        (locally for JSON that does not parse as a JobSpec, or from the
        coordinator's validation), ResourceExhaustedError at the
        coordinator's limits.

        `request_id` names this submit (``SubmitJobRequest.request_id``;
        default: a fresh random one). Calling ``submit`` again with the same
        `request_id` and spec after an UnavailableError or
        DeadlineExceededError returns the job the first call made, if it
        made one, and never makes a second."""
        request = v1.SubmitJobRequest(
            spec=to_job_spec(spec),
            request_id=request_id if request_id else uuid.uuid4().hex)
        return self._call(self._stub.SubmitJob, request).job_id

    def get(self, job: JobRef) -> "v1.JobStatus":
        """The job's status. NotFoundError for an unknown job."""
        return self._call(self._stub.GetJob, v1.GetJobRequest(job_id=_job_id(job)))

    def list(self, page_size: int = 0) -> List["v1.JobStatus"]:
        """Every job, in id order (following ListJobs' pages of `page_size`;
        0: the coordinator's default of 100)."""
        jobs: List[v1.JobStatus] = []
        token = ""
        while True:
            page = self._call(self._stub.ListJobs, v1.ListJobsRequest(
                page_size=page_size, page_token=token))
            jobs.extend(page.jobs)
            if not page.next_page_token:
                return jobs
            if page.next_page_token == token:
                raise error_for(
                    grpc.StatusCode.INTERNAL,
                    "ListJobs returned the same page token twice")
            token = page.next_page_token

    def cancel(self, job: JobRef) -> "v1.JobStatus":
        """Cancels a pending or running job; returns its status.
        FailedPreconditionError if it already ended."""
        return self._call(self._stub.CancelJob,
                          v1.CancelJobRequest(job_id=_job_id(job))).job

    def scale(self, job: JobRef, servers: int) -> "v1.JobStatus":
        """Starts moving a running job to `servers` parameter servers
        (``psctl scale``; docs/operations.md, "Scaling a job's servers");
        returns its status with the move in progress (``map_change``), or
        as it was when it has that many already. The move ends at a clock
        boundary (``map_moves`` records it). FailedPreconditionError if the
        job is not RUNNING, is elastic, or moves already;
        ResourceExhaustedError if too few servers are free."""
        return self._call(self._stub.ScaleJob, v1.ScaleJobRequest(
            job_id=_job_id(job), num_servers=servers)).job

    def delete(self, job: JobRef) -> None:
        """Deletes an ended job's record and trained model (the servers then
        delete its shards). FailedPreconditionError for a job that has not
        ended."""
        self._call(self._stub.DeleteJob, v1.DeleteJobRequest(job_id=_job_id(job)))

    def export_model(self, job: JobRef) -> "v1.TrainedModel":
        """The trained model of a SUCCEEDED job as the coordinator stores it
        (tensors as raw float32 bytes, the clock and test accuracy).
        NotFoundError, saying why, for an unknown job or one without a
        model."""
        return self._call(self._stub.ExportModel,
                          v1.ExportModelRequest(job_id=_job_id(job)))

    def export(self, job: JobRef) -> Dict[str, np.ndarray]:
        """A SUCCEEDED job's trained parameters: ``{name: array}`` of float32
        numpy arrays of the tensors' shapes, in the model's order. For an
        EXTERNAL model the names are the module's parameter names, so
        ``module.load_state_dict({k: torch.from_numpy(v) ...},
        strict=False)`` loads them (see :func:`paramserver.torch.load`)."""
        model = self.export_model(job)
        out: Dict[str, np.ndarray] = {}
        for t in model.tensors:
            values = np.frombuffer(t.data, dtype="<f4").astype(np.float32)
            out[t.name] = values.reshape(tuple(t.shape))
        return out

    def watch(self, job: JobRef, reconnect_window: float = 60.0,
              timeout: Optional[float] = None) -> Iterator["v1.JobStatus"]:
        """Yields the job's status now and after every change, until (and
        including) a terminal state (SUCCEEDED, FAILED, CANCELLED).

        A broken stream (a coordinator restart) is reopened with backoff for
        up to `reconnect_window` seconds since the last status received.
        NotFoundError for an unknown job; DeadlineExceededError once
        `timeout` seconds have passed (None: no limit)."""
        job_id = _job_id(job)
        deadline = None if timeout is None else time.monotonic() + timeout
        retrier = Retrier(JOB_WATCH.with_window(reconnect_window))

        def in_time(_: BaseException) -> bool:
            return deadline is None or time.monotonic() < deadline

        try:
            for attempt in retrier.attempts(in_time):
                with attempt:
                    # A watch is long-lived: its deadline bounds one stream.
                    remaining = 24 * 3600.0
                    if deadline is not None:
                        remaining = min(remaining,
                                        max(deadline - time.monotonic(), 0))
                    stream = self._stub.WatchJob(
                        v1.WatchJobRequest(job_id=job_id), timeout=remaining,
                        metadata=self._security.metadata)
                    try:
                        for status in stream:
                            retrier.progress()
                            yield status
                            if status.state in TERMINAL_STATES:
                                return
                    finally:
                        stream.cancel()
                    raise error_for(
                        grpc.StatusCode.UNAVAILABLE,
                        f"watch of {job_id}: the stream ended early")
        except (grpc.RpcError, ParamServerError) as e:
            if deadline is not None and time.monotonic() >= deadline:
                raise error_for(
                    grpc.StatusCode.DEADLINE_EXCEEDED,
                    f"watch of {job_id}: the job did not end within "
                    f"{timeout} s") from None
            if isinstance(e, ParamServerError):
                raise
            raise self._error(e) from None

    def wait(self, job: JobRef,
             timeout: Optional[float] = None) -> "v1.JobStatus":
        """Waits until the job ends; returns its final status (whatever the
        state: check ``status.state``). DeadlineExceededError after
        `timeout` seconds (None: no limit)."""
        last = None
        for status in self.watch(job, timeout=timeout):
            last = status
        assert last is not None
        return last
