"""The cluster's batches and initial values, for bench/ctr_torch.py --replay_job
(docs/benchmarks.md, "CTR against PyTorch").

A single PyTorch process given these trains exactly what our cluster trains:
the same samples in the same global batches (step s: worker 0's batch s,
then worker 1's, ...), from the same initial sparse rows and dense tensors,
with the same optimizers; the two then differ only by the order of float
sums (and the cluster's float32 BSP average of the workers' gradients).

- order and dense values: written by the C++ tool ps-ctr-replay-state
  (bench/ctr_replay_state.cc) from the job spec, with the cluster's own code
  (CtrSampleStream::WindowOrder, InitialBlockValues);
- sparse rows: SparseRowInit (server/sparse_row_init.cc) replicated here in
  numpy, bit for bit (tests/python/test_ctr_replay.py checks it against the
  tool's --rows): row `id` of table t holds, for value i,
  h = mix(mix(stream ^ mix(id)) ^ mix(i)), stream = combine(combine(
  mix(salt), seed), t), mix splitmix64's finalizer; UNIFORM is
  float32((2 u - 1) scale) with u = (h >> 11) 2^-53.
"""

import json
import math
import os
import subprocess

import numpy as np
import torch
from torch import nn

U64 = np.uint64
INIT_SALT = 0x5BA7E1F0C0FFEE01
ROWS_PER_CHUNK = 1 << 18  # Keys whose rows are computed at once.


def mix64(x):
    """SparseMix64 (splitmix64's finalizer) on a uint64 array (wraps)."""
    x = x + U64(0x9E3779B97F4A7C15)
    x = (x ^ (x >> U64(30))) * U64(0xBF58476D1CE4E5B9)
    x = (x ^ (x >> U64(27))) * U64(0x94D049BB133111EB)
    return x ^ (x >> U64(31))


def combine(h, word):
    """SparseHashCombine: mix(h ^ mix(word)), uint64 arrays."""
    return mix64(h ^ mix64(word))


def unit_double(bits):
    """SparseUnitDouble: [0, 1) from the top 53 bits."""
    return (bits >> U64(11)).astype(np.float64) * (1.0 / (1 << 53))


def sparse_rows(seed, table_index, ids, dim, kind="UNIFORM", scale=None, out=None):
    """The initial rows (len(ids), dim) float32 of table `table_index`'s ids
    in a job of seed `seed`, as SparseRowInit::Fill makes them, written into
    `out` when given (a float32 array of that shape) and returned. scale
    None: the documented default (1/sqrt(dim) for UNIFORM, 0.01 for NORMAL)."""
    ids = np.asarray(ids, dtype=U64)
    if out is None:
        out = np.empty((len(ids), dim), np.float32)
    if scale is None:
        scale = 0.01 if kind == "NORMAL" else 1.0 / math.sqrt(dim)
    if kind == "ZEROS" or scale == 0:
        out[...] = 0.0
        return out
    one = np.ones(1, dtype=U64)
    stream = combine(combine(mix64(one * U64(INIT_SALT)), one * U64(seed)),
                     one * U64(table_index))
    index_mix = mix64(np.arange(dim, dtype=U64))
    for start in range(0, len(ids), ROWS_PER_CHUNK):
        row = combine(stream, ids[start:start + ROWS_PER_CHUNK])
        h = mix64(row[:, None] ^ index_mix[None, :])
        if kind == "UNIFORM":
            values = (2.0 * unit_double(h) - 1.0) * scale
        else:  # NORMAL: Box-Muller, u1 in (0, 1].
            u1 = 1.0 - unit_double(h)
            u2 = unit_double(mix64(h))
            values = scale * np.sqrt(-2.0 * np.log(u1)) * np.cos(2.0 * np.pi * u2)
        out[start:start + len(row)] = values
    return out


def field_keys(field, codes):
    """Our cluster's ids of field `field`'s codes (ctr_torch_data: (1 << 32)
    | value, 0 when missing): (field << 33) | code."""
    return (np.asarray(codes, dtype=np.int64).astype(U64)) | U64(field << 33)


def field_rows(manifest, field, codes, out=None):
    """The initial rows of field `field`'s codes in the job of `manifest`
    (into `out` when given, as sparse_rows)."""
    table = manifest["field_tables"][field]
    spec = manifest["tables"][table]
    return sparse_rows(manifest["seed"], table, field_keys(field, codes), spec["dim"],
                       spec["init"], spec["scale"], out)


def write_state(tool, job, train_samples, directory):
    """Runs ps-ctr-replay-state for `job` and a training file of
    train_samples samples into directory; returns the manifest."""
    os.makedirs(directory, exist_ok=True)
    subprocess.run([tool, "--job", job, "--train_samples", str(train_samples),
                    "--out", directory], check=True)
    with open(os.path.join(directory, "manifest.json")) as f:
        return json.load(f)


def read_order(directory):
    """order.i64 as an int64 array (memory-mapped)."""
    return np.memmap(os.path.join(directory, "order.i64"), dtype="<i8", mode="r")


