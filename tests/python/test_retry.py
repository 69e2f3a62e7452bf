"""The SDK's one retry helper (paramserver._retry) against its C++ model
(common/retry.h, common/grpc_util.h): which codes each policy retries, the
backoff's full jitter and ceilings, the window, progress, a stopping sleep;
and that a worker's calls to a real server use it (a server that is not
there yet is waited for within the window, a refusal is not retried)."""

import time

import grpc
import pytest

import paramserver as ps
from paramserver import _retry
from paramserver._retry import (PARAMETERS, REGISTER, REPORT, RETRYABLE,
                                UPLOAD, Backoff, Retrier, RetryPolicy)

C = grpc.StatusCode


class Sleeps:
    """A sleep that records its delays and never waits."""

    def __init__(self, stop_after=None):
        self.delays = []
        self.stop_after = stop_after

    def __call__(self, delay):
        self.delays.append(delay)
        return self.stop_after is None or len(self.delays) < self.stop_after


def failing(codes, result="ok"):
    """An attempt that raises the codes in turn, then returns `result`."""
    codes = list(codes)
    calls = []

    def attempt():
        calls.append(1)
        if codes:
            raise ps.error_for(codes.pop(0), "failed")
        return result
    attempt.calls = calls
    return attempt


def test_retryable_codes_are_the_cpp_ones():
    # IsRetryable in common/grpc_util.cc.
    assert RETRYABLE == {C.UNAVAILABLE, C.DEADLINE_EXCEEDED, C.ABORTED,
                         C.RESOURCE_EXHAUSTED}
    assert PARAMETERS.codes == RETRYABLE | {C.NOT_FOUND}
    assert REPORT.codes == UPLOAD.codes == RETRYABLE | {C.PERMISSION_DENIED}
    assert REGISTER.codes == RETRYABLE and REGISTER.window is None
    assert _retry.NO_RETRY.codes == _retry.HEARTBEAT.codes == frozenset()
    for policy in (PARAMETERS, REPORT, UPLOAD, REGISTER, _retry.JOB_WATCH):
        assert C.INVALID_ARGUMENT not in policy.codes
        assert C.FAILED_PRECONDITION not in policy.codes
        assert C.UNIMPLEMENTED not in policy.codes


def test_backoff_is_full_jitter_under_a_doubling_capped_ceiling():
    backoff = Backoff(0.1, 1.0)
    ceilings = [0.1, 0.2, 0.4, 0.8, 1.0, 1.0, 1.0]
    for ceiling in ceilings:
        assert 0 <= backoff.next() <= ceiling
    backoff.reset()
    delays = [Backoff(0.1, 1.0).next() for _ in range(2000)]
    assert max(delays) <= 0.1
    # Uniform in [0, ceiling]: some near zero, some near the ceiling.
    assert min(delays) < 0.01 and max(delays) > 0.09


def test_retries_only_the_policys_codes():
    policy = RetryPolicy("t", frozenset({C.UNAVAILABLE}), 0.01, 0.02)
    sleeps = Sleeps()
    attempt = failing([C.UNAVAILABLE, C.UNAVAILABLE])
    assert Retrier(policy, sleeps).run(attempt) == "ok"
    assert len(attempt.calls) == 3 and len(sleeps.delays) == 2
    attempt = failing([C.UNAVAILABLE, C.INVALID_ARGUMENT])
    with pytest.raises(ps.InvalidArgumentError):
        Retrier(policy, Sleeps()).run(attempt)
    assert len(attempt.calls) == 2
    # Not a status at all: propagates at once.
    def broken():
        raise KeyError("x")
    with pytest.raises(KeyError):
        Retrier(policy, Sleeps()).run(broken)


def test_no_retry_policy_makes_one_attempt():
    attempt = failing([C.UNAVAILABLE])
    with pytest.raises(ps.UnavailableError):
        Retrier(_retry.NO_RETRY, Sleeps()).run(attempt)
    assert len(attempt.calls) == 1


def test_window_ends_the_retries_and_progress_restarts_it():
    policy = RetryPolicy("t", RETRYABLE, 0.001, 0.001, window=0.05)
    attempt = failing([C.UNAVAILABLE] * 10**6)
    start = time.monotonic()
    with pytest.raises(ps.UnavailableError):
        Retrier(policy).run(attempt)
    assert time.monotonic() - start >= 0.05
    # Progress after each failure: the window never passes.
    retrier = Retrier(policy, Sleeps())
    codes = [C.UNAVAILABLE] * 20

    def progressing():
        retrier.progress()
        time.sleep(0.005)
        if codes:
            raise ps.error_for(codes.pop(), "failed")
        return "done"
    assert retrier.run(progressing) == "done"


