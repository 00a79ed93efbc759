#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Writes OUT/images/NNNNNN.png + OUT/masks/NNNNNN.png: COUNT noisy 512x512 RGB PNGs (a
gradient plus Gaussian noise, so they compress like photos, not like flat synth images) and a
disc mask each. Deterministic (seed 8). Used by bench/cold and bench/cache.

usage: make_noisy_pngs.py OUT COUNT
"""
import os
import sys

import cv2
import numpy as np


def main() -> None:
    out, n = sys.argv[1], int(sys.argv[2])
    os.makedirs(f"{out}/images")
    os.makedirs(f"{out}/masks")
    rng = np.random.default_rng(8)
    y, x = np.mgrid[0:512, 0:512]
    for i in range(n):
        base = np.stack([(x + 37 * i) % 256, (y + 11 * i) % 256, ((x + y) // 2 + i) % 256], -1)
        img = np.clip(base + rng.normal(0, 20, base.shape), 0, 255).astype(np.uint8)
        mask = (((x - 256) ** 2 + (y - 256 - i % 64) ** 2) < (100 + i % 50) ** 2).astype(np.uint8)
        cv2.imwrite(f"{out}/images/{i:06d}.png", img[:, :, ::-1])
        cv2.imwrite(f"{out}/masks/{i:06d}.png", mask)


if __name__ == "__main__":
    main()
