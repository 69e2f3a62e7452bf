#!/usr/bin/python3
"""The PyTorch baselines of the sparse-table benchmark (issue 27, docs/sparse.md).

  ctr_torch.py --mode single --train TRAIN.tsv --test TEST.tsv [--threads 2]
  ctr_torch.py --mode ddp --world_size 2 --train TRAIN.tsv --test TEST.tsv
  ctr_torch.py --mode single --replay_job JOB.json --train ... --test ...

trains our built-in CTR model (CtrModelSpec in proto/ps/v1/job.proto) on
Criteo-format TSV files (label, 13 integers, 26 categoricals as 32-bit hex,
any of them empty when missing; optionally gzip-compressed) with PyTorch, and
prints one JSON line of results (AUC and log loss on the test file after every
epoch, training seconds, the peak resident memory of every training process).

The model, as ours:
- one embedding table per categorical field (nn.EmbeddingBag(sparse=True),
  sum pooling, one id per field and sample), rows U(-1/sqrt(dim), +...).
  --tables fused (the default) stacks the 26 tables in one EmbeddingBag,
  field f's rows after those of the fields before it: the same model, the
  same initial values and the same updates as --tables per_field (one
  EmbeddingBag per field, as DLRM's reference code), but one sparse gradient
  a step instead of 26, so DDP makes one sparse all-reduce a step instead of
  26 (3.5 to 5 times faster on this 2-core machine);
- a bottom MLP over the 13 dense features, each log(1 + max(x, 0)) (missing:
  0), every layer followed by ReLU, the last of width dim;
- the interaction: DOT is the bottom output concatenated with the pairwise dot
  products of the 27 vectors (bottom output, then the fields) for i < j, in
  row-major order; CONCAT is the bottom output then the 26 field vectors;
- a top MLP (ReLU hidden layers) and a final linear layer of width 1 (the
  logit); sigmoid binary cross-entropy, the mean over the batch;
- dense layers: He-uniform weights U(-sqrt(6/fan_in), +...) for the ReLU
  layers, Xavier-uniform for the final layer, zero biases.

Ids: our cluster keys field f's value v as (f << 33) | (1 << 32) | v and a
missing value as f << 33, with no vocabulary. PyTorch needs row indices, so
each field gets a vocabulary of the codes seen in the training rows read (a
missing value is a code of its own, as in the cluster). A test code absent
from it reads, at evaluation, an initial row of its own that is never
trained: U(-1/sqrt(dim), +...) drawn once per (field, code) (with --replay_job,
the cluster's own initial row), as the cluster reads an id no update ever
created under its default admission (every id at its first update; a table
with min_count or probability admission reads such an id as zeros instead).
These rows are held by the evaluating process only, apart from the tables.
Both modes use the same vocabulary, built once by the parent process before
training starts.

Evaluation: as the cluster's (common/binary_metrics.cc): AUC over the
float32 probabilities sigmoid(logit) (ties counted half), log loss of the
probabilities clamped to [1e-7, 1 - 1e-7], in float64.

Modes:
- single: one training process (--threads intra-op threads, default 2), the
  whole training file shuffled every epoch, batches of --batch_size.
- ddp: --world_size processes (torch.multiprocessing spawn, gloo on
  127.0.0.1, --threads per process, default 1), DistributedDataParallel over
  the whole model with nn.EmbeddingBag(sparse=True): every process holds all
  the tables, and DDP all-reduces the sparse row gradients (gloo's sparse
  all-reduce) and the dense ones, averaged over the processes. Rank r trains
  on rows [r*n/W, (r+1)*n/W) of the training file (the file is taken as
  shuffled; the remainder is dropped), shuffled by (seed, epoch, rank) every
  epoch, batches of --batch_size per process (a global batch of W times it).
- single with --replay_job JOB.json: the cluster's own run of that job
  (ours: the spec bench/ctr_vs_pytorch.sh submits) replayed in one process
  (bench/ctr_replay.py): the global batch of step s is worker 0's batch s
  then worker 1's, from the same sharding and windowed shuffle as the
  workers' CtrSampleStream, the sparse rows start at the servers' initial
  values (SparseRowInit, replicated in numpy) and the dense layers at
  theirs (written by ps-ctr-replay-state, --replay_tool), so that the two
  differ only by float summation order. --batch_size must be the job's
  global batch (num_workers x batch_size) and --epochs its epochs; the
  model and optimizer arguments must match the job's (checked).
Only full batches are trained. Rank 0 evaluates after every epoch while the
others wait; evaluation time is reported apart from training time. DDP in
torch 1.13 takes the sparse gradients of EmbeddingBag(sparse=True) as they
are (each in a bucket of its own, gloo's sparse all-reduce, divided by the
world size): 2 ranks of batch b match 1 process of batch 2b after 5 steps
to 3e-8 with SGD (6e-6 with Adagrad, 2e-5 with SparseAdam, both of which
take ±lr first steps, so float rounding shows more).

Threads: OPENBLAS_NUM_THREADS and OMP_NUM_THREADS are set to --threads for
the training processes, and OMP_WAIT_POLICY to PASSIVE unless set: spinning
OpenMP threads made steps 10 times slower on a shared 2-core machine.

Timing: the parent loads and indexes the data (load_seconds, lines/s) and
writes each process's shard to a temporary directory; the training
processes read their shard, build the model and optimizers, and then time
their epochs. train_seconds is the sum of rank 0's epoch times (training
only). max_rss_bytes_per_rank is the peak resident memory (VmHWM) of each
training process, which never holds the other shards or the raw file.

Optimizers: --sparse_optimizer for the tables: sgd, adagrad (per value,
torch.optim.Adagrad), rowwise_adagrad (one float of state per row, FBGEMM's,
implemented here) or sparse_adam (torch.optim.SparseAdam: lazy, but its bias
correction counts the table's steps, where ours counts each row's own);
--dense_optimizer for the MLPs: sgd, adagrad or adam.
"""

