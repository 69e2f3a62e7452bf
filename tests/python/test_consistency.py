"""Python workers under SSP and ASP, and 16-bit wire gradients: FP16 and
BF16 pushes are applied exactly as the servers decode them."""

import os
import subprocess
import threading

import numpy as np
import pytest

torch = pytest.importorskip("torch")
import torch.nn.functional as F  # noqa: E402

import paramserver as ps  # noqa: E402
from paramserver.data import epoch_order  # noqa: E402
from cluster import binary  # noqa: E402
import sixteen_bit  # noqa: E402
from workers import common  # noqa: E402


def train_in_threads(coordinator, job, modules, data):
    errors = []

    def run(module):
        try:
            with ps.torch.Worker(coordinator, module, job=job) as worker:
                for _, batches in worker.epochs(data):
                    for xb, yb in batches:
                        loss = F.cross_entropy(module(xb), yb)
                        loss.backward()
                        worker.step(loss)
                    worker.report(test_accuracy=common.accuracy(module, *data))
        except Exception as e:  # pragma: no cover - asserted below
            errors.append(e)

    threads = [threading.Thread(target=run, args=(m,)) for m in modules]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert not errors, errors


@pytest.mark.parametrize("consistency", [
    {"model": "SSP", "staleness": 2},
    {"model": "SSP", "staleness": 1, "worker_cache": True},
    {"model": "ASP"},
])
def test_ssp_and_asp(cluster, consistency):
    coordinator = cluster.start(servers=2, durable=False)
    torch.manual_seed(0)
    modules = [common.Small(), common.Small()]
    data = common.synthetic(800)
    spec = {"name": "ssp", "model": ps.torch.model_spec(modules[0]),
            "epochs": 2, "batch_size": 16, "seed": 1,
            "optimizer": {"adam": {"learning_rate": 0.01}},
            "consistency": consistency, "num_workers": 2, "num_servers": 2,
            "durability": "MEMORY"}
    client = ps.JobClient(coordinator)
    job = client.submit(spec)
    train_in_threads(coordinator, job, modules, data)
    final = client.wait(job, timeout=60)
    assert final.state == ps.v1.SUCCEEDED, final.message
    assert final.progress.test_accuracy > 0.8
    client.close()


@pytest.mark.parametrize("encoding", ["FP16", "BF16"])
def test_sixteen_bit_wire_gradients(cluster, encoding):
    coordinator, client, job, reference, x, y = sixteen_bit.train_small(
        cluster, "wire", {"wire_gradients": encoding})
    samples = sixteen_bit.SAMPLES
    # The reference: SGD whose every gradient is rounded to the format and
    # decoded back, as the servers apply it.
    order = epoch_order(samples, 1, 0, 3, 0)
    for k in range(samples // 10):
        idx = order[k * 10:(k + 1) * 10]
        reference.zero_grad()
        F.cross_entropy(reference(x[idx]), y[idx]).backward()
        with torch.no_grad():
            for p in reference.parameters():
                g = sixteen_bit.roundtrip(p.grad.numpy().reshape(-1),
                                          encoding)
                p -= 0.5 * torch.from_numpy(g).reshape(p.shape)
    exported = client.export(job)
    for name, p in reference.named_parameters():
        np.testing.assert_allclose(exported[name], p.detach().numpy(),
                                   atol=2e-6)
    client.close()
    # psctl exports an EXTERNAL model too, and says it does not evaluate it.
    psctl = binary("client", "psctl")
    if os.access(psctl, os.X_OK):
        path = os.path.join(cluster.run_dir, "model.bin")
        out = subprocess.run([psctl, f"--coordinator={coordinator}", "export",
                              job, f"--output={path}"], capture_output=True,
                             text=True)
        assert out.returncode == 0, out.stderr
        out = subprocess.run([psctl, "eval", path], capture_output=True,
                             text=True)
        assert out.returncode == 1
        assert "EXTERNAL model is evaluated in PyTorch" in out.stderr
