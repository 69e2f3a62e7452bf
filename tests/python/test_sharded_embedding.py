"""Sharded embeddings (paramserver.torch.ShardedEmbedding and
ShardedEmbeddingBag) on a real cluster: two PyTorch workers under BSP on
two servers train a module that mixes two sparse tables with dense layers,
and match one PyTorch process of twice the batch on the same samples (the
C++ CTR worker's counterpart is tests/integration/ctr_bsp_equivalence_
test.cc); then the errors a user meets.

The reference holds each table as an nn.Embedding over the ids the data
uses (zeros, as the job's ZEROS initializer), trained by torch.optim.SGD
(table "ids", SGD on the servers) and torch.optim.Adagrad (table "tags",
Adagrad on the servers): on the rows a step does not touch both change
nothing, as the servers' lazy optimizers. Its batch k is worker 0's batch
k followed by worker 1's (paramserver.data.epoch_order).

Tolerance: 1e-5 absolute, on every step's dense parameters (as worker 0
reads them before its batch) and on worker 0's predictions after the last
step on held-out samples (rows pulled at the final clock; ids never trained
read as zeros in both). The two computations differ only in float32
rounding: the servers average two mean gradients where torch takes one
mean, and apply the update with their own kernels (server/optimizer.cc,
server/sparse_optimizers.cc); each differs by a few ulps per step. The
parameters and predictions move by more than 1e-2 (asserted).
"""

import threading

import numpy as np
import pytest

torch = pytest.importorskip("torch")
import torch.nn.functional as F  # noqa: E402

import paramserver as ps  # noqa: E402
from paramserver.data import epoch_order  # noqa: E402
from paramserver.errors import (InvalidArgumentError,  # noqa: E402
                                ModelMismatchError)

TOLERANCE = 1e-5
SAMPLES, TEST, TAGS, DIM = 320, 64, 3, 4
BATCH = 8
SEED = 5
ZEROS = {"kind": "ZEROS"}


class Net(torch.nn.Module):
    """Two sparse tables and dense layers: an id's row, the row of the first
    tag in the same table (a second module sharing it), the mean of three
    tags' rows (a bag), and dense features."""

    def __init__(self):
        super().__init__()
        self.ids = ps.torch.ShardedEmbedding(
            "ids", DIM, init=ZEROS, optimizer={"sgd": {"learning_rate": 0.5}})
        self.shared = ps.torch.ShardedEmbedding(
            "ids", DIM, init=ZEROS, optimizer={"sgd": {"learning_rate": 0.5}})
        self.tags = ps.torch.ShardedEmbeddingBag(
            "tags", DIM, mode="mean", init=ZEROS,
            optimizer={"adagrad": {"learning_rate": 0.1}})
        self.dense = torch.nn.Linear(3, DIM)
        self.top = torch.nn.Linear(4 * DIM, 1)

    def forward(self, ids, tags, x):
        h = torch.cat([self.ids(ids), self.shared(tags[:, 0]),
                       self.tags(tags), torch.tanh(self.dense(x))], dim=1)
        return self.top(h).squeeze(1)


def _rows_of(vocab, ids):
    """Indices of ids in the sorted vocabulary; an id not in it gets the
    extra last row (zeros, never trained: the cluster reads such ids as
    zeros)."""
    pos = np.minimum(np.searchsorted(vocab, ids), len(vocab) - 1)
    return torch.from_numpy(np.where(vocab[pos] == ids, pos, len(vocab)))


class Reference(torch.nn.Module):
    """Net with nn.Embedding over a vocabulary of the training ids."""

    def __init__(self, vocab_ids, vocab_tags):
        super().__init__()
        self.vocab_ids, self.vocab_tags = vocab_ids, vocab_tags
        self.ids = torch.nn.Embedding(len(vocab_ids) + 1, DIM)
        self.tags = torch.nn.EmbeddingBag(len(vocab_tags) + 1, DIM,
                                          mode="mean")
        torch.nn.init.zeros_(self.ids.weight)
        torch.nn.init.zeros_(self.tags.weight)
        self.dense = torch.nn.Linear(3, DIM)
        self.top = torch.nn.Linear(4 * DIM, 1)

    def forward(self, ids, tags, x):
        first = tags[:, 0].numpy()
        h = torch.cat([self.ids(_rows_of(self.vocab_ids, ids.numpy())),
                       self.ids(_rows_of(self.vocab_ids, first)),
                       self.tags(_rows_of(self.vocab_tags, tags.numpy())),
                       torch.tanh(self.dense(x))], dim=1)
        return self.top(h).squeeze(1)


def make_dense(module):
    torch.manual_seed(0)
    module.dense.reset_parameters()
    module.top.reset_parameters()
    return module


