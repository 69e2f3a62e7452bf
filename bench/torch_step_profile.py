#!/usr/bin/env python3
"""The SDK's cost per step of a small PyTorch model (docs/benchmarks.md, "A
PyTorch LSTM against DDP"): bench/torch_rnn_vs_ddp.py's LSTM (24,714
parameters) trained by 2 paramserver.torch.Worker processes on a cluster of
2 servers (the build tree's; BSP, MEMORY), `--steps` steps of batch 64, in
modes alternating within each round:

  comm     no forward or backward: before each step() the gradients of one
           real backward pass are put back into ``.grad`` (the SDK's whole
           path: gather, check, push, pull, load; nothing of the model's)
  compute  the whole step (forward, backward, step())

A mode ending in ``-seq`` runs ``Worker(pipeline=False)``; one ending in
``-py`` ``Worker(native=False)`` (the pure-Python step pipeline, where the
plain mode runs the compiled transport when it is built: docs/python.md,
"The compiled transport"); one ending in ``-before`` the SDK found at
``--baseline`` (a PYTHONPATH: an older build's
package), for a before/after in one sitting.

Prints the median time per step of worker 0 (the first 20 steps left out)
and the mean CPU time its process spent per step (every thread) per mode, and with ``--profile DIR`` writes worker 0's cProfile of its
main thread (DIR/<mode>-main.prof) and its communication thread
(DIR/<mode>-comm.prof) in the last round, and prints their top entries.

  PYTHONPATH=build/python OPENBLAS_NUM_THREADS=1 \\
    python3 bench/torch_step_profile.py [--rounds 3] [--steps 300] \\
    [--modes comm,compute,comm-before] [--baseline DIR] [--profile DIR]
"""

import argparse
import cProfile
import io
import json
import os
import pstats
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, os.path.join(ROOT, "tests", "python"))
sys.path.insert(0, HERE)


def worker(args):
    import torch
    import torch.nn.functional as F
    import paramserver as ps
    from torch_rnn_vs_ddp import RowLstm, load
    torch.set_num_threads(1)
    torch.manual_seed(0)
    model = RowLstm()
    x, y = load("train", args.samples)
    main_prof = cProfile.Profile() if args.profile else None
    comm_prof = cProfile.Profile() if args.profile else None
    if comm_prof is not None:
        inner = ps.torch.Worker._push_and_pull

        def profiled(self, *a, **k):
            comm_prof.enable()
            try:
                return inner(self, *a, **k)
            finally:
                comm_prof.disable()
        ps.torch.Worker._push_and_pull = profiled
    F.cross_entropy(model(x[:64]), y[:64]).backward()
    saved = [p.grad.clone() for p in model.parameters()]
    times = []
    cpu = []
    options = {} if args.pipeline else {"pipeline": False}
    if not args.native:
        options["native"] = False  # Not passed otherwise: older SDKs.
    with ps.torch.Worker(args.coordinator, model, **options) as w:
        for _, batches in w.epochs((x, y)):
            last = time.perf_counter()
            last_cpu = time.process_time()
            if main_prof:
                main_prof.enable()
            for bx, by in batches:
                if args.compute:
                    F.cross_entropy(model(bx), by).backward()
                else:
                    for p, g in zip(model.parameters(), saved):
                        p.grad = g.clone()
                w.step()
                now = time.perf_counter()
                now_cpu = time.process_time()
                times.append(now - last)
                cpu.append(now_cpu - last_cpu)
                last, last_cpu = now, now_cpu
            if main_prof:
                main_prof.disable()
            w.report()
        index = w.index
    if args.profile and index == 0:
        main_prof.dump_stats(f"{args.profile}-main.prof")
        comm_prof.dump_stats(f"{args.profile}-comm.prof")
    print(json.dumps({"index": index, "times": times[20:],
                      "cpu": cpu[20:]}), flush=True)


