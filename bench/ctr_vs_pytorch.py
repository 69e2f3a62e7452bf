#!/usr/bin/python3
"""The Python half of bench/ctr_vs_pytorch.sh: our job spec, each run's JSON
line (ours from the job's status, worker 0's log and the processes' peak
memory; PyTorch's from bench/ctr_torch.py), and the table of medians."""
import argparse
import datetime
import json
import statistics
import sys


def job(args):
    with open("deploy/jobs/criteo-ctr.json") as f:
        spec = json.load(f)
    spec["dataset"]["train_file"] = f"{args.data}/train.tsv"
    spec["dataset"]["test_file"] = f"{args.data}/test.tsv"
    spec["batch_size"] = args.batch
    spec["epochs"] = 1
    spec["num_workers"] = args.workers
    spec["num_servers"] = args.servers
    spec["durability"] = args.durability
    print(json.dumps(spec, indent=1))


def log_time(line):
    """The timestamp a worker log line starts with (common/logging.h)."""
    return datetime.datetime.fromisoformat(line.split()[0])


def train_seconds(worker_log):
    """Worker 0's training: from its plan (data loaded, first step next) to
    its model upload (after the last epoch's evaluation)."""
    start = end = None
    with open(worker_log) as f:
        for line in f:
            if "steps per epoch" in line and start is None:
                start = log_time(line)
            elif "uploaded the trained model" in line:
                end = log_time(line)
    if start is None or end is None:
        sys.exit(f"ctr_vs_pytorch: no training span in {worker_log}")
    return (end - start).total_seconds()


def record_ours(args):
    with open(args.status) as f:
        status = json.load(f)
    if status.get("state") != "SUCCEEDED":
        sys.exit(f"ctr_vs_pytorch: job {status.get('job_id')} ended "
                 f"{status.get('state')}: {status.get('message', '')}")
    progress = status["progress"]
    rss = {}
    with open(args.rss) as f:  # "name bytes" lines
        for line in f:
            name, value = line.split()
            rss[name] = int(value)
    workers = [v for k, v in rss.items() if k.startswith("worker")]
    servers = [v for k, v in rss.items() if k.startswith("server")]
    start_ms = int(status["start_time_ms"])
    end_ms = int(progress["epochs"][-1]["end_time_ms"])
    print(json.dumps({
        "system": "ours", "round": args.round,
        "train_s": train_seconds(args.worker_log),
        "job_s": (end_ms - start_ms) / 1000.0,
        "auc": float(progress["test_auc"]),
        "log_loss": float(progress["test_log_loss"]),
        "worker_rss": max(workers) if workers else None,
        "server_rss": max(servers) if servers else None}))


def record_torch(args):
    run = json.loads(sys.stdin.read())
    last = run["epochs"][-1]
    print(json.dumps({
        "system": ("ddp" if run["mode"] == "ddp" else
                   "single-same" if run.get("replay") else "single"),
        "round": args.round,
        "train_s": float(run["train_seconds"]),
        "job_s": float(run["train_seconds"]) + sum(
            e.get("eval_seconds", 0) for e in run["epochs"]) +
        float(run.get("load_seconds", 0)),
        "auc": float(last["auc"]), "log_loss": float(last["log_loss"]),
        "worker_rss": max(run["max_rss_bytes_per_rank"]),
        "server_rss": None}))


def median(values):
    values = [v for v in values if v is not None]
    return statistics.median(values) if values else None


def fmt(value, pattern):
    return "—" if value is None else pattern % value


def table(args):
    with open(args.results) as f:
        runs = [json.loads(line) for line in f if line.strip()]
    with open(args.teacher) as f:
        teacher = json.load(f)
    systems = []
    for r in runs:
        if r["system"] not in systems:
            systems.append(r["system"])
    med = {s: {k: median([r[k] for r in runs if r["system"] == s])
               for k in ("train_s", "job_s", "auc", "log_loss", "worker_rss",
                         "server_rss")} for s in systems}
    ddp = med.get("ddp")
    print(f"teacher's best test AUC {teacher['best_test_auc']:.4f}, "
          f"log loss {teacher['best_test_log_loss']:.4f}")
    print()
    ours = med.get("ours")
    print("| system | train s | × DDP | job s (load, eval) | test AUC | AUC − ours | "
          "log loss | worker peak RSS | × DDP rank | server peak RSS |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for s in systems:
        m = med[s]
        ratio = m["train_s"] / ddp["train_s"] if ddp else None
        rss_ratio = (m["worker_rss"] / ddp["worker_rss"]
                     if ddp and m["worker_rss"] else None)
        print(f"| {s} | {m['train_s']:.1f} | {fmt(ratio, '%.2f')} | "
              f"{m['job_s']:.1f} | {m['auc']:.5f} | "
              f"{fmt(ours and m['auc'] - ours['auc'], '%+.5f')} | {m['log_loss']:.5f} | "
              f"{fmt(m['worker_rss'] and m['worker_rss'] / 2**20, '%.0f MiB')} | "
              f"{fmt(rss_ratio, '%.2f')} | "
              f"{fmt(m['server_rss'] and m['server_rss'] / 2**20, '%.0f MiB')} |")


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("job")
    p.add_argument("--data", required=True)
    p.add_argument("--batch", type=int, required=True)
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--servers", type=int, default=2)
    p.add_argument("--durability", default="WAL")
    p = sub.add_parser("record-ours")
    for flag in ("--status", "--worker_log", "--rss"):
        p.add_argument(flag, required=True)
    p.add_argument("--round", type=int, required=True)
    p = sub.add_parser("record-torch")
    p.add_argument("--round", type=int, required=True)
    p = sub.add_parser("table")
    p.add_argument("results")
    p.add_argument("--teacher", required=True)
    args = parser.parse_args()
    {"job": job, "record-ours": record_ours, "record-torch": record_torch,
     "table": table}[args.command](args)


if __name__ == "__main__":
    main()
