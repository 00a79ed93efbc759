# SPDX-License-Identifier: Apache-2.0
"""The keyword arguments of dspipe.Loader, dspipe.build and dspipe.verify, each beside the C++
option field it sets (include/dspipe/option_fields.h lists those fields).

One table per call: keyword -> Kwarg(the "Struct::field" names it sets, a converter from the
Python value, a one-line description). fill() writes the values into the bound options structs
(dspipe._dspipe.LoaderOptions, ...), whose defaults are the C++ defaults; unknown names are
refused with the close ones. NOT_KWARGS holds the fields with no keyword, each with the reason.
tests/python/test_options.py fails when a C++ field is in neither (a new field needs one line
here) and when docs/PYTHON.md lacks a keyword.

Adding a keyword: one line in the table (+ a row in docs/PYTHON.md's option table).
"""
from __future__ import annotations

import difflib
import operator
import os
import warnings
from dataclasses import dataclass
from typing import Any, Callable, Mapping

from . import _dspipe, transforms


def _same(v: Any) -> Any:
    return v


def _path(v: Any) -> str:
    return os.fspath(v)


def _floats(v: Any) -> list[float]:
    """One value (every channel) or one per channel."""
    if isinstance(v, (int, float)):
        return [float(v)]
    return [float(x) for x in v]


def _weights(v: Any) -> list[float]:
    """Per-sample weights: a sequence or a 1-D numpy array (None: no weights)."""
    if v is None:
        return []
    if hasattr(v, "tolist"):
        v = v.tolist()
    return [float(x) for x in v]


def _pair(v: Any) -> tuple[float, float]:
    lo, hi = v
    return float(lo), float(hi)


def _size(v: Any) -> tuple[int, int]:
    """(height, width); None = the dataset's."""
    if v is None:
        return 0, 0
    h, w = v
    return int(h), int(w)


def _square_or_size(v: Any) -> tuple[int, int]:
    """(height, width), or one number for both; None = keep."""
    if v is None:
        return 0, 0
    if not hasattr(v, "__len__"):
        return operator.index(v), operator.index(v)
    h, w = v
    return operator.index(h), operator.index(w)


def _spacing(v: Any) -> tuple[float, float]:
    """(between rows, between columns) in mm, or one number for both; None = keep."""
    if v is None:
        return 0.0, 0.0
    if isinstance(v, (int, float)):
        return float(v), float(v)
    r, c = v
    return float(r), float(c)


def _mask_map(v: Any) -> str:
    """{255: 1} (or "255:1") -> "255:1"; None or {} = keep the ids."""
    if v is None:
        return ""
    if isinstance(v, str):
        return v
    if not isinstance(v, Mapping):
        raise ValueError(f"expected a dict of mask ids {{from: to}}, e.g. {{255: 1}}, got {v!r}")
    pairs = []
    for k, t in v.items():
        if isinstance(k, bool) or isinstance(t, bool) or not isinstance(k, int) or \
                not isinstance(t, int):
            raise ValueError(f"mask ids are integers 0..255, got {k!r}: {t!r}")
        pairs.append(f"{k}:{t}")
    return ",".join(pairs)


def _enum(cls: Any) -> Callable[[Any], Any]:
    def convert(v: Any) -> Any:
        if isinstance(v, cls):
            return v
        if isinstance(v, str) and v in cls.__members__:
            return cls[v]
        names = ", ".join(repr(n) for n in cls.__members__)
        raise ValueError(f"expected one of {names}, got {v!r}")
    return convert


def _choice(mapping: Mapping[str, Any]) -> Callable[[Any], Any]:
    def convert(v: Any) -> Any:
        if v in mapping:
            return mapping[v]
        names = ", ".join(repr(n) for n in mapping)
        raise ValueError(f"expected one of {names}, got {v!r}")
    return convert


