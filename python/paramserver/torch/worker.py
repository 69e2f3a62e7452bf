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

import logging
import threading
from typing import (Any, Callable, Iterator, Mapping, Optional, Tuple,
                    Union)

import numpy as np
import torch
from torch import nn

from paramserver import v1
from paramserver._cluster import Membership
from paramserver._rpc import member_security
from paramserver.data import epoch_order, load_idx, part_size
from paramserver.errors import (CancelledError, InvalidArgumentError,
                                JobStoppedError, ModelMismatchError,
                                NonFiniteGradientError, ParamServerError)
from paramserver.layout import model_digest
from paramserver.spec import check_trainable
from paramserver.torch._data import DataLike, _Data
from paramserver.torch._job import _Job
from paramserver.torch._places import _Places
from paramserver.torch._reports import _Reports
from paramserver.torch._steps import _Steps
from paramserver.torch.buffers import buffer_changes
from paramserver.torch.embedding import sparse_tables_of, with_next_ids
from paramserver.torch.module_spec import load, model_spec, parameters_of

log = logging.getLogger("paramserver")

__all__ = ["Worker", "model_spec", "load", "parameters_of", "DataLike"]


def _metric(value: Optional[float]) -> float:
    """A test AUC or log loss for a report: -1 when not measured."""
    return -1.0 if value is None else float(value)


class Worker(_Places, _Steps, _Reports):
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
            ``--prefetch_pull --overlap_push`` (default on; the next
            step's rows with it for a job with sparse tables, whose
            pipeline is the compiled transport's only: pure Python, or
            with the SSP worker cache, it steps as without it);
            False: push and pull in turn on a communication thread after
            each step (for A/B measurements). docs/python.md, "A step's
            cost".
        native: Which transport the step pipeline uses: the compiled one
            (``paramserver._native``, built with the project from Debian's
            pybind11-dev; the C++ worker's calls, without the GIL) or the
            pure-Python one, which trains the same values bit for bit
            (a job with sparse tables: the communication thread's pushes
            and pulls, the same values too). None (the default): the
            compiled one when it is built; True:
            require it (FailedPreconditionError without it); False: pure
            Python. docs/python.md, "The compiled transport".
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
                 native: Optional[bool] = None,
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
        self.native = native
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
                if job.following(lambda: job.client.seed(values,
                                                         from_worker)):
                    log.info("job %s: the servers were seeded before",
                             job.job_id)
                else:
                    log.info("job %s: seeded the servers from the module",
                             job.job_id)
        # Waits for worker 0's seed; unbounded (the job's recovery grace
        # bounds a missing worker 0, and its end stops the worker).
        def resume() -> int:
            client = job.client
            retry_window = client.retry_window
            client.retry_window = 1e18
            try:
                return client.resume_clock(job.values)
            finally:
                client.retry_window = retry_window

        job.clock = job.following(resume)
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
        # Per table name: ids and gradients, routed when pushed (under the
        # job's map then).
        rows = (job.sparse.take_row_gradients(check, job.clock)
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
            self._start_push(job, clock, flat, rows)
            self._pull_after_push(job)
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
