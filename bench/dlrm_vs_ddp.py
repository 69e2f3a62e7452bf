#!/usr/bin/python3
"""The Python half of bench/dlrm_vs_ddp.sh: each run's JSON line (ours from
worker 0's JSON lines in examples/pytorch/dlrm_criteo.py's log; PyTorch's
from bench/ctr_torch.py's output) and the table of medians."""
import argparse
import glob
import json
import statistics
import sys


def record_ours(args):
    """Worker 0's last epoch line: AUC, log loss, training seconds (system
    "ours", or "ours-py" for the SDK's pure-Python transport)."""
    last = None
    for log in glob.glob(f"{args.run_dir}/pyworker*.log"):
        with open(log) as f:
            for line in f:
                if line.startswith("{") and '"train_seconds"' in line:
                    last = json.loads(line)
    if last is None:
        sys.exit(f"dlrm_vs_ddp: no result line in {args.run_dir}")
    print(json.dumps({"round": args.round, "system": args.system or "ours",
                      "train_seconds": last["train_seconds"],
                      "auc": last["auc"], "log_loss": last["log_loss"]}))


def record_torch(args):
    with open(args.result) as f:
        result = json.loads(f.read().strip().splitlines()[-1])
    last = result["epochs"][-1]
    print(json.dumps({"round": args.round, "system": args.system,
                      "train_seconds": result["train_seconds"],
                      "auc": last["auc"], "log_loss": last["log_loss"]}))


def table(args):
    runs = {}
    with open(args.results) as f:
        for line in f:
            r = json.loads(line)
            runs.setdefault(r["system"], []).append(r)
    with open(args.teacher) as f:
        teacher = json.load(f)

    def median(system, key):
        return statistics.median(r[key] for r in runs[system])

    ddp = median("ddp", "train_seconds") if "ddp" in runs else None
    single_auc = median("single", "auc") if "single" in runs else None
    print("| system | train s (median) | × DDP | test AUC | AUC − single "
          "| log loss | rounds (train s) |")
    print("|---|---:|---:|---:|---:|---:|---|")
    for system in ("ours", "ours-py", "ddp", "single"):
        if system not in runs:
            continue
        t = median(system, "train_seconds")
        a = median(system, "auc")
        ratio = f"{t / ddp:.2f}" if ddp else "–"
        diff = f"{a - single_auc:+.4f}" if single_auc is not None else "–"
        rounds = ", ".join(f"{r['train_seconds']:.1f}" for r in runs[system])
        print(f"| {system} | {t:.1f} | {ratio} | {a:.4f} | {diff} | "
              f"{median(system, 'log_loss'):.4f} | {rounds} |")
    print(f"\nThe teacher's best: test AUC {teacher['best_test_auc']:.4f}, "
          f"log loss {teacher['best_test_log_loss']:.4f}; "
          f"{teacher['train_rows']} training rows, {teacher['test_rows']} "
          "test rows.")
    for system in sorted(runs):
        print(f"{system} AUCs: "
              + ", ".join(f"{r['auc']:.4f}" for r in runs[system]))


def main():
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("command", choices=("ours", "torch", "table"))
    p.add_argument("--round", type=int, default=0)
    p.add_argument("--system", default="")
    p.add_argument("--run_dir", default="")
    p.add_argument("--result", default="")
    p.add_argument("--results", default="")
    p.add_argument("--teacher", default="")
    args = p.parse_args()
    {"ours": record_ours, "torch": record_torch, "table": table}[
        args.command](args)


if __name__ == "__main__":
    main()
