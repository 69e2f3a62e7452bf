"""A ``paramserver.torch.Worker``'s job follows a change of its shard map
(docs/python.md, "Server moves and rebuilds"): a move of the job's servers
(``psctl scale``) or a lost server's place rebuilt on a free server. A
mixin of _Job, as ``ps-worker``'s Trainer::FollowMapChange (worker/
trainer_scale.cc).

The coordinator sends the newer map with the worker's heartbeats
(:meth:`_MapFollower.offer_map`, on the heartbeat thread). A server refuses
a request under the older map (FAILED_PRECONDITION ``map_version: ...``;
paramserver._map_change); a call retrying an unreachable server stops once
a newer map is offered. :meth:`_MapFollower.following` then waits for the
newer map, re-plans the job's blocks and buckets under it (a new
ParameterClient, step pipeline and sparse router: :meth:`remap`) and runs
the call again. A push goes again unchanged, with its clock: a server that
had applied it (its per-worker clocks move with the units) acknowledges it
as a duplicate, so each push is applied exactly once. Pulls are reads.
The worker's clock does not change: under a move every place stops at the
boundary clock and goes on from it.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import TYPE_CHECKING, Callable, Optional, TypeVar

import grpc

from paramserver import v1
from paramserver._map_change import is_map_change, server_behind
from paramserver._params import ParameterClient
from paramserver._sparse import SparseRouter
from paramserver.errors import ParamServerError, error_for

if TYPE_CHECKING:
    from paramserver.torch.worker import Worker

log = logging.getLogger("paramserver")

T = TypeVar("T")

#: How long a worker waits for a newer map after a refusal (as ps-worker).
FOLLOW_TIMEOUT = 120.0


def readdress_only(old: "v1.ShardMap", new: "v1.ShardMap") -> bool:
    """Whether `new` is newer than `old` and differs only in servers'
    addresses (a lost server's place rebuilt elsewhere): no unit moves, so
    no server refuses the calls in flight; they must be cut short."""
    if (new.version <= old.version or len(new.servers) != len(old.servers)
            or len(new.blocks) != len(old.blocks)):
        return False
    return all(a.key == b.key and a.server == b.server
               for a, b in zip(old.blocks, new.blocks))


class _MapFollower:
    """_Job's shard map: the newest one offered and the one its calls use.
    offer_map runs on the heartbeat thread; everything else on the thread
    that makes the job's calls (the training thread, or the communication
    thread while the training thread waits for it)."""

    def _init_follower(self, assignment: "v1.Assignment") -> None:
        self._map_lock = threading.Condition()
        self._latest = assignment     # The newest assignment offered.
        self.map_follows = 0          # Maps followed.
        self._worker: Optional["Worker"] = None

    # The heartbeat thread.

    def offer_map(self, assignment: "v1.Assignment") -> None:
        """The coordinator's current assignment of this place: kept when
        its shard map is newer than any offered before. The compiled
        transport's calls in flight are cancelled when the new map only
        readdresses a server (its retries would wait on the lost one)."""
        with self._map_lock:
            if (assignment.shard_map.version <=
                    self._latest.shard_map.version):
                return
            self._latest = assignment
            self._map_lock.notify_all()
        client = self.client
        if client is None or not readdress_only(
                self.assignment.shard_map, assignment.shard_map):
            return
        # Pure Python: the retries end on newer_map(). Compiled: cancel.
        native = getattr(self.pipe, "_native", None)
        if native is not None:
            native.cancel()

    def latest_map_version(self) -> int:
        """The newest shard map version offered to this place."""
        return self._latest.shard_map.version

    def newer_map(self) -> bool:
        """Whether a newer map than the calls' is offered (any thread)."""
        client = self.client
        return (client is not None and
                self._latest.shard_map.version > client.map_version)

    # The calling thread.

    def new_client(self, assignment: "v1.Assignment") -> ParameterClient:
        """A ParameterClient for `assignment`'s map, as the worker asks."""
        worker = self._worker
        version = assignment.shard_map.version
        return ParameterClient(
            assignment, self.tensors, worker._security, self.stop,
            pull_timeout=worker.pull_timeout,
            push_timeout=worker.push_timeout,
            retry_window=worker.retry_window,
            shared_memory=worker.shared_memory_payloads,
            newer_map=lambda: self._latest.shard_map.version > version)

    def map_changed(self, error: BaseException) -> bool:
        """Whether `error` ended a call because the job's map changed."""
        return (self.stop.reason is None and
                isinstance(error, ParamServerError) and
                (is_map_change(error) or self.newer_map()))

    def following(self, call: Callable[[], T]) -> T:
        """Runs `call` (which must be safe to run again: a push of the same
        gradients at the same clock, a pull); when the job's map changed
        under it, follows the new map and runs it again."""
        while True:
            try:
                return call()
            except ParamServerError as e:
                if not self.map_changed(e):
                    raise
                self.follow(e)

    def follow(self, why: ParamServerError) -> None:
        """Waits for a newer map than the calls' (after `why`, the refusal
        or the interrupted call) and re-plans the job under it. A server
        behind the calls' map (it has not taken it yet): the same map again
        after 20 ms. DeadlineExceededError after FOLLOW_TIMEOUT s without
        one; the job's stop reason if it stops."""
        version = self.client.map_version
        behind = server_behind(why, version)
        if behind:
            time.sleep(0.02)
        deadline = time.monotonic() + FOLLOW_TIMEOUT
        with self._map_lock:
            while True:
                if self.stop.reason is not None:
                    raise self.stop.reason
                latest = self._latest
                offered = latest.shard_map.version
                if offered > version or (behind and offered == version):
                    break
                if time.monotonic() > deadline:
                    raise error_for(
                        grpc.StatusCode.DEADLINE_EXCEEDED,
                        f"job {self.job_id}: worker {self.index} got no "
                        f"shard map newer than version {version} within "
                        f"{FOLLOW_TIMEOUT:.0f} s (after: {why.message})")
                self._map_lock.wait(0.01)
        self.remap(latest)
        log.info("job %s: worker %d goes on under shard map version %d "
                 "(%d servers) at clock %d (%s)", self.job_id, self.index,
                 latest.shard_map.version, len(latest.shard_map.servers),
                 self.clock, why.message)

    def remap(self, assignment: "v1.Assignment") -> None:
        """Re-plans the job's calls under `assignment`'s shard map: a new
        ParameterClient (blocks per server), sparse router (buckets per
        server) and step pipeline of the same kind; the old ones' calls in
        flight are cancelled and their connections closed. The values read
        and the clocks stay."""
        from paramserver.torch._job import _step_pipeline  # A cycle.
        old_client, old_pipe = self.client, self.pipe
        if old_pipe is not None:
            pulling, self.pulling = self.pulling, None
            if pulling is not None and hasattr(old_pipe, "_pull_decoders"):
                old_pipe.abandon(pulling)  # StepPipeline: its futures.
            old_pipe.close()
        client = self.new_client(assignment)
        for counter in ("pushed_bytes", "pulled_bytes", "pulls_made",
                        "pulls_saved"):
            setattr(client, counter, getattr(old_client, counter))
        self.assignment = assignment
        self.client = client
        if self.sparse is not None:
            self.sparse.router = SparseRouter(self.spec, assignment.shard_map)
        if old_pipe is not None:
            self.pipe = _step_pipeline(client, assignment, self._worker,
                                       self.sparse)
        old_client.close()
        self.map_follows += 1
