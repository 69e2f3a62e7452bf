"""Embedding modules whose rows live in the job's sparse tables
(docs/python.md, "Sharded embeddings").

    emb = ps.torch.ShardedEmbedding("ids", dim=16,
                                    optimizer={"rowwise_adagrad":
                                               {"learning_rate": 0.05}})
    bag = ps.torch.ShardedEmbeddingBag("tags", dim=8, mode="mean", ...)

A sharded module holds no parameters: its table is a sparse table of the
job (``model.sparse_tables``, which :func:`paramserver.torch.model_spec`
writes from the modules), keyed by any int64 id, with no vocabulary. Bound
to a :class:`~paramserver.torch.Worker`, its forward pass reads the rows of
the batch's distinct ids (pulled with the step's dense parameters, in the
same request to each server, when ``Worker.epochs(..., sparse_ids=...)``
names them in advance; otherwise by a pull of their own at the first
forward that needs them), and ``Worker.step()`` pushes the gradients of the
rows the step touched with the dense gradients. The optimizer of each table
runs on the servers.

Several modules may share a table (the same name and dim): their ids meet
in one set of rows per step, and each row's gradient is the sum over its
uses. Unbound (no worker, e.g. for inference after an export), a module
reads the rows given to :meth:`ShardedEmbedding.load_rows`, and zeros for
other ids.
"""

from __future__ import annotations

import threading
from typing import (Any, Callable, Dict, Iterable, List, Mapping, Optional,
                    Tuple)

import numpy as np
import torch
from torch import nn
import torch.nn.functional as F

from paramserver import v1
from paramserver._sparse import SparsePull, SparseRouter, as_ids, push_rows
from paramserver.errors import (InvalidArgumentError, ModelMismatchError,
                                NonFiniteGradientError)

__all__ = ["ShardedEmbedding", "ShardedEmbeddingBag", "sharded_modules",
           "sparse_tables_of", "sparse_table_specs", "SparseStep",
           "with_next_ids"]

#: How many tensors of ids SparseStep remembers taken apart.
_KEPT_UNIQUES = 4

#: SparseTableSpec fields a module may set (the JSON mapping's names).
_TABLE_FIELDS = ("init", "optimizer", "admission", "eviction", "num_buckets",
                 "expected_rows")


