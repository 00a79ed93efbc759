#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""How far dspipe's fused transform pipeline is from applying the same draws one transform at a
time (albumentations' sequential meaning: dspipe's step-by-step mode, which the tests compare
with albumentations 2.0.8 bit for bit), per chain, on smooth and on noisy content.

Usage: PYTHONPATH=... python bench/transforms/fusion_bound.py [--samples 200] [--size 256]

For each chain and content, --samples draws (index 0..samples-1, seed 0) of a 3-channel uint8
image: max |fused - sequential| over all pixels and away from where a border fill starts (2
pixels inside the content, as tests/transforms/fusion_test.cc measures: there the one warp
meets the fill at another sub-pixel position than the last of several), and the share of all
pixels within 1 and within 3 levels. Smooth content: a sum of low-frequency sinusoids (detail well above the pixel scale);
noisy content: uniform noise (detail at the pixel scale, where one interpolation and two differ
by up to the detail's contrast, docs/TRANSFORMS.md). The figures go in docs/MEASUREMENTS.md's
"Fusion against sequential application" with this command.
"""
import argparse
import json

import cv2
import numpy as np

import dspipe.transforms as T
from dspipe import _dspipe


def chains(size):
    s = size
    return {
        # The chain that sets the bound (a new user's recipe, issue 40): a resize, two resampling
        # crops, flips, then contrast that scales the geometric differences.
        "Resize + 2x RandomSizedCrop + flips + HSV + brightness/contrast": T.Compose([
            T.Resize(s, s), T.RandomSizedCrop(min_max_height=(s // 2, s), size=(s * 7 // 8,) * 2),
            T.RandomSizedCrop(min_max_height=(s // 2, s * 7 // 8), size=(s * 3 // 4,) * 2),
            T.HorizontalFlip(), T.VerticalFlip(), T.HueSaturationValue(p=1),
            T.RandomBrightnessContrast(p=1)]),
        "the same without the photometric tail": T.Compose([
            T.Resize(s, s), T.RandomSizedCrop(min_max_height=(s // 2, s), size=(s * 7 // 8,) * 2),
            T.RandomSizedCrop(min_max_height=(s // 2, s * 7 // 8), size=(s * 3 // 4,) * 2),
            T.HorizontalFlip(), T.VerticalFlip()]),
        "RandomResizedCrop + flip": T.Compose([
            T.RandomResizedCrop(size=(s * 3 // 4,) * 2), T.HorizontalFlip()]),
        "Resize + Rotate": T.Compose([T.Resize(s * 3 // 4, s * 3 // 4), T.Rotate(limit=30, p=1)]),
        "SmallestMaxSize + CenterCrop + Resize": T.Compose([
            T.SmallestMaxSize(max_size=s * 7 // 8), T.CenterCrop(s * 3 // 4, s * 3 // 4),
            T.Resize(s // 2, s // 2)]),
    }


def content(kind, size, index):
    rng = np.random.default_rng(1000 + index)
    if kind == "noisy":
        return rng.integers(0, 256, (size, size, 3), dtype=np.uint8)
    y, x = np.mgrid[0:size, 0:size] / size
    img = np.zeros((size, size, 3))
    for c in range(3):
        for _ in range(3):
            fy, fx = rng.uniform(0.5, 3, 2)
            ph = rng.uniform(0, 2 * np.pi)
            img[..., c] += np.sin(2 * np.pi * (fy * y + fx * x) + ph)
    img = (img - img.min()) / (img.max() - img.min()) * 235 + 10
    return img.round().astype(np.uint8)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--samples", type=int, default=200)
    ap.add_argument("--size", type=int, default=256)
    ap.add_argument("--json", help="also write the figures here")
    a = ap.parse_args()
    out = []
    print(f"{'chain':<66}{'content':>8}{'max':>6}{'inside':>7}{'<=1':>9}{'<=3':>9}")
    k5 = np.ones((5, 5), np.uint8)
    for name, chain in chains(a.size).items():
        spec = T.spec_json(chain)
        for kind in ("smooth", "noisy"):
            worst, inside, within1, within3, pixels = 0, 0, 0, 0, 0
            white = np.full((a.size, a.size, 3), 255, np.uint8)
            for i in range(a.samples):
                img = content(kind, a.size, i)
                fused, _ = _dspipe.transforms_apply(spec, img, None, 0, 0, i)
                seq, _ = _dspipe.transforms_apply_sequential(spec, img, None, 0, 0, i)
                d = np.abs(fused.astype(np.int16) - seq.astype(np.int16))
                worst = max(worst, int(d.max()))
                # Where the content is: the same draws on a white image (fill 0), eroded 2 px.
                w, _ = _dspipe.transforms_apply_sequential(spec, white, None, 0, 0, i)
                keep = cv2.erode((w[..., 0] == 255).astype(np.uint8), k5) > 0
                if keep.any():
                    inside = max(inside, int(d[keep].max()))
                within1 += int((d <= 1).sum())
                within3 += int((d <= 3).sum())
                pixels += d.size
            row = {"chain": name, "content": kind, "max": worst, "max_inside": inside,
                   "within1": within1 / pixels, "within3": within3 / pixels}
            out.append(row)
            print(f"{name:<66}{kind:>8}{worst:>6}{inside:>7}{100 * row['within1']:>8.2f}%"
                  f"{100 * row['within3']:>8.2f}%", flush=True)
    if a.json:
        with open(a.json, "w") as f:
            json.dump(out, f, indent=1)


if __name__ == "__main__":
    main()
