"""One job a ``paramserver.torch.Worker`` trains, from its assignment to its
end: the module's tensors matched to the job's, the connection to the
servers, and the step's state (the push and pull in flight, the reused
buffers). The step's transport is chosen here (docs/python.md, "The
compiled transport"): the compiled one (paramserver._native_step) when
it is built, else the pure-Python pipeline (paramserver._pipeline), or
for a job with sparse tables the communication thread's ParameterClient
calls.
"""

from __future__ import annotations

import concurrent.futures
import time
from typing import TYPE_CHECKING, List, Optional, Tuple, Union

import grpc
import numpy as np
import torch
from torch import nn

from paramserver import v1
from paramserver._cluster import Coordinator, _Stop
from paramserver._native_step import NativePipeline, available
from paramserver._params import ParameterClient
from paramserver._pipeline import Started, StepPipeline
from paramserver._sparse import SparsePull, SparseRouter
from paramserver.errors import error_for
from paramserver.layout import TensorLayout, model_tensors
from paramserver.torch._follow import _MapFollower
from paramserver.torch.embedding import SparseStep

if TYPE_CHECKING:
    from paramserver.torch.worker import Worker


class _Job(_MapFollower):
    """One job this worker trains (an assignment), from its start to its
    end; it follows a change of the job's shard map (_MapFollower)."""

    def __init__(self, worker: "Worker", assignment: "v1.Assignment"):
        self.assignment = assignment
        self._init_follower(assignment)
        self.spec = assignment.spec
        self.index = assignment.index
        self.stop = _Stop()
        self.coordinator = Coordinator(worker._membership, self.stop)
        self.tensors: List[TensorLayout] = []
        self.params: List[nn.Parameter] = []
        self.offsets = np.zeros(1, dtype=np.int64)
        self.client: Optional[ParameterClient] = None
        self.values = np.zeros(0, dtype=np.float32)
        self.clock = 0              # Steps this worker has pushed (or sent).
        self.loaded_clock = -1      # The clock of the values in the module.
        self.steps = 0              # Per epoch.
        self.total_clocks = 0
        self.epoch = 0              # The epoch being trained.
        self.reported_epoch = 0     # Epochs whose end was reported.
        self.pending: Optional[concurrent.futures.Future] = None
        # The step pipeline (a dense job: Worker(pipeline=True)): the push
        # in flight, the pull of a later clock in flight, the progress
        # report in flight; the reused flat gradient buffer (a torch
        # tensor and its numpy view); each parameter's (or buffer's) view
        # of `values` that a load copies into it.
        self.pipe: Optional[Union[StepPipeline, NativePipeline]] = None
        self.pushing: Optional[Started] = None
        self.pushing_rows = None  # The sparse rows of `pushing`, if any.
        self.pulling: Optional[Started] = None
        # Whether the next clock's pull starts after the step's push
        # (Worker._pull_after_push: BSP with sparse tables), not before
        # the batch computes.
        self.pull_after_push = False
        self.reporting: Optional[concurrent.futures.Future] = None
        self.grad_flat: Optional[torch.Tensor] = None
        self.grad_np = np.zeros(0, dtype=np.float32)
        self.zero_grads: List[Optional[torch.Tensor]] = []
        self.loads: List[Tuple[torch.Tensor, torch.Tensor]] = []
        # Sharded embeddings (paramserver.torch.embedding): the rows of a
        # step; epochs()' sparse_ids; the ids of the batch being trained
        # and of the next one.
        self.sparse: Optional[SparseStep] = None
        self.sparse_ids = None
        self.batch_ids = None
        self.next_ids = None
        self.comm = concurrent.futures.ThreadPoolExecutor(
            max_workers=1, thread_name_prefix="paramserver-comm")
        self.finished = False
        self.test_accuracy = -1.0
        self.test_auc = -1.0
        self.test_log_loss = -1.0
        self.loss_sum = 0.0
        self.loss_steps = 0
        self.interval_steps = 0
        self.interval_start = time.monotonic()
        self.last_report = time.monotonic()

    @property
    def job_id(self) -> str:
        return self.assignment.job_id

    def open(self, worker: "Worker") -> None:
        """Matches the module to the job's tensors and connects to the
        servers. Raises ModelMismatchError."""
        self.tensors = model_tensors(self.spec.model)
        self.params = worker._match(self.tensors, self.job_id)
        self.offsets = np.cumsum([0] + [t.numel for t in self.tensors])
        self._worker = worker
        self.client = self.new_client(self.assignment)
        self.values = np.zeros(self.client.size, dtype=np.float32)
        if self.spec.model.sparse_tables or worker._tables:
            self.sparse = SparseStep(
                SparseRouter(self.spec, self.assignment.shard_map),
                worker.module, lambda: self.clock, self._settle,
                self._fetch_rows)
            self.sparse.bind()
        if worker.pipeline and not self.client.use_cache:
            self.pipe = _step_pipeline(self.client, self.assignment,
                                       worker, self.sparse)
        self.pull_after_push = (
            self.pipe is not None and self.sparse is not None and
            self.spec.consistency.model == v1.ConsistencySpec.BSP)
        flat = torch.from_numpy(self.values)
        self.loads = [(p, flat[lo:hi].view(p.shape)) for p, lo, hi in
                      zip(self.params, self.offsets[:-1], self.offsets[1:])]
        self.zero_grads = [None] * len(self.params)

    def _settle(self) -> None:
        """Waits for the communication thread's push and pull, if any."""
        pending, self.pending = self.pending, None
        if pending is not None:
            pending.result()

    def _fetch_rows(self, clock: int, pull: SparsePull) -> None:
        """A forward pass's pull of rows the step did not prefetch (the
        dense values it reads again are dropped). Under a newer shard map
        than `pull`'s, its ids are routed again and their rows placed in
        `pull.rows`."""
        version = self.client.map_version

        def fetch() -> None:
            target = pull
            if self.client.map_version != version:
                target = SparsePull(self.sparse.router, pull.ids)
            self.client.pull(clock, np.empty_like(self.values), sparse=target)
            if target is not pull:
                pull.rows.update(target.rows)

        self.following(fetch)

    def close(self) -> None:
        if self.sparse is not None:
            self.sparse.unbind()
        self.comm.shutdown(wait=False, cancel_futures=True)
        if self.pipe is not None:
            self.pipe.close()
        if self.client is not None:
            self.client.close()



def _step_pipeline(client: ParameterClient, assignment: "v1.Assignment",
                   worker: "Worker", sparse: Optional[SparseStep] = None
                   ) -> Optional[Union[StepPipeline, NativePipeline]]:
    """The step pipeline `worker.native` asks for: the compiled transport
    (None: when it is built), or the pure-Python one. A job with sparse
    tables (`sparse`) has only the compiled one, and only when asked for
    (native=True): by default, and without it, None (the communication
    thread then pushes and pulls through ParameterClient), which measured
    faster on the DLRM example (docs/benchmarks.md)."""
    if worker.native is None:
        native = available() and sparse is None
    elif worker.native and not available():
        raise error_for(grpc.StatusCode.FAILED_PRECONDITION,
                        "native=True: the compiled transport "
                        "(paramserver._native) is not built; build the "
                        "project with Debian's pybind11-dev and python3-dev "
                        "(docs/python.md)")
    else:
        native = bool(worker.native)
    if native:
        return NativePipeline(client, assignment, worker._security,
                              None if sparse is None else sparse.router)
    return StepPipeline(client) if sparse is None else None
