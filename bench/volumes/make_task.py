# SPDX-License-Identifier: Apache-2.0
"""Writes a Decathlon-like CT task for bench/volumes (nibabel, numpy).

    python make_task.py OUT_DIR [--volumes 20] [--slices 100] [--size 512] [--seed 0]

OUT_DIR/imagesTr/ct_NNN.nii.gz: int16 Hounsfield units, SIZE x SIZE x SLICES, stored LPS as a
DICOM export is (i to the patient's Left, j Posterior, k Superior: the affine's diagonal is
-0.78, -0.78, 2.5 mm; sform and qform code 1), so `as_closest_canonical` flips i and j.
OUT_DIR/labelsTr/ct_NNN.nii.gz: uint8 label maps on the same grid (0 background, 1 liver,
2 tumour, 3 kidneys, 4 spine). OUT_DIR/dataset.json names the classes.

The anatomy is a few smooth shapes that change along k (a body ellipse, lungs above a
diaphragm level, a liver, kidneys, a spine, a table), each with its own HU level, plus
spatially correlated noise of about 12 HU and a little beam-hardening-like smooth gradient, so
gzip finds what it finds in a CT: long runs of air, no two equal rows inside the body. Values
stay in -1024..3071 (12-bit CT). Deterministic for a seed. Writes OUT_DIR/.complete last.
"""
import argparse
import json
import pathlib
import sys
import time

import nibabel as nib
import numpy as np

CLASSES = {"0": "background", "1": "liver", "2": "tumour", "3": "kidney", "4": "spine"}


def smooth_noise(rng, shape, sigma):
    """Gaussian noise blurred by a 3x3 box in-plane: CT noise is correlated over a few voxels."""
    n = rng.standard_normal(shape, dtype=np.float32)
    out = n.copy()
    for di, dj in ((1, 0), (-1, 0), (0, 1), (0, -1)):
        out += np.roll(n, (di, dj), axis=(0, 1))
    return out * np.float32(sigma / np.sqrt(5.0))


