#!/usr/bin/python3
"""A user's own recurrent PyTorch model through the cluster against PyTorch
alone (docs/benchmarks.md, "A PyTorch LSTM against DDP"): an LSTM reading a
Fashion-MNIST image row by row (28 steps of 28 pixels, 64 hidden units, a
linear classifier: 24,714 parameters), Adam, BATCH samples per worker,
trained

  ours    torch_rnn_vs_ddp.py submit ...; torch_rnn_vs_ddp.py worker ... (x2)
          2 paramserver.torch.Worker processes on a cluster of 2 servers
  ddp     torch_rnn_vs_ddp.py ddp ...: DistributedDataParallel, gloo, 2 ranks
  single  torch_rnn_vs_ddp.py single ...: one process, batch 2 * BATCH

Every system sees the same batches: worker / rank w trains on
``paramserver.data.epoch_order(n, 2, w, seed, epoch)`` cut into batches, and
the single process on both ranks' batch of each step together; the initial
values are torch.manual_seed(seed)'s. So the three compute the same
updates (BSP's average of the workers' gradients is DDP's), and their
accuracies differ only by floating-point rounding.

Each prints one JSON line: training seconds (the training loops only: no
data loading, no evaluation), the test accuracy after the last epoch, and
per-step means in ms of where worker / rank 0's loop spent its time:
``compute`` (forward and backward; DDP's all-reduce runs inside backward),
``step`` (``worker.step()`` / ``optimizer.step()``), ``wait`` (getting the
next batch: ours waits there for the push and the next clock's pull).
``table`` prints the Markdown table of medians from the JSON lines.
"""
import argparse
import cProfile
import json
import os
import statistics
import sys
import time

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

DATA = os.environ.get("PS_FASHION_MNIST_DIR",
                      "/usr/share/datasets/fashion-mnist")
MEAN, STD = 0.2860, 0.3530


class RowLstm(nn.Module):
    """An LSTM over an image's rows; the classifier reads the last state."""

    def __init__(self, hidden: int = 64):
        super().__init__()
        self.lstm = nn.LSTM(28, hidden, batch_first=True)
        self.head = nn.Linear(hidden, 10)

    def forward(self, x):
        out, _ = self.lstm(x.view(-1, 28, 28))
        return self.head(out[:, -1])


def load(split: str, limit: int = 0):
    from paramserver.data import load_idx
    prefix = "train" if split == "train" else "t10k"
    x, y = load_idx(f"{DATA}/{prefix}-images-idx3-ubyte.gz",
                    f"{DATA}/{prefix}-labels-idx1-ubyte.gz", limit)
    x = (torch.from_numpy(x).reshape(-1, 28, 28) - MEAN) / STD
    return x, torch.from_numpy(y)


def evaluate(model, x, y, batch: int = 1000) -> float:
    model.eval()
    correct = 0
    with torch.no_grad():
        for i in range(0, len(y), batch):
            correct += (model(x[i:i + batch]).argmax(1) ==
                        y[i:i + batch]).sum().item()
    model.train()
    return correct / len(y)


class Spans:
    """Per-step time spent in the parts of a training loop."""

    def __init__(self):
        self.total = {"compute": 0.0, "step": 0.0, "wait": 0.0}
        self.steps = 0

    def add(self, part: str, seconds: float):
        self.total[part] += seconds

    def per_step_ms(self):
        n = max(self.steps, 1)
        return {k: round(1000 * v / n, 3) for k, v in self.total.items()}


def timed_loop(batches, model, step, spans: Spans):
    """Trains on `batches`, timing each part; `step(loss)` ends a batch."""
    it = iter(batches)
    while True:
        t0 = time.perf_counter()
        try:
            x, y = next(it)
        except StopIteration:
            spans.add("wait", time.perf_counter() - t0)
            return
        t1 = time.perf_counter()
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        t2 = time.perf_counter()
        step(loss)
        t3 = time.perf_counter()
        spans.add("wait", t1 - t0)
        spans.add("compute", t2 - t1)
        spans.add("step", t3 - t2)
        spans.steps += 1


def result_line(system, seconds, accuracy, spans, **extra):
    line = {"system": system, "train_seconds": round(seconds, 3),
            "accuracy": accuracy, "steps": spans.steps,
            "per_step_ms": spans.per_step_ms()}
    line.update(extra)
    print(json.dumps(line), flush=True)


# Ours.

def submit(args):
    import paramserver as ps
    torch.manual_seed(args.seed)
    spec = {
        "name": "rnn-vs-ddp",
        "model": ps.torch.model_spec(RowLstm(args.hidden)),
        "epochs": args.epochs,
        "batch_size": args.batch_size,
        "seed": args.seed,
        "optimizer": {"adam": {"learning_rate": args.lr}},
        "consistency": {"model": "BSP"},
        "num_workers": 2,
        "num_servers": 2,
        "durability": "MEMORY",
    }
    with ps.JobClient(args.coordinator) as client:
        print(client.submit(spec))


