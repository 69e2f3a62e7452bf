"""The Python worker's same-host payload path (docs/python.md, "Same-host
payloads"): pushes and pulls through /dev/shm regions (PushShared,
PullShared) to servers on loopback train exactly what the socket trains; a
server that refuses them (--shared_memory_payloads=false) answers
UNIMPLEMENTED and is called through the socket from then on, as the C++
worker does; the regions are removed when the worker closes, and a dead
worker's by the next one."""

import os

import pytest

torch = pytest.importorskip("torch")
import torch.nn.functional as F  # noqa: E402

import paramserver as ps  # noqa: E402
from paramserver import _shared  # noqa: E402
from workers import common  # noqa: E402


def regions_of(pid):
    return sorted(n for n in os.listdir("/dev/shm")
                  if n.startswith(f"ps-shm-{pid}-"))


def train(coordinator, shared_memory, seen):
    """One worker trains the job; `seen` gets, after the first step, the
    regions this process holds and which servers take shared payloads."""
    torch.manual_seed(0)
    module = common.Small()
    data = common.synthetic(256)
    with ps.torch.Worker(coordinator, module,
                         shared_memory_payloads=shared_memory) as worker:
        for _, batches in worker.epochs(data):
            for xb, yb in batches:
                F.cross_entropy(module(xb), yb).backward()
                worker.step()
                if "regions" not in seen:
                    worker.sync()
                    seen["regions"] = regions_of(os.getpid())
                    client = worker._job.client
                    seen["shared"] = [client.uses_shared_memory(s) for s in
                                      range(len(client.addresses))]
    seen["after"] = regions_of(os.getpid())


def run_job(cluster, shared_memory):
    coordinator = cluster.coordinator
    torch.manual_seed(0)
    spec = {"name": "shm", "model": ps.torch.model_spec(common.Small()),
            "epochs": 2, "batch_size": 16, "seed": 1, "block_elems": 64,
            "optimizer": {"sgd": {"learning_rate": 0.1, "momentum": 0.9}},
            "num_workers": 1, "num_servers": 2, "durability": "MEMORY"}
    with ps.JobClient(coordinator) as client:
        job = client.submit(spec)
        seen = {}
        train(coordinator, shared_memory, seen)
        final = client.wait(job, timeout=60)
        assert final.state == ps.v1.SUCCEEDED, final.message
        return client.export(job), seen


def test_shared_memory_trains_what_the_socket_trains(cluster):
    cluster.start(servers=2, durable=False)
    shared, seen = run_job(cluster, True)
    # While training: regions of this process, both servers taking them.
    assert seen["shared"] == [True, True]
    assert seen["regions"], "no region in /dev/shm while training"
    assert seen["after"] == []
    socket, seen = run_job(cluster, False)
    assert seen["shared"] == [False, False] and seen["regions"] == []
    assert shared.keys() == socket.keys()
    for name in shared:
        assert (shared[name] == socket[name]).all(), name


def test_a_server_that_refuses_is_called_through_the_socket(cluster, caplog):
    caplog.set_level("INFO", logger="paramserver")
    cluster.start_coordinator()
    cluster.start_server(durable=False)
    cluster.start_server(durable=False,
                         extra=["--shared_memory_payloads=false"])
    refused, seen = run_job(cluster, True)
    # One server each way; the job trained what the socket trains.
    assert sorted(seen["shared"]) == [False, True]
    assert seen["after"] == []
    socket, _ = run_job(cluster, False)
    for name in refused:
        assert (refused[name] == socket[name]).all(), name
    refusals = [r.getMessage() for r in caplog.records
                if "takes no shared-memory payloads" in r.getMessage()]
    # Once, for the server that refused, naming why.
    assert len(refusals) == 1, refusals
    assert "shared_memory_payloads=false" in refusals[0]


def test_a_dead_workers_regions_are_removed():
    # A region named after a process that no longer runs.
    pid = os.fork()
    if pid == 0:
        os._exit(0)
    os.waitpid(pid, 0)
    path = f"/dev/shm/ps-shm-{pid}-0123456789abcdef"
    with open(path, "wb") as f:
        f.write(b"x")
    mine = _shared.SharedRegion(100)
    assert _shared.remove_orphaned_regions() >= 1
    assert not os.path.exists(path)
    assert os.path.exists(f"/dev/shm/{mine.name}")
    assert os.stat(f"/dev/shm/{mine.name}").st_mode & 0o777 == 0o600
    mine.close()
    assert not os.path.exists(f"/dev/shm/{mine.name}")


def test_pool_reuses_the_smallest_region_that_fits():
    pool = _shared.RegionPool(max_idle=2)
    a, b, c = (pool.acquire(n) for n in (100, 1000, 10))
    for r in (a, b, c):
        pool.release(r)
    assert not os.path.exists(f"/dev/shm/{c.name}")  # Past max_idle.
    assert pool.acquire(50) is a
    assert pool.acquire(50) is b
    fresh = pool.acquire(50)
    assert fresh not in (a, b)
    for r in (a, b, fresh):
        r.close()
    pool.close()
