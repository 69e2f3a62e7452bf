"""A Python worker's membership over a job's life: a job cancelled while it
trains stops it at once (JobStoppedError, nothing reported as an error); a
coordinator killed with kill -9 and restarted gives the worker its place
back, and the job finishes."""

import re
import threading
import time

import pytest

torch = pytest.importorskip("torch")
import torch.nn.functional as F  # noqa: E402

import paramserver as ps  # noqa: E402
from workers import common  # noqa: E402


def spec_for(module, **extra):
    spec = {"name": "lifecycle", "model": ps.torch.model_spec(module),
            "epochs": 3, "batch_size": 10, "seed": 5,
            "optimizer": {"sgd": {"learning_rate": 0.05}},
            "num_workers": 1, "num_servers": 1}
    spec.update(extra)
    return spec


def acked(path):
    try:
        with open(path) as f:
            return sum(1 for line in f if line.strip())
    except FileNotFoundError:
        return 0


def test_a_cancelled_job_stops_its_worker(cluster):
    coordinator = cluster.start(servers=1, durable=False)
    torch.manual_seed(0)
    module = common.Small()
    client = ps.JobClient(coordinator)
    job = client.submit(spec_for(module, epochs=50, durability="MEMORY"))
    x, y = common.synthetic(400)
    outcome = {}

    def train():
        try:
            with ps.torch.Worker(coordinator, module, job=job) as worker:
                for _, batches in worker.epochs((x, y)):
                    for xb, yb in batches:
                        F.cross_entropy(module(xb), yb).backward()
                        worker.step()
                        outcome["clock"] = worker.clock
                        time.sleep(0.01)
        except ps.JobStoppedError as e:
            outcome["stopped"] = (time.monotonic(), e)

    thread = threading.Thread(target=train)
    thread.start()
    deadline = time.monotonic() + 60
    while outcome.get("clock", 0) < 10:
        assert time.monotonic() < deadline
        time.sleep(0.05)
    cancelled_at = time.monotonic()
    assert client.cancel(job).state == ps.v1.CANCELLED
    thread.join(30)
    assert "stopped" in outcome, outcome
    stopped_at, error = outcome["stopped"]
    assert stopped_at - cancelled_at < 5  # Within a few heartbeats.
    assert error.code.name == "CANCELLED"
    final = client.get(job)
    assert final.state == ps.v1.CANCELLED
    assert final.message == "cancelled by a client"  # Not the worker's error.
    client.close()


def test_the_worker_gets_its_place_back_after_a_coordinator_restart(
        cluster, tmp_path):
    coordinator = cluster.start(servers=1)  # WAL servers.
    port = int(coordinator.rsplit(":", 1)[1])
    torch.manual_seed(0)
    client = ps.JobClient(coordinator)
    job = client.submit(spec_for(common.Small()))
    acks = str(tmp_path / "acks")
    worker = cluster.start_python("train.py", "external", "--samples", "600",
                                  "--ack_log", acks, "--step_sleep", "0.03")
    deadline = time.monotonic() + 60
    while acked(acks) < 20:
        assert time.monotonic() < deadline, worker.output()
        time.sleep(0.05)
    cluster.process("coordinator").kill()
    assert acked(acks) < 3 * 60  # Mid-job.
    time.sleep(1.0)  # The worker's heartbeats and reports fail meanwhile.
    cluster.start_coordinator(port=port)
    final = client.wait(job, timeout=120)
    assert final.state == ps.v1.SUCCEEDED, (final.message, cluster.logs())
    out = worker.output()
    # It registered twice: at its start and after the restart, naming its
    # place, which it got back (nobody else could take it).
    assert out.count("registered with coordinator") == 2, out
    assert re.search(r"training job-000001 as worker 0", out)
    assert final.progress.clock == 3 * 60
    client.close()