def run_job(coordinator, mode, steps, round_dir, profile, baseline):
    """Runs a job in `mode`: comm or compute, then -seq (pipeline=False),
    -py (native=False) or -before (the package in `baseline`); returns worker 0's median ms
    and mean CPU ms (all its threads) per step."""
    compute = mode.startswith("compute")
    pipeline = not mode.endswith("-seq")
    native = not mode.endswith("-py")
    env = dict(os.environ)
    if mode.endswith("-before"):
        env["PYTHONPATH"] = baseline
    import paramserver as ps
    from torch_rnn_vs_ddp import RowLstm
    spec = {"name": "step-profile", "model": ps.torch.model_spec(RowLstm()),
            "epochs": 1, "batch_size": 64, "seed": 1,
            "optimizer": {"adam": {"learning_rate": 0.002}},
            "consistency": {"model": "BSP"}, "num_workers": 2,
            "num_servers": 2, "durability": "MEMORY"}
    with ps.JobClient(coordinator) as client:
        job = client.submit(spec)
        procs = []
        for i in range(2):
            log = open(os.path.join(round_dir, f"worker{i}.log"), "w")
            argv = [sys.executable, __file__, "worker", "--coordinator",
                    coordinator, "--samples", str(2 * 64 * steps),
                    "--compute", str(int(compute)),
                    "--pipeline", str(int(pipeline)),
                    "--native", str(int(native))]
            if profile:
                argv += ["--profile", profile]
            procs.append(subprocess.Popen(argv, stdout=subprocess.PIPE,
                                          stderr=log, text=True, env=env))
        status = client.wait(job, timeout=600)
        if status.state != ps.v1.SUCCEEDED:
            raise RuntimeError(f"{job}: {status.message}")
    for p in procs:
        out, _ = p.communicate(timeout=60)
        result = json.loads(out.strip().splitlines()[-1])
        if result["index"] == 0:
            return (statistics.median(result["times"]) * 1000,
                    statistics.mean(result["cpu"]) * 1000)
    raise RuntimeError("no worker 0")


def show(path, limit):
    if not os.path.exists(path) or os.path.getsize(path) == 0:
        return
    out = io.StringIO()
    stats = pstats.Stats(path, stream=out)
    stats.sort_stats("tottime").print_stats(limit)
    print(f"--- {os.path.basename(path)} (by own time)")
    print("\n".join(out.getvalue().splitlines()[-limit - 3:]))


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("command", nargs="?", default="bench")
    parser.add_argument("--coordinator")
    parser.add_argument("--samples", type=int, default=0)
    parser.add_argument("--compute", type=int, default=1)
    parser.add_argument("--pipeline", type=int, default=1,
                        help="Worker(pipeline=...); bench: also run 0")
    parser.add_argument("--native", type=int, default=1,
                        help="0: Worker(native=False)")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--modes", default="comm,compute")
    parser.add_argument("--profile", default="",
                        help="a directory for the last round's profiles")
    parser.add_argument("--top", type=int, default=25)
    parser.add_argument("--baseline", default="",
                        help="PYTHONPATH of the SDK that *-before modes run")
    args = parser.parse_args()
    if args.command == "worker":
        args.compute = bool(args.compute)
        args.pipeline = bool(args.pipeline)
        args.native = bool(args.native)
        return worker(args)
    from cluster import Cluster
    modes = args.modes.split(",")
    results = {m: [] for m in modes}
    with tempfile.TemporaryDirectory() as tmp:
        cluster = Cluster(tmp)
        try:
            coordinator = cluster.start_coordinator()
            for _ in range(2):
                cluster.start_server(durable=False)
            for r in range(args.rounds):
                for mode in modes if r % 2 == 0 else modes[::-1]:
                    d = os.path.join(tmp, f"r{r}-{mode}")
                    os.makedirs(d)
                    profile = ""
                    if args.profile and r == args.rounds - 1:
                        os.makedirs(args.profile, exist_ok=True)
                        profile = os.path.join(args.profile, mode)
                    ms, cpu = run_job(coordinator, mode, args.steps, d,
                                      profile, args.baseline)
                    results[mode].append((ms, cpu))
                    print(f"round {r} {mode:14s} {ms:7.2f} ms/step, "
                          f"{cpu:6.2f} CPU ms/step", flush=True)
        finally:
            cluster.stop()
    print(f"median over {args.rounds} rounds, worker 0, ms per step "
          f"(load average {os.getloadavg()[0]:.1f}):")
    for mode in modes:
        ms = statistics.median(m for m, _ in results[mode])
        cpu = statistics.median(c for _, c in results[mode])
        print(f"  {mode:14s} {ms:7.2f} ms, {cpu:6.2f} CPU ms "
              "(worker 0's process)")
    if args.profile:
        for mode in modes:
            for part in ("main", "comm"):
                show(os.path.join(args.profile, f"{mode}-{part}.prof"),
                     args.top)


if __name__ == "__main__":
    main()
