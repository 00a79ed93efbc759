# SPDX-License-Identifier: Apache-2.0
"""dspipe.Loader: batches from a dspipe dataset as dicts of tensors (torch, numpy or DLPack).

The C++ DeviceLoader (include/dspipe/device_loader.h) does the work: a oneTBB pool decodes and
augments ahead of the consumer, then the batch is normalized on the GPU (CUDA path) or on the
workers (CPU path). This class fills the C++ options structs by keyword (dspipe/_options.py),
resolves the Python-side defaults (device, rank, output type, pin_memory) and wraps each batch's
memory without copying it. The training-loop contract (set_epoch, iter(), len(), state_dict) is
the C++ Loader's; docs/PYTHON.md states it.
"""
from __future__ import annotations

import hashlib
import os
import sys
import time
import warnings
from typing import TYPE_CHECKING, Any, Iterator

from . import _dspipe, _options
from .errors import CudaUnavailable

if TYPE_CHECKING:
    from typing_extensions import Unpack

    from ._kwargs import LoaderArgs

STATE_VERSION = 2

_CPU = -2  # DeviceOptions::kCpu
_AUTO = -1  # DeviceOptions::kAuto (only used when CUDA is not usable: logs why, takes the CPU)


def _torch() -> Any:
    try:
        import torch  # noqa: PLC0415 (optional)
    except ImportError:
        return None
    return torch


def _resolve_ranks(rank: int | None, world_size: int | None,
                   group: tuple[int, int] | None) -> tuple[int, int]:
    """The given ones, then torch.distributed's (group: _dist_ranks()), then RANK / WORLD_SIZE,
    then 0 and 1."""
    if group is not None:
        rank = group[0] if rank is None else rank
        world_size = group[1] if world_size is None else world_size
    if rank is None:
        rank = int(os.environ.get("RANK", "0"))
    if world_size is None:
        world_size = int(os.environ.get("WORLD_SIZE", "1"))
    return rank, world_size


def _dist_ranks() -> tuple[int, int] | None:
    """(rank, world_size) of an initialized torch.distributed group, else None (torch is not
    imported for this: a process that never imported it has no group)."""
    torch = sys.modules.get("torch")
    dist = getattr(torch, "distributed", None) if torch is not None else None
    if dist is None or not dist.is_available() or not dist.is_initialized():
        return None
    return int(dist.get_rank()), int(dist.get_world_size())


def _cuda_problems(torch: Any, output: str) -> list[str]:
    """Why CUDA cannot serve this loader ([] when it can)."""
    problems = []
    usable, reason, _ = _dspipe.cuda_available()
    if not usable:
        problems.append(f"dspipe: {reason}")
    if output == "torch":
        if torch is None:
            problems.append("torch is not installed")
        elif not torch.cuda.is_available():
            problems.append("torch: " + ("this torch was built without CUDA"
                                         if getattr(torch.version, "cuda", None) is None
                                         else "torch sees no CUDA device (driver, "
                                              "CUDA_VISIBLE_DEVICES?)"))
    elif output == "numpy":
        problems.append("output='numpy' is host memory")
    return problems


def _resolve_device(device: Any, output: str) -> int:
    """"auto": torch's current CUDA device when dspipe and torch can use CUDA, else the CPU (one
    log line saying why). "cpu", "cuda" (current device), "cuda:N", N or a torch.device; a CUDA
    request that cannot be served raises CudaUnavailable saying why."""
    torch = _torch()
    if device is None or device == "auto":
        usable, _, _ = _dspipe.cuda_available()
        if not usable:
            return _AUTO  # the C++ side logs "no usable CUDA device (reason); using the CPU path"
        problems = _cuda_problems(torch, output)
        if problems:
            _dspipe.log(f"dspipe.Loader: {problems[-1]}; using the CPU path (pass "
                        "device='cuda:N' to insist)")
            return _CPU
        return int(torch.cuda.current_device())
    if torch is not None and isinstance(device, torch.device):
        device = str(device)
    if device == "cpu":
        return _CPU
    if isinstance(device, int) or device == "cuda" or (
            isinstance(device, str) and device.startswith("cuda:")):
        problems = _cuda_problems(torch, output)
        if problems:
            raise CudaUnavailable(
                f"dspipe.Loader(device={device!r}): CUDA cannot be used here: "
                f"{'; '.join(problems)}. Pass device='cpu', or device='auto' (the current "
                "CUDA device when there is one, else the CPU)")
        if isinstance(device, int):
            return device
        return int(torch.cuda.current_device()) if device == "cuda" else int(device[5:])
    raise ValueError(f"device must be 'auto', 'cpu', 'cuda', 'cuda:N' or an int, got {device!r}")