class ShardedEmbedding(nn.Module):
    """``nn.Embedding`` over a sparse table of the job: ``forward(ids)``
    maps int64 ids of any shape to ``ids.shape + (dim,)`` rows.

    Args:
        table: The table's name in the job (``model.sparse_tables[].name``).
        dim: Values per row.
        optimizer, init, admission, eviction, num_buckets, expected_rows:
            The table's ``SparseTableSpec`` fields (docs/sparse.md), as
            :func:`paramserver.torch.model_spec` writes them into a job
            spec; the job's spec is what counts once a job runs.

    Thread-safety: as any module, one forward at a time.
    """

    def __init__(self, table: str, dim: int, *,
                 optimizer: Optional[Mapping[str, Any]] = None,
                 init: Optional[Mapping[str, Any]] = None,
                 admission: Optional[Mapping[str, Any]] = None,
                 eviction: Optional[Mapping[str, Any]] = None,
                 num_buckets: int = 0, expected_rows: int = 0):
        super().__init__()
        if not isinstance(table, str) or not table:
            raise InvalidArgumentError("table: a non-empty name")
        if int(dim) < 1:
            raise InvalidArgumentError(f"dim: must be >= 1, got {dim}")
        self.table = table
        self.dim = int(dim)
        spec: Dict[str, Any] = {"name": table, "dim": self.dim}
        for key, value in (("optimizer", optimizer), ("init", init),
                           ("admission", admission), ("eviction", eviction),
                           ("num_buckets", num_buckets),
                           ("expected_rows", expected_rows)):
            if value:
                spec[key] = value
        self.table_spec = spec
        self._step: Optional["SparseStep"] = None
        self._local: Optional[Tuple[torch.Tensor, torch.Tensor]] = None

    def extra_repr(self) -> str:
        return f"table={self.table!r}, dim={self.dim}"

    def load_rows(self, ids, rows) -> None:
        """Rows for an unbound module (inference without a worker): int64
        `ids` and float32 `rows` ``[len(ids), dim]`` (e.g. read from an
        exported table); other ids read as zeros. The hook an export reader
        fills."""
        ids = torch.as_tensor(np.asarray(as_ids(ids, "ids")))
        rows = torch.as_tensor(np.asarray(rows, dtype=np.float32))
        if rows.shape != (len(ids), self.dim):
            raise InvalidArgumentError(
                f"rows: shape {list(rows.shape)}, expected "
                f"[{len(ids)}, {self.dim}]")
        order = torch.argsort(ids)
        self._local = (ids[order].contiguous(), rows[order].contiguous())

    def _rows(self, distinct: torch.Tensor) -> torch.Tensor:
        """The rows (differentiable) of the sorted distinct ids."""
        step = self._step
        if step is not None:
            return step.lookup(self.table, distinct)
        if self._local is None:
            raise RuntimeError(
                f"{type(self).__name__}({self.table!r}) is not bound to a "
                "paramserver.torch.Worker (iterate over worker.epochs() "
                "first) and holds no rows (load_rows)")
        ids, rows = self._local
        if not len(ids):
            return torch.zeros(len(distinct), self.dim)
        pos = torch.searchsorted(ids, distinct).clamp_(max=len(ids) - 1)
        found = ids[pos] == distinct
        return torch.where(found.unsqueeze(1), rows[pos],
                           torch.zeros((), dtype=rows.dtype))

    def _distinct(self, ids: torch.Tensor) -> Tuple[torch.Tensor,
                                                    torch.Tensor]:
        """The sorted distinct ids and each id's position among them (in
        `ids`' shape): the bound worker's, when it took them apart already
        for the pull of the batch's rows (Worker.epochs' sparse_ids)."""
        if not isinstance(ids, torch.Tensor):
            ids = torch.as_tensor(ids)
        if ids.dtype != torch.int64:
            raise InvalidArgumentError(
                f"ids: {type(self).__name__}({self.table!r}) takes int64 "
                f"(torch.long) ids, not {ids.dtype}")
        step = self._step
        known = step.distinct_of(ids) if step is not None else None
        if known is not None:
            distinct, inverse = known
        else:
            distinct, inverse = torch.unique(ids.detach().cpu(), sorted=True,
                                             return_inverse=True)
        return distinct, inverse.to(ids.device)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        distinct, inverse = self._distinct(ids)
        rows = self._rows(distinct).to(inverse.device)
        return gather_rows(rows, inverse.reshape(-1)).view(
            *inverse.shape, self.dim)


class ShardedEmbeddingBag(ShardedEmbedding):
    """``nn.EmbeddingBag`` over a sparse table of the job: ``forward(ids,
    offsets=None)`` pools (``mode`` "sum" or "mean") each bag's rows:
    `ids` 2-D ``[bags, n]`` (bags of n ids each), or 1-D with `offsets`
    (where each bag starts), as ``nn.EmbeddingBag``. Returns ``[bags,
    dim]``. Other arguments as :class:`ShardedEmbedding`."""

    def __init__(self, table: str, dim: int, mode: str = "sum", **options):
        super().__init__(table, dim, **options)
        if mode not in ("sum", "mean"):
            raise InvalidArgumentError(
                f"mode: \"sum\" or \"mean\", not {mode!r}")
        self.mode = mode

    def extra_repr(self) -> str:
        return f"table={self.table!r}, dim={self.dim}, mode={self.mode!r}"

    def forward(self, ids: torch.Tensor,
                offsets: Optional[torch.Tensor] = None) -> torch.Tensor:
        distinct, inverse = self._distinct(ids)
        if inverse.dim() == 1 and offsets is None:
            raise InvalidArgumentError(
                "offsets: 1-D ids need offsets (where each bag starts)")
        rows = self._rows(distinct).to(inverse.device)
        return F.embedding_bag(inverse, rows, offsets, mode=self.mode)


class _GatherRows(torch.autograd.Function):
    """``rows.index_select(0, positions)`` whose backward sums the
    gradients of each row with ``index_put_(accumulate=True)``: the same
    sums, in the same order, as index_select's own backward (index_add_),
    which PyTorch's CPU kernel computes a row at a time (6 times slower on
    a DLRM batch's 26,624 positions)."""

    @staticmethod
    def forward(ctx, rows: torch.Tensor, positions: torch.Tensor):
        ctx.save_for_backward(positions)
        ctx.num_rows = rows.shape[0]
        return rows.index_select(0, positions)

    @staticmethod
    def backward(ctx, grad: torch.Tensor):
        positions, = ctx.saved_tensors
        out = grad.new_zeros((ctx.num_rows,) + tuple(grad.shape[1:]))
        return out.index_put_((positions,), grad, accumulate=True), None


