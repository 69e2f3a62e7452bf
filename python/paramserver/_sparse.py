"""Sparse embedding rows in the Python SDK (docs/sparse.md): where a row lives
and how a step's rows travel.

- :func:`bucket_of_ids`: a row's bucket, ``XXH3_64bits_withSeed(id as 8
  little-endian bytes, table index) mod num_buckets`` (``BucketOfId`` in
  common/sparse_keys.h), vectorized over numpy arrays.
  tests/python/test_sparse_routing.py checks it against the C++.
- :class:`SparseRouter`: the job's tables and which server holds each of
  their buckets (the shard map's placements of the keys ``(1 << 63) |
  (table << 32) | bucket``).
- :class:`SparsePull`: the rows a pull asks each server for
  (``PullRequest.sparse``), and their values once the replies came back,
  in the order of the ids asked for.
- :func:`push_rows`: a step's row gradients cut into each server's
  ``PushRequest.sparse``.

Ids are any 64-bit values: int64 ids are taken as their two's-complement
uint64 bits (the wire's keys). No PyTorch here.
"""

from __future__ import annotations

from typing import Dict, List, NamedTuple, Sequence, Tuple

import grpc
import numpy as np

from paramserver import v1
from paramserver._cluster import decode_values, encode_bf16, encode_fp16
from paramserver.errors import InvalidArgumentError, error_for

__all__ = ["bucket_of_ids", "bucket_key", "SparseRouter", "TableRoute",
           "SparsePull", "push_rows", "MAX_KEYS_PER_REQUEST"]

#: The top bit of a shard map key: set for a bucket (common/sparse_keys.h).
BUCKET_KEY_BIT = 1 << 63
#: Most ids one pull or push may name, over all its tables.
MAX_KEYS_PER_REQUEST = 262144

# XXH3-64 of an 8-byte input (XXH3_len_4to8_64b with the default secret):
# bytes 8 to 24 of the secret, as two little-endian uint64, and the
# constant of its final mix.
_SECRET_8 = 0x1cad21f72c81017c
_SECRET_16 = 0xdb979083e96dd4de
_RRMXMX = np.uint64(0x9FB21C651E98DF25)
_MASK64 = (1 << 64) - 1


def bucket_key(table: int, bucket: int) -> int:
    """The shard map key of bucket `bucket` of table `table`."""
    return BUCKET_KEY_BIT | (int(table) << 32) | int(bucket)


def _rotl(x: np.ndarray, r: int) -> np.ndarray:
    return (x << np.uint64(r)) | (x >> np.uint64(64 - r))


def xxh3_64_of_ids(ids: np.ndarray, seed: int) -> np.ndarray:
    """XXH3_64bits_withSeed of each id's 8 little-endian bytes (uint64)."""
    x = np.asarray(ids).astype(np.uint64, copy=False)
    seed &= _MASK64
    low32 = seed & 0xFFFFFFFF
    swapped = int.from_bytes(low32.to_bytes(4, "little"), "big")
    seed ^= swapped << 32
    bitflip = np.uint64(((_SECRET_8 ^ _SECRET_16) - seed) & _MASK64)
    with np.errstate(over="ignore"):
        # The input's first 4 bytes (the id's low half) go high.
        h = ((x >> np.uint64(32)) + (x << np.uint64(32))) ^ bitflip
        h ^= _rotl(h, 49) ^ _rotl(h, 24)
        h *= _RRMXMX
        h ^= (h >> np.uint64(35)) + np.uint64(8)
        h *= _RRMXMX
        h ^= h >> np.uint64(28)
    return h


def bucket_of_ids(ids: np.ndarray, table: int, num_buckets: int
                  ) -> np.ndarray:
    """The bucket (uint32) of each id of table `table` among `num_buckets`
    (a power of two), as ``BucketOfId`` (common/sparse_keys.h). `ids`:
    int64 (two's complement) or uint64 values."""
    if num_buckets < 1 or num_buckets & (num_buckets - 1):
        raise ValueError(f"num_buckets: {num_buckets} is not a power of two")
    h = xxh3_64_of_ids(ids, int(table))
    return (h & np.uint64(num_buckets - 1)).astype(np.uint32)