import argparse
import json
import math
import os
import resource
import socket
import sys
import tempfile
import time

import numpy as np
import torch
from torch import nn

import ctr_replay
from ctr_torch_data import (NUM_DENSE, index_fields, index_unseen, load_arrays, load_criteo,
                            save_arrays)

EVAL_BATCH = 4096


# ---------------------------------------------------------------------- data

def prepare_data(args, directory):
    """Loads and indexes both files and writes one shard of the training rows
    per process, and the test rows, into directory. Returns the table sizes,
    the training rows and a dict of load figures."""
    t0 = time.time()
    train = load_criteo(args.train, args.max_train_rows)
    t1 = time.time()
    test = load_criteo(args.test, args.max_test_rows)
    t2 = time.time()
    vocabs = [] if args.replay_job else None
    train_idx, test_idx, sizes = index_fields(train["codes"], test["codes"], vocabs)
    unseen, unseen_fields, unseen_codes = index_unseen(test["codes"], test_idx, sizes)
    t3 = time.time()
    lines = len(train["labels"]) + len(test["labels"])
    world = args.world_size if args.mode == "ddp" else 1
    if args.replay_job:
        save_arrays(directory, "vocab", codes=np.concatenate(vocabs))
        manifest = ctr_replay.write_state(args.replay_tool, args.replay_job,
                                          len(train["labels"]),
                                          os.path.join(directory, "replay"))
        ctr_replay.check_args(args, manifest)
    per_rank = len(train["labels"]) // world
    for r in range(world):
        rows = slice(r * per_rank, (r + 1) * per_rank)
        save_arrays(directory, f"train{r}", labels=train["labels"][rows],
                    dense=train["dense"][rows], idx=train_idx[rows])
    save_arrays(directory, "test", labels=test["labels"], dense=test["dense"], idx=test_idx,
                unseen=unseen)
    save_arrays(directory, "unseen", fields=unseen_fields, codes=unseen_codes)
    figures = {"train_rows": len(train["labels"]), "test_rows": len(test["labels"]),
               "parse_seconds": round(t2 - t0, 3),
               "parse_lines_per_second": round(lines / (t2 - t0)),
               "train_parse_seconds": round(t1 - t0, 3),
               "index_seconds": round(t3 - t2, 3),
               "unseen_test_codes": len(unseen_codes),
               "load_seconds": round(time.time() - t0, 3),
               "table_rows": sizes}
    return sizes, len(train["labels"]), figures


