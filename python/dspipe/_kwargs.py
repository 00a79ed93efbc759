# SPDX-License-Identifier: Apache-2.0
"""Types of the keyword arguments of dspipe.Loader, dspipe.build and dspipe.verify, for type
checkers (**options: Unpack[LoaderArgs]). The names and fields are dspipe/_options.py's tables;
tests/python/test_options.py checks these TypedDicts hold exactly those keywords.
"""
from __future__ import annotations

import os
from typing import Any, Mapping, Sequence, TypedDict, Union

_Path = Union[str, "os.PathLike[str]"]
_Floats = Union[float, Sequence[float]]


class _PlainArgs(TypedDict, total=False):
    image_key: str
    mask_key: str
    masks: _Path
    labels: _Path
    detect_masks: bool
    scan_keys: bool
    ignore_keys: str


class LoaderArgs(_PlainArgs, total=False):
    batch_size: int
    threads: int
    prefetch: int
    readahead: int
    shuffle: bool
    seed: int
    world_size: int | None
    rank: int | None
    remainder: str
    order: str
    block_size: int
    weights: Sequence[float] | None
    num_samples: int
    replacement: bool
    drop_last: bool
    size: tuple[int, int] | None
    channels: int
    hflip: float
    vflip: float
    crop_scale: tuple[float, float]
    crop_ratio: tuple[float, float]
    resize_shorter: int
    interpolation: str
    transform: Any  # a dspipe.transforms or albumentations pipeline, its dict or JSON; None
    mean: _Floats | None
    std: _Floats | None
    max_corrupt: int
    cache: _Path
    cache_limit: int
    cache_overlap: bool
    stream_ahead: int
    verify_crc: bool
    max_readers: int
    os_readahead: bool
    lazy_shards: bool
    device: Any  # "auto", "cpu", "cuda", "cuda:N", an int or a torch.device
    dtype: str
    mask_dtype: str
    slots: int
    max_slots: int
    pin_memory: bool | None
    output: str | None
    normalize: bool | None


class BuildArgs(_PlainArgs, total=False):
    staging: _Path
    store: str
    compression: str
    zstd_level: int
    resize: tuple[int, int] | None
    max_side: int
    jpeg_quality: int
    jpeg_restarts: bool
    gray: bool
    depth: int | None
    pages_as_channels: bool
    mask_map: Mapping[int, int] | str | None
    slice_axis: str
    skip_empty: bool
    allow_empty_classes: bool
    drop_alpha: bool
    context: int
    spacing: tuple[float, float] | float | None
    slice_size: tuple[int, int] | int | None
    shuffle: bool
    seed: int
    threads: int
    shards: int
    shard_index: int | None
    resume: bool
    overwrite: bool
    on_error: str
    check: str
    stats_sample: int
    archive_buffer_mb: float
    commit_mb: float
    sync: bool


class VerifyArgs(TypedDict, total=False):
    threads: int
    max_listed: int
    file_sha256: bool
