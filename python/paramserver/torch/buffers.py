"""A module's buffers on the cluster (docs/python.md, "Module buffers").

A buffer (a batch norm's ``running_mean``, ``running_var`` and
``num_batches_tracked``) is state that the forward pass changes, not a
parameter that the optimizer trains. A job holds the buffers its EXTERNAL
model declares (``model_spec(module, buffers=True)`` sets
``TensorDecl.buffer``): they are tensors of the job like the parameters,
cut into blocks on its servers, pulled before every batch and uploaded with
the final model, but a server never runs the optimizer on them. In a push, a
buffer's gradient is replaced by the change the worker's batch made to it
(its value after the batch less the value it read before), and the server
adds that change to the tensor:

- BSP: each clock the servers add the workers' mean change. Every worker
  read the same values, so the buffer becomes the average of the workers'
  buffers after their batches of that clock: at every clock, and so at
  every epoch's end. Worker 0 evaluates, and uploads, these averages.
- SSP and ASP: each push's change is added when it arrives, as a
  parameter's update is: the buffers are those of one module that saw
  every worker's batches in turn, each computed from the (possibly stale)
  values its worker read.

A push is applied once per (worker, clock), whatever the retries, and is
persisted and replayed with the job's durability like any other, so the
changes are counted exactly once. Values travel as float32 (in the job's
``wire_gradients`` encoding: the change, not the value, is rounded);
integer buffers are rounded to the nearest integer when loaded into the
module (a count such as ``num_batches_tracked`` stays exact up to 2**24).
"""

from __future__ import annotations

from typing import Any, Dict, List, Mapping, Sequence, Tuple, Union

import numpy as np
import torch
from torch import nn

from paramserver.errors import InvalidArgumentError, ModelMismatchError
from paramserver.layout import TensorLayout

__all__ = ["module_buffers", "buffer_decls", "job_buffers", "assign",
           "load_buffers", "buffer_changes"]


def _supported(t: torch.Tensor) -> bool:
    return (t.is_floating_point() or not (t.is_complex() or
                                          t.dtype == torch.bool))


def module_buffers(module: nn.Module) -> List[Tuple[str, torch.Tensor]]:
    """The buffers a job may hold: the module's persistent buffers (those
    of its ``state_dict``) of a floating-point or integer type with at least
    one value, in ``named_buffers()`` order."""
    persistent = set(module.state_dict().keys())
    return [(name, b) for name, b in module.named_buffers()
            if name in persistent and b.numel() > 0 and _supported(b)]


def buffer_decls(module: nn.Module,
                 init: Union[str, Mapping[str, Any]]) -> List[Dict[str, Any]]:
    """TensorDecl dicts (``buffer: True``) for :func:`module_buffers`. A
    buffer's init is FROM_WORKER (worker 0's module's values) unless the
    `init` mapping names it; a single init name applies to the parameters
    only."""
    decls = []
    for name, b in module_buffers(module):
        decl: Dict[str, Any] = {"name": name, "shape": list(b.shape),
                                "init": "FROM_WORKER"}
        chosen = None if isinstance(init, str) else init.get(name)
        if isinstance(chosen, str):
            decl["init"] = chosen
        elif chosen is not None:
            decl.update(chosen)
        decl["buffer"] = True
        decls.append(decl)
    return decls


def job_buffers(module: nn.Module,
                tensors: Sequence[TensorLayout]) -> Dict[str, torch.Tensor]:
    """The module's buffers that the job's `tensors` declare as buffers, by
    name (a declared buffer the module lacks is left out: the caller
    reports it). Raises ModelMismatchError for a declared buffer of a type
    the cluster cannot hold (bool, complex)."""
    declared = {t.name for t in tensors if t.buffer}
    if not declared:
        return {}
    found = {}
    for name, b in module.named_buffers():
        if name not in declared:
            continue
        if not _supported(b):
            raise ModelMismatchError(
                f"model: buffer {name} is {b.dtype}; the cluster holds "
                "floating-point and integer buffers")
        found[name] = b
    return found


def assign(target: torch.Tensor, values: torch.Tensor) -> None:
    """Copies float32 `values` (the target's shape) into a parameter or a
    buffer: cast to a floating-point target's type, rounded to the nearest
    integer for an integer one."""
    with torch.no_grad():
        if target.is_floating_point():
            target.copy_(values)
        else:
            target.copy_(torch.round(values))


def load_buffers(module: nn.Module, params: Mapping[str, np.ndarray],
                 skip: Sequence[str] = ()) -> List[str]:
    """Copies the values in `params` named after the module's buffers (an
    export, ``JobClient.export``) into them, except those in `skip`;
    returns the names copied. Raises ModelMismatchError for a shape that
    differs."""
    copied = []
    for name, b in module.named_buffers():
        if name not in params or name in skip:
            continue
        value = params[name]
        if tuple(value.shape) != tuple(b.shape):
            raise ModelMismatchError(
                f"params: {name} has shape {list(value.shape)}, the "
                f"module's buffer {list(b.shape)}")
        # np.array, not ascontiguousarray: a scalar (a count) stays 0-d.
        assign(b, torch.from_numpy(np.array(value, dtype=np.float32)).to(
            b.device))
        copied.append(name)
    return copied


def buffer_changes(flat: np.ndarray, tensors: Sequence[TensorLayout],
                   entries: Sequence[torch.Tensor], offsets: np.ndarray,
                   loaded: np.ndarray) -> None:
    """Writes into `flat` (a push's float32 values, in the job's tensor
    order) each buffer's change: its value in the module now, less the
    value loaded into it before the batch (`loaded`, the same layout).
    Parameters are left as they are. Raises InvalidArgumentError if the
    vectors do not have the layout's length."""
    if len(flat) != offsets[-1] or len(loaded) != offsets[-1]:
        raise InvalidArgumentError(
            f"buffers: {len(flat)} and {len(loaded)} values, the job's "
            f"model has {int(offsets[-1])}")
    for t, entry, lo, hi in zip(tensors, entries, offsets[:-1], offsets[1:]):
        if not t.buffer:
            continue
        now = entry.detach().reshape(-1).to("cpu", torch.float32).numpy()
        # From the value read, not the one the module holds: an integer
        # buffer was rounded when loaded, and its change then also brings
        # the servers' value back to an integer.
        flat[lo:hi] = now - loaded[lo:hi]