def _normalize(v: Any) -> Any:
    """None (albumentations' meaning under a transform, else the dataset's statistics), True
    (the dataset's statistics), False (none: 0..255 floats) -> LoaderOptions::mean_std."""
    values = {None: "auto", True: "dataset", False: "identity"}
    if v is not None and not isinstance(v, bool):
        raise ValueError(f"expected None, True or False, got {v!r}")
    return getattr(E.MeanStdSource, values[v])


def _transform(v: Any) -> str:
    """A dspipe.transforms or albumentations pipeline, its dict or JSON text; None = none."""
    return "" if v is None else transforms.spec_json(v)


def _mib(v: Any) -> int:
    return int(max(0.0, float(v)) * (1 << 20))


@dataclass(frozen=True)
class Kwarg:
    fields: tuple[str, ...]            # "Struct::field", in the order convert() returns values
    convert: Callable[[Any], Any]      # the Python value -> the field's value (a tuple for two)
    doc: str
    shown: str | None = None           # the default as Python spells it, when not the C++ value


def K(fields: str, doc: str, convert: Callable[[Any], Any] = _same,
      shown: str | None = None) -> Kwarg:
    return Kwarg(tuple(fields.split()), convert, doc, shown)


E = _dspipe
# Shared by Loader and build: how a plain LMDB's keys pair into samples (docs/FORMAT.md).
PLAIN = {
    "image_key": K("PlainLmdbOptions::image_key", "plain LMDB: image key pattern, e.g. 'img_{id}'"),
    "mask_key": K("PlainLmdbOptions::mask_key",
                  "plain LMDB: mask key pattern, e.g. '{key}_mask' or 'mask_{id}'"),
    "masks": K("PlainLmdbOptions::masks", "plain LMDB: a second LMDB holding the masks", _path),
    "labels": K("PlainLmdbOptions::labels", "plain LMDB: a key,label CSV file", _path),
    "detect_masks": K("PlainLmdbOptions::detect_masks",
                      "plain LMDB: pair keys like K_mask / mask_K automatically"),
    "scan_keys": K("PlainLmdbOptions::scan_keys",
                   "plain LMDB: list every key at open even when they are dense decimals"),
    "ignore_keys": K("PlainLmdbOptions::ignore_keys",
                     "plain LMDB: keys that are not samples, comma-separated globs, e.g. 'meta_*'"),
}

