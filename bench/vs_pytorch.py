#!/usr/bin/python3
"""The PyTorch side of bench/vs_pytorch.sh, and its table.

  vs_pytorch.py run --system ddp|rpc|single [--epochs 15] [--round 1] ...
      trains the README's MLP (784-256-128-10, ReLU, Adam 1e-3) on
      Fashion-MNIST with PyTorch and prints one JSON line of results.
  vs_pytorch.py record-ours --status STATUS.json --system NAME [--round 1]
      turns `psctl get` of a finished job into the same JSON line, from the
      job's per-epoch records (JobProgress.epochs).
  vs_pytorch.py table RESULTS.jsonl [--target 0.88]
      prints the Markdown table: medians over rounds, ratios to DDP.

The PyTorch systems follow our job as far as practical: worker w of N owns
samples [w*n/N, (w+1)*n/N) (the remainder dropped), shuffled each epoch by a
seed of (seed, epoch, w); full batches only; pixels / 255; He-uniform weights
for ReLU layers, Xavier-uniform for the output layer, zero biases; mean
cross-entropy; Adam(1e-3, betas (0.9, 0.999), eps 1e-8) on the mean gradient
of the step's 2 x 64 samples. After each epoch, rank 0 (trainer 0) evaluates
on the 10,000 test images; an epoch's time is taken after its evaluation.
Times count from just before the training processes start (they load the data
and join their process group inside the timed span, as our workers load the
data after the job starts), to the end of the last epoch's evaluation.
One thread per process (torch.set_num_threads(1), OPENBLAS_NUM_THREADS=1), as
our workers run with --compute_threads=1.
"""

import argparse
import gzip
import json
import math
import os
import resource
import socket
import statistics
import sys
import threading
import time

import numpy as np
import torch
import torch.distributed.rpc as rpc


SYSTEM_NAMES = {
    "ddp": "PyTorch DDP (gloo, 2 processes)",
    "rpc": "PyTorch RPC parameter server (1 server, 2 trainers, BSP)",
    "single": "PyTorch, 1 process, batch 128",
}
DDP = "ddp"


# ---------------------------------------------------------------- data, model

def read_idx(path):
    """A gzip-compressed IDX file as a numpy array (uint8)."""
    with gzip.open(path, "rb") as f:
        data = f.read()
    magic = int.from_bytes(data[0:4], "big")
    ndim = magic & 0xFF
    dims = [int.from_bytes(data[4 + 4 * i:8 + 4 * i], "big") for i in range(ndim)]
    return np.frombuffer(data, dtype=np.uint8, offset=4 + 4 * ndim).reshape(dims)


def load_fashion_mnist(data_dir):
    """(train_x, train_y, test_x, test_y) as torch tensors, pixels / 255."""

    def images(name):
        x = read_idx(os.path.join(data_dir, name))
        return torch.from_numpy(x.reshape(x.shape[0], -1).astype(np.float32) / 255.0)

    def labels(name):
        return torch.from_numpy(read_idx(os.path.join(data_dir, name)).astype(np.int64))

    return (images("train-images-idx3-ubyte.gz"), labels("train-labels-idx1-ubyte.gz"),
            images("t10k-images-idx3-ubyte.gz"), labels("t10k-labels-idx1-ubyte.gz"))


def make_model(seed, widths=(784, 256, 128, 10)):
    """The MLP with our initialisation: He-uniform for ReLU layers,
    Xavier-uniform for the output layer, zero biases."""
    from torch import nn

    torch.manual_seed(seed)
    layers = []
    for i in range(len(widths) - 1):
        fan_in, fan_out = widths[i], widths[i + 1]
        linear = nn.Linear(fan_in, fan_out)
        output = i + 2 == len(widths)
        bound = math.sqrt(6.0 / (fan_in + fan_out)) if output else math.sqrt(6.0 / fan_in)
        with torch.no_grad():
            linear.weight.uniform_(-bound, bound)
            linear.bias.zero_()
        layers.append(linear)
        if not output:
            layers.append(nn.ReLU())
    return nn.Sequential(*layers)


def make_optimizer(params, lr):
    return torch.optim.Adam(params, lr=lr, betas=(0.9, 0.999), eps=1e-8)


def epoch_order(seed, epoch, worker, num_workers, num_samples):
    """Worker `worker`'s samples for `epoch`, shuffled (remainder dropped)."""
    per_worker = num_samples // num_workers
    rng = np.random.default_rng([seed, epoch, worker])
    return worker * per_worker + rng.permutation(per_worker)


def accuracy(model, test_x, test_y):
    with torch.no_grad():
        return float((model(test_x).argmax(dim=1) == test_y).float().mean())


def one_thread():
    torch.set_num_threads(1)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# ----------------------------------------------------------- the three systems

