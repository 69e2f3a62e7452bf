"""Model files (docs/model-format.md) from Python: the dense tensors as NumPy
arrays and the sparse tables' rows as ``(ids, rows)`` arrays, and a helper
that puts them into a PyTorch module for inference.

Reads both versions: ``PSMODEL1`` (dense tensors only) and ``PSMODEL2``
(dense tensors, then the tables' row chunks). Needs NumPy only; PyTorch only
for :func:`load_into_module`.

    import paramserver.model_file as mf
    model = mf.read_model("model.bin")
    model.tensors["dense0.weight"]        # numpy float32, the stored shape
    ids, rows = model.tables["C1"]        # uint64 [n], float32 [n, dim]
"""

import json
import struct
from dataclasses import dataclass, field
from typing import Any, BinaryIO, Dict, Iterator, Mapping, Optional, Tuple

import numpy as np

__all__ = ["ModelFile", "ModelFileError", "read_model", "read_header",
           "iter_table_chunks", "TableIndex", "load_into_module"]

MAGIC_DENSE = b"PSMODEL1"
MAGIC_TABLES = b"PSMODEL2"
TABLE_SECTION_END = 0xFFFFFFFF
MAX_ROWS_PER_CHUNK = 65536
MAX_CHUNK_BYTES = 16 << 20


class ModelFileError(ValueError):
    """A file that is not a well-formed model file (the C++ DATA_LOSS)."""


@dataclass
class ModelFile:
    """A model file read whole.

    header: the ``ps.v1.TrainedModel`` JSON header (job_id, model, clock,
        test metrics, tensors' names and shapes).
    tensors: name -> float32 array of the tensor's shape, in header order.
    tables: table name -> (ids uint64 [n], rows float32 [n, dim]), in the
        order of ``header["model"]["sparse_tables"]``; empty for a PSMODEL1
        file (``psctl export --dense_only``, or a model without tables).
    """
    header: Dict[str, Any]
    tensors: Dict[str, np.ndarray] = field(default_factory=dict)
    tables: Dict[str, Tuple[np.ndarray, np.ndarray]] = field(
        default_factory=dict)

    def table_specs(self):
        """The header's ``model.sparse_tables`` (name, dim, ...), in order."""
        return self.header.get("model", {}).get("sparse_tables", [])


def _read_exactly(f: BinaryIO, n: int, what: str) -> bytes:
    data = f.read(n)
    if len(data) != n:
        raise ModelFileError(f"truncated in {what}")
    return data


def _read_head(f: BinaryIO):
    magic = f.read(8)
    if magic not in (MAGIC_DENSE, MAGIC_TABLES):
        raise ModelFileError("does not start with PSMODEL1 or PSMODEL2")
    (length,) = struct.unpack("<I", _read_exactly(f, 4, "the header length"))
    header = json.loads(_read_exactly(f, length, "the header"))
    tensors = {}
    for t in header.get("tensors", []):
        shape = [int(d) for d in t.get("shape", [])]
        n = int(np.prod(shape, dtype=np.int64)) if shape else 1
        data = _read_exactly(f, 4 * n, f"tensor {t['name']}")
        tensors[t["name"]] = np.frombuffer(data, "<f4").reshape(shape)
    return magic == MAGIC_TABLES, header, tensors


def read_header(path: str) -> Tuple[Dict[str, Any], Dict[str, np.ndarray]]:
    """The header and the dense tensors, without reading any row."""
    with open(path, "rb") as f:
        _, header, tensors = _read_head(f)
    return header, tensors


