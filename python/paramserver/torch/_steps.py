"""A ``paramserver.torch.Worker`` step's communication: the gradients
gathered into one buffer, the push and the pull (through the job's step
pipeline, or on the communication thread), the values loaded into the
module, and progress reports sent between steps. A mixin of Worker
(docs/python.md, "A step's cost").
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

import numpy as np
import torch

from paramserver._native_step import RowsPull
from paramserver._sparse import push_rows
from paramserver.errors import JobStoppedError, ParamServerError
from paramserver.torch.buffers import assign

if TYPE_CHECKING:
    from paramserver.torch._job import _Job


class _Steps:
    """Worker's step internals (its state is the job's, and Worker's
    report_interval and ack log)."""

    def _module_values(self, job: _Job) -> np.ndarray:
        with torch.no_grad():
            return torch.cat([p.detach().reshape(-1) for p in job.params]).to(
                "cpu", torch.float32).numpy().copy()

    def _gather(self, job: _Job) -> np.ndarray:
        """The module's gradients in the job's tensor order, one flat
        float32 vector (zeros for a parameter without a gradient, and for
        a buffer): one concatenation into a buffer reused every step (a
        numpy view of it; the next call overwrites it)."""
        if job.grad_flat is None:
            job.grad_flat = torch.zeros(job.client.size, dtype=torch.float32)
            job.grad_np = job.grad_flat.numpy()
        grads = []
        on_cpu = True
        for i, p in enumerate(job.params):
            g = p.grad
            if g is None:
                g = job.zero_grads[i]
                if g is None:
                    g = job.zero_grads[i] = torch.zeros(
                        p.numel(), dtype=torch.float32, device=p.device)
            else:
                g = g.detach().reshape(-1)
            on_cpu = on_cpu and g.device.type == "cpu"
            grads.append(g)
        if not grads:
            return job.grad_np
        if on_cpu and all(g.dtype == torch.float32 for g in grads):
            torch.cat(grads, out=job.grad_flat)
        else:
            job.grad_flat.copy_(torch.cat([g.to("cpu", torch.float32)
                                           for g in grads]))
        return job.grad_np

    def _load(self, job: _Job) -> None:
        """Copies the values read (job.values) into the module, each
        parameter's and buffer's in place from a view of them."""
        with torch.no_grad():
            for p, values in job.loads:
                assign(p, values)

    def _wait_pending(self, job: _Job) -> None:
        """Waits for the communication of the last step: its push (and, on
        the communication thread, its pull). Raises their error."""
        pending, job.pending = job.pending, None
        if pending is not None:
            pending.result()  # Raises the push's or pull's error.
        pushing, job.pushing = job.pushing, None
        rows, job.pushing_rows = job.pushing_rows, None
        if pushing is not None:
            try:
                job.pipe.finish_push(pushing, job.grad_np)
            except ParamServerError as e:
                if not job.map_changed(e):
                    raise
                # Sent again, unchanged, under the new map.
                job.follow(e)
                self._push(job, pushing.clock, job.grad_np, rows)
            self._acknowledged(job, pushing.clock)

    def _push(self, job: _Job, clock: int, grads: np.ndarray,
              rows=None) -> None:
        """Pushes `clock`'s gradients (and a sparse job's `rows`: per table
        name, distinct ids and their gradients) through the job's
        ParameterClient, routed under its map now, following a change of
        the map."""

        def push() -> None:
            routed = (push_rows(job.sparse.router, rows, job.client.encoding)
                      if rows else None)
            job.client.push(clock, grads, sparse=routed)

        job.following(push)

    def _start_push(self, job: _Job, clock: int, grads: np.ndarray,
                    rows=None) -> None:
        """Starts the push of `clock` on the step pipeline (finished by
        _wait_pending); pushed at once under the new map if the map changed
        before it could start."""
        try:
            job.pushing = (job.pipe.start_push(clock, grads, rows) if rows
                           else job.pipe.start_push(clock, grads))
            job.pushing_rows = rows
        except ParamServerError as e:
            if not job.map_changed(e):
                raise
            job.follow(e)
            self._push(job, clock, grads, rows)
            self._acknowledged(job, clock)

    def _acknowledged(self, job: _Job, clock: int) -> None:
        if self._ack_log is not None:
            self._ack_log.write(f"{job.job_id} {job.index} {clock}\n")
            self._ack_log.flush()  # The line must survive kill -9.

    def _report_if_due(self, job: _Job, clock: int) -> None:
        """Sends a progress report (clock + 1 pushed) on the communication
        thread when one is due and none is in flight."""
        if time.monotonic() - job.last_report < self.report_interval:
            return
        if job.reporting is not None and not job.reporting.done():
            return
        report = self._progress(job, epoch=job.epoch)
        report.clock = clock + 1
        report.test_accuracy = -1

        def send() -> None:
            if job.coordinator.report(report, must_arrive=False):
                job.stop.stop(JobStoppedError(
                    f"job {job.job_id} is no longer running"))
        job.reporting = job.comm.submit(send)

    def _sync_pipelined(self, job: _Job) -> None:
        """_sync with the step pipeline: the pull of this clock (made while
        the last step computed, or now), then the pull of the next clock
        within the epoch started before the batch is computed."""
        pulling = job.pulling
        sparse = job.sparse
        if pulling is not None and pulling.clock == job.clock:
            job.pulling = None
            job.pipe.finish_pull(pulling, job.values)
            self._load(job)
            job.loaded_clock = job.clock
            if sparse is not None:
                sparse.install(job.clock, pulling if isinstance(
                    pulling, RowsPull) else None)
        elif pulling is not None and not (pulling.clock == job.clock + 1 and
                                          job.loaded_clock == job.clock):
            job.pulling = None
            job.pipe.abandon(pulling)
        if job.loaded_clock != job.clock:
            if sparse is None:
                job.pipe.pull(job.clock, job.values)
            else:
                sparse.install(job.clock, job.pipe.pull_rows(
                    job.clock, job.values, sparse.wanted(job.batch_ids)))
            self._load(job)
            job.loaded_clock = job.clock
        elif sparse is not None:
            # Rows no pull of this clock brought (an epoch's first batch,
            # after the epoch-end read): pulled now.
            sparse.ensure(job.clock, job.batch_ids)
        if (job.pulling is None and not job.pull_after_push and
                job.clock + 1 < (job.epoch + 1) * job.steps):
            job.pulling = (job.pipe.start_pull(job.clock + 1)
                           if sparse is None else job.pipe.start_pull(
                               job.clock + 1, sparse.wanted(job.next_ids)))

    def _pull_after_push(self, job: _Job) -> None:
        """A BSP job with sparse tables (job.pull_after_push): the pull of
        the next clock, with the rows of the next batch's ids, started
        right after this step's push, while the servers wait for the
        other workers' pushes, which the pull must wait for anyway; the
        next batch's ids are taken apart (np.unique) meanwhile, not before
        it computes."""
        if (job.pull_after_push and job.pulling is None and
                job.clock < (job.epoch + 1) * job.steps):
            job.pulling = job.pipe.start_pull(
                job.clock, job.sparse.wanted(job.next_ids))

    def _sync(self, job: _Job) -> None:
        if job.stop.reason is not None:
            raise job.stop.reason
        self._wait_pending(job)
        # Again from its start under a new map: what it finished is not
        # done again (loaded_clock, the pull in flight).
        job.following(lambda: self._sync_now(job))

    def _sync_now(self, job: _Job) -> None:
        if job.pipe is not None:
            self._sync_pipelined(job)
        elif job.loaded_clock != job.clock:
            pull = (job.sparse.pull_of(job.batch_ids)
                    if job.sparse is not None else None)
            job.client.pull(job.clock, job.values, sparse=pull)
            job.loaded_clock = job.clock
            self._load(job)
            if job.sparse is not None:
                job.sparse.install(job.clock, pull)
        elif job.sparse is not None:
            job.sparse.ensure(job.clock, job.batch_ids)

    def _push_and_pull(self, job: _Job, clock: int, grads: np.ndarray,
                       rows=None, next_ids=None) -> None:
        """The communication thread: the push of `clock` (with its sparse
        `rows`: per table name, ids and gradients), the progress report
        when one is due, then the read of clock + 1 (with the rows of
        `next_ids`, the next batch's); each follows a change of the job's
        map."""
        self._push(job, clock, grads, rows)
        self._acknowledged(job, clock)
        now = time.monotonic()
        if now - job.last_report >= self.report_interval:
            report = self._progress(job, epoch=job.epoch)
            report.clock = clock + 1
            report.test_accuracy = -1
            if job.coordinator.report(report, must_arrive=False):
                job.stop.stop(JobStoppedError(
                    f"job {job.job_id} is no longer running"))
        if clock + 1 < job.total_clocks or job.index != 0:

            def read():
                pull = (job.sparse.pull_of(next_ids)
                        if job.sparse is not None else None)
                job.client.pull(clock + 1, job.values, sparse=pull)
                return pull

            pull = job.following(read)
            self._load(job)
            job.loaded_clock = clock + 1
            if job.sparse is not None:
                job.sparse.install(clock + 1, pull)

    def _final_read(self, job: _Job) -> None:
        job.following(lambda: job.client.pull(job.total_clocks, job.values,
                                              final=True))
        self._load(job)
        job.loaded_clock = job.total_clocks
