"""dspipe.Loader: batches from a dspipe dataset as dicts of tensors (torch, numpy or DLPack).

The C++ DeviceLoader (include/dspipe/device_loader.h) does the work: a oneTBB pool decodes and
augments ahead of the consumer, then the batch is normalized on the GPU (CUDA path) or on the
workers (CPU path). This class resolves Python-side defaults (device, rank, output type) and
wraps each batch's memory without copying it.
"""
from __future__ import annotations

import hashlib
import json
import os
import sys
import time
from typing import Any, Iterator

from . import _dspipe, transforms

STATE_VERSION = 1


def _torch():
    try:
        import torch  # noqa: PLC0415 (optional)
    except ImportError:
        return None
    return torch


def _resolve_ranks(rank: int | None, world_size: int | None) -> tuple[int, int]:
    """torch.distributed when initialized, then RANK / WORLD_SIZE, then 0 and 1."""
    torch = _torch() if rank is None or world_size is None else None
    dist = getattr(torch, "distributed", None) if torch is not None else None
    if dist is not None and dist.is_available() and dist.is_initialized():
        rank = dist.get_rank() if rank is None else rank
        world_size = dist.get_world_size() if world_size is None else world_size
    if rank is None:
        rank = int(os.environ.get("RANK", "0"))
    if world_size is None:
        world_size = int(os.environ.get("WORLD_SIZE", "1"))
    return rank, world_size


_CPU = -2  # DeviceOptions::kCpu
_AUTO = -1  # DeviceOptions::kAuto (only used when CUDA is not usable: logs why, takes the CPU)


def _resolve_device(device: Any, output: str) -> int:
    """"auto": torch's current CUDA device when dspipe and torch can use CUDA, else the CPU (one
    log line saying why). "cpu", "cuda" (current device), "cuda:N", N or a torch.device."""
    torch = _torch()
    if device is None or device == "auto":
        usable, reason, _ = _dspipe.cuda_available()
        if not usable:
            return _AUTO  # the C++ side logs "no usable CUDA device (reason); using the CPU path"
        if output == "numpy":
            _dspipe.log("dspipe.Loader: output='numpy' is host memory; using the CPU path")
            return _CPU
        if torch is None or not torch.cuda.is_available():
            why = "torch is not installed" if torch is None else "torch sees no CUDA device"
            _dspipe.log(f"dspipe.Loader: {why}; using the CPU path (pass device='cuda:N')")
            return _CPU
        return torch.cuda.current_device()
    if torch is not None and isinstance(device, torch.device):
        device = str(device)
    if isinstance(device, int):
        return device
    if device == "cpu":
        return _CPU
    if device == "cuda":
        return torch.cuda.current_device() if torch is not None else 0
    if isinstance(device, str) and device.startswith("cuda:"):
        return int(device[5:])
    raise ValueError(f"device must be 'auto', 'cpu', 'cuda', 'cuda:N' or an int, got {device!r}")


class DLPackArray:
    """A batch array for DLPack consumers (torch.from_dlpack, cupy, jax). __dlpack__ honours the
    consumer's stream: the consumer's work is ordered after the batch is ready."""

    def __init__(self, batch, array):
        self._batch, self._array = batch, array

    def __dlpack__(self, stream: int | None = None, **kwargs):
        if self._batch.on_device and stream != -1:
            self._batch.stream_wait(0 if stream is None else stream)
        return self._array.__dlpack__(**kwargs)

    def __dlpack_device__(self):
        return self._array.__dlpack_device__()

    @property
    def shape(self):
        return self._array.shape

    @property
    def dtype(self):
        return self._array.dtype


