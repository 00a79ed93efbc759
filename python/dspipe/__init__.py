"""dspipe: image/mask datasets in LMDB, streamed as batches of tensors (CPU or CUDA).

    import dspipe
    dspipe.synth("data/src", count=64, size=(512, 512), seed=0)
    dspipe.build("data/src", "data/train.lmdb", store="raw", shuffle=True, on_error="skip")
    dspipe.verify("data/train.lmdb")          # raises dspipe.CorruptDataset naming bad keys
    loader = dspipe.Loader("data/train.lmdb", batch_size=8, num_threads=2)
    for batch in loader:                      # dict of torch tensors
        x, y = batch["image"], batch["mask"]

Every function is a thin layer over the C++ library (include/dspipe/); errors carry its message:
ValueError for bad arguments, FileNotFoundError / OSError naming the path, CorruptRecord naming
the key.
"""
from __future__ import annotations

import os
from typing import Any, Callable

from . import _dspipe
from .errors import CorruptDataset, CorruptRecord
from ._progress import Progress
from .loader import Loader

__all__ = ["synth", "build", "assemble", "verify", "info", "describe", "fetch", "fetch_dataset",
           "Loader", "CorruptDataset",
           "CorruptRecord", "build_info", "cuda_status", "__version__"]

_dspipe._set_corrupt_record(CorruptRecord)
__version__: str = _dspipe.build_info()["version"]


def synth(out_dir: str | os.PathLike, count: int = 100, size: tuple[int, int] = (512, 512),
          seed: int = 0, format: str = "png", classes: int = 2, threads: int = 0) -> None:
    """Writes `count` deterministic synthetic samples to out_dir/images and out_dir/masks.
    size is (height, width); format "png" or "jpg"; classes in [2, 255]; threads 0 = all."""
    height, width = size
    _dspipe.synth(os.fspath(out_dir), count, width, height, seed, format, classes, threads)


def build(source: str | os.PathLike, output: str | os.PathLike, store: str = "encoded",
          shuffle: bool = False, seed: int = 0, on_error: str = "fail", threads: int = 0,
          shards: int = 1, resume: bool = False, overwrite: bool = False, check: str = "header",
          resize: tuple[int, int] | None = None, gray: bool = False, sync: bool = True,
          progress: bool | Callable[[int, int], Any] = True, shard_index: int | None = None,
          commit_mb: float = 64) -> dict:
    """Builds a dataset (dsconvert build). store "encoded" (source bytes) or "raw" (zstd
    pixels); on_error "fail" or "skip" (rejected files listed in OUTPUT/rejected.tsv); check
    "header" or "decode"; resize (height, width). progress: True = tqdm.auto when installed,
    else plain lines; False = quiet; or a callable(done, total). shard_index: build only that
    shard of a `shards` build (dsconvert build --shard-index; join with assemble()); progress
    then counts that shard's samples. commit_mb: MiB per LMDB transaction (--commit-mb).
    Returns the build's counts."""
    if check not in ("header", "decode"):
        raise ValueError(f"check must be 'header' or 'decode', got {check!r}")
    height, width = resize if resize is not None else (0, 0)
    bar = None
    if callable(progress):
        hook = progress
    elif progress:
        bar = hook = Progress(f"build {os.fspath(output)}")
    else:
        hook = None
    try:
        return _dspipe.build(os.fspath(source), os.fspath(output), store, shuffle, seed, on_error,
                             threads, shards, resume, overwrite, check == "decode", width,
                             height, gray, sync, hook,
                             -1 if shard_index is None else int(shard_index),
                             int(max(0.0, commit_mb) * (1 << 20)))
    finally:
        if bar is not None:
            bar.close()


def assemble(output: str | os.PathLike) -> dict:
    """Joins the shards built one at a time (build(..., shards=N, shard_index=i)) into one
    dataset (dsconvert assemble): counts and mean/std combined from the shards' sums. Raises
    naming each missing or unfinished shard. Returns {"shards", "records", "skipped", ...}."""
    return _dspipe.assemble(os.fspath(output))


