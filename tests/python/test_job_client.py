"""paramserver.JobClient against a real coordinator: submit, watch, get,
list, cancel, delete, export, and every error with its code."""

import os

import grpc
import numpy as np
import pytest

import paramserver as ps
from cluster import FASHION_MNIST, binary


def tiny_external(name="tiny", size=4):
    return {"name": name,
            "model": {"kind": "EXTERNAL",
                      "tensors": [{"name": "w", "shape": [size, 2]}]},
            "epochs": 1, "batch_size": 2,
            "optimizer": {"sgd": {"learning_rate": 0.1}},
            "num_workers": 1, "num_servers": 1, "durability": "MEMORY"}


def test_errors_carry_their_codes(cluster):
    cluster.coordinator_args = ["--max_jobs=3", "--max_model_bytes=4000"]
    coordinator = cluster.start_coordinator()
    with ps.JobClient(coordinator, timeout=5) as client:
        # INVALID_ARGUMENT from the coordinator's validation, naming the field.
        bad = tiny_external()
        bad["batch_size"] = 0
        with pytest.raises(ps.InvalidArgumentError) as e:
            client.submit(bad)
        assert e.value.code == grpc.StatusCode.INVALID_ARGUMENT
        assert e.value.field == "batch_size"
        assert "must be >= 1" in e.value.message
        bad = tiny_external()
        bad["model"]["tensors"][0]["shape"] = [0, 2]
        with pytest.raises(ps.InvalidArgumentError) as e:
            client.submit(bad)
        assert e.value.field == "model.tensors[0].shape[0]"
        # ... and locally, for JSON that is no JobSpec.
        with pytest.raises(ps.InvalidArgumentError) as e:
            client.submit({"name": "x", "epoch": 1})
        assert "epoch" in e.value.message
        # RESOURCE_EXHAUSTED: a model over --max_model_bytes, naming it.
        with pytest.raises(ps.ResourceExhaustedError) as e:
            client.submit(tiny_external(size=1000))
        assert e.value.field == "model"
        # NOT_FOUND, and INVALID_ARGUMENT for a malformed id.
        with pytest.raises(ps.NotFoundError) as e:
            client.get("job-424242")
        assert 'no job "job-424242"' in e.value.message
        with pytest.raises(ps.NotFoundError):
            client.cancel("job-424242")
        with pytest.raises(ps.NotFoundError):
            next(client.watch("job-424242"))
        with pytest.raises(ps.InvalidArgumentError) as e:
            client.get("job/1")
        assert e.value.field == "job_id"
        with pytest.raises(ps.InvalidArgumentError) as e:
            client.list(page_size=-1)
        assert e.value.field == "page_size"
        # A pending job (no servers, no workers).
        job = client.submit(tiny_external("pending"))
        status = client.get(job)
        assert status.state == ps.v1.PENDING
        assert "waiting for 1 server" in status.message
        assert status.spec.model.tensors[0].init == ps.v1.FROM_WORKER
        with pytest.raises(ps.NotFoundError) as e:
            client.export(job)
        assert "has no trained model: it is PENDING" in e.value.message
        with pytest.raises(ps.FailedPreconditionError) as e:
            client.delete(job)
        with pytest.raises(ps.DeadlineExceededError):
            client.wait(job, timeout=0.5)
        # RESOURCE_EXHAUSTED: --max_jobs pending or running jobs.
        others = [client.submit(tiny_external(f"p{i}")) for i in range(2)]
        with pytest.raises(ps.ResourceExhaustedError) as e:
            client.submit(tiny_external("one too many"))
        assert "--max_jobs" in e.value.message
        # Cancel, then the FAILED_PRECONDITION of ending it twice.
        cancelled = client.cancel(job)
        assert cancelled.state == ps.v1.CANCELLED
        assert [s.state for s in client.watch(job)] == [ps.v1.CANCELLED]
        with pytest.raises(ps.FailedPreconditionError) as e:
            client.cancel(job)
        assert "already ended (CANCELLED)" in e.value.message
        client.delete(job)
        with pytest.raises(ps.NotFoundError):
            client.get(job)
        # list follows pages.
        for j in others:
            client.cancel(j)
        more = [client.submit(tiny_external(f"q{i}")) for i in range(3)]
        ids = [s.job_id for s in client.list(page_size=2)]
        assert ids == sorted(ids) and set(others + more) <= set(ids)
        assert [s.job_id for s in client.list()] == ids
    # UNAVAILABLE: no coordinator there, the message names the address.
    with ps.JobClient("127.0.0.1:1", timeout=2) as nowhere:
        with pytest.raises(ps.UnavailableError) as e:
            nowhere.list()
        assert "coordinator at 127.0.0.1:1 is not reachable" in e.value.message


