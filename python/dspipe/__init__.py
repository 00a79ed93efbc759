# SPDX-License-Identifier: Apache-2.0
"""dspipe: image/mask datasets in LMDB, streamed as batches of tensors (CPU or CUDA).

    import dspipe
    dspipe.synth("data/src", count=64, size=(512, 512), seed=0)
    dspipe.build("data/src", "data/train.lmdb", store="raw", shuffle=True, on_error="skip")
    dspipe.verify("data/train.lmdb")          # raises dspipe.CorruptDataset naming bad keys
    loader = dspipe.Loader("data/train.lmdb", batch_size=8, threads=2)
    for batch in loader:                      # dict of torch tensors
        x, y = batch["image"], batch["mask"]

Every function is a thin layer over the C++ library (include/dspipe/); errors carry its message:
ValueError for bad arguments, FileNotFoundError / OSError naming the path, CorruptRecord naming
the key.
"""
from __future__ import annotations

import json
import os
from typing import TYPE_CHECKING, Any, Callable

from . import _dspipe, _options
from ._progress import Progress
from .errors import CorruptDataset, CorruptRecord, CudaUnavailable
from .loader import DLPackArray, Loader

if TYPE_CHECKING:
    from typing_extensions import Unpack

    from ._kwargs import BuildArgs, VerifyArgs

__all__ = ["synth", "build", "assemble", "verify", "info", "describe", "slice_table", "sources",
           "fetch",
           "fetch_dataset", "push",
           "Loader", "DLPackArray", "CorruptDataset", "CorruptRecord", "CudaUnavailable",
           "build_info", "cuda_status", "__version__"]

_dspipe._set_corrupt_record(CorruptRecord)
_dspipe._set_option_names(_options.option_names())  # messages name keyword arguments
__version__: str = _dspipe.build_info()["version"]


def synth(out_dir: str | os.PathLike[str], count: int = 100,
          size: tuple[int, int] = (512, 512), seed: int = 0, format: str = "png",
          classes: int = 2, threads: int = 0) -> None:
    """Writes `count` deterministic synthetic samples to out_dir/images and out_dir/masks.
    size is (height, width); format "png" or "jpg"; classes in [2, 255]; threads 0 = all."""
    height, width = size
    _dspipe.synth(os.fspath(out_dir), count, width, height, seed, format, classes, threads)


def build(source: str | os.PathLike[str], output: str | os.PathLike[str], *,
          progress: bool | Callable[[int, int], Any] = True,
          **options: Unpack[BuildArgs]) -> dict[str, Any]:
    """Builds a dataset (dsconvert build; the C++ BuildDataset): each option sets one
    BuildOptions field by name, default the C++ default (docs/PYTHON.md lists them):

{options}

    progress: True = tqdm.auto when installed, else plain lines; False = quiet; or a
    callable(done, total). Returns the build's counts."""
    _options.refuse_unknown("dspipe.build", options, list(_options.BUILD))
    o = _dspipe.BuildOptions()
    _options.fill("dspipe.build", _options.BUILD,
                  {"source": source, "output": output, **options},
                  {"BuildOptions": o, "PlainLmdbOptions": o.plain})
    bar = None
    if callable(progress):
        hook = progress
    elif progress:
        bar = hook = Progress(f"build {os.fspath(output)}")
    else:
        hook = None
    try:
        return dict(_dspipe.build(o, hook))
    finally:
        if bar is not None:
            bar.close()


def assemble(output: str | os.PathLike[str]) -> dict[str, Any]:
    """Joins the shards built one at a time (build(..., shards=N, shard_index=i)) into one
    dataset (dsconvert assemble): counts and mean/std combined from the shards' sums. Raises
    naming each missing or unfinished shard. Returns {"shards", "records", "skipped", ...}."""
    return dict(_dspipe.assemble(os.fspath(output)))


def verify(path: str | os.PathLike[str], **options: Unpack[VerifyArgs]) -> dict[str, Any]:
    """Checks the size and sha256 of every file the manifest lists, then every record (checksum
    + decode). Returns {"records": n, "bad": 0} when all are good; raises CorruptDataset (its
    message and .keys name the bad records, .bad_files counts files that do not match)
    otherwise. Options (VerifyOptions fields):

{options}"""
    _options.refuse_unknown("dspipe.verify", options, list(_options.VERIFY))
    o = _dspipe.VerifyOptions()
    _options.fill("dspipe.verify", _options.VERIFY, options, {"VerifyOptions": o})
    p = os.fspath(path)
    records, bad, problems, bad_files = _dspipe.verify(p, o)
    if bad or bad_files:
        raise CorruptDataset(p, records, bad, problems, bad_files)
    return {"records": records, "bad": 0}


def _fetch_progress(progress: bool | Callable[[int, int], Any],
                    desc: str) -> tuple[Progress | None, Callable[[int, int], Any] | None]:
    if callable(progress):
        return None, progress
    if progress:
        bar = Progress(desc, unit="B")
        return bar, bar
    return None, None


def fetch(url: str, dest: str | os.PathLike[str], sha256: str | None = None,
          size: int | None = None,
          retries: int = 8, stall_seconds: int = 30,
          progress: bool | Callable[[int, int], Any] = True) -> dict[str, Any]:
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


