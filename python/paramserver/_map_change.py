"""How a parameter server's answer tells the SDK that the job's shard map
changed (docs/consistency.md, "Server moves"; docs/python.md, "Server moves
and rebuilds"), as ``ps-worker`` reads the same answers (``IsMapChange``,
``ServerBehind`` in worker/trainer_scale.cc; the "servers are moving" retry
in worker/server_fanout.cc):

- ``FAILED_PRECONDITION`` whose message holds ``map_version:``: the request
  carries another shard map version than the server's (ServerJob::
  CheckRequest), or the job moved off the server (ParameterManager::
  MovedAway). The worker fetches the newer map (heartbeats) and goes on
  under it.
- the same, where the server's version ("this server has version N") is
  older than the request's: the server has not taken the new map yet; it
  does on its next heartbeat, so the call is retried.
- ``UNAVAILABLE`` "servers are moving": a push at or beyond the frozen
  frontier of a move (ClockTable::CheckPush); retried at the first step's
  short delay, since the move ends well within a second.

No state: pure functions of an error.
"""

from __future__ import annotations

import re
from typing import Optional

import grpc

from paramserver.errors import ParamServerError

__all__ = ["is_map_change", "server_version", "server_behind", "is_moving",
           "MAP_VERSION"]

#: The prefix of every refusal for another shard map version.
MAP_VERSION = "map_version:"

_HAS = re.compile(r"this server has version (\d+)")


def _code_and_message(error: BaseException):
    if isinstance(error, ParamServerError):
        return error.code, error.message
    if isinstance(error, grpc.RpcError) and hasattr(error, "code"):
        return error.code(), error.details() or ""
    return None, ""


def is_map_change(error: BaseException) -> bool:
    """Whether `error` refuses a request for its shard map version."""
    code, message = _code_and_message(error)
    return (code == grpc.StatusCode.FAILED_PRECONDITION and
            MAP_VERSION in message)


def server_version(error: BaseException) -> Optional[int]:
    """The shard map version a map refusal says its server has (None when
    it does not say: e.g. the job moved off the server)."""
    if not is_map_change(error):
        return None
    _, message = _code_and_message(error)
    match = _HAS.search(message)
    return int(match.group(1)) if match else None


def server_behind(error: BaseException, client_version: int) -> bool:
    """Whether `error` is a map refusal from a server whose version is
    older than the client's `client_version` (it takes the newer map on
    its next heartbeat: retry)."""
    version = server_version(error)
    return version is not None and version < client_version


def is_moving(error: Optional[BaseException]) -> bool:
    """Whether `error` is a push refused while the job's servers move (to
    be retried at once: the move ends within a second)."""
    if error is None:
        return False
    code, message = _code_and_message(error)
    return (code == grpc.StatusCode.UNAVAILABLE and
            "servers are moving" in message)
