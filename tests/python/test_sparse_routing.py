"""Where the Python SDK sends a sparse row, checked against the C++: the
bucket of an id (paramserver._sparse.bucket_of_ids, a numpy XXH3-64 of the
id's 8 little-endian bytes seeded with the table index, against BucketOfId
of common/sparse_keys.h), and the model digest of a spec with sparse tables
(paramserver.layout.model_digest with tables, against ModelDigest(tensors,
model) in common/model_layout.h), both printed by tests/python/
layout_oracle.cc (PS_LAYOUT_ORACLE). Then the SparseRouter over a shard map
and the SparseRows a pull and a push carry, without a cluster.
"""

import json
import os
import random
import subprocess

import numpy as np
import pytest

import paramserver as ps
from paramserver import layout, v1
from paramserver._sparse import (SparsePull, SparseRouter, bucket_key,
                                 bucket_of_ids, push_rows)
from paramserver.errors import InvalidArgumentError

TABLES = [0, 1, 2, 25, 1023, 65535, (1 << 31) + 5, (1 << 32) - 1]
BUCKETS = [1, 2, 64, 128, 1024, 1 << 20]


def _ids():
    rng = random.Random(28)
    edge = [0, 1, 2, 255, 256, (1 << 32) - 1, 1 << 32, (1 << 32) + 1,
            (1 << 63) - 1, 1 << 63, (1 << 64) - 1, (1 << 64) - 2]
    # Criteo ids: (field << 33) | (1 << 32) | value, and a missing value.
    criteo = [(f << 33) | (1 << 32) | rng.getrandbits(32) for f in range(26)]
    criteo += [f << 33 for f in range(26)]
    return edge + criteo + [rng.getrandbits(64) for _ in range(3000)] + \
        [rng.getrandbits(20) for _ in range(500)]


IDS = _ids()

OPT = {"sgd": {"learningRate": 0.1}}
BASE = {"name": "sparse-digest", "epochs": 1, "batchSize": 8,
        "numWorkers": 1, "numServers": 2,
        "optimizer": {"sgd": {"learningRate": 0.1}}}


def _external(tensors, tables):
    return {**BASE, "model": {
        "kind": "EXTERNAL",
        "tensors": [{"name": n, "shape": list(s)} for n, s in tensors],
        "sparseTables": [{"name": n, "dim": d, "optimizer": OPT}
                         for n, d in tables]}}


DIGEST_CASES = {
    "no_tables": _external([("w", (3, 2))], []),
    "one_table": _external([("w", (3, 2))], [("ids", 8)]),
    "two_tables": _external([("w", (3, 2)), ("b", (2,))],
                            [("z", 4), ("a", 16)]),
    "same_names_other_dim": _external([("w", (3, 2))], [("ids", 9)]),
    "table_named_like_a_tensor": _external([("w", (3, 2))], [("w", 2)]),
    "26_fields": _external([("top.0.weight", (1, 64))],
                           [(f"C{i}", 16) for i in range(1, 27)]),
}


@pytest.fixture(scope="module")
def oracle():
    path = os.environ.get("PS_LAYOUT_ORACLE") or os.path.join(
        os.environ.get("PS_BUILD_DIR", "build"), "tests", "python",
        "ps_layout_oracle")
    if not os.access(path, os.X_OK):
        pytest.skip(f"{path} is not built")
    lines = []
    for table in TABLES:
        for n in BUCKETS:
            lines.append(f"ids {table} {n} " + " ".join(map(str, IDS)))
    names = list(DIGEST_CASES)
    lines += [f"spec {json.dumps(DIGEST_CASES[n])}" for n in names]
    out = subprocess.run([path], input="\n".join(lines) + "\n",
                         capture_output=True, text=True, check=True,
                         timeout=240).stdout.splitlines()
    assert len(out) == len(lines)
    answers = [json.loads(line) for line in out]
    k = len(TABLES) * len(BUCKETS)
    return answers[:k], dict(zip(names, answers[k:]))


