"""The cluster's built-in models as PyTorch modules, with the cluster's
tensor names and layouts, so that a Python worker trains a built-in job
(MLP, SOFTMAX_REGRESSION, CNN) next to ``ps-worker`` processes.

The layouts are the C++ worker's (common/model_layout.h): a fully connected
layer's weight is ``[in, out]`` (``y = x @ W + b``, not ``nn.Linear``'s
``[out, in]``); a convolution's weight is ``[kernel*kernel*in_channels,
filters]`` with rows in (kernel row, kernel column, channel) order, over
HWC images, with "same" padding, the activation and 2x2 max pooling.
"""

from __future__ import annotations

from typing import Any, List, Mapping, Union

import torch
import torch.nn.functional as F
from torch import nn

from paramserver import v1
from paramserver.spec import to_job_spec

__all__ = ["BuiltinModel", "builtin_model"]


class _Dense(nn.Module):
    def __init__(self, fan_in: int, fan_out: int):
        super().__init__()
        self.weight = nn.Parameter(torch.empty(fan_in, fan_out))
        self.bias = nn.Parameter(torch.zeros(fan_out))
        nn.init.xavier_uniform_(self.weight)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.addmm(self.bias, x, self.weight)


class _Conv(nn.Module):
    def __init__(self, in_channels: int, filters: int, kernel: int):
        super().__init__()
        self.in_channels = in_channels
        self.kernel = kernel
        self.weight = nn.Parameter(
            torch.empty(kernel * kernel * in_channels, filters))
        self.bias = nn.Parameter(torch.zeros(filters))
        nn.init.xavier_uniform_(self.weight)

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # NCHW
        k, c = self.kernel, self.in_channels
        # [k*k*c, f] in (row, column, channel) order -> [f, c, k, k].
        w = self.weight.reshape(k, k, c, -1).permute(3, 2, 0, 1)
        return F.conv2d(x, w, self.bias, padding=k // 2)


_ACTIVATIONS = {
    v1.ACTIVATION_UNSPECIFIED: torch.relu,
    v1.RELU: torch.relu,
    v1.TANH: torch.tanh,
    v1.SIGMOID: torch.sigmoid,
}


class BuiltinModel(nn.Module):
    """A built-in model of a job spec (MLP, SOFTMAX_REGRESSION or CNN).

    ``forward(x)`` takes a batch of flat samples ``[batch, input_dim]``
    (images row by row, the channels of a pixel together, as the cluster's
    IDX reader gives them) and returns the logits ``[batch, num_classes]``;
    train it with ``F.cross_entropy``. Its parameters are named as the
    job's tensors (``conv0.weight``, ``dense0.weight``, ...), so
    ``paramserver.torch.Worker`` matches them to the job.
    """

    def __init__(self, model: "v1.ModelSpec"):
        super().__init__()
        if model.kind not in (v1.ModelSpec.MLP, v1.ModelSpec.SOFTMAX_REGRESSION,
                              v1.ModelSpec.CNN):
            raise ValueError("model.kind: BuiltinModel builds MLP, "
                             "SOFTMAX_REGRESSION and CNN models, not "
                             f"{v1.ModelSpec.Kind.Name(model.kind)}")
        self.kind = model.kind
        self.activation = _ACTIVATIONS[model.activation]
        self.image = (model.image.height, model.image.width,
                      model.image.channels)
        channels = model.image.channels
        height, width = model.image.height, model.image.width
        self._convs: List[str] = []
        if model.kind == v1.ModelSpec.CNN:
            for i, conv in enumerate(model.conv_layers):
                setattr(self, f"conv{i}",
                        _Conv(channels, conv.filters, conv.kernel_size))
                self._convs.append(f"conv{i}")
                channels = conv.filters
                height //= 2
                width //= 2
            widths = [height * width * channels]
        else:
            widths = [model.input_dim]
        if model.kind != v1.ModelSpec.SOFTMAX_REGRESSION:
            widths.extend(model.hidden_layers)
        widths.append(model.num_classes)
        self._denses: List[str] = []
        for i in range(len(widths) - 1):
            setattr(self, f"dense{i}", _Dense(widths[i], widths[i + 1]))
            self._denses.append(f"dense{i}")

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self._convs:
            h, w, c = self.image
            x = x.reshape(-1, h, w, c).permute(0, 3, 1, 2)  # HWC -> CHW
            for name in self._convs:
                x = F.max_pool2d(self.activation(getattr(self, name)(x)), 2)
            x = x.permute(0, 2, 3, 1).reshape(x.shape[0], -1)  # back to HWC
        for i, name in enumerate(self._denses):
            x = getattr(self, name)(x)
            if i + 1 < len(self._denses):
                x = self.activation(x)
        return x


def builtin_model(spec: Union[Mapping[str, Any], str, "v1.JobSpec",
                              "v1.ModelSpec"]) -> BuiltinModel:
    """The :class:`BuiltinModel` of a job spec (a dict, a JSON file's path,
    a ``ps.v1.JobSpec``) or of a ``ps.v1.ModelSpec``."""
    if isinstance(spec, v1.ModelSpec):
        return BuiltinModel(spec)
    return BuiltinModel(to_job_spec(spec).model)