LOADER: dict[str, Kwarg] = {
    "batch_size": K("LoaderOptions::batch_size", "samples per batch"),
    "threads": K("LoaderOptions::threads", "worker threads; 0 = the CPUs this process may use"),
    "prefetch": K("LoaderOptions::prefetch", "batches produced ahead of the loop"),
    "readahead": K("LoaderOptions::readahead",
                   "samples read ahead along the order; -1 = prefetch x batch_size, 0 = off"),
    "shuffle": K("SamplerOptions::shuffle", "a fresh order every epoch, from (seed, epoch)"),
    "seed": K("SamplerOptions::seed", "order and augmentation seed"),
    "world_size": K("SamplerOptions::world_size",
                    "ranks; None = torch.distributed, then $WORLD_SIZE, then 1", shown="None"),
    "rank": K("SamplerOptions::rank", "this rank; None = torch.distributed, then $RANK, then 0",
              shown="None"),
    "remainder": K("SamplerOptions::remainder",
                   "samples that do not divide across ranks: 'pad', 'drop', 'uneven'",
                   _enum(E.RemainderRule)),
    "order": K("SamplerOptions::order", "how an epoch is cut across ranks: 'global', 'blocks', "
               "'shards' (docs/SCALE.md), or 'weighted' (draws by weights=)",
               _enum(E.SampleOrder)),
    "block_size": K("SamplerOptions::block_size", "order='blocks': indices per block"),
    "weights": K("SamplerOptions::weights", "order='weighted': one weight per sample (a "
                 "sequence or numpy array); each epoch draws with these probabilities",
                 _weights, "None"),
    "num_samples": K("SamplerOptions::num_samples", "order='weighted': draws per epoch; 0 = "
                     "the dataset's size (without replacement: every sample of nonzero weight)"),
    "replacement": K("SamplerOptions::replacement",
                     "order='weighted': draw with replacement (torch's WeightedRandomSampler)"),
    "drop_last": K("LoaderOptions::drop_last", "drop this rank's last short batch"),
    "size": K("LoaderOptions::height LoaderOptions::width",
              "output (height, width); None = the dataset's; others are resized", _size, "None"),
    "channels": K("LoaderOptions::channels", "image channels: 0 = the dataset's, 1 or 3 (converts)"),
    "hflip": K("AugmentOptions::hflip", "horizontal flip probability (image and mask)"),
    "vflip": K("AugmentOptions::vflip", "vertical flip probability (image and mask)"),
    "crop_scale": K("AugmentOptions::crop_scale_min AugmentOptions::crop_scale_max",
                    "random resized crop: area fraction (min, max), e.g. (0.08, 1); (1, 1) = off",
                    _pair),
    "crop_ratio": K("AugmentOptions::crop_ratio_min AugmentOptions::crop_ratio_max",
                    "random resized crop: aspect ratio (w/h) range (min, max)", _pair),
    "resize_shorter": K("AugmentOptions::resize_shorter",
                        "validation geometry: scale the shorter side to this, then centre-crop "
                        "the output size (torchvision Resize + CenterCrop); 0 = off"),
    "interpolation": K("AugmentOptions::image_interpolation",
                       "image resampling: 'nearest', 'linear', 'area', 'cubic' (masks: nearest)",
                       _enum(E.Interpolation)),
    "transform": K("LoaderOptions::transform", "an albumentations 2.0.8 pipeline run in C++ "
                   "(dspipe.transforms or albumentations Compose, its dict or JSON) instead of "
                   "hflip/vflip/crop_*/resize_shorter; docs/TRANSFORMS.md", _transform, "None"),
    "mean": K("LoaderOptions::mean", "per-channel mean in pixel units (0..255), one value or one "
              "per channel; None = the dataset's statistics", _floats, "None"),
    "std": K("LoaderOptions::std", "per-channel std in pixel units; None = the dataset's", _floats,
             "None"),
    "normalize": K("LoaderOptions::mean_std", "None: a transform= pipeline's Normalize, or none "
                   "when it has none (albumentations' meaning: 0..255 floats), else the dataset's "
                   "statistics; True: the dataset's statistics (also under a transform); False: "
                   "none, 0..255 floats (a pipeline's Normalize still applies)", _normalize,
                   "None"),
    "max_corrupt": K("LoaderOptions::max_corrupt", "corrupt records skipped per epoch"),
    "cache": K("LoaderOptions::cache", "RAM-disk cache: 'off', 'auto' (/dev/shm) or a directory",
               _path),
    "cache_limit": K("LoaderOptions::cache_limit", "capacity of the cache directory in bytes; "
                     "0 = only the budget"),
    "cache_overlap": K("LoaderOptions::cache_overlap", "read in place while the cache copy is "
                       "made (False: copy before the first batch)"),
    "stream_ahead": K("LoaderOptions::stream_ahead", "remote sharded datasets in order "
                      "'shards'/'blocks': shards fetched at once ahead of the reader"),
    "verify_crc": K("DatasetOpenOptions::verify_crc", "check each record's CRC-32 on every read"),
    "max_readers": K("DatasetOpenOptions::max_readers", "LMDB reader slots per environment"),
    "os_readahead": K("DatasetOpenOptions::os_readahead", "OS readahead on the LMDB map"),
    "lazy_shards": K("DatasetOpenOptions::lazy_shards",
                     "sharded datasets: open a shard at its first read (order='shards' does)"),
    **PLAIN,
    "device": K("DeviceOptions::device",
                "'auto' (the current CUDA device, else the CPU), 'cpu', 'cuda', 'cuda:N', N",
                shown="'auto'"),
    "dtype": K("DeviceOptions::dtype", "images 'float32' or 'float16'", _enum(E.ImageDtype),
               shown="'float32'"),
    "mask_dtype": K("DeviceOptions::mask_dtype", "masks 'int64' or 'uint8'", _enum(E.MaskDtype),
                    shown="'int64'"),
    "slots": K("DeviceOptions::slots", "batch buffer sets made up front"),
    "max_slots": K("DeviceOptions::max_slots", "most batches held at once; 0 = no limit"),
    "pin_memory": K("DeviceOptions::pin_memory", "CPU path: page-locked batches for "
                    "non_blocking copies; None = True when torch sees CUDA", shown="None"),
}
# Keywords with no C++ field of their own.
LOADER_PYTHON = {
    "output": "'torch', 'numpy' or 'dlpack'; None = 'torch' when torch imports",
}