# --------------------------------------------------------------------- model

def mlp(widths, final_linear):
    """Linear layers of the given widths, He-uniform weights and ReLU after
    each; when final_linear, the last layer is Xavier-uniform without ReLU.
    Zero biases."""
    layers = []
    for i in range(len(widths) - 1):
        fan_in, fan_out = widths[i], widths[i + 1]
        linear = nn.Linear(fan_in, fan_out)
        last = final_linear and i + 2 == len(widths)
        bound = math.sqrt(6.0 / (fan_in + fan_out)) if last else math.sqrt(6.0 / fan_in)
        with torch.no_grad():
            linear.weight.uniform_(-bound, bound)
            linear.bias.zero_()
        layers.append(linear)
        if not last:
            layers.append(nn.ReLU())
    return nn.Sequential(*layers)


class FieldTables(nn.Module):
    """One embedding table per field, rows U(-1/sqrt(dim), +1/sqrt(dim)) but
    each table's last row (the unseen row) zeros. Per field: one
    nn.EmbeddingBag(sparse=True) per field (as DLRM). Fused: the tables
    stacked in one nn.EmbeddingBag, field f's rows after those of fields < f
    (the same model and the same updates; one sparse gradient a step)."""

    def __init__(self, table_rows, dim, fused):
        super().__init__()
        self.fused = fused
        sizes = [sum(table_rows)] if fused else table_rows
        self.bags = nn.ModuleList(
            nn.EmbeddingBag(rows, dim, mode="sum", sparse=True) for rows in sizes)
        ends = torch.tensor(table_rows).cumsum(0)
        self.register_buffer("base", ends - torch.tensor(table_rows), persistent=False)
        bound = 1.0 / math.sqrt(dim)
        with torch.no_grad():
            for bag in self.bags:
                bag.weight.uniform_(-bound, bound)
            if fused:
                self.bags[0].weight[ends - 1] = 0.0
            else:
                for bag in self.bags:
                    bag.weight[-1].zero_()

    def forward(self, idx):
        """(batch, fields, dim) vectors of idx (batch, fields) int64 rows."""
        batch, fields = idx.shape
        if self.fused:
            flat = (idx + self.base).view(-1)
            offsets = torch.arange(flat.shape[0], dtype=flat.dtype)
            return self.bags[0](flat, offsets).view(batch, fields, -1)
        offsets = torch.arange(batch, dtype=idx.dtype)
        by_field = idx.t().contiguous()
        return torch.stack([bag(by_field[f], offsets) for f, bag in enumerate(self.bags)],
                           dim=1)


class CtrModel(nn.Module):
    """CtrModelSpec's DLRM-style model (module docstring)."""

    def __init__(self, table_rows, args):
        super().__init__()
        dim, bottom = args.dim, args.bottom
        self.tables = FieldTables(table_rows, dim, args.tables == "fused")
        if bottom and bottom[-1] != dim:
            raise ValueError(f"the bottom MLP's last width {bottom[-1]} is not --dim {dim}")
        self.bottom = mlp([NUM_DENSE] + bottom, final_linear=False) if bottom else None
        vectors = len(table_rows) + (1 if bottom else 0)
        if args.interaction == "dot":
            pairs = torch.triu_indices(vectors, vectors, offset=1)
            self.register_buffer("pair_i", pairs[0], persistent=False)
            self.register_buffer("pair_j", pairs[1], persistent=False)
            top_in = pairs.shape[1] + (dim if bottom else 0)
        else:
            top_in = vectors * dim
        self.interaction = args.interaction
        self.top = mlp([top_in] + args.top + [1], final_linear=True)

    def forward(self, dense, idx, unseen=None):
        """Logits (batch,) of dense (batch, 13) float and idx (batch, fields)
        int64 row indices. unseen: None, or (which (batch, fields) int64,
        rows (n, dim)): where which >= 0, the field's vector is
        rows[which] instead of its table's row (evaluation: test codes
        never trained)."""
        fields = self.tables(idx)
        if unseen is not None:
            which, rows = unseen
            mask = which >= 0
            if bool(mask.any()):
                fields = fields.clone()
                fields[mask] = rows[which[mask]]
        if self.bottom is None:
            head, vectors = [], fields
        else:
            head = [self.bottom(dense)]
            vectors = torch.cat([head[0].unsqueeze(1), fields], dim=1)
        if self.interaction == "dot":
            products = torch.bmm(vectors, vectors.transpose(1, 2))
            features = torch.cat(head + [products[:, self.pair_i, self.pair_j]], dim=1)
        else:
            features = vectors.flatten(1)
        return self.top(features).squeeze(1)


