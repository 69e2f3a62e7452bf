#!/usr/bin/env python3
"""The pause a server move causes for a PyTorch job (psctl scale; docs/
benchmarks.md, "Server moves of a PyTorch job"), from the job's own clocks,
as bench/scale_move.sh measures it for ps-worker: the README job's model as
a PyTorch module (MLP 784-256-128-10 with ReLU, an EXTERNAL model; Adam
1e-3, BSP, batch 64, 2 workers, WAL) trained on Fashion-MNIST by two
paramserver.torch.Worker processes on a local cluster of real processes
(1 coordinator, 3 servers with data directories), moved 2 -> 3 -> 2 servers
MOVES times each way, 40 clocks apart. Worker 0 appends each acknowledged
clock to its ack log; a poller stamps every new line (every 1 ms). A move's
pause is the gap between the acknowledgements of clocks C-1 and C, C the
clock the move took effect at (``map_moves``), so it includes one step.

  OPENBLAS_NUM_THREADS=1 python3 bench/python_scale_move.py BUILD_DIR \\
      [--moves 3] [--heartbeat_ms 500] [--native auto|on|off]

Prints one line per move and the medians. Needs the Fashion-MNIST files.
"""

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, os.pardir, "tests", "python"))

WORKER = r'''
import sys, torch, torch.nn.functional as F
import paramserver as ps
from paramserver.data import load_idx
coordinator, job, ack_log, native = sys.argv[1:5]
torch.set_num_threads(1)
d = "/usr/share/datasets/fashion-mnist/"
x, y = load_idx(d + "train-images-idx3-ubyte.gz",
                d + "train-labels-idx1-ubyte.gz", 0)
data = (torch.from_numpy(x), torch.from_numpy(y))
torch.manual_seed(0)
module = torch.nn.Sequential(torch.nn.Linear(784, 256), torch.nn.ReLU(),
                             torch.nn.Linear(256, 128), torch.nn.ReLU(),
                             torch.nn.Linear(128, 10))
native = {"auto": None, "on": True, "off": False}[native]
with ps.torch.Worker(coordinator, module, job=job, ack_log=ack_log,
                     native=native) as worker:
    for _, batches in worker.epochs(data):
        for xb, yb in batches:
            F.cross_entropy(module(xb), yb).backward()
            worker.step()
        worker.report()
'''


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("build_dir")
    parser.add_argument("--moves", type=int, default=3)
    parser.add_argument("--heartbeat_ms", type=int, default=500)
    parser.add_argument("--native", default="auto",
                        choices=["auto", "on", "off"])
    args = parser.parse_args()
    build = os.path.abspath(args.build_dir)
    os.environ["PS_BUILD_DIR"] = build
    sys.path.insert(0, os.path.join(build, "python"))
    import torch  # noqa: F401
    import paramserver as ps
    from cluster import Cluster

    run_dir = tempfile.mkdtemp(prefix="ps-python-scale.")
    cluster = Cluster(run_dir, heartbeat_ms=args.heartbeat_ms,
                      lease_ms=max(1500, 6 * args.heartbeat_ms))
    stop = threading.Event()
    try:
        coordinator = cluster.start(servers=3)
        module = torch.nn.Sequential(
            torch.nn.Linear(784, 256), torch.nn.ReLU(),
            torch.nn.Linear(256, 128), torch.nn.ReLU(),
            torch.nn.Linear(128, 10))
        client = ps.JobClient(coordinator)
        job = client.submit({
            "name": "python-scale-bench", "model": ps.torch.model_spec(module),
            "epochs": 2, "batch_size": 64, "seed": 42,
            "optimizer": {"adam": {"learning_rate": 0.001}},
            "consistency": {"model": "BSP"}, "num_workers": 2,
            "num_servers": 2, "durability": "WAL"})
        script = os.path.join(run_dir, "worker.py")
        with open(script, "w") as f:
            f.write(WORKER)
        acks = os.path.join(run_dir, "acks0.log")
        open(acks, "w").close()
        for i in range(2):
            cluster.start_python(script, job,
                                 acks if i == 0 else acks + ".other",
                                 args.native)
        stamps = {}

        def poll():
            with open(acks) as src:
                buf = ""
                while not stop.is_set():
                    chunk = src.read()
                    if not chunk:
                        time.sleep(0.001)
                        continue
                    now = time.monotonic()
                    buf += chunk
                    *lines, buf = buf.split("\n")
                    for line in lines:
                        parts = line.split()
                        if len(parts) == 3:
                            stamps.setdefault(int(parts[2]), now)

        poller = threading.Thread(target=poll, daemon=True)
        poller.start()

        def clock():
            return max(stamps) if stamps else 0

        def wait_clock(c):
            while clock() < c:
                status = client.get(job)
                assert status.state in (ps.v1.PENDING, ps.v1.RUNNING), \
                    status.message
                time.sleep(0.05)

        def wait_moves(n):
            while len(client.get(job).map_moves) < n:
                time.sleep(0.02)

        wait_clock(50)
        done = 0
        for _ in range(args.moves):
            for n in (3, 2):
                client.scale(job, n)
                done += 1
                wait_moves(done)
                wait_clock(clock() + 40)
        status = client.get(job)
        client.cancel(job)
        stop.set()
        clocks = sorted(stamps)
        gaps = [stamps[b] - stamps[a] for a, b in zip(clocks, clocks[1:])
                if b == a + 1]
        step = statistics.median(gaps)
        pauses = []
        for m in status.map_moves:
            c = m.clock
            if c in stamps and c - 1 in stamps:
                gap = stamps[c] - stamps[c - 1]
                pauses.append(gap)
                print(f"move to v{m.version} ({m.num_servers} servers, "
                      f"{m.units_moved} units) at clock {c}: gap "
                      f"{gap * 1000:.0f} ms (coordinator: "
                      f"{m.committed_time_ms - m.requested_time_ms} ms from "
                      "the call to the commit)")
        print(json.dumps({"heartbeat_ms": args.heartbeat_ms,
                          "native": args.native,
                          "median_step_ms": round(step * 1000, 1),
                          "pauses_ms": [round(p * 1000) for p in pauses],
                          "median_pause_ms":
                              round(statistics.median(pauses) * 1000)}))
    finally:
        stop.set()
        cluster.stop()
        shutil.rmtree(run_dir, ignore_errors=True)


if __name__ == "__main__":
    main()
