"""The SDK's compiled transport (docs/python.md, "The compiled transport"):
paramserver._native, the C++ worker's ParameterClient bound with pybind11,
drives the PyTorch worker's step pipeline when it is built. It trains what
the pure-Python pipeline trains, bit for bit (through shared memory or the
socket, FP32 or 16-bit wire gradients), and without it the SDK falls back
to the pure-Python pipeline."""

import numpy as np
import pytest

torch = pytest.importorskip("torch")
import torch.nn.functional as F  # noqa: E402

import paramserver as ps  # noqa: E402
from paramserver import _native_step  # noqa: E402
from paramserver._native_step import NativePipeline  # noqa: E402
from paramserver._pipeline import StepPipeline  # noqa: E402
from workers import common  # noqa: E402

needs_native = pytest.mark.skipif(
    not _native_step.available(),
    reason="paramserver._native is not built (pybind11-dev, python3-dev)")


def train(coordinator, seen, **options):
    """One worker trains the job; `seen` gets its pipeline's type and
    counters, and what `seen["hook"](job)` returns after the first step."""
    torch.manual_seed(0)
    module = common.Small()
    data = common.synthetic(512)
    with ps.torch.Worker(coordinator, module, **options) as worker:
        for _, batches in worker.epochs(data):
            for xb, yb in batches:
                F.cross_entropy(module(xb), yb).backward()
                worker.step()
                if "hook" in seen:
                    seen["hooked"] = seen.pop("hook")(worker._job)
            job = worker._job
            seen["pipe"] = type(job.pipe)
            seen["pushed"] = job.client.pushed_bytes
            seen["pulled"] = job.client.pulled_bytes


def run_job(cluster, seen, encoding="FP32", **options):
    spec = {"name": "native", "model": ps.torch.model_spec(common.Small()),
            "epochs": 2, "batch_size": 16, "seed": 1, "block_elems": 64,
            "optimizer": {"adam": {"learning_rate": 0.01}},
            "consistency": {"model": "BSP"}, "num_workers": 1,
            "num_servers": 2, "durability": "MEMORY",
            "mixed_precision": {"wire_gradients": encoding}}
    with ps.JobClient(cluster.coordinator) as client:
        job = client.submit(spec)
        train(cluster.coordinator, seen, **options)
        final = client.wait(job, timeout=60)
        assert final.state == ps.v1.SUCCEEDED, final.message
        return client.export(job)


def assert_same(a, b):
    assert a.keys() == b.keys()
    for name in a:
        assert a[name].tobytes() == b[name].tobytes(), name


@needs_native
@pytest.mark.parametrize("encoding,shared", [
    ("FP32", True), ("FP32", False), ("FP16", True), ("BF16", False)])
def test_the_compiled_transport_trains_what_python_trains(cluster, encoding,
                                                          shared):
    cluster.start(servers=2, durable=False)
    python, native = {}, {}
    expected = run_job(cluster, python, encoding, native=False,
                       shared_memory_payloads=shared)
    assert python["pipe"] is StepPipeline
    got = run_job(cluster, native, encoding, native=True,
                  shared_memory_payloads=shared)
    assert native["pipe"] is NativePipeline
    assert_same(got, expected)
    # The C++ client's bytes are counted as the SDK's: the same payloads.
    assert native["pushed"] > 0 and native["pulled"] > 0


@needs_native
def test_the_compiled_transport_is_the_default_when_built(cluster):
    cluster.start(servers=2, durable=False)
    seen = {}
    run_job(cluster, seen)
    assert seen["pipe"] is NativePipeline


@needs_native
def test_an_abandoned_pull_reconnects_and_trains_the_same(cluster):
    # A pull no longer wanted cancels the C++ client, which is connected
    # again: the step pulls anew, and the job trains what Python trains.
    # The push in flight (the step's) is waited for first, not lost.
    cluster.start(servers=2, durable=False)
    expected = run_job(cluster, {}, native=False)

    def abandon(job):
        old = job.pipe._native
        job.pipe.abandon(job.pulling)
        job.pulling = None
        job.loaded_clock = -1
        return old is not job.pipe._native
    seen = {"hook": abandon}
    assert_same(run_job(cluster, seen), expected)
    assert seen["hooked"]  # A new client.


@needs_native
def test_the_compiled_client_checks_its_buffers(cluster):
    cluster.start(servers=2, durable=False)

    def misuse(job):
        # A client of its own, for the job's place (reads of clock 0 only).
        native = _native_step._native
        client = native.StepClient(job.assignment.SerializeToString(),
                                   pull_timeout=10, push_timeout=10,
                                   retry_window=10, shared_payloads=True)
        errors = []

        def check(call):
            try:
                call()
                errors.append(None)
            except native.CallError as e:
                errors.append(("CallError", e.args[0]))
            except ValueError as e:
                errors.append(("ValueError", str(e)))
        check(lambda: client.start_push(0, np.zeros(3, np.float32)))
        check(lambda: client.start_push(0, np.zeros(client.size)))
        check(lambda: client.finish_pull(np.zeros(client.size, np.float32)))
        client.start_pull(0)
        check(lambda: client.start_pull(0))
        check(lambda: client.finish_pull(np.zeros(3, np.float32)))
        out = np.zeros(client.size, np.float32)
        client.start_pull(0)
        client.finish_pull(out)
        return errors, client.size, out
    seen = {"hook": misuse}
    run_job(cluster, seen)
    errors, size, out = seen["hooked"]
    assert size == sum(p.numel() for p in common.Small().parameters())
    assert errors == [("CallError", 3),           # INVALID_ARGUMENT: length
                      ("ValueError", "gradients: not float32"),
                      ("CallError", 9),           # FAILED_PRECONDITION
                      ("CallError", 9),           # a pull in flight
                      ("CallError", 3)]           # the pull's length
    assert np.isfinite(out).all() and out.any()


def test_without_the_extension_the_sdk_steps_in_python(cluster, monkeypatch):
    cluster.start(servers=2, durable=False)
    monkeypatch.setattr(_native_step, "_native", None)
    assert not _native_step.available()
    seen = {}
    run_job(cluster, seen)
    assert seen["pipe"] is StepPipeline
    # Asked for by name, its absence is an error the job reports.
    with ps.JobClient(cluster.coordinator) as client:
        job = client.submit({
            "name": "must-be-native",
            "model": ps.torch.model_spec(common.Small()), "epochs": 1,
            "batch_size": 16, "num_workers": 1, "num_servers": 2,
            "optimizer": {"sgd": {"learning_rate": 0.1}},
            "durability": "MEMORY"})
        with pytest.raises(ps.errors.FailedPreconditionError,
                           match="compiled transport"):
            train(cluster.coordinator, {}, native=True)
        final = client.wait(job, timeout=60)
        assert final.state == ps.v1.FAILED
        assert "compiled transport" in final.message
