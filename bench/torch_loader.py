#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""PyTorch DataLoader baseline: the loader a typical user writes, timed in steady state.

Usage: /usr/bin/python3 bench/torch_loader.py SOURCE --kind lmdb|plain|files [--batch 8]
           [--workers 2] [--batches N] [--warmup W] [--repeats R] [--json FILE]

kind=lmdb   a dspipe dataset (docs/FORMAT.md): one LMDB, or a sharded folder with manifest.json
kind=plain  an LMDB from the common recipe: keys str(i), values cv2.imencode('.png') bytes
kind=files  a folder with images/ and masks/ (e.g. `dsconvert synth` output), cv2.imread

Per sample, like dspipe's loader with flip + CPU normalize: read, decode (cv2.imdecode, or zstd
for raw records), BGR->RGB, random horizontal flip (p=0.5, same for the mask), float32 CHW
(x - mean) / std with numpy (mean/std from the manifest, else ImageNet constants on 0-255), the
mask as a uint8 tensor. DataLoader(shuffle=True, prefetch_factor=2, persistent_workers=True).
LMDB is opened lazily in each worker (never before fork), readonly/lock=False/readahead=False.

Timing: each repeat skips W batches, then times N batches: images/s = N * batch / wall time.
Reported: median, min and max over repeats; per-batch wait (time blocked in next()) in ms.
Needs Debian's python3-torch, python3-lmdb, python3-opencv, python3-numpy, python3-zstandard.
"""
import argparse
import json
import os
import random
import statistics
import struct
import sys
import time
import zlib

import cv2
import lmdb
import numpy as np
import torch
from torch.utils.data import DataLoader, Dataset

try:
    import zstandard  # Debian: python3-zstandard; only raw+zstd records need it
except ImportError:
    zstandard = None

# ImageNet mean/std on the 0-255 scale, RGB: the usual fallback when the data has no stats.
IMAGENET_MEAN = [123.675, 116.28, 103.53]
IMAGENET_STD = [58.395, 57.12, 57.375]
IMAGE_EXTS = {".png", ".jpg", ".jpeg", ".bmp", ".tif", ".tiff", ".webp"}
HEADER = struct.Struct("<4sBBBBIIiIII")  # docs/FORMAT.md "Record value", 32 bytes
CODEC_RAW, CODEC_ZSTD = 1, 2


def lmdb_open(path, max_dbs):
    return lmdb.open(path, readonly=True, lock=False, readahead=False, meminit=False,
                     max_dbs=max_dbs)


class Sample:
    """Shared per-sample work: flip + normalize, exactly what the user writes."""

    def __init__(self, mean, std):
        self.mean = np.asarray(mean, np.float32).reshape(1, 1, -1)
        self.std = np.asarray(std, np.float32).reshape(1, 1, -1)

    def finish(self, img, mask):
        if random.random() < 0.5:  # torch seeds `random` per worker
            img = img[:, ::-1]
            if mask is not None:
                mask = mask[:, ::-1]
        x = (img.astype(np.float32) - self.mean) / self.std
        x = torch.from_numpy(np.ascontiguousarray(x.transpose(2, 0, 1)))
        if mask is None:
            return x
        mask = np.ascontiguousarray(mask)
        if not mask.flags.writeable:  # a raw record's buffer: torch wants writable memory
            mask = mask.copy()
        return x, torch.from_numpy(mask)


def decode_bgr(buf, path):
    img = cv2.imdecode(np.frombuffer(buf, np.uint8), cv2.IMREAD_COLOR)
    if img is None:
        raise RuntimeError(f"{path}: cv2.imdecode failed")
    return img


class DspipeLmdb(Dataset, Sample):
    """A dspipe dataset (single LMDB or sharded folder) read with the Python lmdb package."""

    def __init__(self, path, verify_crc=False):
        self.path, self.verify_crc = path, verify_crc
        if os.path.isfile(os.path.join(path, "manifest.json")):
            with open(os.path.join(path, "manifest.json")) as f:
                manifest = json.load(f)
            if "shards" in manifest:  # a sharded folder
                self.shards = [(os.path.join(path, s["name"]), s["begin"], s["end"])
                               for s in manifest["shards"]]
            else:  # one LMDB whose manifest.json sits beside its data.mdb (with "files")
                self.shards = [(path, 0, manifest["count"])]
        else:
            env = lmdb_open(path, 2)  # read the manifest, then close before any fork
            with env.begin() as txn:
                raw = txn.get(b"manifest", db=env.open_db(b"meta", txn=txn, create=False))
            env.close()
            if raw is None:
                raise RuntimeError(f"{path}: no meta/manifest (not a dspipe dataset?)")
            manifest = json.loads(raw)
            self.shards = [(path, 0, manifest["count"])]
        if not manifest.get("complete"):
            raise RuntimeError(f"{path}: manifest says the dataset is incomplete")
        self.count = manifest["count"] if "shards" not in manifest else self.shards[-1][2]
        stats = manifest.get("stats") or {}
        Sample.__init__(self, stats.get("mean") or IMAGENET_MEAN, stats.get("std") or IMAGENET_STD)
        self.envs = None  # opened lazily, per worker process

    def __len__(self):
        return self.count

    def _get(self, i):
        if self.envs is None:
            self.envs = []
            for p, begin, end in self.shards:
                env = lmdb_open(p, 2)
                self.envs.append((env, env.open_db(b"records", create=False), begin, end))
        for env, db, begin, end in self.envs:
            if begin <= i < end:
                with env.begin(buffers=False) as txn:
                    v = txn.get(struct.pack(">Q", i), db=db)
                if v is None:
                    raise KeyError(f"{self.path}: record {i} missing")
                return v
        raise IndexError(i)

    def _payload(self, buf, codec, h, w, c, what, i):
        if codec in (CODEC_RAW, CODEC_ZSTD):
            if codec == CODEC_ZSTD:
                if zstandard is None:
                    raise RuntimeError(f"{self.path}: record {i}: raw+zstd needs python3-zstandard")
                buf = zstandard.decompress(buf)
            return np.frombuffer(buf, np.uint8).reshape((h, w, c) if c > 1 else (h, w))
        flag = cv2.IMREAD_COLOR if c == 3 else cv2.IMREAD_GRAYSCALE
        out = cv2.imdecode(np.frombuffer(buf, np.uint8), flag)
        if out is None:
            raise RuntimeError(f"{self.path}: record {i}: {what} does not decode")
        return cv2.cvtColor(out, cv2.COLOR_BGR2RGB) if c == 3 else out

    def __getitem__(self, i):
        v = self._get(i)
        magic, _, icodec, mcodec, c, h, w, _, isz, msz, crc = HEADER.unpack_from(v)
        if magic != b"DSR1" or len(v) != 32 + isz + msz:
            raise RuntimeError(f"{self.path}: record {i}: bad header")
        if self.verify_crc and zlib.crc32(memoryview(v)[32:], zlib.crc32(v[:28])) != crc:
            raise RuntimeError(f"{self.path}: record {i}: CRC mismatch")
        mv = memoryview(v)  # slices without copying the payloads
        img = self._payload(mv[32:32 + isz], icodec, h, w, c, "image", i)
        if c == 1:
            img = img[:, :, None]
        mask = self._payload(mv[32 + isz:], mcodec, h, w, 1, "mask", i) if mcodec else None
        return self.finish(img, mask)


class PlainLmdb(Dataset, Sample):
    """The common recipe: main database, keys str(i), values encoded image bytes; no masks."""

    def __init__(self, path):
        self.path = path
        env = lmdb_open(path, 0)
        self.count = env.stat()["entries"]
        env.close()
        Sample.__init__(self, IMAGENET_MEAN, IMAGENET_STD)
        self.env = None

    def __len__(self):
        return self.count

    def __getitem__(self, i):
        if self.env is None:
            self.env = lmdb_open(self.path, 0)
        with self.env.begin(buffers=False) as txn:
            v = txn.get(str(i).encode())
        if v is None:
            raise KeyError(f"{self.path}: key {i} missing")
        img = cv2.cvtColor(decode_bgr(v, f"{self.path}: key {i}"), cv2.COLOR_BGR2RGB)
        return self.finish(img, None)


class Files(Dataset, Sample):
    """images/ + masks/ pairs (same sorted order), read with cv2.imread."""

    def __init__(self, path):
        def listing(sub):
            d = os.path.join(path, sub)
            return sorted(os.path.join(d, n) for n in os.listdir(d)
                          if os.path.splitext(n)[1].lower() in IMAGE_EXTS)
        self.images = listing("images")
        self.masks = listing("masks") if os.path.isdir(os.path.join(path, "masks")) else None
        if self.masks is not None and len(self.masks) != len(self.images):
            raise RuntimeError(f"{path}: {len(self.images)} images but {len(self.masks)} masks")
        Sample.__init__(self, IMAGENET_MEAN, IMAGENET_STD)

    def __len__(self):
        return len(self.images)

    def __getitem__(self, i):
        img = cv2.imread(self.images[i], cv2.IMREAD_COLOR)
        if img is None:
            raise RuntimeError(f"{self.images[i]}: cv2.imread failed")
        img = cv2.cvtColor(img, cv2.COLOR_BGR2RGB)
        mask = None
        if self.masks is not None:
            mask = cv2.imread(self.masks[i], cv2.IMREAD_GRAYSCALE)
            if mask is None:
                raise RuntimeError(f"{self.masks[i]}: cv2.imread failed")
        return self.finish(img, mask)


def endless(loader):
    while True:
        yield from loader


def measure(args):
    if args.kind == "lmdb":
        ds = DspipeLmdb(args.source, args.verify_crc)
    elif args.kind == "plain":
        ds = PlainLmdb(args.source)
    else:
        ds = Files(args.source)
    if len(ds) < args.batch:
        sys.exit(f"torch_loader: {args.source}: {len(ds)} samples < batch {args.batch}")
    torch.manual_seed(args.seed)
    random.seed(args.seed)
    mp = {"prefetch_factor": 2, "persistent_workers": True} if args.workers else {}
    loader = DataLoader(ds, batch_size=args.batch, shuffle=True, num_workers=args.workers,
                        pin_memory=torch.cuda.is_available(), drop_last=True, **mp)
    it = endless(loader)
    rates, waits = [], []
    for _ in range(args.repeats):
        for _ in range(args.warmup):
            next(it)
        t0 = time.perf_counter()
        for _ in range(args.batches):
            t = time.perf_counter()
            b = next(it)
            waits.append((time.perf_counter() - t) * 1e3)
            x = b[0] if isinstance(b, (list, tuple)) else b
            assert x.dtype == torch.float32 and x.shape[0] == args.batch
        rates.append(args.batches * args.batch / (time.perf_counter() - t0))
    waits.sort()
    return {
        "tool": "torch_dataloader", "kind": args.kind, "source": os.path.abspath(args.source),
        "batch": args.batch, "workers": args.workers, "samples": len(ds),
        "n_batches": args.batches, "warmup": args.warmup, "repeats": args.repeats,
        "images_per_s": {"median": statistics.median(rates), "min": min(rates),
                         "max": max(rates), "all": rates},
        "batch_ms": {"mean": statistics.fmean(waits), "p50": waits[len(waits) // 2],
                     "p95": waits[min(len(waits) - 1, int(len(waits) * 0.95))],
                     "max": waits[-1]},
        "versions": {"torch": torch.__version__, "opencv": cv2.__version__,
                     "numpy": np.__version__, "python": sys.version.split()[0]},
    }


def main(argv):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("source")
    ap.add_argument("--kind", choices=["lmdb", "plain", "files"], required=True)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--batches", type=int, default=64, help="timed batches per repeat")
    ap.add_argument("--warmup", type=int, default=8, help="untimed batches before each repeat")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--verify-crc", action="store_true", help="kind=lmdb: check record CRCs")
    ap.add_argument("--json", help="write the result here")
    args = ap.parse_args(argv)
    if min(args.batch, args.batches, args.repeats) < 1 or args.warmup < 0 or args.workers < 0:
        ap.error("--batch, --batches, --repeats must be >= 1; --warmup, --workers >= 0")
    if not os.path.exists(args.source):
        sys.exit(f"torch_loader: {args.source}: no such file or directory")
    r = measure(args)
    ips, ms = r["images_per_s"], r["batch_ms"]
    print(f"torch_dataloader {args.kind:5s} {args.source}: {ips['median']:.1f} images/s "
          f"(min {ips['min']:.1f}, max {ips['max']:.1f}; {args.repeats} x {args.batches} batches "
          f"of {args.batch}, {args.workers} workers); wait {ms['mean']:.2f} ms/batch mean")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(r, f, indent=1)


if __name__ == "__main__":
    main(sys.argv[1:])
