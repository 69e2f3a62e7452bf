"""How a job's model is laid out: its tensors, their blocks, and the digest
that matches a worker's module to a job.

These mirror the cluster's C++ (common/model_layout.h, common/job_spec.h):
the same tensors in the same order, cut into the same blocks with the same
keys, so a Python worker and ``ps-worker`` read and write the same blocks.
tests/python/test_layout_conformance.py computes every function here both
ways (this module, and the C++ through tests/python/layout_oracle.cc) over
a table of models, block sizes and server counts, in CI.
"""

from __future__ import annotations

import dataclasses
from typing import Dict, Iterable, List, Sequence, Tuple

from paramserver import v1

__all__ = ["TensorLayout", "BlockRef", "model_tensors", "model_digest",
           "split_into_blocks", "effective_block_elems", "block_key",
           "effective_staleness", "server_blocks"]

# common/job_spec.h
_DEFAULT_BLOCK_ELEMS = 262144
_BLOCKS_PER_SERVER = 16
_BLOCK_ALIGN_ELEMS = 256
_MAX_NODES_PER_JOB = 1024


@dataclasses.dataclass(frozen=True)
class TensorLayout:
    """One named dense float32 tensor of a job's model. `from_worker`:
    worker 0 seeds its values (an EXTERNAL tensor whose init is FROM_WORKER
    or unset; ``InitKind::kFromWorker``). `buffer`: a module buffer
    (``TensorDecl.buffer``), not a parameter: a push carries the change the
    worker made to it, and the model digest leaves it out."""
    name: str
    shape: Tuple[int, ...]
    from_worker: bool = False
    buffer: bool = False

    @property
    def numel(self) -> int:
        n = 1
        for d in self.shape:
            n *= d
        return n


@dataclasses.dataclass(frozen=True)
class BlockRef:
    """One block of a tensor: values [offset, offset + numel) of tensor
    `tensor` (its index in the model), under `key`."""
    key: int
    tensor: int
    offset: int
    numel: int


def block_key(tensor_index: int, block_index: int) -> int:
    """(tensor_index << 32) | block_index."""
    return (tensor_index << 32) | block_index


def _cnn_pooled(model: "v1.ModelSpec") -> int:
    height, width = model.image.height, model.image.width
    channels = model.image.channels
    for conv in model.conv_layers:
        height //= 2
        width //= 2
        channels = conv.filters
    return height * width * channels


def _ctr_tensors(model: "v1.ModelSpec") -> List[TensorLayout]:
    """A CTR model's dense tensors, as ``CtrModelTensors``
    (common/ctr_layout.h; docs/sparse.md, "The CTR model")."""
    ctr = model.ctr
    tables = list(ctr.field_tables) or [
        0 if len(model.sparse_tables) == 1 else f
        for f in range(ctr.num_fields)]
    dim = model.sparse_tables[tables[0]].dim
    bottom = [model.input_dim] + list(ctr.bottom_mlp) if ctr.bottom_mlp else []
    lead = dim if bottom else 0
    if ctr.interaction == v1.CtrModelSpec.CONCAT:
        width = lead + ctr.num_fields * dim
    else:  # DOT (or unspecified): pairwise dots of the V vectors.
        v = ctr.num_fields + (1 if bottom else 0)
        width = lead + v * (v - 1) // 2
    top = [width] + list(ctr.top_mlp) + [1]
    tensors: List[TensorLayout] = []
    for prefix, widths in (("bottom", bottom), ("top", top)):
        for i in range(len(widths) - 1):
            tensors.append(TensorLayout(f"{prefix}{i}.weight",
                                        (widths[i], widths[i + 1])))
            tensors.append(TensorLayout(f"{prefix}{i}.bias", (widths[i + 1],)))
    return tensors


def model_tensors(model: "v1.ModelSpec") -> List[TensorLayout]:
    """The tensors of a (validated) model spec, in the cluster's order.

    EXTERNAL: the declared tensors. MLP, SOFTMAX_REGRESSION and CNN: as
    ``ModelTensors`` (common/model_layout.h): a CNN's ``conv<i>.weight``
    ``[kernel*kernel*in_channels, filters]`` and ``conv<i>.bias``, then each
    fully connected layer's ``dense<i>.weight`` ``[in, out]`` and
    ``dense<i>.bias`` ``[out]``. CTR: the MLPs' ``bottom<i>`` and
    ``top<i>`` weights and biases (the sparse tables are not tensors).
    """
    kind = model.kind
    if kind == v1.ModelSpec.EXTERNAL:
        return [TensorLayout(t.name, tuple(int(d) for d in t.shape),
                             t.init in (v1.FROM_WORKER,
                                        v1.TENSOR_INIT_UNSPECIFIED),
                             t.buffer)
                for t in model.tensors]
    if kind == v1.ModelSpec.CTR:
        return _ctr_tensors(model)
    if kind not in (v1.ModelSpec.MLP, v1.ModelSpec.SOFTMAX_REGRESSION,
                    v1.ModelSpec.CNN):
        raise ValueError(f"model.kind: unknown kind {kind}")
    tensors: List[TensorLayout] = []
    in_channels = model.image.channels
    for i, conv in enumerate(model.conv_layers if kind == v1.ModelSpec.CNN
                             else ()):
        k = conv.kernel_size
        tensors.append(TensorLayout(f"conv{i}.weight",
                                    (k * k * in_channels, conv.filters)))
        tensors.append(TensorLayout(f"conv{i}.bias", (conv.filters,)))
        in_channels = conv.filters
    widths = [_cnn_pooled(model) if kind == v1.ModelSpec.CNN
              else model.input_dim]
    if kind != v1.ModelSpec.SOFTMAX_REGRESSION:
        widths.extend(model.hidden_layers)
    widths.append(model.num_classes)
    for i in range(len(widths) - 1):
        tensors.append(TensorLayout(f"dense{i}.weight",
                                    (widths[i], widths[i + 1])))
        tensors.append(TensorLayout(f"dense{i}.bias", (widths[i + 1],)))
    return tensors