def worker(args):
    import paramserver as ps
    torch.set_num_threads(1)
    torch.manual_seed(args.seed)
    model = RowLstm(args.hidden)
    train = load("train", args.max_samples)
    test = load("test")
    spans = Spans()
    seconds = 0.0
    profiler = cProfile.Profile() if args.profile else None
    # --native 0: the pure-Python step pipeline (older SDKs lack the flag).
    options = {} if args.native < 0 else {"native": bool(args.native)}
    with ps.torch.Worker(args.coordinator, model, **options) as w:
        for epoch, batches in w.epochs(train):
            start = time.perf_counter()
            if profiler:
                profiler.enable()
            timed_loop(batches, model, w.step, spans)
            if profiler:
                profiler.disable()
            seconds += time.perf_counter() - start
            if epoch + 1 < args.epochs:
                w.report()
                continue
            if w.index == 0:
                accuracy = evaluate(model, *test)
                w.report(test_accuracy=accuracy, test_samples=len(test[1]))
                result_line("ours", seconds, accuracy, spans)
            else:
                w.report()
        if profiler and w.index == 0:
            profiler.dump_stats(args.profile)


# PyTorch alone.

def batch_indices(n: int, workers: int, rank: int, seed: int, epoch: int,
                  batch: int):
    from paramserver.data import epoch_order, part_size
    order = epoch_order(n, workers, rank, seed, epoch)
    steps = part_size(n, workers) // batch
    return [torch.from_numpy(order[s * batch:(s + 1) * batch])
            for s in range(steps)]


def train_torch(model, optimizer, x, y, seed, epochs, batch, ranks,
                spans: Spans) -> float:
    """Trains on the batches of `ranks` (their batch of each step
    concatenated); returns the loops' seconds."""

    def step(loss):
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)

    seconds = 0.0
    for epoch in range(epochs):
        parts = [batch_indices(len(y), 2, r, seed, epoch, batch)
                 for r in ranks]
        idx = [torch.cat(p) for p in zip(*parts)]
        start = time.perf_counter()
        timed_loop(((x[i], y[i]) for i in idx), model, step, spans)
        seconds += time.perf_counter() - start
    return seconds


def single(args):
    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    model = RowLstm(args.hidden)
    x, y = load("train", args.max_samples)
    test = load("test")
    optimizer = torch.optim.Adam(model.parameters(), lr=args.lr)
    spans = Spans()
    seconds = train_torch(model, optimizer, x, y, args.seed, args.epochs,
                          args.batch_size, [0, 1], spans)
    result_line("single", seconds, evaluate(model, *test), spans)


def ddp_rank(rank, args, port):
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}",
                            rank=rank, world_size=2)
    torch.manual_seed(args.seed)
    model = DistributedDataParallel(RowLstm(args.hidden))
    x, y = load("train", args.max_samples)
    optimizer = torch.optim.Adam(model.parameters(), lr=args.lr)
    spans = Spans()
    dist.barrier()
    seconds = train_torch(model, optimizer, x, y, args.seed, args.epochs,
                          args.batch_size, [rank], spans)
    if rank == 0:
        accuracy = evaluate(model.module, *load("test"))
        result_line("ddp", seconds, accuracy, spans)
    dist.barrier()
    dist.destroy_process_group()


def ddp(args):
    import socket
    import torch.multiprocessing as mp
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    mp.spawn(ddp_rank, args=(args, port), nprocs=2, join=True)


# The table.

def table(args):
    runs = {}
    with open(args.results) as f:
        for line in f:
            r = json.loads(line)
            runs.setdefault(r["system"], []).append(r)

    def median(system, key):
        return statistics.median(r[key] for r in runs[system])

    def median_ms(system, part):
        return statistics.median(r["per_step_ms"][part] for r in runs[system])

    ddp_s = median("ddp", "train_seconds") if "ddp" in runs else None
    print("| system | train s (median) | × DDP | test accuracy | per step ms:"
          " compute | step() | wait | rounds (train s) |")
    print("|---|---:|---:|---:|---:|---:|---:|---|")
    order = [s for s in ("ours", "ours-py", "before", "ddp", "single")
             if s in runs]
    for system in order + sorted(set(runs) - set(order)):
        t = median(system, "train_seconds")
        ratio = f"{t / ddp_s:.2f}" if ddp_s else "–"
        rounds = ", ".join(f"{r['train_seconds']:.1f}" for r in runs[system])
        print(f"| {system} | {t:.1f} | {ratio} | "
              f"{median(system, 'accuracy'):.4f} | "
              f"{median_ms(system, 'compute'):.2f} | "
              f"{median_ms(system, 'step'):.2f} | "
              f"{median_ms(system, 'wait'):.2f} | {rounds} |")


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("command",
                   choices=["submit", "worker", "ddp", "single", "table"])
    p.add_argument("--coordinator", default="127.0.0.1:7000")
    p.add_argument("--epochs", type=int, default=2)
    p.add_argument("--batch_size", type=int, default=64,
                   help="per worker / rank (single: twice this)")
    p.add_argument("--lr", type=float, default=0.002)
    p.add_argument("--hidden", type=int, default=64)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--threads", type=int, default=1,
                   help="intra-op threads of the single process")
    p.add_argument("--max_samples", type=int, default=0,
                   help="train on the first N images only (0: all)")
    p.add_argument("--profile", default="",
                   help="worker: cProfile worker 0's training loops into "
                        "this file")
    p.add_argument("--native", type=int, default=-1,
                   help="worker: Worker(native=...): 0 the pure-Python step "
                        "pipeline, 1 the compiled transport, -1 the default")
    p.add_argument("--results", help="table: the JSON lines")
    args = p.parse_args()
    if args.command != "table" and not os.path.exists(
            f"{DATA}/train-images-idx3-ubyte.gz"):
        sys.exit(f"Fashion-MNIST not found in {DATA}")
    {"submit": submit, "worker": worker, "ddp": ddp, "single": single,
     "table": table}[args.command](args)


if __name__ == "__main__":
    main()
