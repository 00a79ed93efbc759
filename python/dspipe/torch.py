# SPDX-License-Identifier: Apache-2.0
"""dspipe.torch.IterableDataset: a dspipe.Loader for code that expects a torch DataLoader.

    ds = dspipe.torch.IterableDataset("train.lmdb", batch_size=8, threads=2)
    dl = torch.utils.data.DataLoader(ds, batch_size=None, num_workers=0)

The loader already batches and runs its own threads, so the DataLoader must not: batch_size=None
(no re-batching) and num_workers=0 (a loader in a forked worker raises). A DataLoader that
batches again (its default batch_size=1 would stack batches into (1, 8, C, H, W)) raises a
TypeError saying so: the batches are dspipe.torch.Batch dicts, and torch's default collate
refuses them. Each iteration is one pass of the loader (iter() rule in docs/PYTHON.md);
set_epoch(e) selects the epoch (torch's DistributedSampler convention), state_dict() /
load_state_dict() resume (torchdata's StatefulDataLoader calls them).
"""
from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any, Iterator

import torch.utils.data
from torch.utils.data._utils import collate as _collate

from .loader import Loader

if TYPE_CHECKING:
    from typing_extensions import Unpack

    from ._kwargs import LoaderArgs


class Batch(dict):  # type: ignore[type-arg]
    """One dspipe batch ({"image", "mask", "label", "index"}) as the adapter yields it: already
    a batch, so a DataLoader must not collate it again."""


def _refuse_collate(batch: Any, *, collate_fn_map: Any = None) -> Any:
    raise TypeError(
        "dspipe.torch.IterableDataset yields whole batches (batch_size is the loader's), and "
        f"this DataLoader batches them again ({len(batch)} at a time, e.g. its default "
        "batch_size=1, which would give (1, B, C, H, W) tensors): pass "
        "DataLoader(ds, batch_size=None, num_workers=0)")


# torch's default collate (DataLoader with a batch_size) looks element types up here first.
_collate.default_collate_fn_map[Batch] = _refuse_collate


class IterableDataset(torch.utils.data.IterableDataset):  # type: ignore[type-arg]
    def __init__(self, path: str | os.PathLike[str], **loader_args: Unpack[LoaderArgs]):
        super().__init__()
        self.loader = Loader(path, **loader_args)

    def set_epoch(self, epoch: int) -> None:
        self.loader.set_epoch(epoch)

    def __iter__(self) -> Iterator[Batch]:
        info = torch.utils.data.get_worker_info()
        if info is not None:
            raise RuntimeError("dspipe.torch.IterableDataset needs DataLoader(num_workers=0, "
                               "batch_size=None): the dspipe loader runs its own threads")
        # map, not a generator: a CorruptRecord caught by the caller leaves it usable.
        return map(Batch, iter(self.loader))

    def __len__(self) -> int:
        return len(self.loader)

    def state_dict(self) -> dict[str, Any]:
        return self.loader.state_dict()

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.loader.load_state_dict(state)