class TableRoute(NamedTuple):
    """One table of the job: its index (the wire's `table`, the hash seed),
    name, dim, bucket count and the server of each bucket (int32 array)."""
    index: int
    name: str
    dim: int
    num_buckets: int
    servers: np.ndarray

    def server_of(self, ids: np.ndarray) -> np.ndarray:
        """The server index of each id (int32)."""
        return self.servers[bucket_of_ids(ids, self.index, self.num_buckets)]


class SparseRouter:
    """The sparse tables of a job and where their buckets live, from the
    assignment's spec (defaults filled by the coordinator) and shard map.
    Immutable once built: thread-safe. Raises InvalidArgumentError if the
    map leaves a bucket without a server."""

    def __init__(self, spec: "v1.JobSpec", shard_map: "v1.ShardMap"):
        num_servers = len(shard_map.servers)
        tables = list(spec.model.sparse_tables)
        servers = [np.full(max(t.num_buckets, 1), -1, dtype=np.int32)
                   for t in tables]
        for p in shard_map.blocks:
            if not p.key & BUCKET_KEY_BIT:
                continue
            t, b = (p.key & ~BUCKET_KEY_BIT) >> 32, p.key & 0xFFFFFFFF
            if t < len(tables) and b < len(servers[t]):
                servers[t][b] = p.server
        self.tables: Dict[str, TableRoute] = {}
        for i, t in enumerate(tables):
            missing = np.nonzero((servers[i] < 0) |
                                 (servers[i] >= num_servers))[0]
            if len(missing):
                raise error_for(
                    grpc.StatusCode.INVALID_ARGUMENT,
                    f"shard_map: bucket {int(missing[0])} of sparse table "
                    f"{t.name!r} has no server")
            self.tables[t.name] = TableRoute(i, t.name, int(t.dim),
                                             int(t.num_buckets), servers[i])
        self.num_servers = num_servers

    def table(self, name: str) -> TableRoute:
        """The table named `name`; InvalidArgumentError naming the job's
        tables if there is none."""
        route = self.tables.get(name)
        if route is None:
            raise InvalidArgumentError(
                f"table: {name!r} is not a sparse table of the job (its "
                f"tables: {', '.join(sorted(self.tables)) or 'none'})")
        return route


def as_ids(ids, what: str) -> np.ndarray:
    """`ids` as a flat int64 numpy array; InvalidArgumentError for another
    dtype (floats, int32...: ids are int64, as torch's indices)."""
    array = ids.numpy() if hasattr(ids, "numpy") else np.asarray(ids)
    if array.dtype != np.int64:
        raise InvalidArgumentError(
            f"{what}: ids must be int64 (torch.long), not {array.dtype}")
    return array.reshape(-1)


def _check_counts(counts: Sequence[int], what: str) -> None:
    for s, n in enumerate(counts):
        if n > MAX_KEYS_PER_REQUEST:
            raise InvalidArgumentError(
                f"{what}: {n} distinct ids for server {s} in one step, more "
                f"than the {MAX_KEYS_PER_REQUEST} a request may carry "
                "(use smaller batches)")