# ---------------------------------------------------------------- optimizers

class RowwiseAdagrad(torch.optim.Optimizer):
    """Row-wise Adagrad on sparse gradients (FBGEMM's): one float of state
    per row, s <- s + mean(g^2 over the row); p <- p - lr g / (sqrt(s) + eps),
    on the rows of the gradient only."""

    def __init__(self, params, lr, eps=1e-10):
        super().__init__(params, {"lr": lr, "eps": eps})

    @torch.no_grad()
    def step(self):
        for group in self.param_groups:
            for p in group["params"]:
                if p.grad is None:
                    continue
                grad = p.grad.coalesce()
                rows, values = grad.indices()[0], grad.values()
                state = self.state[p]
                if "sum" not in state:
                    state["sum"] = torch.zeros(p.shape[0], dtype=p.dtype)
                state["sum"].index_add_(0, rows, values.pow(2).mean(dim=1))
                scale = group["lr"] / (state["sum"][rows].sqrt() + group["eps"])
                p.index_add_(0, rows, -values * scale.unsqueeze(1))


def sparse_optimizer(params, args):
    """The tables' optimizer named by --sparse_optimizer."""
    lr, name = args.sparse_lr, args.sparse_optimizer
    if name == "sgd":
        return torch.optim.SGD(params, lr=lr)
    if name == "adagrad":
        return torch.optim.Adagrad(params, lr=lr, eps=args.eps)
    if name == "rowwise_adagrad":
        return RowwiseAdagrad(params, lr=lr, eps=args.eps)
    return torch.optim.SparseAdam(params, lr=lr, betas=(args.beta1, args.beta2),
                                  eps=args.adam_eps)


def dense_optimizer(params, args):
    """The MLPs' optimizer named by --dense_optimizer."""
    lr, name = args.dense_lr, args.dense_optimizer
    if name == "sgd":
        return torch.optim.SGD(params, lr=lr)
    if name == "adagrad":
        return torch.optim.Adagrad(params, lr=lr, eps=args.eps)
    return torch.optim.Adam(params, lr=lr, betas=(args.beta1, args.beta2), eps=args.adam_eps)


# ------------------------------------------------------------------- metrics

def auc(labels, scores):
    """Area under the ROC curve: the rank statistic, ties counted half."""
    order = np.argsort(scores, kind="mergesort")
    sorted_scores = scores[order]
    _, first, counts = np.unique(sorted_scores, return_index=True, return_counts=True)
    mean_rank = first + (counts + 1) / 2.0  # 1-based ranks, averaged over ties.
    ranks = np.repeat(mean_rank, counts)
    positives = labels[order] > 0.5
    p, n = int(positives.sum()), int((~positives).sum())
    if p == 0 or n == 0:
        return float("nan")
    return float((ranks[positives].sum() - p * (p + 1) / 2.0) / (p * n))


def log_loss(labels, probabilities):
    """Mean binary cross-entropy of the probabilities clamped to [1e-7,
    1 - 1e-7], in float64 (as common/binary_metrics.cc)."""
    p = np.clip(probabilities.astype(np.float64), 1e-7, 1.0 - 1e-7)
    return float(np.mean(-(labels * np.log(p) + (1.0 - labels) * np.log1p(-p))))


