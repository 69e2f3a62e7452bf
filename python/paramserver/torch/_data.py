"""What ``Worker.epochs`` trains on, and its batches of given indices."""

from __future__ import annotations

from typing import Any, Iterator, List, Mapping, Optional, Sequence, Union

import numpy as np
import torch

from paramserver.errors import InvalidArgumentError

#: What Worker.epochs trains on: tensors (or arrays) of one length, a
#: torch Dataset (map-style: ``len`` and indexing), or None for the job
#: spec's IDX data set.
DataLike = Union[Sequence[Any], "torch.utils.data.Dataset", None]


class _Data:
    """A data set and how to cut batches of given indices from it."""

    def __init__(self, dataset: DataLike, loader_options: Mapping[str, Any]):
        self.arrays: Optional[List[torch.Tensor]] = None
        self.dataset = None
        self.loader_options = dict(loader_options)
        if isinstance(dataset, torch.utils.data.TensorDataset):
            dataset = list(dataset.tensors)
        if isinstance(dataset, (tuple, list)):
            if not dataset:
                raise InvalidArgumentError("dataset: empty")
            self.arrays = [torch.as_tensor(a) for a in dataset]
            n = len(self.arrays[0])
            if any(len(a) != n for a in self.arrays):
                raise InvalidArgumentError(
                    "dataset: the tensors differ in length: "
                    f"{[len(a) for a in self.arrays]}")
            self.size = n
        elif hasattr(dataset, "__len__") and hasattr(dataset, "__getitem__"):
            self.dataset = dataset
            self.size = len(dataset)
        else:
            raise TypeError(
                "dataset must be tensors of one length, a map-style "
                "torch.utils.data.Dataset, or None (the job's IDX data set), "
                f"not {type(dataset).__name__}")

    def batches(self, order: np.ndarray, first: int, steps: int,
                batch: int) -> Iterator[Any]:
        if self.arrays is not None:
            for step in range(first, steps):
                idx = torch.from_numpy(order[step * batch:(step + 1) * batch])
                yield tuple(a[idx] for a in self.arrays)
            return
        sampler = [order[s * batch:(s + 1) * batch].tolist()
                   for s in range(first, steps)]
        loader = torch.utils.data.DataLoader(
            self.dataset, batch_sampler=sampler, **self.loader_options)
        yield from loader

