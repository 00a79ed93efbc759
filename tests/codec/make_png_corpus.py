#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Writes the PNG corpus that tests/codec/png_fast_test.cc decodes with the fast path and with
libspng and compares bit for bit (libspng's own encodes are made by the test itself).

Usage: make_png_corpus.py OUT_DIR

Encoders: OpenCV (cv2, levels 0, 1, 3, 9), Pillow (optimize off and on), ImageMagick's
`convert` (every filter type forced: png:compression-filter 0-4, and adaptive 5). Shapes: widths
1-17 and a few odd sizes; gray, gray+alpha, RGB and RGBA; noisy, smooth and flat content.
Files are named ENCODER-VARIANT-KIND-WxH-CHANNELS.png. Needs Debian's python3-opencv,
python3-pil, python3-numpy and imagemagick; a missing one is an error (exit 1), never a skip.
"""
import collections
import os
import subprocess
import sys

import cv2
import numpy as np
from PIL import Image


def images():
    """(kind, array HxWxC uint8) for every shape and content the corpus covers."""
    rng = np.random.RandomState(12)
    shapes = [(h, w) for w in range(1, 18) for h in (1, 3)] + [(7, 33), (13, 65), (31, 29),
                                                               (64, 97)]
    for h, w in shapes:
        for c in (1, 2, 3, 4):
            noisy = rng.randint(0, 256, size=(h, w, c), dtype=np.uint8)
            yy, xx = np.mgrid[0:h, 0:w]
            smooth = np.stack([((xx * (3 + k) + yy * (5 - k)) * 4) % 256 for k in range(c)],
                              axis=-1).astype(np.uint8)
            flat = np.full((h, w, c), 200, np.uint8)
            flat[h // 2:, :, :] = 17
            yield "noisy", noisy
            yield "smooth", smooth
            if w in (1, 2, 16, 17, 33):
                yield "flat", flat


def name(out, encoder, variant, kind, a):
    h, w, c = a.shape
    return os.path.join(out, f"{encoder}-{variant}-{kind}-{w}x{h}-{c}.png")


PIL_MODES = {1: "L", 2: "LA", 3: "RGB", 4: "RGBA"}
IM_COLOR_TYPE = {1: 0, 2: 4, 3: 2, 4: 6}
IM_PREFIX = {1: "", 2: "", 3: "PNG24:", 4: "PNG32:"}  # else it drops an opaque alpha


def main():
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    out = sys.argv[1]
    os.makedirs(out, exist_ok=True)
    written = 0
    per_channels = collections.Counter()
    for kind, a in images():
        h, w, c = a.shape
        pil = Image.fromarray(a[:, :, 0] if c == 1 else a, PIL_MODES[c])
        for optimize in (False, True):
            pil.save(name(out, "pil", "opt" if optimize else "plain", kind, a), optimize=optimize)
            written += 1
        if c != 2:  # OpenCV writes no gray+alpha
            bgr = a if c == 1 else cv2.cvtColor(a, cv2.COLOR_RGB2BGR if c == 3 else
                                                cv2.COLOR_RGBA2BGRA)
            for level in (0, 1, 3, 9):
                path = name(out, "cv2", f"level{level}", kind, a)
                if not cv2.imwrite(path, bgr, [cv2.IMWRITE_PNG_COMPRESSION, level]):
                    sys.exit(f"cv2.imwrite failed: {path}")
                written += 1
        # ImageMagick: one call per image and forced filter is slow; every 4th image of each
        # channel count, all filters.
        per_channels[c] += 1
        if per_channels[c] % 4 == 1:
            src = name(out, "pil", "plain", kind, a)
            for f in range(6):
                path = name(out, "magick", f"filter{f}", kind, a)
                subprocess.run(["convert", src, "-define", f"png:compression-filter={f}",
                                "-define", f"png:color-type={IM_COLOR_TYPE[c]}",
                                "-define", "png:bit-depth=8", "-quality", f"7{f}",
                                IM_PREFIX[c] + path],
                               check=True)
                written += 1
    print(f"{written} PNG files in {out}")


if __name__ == "__main__":
    main()