@torch.no_grad()
def evaluate(model, test, unseen_rows):
    """(AUC, log loss) of the model on the test arrays, over the float32
    probabilities; unseen_rows (n, dim) are the rows of the test codes
    never trained (test["unseen"]); None: they read the zero row."""
    model.eval()
    probabilities = []
    for start in range(0, len(test["labels"]), EVAL_BATCH):
        rows = slice(start, start + EVAL_BATCH)
        which = torch.from_numpy(test["unseen"][rows].astype(np.int64))
        logits = model(torch.from_numpy(test["dense"][rows]),
                       torch.from_numpy(test["idx"][rows].astype(np.int64)),
                       unseen=None if unseen_rows is None else (which, unseen_rows))
        probabilities.append(torch.sigmoid(logits).numpy())
    model.train()
    probabilities = np.concatenate(probabilities)
    return auc(test["labels"], probabilities), log_loss(test["labels"], probabilities)


# ------------------------------------------------------------------ training

def train_epoch(model, optimizers, shard, batch, rng, order=None):
    """One pass over the shard in a random order (full batches only), or,
    given `order` (--replay_job: the epoch's samples, batch after batch),
    in that order."""
    loss_fn = nn.BCEWithLogitsLoss()
    replay = order is not None
    if not replay:
        order = rng.permutation(len(shard["labels"]))
    for s in range(len(order) // batch):
        rows = order[s * batch:(s + 1) * batch]
        # A batch's samples in the order of the file (faster gathers), or,
        # replaying, in the cluster's order (the same sums' order).
        rows = np.asarray(rows) if replay else np.sort(rows)
        dense = torch.from_numpy(shard["dense"][rows])
        idx = torch.from_numpy(shard["idx"][rows].astype(np.int64))
        labels = torch.from_numpy(shard["labels"][rows])
        for opt in optimizers:
            opt.zero_grad(set_to_none=True)
        loss_fn(model(dense, idx), labels).backward()
        for opt in optimizers:
            opt.step()


def build_model(args, table_rows):
    """The model (seeded by --seed, so every rank builds the same) and its
    two optimizers; under ddp the model is wrapped in DDP."""
    torch.manual_seed(args.seed)
    model = CtrModel(table_rows, args)
    tables = list(model.tables.parameters())
    mlps = [p for name, p in model.named_parameters() if not name.startswith("tables.")]
    if args.mode == "ddp":
        from torch.nn.parallel import DistributedDataParallel
        model = DistributedDataParallel(model)
    return model, [sparse_optimizer(tables, args), dense_optimizer(mlps, args)]


# ---------------------------------------------------------- unseen test codes

def unseen_rows(args, directory, manifest, dim):
    """The rows of the test codes never trained (prepare_data's "unseen"
    arrays): the cluster's initial rows under --replay_job, else drawn from
    U(-1/sqrt(dim), +...) with --seed."""
    unseen = load_arrays(directory, "unseen", ("fields", "codes"))
    fields, codes = unseen["fields"], unseen["codes"]
    if manifest is None:
        bound = 1.0 / math.sqrt(dim)
        rng = np.random.default_rng([args.seed, 2])
        rows = rng.uniform(-bound, bound, (len(codes), dim)).astype(np.float32)
    else:
        rows = np.empty((len(codes), dim), np.float32)
        for f in np.unique(fields):
            chosen = fields == f
            rows[chosen] = ctr_replay.field_rows(manifest, int(f), codes[chosen])
    return torch.from_numpy(rows)


def run_rank(rank, args, directory, table_rows, port, queue):
    """A training process: reads its shard, trains --epochs epochs, and puts
    (rank, epoch records, max RSS bytes) on the queue."""
    torch.set_num_threads(args.threads)
    ddp = args.mode == "ddp"
    if ddp:
        import torch.distributed as dist
        dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}",
                                rank=rank, world_size=args.world_size)
    keys = ("labels", "dense", "idx")
    shard = load_arrays(directory, f"train{rank}", keys)
    test = load_arrays(directory, "test", keys + ("unseen",)) if rank == 0 else None
    model, optimizers = build_model(args, table_rows)
    plain = model.module if ddp else model
    manifest = order = None
    if args.replay_job:
        with open(os.path.join(directory, "replay", "manifest.json")) as f:
            manifest = json.load(f)
        if "order" in args.replay_parts:
            order = ctr_replay.read_order(os.path.join(directory, "replay"))
            per_epoch = manifest["steps_per_epoch"] * args.batch_size
        if "values" in args.replay_parts:
            ctr_replay.set_initial_values(plain, manifest, directory, table_rows)
        else:
            manifest = None  # PyTorch's own initial values, unseen rows too.
    unseen = None
    if rank == 0 and args.unseen_rows == "initial":
        unseen = unseen_rows(args, directory, manifest, args.dim)
    records = []
    for epoch in range(1, args.epochs + 1):
        rng = np.random.default_rng([args.seed, epoch, rank])
        t0 = time.time()
        train_epoch(model, optimizers, shard, args.batch_size, rng,
                    None if order is None else order[(epoch - 1) * per_epoch:epoch * per_epoch])
        seconds = time.time() - t0
        if rank == 0:
            t1 = time.time()
            test_auc, test_loss = evaluate(plain, test, unseen)
            records.append({"epoch": epoch, "auc": round(test_auc, 6),
                            "log_loss": round(test_loss, 6), "seconds": round(seconds, 3),
                            "eval_seconds": round(time.time() - t1, 3)})
            print(f"epoch {epoch}: test AUC {test_auc:.5f}, log loss {test_loss:.5f}, "
                  f"train {seconds:.1f} s", file=sys.stderr, flush=True)
        if ddp:
            dist.barrier()
    if ddp:
        dist.destroy_process_group()
    queue.put((rank, records, peak_rss_bytes()))


