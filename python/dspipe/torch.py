"""dspipe.torch.IterableDataset: a dspipe.Loader for code that expects a torch DataLoader.

    ds = dspipe.torch.IterableDataset("train.lmdb", batch_size=8, num_threads=2)
    dl = torch.utils.data.DataLoader(ds, batch_size=None, num_workers=0)

The loader already batches and runs its own threads, so the DataLoader must not: batch_size=None
(no re-batching) and num_workers=0 (a loader in a forked worker raises). Each iteration is one
epoch; set_epoch(e) selects it (torch's DistributedSampler convention).
"""
from __future__ import annotations

import torch.utils.data

from .loader import Loader


class IterableDataset(torch.utils.data.IterableDataset):
    def __init__(self, path, **loader_kwargs):
        super().__init__()
        self.loader = Loader(path, **loader_kwargs)

    def set_epoch(self, epoch: int) -> None:
        self.loader.set_epoch(epoch)

    def __iter__(self):
        info = torch.utils.data.get_worker_info()
        if info is not None:
            raise RuntimeError("dspipe.torch.IterableDataset needs DataLoader(num_workers=0, "
                               "batch_size=None): the dspipe loader runs its own threads")
        return iter(self.loader)

    def __len__(self) -> int:
        return len(self.loader)

    def state_dict(self) -> dict:
        return self.loader.state_dict()

    def load_state_dict(self, state: dict) -> None:
        self.loader.load_state_dict(state)
