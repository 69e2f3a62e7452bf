#!/usr/bin/env python3
"""Python workers' step time with push and pull payloads through shared
memory (PushShared/PullShared) and through the socket (Push/Pull), in the
same sitting (docs/python.md, "Same-host payloads").

Starts a coordinator and 2 servers from the build tree (MEMORY durability),
then, for each round and each mode in turn, trains the examples/pytorch
Fashion-MNIST CNN (422,026 parameters: 1.7 MB pushed and pulled a step)
with 2 Python workers under BSP for `--steps` steps each, and prints the
median time per step of both workers (the first 10 steps left out), with
the model's forward and backward (`compute`) and without (`comm`: step()
with no gradients, which pushes zeros: the payload path alone).

  PYTHONPATH=build/python OPENBLAS_NUM_THREADS=1 \\
    python3 bench/python_payloads.py [--rounds 3] [--steps 120] \\
    [--modes compute,comm]
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, os.path.join(ROOT, "tests", "python"))
sys.path.insert(0, os.path.join(ROOT, "examples", "pytorch"))


def worker(args):
    import torch
    import torch.nn.functional as F
    import paramserver as ps
    from fashion_mnist_cnn import FashionCnn, load
    torch.set_num_threads(1)
    torch.manual_seed(0)
    model = FashionCnn()
    x, y = load("train", args.samples)
    times = []
    with ps.torch.Worker(args.coordinator, model,
                         shared_memory_payloads=args.shared) as w:
        for _, batches in w.epochs((x, y)):
            last = time.monotonic()
            for bx, by in batches:
                if args.compute:
                    F.cross_entropy(model(bx), by).backward()
                w.step()
                now = time.monotonic()
                times.append(now - last)
                last = now
            w.report()
    print(json.dumps({"times": times[10:]}), flush=True)


def run_job(cluster, coordinator, shared, compute, steps, round_dir):
    import paramserver as ps
    from fashion_mnist_cnn import FashionCnn
    spec = {"name": "payloads", "model": ps.torch.model_spec(FashionCnn()),
            "epochs": 1, "batch_size": 64, "seed": 1,
            "optimizer": {"adam": {"learning_rate": 0.001}},
            "consistency": {"model": "BSP"}, "num_workers": 2,
            "num_servers": 2, "durability": "MEMORY"}
    samples = 2 * 64 * steps
    with ps.JobClient(coordinator) as client:
        job = client.submit(spec)
        procs = []
        for i in range(2):
            log = open(os.path.join(round_dir, f"worker{i}.log"), "w")
            procs.append(subprocess.Popen(
                [sys.executable, __file__, "worker", "--coordinator",
                 coordinator, "--samples", str(samples),
                 "--shared", str(int(shared)), "--compute", str(int(compute))],
                stdout=subprocess.PIPE, stderr=log, text=True))
        status = client.wait(job, timeout=600)
        if status.state != ps.v1.SUCCEEDED:
            raise RuntimeError(f"{job}: {status.message}")
    times = []
    for p in procs:
        out, _ = p.communicate(timeout=60)
        times += json.loads(out.strip().splitlines()[-1])["times"]
    return statistics.median(times) * 1000


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("command", nargs="?", default="bench")
    parser.add_argument("--coordinator")
    parser.add_argument("--samples", type=int, default=0)
    parser.add_argument("--shared", type=int, default=1)
    parser.add_argument("--compute", type=int, default=1)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--steps", type=int, default=120)
    parser.add_argument("--modes", default="compute,comm",
                        help="which of compute, comm to run")
    args = parser.parse_args()
    if args.command == "worker":
        args.shared = bool(args.shared)
        args.compute = bool(args.compute)
        return worker(args)
    from cluster import Cluster
    results = {}
    with tempfile.TemporaryDirectory() as tmp:
        cluster = Cluster(tmp)
        try:
            coordinator = cluster.start_coordinator()
            for _ in range(2):
                cluster.start_server(durable=False)
            for r in range(args.rounds):
                for compute in [m == "compute"
                                for m in args.modes.split(",")]:
                    for shared in ((True, False) if r % 2 == 0
                                   else (False, True)):
                        d = os.path.join(tmp, f"r{r}-{compute}-{shared}")
                        os.makedirs(d)
                        ms = run_job(cluster, coordinator, shared, compute,
                                     args.steps, d)
                        key = ("compute" if compute else "comm",
                               "shared" if shared else "socket")
                        results.setdefault(key, []).append(ms)
                        print(f"round {r} {key[0]:7s} {key[1]:6s} "
                              f"{ms:7.2f} ms/step", flush=True)
        finally:
            cluster.stop()
    print("median over rounds (ms per step):")
    for what in args.modes.split(","):
        shared = statistics.median(results[(what, "shared")])
        socket = statistics.median(results[(what, "socket")])
        print(f"  {what:7s} shared {shared:7.2f}  socket {socket:7.2f}  "
              f"shared/socket {shared / socket:.3f}")


if __name__ == "__main__":
    main()
