#!/usr/bin/env python3
"""A DLRM-style click-through-rate model on Criteo-format data, trained on
the parameter-server cluster by PyTorch workers whose embedding rows live in
the servers' sparse tables (paramserver.torch.ShardedEmbedding).

  dlrm_criteo.py prepare --data DIR
  dlrm_criteo.py submit  --data DIR [--coordinator HOST:PORT] [--epochs N] ...
  dlrm_criteo.py worker  --data DIR [--coordinator HOST:PORT]

DIR holds train.tsv and test.tsv (bench/criteo_gen.py writes them, with the
teacher's best achievable AUC in teacher.json). `prepare` parses them once
into numpy arrays beside them (DIR/dlrm.*.npy); `submit` sends the job and
prints its id; `worker` trains the job it is given: its part of the
training rows, shuffled per epoch; worker 0 measures test AUC and log loss
after every epoch, reports them and prints a JSON line. run_dlrm.sh does
all of it on a local cluster.

The model is bench/ctr_torch.py's CtrModel (the model PyTorch trains in the
CTR benchmarks, and the cluster's built-in CTR model): a bottom MLP over the
13 dense features, the 26 categorical fields' vectors, their pairwise dot
products, a top MLP. Only its embedding tables differ: here one sparse
table "criteo" of the job, keyed by the Criteo id of each value ((field <<
33) | (1 << 32) | value, a missing value field << 33: the cluster's own
mapping, docs/sparse.md), with no vocabulary; rows U(±1/sqrt(dim)),
row-wise Adagrad on the servers. The MLPs are the module's parameters
(Adagrad on the servers).
"""

import argparse
import json
import logging
import os
import sys
import time

import numpy as np
import torch
from torch import nn
import torch.nn.functional as F

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, os.pardir, os.pardir, "bench"))
from ctr_torch import CtrModel, auc, log_loss  # noqa: E402
from ctr_torch_data import load_criteo  # noqa: E402

import paramserver as ps  # noqa: E402

FIELDS = 26
TABLE = "criteo"
EVAL_BATCH = 4096


def criteo_ids(codes):
    """Criteo ids of parsed codes (0 when missing, else (1 << 32) | value):
    (field << 33) | code, int64 (n, 26)."""
    return (np.arange(FIELDS, dtype=np.int64) << 33) | codes


def prepare(args):
    for split in ("train", "test"):
        data = load_criteo(os.path.join(args.data, f"{split}.tsv"))
        np.save(os.path.join(args.data, f"dlrm.{split}.ids.npy"),
                criteo_ids(data["codes"]))
        np.save(os.path.join(args.data, f"dlrm.{split}.dense.npy"),
                data["dense"])
        np.save(os.path.join(args.data, f"dlrm.{split}.labels.npy"),
                data["labels"])
        print(f"{split}: {len(data['labels'])} rows", file=sys.stderr)


def load(data_dir, split):
    """(ids int64 (n, 26), dense float32 (n, 13), labels float32 (n,))."""
    return tuple(torch.from_numpy(np.load(os.path.join(
        data_dir, f"dlrm.{split}.{key}.npy"))) for key in
                 ("ids", "dense", "labels"))


class ShardedFields(nn.Module):
    """The fields' vectors (batch, 26, dim) of Criteo ids (batch, 26), from
    the job's sparse table "criteo": CtrModel's `tables`."""

    def __init__(self, dim, lr, expected_rows):
        super().__init__()
        self.table = ps.torch.ShardedEmbedding(
            TABLE, dim, optimizer={"rowwise_adagrad": {"learning_rate": lr}},
            expected_rows=expected_rows)

    def forward(self, ids):
        return self.table(ids)


def build_model(args):
    """CtrModel with the fields' vectors from the sparse table."""
    torch.manual_seed(args.seed)
    config = argparse.Namespace(dim=args.dim, bottom=[64, args.dim],
                                top=[64, 32], interaction="dot",
                                tables="fused")
    model = CtrModel([1] * FIELDS, config)
    model.tables = ShardedFields(args.dim, args.sparse_lr,
                                 args.expected_rows)
    return model