def verify(path: str | os.PathLike, threads: int = 0, max_listed: int = 100) -> dict:
    """Checks the size and sha256 of every file the manifest lists, then every record (checksum
    + decode). Returns {"records": n, "bad": 0} when all are good; raises CorruptDataset (its
    message and .keys name the bad records, .bad_files counts files that do not match)
    otherwise."""
    path = os.fspath(path)
    records, bad, problems, bad_files = _dspipe.verify(path, threads, max_listed)
    if bad or bad_files:
        raise CorruptDataset(path, records, bad, problems, bad_files)
    return {"records": records, "bad": 0}


def _fetch_progress(progress: bool | Callable[[int, int], Any], desc: str):
    if callable(progress):
        return None, progress
    if progress:
        bar = Progress(desc, unit="B")
        return bar, bar
    return None, None


def fetch(url: str, dest: str | os.PathLike, sha256: str | None = None, size: int | None = None,
          retries: int = 8, stall_seconds: int = 30,
          progress: bool | Callable[[int, int], Any] = True) -> dict:
    """Resumable, verified download of url (http, https, file://) or copy of a local path into
    dest (dsconvert fetch; docs/FETCH.md). Bytes go to DEST.part, renamed to dest once the size
    (size, else the server's) and sha256 (when given) check out. A failure, a kill or Ctrl-C
    (KeyboardInterrupt) leaves DEST.part: the next call resumes it. retries: transient failures
    in a row without progress; stall_seconds: a transfer below 1 KiB/s this long is retried.
    progress: True = a bar (tqdm.auto when installed, else lines), False = quiet, or a
    callable(done_bytes, total_bytes) (an exception it raises stops the fetch like Ctrl-C and
    is raised). Returns the transfer's counts (bytes, sha256,
    resumed_from, downloaded, attempts, refetches, already_present)."""
    bar, hook = _fetch_progress(progress, f"fetch {os.fspath(dest)}")
    try:
        return _dspipe.fetch(url, os.fspath(dest), sha256 or "", -1 if size is None else size,
                             retries, stall_seconds, hook)
    finally:
        if bar is not None:
            bar.close()


def fetch_dataset(url: str, dest_dir: str | os.PathLike, retries: int = 8,
                  stall_seconds: int = 30,
                  progress: bool | Callable[[int, int], Any] = True) -> dict:
    """Fetches the dataset served at url (its manifest.json, then every file it lists, each
    verified by size and sha256) into dest_dir, which appears only when complete (dsconvert
    fetch URL/ DEST). Interrupted calls (a kill, Ctrl-C) resume; two processes make one
    download. One progress bar over all files. Returns the summed counts as fetch() does."""
    bar, hook = _fetch_progress(progress, f"fetch {os.fspath(dest_dir)}")
    try:
        return _dspipe.fetch_dataset(url, os.fspath(dest_dir), retries, stall_seconds, hook)
    finally:
        if bar is not None:
            bar.close()


def info(path: str | os.PathLike) -> dict:
    """Describes a dataset: count, shape (channels, height, width), storage, mean, std (pixel
    units, None when unknown), classes (mask classes), class_names, has_masks, has_labels."""
    return _dspipe.info(os.fspath(path))


def describe(path: str | os.PathLike) -> str:
    """The text `dsconvert info` prints."""
    return _dspipe.describe(os.fspath(path))


def cuda_status() -> dict:
    """{"usable": bool, "reason": why not ("" when usable), "devices": count}."""
    usable, reason, devices = _dspipe.cuda_available()
    return {"usable": usable, "reason": reason, "devices": devices}


def build_info() -> dict:
    """Version, build type, whether CUDA was compiled in, usable CPUs, oneTBB concurrency."""
    return dict(_dspipe.build_info())
