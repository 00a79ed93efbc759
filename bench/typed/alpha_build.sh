#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# What an opaque alpha channel costs `dsconvert build`: N opaque 512x512 RGBA PNGs and the same
# images saved as RGB (each with an 8-bit mask), built by two dsconvert binaries, interleaved,
# ROUNDS times; prints each build's seconds and the medians (min-max). An 8-bit image's alpha is
# checked for transparent pixels (refused unless drop_alpha), which used to decode every RGBA
# file twice.
#   bash bench/typed/alpha_build.sh BASE_DSCONVERT NEW_DSCONVERT [ROUNDS=3] [N=200]
# BASE_DSCONVERT: a copy of build/tools/dsconvert/dsconvert from before the change (it links
# dspipe statically, so the binary alone is the build). Pass the same binary twice to time one.
set -euo pipefail
[ $# -ge 2 ] || { sed -n '3,10p' "$0"; exit 2; }
BASE=$1 NEW=$2 ROUNDS=${3:-3} N=${4:-200}
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
/usr/bin/python3 - "$TMP" "$N" << 'PY'
import os, sys
import cv2
import numpy as np
d, n = sys.argv[1], int(sys.argv[2])
for kind in ("rgba", "rgb"):
    for sub in ("images", "masks"):
        os.makedirs(os.path.join(d, kind, sub), exist_ok=True)
rng = np.random.default_rng(0)
yy, xx = np.mgrid[0:512, 0:512]
for i in range(n):
    rgb = np.stack([(xx + i) % 256, (yy * 2 + i) % 256, ((xx + yy) // 2) % 256], -1)
    bgr = np.clip(rgb + rng.normal(0, 8, rgb.shape), 0, 255).astype(np.uint8)
    mask = ((xx // 128 + yy // 128 + i) % 4).astype(np.uint8)
    bgra = np.dstack([bgr, np.full((512, 512), 255, np.uint8)])
    assert cv2.imwrite(f"{d}/rgba/images/{i:04d}.png", bgra)
    assert cv2.imwrite(f"{d}/rgb/images/{i:04d}.png", bgr)
    for kind in ("rgba", "rgb"):
        assert cv2.imwrite(f"{d}/{kind}/masks/{i:04d}.png", mask)
PY
echo "$N images per folder: RGBA $(du -sm "$TMP/rgba/images" | cut -f1) MB, RGB $(du -sm "$TMP/rgb/images" | cut -f1) MB"
echo "load average before: $(cut -d' ' -f1-3 /proc/loadavg)"
echo "| round | binary | RGBA s | RGB s | RGBA / RGB |"
echo "|---|---|---|---|---|"
for r in $(seq 1 "$ROUNDS"); do
  for b in base new; do
    bin=$BASE
    [ "$b" = new ] && bin=$NEW
    row="| $r | $b |"
    for kind in rgba rgb; do
      t0=$(date +%s%N)
      "$bin" build "$TMP/$kind" "$TMP/out.lmdb" --overwrite -q > /dev/null
      t1=$(date +%s%N)
      ms=$(((t1 - t0) / 1000000))
      row="$row $((ms / 1000)).$(printf '%03d' $((ms % 1000))) |"
    done
    echo "$row" | tee -a "$TMP/rows"
  done
done
/usr/bin/python3 "$(dirname "$0")/ab_medians.py" "$TMP/rows" 3 3 --ratio
echo "load average after: $(cut -d' ' -f1-3 /proc/loadavg)"
