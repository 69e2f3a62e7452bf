"""Helpers of bench/ctr_tier.sh (docs/benchmarks.md, "Sparse tables larger
than the servers' memory"): the job spec, one run's record, the table."""
import argparse
import json
import statistics
import sys

sys.path.insert(0, "bench")
import ctr_vs_pytorch  # noqa: E402  (train_seconds: one home)


def job(args):
    """The CTR job of stdin (bench/ctr_vs_pytorch.py job) with each table's
    expected_rows from teacher.json (its distinct training ids), so that the
    servers split their budget by the tables' real sizes."""
    spec = json.load(sys.stdin)
    with open(args.teacher) as f:
        teacher = json.load(f)
    for table, rows in zip(spec["model"]["sparse_tables"],
                           teacher["distinct_train_ids"]):
        table["expected_rows"] = max(1, int(rows))
    spec["durability"] = "MEMORY"
    print(json.dumps(spec, indent=1))


def record(args):
    with open(args.status) as f:
        status = json.load(f)
    if status.get("state") != "SUCCEEDED":
        sys.exit(f"ctr_tier: job ended {status.get('state')}: "
                 f"{status.get('message', '')}")
    rss = {}
    with open(args.rss) as f:
        for line in f:
            name, value = line.split()
            rss[name] = int(value)
    print(json.dumps({
        "system": args.system, "round": args.round,
        "train_s": ctr_vs_pytorch.train_seconds(args.worker_log),
        "auc": float(status["progress"]["test_auc"]),
        "server_rss": [v for k, v in sorted(rss.items())
                       if k.startswith("server")],
        "rows": args.rows, "memory": args.memory}))


def table(args):
    runs = [json.loads(line) for line in open(args.results)]
    by = {}
    for r in runs:
        by.setdefault(r["system"], []).append(r)
    med = {s: {"train_s": statistics.median(r["train_s"] for r in rs),
               "auc": statistics.median(r["auc"] for r in rs),
               "rss": max(max(r["server_rss"]) for r in rs),
               "rows": max(r["rows"] for r in rs),
               "memory": max(r.get("memory", 0) for r in rs)}
           for s, rs in by.items()}
    mib = 2 ** 20
    budget = args.budget
    fixed = med.get("empty", {}).get("rss")
    print("| run | train s | test AUC | max server peak RSS | vs unlimited |")
    print("|---|---|---|---|---|")
    base = med.get("unlimited")
    for s in ("unlimited", "budget", "empty"):
        if s not in med:
            continue
        m = med[s]
        ratio = (f"{base['train_s'] / m['train_s']:.2f}× throughput, "
                 f"AUC {m['auc'] - base['auc']:+.4f}"
                 if base and s == "budget" else "")
        print(f"| {s} | {m['train_s']:.1f} | {m['auc']:.4f} | "
              f"{m['rss'] / mib:.0f} MiB | {ratio} |")
    if fixed and "budget" in med:
        print(f"\nbudget {budget / mib:.0f} MiB per server; fixed overhead "
              f"(the budgeted servers' peak RSS with near-empty tables) "
              f"{fixed / mib:.0f} MiB; budgeted peak {med['budget']['rss'] / mib:.0f}"
              f" MiB <= budget + overhead = {(budget + fixed) / mib:.0f} MiB: "
              f"{med['budget']['rss'] <= budget + fixed}")
    if "unlimited" in med:
        u = med["unlimited"]
        print(f"sparse rows over both servers: {u['rows']}, "
              f"{u['memory'] / mib:.0f} MiB in memory without a budget: "
              f"{u['memory'] / (2 * budget):.1f}× the servers' combined "
              f"budget")


def main():
    p = argparse.ArgumentParser()
    sub = p.add_subparsers(dest="cmd", required=True)
    j = sub.add_parser("job")
    j.add_argument("--teacher", required=True)
    r = sub.add_parser("record")
    for flag in ("--status", "--worker_log", "--rss", "--system"):
        r.add_argument(flag, required=True)
    r.add_argument("--round", type=int, required=True)
    r.add_argument("--rows", type=int, default=0)
    r.add_argument("--memory", type=int, default=0)
    t = sub.add_parser("table")
    t.add_argument("results")
    t.add_argument("--budget", type=int, required=True)
    args = p.parse_args()
    {"job": job, "record": record, "table": table}[args.cmd](args)


if __name__ == "__main__":
    main()