def test_should_retry_and_a_stopping_sleep_end_the_retries():
    asked = []

    def no(error):
        asked.append(error.code)
        return False
    attempt = failing([C.ABORTED, C.ABORTED])
    with pytest.raises(ps.AbortedError):
        Retrier(REPORT, Sleeps()).run(attempt, no)
    assert asked == [C.ABORTED] and len(attempt.calls) == 1
    # Not asked about a code the policy does not retry.
    attempt = failing([C.INTERNAL])
    with pytest.raises(ps.InternalError):
        Retrier(REPORT, Sleeps()).run(attempt, no)
    assert asked == [C.ABORTED]
    sleeps = Sleeps(stop_after=2)
    attempt = failing([C.UNAVAILABLE] * 5)
    with pytest.raises(ps.UnavailableError):
        Retrier(REPORT, sleeps).run(attempt)
    assert len(attempt.calls) == 2


def test_the_delays_grow_as_the_cpp_backoff():
    sleeps = Sleeps()
    policy = RetryPolicy("t", RETRYABLE, 0.1, 0.4)
    for _ in range(200):
        Retrier(policy, sleeps).run(failing([C.UNAVAILABLE] * 4))
    per_attempt = [sleeps.delays[i::4] for i in range(4)]
    for delays, ceiling in zip(per_attempt, [0.1, 0.2, 0.4, 0.4]):
        assert max(delays) <= ceiling
        assert max(delays) > ceiling * 0.8


def test_attempt_loop_form_for_generators():
    retrier = Retrier(RetryPolicy("t", RETRYABLE, 0.001, 0.001), Sleeps())
    codes = [C.UNAVAILABLE, C.UNAVAILABLE]
    seen = []

    def stream():
        for attempt in retrier.attempts():
            with attempt:
                yield len(seen)
                if codes:
                    raise ps.error_for(codes.pop(), "broken")
                return
    for value in stream():
        seen.append(value)
    assert seen == [0, 1, 2]


def test_parameter_calls_wait_for_a_server_within_the_window(tmp_path):
    """A real ParameterClient: a server address that refuses connections
    fails every attempt UNAVAILABLE until the retry window passes; the
    error names the call and the server."""
    from paramserver._cluster import _Stop
    from paramserver._params import ParameterClient
    from paramserver._rpc import Security
    import numpy as np
    import socket
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    assignment = ps.v1.Assignment(job_id="job-000001", index=0)
    assignment.spec.block_elems = 4
    assignment.spec.model.kind = ps.v1.ModelSpec.EXTERNAL
    t = assignment.spec.model.tensors.add(name="w")
    t.shape.append(6)
    assignment.shard_map.servers.append(f"127.0.0.1:{port}")
    assignment.shard_map.blocks.add(key=0, server=0)
    assignment.shard_map.blocks.add(key=1, server=0)
    from paramserver.layout import model_tensors
    client = ParameterClient(assignment, model_tensors(assignment.spec.model),
                             Security(), _Stop(), pull_timeout=0.5,
                             retry_window=1.0)
    start = time.monotonic()
    with pytest.raises(ps.UnavailableError) as e:
        client.pull(1, np.zeros(6, np.float32))
    assert time.monotonic() - start >= 1.0
    assert "pull of clock 1 failed after retrying for 1 s" in e.value.message
    assert f"127.0.0.1:{port}" in e.value.message
    client.close()


def test_watch_follows_a_job_across_a_coordinator_restart(cluster):
    """JobClient.watch through the Retrier's loop form: the stream breaks
    when the coordinator is killed, is opened again (backoff, window)
    once it is back on the same port, and ends with the job's terminal
    state; a coordinator that stays away ends the watch after
    reconnect_window with UNAVAILABLE naming it."""
    coordinator = cluster.start_coordinator()
    port = int(coordinator.rsplit(":", 1)[1])
    spec = {"name": "watched",
            "model": {"kind": "EXTERNAL",
                      "tensors": [{"name": "w", "shape": [4, 2]}]},
            "epochs": 1, "batch_size": 2,
            "optimizer": {"sgd": {"learning_rate": 0.1}},
            "num_workers": 1, "num_servers": 1, "durability": "MEMORY"}
    with ps.JobClient(coordinator, timeout=5) as client:
        job = client.submit(spec)
        watch = client.watch(job, reconnect_window=30)
        assert next(watch).state == ps.v1.PENDING
        cluster.process("coordinator").kill()
        cluster.start_coordinator(port)
        # The job API's unary calls are not retried (as psctl's): wait
        # until the restarted coordinator answers.
        with ps.JobClient(coordinator, timeout=5) as other:
            for _ in range(200):
                try:
                    other.cancel(job)
                    break
                except ps.UnavailableError:
                    time.sleep(0.05)
        states = [s.state for s in watch]
        assert states[-1] == ps.v1.CANCELLED
        cluster.process("coordinator").kill()
        with pytest.raises(ps.UnavailableError) as e:
            list(client.watch(job, reconnect_window=1))
        assert coordinator in e.value.message
