"""paramserver: the parameter server cluster from Python.

- :class:`JobClient` submits, watches, lists, cancels and exports jobs (the
  coordinator's JobService, as ``psctl``).
- :mod:`paramserver.torch` trains PyTorch modules on the cluster
  (``paramserver.torch.Worker``); imported on first use, so the job client
  works without PyTorch installed.
- :mod:`paramserver.v1` holds the Protobuf messages (``ps.v1.JobSpec``...).
- Errors are :class:`ParamServerError` subclasses carrying the gRPC code.

docs/python.md describes the API and what it guarantees.
"""

import importlib
from typing import Any

from paramserver import v1
from paramserver.client import TERMINAL_STATES, JobClient
from paramserver.errors import *  # noqa: F401,F403
from paramserver.errors import __all__ as _errors
from paramserver.layout import model_digest, model_tensors
from paramserver.spec import spec_to_dict, to_job_spec

__version__ = "0.1.0"

__all__ = ["JobClient", "TERMINAL_STATES", "v1", "to_job_spec",
           "spec_to_dict", "model_tensors", "model_digest", "torch",
           "data"] + list(_errors)


def __getattr__(name: str) -> Any:
    # `ps.torch` and `ps.data` without importing PyTorch for the job client.
    if name in ("torch", "data"):
        module = importlib.import_module(f"paramserver.{name}")
        globals()[name] = module
        return module
    raise AttributeError(f"module 'paramserver' has no attribute {name!r}")
