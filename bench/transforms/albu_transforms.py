#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""albumentations 2.0.8's own per-transform throughput on one 512x512 image, single thread.

Usage: python bench/transforms/albu_transforms.py --write-specs specs.json --image img.png
           --mask mask.png          (writes the image, the mask and the specs; then exits)
       python bench/transforms/albu_transforms.py --specs specs.json --image img.png
           [--mask mask.png] [--seconds 0.3] [--json out.json]

Each transform is called the way users call it, `t(image=img)` (with `mask=` when --mask), p=1,
with cv2.setNumThreads(1); microseconds per call over >= --seconds (and >= 10 calls). The specs
are A.to_dict of Compose([t]): bench/transforms/transform_bench runs the same ones in dspipe.
"""
import argparse
import json
import sys
import time

import albumentations as A
import cv2
import numpy as np


def transforms():
    """The per-transform set: every transform of docs/TRANSFORMS.md's table, typical arguments."""
    return [
        A.HorizontalFlip(p=1), A.VerticalFlip(p=1), A.Transpose(p=1), A.RandomRotate90(p=1),
        A.SquareSymmetry(p=1), A.Rotate(limit=30, p=1),
        A.Affine(scale=(0.9, 1.1), rotate=(-15, 15), translate_percent=0.05, p=1),
        A.ShiftScaleRotate(p=1), A.RandomCrop(448, 448, p=1), A.CenterCrop(448, 448, p=1),
        A.PadIfNeeded(576, 576, p=1), A.RandomResizedCrop(size=(448, 448), p=1),
        A.Resize(256, 256, p=1), A.SmallestMaxSize(max_size=448, p=1),
        A.LongestMaxSize(max_size=448, p=1), A.CropNonEmptyMaskIfExists(448, 448, p=1),
        A.RandomBrightnessContrast(p=1), A.RandomGamma(p=1), A.HueSaturationValue(p=1),
        A.ColorJitter(p=1), A.GaussNoise(p=1), A.GaussianBlur(p=1), A.CLAHE(p=1),
        A.CoarseDropout(p=1), A.ToGray(p=1), A.Normalize(),
        A.GridDistortion(p=1), A.ElasticTransform(p=1),
    ]


def name_of(t):
    return type(t).__name__


def write_specs(args):
    rng = np.random.default_rng(0)
    y, x = np.mgrid[0:512, 0:512]
    base = np.sin(x * 0.05) * 60 + np.cos(y * 0.04) * 60 + 128
    img = np.clip(np.stack([base, base.T, base[::-1]], -1) + rng.normal(0, 15, (512, 512, 3)),
                  0, 255).astype(np.uint8)
    mask = ((x - 200) ** 2 + (y - 260) ** 2 < 120 ** 2).astype(np.uint8)
    cv2.imwrite(args.image, cv2.cvtColor(img, cv2.COLOR_RGB2BGR))
    if args.mask:
        cv2.imwrite(args.mask, mask)
    specs = [{"name": name_of(t), "spec": A.to_dict(A.Compose([t]))} for t in transforms()]
    with open(args.write_specs, "w") as f:
        json.dump(specs, f)


def main(argv):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--write-specs")
    ap.add_argument("--specs")
    ap.add_argument("--image", required=True)
    ap.add_argument("--mask")
    ap.add_argument("--seconds", type=float, default=0.3)
    ap.add_argument("--json")
    args = ap.parse_args(argv)
    if args.write_specs:
        write_specs(args)
        return
    cv2.setNumThreads(1)
    img = cv2.cvtColor(cv2.imread(args.image, cv2.IMREAD_COLOR), cv2.COLOR_BGR2RGB)
    mask = cv2.imread(args.mask, cv2.IMREAD_GRAYSCALE) if args.mask else None
    want = {s["name"] for s in json.load(open(args.specs))}
    out = {}
    for t in transforms():
        name = name_of(t)
        if name not in want:
            continue
        kw = {"image": img} if mask is None else {"image": img, "mask": mask}
        if mask is None and name == "CropNonEmptyMaskIfExists":
            kw["mask"] = np.zeros(img.shape[:2], np.uint8)  # it needs one
        for _ in range(3):
            t(**kw)
        n, t0 = 0, time.perf_counter()
        while True:
            t(**kw)
            n += 1
            elapsed = time.perf_counter() - t0
            if elapsed >= args.seconds and n >= 10:
                break
        out[name] = elapsed / n * 1e6
        print(f"{name:28s} {out[name]:9.1f} us/image")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(out, f, indent=1)


if __name__ == "__main__":
    main(sys.argv[1:])
