"""Job specs from Python: dicts, JSON files and ``ps.v1.JobSpec`` messages.

A spec is the Protobuf JSON mapping of ``ps.v1.JobSpec`` (proto/ps/v1/
job.proto), the same JSON ``psctl submit`` reads; field names may be written
either way (``batch_size`` or ``batchSize``). Unknown fields are refused, so
a misspelt option is never silently ignored.
"""

from __future__ import annotations

import json
import os
from typing import Any, Mapping, Union

from google.protobuf import json_format

from paramserver import v1
from paramserver.errors import InvalidArgumentError

__all__ = ["SpecLike", "to_job_spec", "spec_to_dict", "check_trainable"]

#: What JobClient.submit accepts: a dict (the JSON mapping), the path of a
#: JSON file, or a ``ps.v1.JobSpec``.
SpecLike = Union[Mapping[str, Any], str, "os.PathLike[str]", "v1.JobSpec"]


def to_job_spec(spec: SpecLike) -> "v1.JobSpec":
    """A ``ps.v1.JobSpec`` from a dict, a JSON file's path, or a JobSpec
    (copied). Raises InvalidArgumentError (naming the field where Protobuf
    does) for JSON that is not a JobSpec, and for a file that cannot be
    read."""
    if isinstance(spec, v1.JobSpec):
        copy = v1.JobSpec()
        copy.CopyFrom(spec)
        return copy
    if isinstance(spec, Mapping):
        message = v1.JobSpec()
        try:
            json_format.ParseDict(dict(spec), message)
        except json_format.ParseError as e:
            raise InvalidArgumentError(
                f"spec: not a valid ps.v1.JobSpec: {e}") from None
        return message
    if isinstance(spec, (str, os.PathLike)):
        path = os.fspath(spec)
        try:
            with open(path, encoding="utf-8") as f:
                text = f.read()
        except OSError as e:
            raise InvalidArgumentError(
                f"spec: cannot read {path}: {e.strerror}") from None
        try:
            data = json.loads(text)
        except json.JSONDecodeError as e:
            raise InvalidArgumentError(
                f"spec: {path} is not JSON: {e}") from None
        if not isinstance(data, dict):
            raise InvalidArgumentError(f"spec: {path} holds no JSON object")
        return to_job_spec(data)
    raise TypeError(
        f"spec must be a dict, a JSON file's path or a ps.v1.JobSpec, not "
        f"{type(spec).__name__}")


def spec_to_dict(spec: "v1.JobSpec") -> dict:
    """A JobSpec as a dict of the JSON mapping (field names as in the
    proto)."""
    return json_format.MessageToDict(spec, preserving_proto_field_name=True)


def check_trainable(spec: "v1.JobSpec") -> None:
    """Raises InvalidArgumentError, naming the field, if the spec asks for a
    worker-side technique that paramserver.torch.Worker does not implement
    (it would otherwise train something else than the spec says): local
    SGD (``local_sgd``), a non-IID partition (``dataset.labels_per_worker``),
    gradient accumulation (``accumulation_steps`` > 1) and gradient clipping
    (``gradient_clipping``). ps-worker implements them
    (docs/training.md)."""
    unsupported = []
    if spec.local_sgd.local_steps != 0:
        unsupported.append("local_sgd.local_steps")
    if spec.dataset.labels_per_worker != 0:
        unsupported.append("dataset.labels_per_worker")
    if spec.accumulation_steps > 1:
        unsupported.append("accumulation_steps")
    if spec.gradient_clipping.max_value != 0:
        unsupported.append("gradient_clipping.max_value")
    if spec.gradient_clipping.max_global_norm != 0:
        unsupported.append("gradient_clipping.max_global_norm")
    if unsupported:
        raise InvalidArgumentError(
            f"{unsupported[0]}: the Python worker does not implement "
            f"{', '.join(unsupported)}; train this job with ps-worker")
