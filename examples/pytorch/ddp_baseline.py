#!/usr/bin/env python3
"""The CNN of fashion_mnist_cnn.py under PyTorch DDP (gloo), for
docs/benchmarks.md: 2 processes on loopback, the same model, initial values
(torch.manual_seed(0)), per-process batch (64), Adam (1e-3), data partition
and per-epoch shuffle (paramserver.data.epoch_order) as the cluster's job;
rank 0 evaluates on the 10,000 test images after every epoch. Prints a line
per epoch (time since the processes started, test accuracy) and, at the end,
the time to --target.

  ddp_baseline.py [--epochs 12] [--target 0.91]
"""

import argparse
import os
import socket
import sys
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from fashion_mnist_cnn import FashionCnn, evaluate, load  # noqa: E402
from paramserver.data import epoch_order  # noqa: E402


def process(rank, args, port, t0, queue):
    torch.set_num_threads(1)
    train = load("train")
    test = load("test") if rank == 0 else None
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}",
                            rank=rank, world_size=2)
    torch.manual_seed(0)
    model = DistributedDataParallel(FashionCnn())
    optimizer = torch.optim.Adam(model.parameters(), lr=args.learning_rate)
    x, y = train
    for epoch in range(args.epochs):
        order = torch.from_numpy(epoch_order(len(y), 2, rank, 1, epoch))
        steps = len(order) // args.batch_size
        start = time.time()
        for s in range(steps):
            idx = order[s * args.batch_size:(s + 1) * args.batch_size]
            optimizer.zero_grad(set_to_none=True)
            F.cross_entropy(model(x[idx]), y[idx]).backward()
            optimizer.step()
        took = time.time() - start
        if rank == 0:
            accuracy = evaluate(model.module, *test)
            queue.put((epoch + 1, time.time() - t0, accuracy, took))
        dist.barrier()
    dist.destroy_process_group()
    if rank == 0:
        queue.put(None)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=int, default=12)
    parser.add_argument("--batch_size", type=int, default=64)
    parser.add_argument("--learning_rate", type=float, default=0.001)
    parser.add_argument("--target", type=float, default=0.91)
    args = parser.parse_args()
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    ctx = mp.get_context("spawn")
    queue = ctx.Queue()
    t0 = time.time()
    procs = [ctx.Process(target=process, args=(r, args, port, t0, queue))
             for r in range(2)]
    for p in procs:
        p.start()
    reached = None
    while (record := queue.get()) is not None:
        epoch, elapsed, accuracy, took = record
        print(f"epoch {epoch:3d}  test accuracy {accuracy:.4f}  "
              f"{elapsed:7.1f} s  ({took:.1f} s of training)", flush=True)
        if reached is None and accuracy >= args.target:
            reached = (epoch, elapsed)
    for p in procs:
        p.join()
    print("DDP: " + (f"{args.target} reached after epoch {reached[0]}, "
                     f"{reached[1]:.1f} s" if reached else
                     f"{args.target} not reached"))


if __name__ == "__main__":
    main()
