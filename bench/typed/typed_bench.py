#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""16-bit CT slices through dspipe vs 8-bit ones and vs a PyTorch DataLoader, in one run.

Usage: /usr/bin/python3 bench/typed/typed_bench.py [--build-dir build] [--dir DIR]
           [--count 256] [--size 512] [--rounds 3] [--batches 32] [--warmup 4]

1. DIR/src16: --count synthetic 12-bit CT-like slices (an ellipse phantom of soft tissue, bone
   and air plus Gaussian noise, values 0..4095) saved as 16-bit gray PNGs, with 8-bit PNG masks
   (4 classes: the phantom's regions); DIR/src8: the same slices as 8-bit (v >> 4) with the same
   masks: the same geometry and content at the two depths. Reused when present.
2. Datasets with dsconvert: enc16 / raw16 (uint16, kept as they are), enc8 / raw8 (--gray).
3. Runs, --rounds times, interleaved (each round runs every configuration once):
     dspipe   dsbench --json on each dataset (batch 8, 2 threads, hflip 0.5, float32 NCHW
              (x - mean) / std with the manifest's mean/std, on the CPU)
     torch    a DataLoader (2 workers) over the 16-bit PNG files: cv2.imread(IMREAD_UNCHANGED),
              the same flip, float32 (x - mean) / std, the same batch
   the decode bound of each dspipe configuration (as bench/loader/loader_bench defines it: the
   read + decode time per sample of a one-thread dsbench run, as a rate, times 2 threads), and
   for reference zlib's inflate of the 16-bit PNGs' IDAT streams alone (one thread, times 2:
   dspipe inflates with libdeflate, which is faster than zlib).
4. Prints a markdown table: images/s median (min-max over the rounds) and the ratios.
Needs Debian's python3-torch, python3-opencv, python3-numpy and a build with dsconvert and
dsbench.
"""
import argparse
import json
import os
import statistics
import struct
import subprocess
import sys
import time
import zlib

import cv2
import numpy as np


def phantom(rng, size):
    """A 12-bit CT-like slice and its 4-class mask."""
    yy, xx = np.mgrid[0:size, 0:size].astype(np.float32) / size - 0.5
    body = (xx / 0.42) ** 2 + (yy / 0.34) ** 2 < 1
    cx, cy = rng.uniform(-0.1, 0.1, 2)
    organ = ((xx - cx) / 0.15) ** 2 + ((yy - cy) / 0.1) ** 2 < 1
    bone = np.abs(np.hypot(xx, yy + 0.2) - 0.08) < 0.015
    hu = np.full((size, size), 24.0, np.float32)  # air: -1000 HU + 1024
    hu[body] = 1024 + 40  # soft tissue
    hu[organ] = 1024 + 60 + rng.uniform(-20, 20)
    hu[bone] = 1024 + 900
    hu += rng.normal(0, 20, hu.shape).astype(np.float32)
    img = np.clip(hu, 0, 4095).astype(np.uint16)
    mask = np.zeros((size, size), np.uint8)
    mask[body] = 1
    mask[organ] = 2
    mask[bone] = 3
    return img, mask


def make_sources(d, count, size):
    if os.path.isdir(os.path.join(d, "src8", "masks")) and \
            len(os.listdir(os.path.join(d, "src8", "masks"))) == count:
        return
    rng = np.random.default_rng(0)
    for sub in ("src16/images", "src16/masks", "src8/images", "src8/masks"):
        os.makedirs(os.path.join(d, sub), exist_ok=True)
    for i in range(count):
        img, mask = phantom(rng, size)
        name = f"{i:05d}.png"
        assert cv2.imwrite(os.path.join(d, "src16/images", name), img)
        assert cv2.imwrite(os.path.join(d, "src8/images", name), (img >> 4).astype(np.uint8))
        for sub in ("src16/masks", "src8/masks"):
            assert cv2.imwrite(os.path.join(d, sub, name), mask)


def build(dsconvert, d):
    for name, src, extra in (("enc16", "src16", []), ("raw16", "src16", ["--store", "raw"]),
                             ("enc8", "src8", ["--gray"]),
                             ("raw8", "src8", ["--gray", "--store", "raw"])):
        out = os.path.join(d, name + ".lmdb")
        if not os.path.exists(os.path.join(out, "manifest.json")):
            subprocess.run([dsconvert, "build", os.path.join(d, src), out, "--overwrite"] + extra,
                           check=True, stdout=subprocess.DEVNULL)


def inflate_floor(files, threads):
    """images/s of zlib-inflating the PNGs' IDAT streams alone, one thread, times threads."""
    streams = []
    for f in files:
        b = open(f, "rb").read()
        at, idat = 8, bytearray()
        while at < len(b):
            n, kind = struct.unpack(">I4s", b[at:at + 8])
            if kind == b"IDAT":
                idat += b[at + 8:at + 8 + n]
            at += 12 + n
        streams.append(bytes(idat))
    for s in streams[:8]:
        zlib.decompress(s)
    t0 = time.perf_counter()
    for s in streams:
        zlib.decompress(s)
    return threads * len(streams) / (time.perf_counter() - t0)


class Slices:
    """The 16-bit PNG files as a torch Dataset: cv2.imread(IMREAD_UNCHANGED), flip, normalize."""

    def __init__(self, root, mean, std):
        self.images = sorted(os.path.join(root, "images", f)
                             for f in os.listdir(os.path.join(root, "images")))
        self.masks = [p.replace("/images/", "/masks/") for p in self.images]
        self.mean, self.std = np.float32(mean), np.float32(std)

    def __len__(self):
        return len(self.images)

    def __getitem__(self, i):
        import torch
        img = cv2.imread(self.images[i], cv2.IMREAD_UNCHANGED)
        mask = cv2.imread(self.masks[i], cv2.IMREAD_UNCHANGED)
        if np.random.random() < 0.5:
            img, mask = img[:, ::-1], mask[:, ::-1]
        x = (img.astype(np.float32) - self.mean) / self.std
        return torch.from_numpy(x[None].copy()), torch.from_numpy(mask.astype(np.int64))


def torch_rate(root, mean, std, batch, workers, batches, warmup):
    import torch
    loader = torch.utils.data.DataLoader(Slices(root, mean, std), batch_size=batch,
                                         shuffle=True, num_workers=workers, drop_last=True,
                                         persistent_workers=True)

    def endless():
        while True:
            yield from loader
    it = endless()
    for _ in range(warmup):
        next(it)
    t0 = time.perf_counter()
    for _ in range(batches):
        next(it)
    return batches * batch / (time.perf_counter() - t0)


def dspipe_run(dsbench, path, args, threads):
    report = os.path.join(args.dir, "dsbench.json")
    subprocess.run([dsbench, path, "--batch", str(args.batch), "--threads", str(threads),
                    "--batches", str(args.batches), "--warmup", str(args.warmup),
                    "--hflip", "0.5", "--json", report], check=True, capture_output=True)
    return json.load(open(report))


def dspipe_rate(dsbench, path, args):
    return float(dspipe_run(dsbench, path, args, 2)["throughput"]["images_per_s"])


def decode_bound(dsbench, path, args):
    """2 threads x the one-thread read + decode rate (image and mask) of the same records."""
    stages = {s["stage"]: s["mean_ms"] for s in dspipe_run(dsbench, path, args, 1)["stages"]}
    return 2 * 1000.0 / (stages["read"] + stages["decode"])


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--build-dir", default="build")
    ap.add_argument("--dir", default="/tmp/dspipe-typed-bench")
    ap.add_argument("--count", type=int, default=256)
    ap.add_argument("--size", type=int, default=512)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--batches", type=int, default=32)
    ap.add_argument("--warmup", type=int, default=4)
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    build_dir = os.path.abspath(args.build_dir)
    dsconvert = os.path.join(build_dir, "tools/dsconvert/dsconvert")
    dsbench = os.path.join(build_dir, "tools/dsbench/dsbench")
    make_sources(args.dir, args.count, args.size)
    build(dsconvert, args.dir)
    m = json.load(open(os.path.join(args.dir, "enc16.lmdb", "manifest.json")))
    mean, std = m["stats"]["mean"][0], m["stats"]["std"][0]
    files = sorted(os.path.join(args.dir, "src16/images", f)
                   for f in os.listdir(os.path.join(args.dir, "src16/images")))
    runs = {k: [] for k in ("floor16", "enc16", "enc8", "raw16", "raw8", "torch16", "bound_enc16",
                            "bound_enc8", "bound_raw16", "bound_raw8")}
    for r in range(args.rounds):
        print(f"== round {r + 1}/{args.rounds}", file=sys.stderr)
        runs["floor16"].append(inflate_floor(files, 2))
        for k in ("enc16", "enc8", "raw16", "raw8"):
            path = os.path.join(args.dir, k + ".lmdb")
            runs["bound_" + k].append(decode_bound(dsbench, path, args))
            runs[k].append(dspipe_rate(dsbench, path, args))
        runs["torch16"].append(torch_rate(os.path.join(args.dir, "src16"), mean, std, args.batch,
                                          2, args.batches, args.warmup))
    med = {k: statistics.median(v) for k, v in runs.items()}

    def row(name, k, ratio):
        v = runs[k]
        print(f"| {name} | {med[k]:.1f} ({min(v):.1f}-{max(v):.1f}) | {ratio} |")
    print(f"\n{args.count} x {args.size}x{args.size} 12-bit CT-like slices + 8-bit masks, batch "
          f"{args.batch}, 2 threads/workers, hflip 0.5, float32 (x - mean) / std; "
          f"{args.rounds} rounds, load average {os.getloadavg()[0]:.1f}\n")
    print("| configuration | images/s median (min-max) | ratio |")
    print("|---|---|---|")
    def of_bound(k):
        return f"{med[k] / med['bound_' + k]:.2f} of its decode bound"
    row("torch DataLoader, 16-bit PNG files (cv2 IMREAD_UNCHANGED)", "torch16", "1.00")
    row("dspipe Loader, uint16 encoded (16-bit PNG)", "enc16",
        f"**{med['enc16'] / med['torch16']:.2f}x** torch; {of_bound('enc16')}; "
        f"{med['enc16'] / med['enc8']:.2f} of 8-bit")
    row("dspipe Loader, uint8 encoded (8-bit PNG, same slices)", "enc8", of_bound("enc8"))
    row("dspipe Loader, uint16 raw+zstd", "raw16",
        f"{med['raw16'] / med['raw8']:.2f} of 8-bit raw; {of_bound('raw16')}")
    row("dspipe Loader, uint8 raw+zstd", "raw8", of_bound("raw8"))
    row("decode bound, uint16 encoded (1-thread read + decode rate x 2)", "bound_enc16", "-")
    row("decode bound, uint8 encoded", "bound_enc8", "-")
    row("zlib inflate of the 16-bit PNGs' IDAT alone, x 2 threads (reference)", "floor16",
        f"dspipe's 16-bit decode bound is {med['bound_enc16'] / med['floor16']:.2f}x it "
        f"(libdeflate)")


if __name__ == "__main__":
    main()
