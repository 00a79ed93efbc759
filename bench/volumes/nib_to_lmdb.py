# SPDX-License-Identifier: Apache-2.0
"""A Decathlon task to LMDB the way a user writes it: nibabel + the `lmdb` package.

    python nib_to_lmdb.py TASK OUT.lmdb [--store raw|encoded]

For each TASK/imagesTr/X.nii.gz (sorted) and its TASK/labelsTr/X.nii.gz: nib.load,
nib.as_closest_canonical (RAS), the voxels as the file holds them (np.asanyarray(dataobj):
int16 stays int16, no float64 copy), then every axial slice canon[:, :, k] of the image and the
label as one record. Records are keyed by an 8-byte big-endian index in one LMDB database;
each value is a 12-byte header (height, width, image byte count: little-endian uint32), the
image's bytes, then the label's:

  --store raw      the image's int16 samples and the label's uint8 samples, uncompressed
                   (what `dsconvert build --store raw --compression none` stores)
  --store encoded  the image's samples zstd level 3 (zstandard), the label as a PNG of zlib
                   level 1 (Pillow) (what `dsconvert build`'s default stores for int16 CT and
                   uint8 label maps)

One write transaction per volume; `meta` holds the count, shape and dtypes as JSON.
"""
import argparse
import io
import json
import pathlib
import struct
import sys

import lmdb
import nibabel as nib
import numpy as np


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("task")
    ap.add_argument("out")
    ap.add_argument("--store", choices=("raw", "encoded"), default="raw")
    a = ap.parse_args()
    if a.store == "encoded":
        import zstandard
        from PIL import Image
        zc = zstandard.ZstdCompressor(level=3)

    task = pathlib.Path(a.task)
    images = sorted(p for p in (task / "imagesTr").glob("*.nii.gz") if not p.name.startswith("."))
    env = lmdb.open(a.out, map_size=1 << 40, subdir=True)
    n = 0
    shape = dtype = None
    for path in images:
        img = nib.as_closest_canonical(nib.load(path))
        lab = nib.as_closest_canonical(nib.load(task / "labelsTr" / path.name))
        x = np.asanyarray(img.dataobj)
        y = np.asanyarray(lab.dataobj).astype(np.uint8)
        assert x.shape == y.shape, path
        shape, dtype = x.shape, x.dtype
        with env.begin(write=True) as txn:
            for k in range(x.shape[2]):
                xs, ys = x[:, :, k], y[:, :, k]
                if a.store == "raw":
                    ib, lb = xs.tobytes(), ys.tobytes()
                else:
                    ib = zc.compress(xs.tobytes())
                    buf = io.BytesIO()
                    Image.fromarray(np.ascontiguousarray(ys)).save(buf, "PNG", compress_level=1)
                    lb = buf.getvalue()
                head = struct.pack("<III", xs.shape[0], xs.shape[1], len(ib))
                txn.put(struct.pack(">Q", n), head + ib + lb)
                n += 1
    with env.begin(write=True) as txn:
        txn.put(b"meta", json.dumps({"count": n, "shape": shape, "image_dtype": str(dtype),
                                     "label_dtype": "uint8", "store": a.store}).encode())
    env.close()
    print(f"nib_to_lmdb.py: {n} slices from {len(images)} volumes into {a.out} ({a.store})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
