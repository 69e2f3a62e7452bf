"""A dense step's push and pull as calls in flight (docs/python.md, "A
step's cost"), as ``ps-worker``'s step pipeline (worker/step_pipeline.h):
the worker starts a call to every server and goes on; it waits for the
replies only when it needs them. No thread of the SDK's own is on the way:
the calls are gRPC futures, started from the training thread (which writes
a push's first bytes itself), and the training thread sleeps, without the
GIL, on the futures when it waits.

Each server has its own shared-memory regions (one for pushes, one for
pulls), reused from step to step, so a push's request framing is written
once and a step copies only the gradients in (paramserver._wire). A first
attempt that fails on some servers hands those to ParameterClient's pull
or push, which retries them with its policy, exactly as a call made there:
pushes are applied once per (worker, clock) however often sent, pulls are
reads.
"""

from __future__ import annotations

from typing import Dict, List, NamedTuple, Optional, Tuple

import grpc
import numpy as np

from paramserver import v1
from paramserver._cluster import encode_bf16, encode_fp16
from paramserver._params import ParameterClient
from paramserver._shared import SharedRegion
from paramserver._wire import PullDecoder, PushEncoder
from paramserver.errors import error_for

__all__ = ["StepPipeline", "Started"]

_SERVICE = "/ps.v1.ParameterService/"


class _Call(NamedTuple):
    future: grpc.Future
    region: Optional[SharedRegion]


class Started(NamedTuple):
    """A push or pull of `clock` started on every server (server -> call)."""
    clock: int
    calls: Dict[int, _Call]


