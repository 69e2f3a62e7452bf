"""Data helpers: IDX files (MNIST's layout, as the cluster's built-in jobs
read them) and how a worker's part of a data set is chosen and shuffled.

Worker ``w`` of ``N`` trains on samples ``[w*n//N, (w+1)*n//N)`` (the
remainder ``n % N`` is dropped, so that every worker runs the same number of
steps, which BSP needs), in an order shuffled for each epoch from the job's
seed, the epoch and ``w`` (:func:`epoch_order`). Every worker of a job must
therefore see the same data set (the same length and order of samples).
"""

from __future__ import annotations

import gzip
import struct
from typing import Tuple

import numpy as np

__all__ = ["read_idx", "load_idx", "part_size", "epoch_order"]


def read_idx(path: str) -> np.ndarray:
    """An IDX file (optionally gzip-compressed) as a numpy array of its
    shape: uint8 images ``[n, rows, cols]``, labels ``[n]``."""
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rb") as f:
        data = f.read()
    if len(data) < 4 or data[0] != 0 or data[1] != 0:
        raise ValueError(f"{path}: not an IDX file")
    dtypes = {0x08: np.uint8, 0x09: np.int8, 0x0B: ">i2", 0x0C: ">i4",
              0x0D: ">f4", 0x0E: ">f8"}
    if data[2] not in dtypes:
        raise ValueError(f"{path}: unknown IDX element type {data[2]:#x}")
    rank = data[3]
    dims = struct.unpack(f">{rank}I", data[4:4 + 4 * rank])
    values = np.frombuffer(data, dtype=dtypes[data[2]], offset=4 + 4 * rank)
    count = int(np.prod(dims)) if dims else 1
    if values.size < count:
        raise ValueError(f"{path}: holds {values.size} values, its header "
                         f"says {count}")
    return values[:count].reshape(dims)


def load_idx(images: str, labels: str,
             max_samples: int = 0) -> Tuple[np.ndarray, np.ndarray]:
    """Images and labels as the cluster's workers read them: float32
    features ``[n, rows*cols]`` scaled to [0, 1] (byte / 255), and int64
    labels ``[n]``; the first `max_samples` only when > 0."""
    x = read_idx(images)
    y = read_idx(labels)
    if x.shape[0] != y.shape[0]:
        raise ValueError(f"{images} has {x.shape[0]} samples but {labels} "
                         f"{y.shape[0]}")
    if max_samples > 0:
        x, y = x[:max_samples], y[:max_samples]
    features = x.reshape(x.shape[0], -1).astype(np.float32) * np.float32(
        1.0 / 255.0)
    return features, y.astype(np.int64)


def part_size(num_samples: int, num_workers: int) -> int:
    """Samples each of `num_workers` workers trains on."""
    return num_samples // num_workers


def epoch_order(num_samples: int, num_workers: int, worker: int, seed: int,
                epoch: int) -> np.ndarray:
    """The indices (into the whole data set) worker `worker` trains on in
    `epoch`, in order: its part, shuffled by a generator seeded with (job
    seed, epoch, worker). A pure function: a replacement worker repeats its
    predecessor's order, and a test can rebuild any worker's batches."""
    per = part_size(num_samples, num_workers)
    rng = np.random.Generator(np.random.PCG64(np.random.SeedSequence(
        [seed & 0xFFFFFFFF, seed >> 32, epoch, worker])))
    return worker * per + rng.permutation(per)
