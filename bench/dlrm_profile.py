#!/usr/bin/env python3
"""A cProfile of the PyTorch DLRM example's workers (docs/benchmarks.md,
"The PyTorch DLRM example against DDP"): runs examples/pytorch/dlrm_criteo.py
with its arguments, worker 0's main thread and its communication thread
(Worker._push_and_pull) profiled, and writes PROFILE_DIR/main.prof and
PROFILE_DIR/comm.prof (default /tmp/dlrm-profile). Used as run_dlrm.sh's
PYTHON through bench/dlrm_profile.sh:

  PROFILE_DIR=/tmp/p bench/dlrm_profile.sh [run_dlrm.sh arguments]

then ``python3 -m pstats /tmp/p/main.prof``.
"""

import cProfile
import os
import runpy
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
EXAMPLE = os.path.join(HERE, os.pardir, "examples", "pytorch",
                       "dlrm_criteo.py")


def main():
    out = os.environ.get("PROFILE_DIR", "/tmp/dlrm-profile")
    os.makedirs(out, exist_ok=True)
    import paramserver as ps
    comm = cProfile.Profile()
    inner = ps.torch.Worker._push_and_pull

    def profiled(self, *a, **k):
        comm.enable()
        try:
            return inner(self, *a, **k)
        finally:
            comm.disable()
    ps.torch.Worker._push_and_pull = profiled
    main_prof = cProfile.Profile()
    sys.argv = [EXAMPLE] + sys.argv[1:]
    main_prof.enable()
    try:
        runpy.run_path(EXAMPLE, run_name="__main__")
    finally:
        main_prof.disable()
        tag = "" if not os.path.exists(os.path.join(out, "main.prof")) \
            else f"-{os.getpid()}"
        main_prof.dump_stats(os.path.join(out, f"main{tag}.prof"))
        comm.dump_stats(os.path.join(out, f"comm{tag}.prof"))


if __name__ == "__main__":
    main()
