"""Shared by the tests of PyTorch jobs whose servers change while they train
(test_scale_dense.py, test_scale_sparse.py, test_scale_rebuild.py): two
paramserver.torch.Workers, each on its own thread, train one job; the test
thread changes the job's servers at chosen clocks (`disturb`) while they
train. Workers hold at `hold_at` until the disturbance is done, so that it
always falls within training whatever the machine's speed (a move's boundary
is then at most `hold_at`).
"""

from __future__ import annotations

import threading
import time
from typing import Callable, Dict, List, Optional

import torch

import paramserver as ps


class Run:
    """One job trained by two Worker threads. `clocks[w]` is worker w's
    clock (the test thread reads it); `disturbed` releases the workers held
    at `hold_at`; `errors` collects the workers' exceptions."""

    def __init__(self, coordinator: str, job: str, modules: List,
                 data, train_step: Callable, hold_at: int = 1 << 60,
                 sparse_ids=None, after: Optional[Callable] = None,
                 worker_options: Optional[Dict] = None):
        self.coordinator = coordinator
        self.job = job
        self.hold_at = hold_at
        self.clocks = [0, 0]
        self.follows = [0, 0]
        self.disturbed = threading.Event()
        self.errors: List[BaseException] = []
        self.results: Dict = {}
        self._threads = [threading.Thread(
            target=self._train, args=(m, data, train_step, hold_at,
                                      sparse_ids, after,
                                      dict(worker_options or {})),
            daemon=True) for m in modules]

    def start(self) -> "Run":
        for t in self._threads:
            t.start()
        return self

    def join(self, timeout: float = 120) -> None:
        end = time.monotonic() + timeout
        for t in self._threads:
            t.join(max(0.0, end - time.monotonic()))
        assert not any(t.is_alive() for t in self._threads), \
            "workers still training"
        assert not self.errors, self.errors

    def wait_clock(self, clock: int, timeout: float = 60) -> None:
        """Until both workers are at `clock` or beyond."""
        end = time.monotonic() + timeout
        while min(self.clocks) < clock:
            assert not self.errors, self.errors
            assert time.monotonic() < end, f"clocks {self.clocks} < {clock}"
            time.sleep(0.005)

    def _train(self, module, data, train_step, hold_at, sparse_ids, after,
               options) -> None:
        try:
            with ps.torch.Worker(self.coordinator, module, job=self.job,
                                 **options) as worker:
                for _, batches in worker.epochs(data, sparse_ids=sparse_ids):
                    for batch in batches:
                        i = worker.index
                        self.clocks[i] = worker.clock
                        if worker.clock >= hold_at:
                            self.disturbed.wait(60)
                        train_step(module, batch).backward()
                        worker.step()
                    if after is not None and worker.index == 0:
                        after(worker, module, self.results)
                    worker.report()
                self.clocks[worker.index] = worker.clock
                self.follows[worker.index] = worker._job.map_follows
        except BaseException as e:  # pragma: no cover - reported by join
            self.errors.append(e)


def wait_moves(client: ps.JobClient, job: str, moves: int,
               timeout: float = 60) -> "ps.v1.JobStatus":
    """The job's status once `moves` changes of its servers are committed
    (``map_moves``); fails on a job that ended early."""
    end = time.monotonic() + timeout
    while True:
        status = client.get(job)
        if len(status.map_moves) >= moves:
            return status
        assert status.state == ps.v1.RUNNING, status.message
        assert time.monotonic() < end, (
            f"{len(status.map_moves)} of {moves} moves after {timeout} s "
            f"(change in progress: {status.map_change})")
        time.sleep(0.02)


def scale_twice(client: ps.JobClient, run: Run, at: int, gap: int) -> List:
    """2 -> 3 servers once both workers reach clock `at`, back to 2 `gap`
    clocks after the first move took effect (or once they wait at
    `hold_at`); then releases the workers. Returns the two moves
    (``map_moves``)."""
    run.wait_clock(at)
    client.scale(run.job, 3)
    first = wait_moves(client, run.job, 1).map_moves[0]
    assert first.num_servers == 3 and first.units_moved > 0, first
    run.wait_clock(min(first.clock + gap, run.hold_at))
    client.scale(run.job, 2)
    moves = list(wait_moves(client, run.job, 2).map_moves)
    run.disturbed.set()
    return moves


def exported_bytes(client: ps.JobClient, job: str) -> Dict[str, bytes]:
    """The job's exported tensors, as raw bytes by name."""
    return {name: values.tobytes()
            for name, values in client.export(job).items()}


def seeded(make: Callable[[], torch.nn.Module], n: int = 2) -> List:
    """`n` modules made with torch's generator seeded alike (made on the
    calling thread: threads drawing at once would interleave)."""
    modules = []
    for _ in range(n):
        torch.manual_seed(0)
        modules.append(make())
    return modules
