"""The compiled transport (paramserver._native, docs/python.md, "The
compiled transport") for jobs with sparse tables: a small DLRM-style module
(a ShardedEmbeddingBag over categorical fields, a ShardedEmbedding of a
second table, an MLP over dense features) trained by two PyTorch workers
under BSP on two servers, on generated click data, exports the same bytes
(dense tensors, and every table's ids and rows, through psctl export: a
job with durability WAL, whose rows the servers keep once it ends) when
its steps travel through the C++ client as through the pure-Python one;
then the compiled client's refusals of wrong ids, rows and gradients, and
the fallback when the module is not built."""

import os
import subprocess
import threading

import numpy as np
import pytest

torch = pytest.importorskip("torch")
import torch.nn.functional as F  # noqa: E402

import paramserver as ps  # noqa: E402
import paramserver.model_file as mf  # noqa: E402
from paramserver import _native_step  # noqa: E402
from paramserver._native_step import NativePipeline  # noqa: E402
from cluster import binary  # noqa: E402

needs_native = pytest.mark.skipif(
    not _native_step.available(),
    reason="paramserver._native is not built (pybind11-dev, python3-dev)")

FIELDS, DIM, DENSE = 4, 4, 3
SAMPLES, BATCH = 384, 16


class Dlrm(torch.nn.Module):
    """Fields' rows pooled (table "fields", a bag), a user's row (table
    "users", dim 2 * DIM), a bottom MLP over the dense features, a top
    layer."""

    def __init__(self):
        super().__init__()
        self.fields = ps.torch.ShardedEmbeddingBag(
            "fields", DIM, mode="sum",
            optimizer={"rowwise_adagrad": {"learning_rate": 0.1}})
        self.users = ps.torch.ShardedEmbedding(
            "users", 2 * DIM, optimizer={"sgd": {"learning_rate": 0.2}})
        torch.manual_seed(0)
        self.bottom = torch.nn.Linear(DENSE, DIM)
        self.top = torch.nn.Linear(4 * DIM, 1)

    def forward(self, fields, users, dense):
        h = torch.cat([self.fields(fields), self.users(users),
                       torch.relu(self.bottom(dense))], dim=1)
        return self.top(h).squeeze(1)


def click_data(seed=4):
    """Criteo-like ids (field << 33 | value, Zipf-distributed values, so
    rows repeat within and across batches), users anywhere in int64,
    labels from a hidden logistic rule."""
    rng = np.random.default_rng(seed)
    values = np.minimum(rng.zipf(1.4, (SAMPLES, FIELDS)), 500)
    fields = (np.arange(FIELDS, dtype=np.int64) << 33) | values
    pool = rng.integers(-2**63, 2**63 - 1, 60, dtype=np.int64)
    users = pool[np.minimum(rng.zipf(1.3, SAMPLES) - 1, len(pool) - 1)]
    dense = rng.normal(size=(SAMPLES, DENSE)).astype(np.float32)
    logit = dense[:, 0] + (values[:, 0] % 3 == 0) - (users % 5 == 0)
    labels = (rng.random(SAMPLES) < 1 / (1 + np.exp(-logit))).astype(
        np.float32)
    return tuple(torch.from_numpy(a) for a in (fields, users, dense, labels))


def spec(name, encoding="FP32", durability="MEMORY"):
    return {"name": name, "model": ps.torch.model_spec(Dlrm()),
            "epochs": 2, "batch_size": BATCH, "seed": 7,
            "optimizer": {"adagrad": {"learning_rate": 0.05}},
            "consistency": {"model": "BSP"}, "num_workers": 2,
            "num_servers": 2, "durability": durability, "block_elems": 16,
            "mixed_precision": {"wire_gradients": encoding}}


