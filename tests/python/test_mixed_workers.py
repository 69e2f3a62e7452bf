"""A job mixing a C++ ps-worker and a Python worker on the built-in MLP
trains: the Python worker (paramserver.torch.BuiltinModel, the cluster's
layouts) is worker 0, evaluates and uploads the model; ps-worker is worker
1."""

import json
import os

import numpy as np
import pytest

pytest.importorskip("torch")
import paramserver as ps  # noqa: E402
from cluster import FASHION_MNIST, binary  # noqa: E402
from paramserver.data import load_idx  # noqa: E402


@pytest.mark.skipif(
    not os.path.exists(f"{FASHION_MNIST}/train-images-idx3-ubyte.gz"),
    reason="no Fashion-MNIST")
def test_cpp_and_python_workers_train_one_mlp(cluster, tmp_path):
    if not os.access(binary("worker", "ps-worker"), os.X_OK):
        pytest.skip("ps-worker is not built")
    coordinator = cluster.start(servers=2)
    spec = {
        "name": "mixed",
        "model": {"kind": "MLP", "input_dim": 784, "num_classes": 10,
                  "hidden_layers": [64]},
        "dataset": {
            "format": "IDX",
            "train_images": f"{FASHION_MNIST}/train-images-idx3-ubyte.gz",
            "train_labels": f"{FASHION_MNIST}/train-labels-idx1-ubyte.gz",
            "test_images": f"{FASHION_MNIST}/t10k-images-idx3-ubyte.gz",
            "test_labels": f"{FASHION_MNIST}/t10k-labels-idx1-ubyte.gz",
            "max_train_samples": 6000, "max_test_samples": 1000},
        "epochs": 2, "batch_size": 32, "seed": 8,
        "optimizer": {"adam": {"learning_rate": 0.002}},
        "consistency": {"model": "BSP"},
        "num_workers": 2, "num_servers": 2}
    path = tmp_path / "mlp.json"
    path.write_text(json.dumps(spec))
    python = cluster.start_python("train.py", "builtin", "--spec", str(path))
    deadline = 60
    import time
    start = time.monotonic()
    while "registered" not in python.output():
        assert time.monotonic() - start < deadline, python.output()
        time.sleep(0.05)
    cpp = cluster.start_cpp_worker()
    client = ps.JobClient(coordinator)
    job = client.submit(path)
    final = client.wait(job, timeout=180)
    assert final.state == ps.v1.SUCCEEDED, (final.message, cluster.logs())
    out = python.output()
    assert f"training {job} as worker 0" in out, out
    assert job in cpp.output()
    assert final.progress.test_accuracy >= 0.7
    assert [r.epoch for r in final.progress.epochs] == [1, 2]
    # The exported model is the one worker 0 evaluated, in the cluster's
    # layout: the accuracy recomputed with numpy is the reported one.
    params = client.export(job)
    x, y = load_idx(spec["dataset"]["test_images"],
                    spec["dataset"]["test_labels"], 1000)
    h = np.maximum(x @ params["dense0.weight"] + params["dense0.bias"], 0)
    logits = h @ params["dense1.weight"] + params["dense1.bias"]
    assert (logits.argmax(1) == y).mean() == pytest.approx(
        final.progress.test_accuracy, abs=1e-3)
    client.close()
