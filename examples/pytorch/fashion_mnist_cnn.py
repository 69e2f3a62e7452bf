#!/usr/bin/env python3
"""A Fashion-MNIST CNN with batch normalisation and dropout, trained on the
parameter-server cluster by PyTorch workers (paramserver.torch.Worker).

  fashion_mnist_cnn.py submit [--coordinator HOST:PORT] [--epochs N] ...
  fashion_mnist_cnn.py worker [--coordinator HOST:PORT]

`submit` sends the job (an EXTERNAL model whose tensors are the module's
parameters and batch-norm buffers, seeded from worker 0's module) and prints
its id; `worker` joins
the cluster and trains the job it is given: its part of the 60,000 training
images, shuffled per epoch; worker 0 measures test accuracy on the 10,000
test images after every epoch and uploads the final model. run.sh starts a
local cluster and does both.
"""

import argparse
import logging
import os
import sys
import time

import torch
import torch.nn.functional as F
from torch import nn

import paramserver as ps
from paramserver.data import load_idx

DATA = os.environ.get("PS_FASHION_MNIST_DIR",
                      "/usr/share/datasets/fashion-mnist")
MEAN, STD = 0.2860, 0.3530  # Of the training images.


class FashionCnn(nn.Module):
    """Two conv blocks (conv, batch norm, ReLU, 2x2 max pooling), dropout,
    a hidden layer with batch norm and dropout, and the classifier: 422,026
    parameters. A model the C++ worker cannot express (batch norm, dropout).
    """

    def __init__(self):
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(1, 32, 3, padding=1), nn.BatchNorm2d(32), nn.ReLU(),
            nn.MaxPool2d(2),                                   # 32 x 14 x 14
            nn.Conv2d(32, 64, 3, padding=1), nn.BatchNorm2d(64), nn.ReLU(),
            nn.MaxPool2d(2),                                   # 64 x 7 x 7
            nn.Dropout(0.25))
        self.classifier = nn.Sequential(
            nn.Flatten(), nn.Linear(64 * 7 * 7, 128), nn.BatchNorm1d(128),
            nn.ReLU(), nn.Dropout(0.4), nn.Linear(128, 10))

    def forward(self, x):
        return self.classifier(self.features(x))


def load(split, limit=0):
    prefix = "train" if split == "train" else "t10k"
    x, y = load_idx(f"{DATA}/{prefix}-images-idx3-ubyte.gz",
                    f"{DATA}/{prefix}-labels-idx1-ubyte.gz", limit)
    x = (torch.from_numpy(x).reshape(-1, 1, 28, 28) - MEAN) / STD
    return x, torch.from_numpy(y)


def evaluate(model, x, y, batch=1000):
    model.eval()
    correct = 0
    with torch.no_grad():
        for i in range(0, len(y), batch):
            correct += (model(x[i:i + batch]).argmax(1) ==
                        y[i:i + batch]).sum().item()
    model.train()
    return correct / len(y)


def submit(args):
    spec = {
        "name": "fashion-mnist-cnn-pytorch",
        # buffers=True: the batch norms' running statistics are tensors of
        # the job, averaged over the workers through the servers and
        # exported with the parameters (docs/python.md, "Module buffers").
        "model": ps.torch.model_spec(FashionCnn(), buffers=True),
        "epochs": args.epochs,
        "batch_size": args.batch_size,  # Per worker.
        "seed": 1,
        "optimizer": {"adam": {"learning_rate": args.learning_rate}},
        "consistency": {"model": "BSP"},
        "num_workers": args.workers,
        "num_servers": args.servers,
        "durability": "MEMORY",
    }
    with ps.JobClient(args.coordinator) as client:
        print(client.submit(spec))


def worker(args):
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    model = FashionCnn()
    train = load("train", args.max_samples)
    test = None
    with ps.torch.Worker(args.coordinator, model) as w:
        for epoch, batches in w.epochs(train):
            if test is None and w.index == 0:
                test = load("test")
            start = time.monotonic()
            for x, y in batches:
                loss = F.cross_entropy(model(x), y)
                loss.backward()
                w.step(loss)
            took = time.monotonic() - start
            if w.index == 0:
                accuracy = evaluate(model, *test)
                w.report(test_accuracy=accuracy, test_samples=len(test[1]))
                print(f"{w.job_id} epoch {epoch + 1}: test accuracy "
                      f"{accuracy:.4f}, {took:.1f} s of training", flush=True)
            else:
                w.report()


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("command", choices=["submit", "worker"])
    parser.add_argument("--coordinator", default="127.0.0.1:7000")
    parser.add_argument("--epochs", type=int, default=12)
    parser.add_argument("--batch_size", type=int, default=64)
    parser.add_argument("--learning_rate", type=float, default=0.001)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--servers", type=int, default=2)
    parser.add_argument("--threads", type=int, default=1,
                        help="PyTorch threads per worker")
    parser.add_argument("--max_samples", type=int, default=0,
                        help="train on the first N images only (0: all)")
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO,
                        format="%(asctime)s %(levelname)s %(message)s")
    if not os.path.exists(f"{DATA}/train-images-idx3-ubyte.gz"):
        sys.exit(f"Fashion-MNIST not found in {DATA} (apt-get install "
                 "dataset-fashion-mnist, or set PS_FASHION_MNIST_DIR)")
    {"submit": submit, "worker": worker}[args.command](args)


if __name__ == "__main__":
    main()