class StepPipeline:
    """Starts a dense job's pushes and pulls without waiting, and ends them.

    Threads: one thread starts and finishes calls (the training thread);
    the client's `stop` cancels them from any thread. A push must be
    finished before the next push starts, and a pull before the next pull
    (each reuses its regions). Requires a job without sparse tables and
    without the SSP worker cache (ParameterClient.pull serves those).
    """

    def __init__(self, client: ParameterClient):
        self.client = client
        self._width = 2 if client.encoding in (v1.FP16, v1.BF16) else 4
        self._push_encoders = [
            PushEncoder(client.job_id, client.worker, client.map_version,
                        client.encoding, blocks, self._width)
            for blocks in client.blocks]
        self._pull_decoders = [PullDecoder(b) for b in client.blocks]
        # Each server's regions: (region, whether the push template is in
        # it). A region is replaced after a call on it failed (the server
        # may still use it).
        n = len(client.addresses)
        self._push_regions: List[Optional[Tuple[SharedRegion, bool]]] = [
            None] * n
        self._pull_regions: List[Optional[SharedRegion]] = [None] * n
        channels = client._channels
        self._push = [c.unary_unary(_SERVICE + "Push",
                                    response_deserializer=v1.PushResponse.
                                    FromString) for c in channels]
        self._push_shared = [c.unary_unary(
            _SERVICE + "PushShared",
            request_serializer=v1.SharedPushRequest.SerializeToString,
            response_deserializer=v1.PushResponse.FromString)
            for c in channels]
        self._pull = [c.unary_unary(
            _SERVICE + "Pull",
            request_serializer=v1.PullRequest.SerializeToString)
            for c in channels]
        self._pull_shared = [c.unary_unary(
            _SERVICE + "PullShared",
            request_serializer=v1.SharedPullRequest.SerializeToString,
            response_deserializer=v1.SharedPullResponse.FromString)
            for c in channels]
        self.fast_replies = 0    # Pull replies read through their framing.
        self.parsed_replies = 0  # Pull replies parsed as messages.

    def close(self) -> None:
        """Removes the regions (after the calls on them ended)."""
        for entry in self._push_regions:
            if entry is not None:
                entry[0].close()
        for region in self._pull_regions:
            if region is not None:
                region.close()
        self._push_regions = [None] * len(self._push_regions)
        self._pull_regions = [None] * len(self._pull_regions)

    # Starting calls.

    def _track(self, future: grpc.Future) -> grpc.Future:
        if not self.client._stop.track(future):
            future.cancel()
        return future

    def _region(self, size: int) -> Optional[SharedRegion]:
        try:
            return SharedRegion(size)
        except OSError:
            return None  # Through the socket (ParameterClient logs it).

    def start_push(self, clock: int, grads: np.ndarray) -> Started:
        """Starts the push of `clock`'s gradients (flat float32) to every
        server; `grads` may change once this returns (it is encoded)."""
        client = self.client
        if grads.shape != (client.size,) or grads.dtype != np.float32:
            raise error_for(grpc.StatusCode.INVALID_ARGUMENT,
                            f"gradients: {grads.shape} {grads.dtype}, "
                            f"expected ({client.size},) float32")
        if client.encoding == v1.FP16:
            wire = encode_fp16(grads)
        elif client.encoding == v1.BF16:
            wire = encode_bf16(grads)
        else:
            wire = grads
        wire = wire.view(np.uint8)
        metadata = client._security.metadata
        calls: Dict[int, _Call] = {}
        for s, encoder in enumerate(self._push_encoders):
            entry = self._push_regions[s]
            if client._shared[s] and entry is None:
                region = self._region(encoder.max_size)
                entry = self._push_regions[s] = (
                    (region, False) if region is not None else None)
            if client._shared[s] and entry is not None:
                region, written = entry
                length = encoder.encode_into(region.buffer, wire, clock,
                                             written)
                self._push_regions[s] = (region, True)
                request = v1.SharedPushRequest()
                request.request.region = region.name
                request.request.length = length
                client.pushed_bytes += length
                future = self._push_shared[s].future(
                    request, timeout=client.push_timeout, metadata=metadata)
                calls[s] = _Call(self._track(future), region)
            else:
                data = encoder.encode(wire, clock)
                client.pushed_bytes += len(data)
                future = self._push[s].future(
                    data, timeout=client.push_timeout, metadata=metadata)
                calls[s] = _Call(self._track(future), None)
        return Started(clock, calls)

    def start_pull(self, clock: int) -> Started:
        """Starts the pull of `clock`'s parameters from every server."""
        client = self.client
        request = v1.PullRequest(job_id=client.job_id,
                                 worker_index=client.worker, clock=clock,
                                 map_version=client.map_version)
        metadata = client._security.metadata
        calls: Dict[int, _Call] = {}
        for s in range(len(self._pull_decoders)):
            region = self._pull_regions[s]
            if client._shared[s] and region is None:
                region = self._pull_regions[s] = self._region(
                    client._max_reply_bytes[s])
            if client._shared[s] and region is not None:
                shared = v1.SharedPullRequest(pull=request)
                shared.reply.region = region.name
                shared.reply.length = region.size
                future = self._pull_shared[s].future(
                    shared, timeout=client.pull_timeout, metadata=metadata)
                calls[s] = _Call(self._track(future), region)
            else:
                future = self._pull[s].future(
                    request, timeout=client.pull_timeout, metadata=metadata)
                calls[s] = _Call(self._track(future), None)
        client.pulls_made += 1
        return Started(clock, calls)

    # Ending them.

    def _outcome(self, s: int, call: _Call) -> Optional[BaseException]:
        """Waits for server s's call; its error, or None."""
        future = call.future
        try:
            future.result()
            error = None
        except grpc.FutureCancelledError:
            error = error_for(grpc.StatusCode.CANCELLED, "call cancelled")
        except grpc.RpcError as e:
            error = e
        finally:
            self.client._stop.untrack(future)
        if error is not None and call.region is not None:
            # The server may still read or write it: never reuse it.
            call.region.close()
            if call.region is self._pull_regions[s]:
                self._pull_regions[s] = None
            entry = self._push_regions[s]
            if entry is not None and entry[0] is call.region:
                self._push_regions[s] = None
            if (isinstance(error, grpc.RpcError) and
                    error.code() == grpc.StatusCode.UNIMPLEMENTED):
                self.client._shared_refused(s, error)
        return error

    def _stopped(self) -> None:
        reason = self.client._stop.reason
        if reason is not None:
            raise reason

    def finish_push(self, started: Started, grads: np.ndarray) -> bool:
        """Waits for a started push; a server that failed is pushed again
        through ParameterClient.push (its retries) with `grads`, the same
        gradients. Returns True if every server had it already. Raises as
        ParameterClient.push."""
        failed = []
        duplicates = []
        for s, call in started.calls.items():
            error = self._outcome(s, call)
            if error is None:
                duplicates.append(call.future.result().duplicate)
            else:
                failed.append(s)
        self._stopped()
        if failed:
            duplicates.append(self.client.push(started.clock, grads,
                                               servers=failed))
        return all(duplicates)

    def finish_pull(self, started: Started,
                    out: np.ndarray) -> Tuple[int, int]:
        """Waits for a started pull and writes its values into `out` (flat
        float32); a server that failed is pulled again through
        ParameterClient.pull (its retries). Returns (slowest worker's
        clock, this worker's clock), as ParameterClient.pull."""
        client = self.client
        out_bytes = out.view(np.uint8)
        failed = []
        min_clocks: List[int] = []
        own_clocks: List[int] = []
        for s, call in started.calls.items():
            error = self._outcome(s, call)
            if error is not None:
                failed.append(s)
                continue
            rest = self._read(s, call, out, out_bytes)
            min_clocks.append(rest.min_clock)
            if client.worker < len(rest.worker_clocks):
                own_clocks.append(rest.worker_clocks[client.worker])
        self._stopped()
        if failed:
            low, own = client.pull(started.clock, out, servers=failed)
            min_clocks.append(low)
            own_clocks.append(own)
        return (min(min_clocks) if min_clocks else 0,
                min(own_clocks) if own_clocks else 0)

    def _read(self, s: int, call: _Call, out: np.ndarray,
              out_bytes: np.ndarray) -> "v1.PullResponse":
        """Server s's reply: its values into `out`, its other fields
        returned."""
        client = self.client
        reply = call.future.result()
        if call.region is not None:
            if reply.length > call.region.size:
                raise error_for(grpc.StatusCode.INTERNAL,
                                f"pull reply from {client.addresses[s]}: "
                                "not within its shared region")
            payload, length = call.region.buffer, reply.length
        else:
            payload, length = reply, len(reply)
        rest = self._pull_decoders[s].decode(payload, length, out_bytes)
        if rest is not None:
            self.fast_replies += 1
            client.pulled_bytes += length
        else:
            # Framed otherwise (another value width, say): as a message.
            self.parsed_replies += 1
            with memoryview(payload) as view:
                rest = v1.PullResponse.FromString(view[:length])
            client._read_pull_reply(s, rest, out)
        if len(rest.sparse):
            raise error_for(grpc.StatusCode.INTERNAL,
                            f"pull reply of server {client.addresses[s]} "
                            "has rows no one asked for")
        return rest

    def abandon(self, started: Started) -> None:
        """Cancels a started call that is no longer wanted (its regions are
        not reused); raises nothing."""
        for call in started.calls.values():
            call.future.cancel()
        for s, call in started.calls.items():
            self._outcome(s, call)

    def pull(self, clock: int, out: np.ndarray) -> Tuple[int, int]:
        """A pull started and finished (ParameterClient.pull's result)."""
        return self.finish_pull(self.start_pull(clock), out)

