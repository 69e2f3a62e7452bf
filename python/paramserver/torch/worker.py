"""``paramserver.torch.Worker``: a PyTorch module trained on the cluster.

    import paramserver as ps

    model = Net()
    with ps.torch.Worker("127.0.0.1:7000", model) as worker:
        for epoch, batches in worker.epochs((x_train, y_train)):
            for x, y in batches:
                loss = F.cross_entropy(model(x), y)
                loss.backward()
                worker.step(loss)     # push the gradients, pull the parameters
            worker.report(test_accuracy=evaluate(model))

The optimizer runs on the parameter servers (the job spec's ``optimizer``):
there is no ``torch.optim`` optimizer on the worker. ``step()`` plays the
part of ``optimizer.step(); optimizer.zero_grad(set_to_none=True)``: it takes
the module's gradients, pushes them for the worker's clock, and before the
next batch the module holds the parameters the job's consistency model
allows at the next clock. docs/python.md describes the protocol and what is
guaranteed.
"""

from __future__ import annotations

import concurrent.futures
import logging
import threading
import time
from typing import (Any, Callable, Dict, Iterator, List, Mapping, Optional,
                    Sequence, Tuple, Union)

import grpc
import numpy as np
import torch
from torch import nn

from paramserver import v1
from paramserver._cluster import Coordinator, Membership, _Stop
from paramserver._params import ParameterClient
from paramserver._pipeline import Started, StepPipeline
from paramserver._rpc import member_security
from paramserver._sparse import SparsePull, SparseRouter
from paramserver.data import epoch_order, load_idx, part_size
from paramserver.errors import (CancelledError, InvalidArgumentError,
                                JobStoppedError, ModelMismatchError,
                                NonFiniteGradientError, ParamServerError,
                                error_for)
from paramserver.layout import TensorLayout, model_digest, model_tensors
from paramserver.spec import check_trainable
from paramserver.torch.buffers import (assign, buffer_changes, buffer_decls,
                                       job_buffers, load_buffers)
from paramserver.torch.embedding import (SparseStep, sparse_table_specs,
                                         sparse_tables_of, with_next_ids)

log = logging.getLogger("paramserver")

__all__ = ["Worker", "model_spec", "load", "parameters_of"]

#: What Worker.epochs trains on: tensors (or arrays) of one length, a
#: torch Dataset (map-style: ``len`` and indexing), or None for the job
#: spec's IDX data set.
DataLike = Union[Sequence[Any], "torch.utils.data.Dataset", None]

_INIT_NAMES = ("FROM_WORKER", "ZEROS", "CONSTANT", "HE_UNIFORM",
               "XAVIER_UNIFORM")


def _metric(value: Optional[float]) -> float:
    """A test AUC or log loss for a report: -1 when not measured."""
    return -1.0 if value is None else float(value)


def parameters_of(module: nn.Module) -> List[Tuple[str, nn.Parameter]]:
    """The parameters a job trains: ``module.named_parameters()``, in
    order, without duplicates (tied weights count once)."""
    return list(module.named_parameters())


def model_spec(module: nn.Module,
               init: Union[str, Mapping[str, Any]] = "FROM_WORKER",
               buffers: bool = False) -> Dict[str, Any]:
    """The ``model`` section of a job spec for `module` (an EXTERNAL model):
    one tensor per parameter, named and shaped as ``named_parameters()``,
    then, with `buffers`, one per persistent buffer (a batch norm's running
    statistics: ``buffer: true``, FROM_WORKER unless `init` names it),
    which the workers then average through the servers
    (:mod:`paramserver.torch.buffers`) and the export includes.

    `init` says how the servers give each tensor its initial values:
    ``"FROM_WORKER"`` (the default: worker 0's module, sent once) or another
    ``TensorInit`` name for every tensor, or a mapping from parameter names
    to a name or to a dict of TensorDecl fields (``{"init": "CONSTANT",
    "value": 1.0}``); parameters it does not name are FROM_WORKER.

        spec = {"name": "cnn", "model": ps.torch.model_spec(net), ...}
    """
    tensors = []
    for name, p in parameters_of(module):
        chosen: Any = init if isinstance(init, str) else init.get(
            name, "FROM_WORKER")
        decl: Dict[str, Any] = {"name": name, "shape": list(p.shape)}
        if isinstance(chosen, str):
            decl["init"] = chosen
        else:
            decl.update(chosen)
        tensors.append(decl)
    if buffers:
        tensors.extend(buffer_decls(module, init))
    for decl in tensors:
        if str(decl.get("init", "FROM_WORKER")) not in _INIT_NAMES:
            raise InvalidArgumentError(
                f"init: {decl.get('init')!r} for {decl['name']} is not one "
                f"of {', '.join(_INIT_NAMES)}")
    model: Dict[str, Any] = {"kind": "EXTERNAL", "tensors": tensors}
    tables = sparse_table_specs(module)  # Sharded embeddings' tables.
    if tables:
        model["sparse_tables"] = tables
    return model