class Loader:
    """Batches of a dspipe dataset.

    Arguments (defaults in brackets):
      path: a dspipe LMDB, a sharded dataset directory or a plain LMDB; or the http(s):// or
        s3://bucket/prefix/ URL of a dataset directory (its manifest.json lists the files;
        s3: docs/STORAGE.md for the credentials): it is fetched into the
        cache, then read there. A URL with cache "off" (the default) is cached as with "auto";
        one the cache cannot take (no room, cache_limit) is an error saying how to fetch it.
      batch_size [8]; shuffle [True] with seed [0] (a fresh order every epoch, from (seed, epoch));
      num_threads [0 = the CPUs this process may use]; prefetch [2] batches decoded ahead.
      device ["auto"]: torch.cuda.current_device() when CUDA is usable, else the CPU (one log line
        saying why); "cpu", "cuda", "cuda:N" or N.
      dtype ["float32"] or "float16" images; normalize [True]: (x - mean) / std with the dataset's
        statistics (False: float pixel values 0..255).
      hflip / vflip [0.0]: flip probability per sample (image and mask together).
      drop_last [False]: drop this rank's last short batch.
      rank / world_size [None]: from torch.distributed when initialized, then RANK / WORLD_SIZE,
        then 0 / 1. remainder ["pad"]: samples that do not divide across ranks ("pad", "drop",
        "uneven"; see docs/LOADER.md).
      order ["global"]: how an epoch's order is cut across ranks (docs/SCALE.md). "global": one
        permutation of every sample, every world_size-th to this rank. "blocks": blocks of
        block_size [4096] consecutive samples in a shuffled order, each block shuffled, a
        contiguous range to each rank (each rank computes only its part). "shards": whole shard
        files of a sharded dataset to each rank (rotated by epoch, samples shuffled within the
        rank), so a rank opens only its shards' files; needs at least world_size shards.
      output [None = "torch" when torch imports, else "numpy"]: "torch", "numpy" or "dlpack".
      masks ["int64"] or "uint8"; max_corrupt [0] corrupt records skipped per epoch.
      slots [2] buffer sets made up front; max_slots [0 = no limit] batches held at once.
      cache ["off"]: "auto" copies the dataset into /dev/shm (a RAM disk) once per machine when it
        fits the budget (free space and RAM left after the loader's buffers, with a margin),
        shared by every rank; a directory caches there instead. One log line says whether it is
        cached or read in place and why. cache_limit [0 = only the budget]: capacity of the
        cache directory in bytes; least recently used entries no process reads are evicted.
        See docs/CACHE.md.

    Each batch is a dict: "image" float NCHW (on the device), "mask" int64 NHW (None without
    masks), "label" and "index" int64 (host). Arrays share the loader's buffer (no copy); the
    buffer is reused only once every array made from it is gone, so holding batches is safe and
    never blocks the loader (it takes another buffer).
    """

    def __init__(self, path: str | os.PathLike, batch_size: int = 8, shuffle: bool = True,
                 seed: int = 0, num_threads: int = 0, prefetch: int = 2, device: Any = "auto",
                 dtype: str = "float32", normalize: bool = True, hflip: float = 0.0,
                 vflip: float = 0.0, drop_last: bool = False, rank: int | None = None,
                 world_size: int | None = None, output: str | None = None,
                 masks: str = "int64", remainder: str = "pad", max_corrupt: int = 0,
                 slots: int = 2, max_slots: int = 0, cache: str | os.PathLike = "off",
                 cache_limit: int = 0, order: str = "global", block_size: int = 4096,
                 transform: Any = None):
        torch = _torch()
        if output is None:
            output = "torch" if torch is not None else "numpy"
        if output not in ("torch", "numpy", "dlpack"):
            raise ValueError(f"output must be 'torch', 'numpy' or 'dlpack', got {output!r}")
        if output == "torch" and torch is None:
            raise ValueError("output='torch' needs PyTorch, which does not import here")
        if dtype not in ("float32", "float16"):
            raise ValueError(f"dtype must be 'float32' or 'float16', got {dtype!r}")
        if masks not in ("int64", "uint8"):
            raise ValueError(f"masks must be 'int64' or 'uint8', got {masks!r}")
        rank, world_size = _resolve_ranks(rank, world_size)
        dev = _resolve_device(device, output)
        if output == "numpy" and dev >= 0:
            raise ValueError("output='numpy' holds host memory only; use device='cpu'")
        consumer_stream = 0
        if dev >= 0 and torch is not None and torch.cuda.is_available():
            # Implicit releases (a tensor dropped) are ordered after the caller's stream.
            consumer_stream = torch.cuda.current_stream(dev).cuda_stream
        self._path = os.fspath(path)
        self._output = output
        self._torch = torch
        self._pid = os.getpid()
        self._restore_device = dev >= 0 and torch is not None and torch.cuda.is_available()
        spec = "" if transform is None else _dspipe.transforms_to_json(
            transforms.spec_json(transform))
        self._core = _dspipe.Loader(
            self._path, batch_size, shuffle, seed, num_threads, prefetch, dev,
            dtype == "float16", normalize, masks == "int64", hflip, vflip, drop_last, rank,
            world_size, remainder, max_corrupt, consumer_stream, slots, max_slots,
            os.fspath(cache), cache_limit, order, block_size, spec)
        ds = self._core.dataset()
        self._fingerprint = {
            # The source, not the copy it may be read from (cache=): a checkpoint resumes
            # whether or not the next session caches.
            # A URL (http(s)://, s3://, fetched into the cache): scheme, host and path, never
            # its query (a signature or token: a secret, and a re-signed URL is the same dataset).
            "dataset": (_dspipe.url_identity(self._path)
                        if self._path.lower().startswith(("http://", "https://", "s3://"))
                        else os.path.realpath(self._path)),
            "manifest_sha256": hashlib.sha256(ds["manifest"].encode()).hexdigest(),
            "count": ds["count"],
            "batch_size": batch_size,
            "rank": rank,
            "world_size": world_size,
            "remainder": remainder,
            "order": order,
            "block_size": block_size,
            "drop_last": drop_last,
            "shuffle": shuffle,
            "hflip": hflip,
            "vflip": vflip,
            "seed": seed,
            "transform": spec,
        }
        self.rank, self.world_size = rank, world_size
        self._compute_ns = 0
        self._compute_batches = 0

    # -- iteration ----------------------------------------------------------------------------
    def _check_fork(self) -> None:
        if os.getpid() != self._pid:
            raise RuntimeError(
                f"dspipe.Loader was created in process {self._pid} and used in forked process "
                f"{os.getpid()}: its worker threads do not exist there. Create the loader in "
                "the worker (DataLoader worker_init_fn), or use num_workers=0 "
                "(dspipe.torch.IterableDataset).")

    def next_raw(self):
        """The next _dspipe.Batch (its arrays: images_torch(), masks_numpy(), ...), or None at
        the end of the epoch. The GIL is released while waiting."""
        self._check_fork()
        torch = self._torch
        if self._restore_device:
            prev = torch.cuda.current_device()
            try:
                return self._core.next()
            finally:
                if torch.cuda.current_device() != prev:
                    torch.cuda.set_device(prev)
        return self._core.next()

    def convert(self, b) -> dict:
        """A batch dict of the loader's output type, sharing b's memory."""
        if self._output == "torch":
            torch = self._torch
            if b.on_device:
                b.stream_wait(torch.cuda.current_stream(b.device).cuda_stream)
            return {"image": b.images_torch(), "mask": b.masks_torch(),
                    "label": torch.tensor(b.labels(), dtype=torch.int64),
                    "index": torch.tensor(b.indices(), dtype=torch.int64)}
        if self._output == "numpy":
            import numpy as np  # noqa: PLC0415
            return {"image": b.images_numpy(), "mask": b.masks_numpy(),
                    "label": np.asarray(b.labels(), dtype=np.int64),
                    "index": np.asarray(b.indices(), dtype=np.int64)}
        masks = b.masks_dlpack()
        import numpy as np  # noqa: PLC0415
        return {"image": DLPackArray(b, b.images_dlpack()),
                "mask": DLPackArray(b, masks) if masks is not None else None,
                "label": np.asarray(b.labels(), dtype=np.int64),
                "index": np.asarray(b.indices(), dtype=np.int64)}

    def __iter__(self) -> Iterator[dict]:
        """The rest of the current epoch; the next iteration starts the following epoch."""
        while True:
            b = self.next_raw()
            if b is None:
                return
            batch = self.convert(b)
            del b
            start = time.perf_counter_ns()
            yield batch
            self._compute_ns += time.perf_counter_ns() - start
            self._compute_batches += 1

    def __len__(self) -> int:
        """Batches per epoch for this rank (of the current epoch: with order="shards" and
        remainder="uneven" it follows the sizes of the shards the epoch gives this rank)."""
        return self._core.batches_per_epoch()

    def set_epoch(self, epoch: int) -> None:
        """Starts `epoch` from its beginning (its order and flips depend on (seed, epoch))."""
        self._core.set_epoch(epoch)

    @property
    def epoch(self) -> int:
        return self._core.epoch

    @property
    def reading_from(self) -> str:
        """Where records are read from (cache=): "PATH", "PATH (in place, copying into the
        cache)", "PATH (cache, since epoch N)" or "PATH (in place: REASON)"."""
        return self._core.reading_from()

    def wait_for_cache_copy(self) -> None:
        """Blocks until the background copy into the cache (cache=, a dataset not cached yet)
        has committed or failed; the loader reads the copy from the next epoch on."""
        self._core.wait_for_cache_copy()

    # -- resume -------------------------------------------------------------------------------
    def state_dict(self) -> dict:
        """Where this rank is: restore it into a loader made with the same dataset and options
        (load_state_dict) to continue with exactly the batches an uninterrupted run gives."""
        seed, epoch, position = self._core.state()
        return {"version": STATE_VERSION, "epoch": epoch, "position": position, "seed": seed,
                "fingerprint": dict(self._fingerprint)}

    def load_state_dict(self, state: dict) -> None:
        """Continues from state_dict(). ValueError saying what differs when the state comes from
        another dataset or other options."""
        if state.get("version") != STATE_VERSION:
            raise ValueError(f"load_state_dict: state version {state.get('version')!r}, this "
                             f"dspipe reads version {STATE_VERSION}")
        # States saved before order/block_size existed were made with the global order.
        theirs = {"order": "global", "block_size": 4096, "transform": "",
                  **state.get("fingerprint", {})}
        diffs = [f"{k}: state has {theirs.get(k)!r}, this loader {v!r}"
                 for k, v in self._fingerprint.items() if theirs.get(k) != v]
        if diffs:
            raise ValueError("load_state_dict: the state is from a different loader: " +
                             "; ".join(diffs))
        self._core.restore(state["seed"], state["epoch"], state["position"])

    # -- introspection ------------------------------------------------------------------------
    def stats(self) -> dict:
        """Per-stage timing: {stage: {count, total_ms, mean_ms, stddev_ms, min_ms, p50_ms,
        p95_ms, p99_ms, max_ms}} for read, decode, augment, collate, h2d, normalize, wait
        (docs/STATS.md), plus "elapsed_ms" and "compute_ms_per_batch" (the time your loop
        spent between batches), and "corrupt": the corrupt records met so far (max_corrupt),
        {"count": n, "records": [{"index", "key", "epoch", "reason"}, ...], "truncated": bool},
        the first 64 distinct records listed in the order met (docs/LOADER.md)."""
        out = dict(self._core.stats())
        out["elapsed_ms"] = self._core.elapsed_ms()
        out["compute_ms_per_batch"] = self._compute_ms()
        out["corrupt"] = self._core.corrupt_records()
        return out

    def _compute_ms(self) -> float:
        return self._compute_ns / 1e6 / self._compute_batches if self._compute_batches else 0.0

    def report(self, file=None) -> dict:
        """Prints the stage table and the bottleneck verdict (docs/STATS.md) and returns them."""
        r = dict(self._core.report(self._compute_ms()))
        print(r["table"].rstrip("\n"), file=file or sys.stdout)
        print(f"verdict: {r['headline']}", file=file or sys.stdout)
        return r

    def reset_stats(self) -> None:
        self._core.reset_stats()
        self._compute_ns = self._compute_batches = 0

    @property
    def on_device(self) -> bool:
        return self._core.on_device

    @property
    def mean(self) -> list[float]:
        return self._core.mean

    @property
    def std(self) -> list[float]:
        return self._core.std

    def slots_allocated(self) -> int:
        """Batch buffer sets made so far (grows only while more batches are held than ever)."""
        return self._core.slots_allocated()

    def pool_buffers(self) -> int:
        """Host batch buffers allocated so far."""
        return self._core.pool_buffers()

    def __repr__(self) -> str:
        n, c, h, w = self._core.shape
        where = "cuda" if self.on_device else "cpu"
        path = _dspipe.redact_url(self._path)  # a URL's query may be a secret
        return (f"dspipe.Loader({path!r}, batch_size={n}, shape=({c}, {h}, {w}), "
                f"device={where}, rank={self.rank}/{self.world_size}, output={self._output!r})")
