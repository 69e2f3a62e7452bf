"""A PyTorch job's lost server rebuilt on a free one from shared storage
(docs/durability.md, "A lost server rebuilt from shared storage"; docs/
python.md, "Server moves and rebuilds"): one of the job's two servers is
killed with kill -9 while two paramserver.torch.Workers train (BSP, WAL,
every server's data directory under one --shared_data_root) and never comes
back; after the lease and the recovery grace the free third server takes
its place from its directory, in a map that only changes the place's
address. The workers' calls to the lost server stop retrying once the new
map is offered, and go on under it: a push the lost server never
acknowledged is sent again unchanged. The exported parameters equal an
undisturbed run's byte for byte. tests/system/rebuild_test.sh is ps-worker's
counterpart.
"""

import time

import pytest

torch = pytest.importorskip("torch")

import paramserver as ps  # noqa: E402
from paramserver._native_step import available  # noqa: E402
from scaling import Run, exported_bytes, seeded, wait_moves  # noqa: E402
from test_scale_dense import make_data, make_module, spec, step  # noqa: E402

HOLD = 50


@pytest.mark.parametrize("native", [False, True])
def test_lost_server_rebuilt_while_pytorch_job_trains(cluster, native):
    if native and not available():
        pytest.skip("the compiled transport (paramserver._native) is not "
                    "built")
    cluster.heartbeat_ms = 50
    cluster.lease_ms = 1000
    cluster.recovery_grace_ms = 1500
    coordinator = cluster.start_coordinator()
    for _ in range(3):
        cluster.start_server(extra=[f"--shared_data_root={cluster.run_dir}"])
    client = ps.JobClient(coordinator)
    data = make_data()
    options = {"native": native}

    def submit(name):
        job = spec(name)
        job["durability"] = "WAL"
        return client.submit(job)

    quiet = submit("undisturbed")
    run = Run(coordinator, quiet, seeded(make_module), data, step,
              worker_options=options)
    run.disturbed.set()
    run.start().join()
    assert client.wait(quiet, timeout=60).state == ps.v1.SUCCEEDED

    job = submit("rebuilt")
    run = Run(coordinator, job, seeded(make_module), data, step,
              hold_at=HOLD, worker_options=options).start()
    run.wait_clock(10)
    lost = client.get(job).shard_map.servers[1]
    victim = [p for p in cluster.processes if p.name.startswith("server")
              and lost == f"127.0.0.1:{p.ports['grpc_port']}"]
    assert len(victim) == 1, lost
    killed_at, clock = time.monotonic(), min(run.clocks)
    victim[0].kill()
    moved = wait_moves(client, job, 1, timeout=30).map_moves[0]
    run.disturbed.set()
    run.join()
    final = client.wait(job, timeout=60)
    assert final.state == ps.v1.SUCCEEDED, final.message
    assert moved.rebuild and moved.rebuilt_server == 1, moved
    assert moved.rebuilt_from_address == lost
    assert final.shard_map.servers[1] != lost
    print(f"native={native}: server {lost} killed at clock {clock}, "
          f"rebuilt {time.monotonic() - killed_at:.1f} s later at most; "
          f"maps followed per worker {run.follows}")
    assert min(run.follows) >= 1, run.follows
    assert exported_bytes(client, job) == exported_bytes(client, quiet)
    client.close()
