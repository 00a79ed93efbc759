#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Writes an ImageNet-like ImageFolder of JPEGs for bench/jpeg/jpeg_bench.sh, deterministically.

  /usr/bin/python3 bench/jpeg/make_jpegs.py OUT_DIR [--count 2000] [--classes 10] [--seed 0]
                                                   [--quality 90] [--size-scale 1]

OUT_DIR/class_00/00000.jpg ... : `count` images spread evenly over `classes` folders. Sizes are
drawn like ImageNet's: short side uniform in [300, 500], aspect (w/h) log-uniform in
[3/4, 16/9], both times --size-scale (3 makes camera-sized sources). Content is natural-image-like, not flat colour: a lit two-colour gradient, noise
at four scales (clouds down to fine texture, upsampled bicubically), 4-12 soft-edged shapes
(ellipses, polygons, bars) in a per-class palette, and sensor-like grain. Encoded by PIL
(libjpeg-turbo) at `quality`, 4:2:0, baseline. Each image depends only on (seed, index), so
the same arguments give the same bytes on the same PIL/libjpeg versions.
Needs Debian's python3-numpy and python3-pil.
"""
import argparse
import math
import os
import sys

import numpy as np
from PIL import Image, ImageDraw, ImageFilter


def size_for(rng, scale):
    short = int(rng.integers(300, 501))
    aspect = math.exp(rng.uniform(math.log(3 / 4), math.log(16 / 9)))
    w, h = (short * aspect, short) if aspect >= 1 else (short, short / aspect)
    return int(round(w * scale)), int(round(h * scale))


def noise_layer(rng, w, h, cell, amp):
    gw, gh = max(2, w // cell + 2), max(2, h // cell + 2)
    g = rng.normal(0.0, 1.0, (gh, gw, 3)).astype(np.float32)
    img = Image.fromarray(np.uint8(np.clip(g * 40 + 128, 0, 255)))
    up = np.asarray(img.resize((w, h), Image.BICUBIC), dtype=np.float32) - 128.0
    return up * (amp / 40.0)


def make_image(seed, index, classes, scale=1.0):
    rng = np.random.default_rng([seed, index])
    cls = index % classes
    prng = np.random.default_rng([seed, 1_000_000 + cls])  # the class's palette
    palette = prng.uniform(20, 235, (6, 3))
    w, h = size_for(rng, scale)
    # Lit gradient between two palette colours, in a random direction.
    a, b = palette[rng.integers(0, 6)], palette[rng.integers(0, 6)]
    theta = rng.uniform(0, 2 * math.pi)
    yy, xx = np.mgrid[0:h, 0:w].astype(np.float32)
    t = (np.cos(theta) * xx / w + np.sin(theta) * yy / h)
    t = (t - t.min()) / max(1e-6, float(t.max() - t.min()))
    f = a[None, None, :] * (1 - t[..., None]) + b[None, None, :] * t[..., None]
    # Texture at several scales.
    for cell, amp in ((96, 28), (24, 20), (6, 20), (2, 18)):
        f += noise_layer(rng, w, h, cell, amp * rng.uniform(0.5, 1.5))
    img = Image.fromarray(np.uint8(np.clip(f, 0, 255)), "RGB")
    # Shapes, composited with soft edges.
    layer = Image.new("RGBA", (w, h), (0, 0, 0, 0))
    draw = ImageDraw.Draw(layer)
    for _ in range(int(rng.integers(4, 13))):
        col = tuple(int(c) for c in palette[rng.integers(0, 6)] * rng.uniform(0.6, 1.2)) + (
            int(rng.integers(120, 256)),)
        col = tuple(min(255, max(0, c)) for c in col)
        cx, cy = rng.uniform(0, w), rng.uniform(0, h)
        r = rng.uniform(0.03, 0.25) * min(w, h)
        kind = rng.integers(0, 3)
        if kind == 0:
            draw.ellipse([cx - r, cy - r * rng.uniform(0.4, 1.0), cx + r, cy + r], fill=col)
        elif kind == 1:
            n = int(rng.integers(3, 7))
            pts = [(cx + r * math.cos(2 * math.pi * k / n + rng.uniform(-0.3, 0.3)),
                    cy + r * math.sin(2 * math.pi * k / n + rng.uniform(-0.3, 0.3)))
                   for k in range(n)]
            draw.polygon(pts, fill=col)
        else:
            draw.line([(cx, cy), (rng.uniform(0, w), rng.uniform(0, h))], fill=col,
                      width=int(rng.integers(2, 14)))
    layer = layer.filter(ImageFilter.GaussianBlur(rng.uniform(0.3, 1.5)))
    img = Image.alpha_composite(img.convert("RGBA"), layer).convert("RGB")
    grain = rng.normal(0, 7.0, (h, w, 3)).astype(np.float32)
    out = np.clip(np.asarray(img, dtype=np.float32) + grain, 0, 255).astype(np.uint8)
    return Image.fromarray(out, "RGB")


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out")
    ap.add_argument("--count", type=int, default=2000)
    ap.add_argument("--classes", type=int, default=10)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--quality", type=int, default=90)
    ap.add_argument("--size-scale", type=float, default=1.0)
    args = ap.parse_args()
    if args.count < 1 or args.classes < 1:
        sys.exit("make_jpegs: --count and --classes must be >= 1")
    for c in range(args.classes):
        os.makedirs(os.path.join(args.out, f"class_{c:02d}"), exist_ok=True)
    for i in range(args.count):
        path = os.path.join(args.out, f"class_{i % args.classes:02d}", f"{i:05d}.jpg")
        tmp = path + ".tmp"
        make_image(args.seed, i, args.classes, args.size_scale).save(tmp, "JPEG", quality=args.quality,
                                                    subsampling=2, optimize=False)
        os.replace(tmp, path)  # never a half-written image under the final name
        if (i + 1) % 500 == 0:
            print(f"make_jpegs: {i + 1}/{args.count}", file=sys.stderr)


if __name__ == "__main__":
    main()
