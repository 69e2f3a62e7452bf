#!/usr/bin/python3
"""Checks that bench/ctr_torch.py's DDP mode computes what one process does.

  ctr_torch_ddp_check.py [sgd adagrad rowwise_adagrad sparse_adam]

For each table optimizer (the MLPs use SGD), and for both --tables layouts:
trains the CTR model for STEPS steps on random data in one process with
batch 2B, and with DDP on 2 processes (gloo, EmbeddingBag(sparse=True)) where
rank r takes rows [r*B, (r+1)*B) of each step's 2B, and prints the largest
difference between the two models' parameters. DDP averages the sparse
gradients over the ranks, so the two agree to float rounding (SGD: ~3e-8;
Adagrad and Adam, whose first steps are +-lr, amplify rounding to ~1e-5); a
missing or doubled average would show as differences of the learning rate's
order.
"""

import sys

import numpy as np
import torch
import torch.multiprocessing as mp
from torch import nn

import ctr_torch

B, STEPS, ROWS = 64, 5, 500


def random_data():
    """STEPS * 2B samples: dense features, row indices, labels."""
    rng = np.random.default_rng(0)
    n = STEPS * 2 * B
    return (torch.from_numpy(rng.random((n, 13)).astype(np.float32)),
            torch.from_numpy(rng.integers(0, ROWS, (n, 26))),
            torch.from_numpy((rng.random(n) < 0.3).astype(np.float32)))


def train(model, optimizers, rows_of_step):
    """STEPS steps of mean BCE on the rows rows_of_step(step) picks."""
    dense, idx, labels = random_data()
    loss_fn = nn.BCEWithLogitsLoss()
    for step in range(STEPS):
        rows = rows_of_step(step)
        for opt in optimizers:
            opt.zero_grad(set_to_none=True)
        loss_fn(model(dense[rows], idx[rows]), labels[rows]).backward()
        for opt in optimizers:
            opt.step()


def ddp_rank(rank, argv, port, queue):
    """One DDP process; rank 0 puts its parameters on the queue."""
    import torch.distributed as dist

    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}",
                            rank=rank, world_size=2)
    model, optimizers = ctr_torch.build_model(
        ctr_torch.parse_args(argv + ["--mode", "ddp"]), [ROWS + 1] * 26)
    train(model, optimizers, lambda s: slice(2 * B * s + B * rank, 2 * B * s + B * (rank + 1)))
    if rank == 0:
        queue.put([p.detach().numpy() for p in model.module.parameters()])
    dist.barrier()
    dist.destroy_process_group()


def max_difference(argv):
    """The largest |DDP - single| over the parameters for these options."""
    torch.set_num_threads(1)
    model, optimizers = ctr_torch.build_model(ctr_torch.parse_args(argv), [ROWS + 1] * 26)
    train(model, optimizers, lambda s: slice(2 * B * s, 2 * B * (s + 1)))
    queue = mp.get_context("spawn").SimpleQueue()
    procs = mp.spawn(ddp_rank, args=(argv, ctr_torch.free_port(), queue), nprocs=2,
                     join=False)
    ddp = queue.get()  # Before joining: the parameters do not fit a pipe's buffer.
    while not procs.join():
        pass
    return max(float(np.abs(a.detach().numpy() - b).max())
               for a, b in zip(model.parameters(), ddp))


def main():
    for optimizer in sys.argv[1:] or ["sgd", "adagrad", "rowwise_adagrad", "sparse_adam"]:
        for tables in ("fused", "per_field"):
            argv = ["--train", "-", "--test", "-", "--sparse_optimizer", optimizer,
                    "--dense_optimizer", "sgd", "--lr", "0.1", "--tables", tables]
            print(f"{optimizer:16s} {tables:9s} max |ddp - single| = "
                  f"{max_difference(argv):.3g}", flush=True)


if __name__ == "__main__":
    main()
