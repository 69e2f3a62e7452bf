"""Typed exceptions: every error carries its gRPC status code and message.

A call refused by the coordinator or a parameter server raises the subclass
of :class:`ParamServerError` for its status code (``NotFoundError`` for
``NOT_FOUND``, ...), so callers catch what they can handle::

    try:
        client.get("job-000042")
    except ps.NotFoundError as e:
        print(e.code, e.message)   # StatusCode.NOT_FOUND, 'job_id: no job ...'

Errors found before anything is sent (a spec that does not parse, a module
that does not match its job, a NaN gradient) use the same classes with the
code the cluster would have answered (``INVALID_ARGUMENT``), so one ``except``
covers both.
"""

from __future__ import annotations

from typing import Dict, Optional, Type

import grpc

__all__ = [
    "ParamServerError", "CancelledError", "UnknownError",
    "InvalidArgumentError", "DeadlineExceededError", "NotFoundError",
    "AlreadyExistsError", "PermissionDeniedError", "ResourceExhaustedError",
    "FailedPreconditionError", "AbortedError", "OutOfRangeError",
    "UnimplementedError", "InternalError", "UnavailableError", "DataLossError",
    "UnauthenticatedError", "ModelMismatchError", "NonFiniteGradientError",
    "JobStoppedError", "from_rpc_error", "error_for",
]


class ParamServerError(Exception):
    """An error of the cluster's API, or one found locally before a call.

    Attributes:
        code: The gRPC status code (``grpc.StatusCode``).
        message: The message, as the coordinator or server wrote it (for
            ``INVALID_ARGUMENT`` it starts with the field at fault:
            ``"batch_size: must be >= 1"``).
        field: For messages of the form ``"field: reason"``, the field
            (``"batch_size"``); otherwise ``None``.
    """

    code: grpc.StatusCode = grpc.StatusCode.UNKNOWN

    def __init__(self, message: str, code: Optional[grpc.StatusCode] = None):
        super().__init__(message)
        if code is not None:
            self.code = code
        self.message = message
        head, sep, _ = message.partition(": ")
        self.field: Optional[str] = (
            head if sep and head and " " not in head else None)

    def __str__(self) -> str:
        return f"{self.message} ({self.code.name})"


class CancelledError(ParamServerError):
    """CANCELLED: the call was cancelled (the job ended, or the worker closed)."""
    code = grpc.StatusCode.CANCELLED


class UnknownError(ParamServerError):
    code = grpc.StatusCode.UNKNOWN


class InvalidArgumentError(ParamServerError, ValueError):
    """INVALID_ARGUMENT: a request (a spec, a tensor) is malformed; the
    message names the field."""
    code = grpc.StatusCode.INVALID_ARGUMENT


class DeadlineExceededError(ParamServerError, TimeoutError):
    code = grpc.StatusCode.DEADLINE_EXCEEDED


class NotFoundError(ParamServerError, LookupError):
    """NOT_FOUND: an unknown job, or one without a trained model."""
    code = grpc.StatusCode.NOT_FOUND


class AlreadyExistsError(ParamServerError):
    code = grpc.StatusCode.ALREADY_EXISTS


class PermissionDeniedError(ParamServerError):
    code = grpc.StatusCode.PERMISSION_DENIED


class ResourceExhaustedError(ParamServerError):
    """RESOURCE_EXHAUSTED: a limit of the coordinator (jobs, model size)."""
    code = grpc.StatusCode.RESOURCE_EXHAUSTED


class FailedPreconditionError(ParamServerError):
    """FAILED_PRECONDITION: not possible in the job's state (cancel an ended
    job, delete a running one)."""
    code = grpc.StatusCode.FAILED_PRECONDITION


class AbortedError(ParamServerError):
    code = grpc.StatusCode.ABORTED


class OutOfRangeError(ParamServerError):
    code = grpc.StatusCode.OUT_OF_RANGE


class UnimplementedError(ParamServerError):
    code = grpc.StatusCode.UNIMPLEMENTED


class InternalError(ParamServerError):
    code = grpc.StatusCode.INTERNAL


class UnavailableError(ParamServerError, ConnectionError):
    """UNAVAILABLE: the coordinator or a server cannot be reached."""
    code = grpc.StatusCode.UNAVAILABLE


class DataLossError(ParamServerError):
    code = grpc.StatusCode.DATA_LOSS


class UnauthenticatedError(ParamServerError):
    """UNAUTHENTICATED: a missing or wrong token, secret or certificate."""
    code = grpc.StatusCode.UNAUTHENTICATED


class ModelMismatchError(InvalidArgumentError):
    """The module's parameters do not match the job's tensors (names, shapes,
    dtype). Nothing was sent."""


class NonFiniteGradientError(InvalidArgumentError):
    """A gradient holds NaN or Inf and the job refuses them
    (``non_finite_gradients: NON_FINITE_REFUSE``). Nothing was pushed: the
    parameters are unchanged. ``tensor`` names the first such tensor."""

    def __init__(self, message: str, tensor: str):
        super().__init__(message)
        self.tensor = tensor


class JobStoppedError(CancelledError):
    """The job ended while this worker trained it (cancelled, failed
    elsewhere, or its place was given to another worker)."""


_BY_CODE: Dict[grpc.StatusCode, Type[ParamServerError]] = {
    cls.code: cls
    for cls in (CancelledError, UnknownError, InvalidArgumentError,
                DeadlineExceededError, NotFoundError, AlreadyExistsError,
                PermissionDeniedError, ResourceExhaustedError,
                FailedPreconditionError, AbortedError, OutOfRangeError,
                UnimplementedError, InternalError, UnavailableError,
                DataLossError, UnauthenticatedError)
}


def error_for(code: grpc.StatusCode, message: str) -> ParamServerError:
    """The exception of the class for `code` with `message`."""
    return _BY_CODE.get(code, ParamServerError)(message, code)


def from_rpc_error(error: grpc.RpcError, context: str = "") -> ParamServerError:
    """Turns a ``grpc.RpcError`` into the typed exception for its code.

    `context`, if given, is put before the message ("push of clock 3 to
    server 127.0.0.1:4000: ..."), or after it for INVALID_ARGUMENT, whose
    message keeps starting with the field ("gradients: ... (push of clock 3
    to server 127.0.0.1:4000)").
    """
    code = error.code() if hasattr(error, "code") else None
    code = code or grpc.StatusCode.UNKNOWN
    details = error.details() if hasattr(error, "details") else str(error)
    message = details or code.name
    if context:
        if code == grpc.StatusCode.INVALID_ARGUMENT:
            message = f"{message} ({context})"
        else:
            message = f"{context}: {message}"
    return error_for(code, message)
