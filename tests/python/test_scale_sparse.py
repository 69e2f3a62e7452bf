"""A PyTorch job with a sparse table (paramserver.torch.ShardedEmbedding and
ShardedEmbeddingBag) scaled 2 -> 3 -> 2 servers while it trains (docs/
python.md, "Server moves and rebuilds"): the table's buckets move with
their rows, and the workers route each step's ids to the buckets' new
servers. Under BSP the result equals an undisturbed run of the same seed
byte for byte: the exported dense parameters, and every row (read through
worker 0's module after the last step: its predictions on every sample,
whose ids cover every trained row). tests/integration/scale_sparse_test.cc
is ps-worker's counterpart.

Both ways a sparse job steps: rows pulled with the dense parameters one
batch ahead (``sparse_ids``, through the compiled transport when it is
built: ``native=True``), and rows pulled by the forward passes themselves
on the communication thread's pure-Python calls.
"""

import numpy as np
import pytest

torch = pytest.importorskip("torch")
import torch.nn.functional as F  # noqa: E402

import paramserver as ps  # noqa: E402
from paramserver._native_step import available  # noqa: E402
from scaling import Run, exported_bytes, scale_twice, seeded  # noqa: E402

SAMPLES, TAGS, DIM = 960, 3, 4
BATCH = 8
HOLD = 45
ZEROS = {"kind": "ZEROS"}


class Net(torch.nn.Module):
    """An id's row, the mean of its tags' rows, and dense features."""

    def __init__(self):
        super().__init__()
        self.ids = ps.torch.ShardedEmbedding(
            "ids", DIM, init=ZEROS, optimizer={"sgd": {"learning_rate": 0.5}},
            num_buckets=16)
        self.tags = ps.torch.ShardedEmbeddingBag(
            "tags", DIM, mode="mean", init=ZEROS,
            optimizer={"adagrad": {"learning_rate": 0.1}}, num_buckets=16)
        self.dense = torch.nn.Linear(3, DIM)
        self.top = torch.nn.Linear(3 * DIM, 1)

    def forward(self, ids, tags, x):
        h = torch.cat([self.ids(ids), self.tags(tags),
                       torch.tanh(self.dense(x))], dim=1)
        return self.top(h).squeeze(1)


def make_data():
    rng = np.random.default_rng(3)
    pool = np.concatenate([rng.integers(-2**63, 2**63 - 1, 200,
                                        dtype=np.int64),
                           np.array([0, -1, 2**62, 7], dtype=np.int64)])
    ids = pool[np.minimum(rng.zipf(1.2, SAMPLES) - 1, len(pool) - 1)]
    tags = pool[np.minimum(rng.zipf(1.3, (SAMPLES, TAGS)) - 1, len(pool) - 1)]
    x = rng.normal(size=(SAMPLES, 3)).astype(np.float32)
    y = ((ids % 3 == 0) ^ (x[:, 0] > 0)).astype(np.float32)
    return tuple(torch.from_numpy(a) for a in (ids, tags, x, y))


def step(module, batch):
    ids, tags, x, y = batch
    return F.binary_cross_entropy_with_logits(module(ids, tags, x), y)


def spec(name):
    return {"name": name, "model": ps.torch.model_spec(Net()),
            "epochs": 1, "batch_size": BATCH, "seed": 5,
            "optimizer": {"sgd": {"learning_rate": 0.2, "momentum": 0.9}},
            "consistency": {"model": "BSP"}, "num_workers": 2,
            "num_servers": 2, "durability": "MEMORY", "block_elems": 16}


def ids_of(batch):
    return {"ids": batch[0], "tags": batch[1]}


@pytest.mark.parametrize("prefetch", [True, False])
def test_scaled_sparse_job_equals_undisturbed_run(cluster, prefetch):
    if prefetch and not available():
        pytest.skip("the compiled transport (paramserver._native) is not "
                    "built")
    coordinator = cluster.start(servers=3, durable=False)
    client = ps.JobClient(coordinator)
    data = make_data()
    options = {"native": True} if prefetch else {}

    def predict(worker, module, results):
        with torch.no_grad():  # Reads every trained row.
            results["predictions"] = module(*data[:3]).numpy().tobytes()

    def train(name, disturb):
        job = client.submit(spec(name))
        run = Run(coordinator, job, seeded(Net), data, step,
                  hold_at=HOLD if disturb else 1 << 60,
                  sparse_ids=ids_of if prefetch else None, after=predict,
                  worker_options=options)
        if not disturb:
            run.disturbed.set()
        run.start()
        moves = scale_twice(client, run, at=6, gap=6) if disturb else []
        run.join()
        final = client.wait(job, timeout=60)
        assert final.state == ps.v1.SUCCEEDED, final.message
        return job, run, moves, final

    quiet, quiet_run, _, _ = train("undisturbed", False)
    moved, run, moves, final = train("scaled", True)
    assert [m.num_servers for m in final.map_moves] == [3, 2]
    print(f"prefetch={prefetch}: moves at clocks {[m.clock for m in moves]} "
          f"({[m.units_moved for m in moves]} of "
          f"{len(final.shard_map.blocks)} units); maps followed per worker "
          f"{run.follows}")
    # Each worker went on under the new maps: under both, or straight
    # under the last when both moves ended while it waited (at HOLD on a
    # slow machine).
    assert min(run.follows) >= 1 and final.shard_map.version == 3
    assert exported_bytes(client, moved) == exported_bytes(client, quiet)
    assert run.results["predictions"] == quiet_run.results["predictions"]
    client.close()
