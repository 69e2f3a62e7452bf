#!/usr/bin/env python3
"""Per-phase timers of the PyTorch DLRM example's workers (docs/
benchmarks.md, "The PyTorch DLRM example against DDP"): runs
examples/pytorch/dlrm_criteo.py with its arguments and wraps the SDK's step
functions (the forward and backward passes, Worker.step and Worker._sync,
the transports' calls, the sparse rows' bookkeeping) with timers of wall
time and of the calling thread's CPU time; at exit it writes
PHASES_DIR/phases-PID.json (default /tmp/dlrm-phases): per thread and
phase, calls, wall ms and CPU ms in all and per step. Nested phases are
timed each (a phase's time includes its inner ones). Far cheaper than
cProfile (one pair of clock reads per call). Used as run_dlrm.sh's PYTHON
through bench/dlrm_profile.sh (MODE=phases):

  MODE=phases PROFILE_DIR=/tmp/p bench/dlrm_profile.sh [run_dlrm.sh args]
"""

import atexit
import functools
import json
import os
import runpy
import sys
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
EXAMPLE = os.path.join(HERE, os.pardir, "examples", "pytorch",
                       "dlrm_criteo.py")
sys.path.insert(0, HERE)

_lock = threading.Lock()
_totals = {}  # (thread name, phase) -> [calls, wall s, cpu s]


def _timed(name, fn):
    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        wall, cpu = time.perf_counter(), time.thread_time()
        try:
            return fn(*args, **kwargs)
        finally:
            wall = time.perf_counter() - wall
            cpu = time.thread_time() - cpu
            key = (threading.current_thread().name, name)
            with _lock:
                t = _totals.setdefault(key, [0, 0.0, 0.0])
                t[0] += 1
                t[1] += wall
                t[2] += cpu
    return wrapper


def _wrap(owner, attr, name=None):
    fn = getattr(owner, attr, None)
    if fn is not None:
        setattr(owner, attr, _timed(name or f"{owner.__name__}.{attr}", fn))


def install():
    import torch
    import paramserver as ps
    from paramserver import _native_step, _params
    from paramserver.torch import embedding
    from ctr_torch import CtrModel
    _wrap(CtrModel, "forward", "forward")
    _wrap(torch.Tensor, "backward", "backward")
    W = ps.torch.Worker
    for attr in ("step", "_sync", "_gather", "_load", "_push_and_pull",
                 "_wait_pending", "_report_if_due"):
        _wrap(W, attr, f"Worker.{attr}")
    for attr in ("start_push", "finish_push", "start_pull", "finish_pull",
                 "abandon", "pull_rows"):
        _wrap(_native_step.NativePipeline, attr)
    for attr in ("push", "pull"):
        _wrap(_params.ParameterClient, attr)
    for attr in ("wanted", "pull_of", "install", "ensure", "lookup",
                 "take_gradients", "take_row_gradients"):
        _wrap(embedding.SparseStep, attr)
    _wrap(embedding.ShardedEmbedding, "_distinct")


def _dump(out, started):
    wall = time.perf_counter() - started
    steps = max((v[0] for (thread, name), v in _totals.items()
                 if name == "Worker.step"), default=0)
    rows = []
    for (thread, name), (calls, w, c) in sorted(
            _totals.items(), key=lambda kv: -kv[1][1]):
        rows.append({"thread": thread, "phase": name, "calls": calls,
                     "wall_ms": round(1e3 * w, 1), "cpu_ms": round(1e3 * c, 1),
                     "wall_ms_per_step": round(1e3 * w / max(steps, 1), 3),
                     "cpu_ms_per_step": round(1e3 * c / max(steps, 1), 3)})
    with open(os.path.join(out, f"phases-{os.getpid()}.json"), "w") as f:
        json.dump({"steps": steps, "process_wall_s": round(wall, 3),
                   "process_cpu_s": round(time.process_time(), 3),
                   "phases": rows}, f, indent=1)


def main():
    out = os.environ.get("PROFILE_DIR", "/tmp/dlrm-phases")
    os.makedirs(out, exist_ok=True)
    install()
    atexit.register(_dump, out, time.perf_counter())
    sys.argv = [EXAMPLE] + sys.argv[1:]
    runpy.run_path(EXAMPLE, run_name="__main__")


if __name__ == "__main__":
    main()