BUILD: dict[str, Kwarg] = {
    "source": K("BuildOptions::source", "SRC: folder, CSV, ImageFolder, plain LMDB or archive",
                _path),
    "output": K("BuildOptions::output", "the dataset to write: a directory, or "
                "s3://bucket/prefix/ (built in staging, pushed, staging removed)", _path),
    "staging": K("BuildOptions::staging", "output s3://...: the local directory it is built in; "
                 "'' = a private one (0700) in the temp dir, named after the URL", _path),
    "store": K("BuildOptions::store", "'encoded' (the files' bytes) or 'raw' (pixels)",
               _enum(E.StoreMode)),
    "compression": K("BuildOptions::compression", "store='raw': 'zstd' or 'none'",
                     _enum(E.Compression)),
    "zstd_level": K("BuildOptions::zstd_level", "store='raw' + zstd: 1 (fast) .. 22 (small)"),
    "resize": K("BuildOptions::resize_height BuildOptions::resize_width",
                "(height, width) to store; None = keep", _size, "None"),
    "max_side": K("BuildOptions::max_side", "shrink images whose longer side exceeds this "
                  "(aspect kept); 0 = off"),
    "jpeg_quality": K("BuildOptions::jpeg_quality", "1..100: store every image as a JPEG of "
                      "this quality; 0 = keep (re-encoded ones as PNG)"),
    "jpeg_restarts": K("BuildOptions::jpeg_restarts", "store JPEGs with a restart marker after "
                       "every MCU (lossless), so crops decode only their MCUs"),
    "gray": K("BuildOptions::gray", "store 1-channel images"),
    "depth": K("BuildOptions::depth", "8: reduce 16-bit images to their high byte; None = "
               "the source's own (16-bit and float images kept as they are)",
               lambda v: 0 if v is None else int(v), shown="None"),
    "pages_as_channels": K("BuildOptions::pages_as_channels", "stack the pages of a "
                           "multi-page TIFF (16-bit or float) as channels; without it such "
                           "TIFFs are refused"),
    "mask_map": K("BuildOptions::mask_map", "mask ids to rewrite, {from: to} (ids 0..255; "
                  "{255: 1} turns 0/255 binary masks into classes 0 and 1); None = keep",
                  _mask_map, "None"),
    "slice_axis": K("BuildOptions::slice_axis", "volume sources: cut the canonical (RAS) "
                    "volume along 'axial', 'coronal' or 'sagittal'"),
    "skip_empty": K("BuildOptions::skip_empty", "volume sources with labels: leave out the "
                    "slices whose label is all 0 (after mask_map); the manifest lists the kept "
                    "ones"),
    "allow_empty_classes": K("BuildOptions::allow_empty_classes", "class subfolders: keep a "
                             "class folder holding no image as a label with no samples "
                             "(torchvision's allow_empty=True); refused otherwise"),
    "drop_alpha": K("BuildOptions::drop_alpha", "8-bit images with transparent pixels: store "
                    "the colour channels and drop the alpha (refused otherwise; an opaque alpha "
                    "is dropped without loss)"),
    "context": K("BuildOptions::context", "volume sources: 2.5D, the K slices on each side of a "
                 "record's slice as channels too (2K+1 slices, slice-major, clamped at the ends)"),
    "spacing": K("BuildOptions::spacing_rows BuildOptions::spacing_cols",
                 "volume sources: resample slices in plane to (rows, cols) mm, or one number "
                 "for both (images bilinear, stored float32; labels nearest; as MONAI's "
                 "Spacingd); None = the volumes' own", _spacing, "None"),
    "slice_size": K("BuildOptions::slice_height BuildOptions::slice_width",
                    "volume sources: pad or crop every slice about its centre to (height, "
                    "width), or one number for both (after spacing; padding 0; as MONAI's "
                    "ResizeWithPadOrCropd); None = the slices' own", _square_or_size, "None"),
    "shuffle": K("BuildOptions::shuffle", "record order = a seeded permutation"),
    "seed": K("BuildOptions::seed", "the permutation's seed"),
    "threads": K("BuildOptions::threads", "workers; 0 = the CPUs this process may use"),
    "shards": K("BuildOptions::shards", ">1: a sharded dataset directory"),
    "shard_index": K("BuildOptions::shard_index", "build only this shard; None = all",
                     lambda v: -1 if v is None else int(v), shown="None"),
    "resume": K("BuildOptions::resume", "continue an interrupted build"),
    "overwrite": K("BuildOptions::overwrite", "replace an existing output"),
    "on_error": K("BuildOptions::on_error", "'fail' or 'skip' (rejected files in rejected.tsv)",
                  _enum(E.OnError)),
    "check": K("BuildOptions::check", "'header' or 'decode' (decode every image)",
               _enum(E.CheckLevel)),
    "stats_sample": K("BuildOptions::stats_sample", "encoded: images sampled for mean/std"),
    "archive_buffer_mb": K("BuildOptions::archive_buffer_bytes",
                           "archive sources: MiB of member data kept in memory", _mib, "512"),
    "commit_mb": K("BuildOptions::commit_bytes", "MiB per LMDB transaction", _mib, "64"),
    "sync": K("BuildOptions::sync", "fsync before the manifest is written"),
    **PLAIN,
}