def make_data():
    """Ids anywhere in int64 (negative, huge), Zipf-like so rows repeat;
    labels from a hidden rule. The test split holds ids never trained."""
    rng = np.random.default_rng(3)
    pool = np.concatenate([rng.integers(-2**63, 2**63 - 1, 40, dtype=np.int64),
                           np.array([0, -1, 2**62, 7], dtype=np.int64)])
    n = SAMPLES + TEST
    ids = pool[np.minimum(rng.zipf(1.3, n) - 1, len(pool) - 1)]
    tags = pool[np.minimum(rng.zipf(1.5, (n, TAGS)) - 1, len(pool) - 1)]
    ids[SAMPLES:SAMPLES + 8] = rng.integers(1, 2**40, 8)  # Never trained.
    x = rng.normal(size=(n, 3)).astype(np.float32)
    y = ((ids % 3 == 0) ^ (x[:, 0] > 0)).astype(np.float32)
    arrays = [torch.from_numpy(a) for a in (ids, tags, x, y)]
    return [a[:SAMPLES] for a in arrays], [a[SAMPLES:] for a in arrays]


def flat(module):
    return torch.cat([p.detach().reshape(-1) for p in module.parameters()]
                     ).numpy().copy()


def spec_of(net, name):
    return {"name": name, "model": ps.torch.model_spec(net),
            "epochs": 1, "batch_size": BATCH, "seed": SEED,
            "optimizer": {"sgd": {"learning_rate": 0.2, "momentum": 0.9}},
            "consistency": {"model": "BSP"}, "num_workers": 2,
            "num_servers": 2, "durability": "MEMORY", "block_elems": 16}


