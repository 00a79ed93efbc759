# SPDX-License-Identifier: Apache-2.0
"""Exports a Decathlon task's axial slices as 16-bit PNG files, as a user does to feed an image
folder to a 2D pipeline (nibabel + Pillow).

    python export_png.py TASK OUT_DIR

OUT_DIR/images/X_sNNN.png: slice k of X's canonical (RAS) array, canon[:, :, k] (the slice
dspipe's volume build stores), HU + 1024 as uint16 (the 12-bit CT range -1024..3071 fits);
OUT_DIR/masks/X_sNNN.png: the label slice as uint8. Refuses a value outside -1024..64511.
"""
import pathlib
import sys

import nibabel as nib
import numpy as np
from PIL import Image


def main():
    task, out = pathlib.Path(sys.argv[1]), pathlib.Path(sys.argv[2])
    (out / "images").mkdir(parents=True, exist_ok=True)
    (out / "masks").mkdir(exist_ok=True)
    n = 0
    for path in sorted(p for p in (task / "imagesTr").glob("*.nii.gz") if not p.name.startswith(".")):
        x = np.asanyarray(nib.as_closest_canonical(nib.load(path)).dataobj)
        y = np.asanyarray(nib.as_closest_canonical(nib.load(task / "labelsTr" / path.name)).dataobj)
        if x.min() < -1024 or x.max() > 64511:
            sys.exit(f"export_png.py: {path}: values {x.min()}..{x.max()} do not fit HU + 1024 in uint16")
        stem = path.name[: -len(".nii.gz")]
        for k in range(x.shape[2]):
            Image.fromarray((x[:, :, k].astype(np.int32) + 1024).astype(np.uint16)).save(
                out / "images" / f"{stem}_s{k:03d}.png", compress_level=6)
            Image.fromarray(y[:, :, k].astype(np.uint8)).save(
                out / "masks" / f"{stem}_s{k:03d}.png", compress_level=6)
            n += 1
    print(f"export_png.py: {n} slices to {out}")


if __name__ == "__main__":
    main()