def iter_table_chunks(path: str) -> Iterator[Tuple[str, np.ndarray,
                                                   np.ndarray]]:
    """Yields ``(table name, ids, rows)`` a chunk at a time (at most 65,536
    rows), in file order, checking each chunk and the end marker: memory
    holds one chunk, whatever the tables' size. Nothing for PSMODEL1."""
    with open(path, "rb") as f:
        has_tables, header, _ = _read_head(f)
        if not has_tables:
            return
        specs = header.get("model", {}).get("sparse_tables", [])
        total = 0
        while True:
            table, n = struct.unpack("<II", _read_exactly(f, 8, "a chunk"))
            if table == TABLE_SECTION_END:
                (rows,) = struct.unpack("<Q", _read_exactly(f, 8, "the end"))
                if n != 0 or rows != total:
                    raise ModelFileError(
                        f"the end marker counts {rows} rows, the chunks "
                        f"hold {total}")
                if f.read(1):
                    raise ModelFileError("bytes after the end marker")
                return
            if table >= len(specs):
                raise ModelFileError(f"a chunk names table {table} of "
                                     f"{len(specs)}")
            dim = int(specs[table]["dim"])
            if n == 0 or n > min(MAX_ROWS_PER_CHUNK,
                                 MAX_CHUNK_BYTES // (8 + 4 * dim)):
                raise ModelFileError(f"a chunk holds {n} rows")
            ids = np.frombuffer(_read_exactly(f, 8 * n, "ids"), "<u8")
            rows = np.frombuffer(_read_exactly(f, 4 * n * dim, "rows"),
                                 "<f4").reshape(n, dim)
            total += n
            yield specs[table]["name"], ids, rows


def read_model(path: str) -> ModelFile:
    """Reads a model file whole: its tensors and every row of its tables
    (tables sized like the job's memory: use iter_table_chunks to stream).
    Raises ModelFileError for a damaged file, OSError for I/O errors."""
    with open(path, "rb") as f:
        has_tables, header, tensors = _read_head(f)
    model = ModelFile(header=header, tensors=tensors)
    if not has_tables:
        return model  # PSMODEL1: no rows, whatever the model's tables.
    parts: Dict[str, list] = {t["name"]: [] for t in model.table_specs()}
    for name, ids, rows in iter_table_chunks(path):
        parts[name].append((ids, rows))
    for spec in model.table_specs():
        chunks = parts[spec["name"]]
        dim = int(spec["dim"])
        ids = (np.concatenate([c[0] for c in chunks]) if chunks
               else np.zeros(0, np.uint64))
        rows = (np.concatenate([c[1] for c in chunks]) if chunks
                else np.zeros((0, dim), np.float32))
        model.tables[spec["name"]] = (ids, rows)
    return model


class TableIndex:
    """Maps a table's uint64 ids to the rows of the embedding that
    :func:`load_into_module` filled: row ``i`` for the i-th id in ascending
    order, and the last row (zeros) for an id the file does not hold. (The
    cluster reads such an id as the table's initializer gives it, or zeros
    before admission: a model evaluated here agrees with the cluster on ids
    the export holds.)"""

    def __init__(self, sorted_ids: np.ndarray):
        self.ids = sorted_ids
        self.missing = len(sorted_ids)

    def __call__(self, ids) -> "Any":
        """Row indices (a torch.LongTensor, or numpy int64 for numpy input)
        of ``ids`` (any shape)."""
        as_numpy = isinstance(ids, np.ndarray)
        raw = ids if as_numpy else ids.cpu().numpy()
        raw = raw.astype(np.uint64, copy=False)
        if self.missing == 0:
            out = np.zeros(raw.shape, np.int64)  # The zero row only.
        else:
            at = np.minimum(np.searchsorted(self.ids, raw), self.missing - 1)
            out = np.where(self.ids[at] == raw, at,
                           self.missing).astype(np.int64)
        if as_numpy:
            return out
        import torch
        return torch.from_numpy(out).to(ids.device)


def load_into_module(module, model: ModelFile,
                     tensors: Optional[Mapping[str, str]] = None,
                     transpose: Tuple[str, ...] = (),
                     tables: Optional[Mapping[str, str]] = None,
                     strict: bool = True) -> Dict[str, TableIndex]:
    """Copies a model file's values into ``module`` for inference.

    tensors: file tensor name -> the module's state_dict key (default: the
        same name, as the Python SDK's EXTERNAL models are exported).
    transpose: file tensor names to transpose first (a built-in model's
        ``dense<i>.weight`` is [in, out]; ``nn.Linear.weight`` [out, in]).
    tables: table name -> the dotted name of an ``nn.Embedding`` or
        ``nn.EmbeddingBag`` submodule (default: a submodule named as the
        table). Its weight is replaced by the table's rows, ids ascending,
        plus one row of zeros for ids the file lacks.
    strict: every tensor and table must find its place (KeyError), and
        shapes must match (ValueError).

    Returns, per table loaded, the TableIndex that turns ids into the
    embedding's row indices."""
    import torch

    state = module.state_dict()
    tensors = dict(tensors or {})
    with torch.no_grad():
        for name, value in model.tensors.items():
            key = tensors.get(name, name)
            if key not in state:
                if strict:
                    raise KeyError(f"tensor {name}: the module has no {key}")
                continue
            array = value.T if name in transpose else value
            target = state[key]
            if tuple(target.shape) != tuple(array.shape):
                raise ValueError(f"tensor {name}: shape {array.shape}, "
                                 f"{key} has {tuple(target.shape)}")
            target.copy_(torch.from_numpy(np.array(array, np.float32)))
    indexes = {}
    tables = dict(tables or {})
    submodules = dict(module.named_modules())
    for name, (ids, rows) in model.tables.items():
        path = tables.get(name, name)
        embedding = submodules.get(path)
        if embedding is None:
            if strict:
                raise KeyError(f"table {name}: the module has no {path}")
            continue
        order = np.argsort(ids, kind="stable")
        dim = rows.shape[1]
        if embedding.weight.shape[1] != dim:
            raise ValueError(f"table {name}: dim {dim}, {path} has "
                             f"{embedding.weight.shape[1]}")
        weight = np.zeros((len(ids) + 1, dim), np.float32)
        weight[:len(ids)] = rows[order]
        embedding.weight = torch.nn.Parameter(torch.from_numpy(weight),
                                              requires_grad=False)
        embedding.num_embeddings = len(ids) + 1
        indexes[name] = TableIndex(ids[order])
    return indexes