@pytest.mark.parametrize("prefetch", [True, False])
def test_two_workers_equal_one_process_with_twice_the_batch(cluster,
                                                            prefetch):
    coordinator = cluster.start(servers=2, durable=False)
    train, test = make_data()
    client = ps.JobClient(coordinator)
    job = client.submit(spec_of(Net(), f"sharded-{prefetch}"))
    stored = client.get(job).spec.model.sparse_tables
    assert [(t.name, t.dim) for t in stored] == [("ids", DIM), ("tags", DIM)]
    results, errors = {}, []

    def run(module):
        try:
            with ps.torch.Worker(coordinator, module, job=job) as worker:
                seen = []
                ids_of = ((lambda b: {"ids": torch.cat([b[0], b[1][:, 0]]),
                                      "tags": b[1]})
                          if prefetch else None)
                for _, batches in worker.epochs(tuple(train),
                                                sparse_ids=ids_of):
                    for ids, tags, x, y in batches:
                        seen.append(flat(module))
                        loss = F.binary_cross_entropy_with_logits(
                            module(ids, tags, x), y)
                        loss.backward()
                        worker.step(loss)
                    if worker.index == 0:
                        with torch.no_grad():
                            results["predictions"] = module(
                                *test[:3]).numpy().copy()
                    worker.report()
                seen.append(flat(module))
                results[worker.index] = seen
                results[f"lazy{worker.index}"] = \
                    worker._job.sparse.lazy_pulls
        except Exception as e:  # pragma: no cover - reported below
            errors.append(e)
            raise

    modules = [make_dense(Net()) for _ in range(2)]
    threads = [threading.Thread(target=run, args=(m,)) for m in modules]
    for t in threads:
        t.start()
    for t in threads:
        t.join(180)
    assert not errors, errors
    final = client.wait(job, timeout=60)
    assert final.state == ps.v1.SUCCEEDED, final.message

    vocab_ids = np.unique(np.concatenate([train[0].numpy(),
                                          train[1][:, 0].numpy()]))
    vocab_tags = np.unique(train[1].numpy())
    reference = make_dense(Reference(vocab_ids, vocab_tags))
    dense = [p for n, p in reference.named_parameters()
             if n.startswith(("dense", "top"))]
    optimizers = [torch.optim.SGD(dense, lr=0.2, momentum=0.9),
                  torch.optim.SGD([reference.ids.weight], lr=0.5),
                  torch.optim.Adagrad([reference.tags.weight], lr=0.1,
                                      eps=1e-10)]
    orders = [epoch_order(SAMPLES, 2, w, SEED, 0) for w in range(2)]
    steps = (SAMPLES // 2) // BATCH
    expected = []
    for k in range(steps):
        expected.append(np.concatenate([p.detach().reshape(-1).numpy()
                                        for p in dense]))
        idx = torch.from_numpy(np.concatenate(
            [o[k * BATCH:(k + 1) * BATCH] for o in orders]))
        for o in optimizers:
            o.zero_grad()
        F.binary_cross_entropy_with_logits(
            reference(*(a[idx] for a in train[:3])), train[3][idx]).backward()
        for o in optimizers:
            o.step()
    expected.append(np.concatenate([p.detach().reshape(-1).numpy()
                                    for p in dense]))
    # The cluster's module lists the same dense parameters in the same
    # order (the sharded embeddings hold none).
    got = results[0]
    assert len(got) == steps + 1 == 21
    diff = max(np.abs(a - b).max() for a, b in zip(got, expected))
    with torch.no_grad():
        want = reference(*test[:3]).numpy()
    pred_diff = np.abs(results["predictions"] - want).max()
    untrained = make_dense(Reference(vocab_ids, vocab_tags))
    with torch.no_grad():
        moved = np.abs(untrained(*test[:3]).numpy() - want).max()
    print(f"prefetch={prefetch}: max difference over {steps} steps "
          f"{diff:.3g}, predictions {pred_diff:.3g} (they moved by "
          f"{moved:.3g}); forward-pass pulls {results['lazy0']}")
    assert np.abs(expected[-1] - expected[0]).max() > 1e-2
    assert moved > 1e-2
    assert diff <= TOLERANCE
    assert pred_diff <= TOLERANCE
    assert max(np.abs(a - b).max() for a, b in
               zip(results[1][:-1], got[:-1])) == 0
    if prefetch:
        # Rows came with the dense pulls; only the evaluation's forward
        # passes pulled (one pull per module).
        assert results["lazy0"] == 3
        assert results["lazy1"] == 0
    else:
        # Per step: "ids", then "shared"'s ids not among them (a second
        # set of rows of the table, whose gradients are merged), "tags".
        assert results["lazy1"] >= 3 * steps - 2
    client.close()


def test_wrong_ids_and_unknown_tables_are_refused_clearly(cluster):
    coordinator = cluster.start(servers=1, durable=False)
    client = ps.JobClient(coordinator)
    spec = spec_of(Net(), "errors")
    spec["num_workers"], spec["num_servers"] = 1, 1
    job = client.submit(spec)

    # A module that reads a table the job does not have: refused at
    # registration, naming the job's tables.
    class Other(Net):
        def __init__(self):
            super().__init__()
            self.tags = ps.torch.ShardedEmbeddingBag("labels", DIM)

    with pytest.raises(ModelMismatchError, match=r"sparse tables \(name/dim"
                       r"\): ids/4 tags/4"):
        with ps.torch.Worker(coordinator, Other(), job=job) as w:
            w.wait_for_job(timeout=30)

    # Float ids, in a forward pass: InvalidArgumentError, and the job
    # fails with the message.
    train, _ = make_data()
    net = make_dense(Net())
    with pytest.raises(InvalidArgumentError, match="ids: ShardedEmbedding"
                       r"\('ids'\) takes int64 \(torch.long\) ids, not "
                       "torch.float32"):
        with ps.torch.Worker(coordinator, net, job=job) as worker:
            for _, batches in worker.epochs(tuple(train)):
                for ids, tags, x, y in batches:
                    net(ids.float(), tags, x)
    final = client.wait(job, timeout=30)
    assert final.state == ps.v1.FAILED
    assert "takes int64" in final.message

    # sparse_ids naming a table not in the job.
    job = client.submit({**spec, "name": "errors2"})
    net = make_dense(Net())
    with pytest.raises(InvalidArgumentError, match="table: 'nope' is not a "
                       "sparse table of the job .its tables: ids, tags"):
        with ps.torch.Worker(coordinator, net, job=job) as worker:
            for _, batches in worker.epochs(
                    tuple(train), sparse_ids=lambda b: {"nope": b[0]}):
                for ids, tags, x, y in batches:
                    pass
    client.close()


def test_module_rules_without_a_cluster():
    net = Net()
    spec = ps.torch.model_spec(net)
    assert [t["name"] for t in spec["tensors"]] == [
        "dense.weight", "dense.bias", "top.weight", "top.bias"]
    assert spec["sparse_tables"] == [
        {"name": "ids", "dim": DIM, "optimizer": {"sgd": {"learning_rate":
                                                          0.5}},
         "init": ZEROS},
        {"name": "tags", "dim": DIM, "optimizer": {"adagrad": {
            "learning_rate": 0.1}}, "init": ZEROS}]
    # Unbound: rows given by load_rows (an export's), zeros elsewhere.
    with pytest.raises(RuntimeError, match="not bound to a paramserver"):
        net.ids(torch.tensor([1, 2]))
    net.ids.load_rows(np.array([9, -4], dtype=np.int64),
                      np.array([[1, 2, 3, 4], [5, 6, 7, 8]], np.float32))
    out = net.ids(torch.tensor([[-4, 3], [9, 9]]))
    assert out.shape == (2, 2, DIM)
    assert out[0, 0].tolist() == [5, 6, 7, 8] and out[0, 1].abs().sum() == 0
    assert out[1, 1].tolist() == [1, 2, 3, 4]
    with pytest.raises(InvalidArgumentError, match="offsets: 1-D ids"):
        net.tags(torch.tensor([1, 2]))
    with pytest.raises(InvalidArgumentError, match="mode:"):
        ps.torch.ShardedEmbeddingBag("t", 4, mode="max")

    class Clash(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.a = ps.torch.ShardedEmbedding("t", 4)
            self.b = ps.torch.ShardedEmbedding("t", 8)
            self.fc = torch.nn.Linear(1, 1)

    with pytest.raises(ModelMismatchError, match="table 't' has dim 4"):
        ps.torch.model_spec(Clash())