def train(coordinator, job, seen, prefetch=True, **options):
    """Two workers (threads) train `job`; `seen[index]` gets each one's
    pipeline type and pulls of rows in forward passes. Raises a worker's
    error."""
    data = click_data()
    errors = []

    def run(module):
        try:
            with ps.torch.Worker(coordinator, module, job=job,
                                 **options) as worker:
                ids_of = ((lambda b: {"fields": b[0], "users": b[1]})
                          if prefetch else None)
                for _, batches in worker.epochs(data, sparse_ids=ids_of,
                                                timeout=60):
                    for fields, users, dense, labels in batches:
                        loss = F.binary_cross_entropy_with_logits(
                            module(fields, users, dense), labels)
                        loss.backward()
                        worker.step(loss)
                    pipe = worker._job.pipe
                    seen[worker.index] = (
                        None if pipe is None else type(pipe),
                        worker._job.sparse.lazy_pulls)
                    worker.report()
        except Exception as e:  # Raised below, on the test's thread.
            errors.append(e)
    # Built here, not in the threads: torch's seed and generator are
    # global (worker 0 seeds the servers from its module's values).
    threads = [threading.Thread(target=run, args=(Dlrm(),), daemon=True)
               for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(180)
    if errors:
        raise errors[0]


def trained_model(cluster, tmp_path, name, encoding, **options):
    """The job trained with `options`, exported by psctl and read."""
    seen = {}
    with ps.JobClient(cluster.coordinator) as client:
        job = client.submit(spec(name, encoding, "WAL"))
        train(cluster.coordinator, job, seen, **options)
        final = client.wait(job, timeout=60)
        assert final.state == ps.v1.SUCCEEDED, final.message
    path = tmp_path / f"{name}.bin"
    out = subprocess.run([binary("client", "psctl"),
                          f"--coordinator={cluster.coordinator}", "export",
                          job, f"--output={path}"],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    return mf.read_model(str(path)), seen


def assert_same_model(a, b):
    assert list(a.tensors) == list(b.tensors)
    for name in a.tensors:
        assert a.tensors[name].tobytes() == b.tensors[name].tobytes(), name
    assert list(a.tables) == list(b.tables) == ["fields", "users"]
    for name in a.tables:
        (ids_a, rows_a), (ids_b, rows_b) = a.tables[name], b.tables[name]
        order_a, order_b = np.argsort(ids_a), np.argsort(ids_b)
        assert ids_a[order_a].tobytes() == ids_b[order_b].tobytes(), name
        assert rows_a[order_a].tobytes() == rows_b[order_b].tobytes(), name


@needs_native
@pytest.mark.parametrize("encoding,shared,prefetch", [
    ("FP32", True, True), ("FP16", False, True), ("FP32", True, False)])
def test_the_compiled_transport_trains_a_sparse_job_as_python_does(
        cluster, tmp_path, encoding, shared, prefetch):
    if not os.access(binary("client", "psctl"), os.X_OK):
        pytest.skip("psctl is not built")
    # Durable (WAL): the servers keep a finished job's rows for psctl.
    cluster.start(servers=2)
    python, seen_py = trained_model(
        cluster, tmp_path, "python", encoding, native=False,
        shared_memory_payloads=shared, prefetch=prefetch)
    native, seen = trained_model(
        cluster, tmp_path, "native", encoding, native=True,
        shared_memory_payloads=shared, prefetch=prefetch)
    assert seen_py[0][0] is None and seen_py[1][0] is None  # Comm thread.
    assert seen[0][0] is NativePipeline and seen[1][0] is NativePipeline
    assert_same_model(native, python)
    # Trained: rows moved from their initializer, many of them.
    ids, rows = native.tables["fields"]
    assert len(ids) > 50 and np.isfinite(rows).all()
    if prefetch:
        # Every step's rows came with its dense pull: no forward pass
        # pulled rows of its own.
        assert seen[0][1] == 0 and seen[1][1] == 0
    else:
        assert seen[1][1] > 0


@needs_native
def test_sparse_jobs_use_the_compiled_transport_only_when_asked(cluster):
    cluster.start(servers=2, durable=False)
    by_default, when_asked = {}, {}
    with ps.JobClient(cluster.coordinator) as client:
        job = client.submit(spec("default"))
        train(cluster.coordinator, job, by_default)
        assert client.wait(job, timeout=60).state == ps.v1.SUCCEEDED
        asked = client.submit(spec("asked"))
        train(cluster.coordinator, asked, when_asked, native=True)
        assert client.wait(asked, timeout=60).state == ps.v1.SUCCEEDED
    # The default: the communication thread (no step pipeline).
    assert by_default[0][0] is None and by_default[1][0] is None
    assert when_asked[0][0] is NativePipeline
    assert when_asked[1][0] is NativePipeline


@needs_native
def test_the_compiled_client_checks_ids_rows_and_gradients(cluster):
    cluster.start(servers=2, durable=False)
    native = _native_step._native
    checked = {}

    def check(call):
        try:
            call()
            return None
        except native.CallError as e:
            return ("CallError", e.args[0])
        except (ValueError, TypeError) as e:
            return (type(e).__name__, str(e))

    class Probe(Dlrm):
        """Runs the checks from worker 0's first forward pass, with a
        client of its own for the job's place (reads of clock 0 only)."""

        def forward(self, fields, users, dense):
            if not checked and self.worker.index == 0:
                checked.update(self.probe(self.worker._job))
            return super().forward(fields, users, dense)

        def probe(self, job):
            client = native.StepClient(job.assignment.SerializeToString(),
                                       pull_timeout=10, push_timeout=10,
                                       retry_window=10, shared_payloads=True)
            ids = np.array([3, -1, 2**62], np.int64)
            grads = np.zeros(client.size, np.float32)
            row_grads = np.ones((3, DIM), np.float32)
            r = {"dims": list(client.table_dims)}
            r["int32 ids"] = check(lambda: client.start_pull(
                0, [ids.astype(np.int32)]))
            r["three tables"] = check(lambda: client.start_pull(
                0, [ids, ids, ids]))
            r["not a buffer"] = check(lambda: client.start_pull(0, [[1, 2]]))
            r["ids only"] = check(lambda: client.start_push(0, grads, [ids]))
            r["row grads"] = check(lambda: client.start_push(
                0, grads, [ids], [np.ones((2, DIM), np.float32)]))
            r["float64 row grads"] = check(lambda: client.start_push(
                0, grads, [ids], [row_grads.astype(np.float64)]))
            r["strided row grads"] = check(lambda: client.start_push(
                0, grads, [ids], [np.ones((3, 2 * DIM), np.float32)[:, ::2]]))
            client.start_pull(0)
            out = np.zeros(client.size, np.float32)
            r["rows of a dense pull"] = check(lambda: client.finish_pull(
                out, [np.zeros((3, DIM), np.float32)]))
            client.start_pull(0, [ids, ids[:2]])
            r["one rows buffer"] = check(lambda: client.finish_pull(
                out, [np.zeros((3, DIM), np.float32)]))
            client.start_pull(0, [ids, ids[:2]])
            r["short rows"] = check(lambda: client.finish_pull(
                out, [np.zeros((2, DIM), np.float32),
                      np.zeros((2, 2 * DIM), np.float32)]))
            client.start_pull(0, [ids, ids[:2]])
            rows = [np.full((3, DIM), np.nan, np.float32),
                    np.full((2, 2 * DIM), np.nan, np.float32)]
            client.finish_pull(out, rows)
            r["rows"] = rows
            r["out"] = out
            # Through the SDK's pipeline: a table the job does not have.
            pipe = NativePipeline(job.client, job.assignment,
                                  self.worker._security, job.sparse.router)
            try:
                pipe.start_pull(0, {"nope": ids})
            except ps.errors.InvalidArgumentError as e:
                r["unknown table"] = str(e)
            finally:
                pipe.close()
            return r

    data = click_data()
    with ps.JobClient(cluster.coordinator) as client:
        job = client.submit({**spec("misuse"), "num_workers": 1,
                             "epochs": 1})
        module = Probe()
        with ps.torch.Worker(cluster.coordinator, module, job=job) as w:
            module.worker = w
            for _, batches in w.epochs(data):
                for fields, users, dense, labels in batches:
                    F.binary_cross_entropy_with_logits(
                        module(fields, users, dense), labels).backward()
                    w.step()
        assert client.wait(job, timeout=60).state == ps.v1.SUCCEEDED
    assert checked["dims"] == [DIM, 2 * DIM]
    assert checked["int32 ids"] == ("ValueError", "ids[0]: not int64")
    assert checked["three tables"] == ("CallError", 3)  # INVALID_ARGUMENT
    assert checked["not a buffer"][0] == "TypeError"
    assert "ids[0]: not a buffer" in checked["not a buffer"][1]
    assert checked["ids only"] == ("ValueError",
                                   "ids and row_grads: both or neither")
    assert checked["row grads"] == ("CallError", 3)
    assert checked["float64 row grads"] == ("ValueError",
                                            "row_grads[0]: not float32")
    assert checked["strided row grads"] == ("ValueError",
                                            "row_grads[0]: not contiguous")
    assert checked["rows of a dense pull"] == ("CallError", 9)
    assert checked["one rows buffer"] == ("CallError", 3)
    assert checked["short rows"] == ("CallError", 3)
    # The rows of clock 0: every id's initial row, finite, written whole.
    for rows in checked["rows"]:
        assert np.isfinite(rows).all() and rows.any()
    assert np.isfinite(checked["out"]).all() and checked["out"].any()
    assert "'nope' is not a sparse table of the job" in \
        checked["unknown table"]


def test_without_the_extension_a_sparse_job_steps_in_python(cluster,
                                                             monkeypatch):
    cluster.start(servers=2, durable=False)
    monkeypatch.setattr(_native_step, "_native", None)
    seen = {}
    with ps.JobClient(cluster.coordinator) as client:
        job = client.submit(spec("fallback"))
        train(cluster.coordinator, job, seen)
        assert client.wait(job, timeout=60).state == ps.v1.SUCCEEDED
        assert seen[0][0] is None and seen[1][0] is None
        # Asked for by name, its absence is an error the job reports.
        job = client.submit(spec("must-be-native"))
        with pytest.raises(ps.errors.FailedPreconditionError,
                           match="compiled transport"):
            train(cluster.coordinator, job, {}, native=True)
        final = client.wait(job, timeout=60)
        assert final.state == ps.v1.FAILED
        assert "compiled transport" in final.message
