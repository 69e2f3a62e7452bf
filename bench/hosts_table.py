#!/usr/bin/python3
"""The table of bench/hosts_vs_ddp.sh: medians per (shape, workers, system).

  hosts_table.py RESULTS.jsonl

Columns: training time (s), final test accuracy, time / DDP's (same shape and
workers), and worker host w0's bytes sent and received per step against the
model's float32 bytes (235,146 values of the README MLP: 0.94 MB), the payload
a step pushes and pulls.
"""
import json
import statistics
import sys

MODEL_BYTES = 235146 * 4


def median(values):
    values = [v for v in values if v is not None]
    return statistics.median(values) if values else None


def main():
    runs = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
    groups = {}
    for r in runs:
        groups.setdefault((r["shape"], r["workers"]), {}).setdefault(
            r["system"], []).append(r)
    print("| shape | workers | system | rounds | training time (s) | / DDP | "
          "final test accuracy | w0 sent / step (MB) | w0 received / step (MB) "
          "| sent / model bytes |")
    print("|---|---:|---|---:|---:|---:|---:|---:|---:|---:|")
    for (shape, workers), systems in groups.items():
        ddp = median([r["train_s"] for r in systems.get("ddp", [])])
        for system, mine in systems.items():
            t = median([r["train_s"] for r in mine])
            acc = median([r["final_accuracy"] for r in mine])
            tx = median([r["w0_tx_bytes"] / r["steps"] for r in mine])
            rx = median([r["w0_rx_bytes"] / r["steps"] for r in mine])
            ratio = f"{t / ddp:.2f}" if ddp and t else "-"
            print(f"| {shape} | {workers} | {system} | {len(mine)} | {t:.1f} | "
                  f"{ratio} | {acc:.4f} | {tx / 1e6:.3f} | {rx / 1e6:.3f} | "
                  f"{tx / MODEL_BYTES:.2f} |")


if __name__ == "__main__":
    main()
