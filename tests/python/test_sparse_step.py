"""A sharded embedding's step on the worker, without a cluster
(paramserver.torch.embedding): the batch's ids taken apart once (the pull's
np.unique serves the forward pass, which then needs no torch.unique of its
own) and the rows' gradients summed by gather_rows, bit for bit as
index_select's own backward (index_add_) sums them.
"""

from typing import Dict, NamedTuple

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import paramserver as ps  # noqa: E402
from paramserver import v1  # noqa: E402
from paramserver._sparse import SparseRouter, bucket_key  # noqa: E402
from paramserver.torch.embedding import SparseStep, gather_rows  # noqa: E402

DIM = 4


class Rows(NamedTuple):
    """What SparseStep.install reads of a pull: ids and rows per table."""
    ids: Dict[str, np.ndarray]
    rows: Dict[str, np.ndarray]


def _router():
    spec = v1.JobSpec()
    spec.model.sparse_tables.add(name="t", dim=DIM, num_buckets=4)
    shard_map = v1.ShardMap(servers=["s0", "s1"])
    for b in range(4):
        shard_map.blocks.add(key=bucket_key(0, b), server=b % 2)
    return SparseRouter(spec, shard_map)


class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = ps.torch.ShardedEmbedding("t", DIM)

    def forward(self, ids):
        return self.emb(ids)


def _step(module):
    """A SparseStep at clock 0 bound to `module` (no pulls of its own)."""
    def fetch(clock, pull):
        raise AssertionError("no pull expected")
    step = SparseStep(_router(), module, lambda: 0, lambda: None, fetch)
    step.bind()
    return step


def _ids(seed=3, shape=(64, 5)):
    """Ids that repeat within the batch, any int64 (negative ones too)."""
    rng = np.random.default_rng(seed)
    pool = rng.integers(-2**62, 2**62, size=40, dtype=np.int64)
    return torch.from_numpy(pool[rng.integers(0, 40, size=shape)])


def test_gather_rows_sums_gradients_as_index_select_does():
    rng = np.random.default_rng(1)
    rows = torch.from_numpy(rng.standard_normal((50, 16)).astype(np.float32))
    positions = torch.from_numpy(rng.integers(0, 50, size=4000))
    grad = torch.from_numpy(
        rng.standard_normal((4000, 16)).astype(np.float32) * 1e3)
    ours = rows.clone().requires_grad_(True)
    theirs = rows.clone().requires_grad_(True)
    out = gather_rows(ours, positions)
    ref = theirs.index_select(0, positions)
    assert torch.equal(out, ref)
    out.backward(grad)
    ref.backward(grad)
    assert torch.equal(ours.grad, theirs.grad)
    # Without gradients: plain values.
    with torch.no_grad():
        assert not gather_rows(ours, positions).requires_grad


def test_the_pulls_unique_serves_the_forward_pass(monkeypatch):
    module = Net()
    step = _step(module)
    ids = _ids()
    wanted = step.wanted({"t": ids})["t"]
    expected, inverse = torch.unique(ids, sorted=True, return_inverse=True)
    assert np.array_equal(wanted, expected.numpy())
    distinct, positions = step.distinct_of(ids)
    assert torch.equal(distinct, expected)
    assert torch.equal(positions, inverse)
    # A view of the same memory (another shape) is served too.
    distinct, positions = step.distinct_of(ids.view(-1))
    assert torch.equal(positions, inverse.view(-1))

    rows = np.arange(len(wanted) * DIM, dtype=np.float32).reshape(-1, DIM)
    step.install(0, Rows({"t": wanted}, {"t": rows}))

    def refused(*args, **kwargs):
        raise AssertionError("torch.unique ran again")
    monkeypatch.setattr(torch, "unique", refused)
    out = module(ids)
    assert torch.equal(out, torch.from_numpy(rows)[inverse])
    out.sum().backward()
    (got_ids, grads), = step.take_row_gradients(False, 0).values()
    assert np.array_equal(got_ids, wanted)
    counts = np.bincount(inverse.reshape(-1).numpy(), minlength=len(wanted))
    assert np.array_equal(grads, np.repeat(counts[:, None], DIM, 1)
                          .astype(np.float32))


def test_ids_changed_or_not_seen_are_taken_apart_again():
    step = _step(Net())
    ids = _ids()
    step.wanted({"t": ids})
    copy = ids.clone()
    assert step.distinct_of(copy) is None  # Another tensor.
    ids[0, 0] = 7  # Changed in place since: its version moved.
    assert step.distinct_of(ids) is None
    assert step.distinct_of(ids.t()) is None  # Not contiguous.
    # Only the last few are kept.
    batches = [_ids(seed) for seed in range(10)]
    for b in batches:
        step.wanted({"t": b})
    assert step.distinct_of(batches[0]) is None
    assert step.distinct_of(batches[-1]) is not None
