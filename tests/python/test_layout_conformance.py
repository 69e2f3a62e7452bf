"""Every fact the Python SDK shares with the cluster's C++, computed both
ways over a table of cases: the SDK's answer (paramserver.layout,
paramserver._cluster's 16-bit encoders) against the C++ one, printed by
tests/python/layout_oracle.cc (PS_LAYOUT_ORACLE) from the same JSON.

Per job spec: the model's tensors (names, shapes, which ones worker 0
seeds), the model digest, the derived block size, the block size the
coordinator writes into the spec, the blocks (key, tensor, offset, values),
the staleness bound, and each server's blocks under the coordinator's shard
map (PlanShards). Per float32 bit pattern: the FP16 and BF16 wire
encodings. Every spec in the table is one the coordinator accepts.
"""

import json
import os
import random
import struct
import subprocess

import numpy as np
import pytest

import paramserver as ps
from paramserver import layout
from paramserver._cluster import encode_bf16, encode_fp16

BASE = {"name": "conformance", "epochs": 1, "batchSize": 8, "numWorkers": 1,
        "numServers": 1, "optimizer": {"sgd": {"learningRate": 0.1}}}
DATASET = {"format": "IDX", "trainImages": "a", "trainLabels": "b",
           "testImages": "c", "testLabels": "d"}


def external(tensors, **spec):
    """An EXTERNAL model of (name, shape) or (name, shape, decl) tensors."""
    decls = []
    for t in tensors:
        decl = {"name": t[0], "shape": list(t[1])}
        if len(t) > 2:
            decl.update(t[2])
        decls.append(decl)
    return {**BASE, "model": {"kind": "EXTERNAL", "tensors": decls}, **spec}


def builtin(model, **spec):
    return {**BASE, "dataset": DATASET, "model": model, **spec}


MLP = {"kind": "MLP", "inputDim": 784, "numClasses": 10,
       "hiddenLayers": [256, 128]}
CNN = {"kind": "CNN", "inputDim": 784, "numClasses": 10,
       "image": {"height": 28, "width": 28, "channels": 1},
       "convLayers": [{"filters": 4, "kernelSize": 3},
                      {"filters": 8, "kernelSize": 5}],
       "hiddenLayers": [16]}