@pytest.mark.skipif(
    not os.path.exists(f"{FASHION_MNIST}/train-images-idx3-ubyte.gz"),
    reason="no Fashion-MNIST")
def test_a_job_submitted_watched_and_exported(cluster, tmp_path):
    if not os.access(binary("worker", "ps-worker"), os.X_OK):
        pytest.skip("ps-worker is not built")
    coordinator = cluster.start(servers=1, cpp_workers=1)
    spec = {
        "name": "softmax",
        "model": {"kind": "SOFTMAX_REGRESSION", "input_dim": 784,
                  "num_classes": 10},
        "dataset": {
            "format": "IDX",
            "train_images": f"{FASHION_MNIST}/train-images-idx3-ubyte.gz",
            "train_labels": f"{FASHION_MNIST}/train-labels-idx1-ubyte.gz",
            "test_images": f"{FASHION_MNIST}/t10k-images-idx3-ubyte.gz",
            "test_labels": f"{FASHION_MNIST}/t10k-labels-idx1-ubyte.gz",
            "max_train_samples": 2000, "max_test_samples": 500},
        "epochs": 2, "batch_size": 32, "seed": 3,
        "optimizer": {"adam": {"learning_rate": 0.01}},
        "num_workers": 1, "num_servers": 1}
    path = tmp_path / "job.json"
    import json
    path.write_text(json.dumps(spec))
    with ps.JobClient(coordinator) as client:
        job = client.submit(path)
        states = []
        for status in client.watch(job):
            states.append(status.state)
        assert states[-1] == ps.v1.SUCCEEDED, status.message
        assert ps.v1.RUNNING in states
        final = client.get(job)
        assert final.state == ps.v1.SUCCEEDED
        assert final.progress.epoch == 2
        assert [r.epoch for r in final.progress.epochs] == [1, 2]
        assert final.progress.test_accuracy > 0.6
        assert job in [s.job_id for s in client.list()]
        params = client.export(job)
        assert list(params) == ["dense0.weight", "dense0.bias"]
        assert params["dense0.weight"].shape == (784, 10)
        assert params["dense0.weight"].dtype == np.float32
        assert np.isfinite(params["dense0.weight"]).all()
        model = client.export_model(final)
        assert model.test_accuracy == pytest.approx(
            final.progress.test_accuracy)
        # The exported values are the model that reached that accuracy.
        from paramserver.data import load_idx
        x, y = load_idx(spec["dataset"]["test_images"],
                        spec["dataset"]["test_labels"], 500)
        logits = x @ params["dense0.weight"] + params["dense0.bias"]
        assert (logits.argmax(1) == y).mean() == pytest.approx(
            model.test_accuracy, abs=1e-6)
        with pytest.raises(ps.FailedPreconditionError):
            client.cancel(job)
        client.delete(job)
        with pytest.raises(ps.NotFoundError):
            client.export(job)


def test_a_retried_submit_with_its_request_id_makes_one_job(cluster):
    coordinator = cluster.start_coordinator()
    with ps.JobClient(coordinator, timeout=5) as client:
        first = client.submit(tiny_external("retried"), request_id="req-42")
        # The retry of a submit whose answer was lost: the same job.
        again = client.submit(tiny_external("retried"), request_id="req-42")
        assert again == first
        # The same id for another spec is refused; a fresh id is a new job.
        with pytest.raises(ps.ParamServerError) as e:
            client.submit(tiny_external("other"), request_id="req-42")
        assert e.value.code == grpc.StatusCode.ALREADY_EXISTS
        assert client.submit(tiny_external("retried")) != first
        assert [j.spec.name for j in client.list()].count("retried") == 2
