"""Shared-memory regions for push and pull payloads to servers on this host
(docs/architecture.md, "Same-host payloads"), as the C++ worker makes them
(common/shared_region.h, worker/shared_region_pool.h): a POSIX shared-memory
object ``/dev/shm/ps-shm-<pid>-<16 hex digits>``, mode 0600, its pages
reserved by ``posix_fallocate`` when it is made (a full /dev/shm is an error
then, not a SIGBUS later), removed by this process when it is closed or
when the process exits, or by the next worker to start on the host once this
process is gone (a worker killed with ``kill -9``).
"""

from __future__ import annotations

import errno
import mmap
import os
import re
import secrets
import threading
import weakref
from typing import List, Optional

__all__ = ["SharedRegion", "RegionPool", "remove_orphaned_regions",
           "is_loopback_host", "host_of"]

_DIR = "/dev/shm"
_NAME = re.compile(r"ps-shm-([0-9]{1,9})-[0-9a-f]{16}")


def host_of(address: str) -> str:
    """The host of ``host:port``, ``[v6]:port`` or a bare IPv6 address
    (``HostOf`` in common/net_address.h)."""
    if address.startswith("["):
        close = address.find("]")
        return address[1:] if close < 0 else address[1:close]
    colon = address.rfind(":")
    if colon < 0 or address.find(":") != colon:
        return address
    return address[:colon]


def is_loopback_host(host: str) -> bool:
    """Whether `host` names this host's loopback (``IsLoopbackHost``)."""
    lower = host.lower()
    return (lower == "localhost" or lower.startswith("127.") or
            lower == "::1" or lower.startswith("::ffff:127."))


def _unlink(path: str) -> None:
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass


class SharedRegion:
    """One region this process made. Not thread-safe; `close` (or the
    process's exit) unmaps and removes it."""

    def __init__(self, size: int):
        """A zero-filled region of `size` bytes (at least 1). Raises OSError
        (ENOSPC when /dev/shm has no room)."""
        if size < 1:
            raise ValueError("shared region: size 0")
        for attempt in range(4):
            self.name = f"ps-shm-{os.getpid()}-{secrets.token_hex(8)}"
            path = os.path.join(_DIR, self.name)
            try:
                fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL |
                             os.O_NOFOLLOW, 0o600)
                break
            except FileExistsError:
                if attempt == 3:
                    raise
        try:
            os.posix_fallocate(fd, 0, size)
            self.buffer = mmap.mmap(fd, size)
        except BaseException:
            os.close(fd)
            _unlink(path)
            raise
        os.close(fd)
        self.size = size
        self._finalizer = weakref.finalize(self, SharedRegion._release,
                                           self.buffer, path)

    @staticmethod
    def _release(buffer: mmap.mmap, path: str) -> None:
        try:
            buffer.close()
        except BufferError:  # A view is still exported; the exit unmaps.
            pass
        _unlink(path)

    def close(self) -> None:
        """Unmaps and removes the region; idempotent."""
        self._finalizer()


class RegionPool:
    """Idle regions kept for reuse: making a region (a file in /dev/shm,
    mapped, its pages faulted in) on every call would cost more than the
    copy it saves. Thread-safe."""

    def __init__(self, max_idle: int = 8):
        self._max_idle = max_idle
        self._lock = threading.Lock()
        self._idle: List[SharedRegion] = []

    def acquire(self, size: int) -> SharedRegion:
        """The smallest idle region of at least `size` bytes, or a new one.
        Raises OSError as SharedRegion."""
        with self._lock:
            fits = [r for r in self._idle if r.size >= size]
            if fits:
                best = min(fits, key=lambda r: r.size)
                self._idle.remove(best)
                return best
        return SharedRegion(max(size, 1))

    def release(self, region: Optional[SharedRegion]) -> None:
        """Gives back a region no server can still read or write (every
        call that named it was answered OK); with `max_idle` regions idle
        already, it is removed instead."""
        if region is None:
            return
        with self._lock:
            if len(self._idle) < self._max_idle:
                self._idle.append(region)
                return
        region.close()

    def close(self) -> None:
        """Removes every idle region."""
        with self._lock:
            idle, self._idle = self._idle, []
        for region in idle:
            region.close()


def remove_orphaned_regions() -> int:
    """Removes the regions of processes that no longer run (a worker killed
    before it could remove its own), as ``RemoveOrphanedRegions``. Returns
    how many it removed."""
    removed = 0
    try:
        names = os.listdir(_DIR)
    except OSError:
        return 0
    for name in names:
        match = _NAME.fullmatch(name)
        if match is None or int(match.group(1)) <= 0:
            continue
        try:
            os.kill(int(match.group(1)), 0)
            continue
        except OSError as e:
            if e.errno != errno.ESRCH:  # EPERM: it runs, as another user.
                continue
        try:
            os.unlink(os.path.join(_DIR, name))
            removed += 1
        except OSError:
            pass
    return removed