def _cases():
    c = {}
    # One tensor against one block: exactly one, one value over, one under.
    for n, b in [(256, 256), (257, 256), (255, 256), (1, 256), (1, 1),
                 (262144, 0), (262145, 0), (262143, 0), (7, 1)]:
        c[f"one_tensor_{n}_block_{b}"] = external([("w", (n,))],
                                                  blockElems=b, numServers=1)
    c["exact_block_2d"] = external([("w", (16, 16))], blockElems=256)
    c["block_larger_than_model"] = external(
        [("w", (3, 3)), ("b", (3,))], blockElems=1048576)
    c["rank_8"] = external([("w", (1, 2, 1, 2, 1, 2, 1, 2)), ("v", (5,))],
                           blockElems=3, numServers=2)
    # Many small tensors, one block each, on several servers.
    c["many_small"] = external([(f"t{i:04d}", (3,)) for i in range(500)],
                               numServers=4)
    c["many_small_block_1"] = external(
        [(f"t{i}", (2,)) for i in range(300)], blockElems=1, numServers=7)
    # A huge tensor split over many blocks and servers.
    for servers in (1, 2, 3, 16, 1024):
        c[f"huge_{servers}_servers"] = external(
            [("embedding", (2048, 2048)), ("bias", (2048,))],
            numServers=servers)
    c["huge_block_256"] = external([("w", (4096, 1024))], blockElems=256,
                                   numServers=5)
    # Names (printable ASCII): the digest sorts them bytewise; the blocks
    # keep the spec's order.
    c["names_sorted_bytewise"] = external(
        [("b", (2,)), ("a", (3,)), ("B", (1,)), ("_x", (4,)), ("a.b", (2, 2)),
         ("z\"q", (2,)), ("back\\slash", (3,)), ("~", (1,)), ("0", (2,)),
         ("a/b{c}[0]", (1,)), ("!", (5,))], numServers=2)
    c["long_name"] = external([("n" * 256, (10,))])
    # Inits: only FROM_WORKER and an unset init are worker 0's to seed.
    c["inits"] = external(
        [("z", (4,), {"init": "ZEROS"}),
         ("c", (4,), {"init": "CONSTANT", "value": 0.5}),
         ("h", (4, 4), {"init": "HE_UNIFORM"}),
         ("x", (4, 4), {"init": "XAVIER_UNIFORM", "fanIn": 3, "fanOut": 5}),
         ("f", (4,), {"init": "FROM_WORKER"}), ("u", (4,))],
        blockElems=5, numServers=3)
    # Module buffers: tensors of the job, left out of the digest.
    c["buffers"] = external(
        [("bn.weight", (4,)), ("bn.running_mean", (4,), {"buffer": True}),
         ("bn.running_var", (4,), {"buffer": True, "init": "CONSTANT",
                                   "value": 1}),
         ("bn.num_batches_tracked", (), {"buffer": True}), ("fc.bias", (3,))],
        blockElems=3, numServers=2)
    # Built-in models.
    c["mlp_1_server"] = builtin(MLP, numServers=1)
    for servers in (2, 3, 5, 16):
        c[f"mlp_{servers}_servers"] = builtin(MLP, numServers=servers)
    c["mlp_no_hidden"] = builtin({**MLP, "hiddenLayers": []}, numServers=2)
    c["mlp_width_1"] = builtin({**MLP, "hiddenLayers": [1, 1]})
    c["softmax"] = builtin({"kind": "SOFTMAX_REGRESSION", "inputDim": 784,
                            "numClasses": 10}, numServers=2)
    c["cnn"] = builtin(CNN, numServers=2)
    c["cnn_blocks_256"] = builtin(CNN, blockElems=256, numServers=3)
    c["cnn_rgb_odd"] = builtin(
        {**CNN, "inputDim": 7 * 5 * 3,
         "image": {"height": 7, "width": 5, "channels": 3},
         "convLayers": [{"filters": 2, "kernelSize": 1}]}, numServers=4)
    # Consistency models: the staleness bound a worker's cache uses.
    for name, consistency in [
            ("bsp", {"model": "BSP"}), ("unset", {}),
            ("ssp_0", {"model": "SSP", "staleness": 0}),
            ("ssp_3", {"model": "SSP", "staleness": 3, "workerCache": True}),
            ("asp", {"model": "ASP"})]:
        c[f"consistency_{name}"] = external([("w", (10,))],
                                            consistency=consistency)
    # The derived block size across server counts.
    for servers in (1, 2, 3, 4, 6, 7, 8, 9, 31, 64, 1000):
        c[f"derived_{servers}_servers"] = external(
            [("w", (1000, 300)), ("b", (300,)), ("v", (300, 7))],
            numServers=servers)
    # Random models, block sizes and server counts (reproducible).
    rng = random.Random(20261126)
    for i in range(150):
        tensors = []
        for t in range(rng.randint(1, 40)):
            rank = rng.randint(1, 4)
            shape = tuple(rng.choice((1, 2, 3, rng.randint(1, 300)))
                          for _ in range(rank))
            tensors.append((f"layer{rng.randint(0, 999)}.{t}", shape))
        block = rng.choice((0, 0, 1, rng.randint(1, 5000), 262144))
        numel = sum(int(np.prod(shape)) for _, shape in tensors)
        if block and numel // block + len(tensors) > 65536:
            block = 0  # Past the most blocks a job may have.
        c[f"random_{i:03d}"] = external(tensors, blockElems=block,
                                        numServers=rng.randint(1, 12))
    return c


CASES = _cases()

# Float32 bit patterns for the 16-bit encodings: zeros, infinities, NaNs,
# the formats' largest and smallest values, halfway points (ties to even),
# then random patterns.
_SPECIAL = [0x00000000, 0x80000000, 0x3F800000, 0xBF800000, 0x7F800000,
            0xFF800000, 0x7FC00000, 0x7FC5EED0, 0xFFC00001, 0x7F800001,
            0x477FE000, 0x477FF000, 0x477FEFFF, 0x47800000, 0xC77FF000,
            0x7F7FFFFF, 0xFF7FFFFF, 0x33800000, 0x33000000, 0x33000001,
            0x38800000, 0x387FFFFF, 0x3F808000, 0x3F818000, 0x3F807FFF,
            0x3F800001, 0x3F801000, 0x3F803000, 0x00000001, 0x807FFFFF,
            0x7F7F8000, 0x7F7F7FFF]