def train_local(model, opt, data, args, worker, num_workers, t0, evaluate, step_hook=None):
    """The training loop shared by DDP and the single process: returns the
    epoch records [(epoch, seconds since t0, test accuracy, mean loss)] when
    `evaluate`, else []."""
    import torch.nn.functional as F

    train_x, train_y, test_x, test_y = data
    batch = args.batch
    records = []
    for epoch in range(args.epochs):
        order = torch.from_numpy(epoch_order(args.seed, epoch, worker, num_workers,
                                             train_x.shape[0]))
        steps = order.shape[0] // batch
        total = 0.0
        model.train()
        for s in range(steps):
            idx = order[s * batch:(s + 1) * batch]
            opt.zero_grad(set_to_none=True)
            loss = F.cross_entropy(model(train_x[idx]), train_y[idx])
            loss.backward()
            opt.step()
            total += float(loss)
        if evaluate:
            model.eval()
            acc = accuracy(model, test_x, test_y)
            records.append((epoch + 1, time.time() - t0, acc, total / steps))
    return records


def ddp_process(rank, args, port, t0, queue):
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel

    one_thread()
    data = load_fashion_mnist(args.data_dir)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}",
                            rank=rank, world_size=2)
    model = DistributedDataParallel(make_model(args.seed))  # Rank 0's values.
    opt = make_optimizer(model.parameters(), args.lr)
    records = train_local(model, opt, data, args, rank, 2, t0, evaluate=rank == 0)
    dist.barrier()
    dist.destroy_process_group()
    if rank == 0:
        queue.put(records)


def single_process(args, t0, queue):
    one_thread()
    data = load_fashion_mnist(args.data_dir)
    model = make_model(args.seed)
    opt = make_optimizer(model.parameters(), args.lr)
    queue.put(train_local(model, opt, data, args, 0, 1, t0, evaluate=True))


class BatchServer:
    """The RPC parameter server's state: the model and Adam. Each trainer
    pushes its gradient and waits; the last of a step's pushes averages them,
    applies one Adam update and answers every waiting trainer with the new
    parameters (BSP, as PyTorch's batch-updating parameter server example)."""

    def __init__(self, args, num_trainers):
        self.model = make_model(args.seed)
        self.params = list(self.model.parameters())
        for p in self.params:
            p.grad = torch.zeros_like(p)
        self.opt = make_optimizer(self.params, args.lr)
        self.num_trainers = num_trainers
        self.pending = 0
        self.lock = threading.Lock()
        self.future = torch.futures.Future()

    def snapshot(self):
        return [p.detach().clone() for p in self.params]


_SERVER = None  # The parameter server process's BatchServer.


def rpc_get_params():
    with _SERVER.lock:
        return _SERVER.snapshot()


@rpc.functions.async_execution
def rpc_push_and_fetch(grads):
    """On the parameter server: adds a trainer's gradients; a future of the
    parameters after this step's update."""
    server = _SERVER
    with server.lock:
        for p, g in zip(server.params, grads):
            p.grad += g
        server.pending += 1
        future = server.future
        if server.pending == server.num_trainers:
            for p in server.params:
                p.grad /= server.num_trainers
            server.opt.step()
            for p in server.params:
                p.grad.zero_()
            server.pending = 0
            server.future = torch.futures.Future()
            future.set_result(server.snapshot())
    return future


def rpc_process(rank, args, port, t0, queue):
    global _SERVER
    import torch.nn.functional as F

    one_thread()
    options = rpc.TensorPipeRpcBackendOptions(
        init_method=f"tcp://127.0.0.1:{port}", num_worker_threads=4)
    if rank == 0:
        _SERVER = BatchServer(args, num_trainers=2)
        rpc.init_rpc("ps", rank=0, world_size=3, rpc_backend_options=options)
        rpc.shutdown()  # Waits for the trainers to finish.
        return
    worker = rank - 1
    data = load_fashion_mnist(args.data_dir)
    train_x, train_y, test_x, test_y = data
    rpc.init_rpc(f"trainer{worker}", rank=rank, world_size=3, rpc_backend_options=options)
    model = make_model(args.seed)
    params = list(model.parameters())

    def load(values):
        with torch.no_grad():
            for p, v in zip(params, values):
                p.copy_(v)

    load(rpc.rpc_sync("ps", rpc_get_params))
    records = []
    batch = args.batch
    for epoch in range(args.epochs):
        order = torch.from_numpy(epoch_order(args.seed, epoch, worker, 2, train_x.shape[0]))
        steps = order.shape[0] // batch
        total = 0.0
        for s in range(steps):
            idx = order[s * batch:(s + 1) * batch]
            for p in params:
                p.grad = None
            loss = F.cross_entropy(model(train_x[idx]), train_y[idx])
            loss.backward()
            total += float(loss)
            load(rpc.rpc_sync("ps", rpc_push_and_fetch, args=([p.grad for p in params],)))
        if worker == 0:
            acc = accuracy(model, test_x, test_y)
            records.append((epoch + 1, time.time() - t0, acc, total / steps))
    rpc.shutdown()
    if worker == 0:
        queue.put(records)