class DLPackArray:
    """A batch array for DLPack consumers (torch.from_dlpack, cupy, jax, numpy). __dlpack__
    honours the consumer's stream: the consumer's work is ordered after the batch is ready.
    shape, dtype ("float32", "float16", "int64", "uint8") and device ("cpu", "cuda:N") describe
    it; __array__ (CPU) and __cuda_array_interface__ (GPU) serve numpy and CUDA libraries."""

    def __init__(self, batch: Any, array: Any, shape: tuple[int, ...], dtype: str,
                 mask: bool = False):
        self._batch, self._array, self._mask = batch, array, mask
        self.shape: tuple[int, ...] = tuple(shape)
        self.dtype: str = dtype

    def __dlpack__(self, stream: int | None = None, **kwargs: Any) -> Any:
        if self._batch.on_device and stream != -1:
            self._batch.stream_wait(0 if stream is None else stream)
        return self._array.__dlpack__(**kwargs)

    def __dlpack_device__(self) -> tuple[int, int]:
        return self._array.__dlpack_device__()  # type: ignore[no-any-return]

    @property
    def device(self) -> str:
        return f"cuda:{self._batch.device}" if self._batch.on_device else "cpu"

    def __array__(self, dtype: Any = None, copy: bool | None = None) -> Any:
        if self._batch.on_device:
            raise TypeError(f"this array is on {self.device}: use torch.from_dlpack or cupy")
        import numpy as np  # noqa: PLC0415
        a = np.from_dlpack(self._array)
        return a if dtype is None else a.astype(dtype, copy=bool(copy))

    _TYPESTR = {"float32": "<f4", "float16": "<f2", "int64": "<i8", "uint8": "|u1"}

    @property
    def __cuda_array_interface__(self) -> dict[str, Any]:
        if not self._batch.on_device:
            raise AttributeError("a host array has no __cuda_array_interface__ (use __array__)")
        ptr = self._batch.masks_ptr if self._mask else self._batch.images_ptr
        # v3: "stream" is the producer's; the consumer synchronizes with it before reading.
        return {"shape": self.shape, "typestr": self._TYPESTR[self.dtype], "data": (ptr, False),
                "version": 3, "strides": None, "stream": self._batch.stream_ptr or None}

    def __repr__(self) -> str:
        return f"DLPackArray(shape={self.shape}, dtype={self.dtype}, device={self.device})"


def _state_options_v1(fp: dict[str, Any]) -> list[tuple[str, str]]:
    """A version-1 state's fingerprint as LoaderState options (the C++ spelling of values)."""
    def cpp(v: Any) -> str:
        if isinstance(v, bool):
            return "true" if v else "false"
        if isinstance(v, float) and v.is_integer() and abs(v) < 1e16:
            return str(int(v))
        return str(v)
    keys = {"batch_size": "batch_size", "rank": "sampler.rank",
            "world_size": "sampler.world_size", "remainder": "sampler.remainder",
            "order": "sampler.order", "block_size": "sampler.block_size",
            "drop_last": "drop_last", "shuffle": "sampler.shuffle", "hflip": "augment.hflip",
            "vflip": "augment.vflip", "transform": "transform"}
    # States saved before order/block_size/transform existed: the global order, no pipeline.
    fp = {"order": "global", "block_size": 4096, "transform": "", **fp}
    return [(keys[k], cpp(v)) for k, v in fp.items() if k in keys]