def peak_rss_bytes():
    """This process's peak resident memory: VmHWM of /proc/self/status (its
    own address space's; getrusage's ru_maxrss survives exec, so a spawned
    process would report its parent's resident memory at the fork)."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def free_port():
    """A free TCP port on 127.0.0.1."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def train(args, directory, table_rows):
    """Spawns the training processes; returns (rank 0's epoch records, max RSS
    bytes per rank)."""
    import torch.multiprocessing as mp

    world = args.world_size if args.mode == "ddp" else 1
    os.environ["OPENBLAS_NUM_THREADS"] = str(args.threads)
    os.environ["OMP_NUM_THREADS"] = str(args.threads)
    # Idle OpenMP threads sleep rather than spin: spinning threads of two
    # processes (or of other programs) on few cores slow every step by 10x.
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
    ctx = mp.get_context("spawn")
    queue = ctx.SimpleQueue()
    procs = mp.spawn(run_rank, args=(args, directory, table_rows, free_port(), queue),
                     nprocs=world, join=False)
    while not procs.join():  # Raises when a process fails.
        pass
    results = sorted(queue.get() for _ in range(world))  # Small: fits the pipe.
    return results[0][1], [r[2] for r in results]


# ---------------------------------------------------------------------- main

def widths(text):
    """'64,16' -> [64, 16]; '' -> []."""
    return [int(w) for w in text.split(",") if w.strip()]


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--mode", choices=("single", "ddp"), default="single")
    p.add_argument("--world_size", type=int, default=2, help="ddp processes (default 2)")
    p.add_argument("--train", required=True, help="training file (.tsv or .tsv.gz)")
    p.add_argument("--test", required=True, help="test file (.tsv or .tsv.gz)")
    p.add_argument("--max_train_rows", type=int, default=0, help="0: all")
    p.add_argument("--max_test_rows", type=int, default=0, help="0: all")
    p.add_argument("--epochs", type=int, default=1)
    p.add_argument("--batch_size", type=int, default=256, help="per process")
    p.add_argument("--dim", type=int, default=16, help="embedding row size")
    p.add_argument("--bottom", type=widths, default=[64, 16], help="bottom MLP widths")
    p.add_argument("--top", type=widths, default=[64, 32], help="top MLP hidden widths")
    p.add_argument("--interaction", choices=("dot", "concat"), default="dot")
    p.add_argument("--tables", choices=("fused", "per_field"), default="fused",
                   help="fused: the 26 tables in one nn.EmbeddingBag, one sparse "
                   "all-reduce a step (default); per_field: one nn.EmbeddingBag each")
    p.add_argument("--sparse_optimizer", default="adagrad",
                   choices=("sgd", "adagrad", "rowwise_adagrad", "sparse_adam"))
    p.add_argument("--sparse_lr", "--lr", type=float, default=0.05)
    p.add_argument("--dense_optimizer", choices=("sgd", "adagrad", "adam"), default="adagrad")
    p.add_argument("--dense_lr", type=float, default=0.0, help="0: --sparse_lr")
    p.add_argument("--eps", type=float, default=1e-10, help="Adagrad's epsilon")
    p.add_argument("--beta1", type=float, default=0.9)
    p.add_argument("--beta2", type=float, default=0.999)
    p.add_argument("--adam_eps", type=float, default=1e-8)
    p.add_argument("--threads", type=int, default=0,
                   help="threads per training process (0: 2 single, 1 ddp)")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--unseen_rows", choices=("initial", "zeros"), default="initial",
                   help="what a test code absent from the training rows reads: an initial "
                   "row never trained (default, as our cluster) or zeros (as a table "
                   "with admission, and this script before 2026-11-27)")
    p.add_argument("--replay_job", default=None,
                   help="a CTR job spec (JSON) whose cluster run to replay exactly: its "
                   "batches and initial values (--mode single only; module docstring)")
    p.add_argument("--replay_parts", choices=("order,values", "order", "values"),
                   default="order,values", help="what --replay_job replays: the "
                   "cluster's batches, its initial values, or both (default)")
    p.add_argument("--replay_tool", default=os.path.join(
        os.path.dirname(os.path.abspath(__file__)), "..", "build", "bench",
        "ps-ctr-replay-state"), help="ps-ctr-replay-state (default: build/bench/'s)")
    p.add_argument("--work_dir", default=None, help="where the shards are written "
                   "(a temporary directory, removed at the end; default: $TMPDIR)")
    args = p.parse_args(argv)
    if args.bottom and args.bottom[-1] != args.dim:
        p.error(f"--bottom's last width ({args.bottom[-1]}) must equal --dim ({args.dim})")
    if min(args.world_size, args.epochs, args.batch_size, args.dim) < 1:
        p.error("--world_size, --epochs, --batch_size and --dim must be at least 1")
    if args.dense_lr <= 0:
        args.dense_lr = args.sparse_lr
    if args.threads <= 0:
        args.threads = 2 if args.mode == "single" else 1
    return args


