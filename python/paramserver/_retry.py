"""The one retry loop of the SDK, and which failures each call retries.

Mirrors the C++ (``Backoff`` and ``IsRetryable`` in common/grpc_util.h,
``Retrier`` in common/retry.h): exponential backoff with full jitter between
attempts, a window after which no new attempt starts (each attempt keeps
its own gRPC deadline), and a per-call set of status codes a retry may fix.
Every call the SDK makes runs through :class:`Retrier` with one of the
policies below; docs/python.md ("Retries") lists them.
"""

from __future__ import annotations

import dataclasses
import random
import time
from typing import Callable, FrozenSet, Iterator, Optional, TypeVar

import grpc

from paramserver.errors import ParamServerError

__all__ = ["RETRYABLE", "Backoff", "RetryPolicy", "Retrier", "status_of",
           "NO_RETRY", "JOB_WATCH", "REGISTER", "HEARTBEAT", "REPORT",
           "UPLOAD", "PARAMETERS"]

T = TypeVar("T")

_Code = grpc.StatusCode

#: Codes a retry may fix on an idempotent or deduplicated call
#: (``IsRetryable``).
RETRYABLE: FrozenSet[grpc.StatusCode] = frozenset({
    _Code.UNAVAILABLE, _Code.DEADLINE_EXCEEDED, _Code.ABORTED,
    _Code.RESOURCE_EXHAUSTED,
})


class Backoff:
    """Exponential backoff with full jitter (``Backoff`` in
    common/grpc_util.h): each delay is uniform in [0, ceiling], and the
    ceiling doubles from `initial` up to `maximum` seconds. Not
    thread-safe."""

    def __init__(self, initial: float = 0.05, maximum: float = 2.0,
                 multiplier: float = 2.0):
        self._initial = initial
        self._maximum = maximum
        self._multiplier = multiplier
        self._ceiling = initial

    def next(self) -> float:
        """The next delay, in seconds."""
        delay = random.uniform(0, self._ceiling)
        self._ceiling = min(self._maximum, self._ceiling * self._multiplier)
        return delay

    def reset(self) -> None:
        """Starts again from `initial`."""
        self._ceiling = self._initial


@dataclasses.dataclass(frozen=True)
class RetryPolicy:
    """Which failures of a call another attempt may fix, and how attempts
    are spaced (``RetryOptions``)."""
    #: What the call is, for docs and logs.
    name: str
    #: The status codes that are retried; any other ends the retries.
    codes: FrozenSet[grpc.StatusCode] = frozenset()
    #: Ceiling of the first delay, in seconds (``initial_backoff``).
    initial_backoff: float = 0.1
    #: Largest ceiling of a delay, in seconds (``max_backoff``).
    max_backoff: float = 2.0
    #: No new attempt starts once this many seconds have passed since the
    #: first (or since the last :meth:`Retrier.progress`); None: no limit.
    window: Optional[float] = None

    def with_window(self, window: Optional[float]) -> "RetryPolicy":
        """This policy with another window."""
        return dataclasses.replace(self, window=window)


# The policies of the SDK's calls, as the C++ makes the same calls.

#: The job API's unary calls (SubmitJob, GetJob, ListJobs, CancelJob,
#: DeleteJob, ExportModel): one attempt, as psctl's JobClient; SubmitJob is
#: not idempotent.
NO_RETRY = RetryPolicy("job API call")
#: WatchJob's stream: opened again on a retryable failure, or when it ends
#: before the job; data arriving starts the window again
#: (``FollowStatusStream``).
JOB_WATCH = RetryPolicy("watch", RETRYABLE, 0.2, 3.0, 60.0)
#: Register: until it succeeds or the worker stops; a refusal (a model that
#: fits no job, a wrong secret) ends it.
REGISTER = RetryPolicy("register", RETRYABLE, 0.1, 2.0, None)
#: Heartbeat: never retried; the next one comes after the interval, and
#: NOT_FOUND registers again.
HEARTBEAT = RetryPolicy("heartbeat")
#: ReportProgress that must arrive (end of epoch, the worker's error), for
#: 5 minutes; PERMISSION_DENIED too: the node may be registering again under
#: a new id after a coordinator restart (``CoordinatorMayRetry``).
REPORT = RetryPolicy("progress report",
                     RETRYABLE | {_Code.PERMISSION_DENIED}, 0.1, 2.0, 300.0)
