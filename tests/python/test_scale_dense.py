"""A PyTorch job's servers scaled 2 -> 3 -> 2 while it trains (psctl scale;
docs/python.md, "Server moves and rebuilds"): two paramserver.torch.Workers
(BSP, an EXTERNAL dense model) follow each new shard map, re-plan their
blocks and go on from the move's boundary clock, and the job's exported
parameters are byte-identical to an undisturbed run of the same seed (BSP:
a block's update does not depend on which server applies it;
tests/integration/scale_test.cc is ps-worker's counterpart). Once with the
pure-Python step pipeline and once with the compiled transport (the C++
ParameterClient, re-created under the new map), when it is built.
"""

import grpc
import pytest

torch = pytest.importorskip("torch")
import torch.nn.functional as F  # noqa: E402

import paramserver as ps  # noqa: E402
from paramserver._native_step import available  # noqa: E402
from scaling import Run, exported_bytes, scale_twice, seeded  # noqa: E402

SAMPLES, FEATURES, CLASSES = 960, 12, 4
BATCH = 8
HOLD = 50  # Workers wait here until both moves are done.


def make_module():
    return torch.nn.Sequential(torch.nn.Linear(FEATURES, 32), torch.nn.Tanh(),
                               torch.nn.Linear(32, CLASSES))


def make_data():
    g = torch.Generator().manual_seed(1)
    x = torch.randn(SAMPLES, FEATURES, generator=g)
    y = (x[:, :CLASSES] * torch.arange(1, CLASSES + 1)).argmax(1)
    return x, y


def step(module, batch):
    x, y = batch
    return F.cross_entropy(module(x), y)


def spec(name):
    return {"name": name, "model": ps.torch.model_spec(make_module()),
            "epochs": 1, "batch_size": BATCH, "seed": 7,
            "optimizer": {"adam": {"learning_rate": 0.01}},
            "consistency": {"model": "BSP"}, "num_workers": 2,
            "num_servers": 2, "durability": "MEMORY",
            # Small blocks: 10 units, so that a move has some to move.
            "block_elems": 64}


@pytest.mark.parametrize("native", [False, True])
def test_scaled_job_equals_undisturbed_run(cluster, native):
    if native and not available():
        pytest.skip("the compiled transport (paramserver._native) is not "
                    "built")
    coordinator = cluster.start(servers=3, durable=False)
    client = ps.JobClient(coordinator)
    data = make_data()
    options = {"native": native}

    quiet = client.submit(spec("undisturbed"))
    run = Run(coordinator, quiet, seeded(make_module), data, step,
              worker_options=options)
    run.disturbed.set()
    run.start().join()
    assert client.wait(quiet, timeout=60).state == ps.v1.SUCCEEDED

    moved = client.submit(spec("scaled"))
    run = Run(coordinator, moved, seeded(make_module), data, step,
              hold_at=HOLD, worker_options=options).start()
    moves = scale_twice(client, run, at=8, gap=8)
    run.join()
    final = client.wait(moved, timeout=60)
    assert final.state == ps.v1.SUCCEEDED, final.message
    assert [m.num_servers for m in final.map_moves] == [3, 2]
    assert len(final.shard_map.servers) == 2
    print(f"native={native}: moves at clocks {[m.clock for m in moves]} "
          f"({[m.units_moved for m in moves]} units); maps followed per "
          f"worker {run.follows}")
    # Each worker went on under the new maps: under both, or straight
    # under the last when both moves ended while it waited (at HOLD on a
    # slow machine).
    assert min(run.follows) >= 1 and final.shard_map.version == 3
    assert exported_bytes(client, moved) == exported_bytes(client, quiet)
    client.close()


def test_map_refusals_are_read_as_the_servers_write_them():
    """The servers' refusals (server/server_job.cc CheckRequest, server/
    parameter_manager_move.cc MovedAway, server/clock_table.cc CheckPush)
    as paramserver._map_change reads them; the real ones are met above."""
    from paramserver._map_change import (is_map_change, is_moving,
                                         server_behind, server_version)
    from paramserver.errors import error_for
    stale = error_for(grpc.StatusCode.FAILED_PRECONDITION,
                      "push of clock 3 from server 127.0.0.1:1: map_version: "
                      "request has shard map version 2, this server has "
                      "version 3")
    behind = error_for(grpc.StatusCode.FAILED_PRECONDITION,
                       "map_version: request has shard map version 3, this "
                       "server has version 2")
    left = error_for(grpc.StatusCode.FAILED_PRECONDITION,
                     "map_version: job job-1 moved off this server with "
                     "shard map version 3; fetch the new map")
    moving = error_for(grpc.StatusCode.UNAVAILABLE,
                       "clock: the job's servers are moving (shard map "
                       "version 3); pushes from clock 7 wait for it (retry)")
    other = error_for(grpc.StatusCode.FAILED_PRECONDITION,
                      "clock: worker 0 pushed clock 9 but the server has "
                      "recorded its pushes only up to clock 7")
    assert is_map_change(stale) and is_map_change(behind)
    assert is_map_change(left) and server_version(left) is None
    assert not is_map_change(other) and not is_map_change(moving)
    assert server_version(stale) == 3 and not server_behind(stale, 2)
    assert server_behind(behind, 3) and not server_behind(left, 3)
    assert is_moving(moving) and not is_moving(other)
