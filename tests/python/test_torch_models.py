"""paramserver.torch's helpers: model_spec of a module, the built-in models
with the cluster's layouts, load."""

import numpy as np
import pytest

torch = pytest.importorskip("torch")
import paramserver as ps  # noqa: E402
from paramserver.torch import models  # noqa: E402


class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Conv2d(1, 4, 3)
        self.bn = torch.nn.BatchNorm2d(4)
        self.fc = torch.nn.Linear(4, 2)


def test_model_spec_lists_the_parameters():
    net = Net()
    spec = ps.torch.model_spec(net, init={"bn.weight": {"init": "CONSTANT",
                                                        "value": 1.0},
                                          "bn.bias": "ZEROS"})
    assert spec["kind"] == "EXTERNAL"
    assert [(t["name"], t["shape"], t["init"]) for t in spec["tensors"]] == [
        ("conv.weight", [4, 1, 3, 3], "FROM_WORKER"),
        ("conv.bias", [4], "FROM_WORKER"), ("bn.weight", [4], "CONSTANT"),
        ("bn.bias", [4], "ZEROS"), ("fc.weight", [2, 4], "FROM_WORKER"),
        ("fc.bias", [2], "FROM_WORKER")]
    job = ps.to_job_spec({"model": spec})
    assert [t.shape for t in ps.model_tensors(job.model)] == [
        tuple(p.shape) for p in net.parameters()]
    with pytest.raises(ps.InvalidArgumentError):
        ps.torch.model_spec(net, init="RANDOM")


def test_builtin_models_match_the_cluster_layout():
    spec = ps.to_job_spec({
        "model": {"kind": "CNN", "input_dim": 36, "num_classes": 3,
                  "image": {"height": 6, "width": 6, "channels": 1},
                  "conv_layers": [{"filters": 2, "kernel_size": 3}],
                  "hidden_layers": [4], "activation": "TANH"}})
    net = ps.torch.builtin_model(spec)
    names = [(n, tuple(p.shape)) for n, p in net.named_parameters()]
    assert names == [(t.name, t.shape) for t in ps.model_tensors(spec.model)]
    x = torch.randn(5, 36)
    assert net(x).shape == (5, 3)
    # The convolution is the C++ one: rows of the weight in (kernel row,
    # kernel column, channel) order over HWC images, "same" padding.
    conv = net.conv0
    image = x.reshape(5, 6, 6, 1)
    padded = torch.nn.functional.pad(image, (0, 0, 1, 1, 1, 1))
    patch = padded[:, 2:5, 3:6, :].reshape(5, 9)  # Output pixel (2, 3).
    expected = torch.tanh(patch @ conv.weight + conv.bias)
    got = torch.tanh(conv(image.permute(0, 3, 1, 2)))[:, :, 2, 3]
    assert torch.allclose(got, expected, atol=1e-6)
    with pytest.raises(ValueError):
        models.BuiltinModel(ps.to_job_spec(
            {"model": {"kind": "EXTERNAL"}}).model)


def test_load_copies_exported_parameters():
    net = Net()
    params = {n: np.full(tuple(p.shape), 0.5, np.float32)
              for n, p in net.named_parameters()}
    ps.torch.load(net, params)
    assert all((p == 0.5).all() for p in net.parameters())
    del params["fc.bias"]
    with pytest.raises(ps.ModelMismatchError):
        ps.torch.load(net, params)
    ps.torch.load(net, params, strict=False)