def submit(args):
    spec = {
        "name": "dlrm-criteo-pytorch",
        "model": ps.torch.model_spec(build_model(args)),
        "epochs": args.epochs,
        "batch_size": args.batch_size,  # Per worker.
        "seed": args.seed,
        "optimizer": {"adagrad": {"learning_rate": args.dense_lr}},
        "consistency": {"model": "BSP"},
        "num_workers": args.workers,
        "num_servers": args.servers,
        "durability": args.durability,
    }
    with ps.JobClient(args.coordinator) as client:
        print(client.submit(spec))


@torch.no_grad()
def evaluate(model, test):
    """(AUC, log loss, accuracy at probability 0.5) of the model on the
    test split."""
    model.eval()
    ids, dense, labels = test
    logits = np.concatenate([
        model(dense[i:i + EVAL_BATCH], ids[i:i + EVAL_BATCH]).numpy()
        for i in range(0, len(labels), EVAL_BATCH)])
    model.train()
    y = labels.numpy()
    return (auc(y, logits), log_loss(y, logits),
            float(((logits > 0) == (y > 0.5)).mean()))


def worker(args):
    torch.set_num_threads(args.threads)
    model = build_model(args)
    train = load(args.data, "train")
    test = None
    train_seconds = 0.0
    native = {"auto": None, "native": True, "python": False}[args.transport]
    with ps.torch.Worker(args.coordinator, model, native=native) as w:
        for epoch, batches in w.epochs(
                train, sparse_ids=lambda batch: {TABLE: batch[0]}):
            if test is None and w.index == 0:
                test = load(args.data, "test")
            start = time.monotonic()
            for ids, dense, labels in batches:
                loss = F.binary_cross_entropy_with_logits(
                    model(dense, ids), labels)
                loss.backward()
                w.step(loss)
            w.sync()  # The epoch's last push is in.
            took = time.monotonic() - start
            train_seconds += took
            if w.index != 0:
                w.report()
                continue
            test_auc, test_loss, accuracy = evaluate(model, test)
            print(json.dumps({"job": w.job_id, "epoch": epoch + 1,
                              "auc": round(test_auc, 6),
                              "log_loss": round(test_loss, 6),
                              "accuracy": round(accuracy, 6),
                              "epoch_seconds": round(took, 3),
                              "train_seconds": round(train_seconds, 3)}),
                  flush=True)
            w.report(test_accuracy=accuracy, test_samples=len(test[2]),
                     test_auc=test_auc, test_log_loss=test_loss)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("command", choices=["prepare", "submit", "worker"])
    parser.add_argument("--data", required=True,
                        help="directory of train.tsv and test.tsv")
    parser.add_argument("--coordinator", default="127.0.0.1:7000")
    parser.add_argument("--epochs", type=int, default=1)
    parser.add_argument("--batch_size", type=int, default=1024,
                        help="per worker")
    parser.add_argument("--dim", type=int, default=16)
    parser.add_argument("--sparse_lr", type=float, default=0.05,
                        help="row-wise Adagrad's rate for the table")
    parser.add_argument("--dense_lr", type=float, default=0.01,
                        help="Adagrad's rate for the MLPs")
    parser.add_argument("--expected_rows", type=int, default=1000000)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--servers", type=int, default=2)
    parser.add_argument("--durability", default="MEMORY")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--threads", type=int, default=1,
                        help="PyTorch threads per worker")
    parser.add_argument("--transport", default="auto",
                        choices=["auto", "native", "python"],
                        help="worker: the SDK's transport (auto: its default, "
                        "pure Python for sparse tables; native: the "
                        "compiled one; python)")
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO,
                        format="%(asctime)s %(levelname)s %(message)s")
    {"prepare": prepare, "submit": submit, "worker": worker}[args.command](
        args)


if __name__ == "__main__":
    main()