class Loader:
    """Batches of a dspipe dataset: dspipe.Loader(path, **options).

    path: a dspipe LMDB, a sharded dataset directory or a plain LMDB; or the http(s):// or
    s3://bucket/prefix/ URL of a dataset directory (its manifest.json lists the files; s3:
    docs/STORAGE.md for the credentials), fetched into the cache, then read there.

    Each option is a keyword argument that sets one C++ option field (include/dspipe/*.h) by
    name; its default is the C++ default. An unknown name raises TypeError naming the close
    ones. docs/PYTHON.md lists them all with their C++ names:

{options}

    Each batch is a dict: "image" float NCHW (on the device), "mask" int64 NHW (None without
    masks; float32 N x classes x H x W one-hot after a MONAI AsDiscreted(to_onehot=classes)),
    "label" and "index" int64 (host). Arrays share the loader's buffer (no copy); the
    buffer is reused only once every array made from it is gone.

    The training loop (docs/PYTHON.md, "The training-loop contract"): each iter(loader) is one
    pass over an epoch; a new pass starts the next epoch unless a position is pending (a new
    loader, set_epoch, load_state_dict, or the previous epoch ran to its end). set_epoch(e) of
    the epoch a restored state is in continues it. len(loader) is the batches of the pass a
    `for` loop would make now (batches_left() those left in the current epoch). state_dict() is
    valid at any point.
    """

    def __init__(self, path: str | os.PathLike[str], **options: Unpack[LoaderArgs]) -> None:
        values: dict[str, Any] = _options.renamed("dspipe.Loader", dict(options))
        _options.refuse_unknown("dspipe.Loader", values,
                                [*_options.LOADER, *_options.LOADER_PYTHON])
        torch = _torch()
        output = values.pop("output", None)
        if output is None:
            output = "torch" if torch is not None else "numpy"
        if output not in ("torch", "numpy", "dlpack"):
            raise ValueError(f"dspipe.Loader(output={output!r}): expected 'torch', 'numpy' or "
                             "'dlpack'")
        if output == "torch" and torch is None:
            raise ValueError("dspipe.Loader(output='torch') needs PyTorch, which does not "
                             "import here")
        masks = values.get("masks")
        if masks in ("int64", "uint8") and not os.path.exists(str(masks)):
            warnings.warn("dspipe.Loader(masks='int64'|'uint8') is mask_dtype= now; masks= is "
                          "a plain LMDB's masks LMDB", DeprecationWarning, stacklevel=2)
            values["mask_dtype"] = values.pop("masks")
        for k in ("mean", "std", "size"):
            if k in values and values[k] is None:
                del values[k]  # the dataset's
        if values.get("weights") is not None and "order" not in values:
            values["order"] = "weighted"  # weights= alone asks for weighted draws
        given = values.get("rank") is not None or values.get("world_size") is not None
        group = _dist_ranks()
        rank, world_size = _resolve_ranks(values.pop("rank", None), values.pop("world_size", None),
                                          group)
        # Ranks taken from no group (rank/world_size neither given nor from torch.distributed):
        # checked again when a pass starts, for a group initialized after the loader was made.
        self._ranks_unbound = not given and group is None
        values["rank"], values["world_size"] = rank, world_size
        dev = _resolve_device(values.pop("device", "auto"), output)
        values["device"] = dev
        if values.get("pin_memory") is None:
            values["pin_memory"] = torch is not None and bool(torch.cuda.is_available())
        lo, do = _dspipe.LoaderOptions(), _dspipe.DeviceOptions()
        _options.fill("dspipe.Loader", _options.LOADER, values, _structs(lo, do))
        if torch is not None and torch.cuda.is_available() and (dev >= 0 or do.pin_memory):
            # Implicit releases (a tensor dropped) are ordered after the caller's stream: on the
            # GPU path its kernels, with pin_memory its non_blocking copies.
            do.consumer_stream = torch.cuda.current_stream(dev if dev >= 0 else None).cuda_stream
        self._path = os.fspath(path)
        self._output = output
        self._torch = torch
        self._pid = os.getpid()
        self._restore_device = dev >= 0 and torch is not None and torch.cuda.is_available()
        self._core = _dspipe.Loader(self._path, lo, do)
        self.rank, self.world_size = rank, world_size
        self._pass = 0  # the newest iter(loader); older iterators are stale
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

    def next_raw(self) -> Any:
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

    def convert(self, b: Any) -> dict[str, Any]:
        """A batch dict of the loader's output type, sharing b's memory."""
        if self._output == "torch":
            torch = self._torch
            if b.on_device:
                b.stream_wait(torch.cuda.current_stream(b.device).cuda_stream)
            return {"image": b.images_torch(), "mask": b.masks_torch(),
                    "label": torch.tensor(b.labels(), dtype=torch.int64),
                    "index": torch.tensor(b.indices(), dtype=torch.int64)}
        import numpy as np  # noqa: PLC0415
        if self._output == "numpy":
            return {"image": b.images_numpy(), "mask": b.masks_numpy(),
                    "label": np.asarray(b.labels(), dtype=np.int64),
                    "index": np.asarray(b.indices(), dtype=np.int64)}
        masks = b.masks_dlpack()
        return {"image": DLPackArray(b, b.images_dlpack(), b.images_shape, b.images_dtype),
                "mask": (DLPackArray(b, masks, b.masks_shape, b.masks_dtype, mask=True)
                         if masks is not None else None),
                "label": np.asarray(b.labels(), dtype=np.int64),
                "index": np.asarray(b.indices(), dtype=np.int64)}

    def __iter__(self) -> Iterator[dict[str, Any]]:
        """One pass: the pending position's epoch (a new loader, set_epoch, load_state_dict, or
        the previous epoch ran to its end) from there, else the next epoch from its start
        (Loader::BeginPass). An older iterator of this loader raises once a new one exists."""
        self._check_fork()
        self._check_ranks()
        self._core.begin_pass()
        self._pass += 1
        return _Pass(self, self._pass)

    def _check_ranks(self) -> None:
        """Issue 40 item 6: a loader made before init_process_group (mp.spawn's usual order)
        took rank 0 of 1 from nothing, and every rank would train on every sample."""
        if not self._ranks_unbound:
            return
        group = _dist_ranks()
        if group is None:
            return
        if group != (self.rank, self.world_size):
            raise RuntimeError(
                f"dspipe.Loader({self._path!r}) was made before torch.distributed's "
                f"init_process_group, so it reads as rank {self.rank} of {self.world_size}, but "
                f"this process is rank {group[0]} of {group[1]} now: each rank would read every "
                "sample. Make the loader after init_process_group, or pass "
                f"rank={group[0]}, world_size={group[1]}")
        self._ranks_unbound = False

    def _next_batch(self, token: int) -> dict[str, Any] | None:
        if token != self._pass:
            raise RuntimeError("this iterator of dspipe.Loader was replaced by a newer "
                               "iter(loader), which started another pass; iterate one at "
                               "a time")
        b = self.next_raw()
        if b is None:
            return None
        batch = self.convert(b)
        del b
        return batch

    def __len__(self) -> int:
        """Batches the pass a `for` loop would make now, for this rank (the iter() rule,
        Loader::batches_in_next_pass): what is left of a pending position (a new loader,
        set_epoch, load_state_dict, an epoch run to its end), else - after or during a partial
        pass - the next epoch's batches. So it is the count the next loop yields and the length
        torch's DataLoader sees."""
        return int(self._core.batches_in_next_pass())

    def batches_left(self) -> int:
        """Batches left in the current epoch for this rank (Loader::batches_left): all of them
        before a pass, fewer during one, what a restored state leaves."""
        return int(self._core.batches_left())

    def batches_per_epoch(self) -> int:
        """Batches of the current epoch for this rank, taken or not."""
        return int(self._core.batches_per_epoch())

    def set_epoch(self, epoch: int) -> None:
        """Starts `epoch` from its beginning (its order and flips depend on (seed, epoch)) -
        unless the loader is in `epoch` at a position nothing was taken from yet (after
        load_state_dict): then it continues there, so a resumed epoch is not replayed."""
        self._core.set_epoch(epoch)

    @property
    def epoch(self) -> int:
        return int(self._core.epoch)

    @property
    def reading_from(self) -> str:
        """Where records are read from (cache=): "PATH", "PATH (in place, copying into the
        cache)", "PATH (cache, since epoch N)", "PATH (in place: REASON)" or, streamed, "URL
        (streaming: 3 of 8 shards cached ...)"."""
        return str(self._core.reading_from())

    def wait_for_cache_copy(self) -> None:
        """Blocks until the background copy into the cache (cache=, a dataset not cached yet)
        has committed or failed; the loader reads the copy from the next epoch on."""
        self._core.wait_for_cache_copy()

    def options(self) -> Any:
        """The resolved _dspipe.LoaderOptions (threads, size, mean/std filled in)."""
        return self._core.options()

    # -- resume -------------------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        """Where this rank is, valid at any point: {"version", "epoch", "position", "seed",
        "dataset": {"sha256", "count", "path"}, "options": {name: value}} (plain ints and
        strings). The dataset is identified by content, so the state resumes on any copy of
        it (moved, cached, fetched from a URL); "path" is informative."""
        s = self._core.state()
        return {"version": STATE_VERSION, "epoch": s.epoch, "position": s.position,
                "seed": s.seed,
                "dataset": {"sha256": s.dataset_sha256, "count": s.dataset_count,
                            "path": s.dataset_path},
                "options": dict(s.options)}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Continues from state_dict() (Loader::Restore): the next pass, or set_epoch of the
        state's epoch, continues at its position. ValueError naming every difference when the
        state comes from other data or other options."""
        version = state.get("version")
        s = _dspipe.LoaderState()
        s.seed, s.epoch, s.position = state["seed"], state["epoch"], state["position"]
        if version == STATE_VERSION:
            s.dataset_sha256 = state["dataset"]["sha256"]
            s.dataset_count = state["dataset"]["count"]
            s.dataset_path = state["dataset"]["path"]
            s.options = [(str(k), str(v)) for k, v in state["options"].items()]
        elif version == 1:  # dspipe 0.1: a fingerprint with the path (informative now)
            fp = dict(state.get("fingerprint", {}))
            if fp.get("manifest_sha256") != hashlib.sha256(b"").hexdigest():  # plain: unchecked
                s.dataset_sha256 = fp.get("manifest_sha256", "")
                s.dataset_count = fp.get("count", 0)
                s.dataset_path = str(fp.get("dataset", ""))
                s.options = _state_options_v1(fp)
        else:
            raise ValueError(f"load_state_dict: state version {version!r}, this dspipe reads "
                             f"versions 1 and {STATE_VERSION}")
        self._core.restore(s)

    # -- introspection ------------------------------------------------------------------------
    def stats(self) -> dict[str, Any]:
        """Per-stage timing: {stage: {count, total_ms, mean_ms, stddev_ms, min_ms, p50_ms,
        p95_ms, p99_ms, max_ms}} for read, decode, transform, collate, h2d, normalize, wait
        (docs/STATS.md), plus "elapsed_ms" and "compute_ms_per_batch" (the time your loop
        spent between batches), and "corrupt": the corrupt records met so far (max_corrupt),
        {"count": n, "records": [{"index", "key", "epoch", "reason", "source"}, ...],
        "truncated": bool} ("source": the file the record was built from, "" when unknown),
        the first 64 distinct records listed in the order met (docs/LOADER.md)."""
        out = dict(self._core.stats())
        out["elapsed_ms"] = self._core.elapsed_ms()
        out["compute_ms_per_batch"] = self._compute_ms()
        out["corrupt"] = self._core.corrupt_records()
        return out

    def _compute_ms(self) -> float:
        return self._compute_ns / 1e6 / self._compute_batches if self._compute_batches else 0.0

    def report(self, file: Any = None) -> dict[str, Any]:
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
        return bool(self._core.on_device)

    @property
    def mean(self) -> list[float]:
        return list(self._core.mean)

    @property
    def std(self) -> list[float]:
        return list(self._core.std)

    def slots_allocated(self) -> int:
        """Batch buffer sets made so far (grows only while more batches are held than ever)."""
        return int(self._core.slots_allocated())

    @property
    def warnings(self) -> list[str]:
        """What the loader found suspicious at creation, one line each (each also logged once):
        e.g. mean/std in 0..1 units on 0..255 pixels (docs/PYTHON.md, "Mistakes")."""
        return list(self._core.warnings())

    def pool_buffers(self) -> int:
        """Host batch buffers allocated so far."""
        return int(self._core.pool_buffers())

    def __repr__(self) -> str:
        n, c, h, w = self._core.shape
        where = "cuda" if self.on_device else "cpu"
        path = _dspipe.redact_url(self._path)  # a URL's query may be a secret
        return (f"dspipe.Loader({path!r}, batch_size={n}, shape=({c}, {h}, {w}), "
                f"device={where}, rank={self.rank}/{self.world_size}, output={self._output!r})")


