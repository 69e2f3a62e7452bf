"""A module as a job's model: its parameters (:func:`parameters_of`), the
``model`` section of a job spec for it (:func:`model_spec`), and exported
parameters copied back into it (:func:`load`). Re-exported by
``paramserver.torch`` (docs/python.md).
"""

from __future__ import annotations

from typing import Any, Dict, List, Mapping, Tuple, Union

import numpy as np
import torch
from torch import nn

from paramserver.errors import InvalidArgumentError, ModelMismatchError
from paramserver.torch.buffers import buffer_decls, load_buffers
from paramserver.torch.embedding import sparse_table_specs

__all__ = ["parameters_of", "model_spec", "load"]

_INIT_NAMES = ("FROM_WORKER", "ZEROS", "CONSTANT", "HE_UNIFORM",
               "XAVIER_UNIFORM")


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