def test_buckets_match_the_cpp(oracle):
    as_uint = np.array(IDS, dtype=np.uint64)
    as_int = as_uint.view(np.int64)  # What a torch.long id holds.
    i = 0
    for table in TABLES:
        for n in BUCKETS:
            cpp = oracle[0][i]
            i += 1
            assert "error" not in cpp, cpp
            assert bucket_of_ids(as_int, table, n).tolist() == \
                cpp["buckets"], (table, n)
            assert bucket_of_ids(as_uint, table, n).tolist() == \
                cpp["buckets"], (table, n)
    # Not vacuous: the ids spread over the buckets, and the seed matters.
    wide = oracle[0][len(BUCKETS) - 1]["buckets"]
    assert len(set(wide)) > 3000
    other = oracle[0][2 * len(BUCKETS) - 1]["buckets"]
    assert sum(a != b for a, b in zip(wide, other)) > 3000


@pytest.mark.parametrize("name", list(DIGEST_CASES))
def test_digest_with_tables_matches_the_cpp(name, oracle):
    cpp = oracle[1][name]
    assert cpp.get("valid"), cpp
    spec = ps.to_job_spec(DIGEST_CASES[name])
    tensors = [(t.name, t.shape) for t in layout.model_tensors(spec.model)]
    tables = [(t.name, t.dim) for t in spec.model.sparse_tables]
    assert layout.model_digest(tensors, tables) == cpp["digest"]
    assert layout.model_digest(reversed(tensors),
                               list(reversed(tables))) == cpp["digest"]
    if not tables:
        assert layout.model_digest(tensors) == cpp["digest"]
    else:
        assert layout.model_digest(tensors) != cpp["digest"]


def test_digests_tell_tables_apart(oracle):
    digests = [a["digest"] for a in oracle[1].values()]
    assert len(set(digests)) == len(digests)


def _router(num_buckets=8, servers=2):
    spec = v1.JobSpec()
    for name, dim in (("a", 3), ("b", 2)):
        spec.model.sparse_tables.add(name=name, dim=dim,
                                     num_buckets=num_buckets)
    shard_map = v1.ShardMap(servers=[f"s{i}" for i in range(servers)])
    for t in range(2):
        for b in range(num_buckets):
            shard_map.blocks.add(key=bucket_key(t, b), server=(b * 7 + t)
                                 % servers)
    return spec, shard_map, SparseRouter(spec, shard_map)


def test_router_follows_the_shard_map():
    _, _, router = _router()
    ids = np.arange(-50, 50, dtype=np.int64)
    a = router.table("a")
    buckets = bucket_of_ids(ids, 0, 8)
    assert (a.server_of(ids) == (buckets.astype(np.int64) * 7) % 2).all()
    with pytest.raises(InvalidArgumentError, match="'c' is not a sparse "
                       "table of the job .its tables: a, b"):
        router.table("c")


def test_router_refuses_a_map_missing_a_bucket():
    spec, shard_map, _ = _router()
    del shard_map.blocks[3]
    with pytest.raises(InvalidArgumentError, match="bucket 3 of sparse "
                       "table 'a' has no server"):
        SparseRouter(spec, shard_map)


def test_pull_and_push_rows_split_by_server_and_come_back_in_order():
    _, _, router = _router()
    ids = np.unique(np.array([5, -1, 7, 1 << 40, 9, 123456789],
                             dtype=np.int64))
    pull = SparsePull(router, {"a": ids})
    rows = np.arange(len(ids) * 3, dtype=np.float32).reshape(-1, 3)
    seen = []
    for s in range(2):
        replies = []
        for request in pull.requests(s):
            keys = np.frombuffer(request.keys, dtype="<i8")
            seen += keys.tolist()
            positions = np.searchsorted(ids, keys)
            replies.append(v1.SparseRows(
                table=request.table,
                values=rows[positions].astype("<f4").tobytes()))
            assert (router.table("a").server_of(keys) == s).all()
        pull.on_reply(s, replies, f"s{s}")
    assert sorted(seen) == ids.tolist()
    assert np.array_equal(pull.rows["a"], rows)

    grads = rows * 2
    out = push_rows(router, {"a": (ids, grads)}, v1.FP32)
    got = {}
    for s, entries in enumerate(out):
        for e in entries:
            keys = np.frombuffer(e.keys, dtype="<i8")
            values = np.frombuffer(e.values, dtype="<f4").reshape(-1, 3)
            got.update({int(k): v for k, v in zip(keys, values)})
    assert all(np.array_equal(got[int(i)], g) for i, g in zip(ids, grads))
    half = push_rows(router, {"a": (ids, grads)}, v1.BF16)
    assert sum(len(e.values) for es in half for e in es) == len(ids) * 3 * 2
