#!/usr/bin/env python3
"""Helpers of bench/fedavg.sh (docs/training.md, "Local SGD and federated
averaging"): the job of each run, one JSON line per finished run, the table.

  fedavg.py job --base JOB.json --epochs E --mode bsp|fedavg [--local-steps H]
      [--local-lr LR] [--local-momentum M] [--labels-per-worker K]
      prints the run's job JSON: the README job with E epochs; fedavg makes
      the servers' optimizer SGD at rate 1 (plain FedAvg) and adds local_sgd.
  fedavg.py record --status STATUS.json --metrics M0.txt M1.txt --name NAME
      --partition iid|non-iid   prints one JSON line: per-epoch accuracy and
      the workers' push and pull bytes (ps_worker_{push,pull}_bytes_total).
  fedavg.py table RESULTS.jsonl   prints the Markdown table.
"""

import argparse
import json
import sys


def job(args):
    with open(args.base) as f:
        spec = json.load(f)
    spec["epochs"] = args.epochs
    spec["durability"] = "MEMORY"
    spec["name"] = f"fedavg-bench-{args.mode}"
    if args.mode == "fedavg":
        spec["optimizer"] = {"sgd": {"learning_rate": 1.0,
                                     "momentum": args.server_momentum}}
        spec["local_sgd"] = {
            "local_steps": args.local_steps,
            "local_optimizer": {"learning_rate": args.local_lr,
                                "momentum": args.local_momentum}}
    if args.labels_per_worker:
        spec["dataset"]["labels_per_worker"] = args.labels_per_worker
    print(json.dumps(spec, indent=2))


def counter(path, name):
    total = 0.0
    with open(path) as f:
        for line in f:
            if line.startswith(name + " ") or line.startswith(name + "{"):
                total += float(line.split()[-1])
    return total


def record(args):
    with open(args.status) as f:
        status = json.load(f)
    if status.get("state") != "SUCCEEDED":
        sys.exit(f"fedavg: job {status.get('job_id')} ended "
                 f"{status.get('state')}: {status.get('message', '')}")
    start_ms = int(status["start_time_ms"])
    epochs = [{"epoch": int(r["epoch"]),
               "seconds": (int(r["end_time_ms"]) - start_ms) / 1000.0,
               "test_accuracy": float(r["test_accuracy"])}
              for r in status["progress"].get("epochs", [])]
    push = sum(counter(m, "ps_worker_push_bytes_total") for m in args.metrics)
    pull = sum(counter(m, "ps_worker_pull_bytes_total") for m in args.metrics)
    print(json.dumps({"name": args.name, "partition": args.partition,
                      "epochs": epochs, "push_bytes": push,
                      "pull_bytes": pull,
                      "clocks": int(status["progress"]["total_clocks"])}))


def table(args):
    runs = [json.loads(line) for line in open(args.results) if line.strip()]
    bsp = {r["partition"]: r for r in runs if r["name"].startswith("BSP")}
    print("| run | data | clocks per worker | final test accuracy | "
          "push + pull MB (both workers) | BSP's bytes / run's | "
          "epochs to BSP's final - 1 point | MB to that accuracy |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- |")
    for r in runs:
        total = r["push_bytes"] + r["pull_bytes"]
        final = r["epochs"][-1]["test_accuracy"]
        base = bsp.get(r["partition"])
        ratio = target_epoch = to_target = "—"
        if base is not None:
            base_total = base["push_bytes"] + base["pull_bytes"]
            ratio = f"{base_total / total:.2f}" if total else "—"
            target = base["epochs"][-1]["test_accuracy"] - 0.01
            n = len(r["epochs"])
            for e in r["epochs"]:
                if e["test_accuracy"] >= target:
                    target_epoch = str(e["epoch"])
                    # Every epoch moves the same bytes: a share of the total.
                    to_target = f"{total * e['epoch'] / n / 1e6:.0f}"
                    break
            else:
                target_epoch = f"not reached ({target:.4f})"
        print(f"| {r['name']} | {r['partition']} | {r['clocks']} | "
              f"{final:.4f} | {total / 1e6:.0f} | {ratio} | {target_epoch} | "
              f"{to_target} |")


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("job")
    p.add_argument("--base", required=True)
    p.add_argument("--epochs", type=int, required=True)
    p.add_argument("--mode", choices=["bsp", "fedavg"], required=True)
    p.add_argument("--local-steps", type=int, default=1)
    p.add_argument("--local-lr", type=float, default=0.1)
    p.add_argument("--local-momentum", type=float, default=0.9)
    p.add_argument("--labels-per-worker", type=int, default=0)
    p.add_argument("--server-momentum", type=float, default=0.0)
    p = sub.add_parser("record")
    p.add_argument("--status", required=True)
    p.add_argument("--metrics", nargs="+", required=True)
    p.add_argument("--name", required=True)
    p.add_argument("--partition", required=True)
    p = sub.add_parser("table")
    p.add_argument("results")
    args = parser.parse_args()
    {"job": job, "record": record, "table": table}[args.command](args)


if __name__ == "__main__":
    main()