def _structs(lo: Any, do: Any) -> dict[str, Any]:
    """The bound structs a Loader's keywords write into, by C++ struct name."""
    return {"LoaderOptions": lo, "SamplerOptions": lo.sampler, "AugmentOptions": lo.augment,
            "DatasetOpenOptions": lo.dataset, "PlainLmdbOptions": lo.dataset.plain,
            "DeviceOptions": do}


Loader.__doc__ = (Loader.__doc__ or "").replace("{options}", _options.docs(
    _options.LOADER, _structs(_dspipe.LoaderOptions(), _dspipe.DeviceOptions()),
    _options.LOADER_PYTHON))


class _Pass:
    """One pass of a Loader (what iter(loader) returns). Not a generator, so it survives an
    error: after a CorruptRecord (max_corrupt=0: the batch holding the record is dropped) the
    caller may catch it and call next() again, which goes on with the next batch of the same
    epoch, as Loader::Next does in C++ (issue 40 item 9)."""

    def __init__(self, loader: Loader, token: int):
        self._loader, self._token = loader, token
        self._handed: int | None = None  # perf_counter_ns when the last batch was handed out
        self._done = False

    def __iter__(self) -> _Pass:
        return self

    def __next__(self) -> dict[str, Any]:
        ld = self._loader
        if self._handed is not None:  # the consumer's time with the previous batch
            ld._compute_ns += time.perf_counter_ns() - self._handed
            ld._compute_batches += 1
            self._handed = None
        if self._done:
            raise StopIteration
        batch = ld._next_batch(self._token)
        if batch is None:
            self._done = True
            raise StopIteration
        self._handed = time.perf_counter_ns()
        return batch