def main(argv=None):
    args = parse_args(argv)
    with tempfile.TemporaryDirectory(dir=args.work_dir, prefix="ctr_torch.") as directory:
        table_rows, train_rows, figures = prepare_data(args, directory)
        print(f"loaded {figures['train_rows']} + {figures['test_rows']} lines in "
              f"{figures['load_seconds']} s ({figures['parse_lines_per_second']} lines/s "
              f"parsed), {sum(table_rows)} table rows", file=sys.stderr, flush=True)
        records, rss = train(args, directory, table_rows)
    world = args.world_size if args.mode == "ddp" else 1
    steps = train_rows // world // args.batch_size
    result = {"mode": args.mode, "world_size": world, "threads": args.threads,
              "replay": bool(args.replay_job), "unseen_rows": args.unseen_rows,
              "replay_parts": args.replay_parts if args.replay_job else "",
              "tables": args.tables,
              "train_seconds": round(sum(r["seconds"] for r in records), 3),
              "epochs": records, "max_rss_bytes_per_rank": rss,
              "samples": steps * args.batch_size * world,
              "batch_size": args.batch_size, "dim": args.dim,
              "sparse_optimizer": args.sparse_optimizer, "sparse_lr": args.sparse_lr,
              "dense_optimizer": args.dense_optimizer, "dense_lr": args.dense_lr}
    result.update(figures)
    print(json.dumps(result), flush=True)


if __name__ == "__main__":
    main()