def read_dense(directory, manifest):
    """{tensor name: float32 array of its shape} from dense.f32."""
    values = np.fromfile(os.path.join(directory, "dense.f32"), dtype="<f4")
    out = {}
    for t in manifest["dense"]:
        n = int(np.prod(t["shape"]))
        out[t["name"]] = values[t["offset"]:t["offset"] + n].reshape(t["shape"])
    return out


def check_job(job, args):
    """Refuses (ValueError) a job spec (JSON as psctl submit reads it) whose
    optimizers or model differ from ctr_torch.py's arguments, or which
    replay does not model (admission, eviction, SSP or ASP, a learning-rate
    schedule, gradient clipping)."""
    with open(job) as f:
        spec = json.load(f)

    def get(obj, name, default=None):
        camel = name.split("_")[0] + "".join(w.title() for w in name.split("_")[1:])
        return obj.get(name, obj.get(camel, default))

    def same_name(json_name, arg):  # "rowwiseAdagrad" or "rowwise_adagrad"
        return json_name.replace("_", "").lower() == arg.replace("_", "").lower()

    model = spec["model"]
    problems = []
    for table in get(model, "sparse_tables"):
        opt = table["optimizer"]
        kind = next(iter(opt))
        lr = get(opt[kind], "learning_rate", 0.0)
        if (not same_name(kind, args.sparse_optimizer)
                or abs(lr - args.sparse_lr) > 1e-9 or table["dim"] != args.dim
                or get(opt[kind], "epsilon", 0.0) not in (0.0, args.eps)):
            problems.append(f"table {table['name']}: {kind} {lr} dim {table['dim']}")
        if table.get("admission") or table.get("eviction"):
            problems.append(f"table {table['name']}: admission and eviction are not replayed")
    for name in ("schedule", "gradient_clipping", "consistency"):
        value = get(spec, name)
        if value and value != {"model": "BSP"}:
            problems.append(f"{name} {value}: only BSP without a schedule or clipping")
    dense = spec["optimizer"]
    kind = next(iter(dense))
    if not same_name(kind, args.dense_optimizer) or abs(
            get(dense[kind], "learning_rate", 0.0) - args.dense_lr) > 1e-9:
        problems.append(f"dense optimizer {dense}")
    ctr = model["ctr"]
    if (list(get(ctr, "bottom_mlp", [])) != args.bottom
            or list(get(ctr, "top_mlp", [])) != args.top
            or get(ctr, "interaction", "DOT").lower() != args.interaction):
        problems.append(f"model {ctr}")
    if problems:
        raise ValueError(f"{job} does not match the arguments: " + "; ".join(problems))


def check_args(args, manifest):
    """Refuses (ValueError) a --replay_job whose job the arguments do not
    describe: the model, the optimizers, the global batch, the epochs."""
    if args.mode != "single":
        raise ValueError("--replay_job needs --mode single")
    global_batch = manifest["batch_size"] * manifest["num_workers"]
    if args.batch_size != global_batch or args.epochs != manifest["epochs"]:
        raise ValueError(f"--batch_size {args.batch_size} --epochs {args.epochs}: the job "
                         f"trains {manifest['epochs']} epochs of {manifest['num_workers']} x "
                         f"{manifest['batch_size']} = {global_batch} samples a step")
    check_job(args.replay_job, args)


@torch.no_grad()
def set_initial_values(model, manifest, directory, table_rows):
    """Sets ctr_torch.CtrModel `model`'s table rows (the vocabularies of
    directory/vocab.codes.npy, table_rows as ctr_torch's) and dense layers
    to the cluster's initial values; each table's last row (the unseen
    codes') stays as it is."""
    vocab = np.load(os.path.join(directory, "vocab.codes.npy"))
    tables, start = model.tables, 0
    for f, rows in enumerate(table_rows):
        n = rows - 1  # The last row: unseen codes, read apart at evaluation.
        if tables.fused:
            base = int(tables.base[f])
            target = tables.bags[0].weight.detach().numpy()[base:base + n]
        else:
            target = tables.bags[f].weight.detach().numpy()[:n]
        field_rows(manifest, f, vocab[start:start + n], out=target)
        start += n
    dense = read_dense(os.path.join(directory, "replay"), manifest)
    used = set()
    for prefix, layers in (("bottom", model.bottom), ("top", model.top)):
        linears = [] if layers is None else [m for m in layers if isinstance(m, nn.Linear)]
        for i, linear in enumerate(linears):
            weight, bias = dense[f"{prefix}{i}.weight"], dense[f"{prefix}{i}.bias"]
            if weight.shape != (linear.in_features, linear.out_features):
                raise ValueError(f"{prefix}{i}.weight: the job's is {weight.shape}")
            linear.weight.copy_(torch.from_numpy(np.ascontiguousarray(weight.T)))
            linear.bias.copy_(torch.from_numpy(bias))
            used.update((f"{prefix}{i}.weight", f"{prefix}{i}.bias"))
    if used != set(dense):
        raise ValueError(f"the job's dense tensors {sorted(dense)} are not the model's")
