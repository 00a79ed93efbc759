#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""Builds a "plain" LMDB the way many users do by hand, for loader compatibility tests.

Usage: /usr/bin/python3 bench/make_plain_lmdb.py SRC_DIR OUT_LMDB [--limit N]

Reproduces the common recipe exactly: one write transaction, keys str(i) for the i-th image
file of SRC_DIR in sorted order (SRC_DIR/images/ when it exists, e.g. a `dsconvert synth`
output), values the image re-encoded as PNG by OpenCV (so BGR-ordered pixels as cv2 sees
them, no header, no masks, no manifest). Needs Debian's python3-lmdb and python3-opencv.
"""
import argparse
import os
import sys

import cv2
import lmdb

IMAGE_EXTS = {".png", ".jpg", ".jpeg", ".bmp", ".tif", ".tiff", ".webp"}


def image_files(src):
    root = os.path.join(src, "images") if os.path.isdir(os.path.join(src, "images")) else src
    names = sorted(n for n in os.listdir(root) if os.path.splitext(n)[1].lower() in IMAGE_EXTS)
    return [os.path.join(root, n) for n in names]


def main(argv):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("src_dir")
    ap.add_argument("out_lmdb")
    ap.add_argument("--limit", type=int, default=None, help="use only the first N images")
    args = ap.parse_args(argv)
    if not os.path.isdir(args.src_dir):
        sys.exit(f"make_plain_lmdb: {args.src_dir}: not a directory")
    paths = image_files(args.src_dir)
    if args.limit is not None:
        paths = paths[: args.limit]
    if not paths:
        sys.exit(f"make_plain_lmdb: {args.src_dir}: no image files")

    env = lmdb.open(args.out_lmdb, map_size=1 << 36)
    with env.begin(write=True) as txn:
        for i, path in enumerate(paths):
            img = cv2.imread(path)
            if img is None:
                sys.exit(f"make_plain_lmdb: {path}: OpenCV cannot read it")
            txn.put(str(i).encode(), cv2.imencode(".png", img)[1].tobytes())
    env.close()
    print(f"make_plain_lmdb: wrote {len(paths)} records to {args.out_lmdb}")


if __name__ == "__main__":
    main(sys.argv[1:])
