#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""A PyTorch DataLoader running an albumentations pipeline on a dspipe LMDB: the recipe's baseline.

Usage: python bench/transforms/albu_loader.py DB --transform recipe.json [--batch 8]
           [--workers 2] [--batches N] [--warmup W] [--repeats R] [--json FILE]

Per sample, what a user writes today: the record read with the Python lmdb package and decoded
with cv2.imdecode (bench/torch_loader.py's DspipeLmdb: BGR->RGB), then
albumentations.Compose(A.from_dict(recipe.json)) on image and mask (Normalize included:
float32 HWC), transposed to a float32 CHW tensor, the mask a uint8 tensor.
DataLoader(shuffle=True, prefetch_factor=2, persistent_workers=True, drop_last=True); each worker
has albumentations' own random state (seeded per worker by torch). Timing as torch_loader.py:
each repeat skips W batches, then times N: images/s = N * batch / wall time.
Needs albumentations==2.0.8 (and numpy<2 with Debian's torch) besides torch_loader.py's packages.
"""
import argparse
import json
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import torch_loader  # noqa: E402  (bench/torch_loader.py: the dspipe-format reader)

import albumentations as A  # noqa: E402
import cv2  # noqa: E402
import numpy as np  # noqa: E402
import torch  # noqa: E402
from torch.utils.data import DataLoader  # noqa: E402


class AlbuLmdb(torch_loader.DspipeLmdb):
    def __init__(self, path, spec):
        super().__init__(path)
        self.spec = spec
        self.aug = None  # built in each worker

    def finish(self, img, mask):
        if self.aug is None:
            self.aug = A.from_dict(self.spec)
        out = self.aug(image=img, mask=mask)
        x = torch.from_numpy(np.ascontiguousarray(out["image"].transpose(2, 0, 1)))
        return x, torch.from_numpy(np.ascontiguousarray(out["mask"]))


def main(argv):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("source")
    ap.add_argument("--transform", required=True)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--batches", type=int, default=32)
    ap.add_argument("--warmup", type=int, default=4)
    ap.add_argument("--repeats", type=int, default=1)
    ap.add_argument("--json")
    args = ap.parse_args(argv)
    cv2.setNumThreads(1)  # each DataLoader worker is one process on one core
    with open(args.transform) as f:
        spec = json.load(f)
    ds = AlbuLmdb(args.source, spec)
    torch.manual_seed(0)
    loader = DataLoader(ds, batch_size=args.batch, shuffle=True, num_workers=args.workers,
                        drop_last=True, prefetch_factor=2, persistent_workers=True)
    it = torch_loader.endless(loader)
    rates = []
    for _ in range(args.repeats):
        for _ in range(args.warmup):
            next(it)
        t0 = time.perf_counter()
        for _ in range(args.batches):
            x, _ = next(it)
            assert x.dtype == torch.float32 and x.shape[0] == args.batch
        rates.append(args.batches * args.batch / (time.perf_counter() - t0))
    r = {"tool": "torch_albumentations", "source": os.path.abspath(args.source),
         "batch": args.batch, "workers": args.workers,
         "images_per_s": {"median": statistics.median(rates), "min": min(rates),
                          "max": max(rates), "all": rates},
         "versions": {"albumentations": A.__version__, "torch": torch.__version__,
                      "opencv": cv2.__version__, "numpy": np.__version__}}
    print(f"torch+albumentations {args.source}: {r['images_per_s']['median']:.1f} images/s "
          f"({args.workers} workers, batch {args.batch})")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(r, f, indent=1)


if __name__ == "__main__":
    main(sys.argv[1:])
