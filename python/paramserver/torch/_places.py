"""How a ``paramserver.torch.Worker`` gets its place in a job: the
membership's callbacks (the heartbeat thread), waiting for an assignment,
and matching the module's tensors to the job's. A mixin of Worker.
"""

from __future__ import annotations

import logging
import time
from typing import Dict, List, Optional, Sequence, Tuple

import grpc
import torch

from paramserver import v1
from paramserver.errors import (CancelledError, JobStoppedError,
                                ModelMismatchError, ParamServerError,
                                error_for)
from paramserver.layout import TensorLayout
from paramserver.torch.buffers import job_buffers

log = logging.getLogger("paramserver")


class _Places:
    """Worker's membership and job matching (its state is Worker's)."""

    # Membership (the heartbeat thread).

    def _held(self) -> List["v1.HeldAssignment"]:
        with self._lock:
            job = self._job
        if job is None or job.finished:
            return []
        return [v1.HeldAssignment(job_id=job.job_id, index=job.index)]

    def _on_assignments(self, assignments: List["v1.Assignment"]) -> None:
        with self._lock:
            places = {(a.job_id, a.index): a for a in assignments}
            job = self._job
            if job is not None and (job.job_id, job.index) not in places:
                if not job.finished:
                    job.stop.stop(JobStoppedError(
                        f"job {job.job_id} ended, or worker {job.index}'s "
                        "place was given to another worker"))
            elif job is not None and not job.finished:
                # A newer shard map (a server move or rebuild) to follow.
                job.offer_map(places[(job.job_id, job.index)])
            if job is None or job.finished:
                for place, a in places.items():
                    if place not in self._done_places:
                        if self._offered is None:
                            log.info("assigned job %s, worker %d of %d",
                                     a.job_id, a.index, a.num_workers)
                        self._offered = a
                        self._lock.notify_all()
                        break
                else:
                    self._offered = None

    def _on_membership_error(self, error: ParamServerError) -> None:
        if (error.code == grpc.StatusCode.INVALID_ARGUMENT and
                error.message.startswith("model_digest:")):
            error = ModelMismatchError(self._explain_mismatch(error.message))
        with self._lock:
            self._error = error
            self._lock.notify_all()
            job = self._job
        if job is not None:
            job.stop.stop(error)

    def _explain_mismatch(self, message: str) -> str:
        """Adds which tensors differ to the coordinator's refusal, which
        lists the job's tensors as "name[d0,d1]"."""
        _, _, listed = message.partition("the job's tensors:")
        theirs: Dict[str, Tuple[int, ...]] = {}
        for token in listed.split():
            name, bracket, dims = token.partition("[")
            if bracket and dims.endswith("]"):
                theirs[name] = tuple(int(d) for d in dims[:-1].split(",") if d)
        if not theirs:
            return message
        mine = {n: tuple(p.shape) for n, p in self._params}
        diffs = []
        for name in sorted(set(theirs) | set(mine)):
            if name not in mine:
                diffs.append(f"{name}{list(theirs[name])} is not in the module")
            elif name not in theirs:
                diffs.append(f"the module's {name}{list(mine[name])} is not "
                             "in the job")
            elif theirs[name] != mine[name]:
                diffs.append(f"{name} is {list(theirs[name])} in the job, "
                             f"{list(mine[name])} in the module")
        return message + "; differences: " + "; ".join(diffs[:20])

    # Taking a job.

    def wait_for_job(self, timeout: Optional[float] = None) -> "v1.Assignment":
        """Blocks until the coordinator gives this worker a place; returns
        the assignment. DeadlineExceededError after `timeout` seconds; the
        membership's error (ModelMismatchError, UnauthenticatedError...) if
        the coordinator refused the worker."""
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._lock:
            while self._offered is None:
                if self._error is not None:
                    raise self._error
                if self._closed:
                    raise CancelledError("the worker is closed")
                remaining = (None if deadline is None
                             else deadline - time.monotonic())
                if remaining is not None and remaining <= 0:
                    raise error_for(
                        grpc.StatusCode.DEADLINE_EXCEEDED,
                        f"no job for this worker within {timeout} s (model "
                        f"{self.digest}; a job's model must match the "
                        "module)")
                self._lock.wait(0.5 if remaining is None else min(remaining, 0.5))
            return self._offered

    def _match(self, tensors: Sequence[TensorLayout],
               job_id: str) -> List[torch.Tensor]:
        mine: Dict[str, torch.Tensor] = dict(self._params)
        mine.update(job_buffers(self.module, tensors))
        job_names = [t.name for t in tensors]
        diffs = []
        for t in tensors:
            p = mine.get(t.name)
            if p is None:
                diffs.append(f"{t.name}{list(t.shape)} is not in the module")
            elif tuple(p.shape) != t.shape:
                diffs.append(f"{t.name} is {list(t.shape)} in the job, "
                             f"{list(p.shape)} in the module")
        for name in mine:
            if name not in set(job_names):
                diffs.append(f"the module's {name}{list(mine[name].shape)} "
                             "is not in the job")
        if diffs:
            raise ModelMismatchError(
                f"model: the module does not match job {job_id}'s model: "
                + "; ".join(diffs[:20]))
        return [mine[name] for name in job_names]

