"""A module's buffers on the cluster (docs/python.md, "Module buffers"):
batch-norm running statistics declared in the job (model_spec(...,
buffers=True)) are averaged over the workers through the servers, exported
with the parameters, and counted once however often a push is retried.

- The examples' CNN (examples/pytorch/fashion_mnist_cnn.py: batch norm and
  dropout) trained by 2 workers on a part of Fashion-MNIST: the exported
  model, loaded into a fresh module, evaluates to exactly the accuracy
  worker 0 reported; both workers end with the exported buffers.
- A small batch-norm CNN without dropout on synthetic images, 2 workers
  under BSP with SGD: at every epoch's end both workers' buffers equal the
  reference, which averages the two workers' local statistics after each
  step's batches (the same batches, recomputed here with torch); a retried
  push changes nothing.

Tolerance of the reference comparison: 1e-5 absolute. The servers add the
workers' mean change, v + ((b0 - v) + (b1 - v)) / 2, where the reference
computes (b0 + b1) / 2, and apply SGD with their own kernel; both differ by
a few float32 ulps per step (values of order 1), far below 1e-5 over 8
steps, while the statistics of the two workers differ by more than 1e-2
(asserted, so the average is not either worker's own). Measured
(2026-11-26): 1.5e-8; the workers' statistics differ by at least 0.042.
"""

import importlib.util
import os
import threading

import numpy as np
import pytest

torch = pytest.importorskip("torch")
import torch.nn.functional as F  # noqa: E402
from torch import nn  # noqa: E402

import paramserver as ps  # noqa: E402
from cluster import FASHION_MNIST, SOURCE_DIR  # noqa: E402
from paramserver.data import epoch_order  # noqa: E402

TOLERANCE = 1e-5


def run_workers(coordinator, job, modules, train):
    """Runs train(worker, module) for each module on its own thread, each
    a Worker of `job`; raises the first error."""
    errors = []

    def run(module):
        try:
            with ps.torch.Worker(coordinator, module, job=job) as worker:
                train(worker, module)
        except Exception as e:  # pragma: no cover - reported below
            errors.append(e)
            raise

    threads = [threading.Thread(target=run, args=(m,)) for m in modules]
    for t in threads:
        t.start()
    for t in threads:
        t.join(240)
    assert not errors, errors
    assert not any(t.is_alive() for t in threads)


def buffers_of(module):
    return {n: b.detach().clone() for n, b in module.named_buffers()}


def load_example():
    path = os.path.join(SOURCE_DIR, "examples", "pytorch",
                        "fashion_mnist_cnn.py")
    spec = importlib.util.spec_from_file_location("fashion_mnist_cnn", path)
    example = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(example)
    return example


@pytest.mark.skipif(
    not os.path.exists(f"{FASHION_MNIST}/train-images-idx3-ubyte.gz"),
    reason="no Fashion-MNIST")