def _float_bits():
    rng = random.Random(7)
    return _SPECIAL + [rng.getrandbits(32) for _ in range(4000)]


@pytest.fixture(scope="module")
def oracle():
    path = os.environ.get("PS_LAYOUT_ORACLE") or os.path.join(
        os.environ.get("PS_BUILD_DIR", "build"), "tests", "python",
        "ps_layout_oracle")
    if not os.access(path, os.X_OK):
        pytest.skip(f"{path} is not built")
    names = list(CASES)
    lines = [f"spec {json.dumps(CASES[n])}" for n in names]
    lines.append("floats " + " ".join(f"{b:08x}" for b in _float_bits()))
    out = subprocess.run([path], input="\n".join(lines) + "\n",
                         capture_output=True, text=True, check=True,
                         timeout=240).stdout.splitlines()
    assert len(out) == len(lines)
    answers = [json.loads(line) for line in out]
    return dict(zip(names, answers)), answers[-1]


@pytest.mark.parametrize("name", list(CASES))
def test_layout_matches_the_cpp(name, oracle):
    cpp = oracle[0][name]
    assert "error" not in cpp, cpp.get("error")
    assert cpp["valid"], cpp["invalid"]
    spec = ps.to_job_spec(CASES[name])
    tensors = layout.model_tensors(spec.model)
    assert [[t.name, list(t.shape), t.from_worker, t.buffer]
            for t in tensors] == [
        [t["name"], t["shape"], t["from_worker"], t["buffer"]]
        for t in cpp["tensors"]]
    named = [(t.name, t.shape) for t in tensors if not t.buffer]
    assert layout.model_digest(named) == cpp["digest"]
    assert layout.model_digest(reversed(named)) == cpp["digest"]
    assert layout._derive_block_elems(tensors, spec.num_servers) == \
        cpp["derived_block_elems"]
    # As the worker gets it: from the submitted spec (derived when unset)
    # and from the spec the coordinator completed.
    block_elems = layout.effective_block_elems(spec, tensors,
                                               spec.num_servers)
    assert block_elems == cpp["block_elems"]
    spec.block_elems = cpp["block_elems"]
    assert layout.effective_block_elems(spec, tensors, 0) == block_elems
    blocks = layout.split_into_blocks(tensors, block_elems)
    assert [[b.key, b.tensor, b.offset, b.numel] for b in blocks] == \
        cpp["blocks"]
    assert all(b.key == layout.block_key(b.tensor, b.offset // block_elems)
               for b in blocks)
    assert layout.effective_staleness(spec.consistency) == cpp["staleness"]
    placement = {k: s for s, keys in enumerate(cpp["servers"]) for k in keys}
    grouped = layout.server_blocks(blocks, len(cpp["servers"]), placement)
    assert [[b.key for b in g] for g in grouped] == cpp["servers"]


def test_table_covers_the_edge_cases(oracle):
    """The table holds what it claims: a tensor of exactly one block, one
    value over, many tensors, a tensor split over hundreds of blocks, every
    server count from 1 to 9, every consistency model and a sharded
    model whose servers all hold blocks."""
    answers = oracle[0]
    blocks = {n: a["blocks"] for n, a in answers.items()}
    assert len(blocks["one_tensor_256_block_256"]) == 1
    assert [b[3] for b in blocks["one_tensor_257_block_256"]] == [256, 1]
    assert len(answers["many_small"]["tensors"]) == 500
    assert len(blocks["huge_1024_servers"]) > 1000
    assert {len(a["servers"]) for a in answers.values()} >= set(range(1, 10))
    assert {a["staleness"] for a in answers.values()} >= {0, 3, 1 << 40}
    assert all(answers["huge_16_servers"]["servers"])
    assert len(CASES) >= 200


def test_sixteen_bit_encodings_match_the_cpp(oracle):
    cpp = oracle[1]
    bits = np.array(_float_bits(), dtype=np.uint32)
    values = bits.view(np.float32)
    fp16 = encode_fp16(values).tolist()
    bf16 = encode_bf16(values).tolist()
    for i, b in enumerate(bits.tolist()):
        assert (fp16[i], bf16[i]) == (cpp["fp16"][i], cpp["bf16"][i]), \
            f"float32 bits {b:08x} ({struct.unpack('<f', struct.pack('<I', b))[0]})"