#: UploadModel (worker 0's trained model), for 60 s; storing it twice is
#: harmless. FAILED_PRECONDITION (the job ended) is not retried.
UPLOAD = RetryPolicy("model upload", RETRYABLE | {_Code.PERMISSION_DENIED},
                     0.1, 2.0, 60.0)
#: Pull, Push, Seed (and their shared-memory forms) to each server, for the
#: client's retry_window (120 s; none for the final read and the first,
#: which waits for the seed): pulls are reads, pushes and seeds are applied
#: once per (worker, clock) and once per job; NOT_FOUND too: a server learns
#: of a new job at its next heartbeat (``ServerFanout::ShouldRetry``).
PARAMETERS = RetryPolicy("parameter call", RETRYABLE | {_Code.NOT_FOUND},
                         0.02, 1.0, 120.0)


def status_of(error: BaseException) -> grpc.StatusCode:
    """The status code of a grpc.RpcError or ParamServerError (UNKNOWN for
    anything else)."""
    if isinstance(error, ParamServerError):
        return error.code
    if isinstance(error, grpc.RpcError) and hasattr(error, "code"):
        return error.code()
    return grpc.StatusCode.UNKNOWN


def _sleep(delay: float) -> bool:
    time.sleep(delay)
    return True


class Retrier:
    """Runs an attempt until it succeeds or retrying ends (``Retrier``).
    Not thread-safe: one :meth:`run` (or :meth:`attempts` loop) at a time,
    and :meth:`progress` only from inside its attempt.

        reply = Retrier(REPORT).run(
            lambda: stub.ReportProgress(report, timeout=2))

    An attempt that must yield (a generator following a stream) uses the
    loop form instead, which runs the same rules:

        for attempt in retrier.attempts():
            with attempt:
                ...  # returns, or raises to be retried
    """

    def __init__(self, policy: RetryPolicy,
                 sleep: Callable[[float], bool] = _sleep):
        """`sleep(delay)` waits between attempts; it returns False to end
        the retries (the caller is stopping)."""
        self.policy = policy
        self._sleep = sleep
        self._backoff = Backoff(policy.initial_backoff, policy.max_backoff)
        self._window_start = 0.0

    def run(self, attempt: Callable[[], T],
            should_retry: Optional[Callable[[BaseException], bool]] = None
            ) -> T:
        """Calls `attempt` until it returns; after it raises, re-raises that
        exception if the window has passed, or else if its status code is
        not one of the policy's, or else if `should_retry(error)` is False
        (asked only when another attempt would be in time and allowed, so
        it may log the retry), or else if the sleep is cut short. Only
        grpc.RpcError and ParamServerError are retried; anything else
        propagates at once."""
        for each in self.attempts(should_retry):
            with each:
                return attempt()
        raise AssertionError("unreachable")  # pragma: no cover

    def attempts(self, should_retry: Optional[
            Callable[[BaseException], bool]] = None) -> Iterator["_Attempt"]:
        """The attempts of one :meth:`run`, each a context manager: leaving
        it normally ends the loop; an exception leaving it is retried (after
        the backoff's delay) or re-raised, by :meth:`run`'s rules."""
        self._backoff.reset()
        self._window_start = time.monotonic()
        while True:
            each = _Attempt(self, should_retry)
            yield each
            if each.error is None:
                return
            if not self._sleep(self._backoff.next()):
                raise each.error

    def progress(self) -> None:
        """Called by an attempt that made progress (a stream delivered
        data): the backoff and the window start again."""
        self._backoff.reset()
        self._window_start = time.monotonic()

    def _retries(self, error: BaseException,
                 should_retry: Optional[Callable[[BaseException], bool]]
                 ) -> bool:
        if not isinstance(error, (grpc.RpcError, ParamServerError)):
            return False
        window = self.policy.window
        if (window is not None and
                time.monotonic() - self._window_start > window):
            return False
        if status_of(error) not in self.policy.codes:
            return False
        return should_retry is None or should_retry(error)


class _Attempt:
    """One attempt of a Retrier's loop: a context manager that swallows an
    exception the retrier will retry, and lets any other through."""

    def __init__(self, retrier: Retrier,
                 should_retry: Optional[Callable[[BaseException], bool]]):
        self._retrier = retrier
        self._should_retry = should_retry
        self.error: Optional[BaseException] = None

    def __enter__(self) -> "_Attempt":
        return self

    def __exit__(self, kind, error, traceback) -> bool:
        if error is None or not self._retrier._retries(error,
                                                       self._should_retry):
            return False
        self.error = error
        return True