VERIFY: dict[str, Kwarg] = {
    "threads": K("VerifyOptions::threads", "workers; 0 = all cores"),
    "max_listed": K("VerifyOptions::max_listed", "bad records listed (all are counted)"),
    "file_sha256": K("VerifyOptions::file_sha256", "check every listed file's sha256"),
}

# C++ fields no keyword sets, and why.
NOT_KWARGS = {
    "LoaderOptions::defer_hflip": "the DeviceLoader sets it for its path",
    "LoaderOptions::normalize": "the DeviceLoader sets it for its path (normalize= is "
                                "LoaderOptions::mean_std)",
    "LoaderOptions::allocator": "pin_memory chooses it",
    "DatasetOpenOptions::resolve_shard": "a callback the cache sets (order='shards')",
    "DeviceOptions::consumer_stream": "the current torch CUDA stream at creation",
    "CacheOptions::mode": "cache=",
    "CacheOptions::cache_limit": "cache_limit=",
    "CacheOptions::margin": "the C++ default (512 MiB)",
    "CacheOptions::reserved_ram": "the loader's estimate of its buffers",
    "CacheOptions::env": "C++ only: the file system seam for fault tests",
    "CacheOptions::masks": "masks= (cached with the images)",
    "BuildOptions::progress": "build(progress=...) (a bar, quiet, or a callable)",
    "BuildOptions::cancelled": "Ctrl-C: KeyboardInterrupt stops the build (resumable)",
    "VerifyOptions::cancelled": "Ctrl-C: KeyboardInterrupt stops the check",
    "BuildOptions::env": "C++ only: the file system seam for fault tests",
}