def model_digest(tensors: Iterable[Tuple[str, Sequence[int]]],
                 tables: Iterable[Tuple[str, int]] = ()) -> str:
    """The digest of tensor names and shapes (RegisterRequest.model_digest):
    "fnv1a64:" and 16 hex digits of the 64-bit FNV-1a hash of, for each
    tensor in name order, ``name``, a tab, the dimensions joined by ",", and
    a newline (``ModelDigest`` in common/model_layout.h). A job's digest
    is that of its tensors that are not buffers (TensorLayout.buffer). With
    sparse `tables` ((name, dim) pairs), the hash goes on over the line
    "sparse" and, for each table in name order, ``name``, a tab, ``dim`` and
    a newline; without, the digest is the tensors' alone."""
    h = 0xcbf29ce484222325

    def add(text: str) -> None:
        nonlocal h
        for byte in text.encode():
            h ^= byte
            h = (h * 0x100000001b3) & 0xFFFFFFFFFFFFFFFF

    items = sorted(((name, tuple(shape)) for name, shape in tensors),
                   key=lambda item: item[0].encode())
    for name, shape in items:
        add(name + "\t" + ",".join(str(int(d)) for d in shape) + "\n")
    sparse = sorted(((name, int(dim)) for name, dim in tables),
                    key=lambda item: item[0].encode())
    if sparse:
        add("sparse\n")
        for name, dim in sparse:
            add(f"{name}\t{dim}\n")
    return f"fnv1a64:{h:016x}"


def _derive_block_elems(tensors: Sequence[TensorLayout],
                        num_servers: int) -> int:
    servers = min(max(num_servers, 1), _MAX_NODES_PER_JOB)
    if servers == 1:
        return _DEFAULT_BLOCK_ELEMS
    saturated = servers * _BLOCKS_PER_SERVER * _DEFAULT_BLOCK_ELEMS
    elems = min(saturated, sum(t.numel for t in tensors))
    per_block = -(-elems // (servers * _BLOCKS_PER_SERVER))
    aligned = -(-per_block // _BLOCK_ALIGN_ELEMS) * _BLOCK_ALIGN_ELEMS
    return min(max(aligned, _BLOCK_ALIGN_ELEMS), _DEFAULT_BLOCK_ELEMS)


def effective_block_elems(spec: "v1.JobSpec", tensors: Sequence[TensorLayout],
                          num_servers: int) -> int:
    """spec.block_elems, or the size the coordinator derives when it is 0."""
    if spec.block_elems > 0:
        return spec.block_elems
    return _derive_block_elems(tensors, num_servers)


def split_into_blocks(tensors: Sequence[TensorLayout],
                      block_elems: int) -> List[BlockRef]:
    """Cuts every tensor into blocks of at most `block_elems` values, in key
    order (``SplitIntoBlocks``)."""
    blocks = []
    for t, tensor in enumerate(tensors):
        n = tensor.numel
        for b, offset in enumerate(range(0, n, block_elems)):
            blocks.append(BlockRef(block_key(t, b), t, offset,
                                   min(block_elems, n - offset)))
    return blocks


# common/job_spec.h kAsyncStaleness
_ASYNC_STALENESS = 1 << 40


def effective_staleness(consistency: "v1.ConsistencySpec") -> int:
    """The staleness bound a consistency spec means: 0 for BSP (and unset),
    the bound for SSP, 2**40 for ASP (``EffectiveStaleness``)."""
    if consistency.model == v1.ConsistencySpec.SSP:
        return consistency.staleness
    if consistency.model == v1.ConsistencySpec.ASP:
        return _ASYNC_STALENESS
    return 0


def server_blocks(blocks: Sequence[BlockRef], num_servers: int,
                  placement: Dict[int, int]) -> List[List[BlockRef]]:
    """Each server's blocks, in key order (the order of its pull replies),
    given the shard map's `placement` (key to server index), as
    ``ParameterClient::Create`` groups them. Raises ValueError naming the
    first block without a server, or on an unknown server."""
    out: List[List[BlockRef]] = [[] for _ in range(num_servers)]
    for b in blocks:
        s = placement.get(b.key)
        if s is None:
            raise ValueError(f"shard_map: block {b.key} has no server")
        if not 0 <= s < num_servers:
            raise ValueError(
                f"shard_map: block {b.key} on unknown server {s}")
        out[s].append(b)
    return out