class SparsePull:
    """The rows one pull asks for: per table, sorted distinct int64 ids
    (``wanted``), split by server. After the pull, :attr:`rows` holds each
    table's rows (float32 ``[len(ids), dim]``) in the ids' order.

    Filled by one pull (``ParameterClient.pull``) on the caller's thread;
    not thread-safe."""

    def __init__(self, router: SparseRouter,
                 wanted: Dict[str, np.ndarray]):
        self.ids: Dict[str, np.ndarray] = {}
        self.rows: Dict[str, np.ndarray] = {}
        # Per server: (table route, positions in the table's ids).
        self._parts: List[List[Tuple[TableRoute, np.ndarray]]] = [
            [] for _ in range(router.num_servers)]
        self._requests: List[List["v1.SparseRows"]] = [
            [] for _ in range(router.num_servers)]
        counts = [0] * router.num_servers
        for name, ids in wanted.items():
            route = router.table(name)
            ids = np.asarray(ids, dtype=np.int64)
            self.ids[name] = ids
            self.rows[name] = np.empty((len(ids), route.dim), np.float32)
            if not len(ids):
                continue
            server = route.server_of(ids)
            for s in range(router.num_servers):
                positions = np.nonzero(server == s)[0]
                if not len(positions):
                    continue
                counts[s] += len(positions)
                self._parts[s].append((route, positions))
                self._requests[s].append(v1.SparseRows(
                    table=route.index,
                    keys=ids[positions].astype("<i8").tobytes()))
        _check_counts(counts, "ids")
        self._reply_bytes = [
            sum(4 * len(p) * r.dim + 32 for r, p in parts)
            for parts in self._parts]

    def empty(self) -> bool:
        return not any(self._requests)

    def requests(self, server: int) -> List["v1.SparseRows"]:
        """The PullRequest.sparse entries for server `server`."""
        return self._requests[server]

    def reply_bytes(self, server: int) -> int:
        """At most the bytes server `server`'s rows add to its reply."""
        return self._reply_bytes[server]

    def on_reply(self, server: int, replies: Sequence["v1.SparseRows"],
                 address: str, encoding: int = 0) -> None:
        """Places server `server`'s rows, whose values are in `encoding`
        (``PullResponse.value_encoding``); INTERNAL if they do not answer
        the request (count, order, size)."""
        parts = self._parts[server]
        if len(replies) != len(parts):
            raise error_for(grpc.StatusCode.INTERNAL,
                            f"pull reply of server {address} has "
                            f"{len(replies)} sparse tables, expected "
                            f"{len(parts)}")
        for reply, (route, positions) in zip(replies, parts):
            width = 4 if encoding == 0 else 2 if encoding in (1, 2) else 0
            if (reply.table != route.index or width == 0 or
                    len(reply.values) != width * route.dim * len(positions)):
                raise error_for(grpc.StatusCode.INTERNAL,
                                f"pull reply of server {address}: the rows "
                                f"of table {route.name!r} do not match")
            self.rows[route.name][positions] = decode_values(
                reply.values, encoding).reshape(len(positions), route.dim)


def push_rows(router: SparseRouter,
              gradients: Dict[str, Tuple[np.ndarray, np.ndarray]],
              encoding: int) -> List[List["v1.SparseRows"]]:
    """Each server's ``PushRequest.sparse`` for a step's row gradients:
    per table name, (distinct int64 ids, float32 ``[len(ids), dim]``
    gradients), encoded in the push's `encoding` (FP32, FP16 or BF16)."""
    out: List[List["v1.SparseRows"]] = [[] for _ in range(router.num_servers)]
    counts = [0] * router.num_servers
    for name, (ids, grads) in gradients.items():
        route = router.table(name)
        if not len(ids):
            continue
        grads = np.ascontiguousarray(grads, dtype=np.float32)
        if encoding == v1.FP16:
            wire = encode_fp16(grads)
        elif encoding == v1.BF16:
            wire = encode_bf16(grads)
        else:
            wire = grads
        wire = wire.reshape(len(ids), route.dim)
        server = route.server_of(ids)
        for s in range(router.num_servers):
            positions = np.nonzero(server == s)[0]
            if not len(positions):
                continue
            counts[s] += len(positions)
            out[s].append(v1.SparseRows(
                table=route.index,
                keys=ids[positions].astype("<i8").tobytes(),
                values=wire[positions].tobytes()))
    _check_counts(counts, "gradients")
    return out