def load(module: nn.Module, params: Mapping[str, np.ndarray],
         strict: bool = True) -> None:
    """Copies exported parameters (``JobClient.export``) into `module`, and
    the module's buffers that the export holds (a job whose model declared
    them). `strict`: every parameter of the module must be given, and
    nothing but its parameters and buffers."""
    mine = dict(parameters_of(module))
    if strict:
        missing = sorted(set(mine) - set(params))
        extra = sorted(set(params) - set(mine) -
                       {n for n, _ in module.named_buffers()})
        if missing or extra:
            raise ModelMismatchError(
                f"params: missing {missing or 'none'}, unknown "
                f"{extra or 'none'}")
    with torch.no_grad():
        for name, value in params.items():
            if name not in mine:
                continue
            p = mine[name]
            if tuple(value.shape) != tuple(p.shape):
                raise ModelMismatchError(
                    f"params: {name} has shape {list(value.shape)}, the "
                    f"module's {list(p.shape)}")
            p.copy_(torch.from_numpy(np.ascontiguousarray(value)))
    load_buffers(module, params, skip=list(mine))


class _Data:
    """A data set and how to cut batches of given indices from it."""

    def __init__(self, dataset: DataLike, loader_options: Mapping[str, Any]):
        self.arrays: Optional[List[torch.Tensor]] = None
        self.dataset = None
        self.loader_options = dict(loader_options)
        if isinstance(dataset, torch.utils.data.TensorDataset):
            dataset = list(dataset.tensors)
        if isinstance(dataset, (tuple, list)):
            if not dataset:
                raise InvalidArgumentError("dataset: empty")
            self.arrays = [torch.as_tensor(a) for a in dataset]
            n = len(self.arrays[0])
            if any(len(a) != n for a in self.arrays):
                raise InvalidArgumentError(
                    "dataset: the tensors differ in length: "
                    f"{[len(a) for a in self.arrays]}")
            self.size = n
        elif hasattr(dataset, "__len__") and hasattr(dataset, "__getitem__"):
            self.dataset = dataset
            self.size = len(dataset)
        else:
            raise TypeError(
                "dataset must be tensors of one length, a map-style "
                "torch.utils.data.Dataset, or None (the job's IDX data set), "
                f"not {type(dataset).__name__}")

    def batches(self, order: np.ndarray, first: int, steps: int,
                batch: int) -> Iterator[Any]:
        if self.arrays is not None:
            for step in range(first, steps):
                idx = torch.from_numpy(order[step * batch:(step + 1) * batch])
                yield tuple(a[idx] for a in self.arrays)
            return
        sampler = [order[s * batch:(s + 1) * batch].tolist()
                   for s in range(first, steps)]
        loader = torch.utils.data.DataLoader(
            self.dataset, batch_sampler=sampler, **self.loader_options)
        yield from loader