def option_names() -> dict[str, str]:
    """"Struct::field" -> the keyword that sets it (what messages name)."""
    names: dict[str, str] = {}
    for table in (VERIFY, BUILD, LOADER):  # Loader's names win for shared structs
        for kw, k in table.items():
            for f in k.fields:
                names[f] = kw
    # A build to s3:// pushes with PushOptions::overwrite = build(overwrite=...).
    names["PushOptions::overwrite"] = "overwrite"
    # Values Python spells otherwise: the whole "keyword=value" for "Struct::field=value".
    names["LoaderOptions::mean_std=auto"] = "normalize=None"
    names["LoaderOptions::mean_std=dataset"] = "normalize=True"
    names["LoaderOptions::mean_std=identity"] = "normalize=False"
    return names


# Keywords renamed to the one vocabulary (docs/reference/glossary.md): call -> {old: new}. The
# old name works for one release with a DeprecationWarning naming the new one.
RENAMED: dict[str, dict[str, str]] = {
    "dspipe.Loader": {"num_threads": "threads"},
    "dspipe.ray.convert": {"num_shards": "shards"},
}


def renamed(call: str, given: dict[str, Any]) -> dict[str, Any]:
    """given with each old keyword of call under its new name (a DeprecationWarning each); both
    spellings at once is a TypeError."""
    out = dict(given)
    for old, new in RENAMED.get(call, {}).items():
        if old not in out:
            continue
        if new in out:
            raise TypeError(f"{call}: {old}= and {new}= are one option; write {new}= only")
        warnings.warn(f"{call}({old}=) is deprecated: write {new}= (the same option); {old}= "
                      "goes in the next release", DeprecationWarning, stacklevel=3)
        out[new] = out.pop(old)
    return out


def refuse_unknown(call: str, given: Mapping[str, Any], known: list[str]) -> None:
    """TypeError naming each unknown keyword and the known ones closest to it."""
    unknown = [k for k in given if k not in known]
    if not unknown:
        return
    parts = []
    for name in unknown:
        close = difflib.get_close_matches(name, known, n=3, cutoff=0.6)
        parts.append(f"{name!r}" + (f" (did you mean {' or '.join(map(repr, close))}?)"
                                    if close else ""))
    raise TypeError(f"{call}: unknown keyword argument{'s' if len(unknown) > 1 else ''} "
                    f"{', '.join(parts)}; help({call}) lists all {len(known)}")


def fill(call: str, table: Mapping[str, Kwarg], values: Mapping[str, Any],
         structs: Mapping[str, Any]) -> None:
    """Sets each keyword's fields in structs ({"LoaderOptions": lo, ...}) by name."""
    for kw, value in values.items():
        k = table[kw]
        try:
            converted = k.convert(value)
        except (TypeError, ValueError) as e:
            raise ValueError(f"{call}({kw}={value!r}): {e}") from None
        parts = converted if len(k.fields) > 1 else (converted,)
        for field, v in zip(k.fields, parts):
            struct, name = field.split("::")
            try:
                setattr(structs[struct], name, v)
            except ValueError as e:  # a setter that checks (a transform pipeline's spec)
                raise ValueError(f"{call}({kw}=...): {e}") from None
            except TypeError:
                have = type(getattr(structs[struct], name)).__name__
                raise TypeError(f"{call}({kw}={value!r}): expected {have}") from None


def default(k: Kwarg, structs: Mapping[str, Any]) -> str:
    """The keyword's default: the C++ default of its fields (a pair for two), as Python writes it."""
    if k.shown is not None:
        return k.shown
    values = []
    for field in k.fields:
        struct, name = field.split("::")
        v = getattr(structs[struct], name)
        values.append(getattr(v, "name", v))
    return repr(values[0] if len(values) == 1 else tuple(values))


def docs(table: Mapping[str, Kwarg], structs: Mapping[str, Any],
         extra: Mapping[str, str] = {}) -> str:
    """One line per keyword: name [C++ default] C++ field: description."""
    lines = []
    for kw, k in table.items():
        lines.append(f"  {kw} [{default(k, structs)}] ({' '.join(k.fields)}): {k.doc}")
    for kw, doc in extra.items():
        lines.append(f"  {kw}: {doc}")
    return "\n".join(lines)
