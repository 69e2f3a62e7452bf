"""What a ``paramserver.torch.Worker`` tells the coordinator about its job:
progress reports, the final model's upload, the end of its place and its
failure. A mixin of Worker.
"""

from __future__ import annotations

import logging
import time
from typing import TYPE_CHECKING, Optional

from paramserver import v1
from paramserver.errors import (CancelledError, JobStoppedError,
                                ParamServerError)

if TYPE_CHECKING:
    from paramserver.torch._job import _Job

log = logging.getLogger("paramserver")


class _Reports:
    """Worker's reports to the coordinator."""

    def _progress(self, job: _Job, epoch: int) -> "v1.ProgressReport":
        now = time.monotonic()
        elapsed = max(now - job.interval_start, 1e-9)
        report = v1.ProgressReport(
            job_id=job.job_id, worker_index=job.index, epoch=epoch,
            clock=job.clock, total_clocks=job.total_clocks,
            loss=(job.loss_sum / job.loss_steps) if job.loss_steps else 0.0,
            samples_per_second=job.interval_steps * job.spec.batch_size /
            elapsed, test_auc=-1, test_log_loss=-1)
        job.loss_sum, job.loss_steps, job.interval_steps = 0.0, 0, 0
        job.interval_start = job.last_report = now
        return report

    def _upload(self, job: _Job, test_samples: Optional[int]) -> None:
        values = self._module_values(job)
        request = v1.UploadModelRequest(worker_index=0)
        model = request.model
        model.job_id = job.job_id
        model.model.CopyFrom(job.spec.model)
        model.clock = job.clock
        model.test_accuracy = job.test_accuracy
        model.test_auc = job.test_auc
        model.test_log_loss = job.test_log_loss
        model.test_samples = int(test_samples or 0)
        for t, lo, hi in zip(job.tensors, job.offsets[:-1], job.offsets[1:]):
            model.tensors.add(name=t.name, shape=list(t.shape),
                              data=values[lo:hi].astype("<f4").tobytes())
        job.coordinator.upload(request)
        log.info("job %s: uploaded the trained model (clock %d, test "
                 "accuracy %.4f)", job.job_id, job.clock, job.test_accuracy)

    def _finish(self, job: _Job) -> None:
        with self._lock:
            job.finished = True
            self._done_places.add((job.job_id, job.index))
            if self._offered is not None and (
                    self._offered.job_id, self._offered.index) == (
                        job.job_id, job.index):
                self._offered = None
        job.close()

    def _fail(self, job: _Job, error: BaseException) -> None:
        """Reports a failure of this worker to the coordinator (the job
        fails with its message) unless the job was stopped elsewhere."""
        if job.finished or isinstance(error, JobStoppedError):
            return
        if job.stop.reason is not None and isinstance(error, CancelledError):
            return
        message = str(error) if isinstance(error, ParamServerError) else (
            f"{type(error).__name__}: {error}")
        log.error("job %s: worker %d failed: %s", job.job_id, job.index,
                  message)
        report = v1.ProgressReport(job_id=job.job_id, worker_index=job.index,
                                   epoch=job.epoch, clock=job.clock,
                                   test_accuracy=-1,
                                   error=message.encode()[:4000].decode(
                                       "utf-8", "ignore"))
        try:
            job.coordinator.report(report, must_arrive=True, window=10.0)
        finally:
            with self._lock:
                job.finished = True
                self._done_places.add((job.job_id, job.index))
                self._offered = None
            job.stop.stop(JobStoppedError(f"worker {job.index} failed"))
            job.close()