def volume(rng, size, slices):
    """One CT volume (file order: i = x to the Left, j = y Posterior, k = z Superior)."""
    c = (size - 1) / 2.0
    x = (np.arange(size, dtype=np.float32) - c) / size  # -0.5..0.5 across the field of view
    xx, yy = np.meshgrid(x, x, indexing="ij")           # [i, j]
    hu = np.full((size, size, slices), -1000.0, np.float32)
    lab = np.zeros((size, size, slices), np.uint8)
    # Per-volume anatomy: sizes and positions jittered.
    body_a, body_b = rng.uniform(0.36, 0.44), rng.uniform(0.26, 0.32)
    dia = rng.uniform(0.45, 0.6)           # the diaphragm's level, as a fraction of k
    liver_c = (rng.uniform(-0.16, -0.10), rng.uniform(-0.04, 0.04))
    tumour_c = (liver_c[0] + rng.uniform(-0.04, 0.04), liver_c[1] + rng.uniform(-0.03, 0.03))
    tumour_r = rng.uniform(0.02, 0.04)
    grad = rng.uniform(-20, 20)
    for k in range(slices):
        z = k / max(slices - 1, 1)                       # 0 (feet) .. 1 (head)
        squeeze = 1.0 - 0.15 * (z - 0.5) ** 2
        body = (xx / (body_a * squeeze)) ** 2 + (yy / (body_b * squeeze)) ** 2 <= 1
        s = hu[:, :, k]
        s[body] = 35.0 + grad * xx[body]                 # soft tissue, a smooth gradient
        fat = body & ((xx / (body_a * squeeze)) ** 2 + (yy / (body_b * squeeze)) ** 2 > 0.8)
        s[fat] = -90.0                                   # subcutaneous fat
        # Table under the patient (posterior: +y in LPS file order).
        table = (yy > body_b + 0.03) & (yy < body_b + 0.05) & (np.abs(xx) < 0.45)
        s[table] = 300.0
        # Spine: a disc behind the centre, cortical rim brighter.
        r_sp = np.hypot(xx, yy - body_b * 0.6)
        spine = r_sp < 0.035
        s[spine] = 450.0
        s[spine & (r_sp > 0.027)] = 1100.0
        lab[:, :, k][spine] = 4
        if z > dia:  # lungs
            for side in (-1, 1):
                lung = ((xx - side * body_a * 0.45) / (body_a * 0.32)) ** 2 + \
                       ((yy + 0.02) / (body_b * 0.65)) ** 2 <= 1 - 2.5 * (z - dia) * (z - 1.0)
                s[lung & body & ~spine] = -850.0
        if dia - 0.3 < z < dia + 0.08:  # liver (patient's right = -x in LPS)
            t = 1 - ((z - (dia - 0.1)) / 0.2) ** 2
            if t > 0:
                liver = ((xx - liver_c[0]) / (0.14 * t)) ** 2 + \
                        ((yy - liver_c[1]) / (0.11 * t)) ** 2 <= 1
                s[liver] = 60.0
                lab[:, :, k][liver] = 1
                tum = (xx - tumour_c[0]) ** 2 + (yy - tumour_c[1]) ** 2 <= (tumour_r * t) ** 2
                s[tum & liver] = 20.0
                lab[:, :, k][tum & liver] = 2
        if dia - 0.45 < z < dia - 0.2:  # kidneys
            for side in (-1, 1):
                kid = ((xx - side * 0.13) / 0.04) ** 2 + ((yy - body_b * 0.35) / 0.06) ** 2 <= 1
                s[kid] = 150.0
                lab[:, :, k][kid] = 3
    hu += smooth_noise(rng, hu.shape, 12.0)
    hu[hu < -1000] = -1000 + (hu[hu < -1000] + 1000) * 0.2   # air's noise is small
    np.clip(hu, -1024, 3071, out=hu)
    return np.rint(hu).astype(np.int16), lab


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("out")
    ap.add_argument("--volumes", type=int, default=20)
    ap.add_argument("--slices", type=int, default=100)
    ap.add_argument("--size", type=int, default=512)
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args()
    out = pathlib.Path(a.out)
    if (out / ".complete").exists():
        print(f"make_task.py: {out} already written")
        return 0
    (out / "imagesTr").mkdir(parents=True, exist_ok=True)
    (out / "labelsTr").mkdir(exist_ok=True)
    # LPS, anisotropic, an origin as a scanner gives it.
    sp = (0.78, 0.78, 2.5)
    aff = np.array([[-sp[0], 0, 0, 199.6], [0, -sp[1], 0, 199.6], [0, 0, sp[2], -600.0],
                    [0, 0, 0, 1]])
    t0 = time.time()
    raw = packed = 0
    for v in range(a.volumes):
        rng = np.random.default_rng([a.seed, v])
        hu, lab = volume(rng, a.size, a.slices)
        for arr, folder in ((hu, "imagesTr"), (lab, "labelsTr")):
            img = nib.Nifti1Image(arr, aff)
            img.set_qform(aff, code=1)
            img.set_sform(aff, code=1)
            img.header.set_xyzt_units("mm", "sec")
            path = out / folder / f"ct_{v:03d}.nii.gz"
            nib.save(img, path)
            if folder == "imagesTr":
                raw += arr.nbytes
                packed += path.stat().st_size
        print(f"make_task.py: {v + 1}/{a.volumes} volumes", file=sys.stderr, flush=True)
    (out / "dataset.json").write_text(json.dumps({"name": "bench", "modality": {"0": "CT"},
                                                  "labels": CLASSES}, indent=1))
    (out / ".complete").write_text(json.dumps(vars(a)))
    print(f"make_task.py: {a.volumes} volumes of {a.size}x{a.size}x{a.slices} int16 in {out} "
          f"({time.time() - t0:.0f} s; images gzip to {packed / raw:.0%} of their "
          f"{raw / 1e6:.0f} MB)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
