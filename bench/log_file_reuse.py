#!/usr/bin/python3
"""What the update log's writes cost in CPU when its file is truncated after
every snapshot (its page-cache pages freed and allocated again), against
overwriting the same file from its start (the pages kept).

Writes REPS records of RECORD_BYTES (the README job's averaged gradient per
server and clock, 0.47 MB) per generation, GENERATIONS times, as a server with
the default --snapshot_log_mib=32 does, and prints the CPU seconds per
record of each way, alternating, ROUNDS times (docs/benchmarks.md, "What is
left to reach 0.8x").

  /usr/bin/python3 bench/log_file_reuse.py [DIR]
"""
import os
import resource
import sys
import tempfile

RECORD_BYTES = 470_000
REPS = 68  # 32 MiB of records.
GENERATIONS = 20
ROUNDS = 3


def cpu_seconds():
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def run(path, reuse):
    record = os.urandom(RECORD_BYTES)
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        start = cpu_seconds()
        for _ in range(GENERATIONS):
            for _ in range(REPS):
                os.write(fd, record)
            if not reuse:
                os.ftruncate(fd, 0)
            os.lseek(fd, 0, os.SEEK_SET)
        return (cpu_seconds() - start) / (GENERATIONS * REPS)
    finally:
        os.close(fd)
        os.unlink(path)


def main():
    directory = sys.argv[1] if len(sys.argv) > 1 else tempfile.gettempdir()
    path = os.path.join(directory, f"log_file_reuse.{os.getpid()}")
    for round_ in range(1, ROUNDS + 1):
        truncated = run(path, reuse=False)
        reused = run(path, reuse=True)
        print(f"round {round_}: truncated {1000 * truncated:.3f} ms, "
              f"reused {1000 * reused:.3f} ms of CPU per "
              f"{RECORD_BYTES} B record ({truncated / reused:.1f}x)")


if __name__ == "__main__":
    main()