def gather_rows(rows: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
    """Row `positions[i]` of `rows` for each i (1-D int64 positions), with
    the gradient of each row summed over its uses."""
    if not rows.requires_grad or not torch.is_grad_enabled():
        return rows.index_select(0, positions)
    return _GatherRows.apply(rows, positions)


def sharded_modules(module: nn.Module) -> List[Tuple[str, ShardedEmbedding]]:
    """The sharded embedding modules of `module` (itself included), in
    ``named_modules()`` order."""
    return [(name, m) for name, m in module.named_modules()
            if isinstance(m, ShardedEmbedding)]


def sparse_tables_of(module: nn.Module) -> List[Tuple[str, int]]:
    """The (name, dim) of each table the module's sharded embeddings read,
    once each, in first-use order. ModelMismatchError if two modules give
    one table different dims."""
    dims: Dict[str, int] = {}
    for name, m in sharded_modules(module):
        if dims.setdefault(m.table, m.dim) != m.dim:
            raise ModelMismatchError(
                f"model: table {m.table!r} has dim {dims[m.table]} in one "
                f"module and {m.dim} in {name}")
    return list(dims.items())


def sparse_table_specs(module: nn.Module) -> List[Dict[str, Any]]:
    """``model.sparse_tables`` for `module`: one SparseTableSpec (JSON
    mapping) per table, from its modules' options (modules sharing a table
    must not give it different options: InvalidArgumentError)."""
    specs: Dict[str, Dict[str, Any]] = {}
    for name, m in sharded_modules(module):
        spec = specs.setdefault(m.table, {"name": m.table, "dim": m.dim})
        if spec["dim"] != m.dim:
            raise ModelMismatchError(
                f"model: table {m.table!r} has dim {spec['dim']} in one "
                f"module and {m.dim} in {name}")
        for key in _TABLE_FIELDS:
            if key in m.table_spec:
                if key in spec and spec[key] != m.table_spec[key]:
                    raise InvalidArgumentError(
                        f"{key}: the modules of table {m.table!r} disagree "
                        f"({spec[key]!r} and {m.table_spec[key]!r} in "
                        f"{name})")
                spec[key] = m.table_spec[key]
    return list(specs.values())


class _Chunk:
    """Rows of one table for the current clock: sorted distinct int64 ids
    and their values, a leaf tensor whose .grad collects the step's row
    gradients."""

    def __init__(self, ids: np.ndarray, rows: np.ndarray, grad: bool):
        self.ids = torch.from_numpy(ids)
        self.rows = torch.from_numpy(rows).requires_grad_(grad)


class SparseStep:
    """One job's sparse rows on a worker: which rows each step read, their
    gradients, and the pulls that bring them. Created by the Worker when the
    job has sparse tables; binds the module's sharded embeddings to it.

    `settle()` waits for the step's calls in flight (the communication
    thread's push and pull, which may install rows); `fetch(clock, pull)`
    runs a pull of rows at `clock` (the Worker's ParameterClient). Lookups
    and take_gradients run on the training thread; install may run on the
    communication thread while the training thread waits for it."""

    def __init__(self, router: SparseRouter, module: nn.Module,
                 clock: Callable[[], int], settle: Callable[[], None],
                 fetch: Callable[[int, SparsePull], None]):
        self.router = router
        self._clock = clock
        self._settle = settle
        self._fetch = fetch
        self._lock = threading.Lock()
        self._chunks: Dict[str, List[_Chunk]] = {}
        self._chunk_clock = -1
        self.modules = sharded_modules(module)
        diffs = []
        for name, m in self.modules:
            route = router.tables.get(m.table)
            if route is None:
                diffs.append(f"{name} reads table {m.table!r}, which is not "
                             "in the job")
            elif route.dim != m.dim:
                diffs.append(f"table {m.table!r} has dim {route.dim} in the "
                             f"job, {m.dim} in {name}")
        if diffs:
            raise ModelMismatchError(
                "model: the module's sharded embeddings do not match the "
                "job's sparse tables: " + "; ".join(diffs[:20]))
        self.rows_pulled = 0
        self.lazy_pulls = 0
        # wanted()'s last ids taken apart: (tensor, its version, distinct,
        # inverse).
        self._uniques: List[Tuple[torch.Tensor, int, np.ndarray,
                                  np.ndarray]] = []

    def bind(self) -> None:
        for _, m in self.modules:
            m._step = self

    def unbind(self) -> None:
        for _, m in self.modules:
            if m._step is self:
                m._step = None

    # Pulls.

    def wanted(self, ids: Optional[Mapping[str, Any]]
               ) -> Optional[Dict[str, np.ndarray]]:
        """The sorted distinct `ids` per table name (int64 ids of any
        shape), or None for none. The ids of a torch tensor are taken apart
        once (np.unique): a forward pass given the same tensor reads its
        distinct ids and positions from here (distinct_of)."""
        if not ids:
            return None
        wanted = {}
        for table, values in ids.items():
            self.router.table(table)
            wanted[table] = self._unique(values, f"sparse_ids[{table!r}]")[0]
        return wanted

    def _unique(self, values: Any, what: str
                ) -> Tuple[np.ndarray, np.ndarray]:
        """(sorted distinct ids, each id's position among them) of `values`,
        remembered for a torch tensor (the last few: this batch's and the
        next one's)."""
        known = self._known(values)
        if known is not None:
            return known
        distinct, inverse = np.unique(as_ids(values, what),
                                      return_inverse=True)
        if isinstance(values, torch.Tensor):
            with self._lock:
                self._uniques.append((values, values._version, distinct,
                                      inverse))
                del self._uniques[:-_KEPT_UNIQUES]
        return distinct, inverse

    def _known(self, ids: Any) -> Optional[Tuple[np.ndarray, np.ndarray]]:
        if not isinstance(ids, torch.Tensor):
            return None
        with self._lock:
            for tensor, version, distinct, inverse in self._uniques:
                # The same memory, unchanged since (a view shares its
                # base's version counter; the reference kept holds the
                # memory, so no other tensor can have reused it).
                if (tensor.data_ptr() == ids.data_ptr() and
                        tensor.numel() == ids.numel() and
                        ids.is_contiguous() and tensor.is_contiguous() and
                        tensor.device == ids.device and
                        ids._version == version):
                    return distinct, inverse
        return None

    def distinct_of(self, ids: torch.Tensor
                    ) -> Optional[Tuple[torch.Tensor, torch.Tensor]]:
        """wanted()'s sorted distinct ids of the int64 tensor `ids` and the
        position of each id among them (in `ids`' shape), as tensors; None
        when it did not take these ids apart (torch.unique's results, had
        they been computed by it)."""
        known = self._known(ids)
        if known is None:
            return None
        distinct, inverse = known
        return (torch.from_numpy(distinct),
                torch.from_numpy(inverse).view(ids.shape))

    def pull_of(self, ids: Optional[Mapping[str, Any]]
                ) -> Optional[SparsePull]:
        """A pull of the distinct `ids` (per table name: int64 ids of any
        shape), or None for none."""
        wanted = self.wanted(ids)
        return None if wanted is None else SparsePull(self.router, wanted)

    def install(self, clock: int, pull) -> None:
        """Makes `pull`'s rows the rows of `clock` (replacing those of an
        earlier clock, adding to those of the same). `pull`: a SparsePull
        or the compiled transport's RowsPull (``ids`` and ``rows`` per
        table), or None."""
        with self._lock:
            if clock != self._chunk_clock:
                self._chunks = {}
                self._chunk_clock = clock
            if pull is None:
                return
            for table, ids in pull.ids.items():
                if len(ids):
                    self._chunks.setdefault(table, []).append(
                        _Chunk(ids, pull.rows[table], True))
                    self.rows_pulled += len(ids)

    def ensure(self, clock: int, ids: Optional[Mapping[str, Any]]) -> None:
        """Pulls the rows of `ids` for `clock` unless that clock's rows are
        in already (a batch whose rows no earlier pull brought: an
        epoch's first)."""
        with self._lock:
            ready = clock == self._chunk_clock and bool(self._chunks)
        if ids and not ready:
            pull = self.pull_of(ids)
            if pull is not None:
                self._fetch(clock, pull)
            self.install(clock, pull)

    def lookup(self, table: str, distinct: torch.Tensor) -> torch.Tensor:
        """The rows of `table` for the sorted distinct ids, as a tensor
        that carries gradients to the step's rows (under no_grad: plain
        values, kept out of the step)."""
        self.router.table(table)
        self._settle()  # A pull in flight may bring this clock's rows.
        clock = self._clock()
        with self._lock:
            if clock != self._chunk_clock:
                self._chunks = {}
                self._chunk_clock = clock
            chunks = list(self._chunks.get(table, ()))
        if (len(chunks) == 1 and len(chunks[0].ids) == len(distinct) and
                torch.equal(chunks[0].ids, distinct)):
            return chunks[0].rows  # The prefetched ids: the usual case.
        found = torch.zeros(len(distinct), dtype=torch.bool)
        where = []
        for c in chunks:
            pos = torch.searchsorted(c.ids, distinct).clamp_(
                max=len(c.ids) - 1)
            hit = (c.ids[pos] == distinct) & ~found
            found |= hit
            where.append((c, pos, hit))
        if not bool(found.all()):
            missing = distinct[~found].numpy()
            pull = SparsePull(self.router, {table: missing})
            self._fetch(clock, pull)
            self.lazy_pulls += 1
            grad = torch.is_grad_enabled()
            extra = _Chunk(missing, pull.rows[table], grad)
            if grad:
                with self._lock:
                    self._chunks.setdefault(table, []).append(extra)
                    self.rows_pulled += len(missing)
            pos = torch.searchsorted(extra.ids, distinct).clamp_(
                max=len(extra.ids) - 1)
            where.append((extra, pos, ~found))
        # index_select: its backward is an index_add, much faster than
        # advanced indexing's.
        if len(where) == 1:
            c, pos, _ = where[0]
            return c.rows.index_select(0, pos)
        out = torch.zeros(len(distinct), self._dim(table))
        for c, pos, hit in where:
            out = torch.where(hit.unsqueeze(1), c.rows.index_select(0, pos),
                              out)
        return out

    def _dim(self, table: str) -> int:
        return self.router.table(table).dim

    # Pushes.

    def take_gradients(self, check_finite: bool, clock: int, encoding: int
                       ) -> Optional[List[List["v1.SparseRows"]]]:
        """The step's row gradients (rows some forward used and backward
        reached), per server, in the wire `encoding` (v1.FP32, FP16, BF16).
        The step's rows are then dropped. NonFiniteGradientError, changing
        nothing, if `check_finite` and a gradient holds NaN or Inf."""
        gradients = self.take_row_gradients(check_finite, clock)
        return push_rows(self.router, gradients, encoding) if gradients \
            else None

    def take_row_gradients(self, check_finite: bool, clock: int
                           ) -> Dict[str, Tuple[np.ndarray, np.ndarray]]:
        """take_gradients' rows as they are: per table name, (sorted
        distinct int64 ids, float32 gradients ``[len(ids), dim]``), for
        the compiled transport, which routes and encodes them in C++."""
        with self._lock:
            chunks = self._chunks if self._chunk_clock == clock else {}
        gradients: Dict[str, Tuple[np.ndarray, np.ndarray]] = {}
        for table, parts in chunks.items():
            ids, grads = [], []
            for c in parts:
                if c.rows.grad is not None:
                    ids.append(c.ids.numpy())
                    grads.append(c.rows.grad.detach().to(
                        "cpu", torch.float32).numpy())
            if not ids:
                continue
            if len(ids) > 1:
                # Chunks hold disjoint ids; summed per id all the same.
                every = np.concatenate(ids)
                distinct, inverse = np.unique(every, return_inverse=True)
                summed = np.zeros((len(distinct), grads[0].shape[1]),
                                  np.float32)
                np.add.at(summed, inverse, np.concatenate(grads))
                ids, grads = [distinct], [summed]
            g = grads[0]
            if check_finite and not np.isfinite(g).all():
                raise NonFiniteGradientError(
                    f"gradients: rows of sparse table {table} hold NaN or "
                    f"Inf at clock {clock}; nothing was pushed (the job's "
                    "non_finite_gradients policy is NON_FINITE_REFUSE)",
                    table)
            gradients[table] = (ids[0], g)
        with self._lock:
            if self._chunk_clock == clock:
                self._chunks = {}
        return gradients


def with_next_ids(fn: Optional[Callable[[Any], Mapping[str, Any]]],
             batches: Iterable[Any]):
    """Yields (batch, its ids, the next batch's ids or None): `fn` applied
    to each batch, one batch ahead (``Worker.epochs(sparse_ids=fn)``);
    ids None without `fn`."""
    it = iter(batches)
    try:
        current = next(it)
    except StopIteration:
        return
    current_ids = fn(current) if fn else None
    for following in it:
        following_ids = fn(following) if fn else None
        yield current, current_ids, following_ids
        current, current_ids = following, following_ids
    yield current, current_ids, None
