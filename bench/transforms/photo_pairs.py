# SPDX-License-Identifier: Apache-2.0
"""Photo image+mask pairs for the recipe bench: 512x512 PNG crops of the photographs that
scikit-image ships in its wheel (astronaut, coffee, chelsea, motorcycle, ihc, retina, rocket,
hubble deep field), each scaled, cropped and flipped at random, with a 3-class mask from
thresholds of its blurred luminance. Natural-image statistics (smooth areas, edges, texture)
instead of `dsconvert synth`'s shapes: PNGs that inflate at another rate, for checking that a
ratio measured on synth data holds on other 512x512 pairs.

    python photo_pairs.py OUT [--count 320] [--size 512] [--zoom 1,1.6] [--seed 0]
                          [--wheel WHEEL]

--zoom LO,HI: each photo is scaled so that its shorter side is LO-HI times the crop; larger
zooms give smoother crops, smaller PNGs and a cheaper inflate (as in CT / MR slices' flat
areas). Writes OUT/images/NNNNNN.png and OUT/masks/NNNNNN.png (the `dsconvert build` folder layout).
The photos come from the scikit-image 0.24.0 wheel, read as a zip file (`pip download
scikit-image==0.24.0 --no-deps`; --wheel names one already downloaded): nothing is installed.
Needs numpy and cv2 (the recipe bench's venv has both: albumentations pulls OpenCV in).
"""
from __future__ import annotations

import argparse
import glob
import os
import subprocess
import sys
import tempfile
import zipfile

import cv2
import numpy as np

PHOTOS = ("astronaut.png", "coffee.png", "chelsea.png", "motorcycle_left.png",
          "motorcycle_right.png", "ihc.png", "retina.jpg", "rocket.jpg", "hubble_deep_field.jpg")
WHEEL = "scikit-image==0.24.0"


def wheel_path(given: str | None, tmp: str) -> str:
    if given:
        return given
    subprocess.run([sys.executable, "-m", "pip", "download", "-q", WHEEL, "--no-deps",
                    "--only-binary=:all:", "-d", tmp], check=True)
    found = glob.glob(os.path.join(tmp, "scikit_image-*.whl"))
    if not found:
        sys.exit(f"photo_pairs: pip download {WHEEL} gave no wheel in {tmp}")
    return found[0]


def load_photos(wheel: str) -> list[np.ndarray]:
    photos = []
    with zipfile.ZipFile(wheel) as z:
        for name in PHOTOS:
            data = np.frombuffer(z.read("skimage/data/" + name), np.uint8)
            img = cv2.imdecode(data, cv2.IMREAD_COLOR)
            if img is None:
                sys.exit(f"photo_pairs: cannot decode skimage/data/{name} from {wheel}")
            photos.append(img)
    return photos


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("out")
    ap.add_argument("--count", type=int, default=320)
    ap.add_argument("--size", type=int, default=512)
    ap.add_argument("--zoom", default="1,1.6", help="LO,HI: shorter side / crop size")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--wheel", help="a downloaded scikit-image wheel (else pip download)")
    a = ap.parse_args()
    zoom = [float(v) for v in a.zoom.split(",")]
    if len(zoom) != 2 or not 1 <= zoom[0] <= zoom[1]:
        sys.exit(f"photo_pairs: --zoom {a.zoom}: want LO,HI with 1 <= LO <= HI")
    rng = np.random.default_rng(a.seed)
    with tempfile.TemporaryDirectory() as tmp:
        photos = load_photos(wheel_path(a.wheel, tmp))
    os.makedirs(os.path.join(a.out, "images"), exist_ok=True)
    os.makedirs(os.path.join(a.out, "masks"), exist_ok=True)
    s = a.size
    for i in range(a.count):
        img = photos[i % len(photos)]
        # Scaled so that the shorter side is LO-HI x the crop (upscaled where the photo is small).
        f = s / min(img.shape[:2]) * rng.uniform(zoom[0], zoom[1])
        h, w = max(s, round(img.shape[0] * f)), max(s, round(img.shape[1] * f))
        img = cv2.resize(img, (w, h), interpolation=cv2.INTER_AREA if f < 1 else cv2.INTER_LINEAR)
        y, x = int(rng.integers(0, h - s + 1)), int(rng.integers(0, w - s + 1))
        crop = np.ascontiguousarray(img[y:y + s, x:x + s])
        if rng.random() < 0.5:
            crop = np.ascontiguousarray(crop[:, ::-1])
        gray = cv2.GaussianBlur(cv2.cvtColor(crop, cv2.COLOR_BGR2GRAY), (0, 0), 4)
        lo, hi = np.percentile(gray, (35, 75))
        mask = (gray > lo).astype(np.uint8) + (gray > hi).astype(np.uint8)  # classes 0, 1, 2
        name = f"{i:06d}.png"
        cv2.imwrite(os.path.join(a.out, "images", name), crop)
        cv2.imwrite(os.path.join(a.out, "masks", name), mask)
    print(f"photo_pairs: {a.count} {s}x{s} pairs from {len(photos)} photos in {a.out}")


if __name__ == "__main__":
    main()
