"""A Python worker killed with kill -9 mid-job: a replacement Python worker
takes its place, resumes at the clock the servers recorded for it, and the
job finishes; no acknowledged push is lost."""

import re
import time

import pytest

pytest.importorskip("torch")
import paramserver as ps  # noqa: E402
from workers import common  # noqa: E402


def ack_clocks(path):
    try:
        with open(path) as f:
            return [int(line.split()[2]) for line in f if line.strip()]
    except FileNotFoundError:
        return []


def wait_for(predicate, timeout, what):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


# Worker 1 under BSP (the other waits at the barrier meanwhile); worker 0
# under ASP (the replacement's seed is a duplicate, and it uploads the model).
@pytest.mark.parametrize("consistency,index", [("BSP", 1), ("ASP", 0)])
def test_a_killed_python_worker_is_replaced_and_the_job_finishes(
        cluster, tmp_path, consistency, index):
    cluster.lease_ms = 1000
    coordinator = cluster.start(servers=2)  # WAL: the servers persist.
    samples = 2000
    spec = {"name": "kill-9", "model": ps.torch.model_spec(common.Small()),
            "epochs": 2, "batch_size": 10, "seed": 4,
            "optimizer": {"sgd": {"learning_rate": 0.1, "momentum": 0.5}},
            "consistency": {"model": consistency},
            "num_workers": 2, "num_servers": 2}
    client = ps.JobClient(coordinator)
    job = client.submit(spec)
    logs = [str(tmp_path / f"acks{i}") for i in range(3)]
    workers = [cluster.start_python("train.py", "external", "--samples",
                                    str(samples), "--ack_log", logs[i],
                                    "--step_sleep", "0.02")
               for i in range(2)]
    wait_for(lambda: all("training" in w.output() for w in workers), 60,
             "both workers to train")
    victim = next(i for i, w in enumerate(workers)
                  if f"as worker {index} " in w.output())
    victim_log = logs[victim]
    wait_for(lambda: len(ack_clocks(victim_log)) >= 30, 60,
             "30 acknowledged pushes")
    workers[victim].kill()
    acked = ack_clocks(victim_log)
    assert acked == list(range(len(acked))), "acks in clock order"
    status = client.get(job)
    assert status.state == ps.v1.RUNNING
    replacement = cluster.start_python("train.py", "external", "--samples",
                                       str(samples), "--ack_log", logs[2])
    final = client.wait(job, timeout=120)
    assert final.state == ps.v1.SUCCEEDED, (final.message, cluster.logs())
    steps = 2 * (samples // 2 // 10)
    assert final.progress.clock == steps
    out = replacement.output()
    assert f"as worker {index} " in out
    resumed = int(re.search(r"from clock (\d+)", out).group(1))
    replaced = ack_clocks(logs[2])
    # No acknowledged push lost: the replacement resumes after the last one
    # the victim saw acknowledged (at most one more, whose ack it missed,
    # may have reached every server), and pushes every later clock once.
    assert max(acked) + 1 <= resumed <= max(acked) + 2
    assert replaced == list(range(resumed, steps))
    # The job's record shows the vacancy was filled.
    assert not final.vacant
    client.close()