def test_the_exported_cnn_evaluates_to_the_reported_accuracy(cluster):
    torch.set_num_threads(1)
    example = load_example()
    coordinator = cluster.start(servers=2, durable=False)
    x, y = example.load("train", 1280)
    test_x, test_y = example.load("test", 1000)
    spec = {"name": "bn-export",
            "model": ps.torch.model_spec(example.FashionCnn(), buffers=True),
            "epochs": 2, "batch_size": 64, "seed": 1,
            "optimizer": {"adam": {"learning_rate": 0.002}},
            "consistency": {"model": "BSP"}, "num_workers": 2,
            "num_servers": 2, "durability": "MEMORY"}
    names = [t["name"] for t in spec["model"]["tensors"] if t.get("buffer")]
    assert len(names) == 9  # 3 batch norms: mean, variance, count.
    client = ps.JobClient(coordinator)
    job = client.submit(spec)
    final_buffers = {}

    def train(worker, module):
        for epoch, batches in worker.epochs((x, y)):
            for xb, yb in batches:
                loss = F.cross_entropy(module(xb), yb)
                loss.backward()
                worker.step(loss)
            if worker.index == 0:
                worker.report(
                    test_accuracy=example.evaluate(module, test_x, test_y),
                    test_samples=len(test_y))
        final_buffers[worker.index] = buffers_of(module)

    torch.manual_seed(0)
    modules = [example.FashionCnn() for _ in range(2)]
    run_workers(coordinator, job, modules, train)
    final = client.wait(job, timeout=60)
    assert final.state == ps.v1.SUCCEEDED, final.message

    exported = client.export(job)
    assert set(names) <= set(exported)
    fresh = example.FashionCnn()
    ps.torch.load(fresh, exported)
    accuracy = example.evaluate(fresh, test_x, test_y)
    print(f"reported {final.progress.test_accuracy}, exported model "
          f"{accuracy}")
    # The job records the accuracy as a float32: the same float32, i.e.
    # the same count of correct test samples.
    assert np.float32(accuracy) == np.float32(final.progress.test_accuracy)
    assert np.float32(client.export_model(job).test_accuracy) == \
        np.float32(accuracy)
    assert [t.name for t in client.export_model(job).model.tensors
            if t.buffer] == names
    # Both workers hold the servers' buffers, which moved from their start.
    steps = 2 * (1280 // 2 // 64)
    for index in (0, 1):
        for name in names:
            assert np.array_equal(
                final_buffers[index][name].float().numpy(), exported[name])
    assert exported["features.1.num_batches_tracked"] == steps
    assert abs(exported["features.1.running_var"] - 1).max() > 0.05
    # Without the servers' buffers (the initial statistics), the same
    # parameters evaluate differently: the buffers are part of the model.
    ps.torch.load(fresh, {n: v for n, v in exported.items()
                          if n not in names}, strict=False)
    fresh.load_state_dict({**fresh.state_dict(),
                           **buffers_of(example.FashionCnn())})
    assert example.evaluate(fresh, test_x, test_y) != accuracy
    client.close()


def test_model_spec_load_and_changes_of_buffers():
    from paramserver.layout import model_tensors
    from paramserver.torch.buffers import buffer_changes, job_buffers
    net = nn.Sequential(nn.Linear(3, 4), nn.BatchNorm1d(4))
    net.register_buffer("scratch", torch.zeros(2), persistent=False)
    spec = ps.torch.model_spec(net, init={"1.running_var": {
        "init": "CONSTANT", "value": 1.0}}, buffers=True)
    assert [(t["name"], t["shape"], t["init"], t.get("buffer", False))
            for t in spec["tensors"]] == [
        ("0.weight", [4, 3], "FROM_WORKER", False),
        ("0.bias", [4], "FROM_WORKER", False),
        ("1.weight", [4], "FROM_WORKER", False),
        ("1.bias", [4], "FROM_WORKER", False),
        ("1.running_mean", [4], "FROM_WORKER", True),
        ("1.running_var", [4], "CONSTANT", True),
        ("1.num_batches_tracked", [], "FROM_WORKER", True)]
    # Without buffers=True, the parameters only (as before).
    assert len(ps.torch.model_spec(net)["tensors"]) == 4
    tensors = model_tensors(ps.to_job_spec({"model": spec}).model)
    assert [t.buffer for t in tensors] == [False] * 4 + [True] * 3
    assert set(job_buffers(net, tensors)) == {
        "1.running_mean", "1.running_var", "1.num_batches_tracked"}
    # The change of each buffer since it was loaded; parameters untouched.
    entries = [p for _, p in net.named_parameters()] + [
        net[1].running_mean, net[1].running_var, net[1].num_batches_tracked]
    offsets = np.cumsum([0] + [t.numel for t in tensors])
    loaded = np.arange(offsets[-1], dtype=np.float32)
    loaded[-1] = 6.9999995  # A count the servers hold off an integer.
    flat = np.full(offsets[-1], 7.0, np.float32)
    net[1].num_batches_tracked.fill_(8)
    buffer_changes(flat, tensors, entries, offsets, loaded)
    assert (flat[:offsets[4]] == 7).all()
    assert np.array_equal(flat[offsets[4]:offsets[5]],
                          -loaded[offsets[4]:offsets[5]])
    assert np.array_equal(flat[offsets[5]:offsets[6]],
                          1 - loaded[offsets[5]:offsets[6]])
    assert flat[-1] == np.float32(8) - np.float32(6.9999995)
    # load: parameters and buffers; an integer buffer rounded.
    exported = {n: np.full(tuple(p.shape), 0.5, np.float32)
                for n, p in net.named_parameters()}
    exported.update({"1.running_mean": np.full(4, 2.0, np.float32),
                     "1.running_var": np.full(4, 3.0, np.float32),
                     "1.num_batches_tracked": np.array(11.9999, np.float32)})
    ps.torch.load(net, exported)
    assert (net[1].running_var == 3).all()
    assert net[1].num_batches_tracked.item() == 12
    assert net[1].num_batches_tracked.dtype == torch.int64
    with pytest.raises(ps.ModelMismatchError):
        ps.torch.load(net, {**exported, "1.running_mean": np.zeros(5)})
    with pytest.raises(ps.ModelMismatchError):
        ps.torch.load(net, {**exported, "unknown": np.zeros(1)})


SAMPLES, BATCH, EPOCHS, LR, SEED = 64, 8, 2, 0.05, 5


class BnNet(nn.Module):
    """Convolution, batch norm (running averages by momentum), pooling, a
    hidden layer with batch norm by cumulative average (momentum None:
    num_batches_tracked counts its batches), the classifier. No dropout:
    the reference recomputes the workers' batches exactly."""

    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(1, 4, 3, padding=1)
        self.bn = nn.BatchNorm2d(4)
        self.fc = nn.Linear(4 * 4 * 4, 8)
        self.bn1 = nn.BatchNorm1d(8, momentum=None)
        self.out = nn.Linear(8, 3)

    def forward(self, x):
        x = F.max_pool2d(F.relu(self.bn(self.conv(x))), 2)
        return self.out(F.relu(self.bn1(self.fc(x.flatten(1)))))


def make_module():
    torch.manual_seed(0)
    return BnNet()


def make_data():
    g = torch.Generator().manual_seed(3)
    x = torch.randn(SAMPLES, 1, 8, 8, generator=g) * 2 + 0.5
    y = (x.mean((1, 2, 3)) * 3).long().clamp(-1, 1) + 1
    return x, y


def reference_run(x, y):
    """BSP by hand: each step, each worker's copy gets the parameters and
    buffers, runs its batch, and the parameters take the SGD step of the
    mean gradient and the buffers the mean of the copies'. Returns the
    buffers at each epoch's end and, per step, the largest difference
    between the two workers' statistics."""
    state = make_module().state_dict()
    copies = [make_module() for _ in range(2)]
    steps = SAMPLES // 2 // BATCH
    at_epoch_end, spreads = [], []
    for epoch in range(EPOCHS):
        orders = [epoch_order(SAMPLES, 2, w, SEED, epoch) for w in range(2)]
        for k in range(steps):
            grads, stats = [], []
            for w, copy in enumerate(copies):
                copy.load_state_dict(state)
                copy.zero_grad()
                idx = torch.from_numpy(orders[w][k * BATCH:(k + 1) * BATCH])
                F.cross_entropy(copy(x[idx]), y[idx]).backward()
                grads.append({n: p.grad.clone()
                              for n, p in copy.named_parameters()})
                stats.append(buffers_of(copy))
            for n in grads[0]:
                state[n] = state[n] - LR * (grads[0][n] + grads[1][n]) / 2
            for n in stats[0]:
                mean = (stats[0][n].double() + stats[1][n].double()) / 2
                state[n] = mean.to(stats[0][n].dtype)
            spreads.append(max(
                (stats[0][n].double() - stats[1][n].double()).abs().max().item()
                for n in stats[0] if stats[0][n].is_floating_point()))
        at_epoch_end.append({n: state[n].clone() for n in stats[0]})
    return at_epoch_end, spreads


def test_buffers_are_the_workers_average_and_a_retry_counts_once(cluster):
    torch.set_num_threads(1)
    coordinator = cluster.start(servers=2, durable=False)
    x, y = make_data()
    spec = {"name": "bn-average",
            "model": ps.torch.model_spec(make_module(), buffers=True),
            "epochs": EPOCHS, "batch_size": BATCH, "seed": SEED,
            "optimizer": {"sgd": {"learning_rate": LR}},
            "consistency": {"model": "BSP"}, "num_workers": 2,
            "num_servers": 2, "durability": "MEMORY",
            # Small blocks: the tensors spread over both servers.
            "block_elems": 16}
    client = ps.JobClient(coordinator)
    job = client.submit(spec)
    seen = {0: [], 1: []}
    retried = []

    def train(worker, module):
        last = []
        for epoch, batches in worker.epochs((x, y)):
            parameter_client = worker._job.client
            if not last:
                # The step pipeline starts its pushes itself (the flat
                # gradients are reused: copied here).
                sender = worker._job.pipe or parameter_client
                name = "start_push" if worker._job.pipe else "push"
                push = getattr(sender, name)

                def recording(clock, grads, push=push, **rows):
                    last[:] = [clock, grads.copy()]
                    return push(clock, grads, **rows)
                setattr(sender, name, recording)
            for k, (xb, yb) in enumerate(batches):
                F.cross_entropy(module(xb), yb).backward()
                worker.step()
                if worker.index == 1 and epoch == 0 and k == 2:
                    # Push clock 2 again once it was acknowledged: a
                    # duplicate, and the servers' values stay as they are.
                    worker.sync()
                    clock, grads = last
                    assert clock == worker.clock - 1 == 2
                    assert parameter_client.push(clock, grads) is True
                    values = np.zeros_like(worker._job.values)
                    parameter_client.pull(worker.clock, values)
                    retried.append(np.array_equal(values, worker._job.values))
            seen[worker.index].append(buffers_of(module))
            worker.report()

    modules = [make_module() for _ in range(2)]
    run_workers(coordinator, job, modules, train)
    final = client.wait(job, timeout=60)
    assert final.state == ps.v1.SUCCEEDED, final.message
    assert retried == [True]

    expected, spreads = reference_run(x, y)
    assert min(spreads) > 1e-2  # The workers' own statistics differ.
    steps = SAMPLES // 2 // BATCH
    worst = 0.0
    for index in (0, 1):
        assert len(seen[index]) == EPOCHS
        for epoch, (got, want) in enumerate(zip(seen[index], expected)):
            assert got.keys() == want.keys()
            for name in want:
                if not want[name].is_floating_point():
                    assert got[name].dtype == want[name].dtype
                    assert got[name].item() == want[name].item() == \
                        (epoch + 1) * steps, name
                    continue
                diff = (got[name] - want[name]).abs().max().item()
                worst = max(worst, diff)
                assert diff <= TOLERANCE, (index, epoch, name, diff)
    moved = (expected[-1]["bn.running_var"] - 1).abs().max().item()
    print(f"max difference from the reference {worst:.3g}; the workers' "
          f"statistics differ by at least {min(spreads):.3g}; running_var "
          f"moved by {moved:.3g}")
    assert moved > 0.1
    exported = client.export(job)
    for name, value in expected[-1].items():
        assert np.allclose(exported[name], value.double().numpy(),
                           rtol=0, atol=TOLERANCE), name
    client.close()