def fetch_dataset(url: str, dest_dir: str | os.PathLike[str], retries: int = 8,
                  stall_seconds: int = 30,
                  progress: bool | Callable[[int, int], Any] = True) -> dict[str, Any]:
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


def push(dataset: str | os.PathLike[str], url: str, *, overwrite: bool = False,
         part_mb: int = 16, retries: int = 8,
         progress: bool | Callable[[int, int], Any] = False) -> dict[str, Any]:
    """Uploads a built dataset to url (s3://bucket/prefix/), as `dsconvert push` does
    (docs/STORAGE.md): multipart parts of part_mb MiB (at least 5), every part's MD5 and each file's sha256
    checked, resumable after a kill, manifest.json last, so a reader never sees half a dataset;
    a re-push of the same dataset uploads nothing. A prefix holding another dataset or other
    objects is refused with nothing changed unless overwrite=True, which replaces only the
    dataset's own names. Returns the counts (files, files_uploaded, files_in_place,
    parts_uploaded, parts_resumed, bytes, bytes_uploaded, already_present).
    progress: False = quiet (default); True = tqdm.auto when installed, else plain lines; or a
    callable(done, total) in bytes, called after each part or file. Ctrl-C stops the push
    between requests, leaving what a killed push leaves (the next push resumes it), and raises
    KeyboardInterrupt."""
    if isinstance(part_mb, bool) or not isinstance(part_mb, int) or part_mb < 1:
        raise ValueError(f"part_mb must be a positive int (MiB; at least S3's 5 are used), "
                         f"got {part_mb!r}")
    bar = None
    if callable(progress):
        hook = progress
    elif progress:
        bar = hook = Progress(f"push {os.fspath(dataset)}", unit="B")
    else:
        hook = None
    try:
        return dict(_dspipe.push(os.fspath(dataset), url, part_mb << 20, retries, overwrite,
                                 hook))
    finally:
        if bar is not None:
            bar.close()


def info(path: str | os.PathLike[str]) -> dict[str, Any]:
    """Describes a dataset: count, shape (channels, height, width), storage, sample_type
    ("uint8", "uint16", "int16" or "float32": the stored samples), mask_type ("uint8" or
    "uint16"; None without masks), mean, std (pixel units: 0-255 for uint8, the source's values
    for deeper types; None when unknown), min, max, percentile_00_5, percentile_99_5 (per
    channel, same units; the percentiles for integer samples only; None when the manifest has
    none), classes (mask classes), class_names, has_masks, has_labels."""
    return _dspipe.info(os.fspath(path))


def slice_table(path: str | os.PathLike[str]) -> dict[str, Any]:
    """A dataset built from volumes, record by record (docs/VOLUMES.md; the C++
    ReadSliceTable): "volume" and "slice" (int64 arrays, one entry per record: its volume, an
    index into "volumes", and its slice along "slice_axis", the centre one with context),
    "foreground" (uint32, records x classes: the pixels of each class id in the record's label
    slice after mask_map, column 0 the background, so a row sums to the slice's pixels; None
    for a dataset without labels), "volumes" (the manifest's volumes list: image, label, shape,
    spacing, affine, records, kept), "slice_axis", "context" and "skip_empty" (the build's).

    Per-record sampling weights from it, for Loader(weights=...):

        fg = dspipe.slice_table(path)["foreground"]
        weights = np.where(fg[:, 1:].sum(axis=1) > 0, 1.0, 0.1)  # slices with foreground 10x

    Raises ValueError for a dataset not built from volumes."""
    t = dict(_dspipe.slice_table(os.fspath(path)))
    t["volumes"] = json.loads(t.pop("volumes_json"))
    return t


def sources(path: str | os.PathLike[str]) -> list[str]:
    """The source file of each record, in index order (the C++ ReadRecordSources), so a
    batch's "index" leads back to the file it came from:

        files = dspipe.sources(path)
        print(files[int(batch["index"][0])])

    Files are named as rejected.tsv names them (the source path as given to build, then the
    file; "SRC key K" for a plain LMDB source; each slice of a volume names the volume: its
    slice is in slice_table). "" for records without an entry: plain LMDBs, and datasets built
    before dspipe kept the table."""
    return _dspipe.sources(os.fspath(path))


def describe(path: str | os.PathLike[str]) -> str:
    """The text `dsconvert info` prints."""
    return _dspipe.describe(os.fspath(path))


def cuda_status() -> dict[str, Any]:
    """{"usable": bool, "reason": why not ("" when usable), "devices": count}."""
    usable, reason, devices = _dspipe.cuda_available()
    return {"usable": usable, "reason": reason, "devices": devices}


def build_info() -> dict[str, Any]:
    """Version, build type, whether CUDA was compiled in, usable CPUs, oneTBB concurrency."""
    return dict(_dspipe.build_info())


build.__doc__ = (build.__doc__ or "").replace("{options}", _options.docs(
    _options.BUILD, {"BuildOptions": _dspipe.BuildOptions(),
                     "PlainLmdbOptions": _dspipe.BuildOptions().plain}))
verify.__doc__ = (verify.__doc__ or "").replace("{options}", _options.docs(
    _options.VERIFY, {"VerifyOptions": _dspipe.VerifyOptions()}))