def run(args):
    import torch.multiprocessing as mp

    ctx = mp.get_context("fork")
    queue = ctx.Queue()
    port = free_port()
    t0 = time.time()
    if args.system == "ddp":
        procs = [ctx.Process(target=ddp_process, args=(r, args, port, t0, queue)) for r in range(2)]
    elif args.system == "rpc":
        procs = [ctx.Process(target=rpc_process, args=(r, args, port, t0, queue)) for r in range(3)]
    else:
        args.batch *= 2  # One process does both workers' samples per step.
        procs = [ctx.Process(target=single_process, args=(args, t0, queue))]
    for p in procs:
        p.start()
    records = queue.get()
    for p in procs:
        p.join()
        if p.exitcode != 0:
            sys.exit(f"vs_pytorch: a {args.system} process exited with {p.exitcode}")
    # The training processes' CPU (user + system), every one joined above.
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = {"processes": usage.ru_utime + usage.ru_stime}
    print(json.dumps(result(SYSTEM_NAMES[args.system], args.round, records, cpu)))


def result(system, round_, records, cpu):
    """The JSON line of one run: records are (epoch, seconds, accuracy, loss);
    cpu maps each process (or group of processes) to its CPU seconds."""
    return {
        "system": system,
        "round": round_,
        "cpu_s": sum(cpu.values()),
        "cpu_by_process": cpu,
        "train_s": records[-1][1] if records else None,
        "final_accuracy": records[-1][2] if records else None,
        "epochs": [{"epoch": e, "seconds": s, "test_accuracy": a, "loss": l}
                   for e, s, a, l in records],
    }


# ------------------------------------------------------------- ours, the table

def record_ours(args):
    with open(args.status) as f:
        status = json.load(f)
    if status.get("state") != "SUCCEEDED":
        sys.exit(f"vs_pytorch: job {status.get('job_id')} ended {status.get('state')}: "
                 f"{status.get('message', '')}")
    start_ms = int(status["start_time_ms"])
    records = [(int(r["epoch"]), (int(r["end_time_ms"]) - start_ms) / 1000.0,
                float(r["test_accuracy"]), float(r.get("loss", 0)))
               for r in status["progress"].get("epochs", [])]
    if not records:
        sys.exit("vs_pytorch: the job has no epoch records (JobProgress.epochs)")
    cpu = {}
    with open(args.cpu) as f:  # "name seconds" lines (cluster_cpu_seconds)
        for line in f:
            name, seconds = line.split()
            cpu[name] = float(seconds)
    print(json.dumps(result(args.system, args.round, records, cpu)))


def time_to(run, target):
    for e in run["epochs"]:
        if e["test_accuracy"] >= target:
            return e["seconds"]
    return None


def median(values):
    values = [v for v in values if v is not None]
    return statistics.median(values) if values else None


def table(args):
    runs = []
    with open(args.results) as f:
        for line in f:
            if line.strip():
                runs.append(json.loads(line))
    systems = []
    for r in runs:
        if r["system"] not in systems:
            systems.append(r["system"])
    rows = {}
    for s in systems:
        mine = [r for r in runs if r["system"] == s]
        hits = [time_to(r, args.target) for r in mine]
        rows[s] = {
            "runs": len(mine),
            "train": median([r["train_s"] for r in mine]),
            "tta": median(hits),
            "reached": sum(h is not None for h in hits),
            "acc": median([r["final_accuracy"] for r in mine]),
            "cpu": median([r.get("cpu_s") for r in mine]),
        }
    base = rows.get(SYSTEM_NAMES[DDP])

    def fmt(v, spec=".1f"):
        return "-" if v is None else format(v, spec)

    def ratio(v, b):
        return "-" if v is None or not b else f"{v / b:.2f}"

    print(f"| system | runs | training time (s) | time to {args.target} (s) | "
          f"final test accuracy | training time / DDP | time to {args.target} / DDP | "
          f"CPU (s) |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|")
    for s in systems:
        r = rows[s]
        tta = fmt(r["tta"])
        if r["reached"] < r["runs"]:
            tta += f" ({r['reached']}/{r['runs']} reached)"
        print(f"| {s} | {r['runs']} | {fmt(r['train'])} | {tta} | {fmt(r['acc'], '.4f')} | "
              f"{ratio(r['train'], base and base['train'])} | "
              f"{ratio(r['tta'], base and base['tta'])} | {fmt(r['cpu'])} |")


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("run")
    p.add_argument("--system", choices=sorted(SYSTEM_NAMES), required=True)
    p.add_argument("--epochs", type=int, default=15)
    p.add_argument("--batch", type=int, default=64, help="per worker")
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--seed", type=int, default=42)
    p.add_argument("--round", type=int, default=1)
    p.add_argument("--data-dir", default="/usr/share/datasets/fashion-mnist")
    p = sub.add_parser("record-ours")
    p.add_argument("--status", required=True)
    p.add_argument("--cpu", required=True, help="cluster_cpu_seconds's output")
    p.add_argument("--system", required=True)
    p.add_argument("--round", type=int, default=1)
    p = sub.add_parser("table")
    p.add_argument("results")
    p.add_argument("--target", type=float, default=0.88)
    args = parser.parse_args()
    {"run": run, "record-ours": record_ours, "table": table}[args.command](args)


if __name__ == "__main__":
    main()