class _Job:
    """One job this worker trains (an assignment), from its start to its
    end."""

    def __init__(self, worker: "Worker", assignment: "v1.Assignment"):
        self.assignment = assignment
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
        self.pipe: Optional[StepPipeline] = None
        self.pushing: Optional[Started] = None
        self.pulling: Optional[Started] = None
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
        self.client = ParameterClient(
            self.assignment, self.tensors, worker._security, self.stop,
            pull_timeout=worker.pull_timeout,
            push_timeout=worker.push_timeout,
            retry_window=worker.retry_window,
            shared_memory=worker.shared_memory_payloads)
        self.values = np.zeros(self.client.size, dtype=np.float32)
        if self.spec.model.sparse_tables or worker._tables:
            self.sparse = SparseStep(
                SparseRouter(self.spec, self.assignment.shard_map),
                worker.module, lambda: self.clock, self._settle,
                self._fetch_rows)
            self.sparse.bind()
        if (worker.pipeline and self.sparse is None and
                not self.client.use_cache):
            self.pipe = StepPipeline(self.client)
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
        dense values it reads again are dropped)."""
        self.client.pull(clock, np.empty_like(self.values), sparse=pull)

    def close(self) -> None:
        if self.sparse is not None:
            self.sparse.unbind()
        self.comm.shutdown(wait=False, cancel_futures=True)
        if self.pipe is not None:
            self.pipe.close()
        if self.client is not None:
            self.client.close()


class Worker:
    """A member of the cluster that trains a PyTorch module.

    It registers with the coordinator as a worker and keeps its lease with
    heartbeats (a daemon thread) from construction until :meth:`close`. The
    coordinator gives it a place (a worker index) in a job whose model
    matches the module: an EXTERNAL job whose tensors are the module's
    parameters (names and shapes; see :func:`model_spec`), or a built-in
    job for a :class:`~paramserver.torch.BuiltinModel`. :meth:`epochs`
    waits for that job and trains it.

    Args:
        coordinator: The coordinator's address, ``host:port``.
        model: The module; its parameters must be float32. It stays where it
            is (CPU or GPU); values are copied in and out of it.
        job: Only take a place in this job (a job id). Registration then
            fails at once (ModelMismatchError, NotFoundError,
            FailedPreconditionError) if the job's model does not match the
            module, or the job does not exist or has ended.
        cluster_secret, cluster_secret_file: The cluster secret, or a file
            holding it (ps-worker's ``--cluster_secret_file``).
        tls_ca, tls_cert, tls_key, tls_server_name: TLS as ps-worker's
            ``--tls_*`` flags: the CA that verifies the coordinator and the
            servers, and this member's certificate and key.
        pull_timeout, push_timeout: Deadline of one pull (it may wait for
            slower workers that long) and of one push attempt, in seconds.
        retry_window: How long a failing call is retried, in seconds.
        shared_memory_payloads: Pass push and pull payloads to servers on
            a loopback address through shared memory (``/dev/shm``), as
            ps-worker's ``--shared_memory_payloads`` (default on); a server
            that does not take them is called through the socket.
        pipeline: Pull the next step's parameters while this step computes
            and push from the training thread, as ps-worker's
            ``--prefetch_pull --overlap_push`` (default on; a job with
            sparse tables or the SSP worker cache steps as without it);
            False: push and pull in turn on a communication thread after
            each step (for A/B measurements). docs/python.md, "A step's
            cost".
        report_interval: Seconds between progress reports.
        ack_log: A file to which "job worker clock" is appended after every
            acknowledged push (as ps-worker's ``--ack_log``).
        loader_options: Passed to ``torch.utils.data.DataLoader`` when
            :meth:`epochs` gets a map-style Dataset (e.g. ``num_workers``).

    Use it as a context manager: an exception that leaves the ``with``
    block is reported to the coordinator (the job fails with its message)
    and the worker leaves the cluster.
    """

    def __init__(self, coordinator: str = "127.0.0.1:7000",
                 model: Optional[nn.Module] = None, *,
                 job: Optional[str] = None,
                 cluster_secret: Optional[str] = None,
                 cluster_secret_file: Optional[str] = None,
                 tls_ca: Optional[str] = None, tls_cert: Optional[str] = None,
                 tls_key: Optional[str] = None,
                 tls_server_name: Optional[str] = None,
                 pull_timeout: float = 30.0, push_timeout: float = 30.0,
                 retry_window: float = 120.0,
                 shared_memory_payloads: bool = True,
                 pipeline: bool = True,
                 report_interval: float = 1.0,
                 ack_log: Optional[str] = None,
                 loader_options: Optional[Mapping[str, Any]] = None):
        if not isinstance(model, nn.Module):
            raise TypeError("model must be a torch.nn.Module")
        self.module = model
        self.coordinator = coordinator
        self.pull_timeout = pull_timeout
        self.push_timeout = push_timeout
        self.retry_window = retry_window
        self.shared_memory_payloads = shared_memory_payloads
        self.pipeline = pipeline
        self.report_interval = report_interval
        self.loader_options = dict(loader_options or {})
        self._params = parameters_of(model)
        self._tables = sparse_tables_of(model)
        if not self._params and not self._tables:
            raise ModelMismatchError("model: the module has no parameters")
        for name, p in self._params:
            if p.dtype != torch.float32:
                raise ModelMismatchError(
                    f"model: parameter {name} is {p.dtype}; the cluster "
                    "trains float32 parameters (use torch.autocast for "
                    "mixed precision)")
        self.digest = model_digest(((n, tuple(p.shape))
                                    for n, p in self._params), self._tables)
        self._security = member_security(
            tls_ca=tls_ca, tls_cert=tls_cert, tls_key=tls_key,
            tls_server_name=tls_server_name, cluster_secret=cluster_secret,
            cluster_secret_file=cluster_secret_file)
        self._ack_log = open(ack_log, "a") if ack_log else None
        self._lock = threading.Condition()
        self._offered: Optional[v1.Assignment] = None
        self._job: Optional[_Job] = None
        self._done_places: set = set()
        self._error: Optional[ParamServerError] = None
        self._closed = False
        self._membership = Membership(
            coordinator, self._security, self.digest, job,
            self._on_assignments, self._held, self._on_membership_error)
        self._membership.start()

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

    # Properties.

    @property
    def job_id(self) -> Optional[str]:
        """The job being trained (None before one is assigned)."""
        job = self._job
        return job.job_id if job else None

    @property
    def index(self) -> int:
        """This worker's index in its job (-1 before one is assigned)."""
        job = self._job
        return job.index if job else -1

    @property
    def num_workers(self) -> int:
        job = self._job
        return job.assignment.num_workers if job else 0

    @property
    def spec(self) -> Optional["v1.JobSpec"]:
        """The job's spec, as the coordinator stored it (defaults filled)."""
        job = self._job
        return job.spec if job else None

    @property
    def clock(self) -> int:
        """Steps pushed so far in the job (the worker's clock)."""
        job = self._job
        return job.clock if job else 0

    @property
    def node_id(self) -> str:
        return self._membership.node_id

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

    # Training.

    def epochs(self, dataset: DataLike = None, *,
               timeout: Optional[float] = None,
               sparse_ids: Optional[Callable[[Any], Mapping[str, Any]]] = None
               ) -> Iterator[Tuple[int, Iterator[Any]]]:
        """Trains the job the coordinator gives this worker (waiting for it
        up to `timeout` seconds); yields ``(epoch, batches)`` for each epoch
        left.

        `batches` yields this worker's batches of the epoch: its part of
        `dataset` (``[w*n//N, (w+1)*n//N)`` for worker w of N), shuffled per
        epoch from the job's seed (:func:`paramserver.data.epoch_order`),
        ``batch_size`` samples each (the spec's, per worker; a last partial
        batch is dropped). A batch of tensors is a tuple of them; a Dataset's
        goes through a DataLoader. Before each batch the module holds the
        parameters for the worker's clock; call :meth:`step` once per batch.

        After the last batch of an epoch, call :meth:`report` (optional)
        with the test accuracy. Worker 0's module then holds, after the last
        epoch, the final model: every worker's every update.

        A worker taking over a lost worker's place resumes at the clock the
        servers recorded for it: the epochs and batches already trained are
        skipped. Every worker must pass the same data set.

        `dataset` None: the spec's IDX data set (a built-in model's job),
        float32 features ``[n, input_dim]`` in [0, 1] and int64 labels.

        `sparse_ids(batch)`: the ids each sparse table's embeddings will
        read in that batch (``{table name: int64 ids}``); the worker then
        pulls a batch's rows with its dense parameters, one batch ahead,
        in the background. Without it, rows are pulled at the first
        forward pass that reads them (a round trip of their own).
        """
        assignment = self.wait_for_job(timeout)
        job = _Job(self, assignment)
        job.sparse_ids = sparse_ids
        with self._lock:
            self._job = job
        try:
            job.open(self)
            check_trainable(job.spec)
            data = _Data(self._spec_dataset(job.spec) if dataset is None
                         else dataset, self.loader_options)
            self._start(job, data.size)
        except Exception as e:
            self._fail(job, e)
            raise
        spec = job.spec
        n_workers = assignment.num_workers
        first_epoch = job.clock // job.steps
        for epoch in range(first_epoch, spec.epochs):
            job.epoch = epoch
            order = epoch_order(data.size, n_workers, job.index, spec.seed,
                                epoch)
            first_step = job.clock - epoch * job.steps
            yield epoch, self._batches(job, data, order, epoch, first_step)
            if job.reported_epoch < epoch + 1:
                self.report()
        if not job.finished:
            # The previous holder of this place pushed every step before it
            # was lost: only the end of the last epoch remains.
            job.epoch = spec.epochs - 1
            try:
                if job.index == 0:
                    self._final_read(job)
            except ParamServerError as e:
                self._fail(job, e)
                raise
            self.report()

    def _spec_dataset(self, spec: "v1.JobSpec") -> Tuple[torch.Tensor, ...]:
        d = spec.dataset
        if not d.train_images:
            raise InvalidArgumentError(
                "dataset: the job's spec names no data set; pass one to "
                "Worker.epochs")
        x, y = load_idx(d.train_images, d.train_labels, d.max_train_samples)
        return torch.from_numpy(x), torch.from_numpy(y)

    def test_data(self) -> Tuple[torch.Tensor, torch.Tensor]:
        """The spec's IDX test set (features, labels), at most
        max_test_samples, as the cluster's worker 0 evaluates on it."""
        spec = self._require_job().spec
        d = spec.dataset
        if not d.test_images:
            raise InvalidArgumentError(
                "dataset: the job's spec names no test set")
        x, y = load_idx(d.test_images, d.test_labels, d.max_test_samples)
        return torch.from_numpy(x), torch.from_numpy(y)

    def _start(self, job: _Job, size: int) -> None:
        spec = job.spec
        per_worker = part_size(size, job.assignment.num_workers)
        job.steps = per_worker // spec.batch_size
        if job.steps < 1:
            raise InvalidArgumentError(
                f"batch_size: {spec.batch_size} is larger than a worker's "
                f"part of the data ({per_worker} of {size} samples)")
        job.total_clocks = job.steps * spec.epochs
        if job.index == 0:
            from_worker = [t.from_worker for t in job.tensors]
            if any(from_worker):
                values = self._module_values(job)
                if not np.isfinite(values).all():
                    raise InvalidArgumentError(
                        "model: the module's initial parameters hold NaN or "
                        "Inf")
                if job.client.seed(values, from_worker):
                    log.info("job %s: the servers were seeded before",
                             job.job_id)
                else:
                    log.info("job %s: seeded the servers from the module",
                             job.job_id)
        # Waits for worker 0's seed; unbounded (the job's recovery grace
        # bounds a missing worker 0, and its end stops the worker).
        retry_window = job.client.retry_window
        job.client.retry_window = 1e18
        try:
            job.clock = job.client.resume_clock(job.values)
        finally:
            job.client.retry_window = retry_window
        if job.clock > 0:
            log.info("job %s: worker %d resumes at clock %d of %d",
                     job.job_id, job.index, job.clock, job.total_clocks)
            job.loaded_clock = -1
        else:
            self._load(job)
            job.loaded_clock = 0
        log.info("job %s: worker %d of %d, %d samples, %d steps per epoch",
                 job.job_id, job.index, job.assignment.num_workers,
                 per_worker, job.steps)

    def _batches(self, job: _Job, data: _Data, order: np.ndarray, epoch: int,
                 first_step: int) -> Iterator[Any]:
        try:
            for step, (batch, job.batch_ids, job.next_ids) in enumerate(
                    with_next_ids(
                        job.sparse_ids if job.sparse is not None else None,
                        data.batches(order, first_step, job.steps,
                                     job.spec.batch_size)), start=first_step):
                self._sync(job)
                expected = epoch * job.steps + step
                if job.clock != expected:
                    raise RuntimeError(
                        f"worker.step() must be called once per batch: the "
                        f"worker is at clock {job.clock}, batch {step} of "
                        f"epoch {epoch} is clock {expected}")
                yield batch
            job.batch_ids = job.next_ids = None
            if job.stop.reason is not None:
                raise job.stop.reason
            self._wait_pending(job)
            if job.clock != (epoch + 1) * job.steps:
                raise RuntimeError(
                    f"worker.step() must be called once per batch: epoch "
                    f"{epoch} ends at clock {(epoch + 1) * job.steps}, the "
                    f"worker is at {job.clock}")
            if job.index == 0 and job.clock >= job.total_clocks:
                # The final model: every worker's every update.
                self._final_read(job)
            else:
                self._sync(job)
        except (ParamServerError, RuntimeError) as e:
            self._fail(job, e)
            raise

    def step(self, loss: Optional[Union[float, torch.Tensor]] = None) -> None:
        """Pushes the module's gradients for this worker's clock and
        advances it (``optimizer.step(); optimizer.zero_grad()`` for the
        cluster): the gradients are read and the ``.grad`` of every
        parameter is set to None; the push (and the pull of the next
        clock's parameters) runs in the background until the next batch.

        `loss`, if given, is reported in the job's progress (mean since the
        last report). A parameter without a gradient pushes zeros.

        Raises NonFiniteGradientError, pushing nothing, if a gradient holds
        NaN or Inf and the job refuses them (``non_finite_gradients``
        NON_FINITE_REFUSE, the default): the clock does not advance, and
        the batch may be computed again. The error of the previous step's
        push, if it failed."""
        job = self._require_job()
        try:
            self._wait_pending(job)
        except ParamServerError as e:
            self._fail(job, e)
            raise
        flat = self._gather(job)
        if job.pipe is None:
            flat = flat.copy()  # The communication thread sends it later.
        buffer_changes(flat, job.tensors, job.params, job.offsets, job.values)
        check = job.spec.non_finite_gradients != v1.NON_FINITE_DROP
        if check and not np.isfinite(flat).all():
            for t, (lo, hi) in enumerate(zip(job.offsets[:-1],
                                             job.offsets[1:])):
                if not np.isfinite(flat[lo:hi]).all():
                    raise NonFiniteGradientError(
                        f"gradients: {job.tensors[t].name} holds NaN or Inf "
                        f"at clock {job.clock}; nothing was pushed (the "
                        "job's non_finite_gradients policy is "
                        "NON_FINITE_REFUSE)", job.tensors[t].name)
        rows = (job.sparse.take_gradients(check, job.clock,
                                          job.client.encoding)
                if job.sparse is not None else None)
        for p in job.params:
            p.grad = None
        if loss is not None:
            job.loss_sum += float(loss)
            job.loss_steps += 1
        clock = job.clock
        job.clock += 1
        job.interval_steps += 1
        if job.pipe is None:
            job.pending = job.comm.submit(self._push_and_pull, job, clock,
                                          flat, rows, job.next_ids)
            return
        try:
            job.pushing = job.pipe.start_push(clock, flat)
        except ParamServerError as e:
            self._fail(job, e)
            raise
        self._report_if_due(job, clock)

    def report(self, test_accuracy: Optional[float] = None,
               test_samples: Optional[int] = None, *,
               test_auc: Optional[float] = None,
               test_log_loss: Optional[float] = None) -> None:
        """Ends the current epoch: reports it to the coordinator, worker 0
        with `test_accuracy` (measured on `test_samples` samples), which
        the job records per epoch (``JobStatus.progress.epochs``). After
        the last epoch, worker 0 uploads the final model it evaluated
        (``JobClient.export`` returns it) and every worker reports that it
        finished; the job SUCCEEDS once all have. Call it after the epoch's
        last batch (``epochs`` reports for you if you do not).

        `test_auc`, `test_log_loss` (worker 0): a binary classifier's test
        AUC and log loss, kept by the coordinator for a model with sparse
        tables (``progress.test_auc``, the exported model's)."""
        job = self._require_job()
        try:
            self._sync(job)
            if job.reporting is not None:
                # The latest report wins: the progress report goes first.
                job.reporting.result()
                job.reporting = None
            epoch_end = (job.epoch + 1) * job.steps
            if job.clock < epoch_end:
                raise RuntimeError(
                    "report() ends an epoch: call it after the epoch's last "
                    f"batch (the worker is at clock {job.clock}, the epoch "
                    f"ends at {epoch_end})")
            if job.reported_epoch >= job.epoch + 1:
                raise RuntimeError(
                    f"epoch {job.epoch} was reported already")
            last = job.epoch + 1 >= job.spec.epochs
            accuracy = -1.0
            if job.index == 0 and test_accuracy is not None:
                accuracy = float(test_accuracy)
                if not 0.0 <= accuracy <= 1.0:
                    raise InvalidArgumentError(
                        f"test_accuracy: {accuracy} is not in [0, 1]")
                job.test_accuracy = accuracy
            if last and job.index == 0:
                self._upload(job, test_samples)
            report = self._progress(job, epoch=job.epoch + 1)
            report.test_accuracy = accuracy
            if job.index == 0:
                # A model with sparse tables (a CTR model) keeps these.
                report.test_auc = job.test_auc = _metric(test_auc)
                report.test_log_loss = job.test_log_loss = _metric(
                    test_log_loss)
            report.finished = last
            if job.coordinator.report(report, must_arrive=True):
                job.stop.stop(JobStoppedError(
                    f"job {job.job_id} is no longer running"))
            job.reported_epoch = job.epoch + 1
            if last:
                self._finish(job)
        except (ParamServerError, RuntimeError) as e:
            self._fail(job, e)
            raise

    def sync(self) -> None:
        """Waits for the last step's push and loads the parameters of the
        current clock into the module (done before every batch anyway)."""
        self._sync(self._require_job())

    # Internals.

    def _require_job(self) -> _Job:
        job = self._job
        if job is None:
            raise RuntimeError("no job: iterate over worker.epochs() first")
        if job.finished:
            raise RuntimeError(f"job {job.job_id} is finished")
        return job

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
        if pushing is not None:
            job.pipe.finish_push(pushing, job.grad_np)
            self._acknowledged(job, pushing.clock)

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
        if pulling is not None and pulling.clock == job.clock:
            job.pulling = None
            job.pipe.finish_pull(pulling, job.values)
            self._load(job)
            job.loaded_clock = job.clock
        elif pulling is not None and not (pulling.clock == job.clock + 1 and
                                          job.loaded_clock == job.clock):
            job.pulling = None
            job.pipe.abandon(pulling)
        if job.loaded_clock != job.clock:
            job.pipe.pull(job.clock, job.values)
            self._load(job)
            job.loaded_clock = job.clock
        if (job.pulling is None and
                job.clock + 1 < (job.epoch + 1) * job.steps):
            job.pulling = job.pipe.start_pull(job.clock + 1)

    def _sync(self, job: _Job) -> None:
        if job.stop.reason is not None:
            raise job.stop.reason
        self._wait_pending(job)
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
        `rows`), the progress report when one is due, then the read of
        clock + 1 (with the rows of `next_ids`, the next batch's)."""
        job.client.push(clock, grads, sparse=rows)
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
            pull = (job.sparse.pull_of(next_ids)
                    if job.sparse is not None else None)
            job.client.pull(clock + 1, job.values, sparse=pull)
            self._load(job)
            job.loaded_clock = clock + 1
            if job.sparse is not None:
                job.sparse.install(clock + 1, pull)

    def _final_read(self, job: _Job) -> None:
        job.client.pull(job.total_clocks, job.values, final=True)
        self._load(job)
        job.loaded_clock = job.total_clocks

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

    # Lifetime.

    def close(self, error: Optional[BaseException] = None) -> None:
        """Leaves the cluster: stops heartbeating (the coordinator frees the
        place once the lease expires). With `error`, a job in progress is
        first reported failed with it."""
        job = self._job
        if job is not None and not job.finished:
            if error is not None:
                self._fail(job, error)
            if not job.finished:
                job.stop.stop(CancelledError("the worker is closed"))
                job.close()
        with self._lock:
            self._closed = True
            self._lock.notify_all()
        self._membership.stop()
        if self._ack_log is not None:
            self._ack_log.close()
            self._ack_log = None

    def __enter__(self) -> "Worker":
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        self.close(exc if isinstance(exc, Exception) else None)
