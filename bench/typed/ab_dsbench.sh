#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# A/B of two dsbench builds on one dataset, interleaved: for each round, each build's one-thread
# read + decode time per sample (the decode bound's input) and its 2-thread loader rate (batch 8,
# hflip 0.5, float32 normalize on the CPU), printed as a table with the medians.
#   bash bench/typed/ab_dsbench.sh BASE_DSBENCH NEW_DSBENCH DATASET [ROUNDS=5]
# BASE_DSBENCH: a copy of build/tools/dsbench/dsbench from before the change (dsbench links
# dspipe statically, so the binary alone is the build). With --make-rgb16 DIR instead, writes
# the 16-bit RGB dataset docs/MEASUREMENTS.md measures (64 synthetic 512x512 RGB 16-bit PNGs:
# gradients plus Gaussian noise, sigma 200; 8-bit 4-class masks) as DIR/images + DIR/masks.
set -euo pipefail
if [ "${1:-}" = "--make-rgb16" ]; then
  /usr/bin/python3 - "$2" << 'PY'
import os, sys
import cv2
import numpy as np
d = sys.argv[1]
for sub in ("images", "masks"):
    os.makedirs(os.path.join(d, sub), exist_ok=True)
rng = np.random.default_rng(0)
yy, xx = np.mgrid[0:512, 0:512]
for i in range(64):
    rgb = np.stack([(xx * 40 + i * 300) % 65536, (yy * 50 + i * 7) % 65536,
                    ((xx + yy) * 30) % 65536], -1).astype(np.float32)
    rgb += rng.normal(0, 200, rgb.shape)
    bgr = np.clip(rgb, 0, 65535).astype(np.uint16)[..., ::-1]
    assert cv2.imwrite(f"{d}/images/{i:04d}.png", bgr)
    assert cv2.imwrite(f"{d}/masks/{i:04d}.png", ((xx // 128 + yy // 128) % 4).astype(np.uint8))
PY
  exit 0
fi
[ $# -ge 3 ] || { sed -n '3,11p' "$0"; exit 2; }
BASE=$1 NEW=$2 DS=$3 ROUNDS=${4:-5}
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
echo "load average before: $(cut -d' ' -f1-3 /proc/loadavg)"
echo "| round | build | read + decode ms (1 thread) | loader images/s (2 threads) |"
echo "|---|---|---|---|"
for r in $(seq 1 "$ROUNDS"); do
  for b in base new; do
    bin=$BASE
    [ "$b" = new ] && bin=$NEW
    args=("$DS" --batch 8 --batches 32 --warmup 4 --hflip 0.5)
    "$bin" "${args[@]}" --threads 1 --json "$TMP/one.json" > /dev/null
    "$bin" "${args[@]}" --threads 2 --json "$TMP/two.json" > /dev/null
    /usr/bin/python3 - "$r" "$b" "$TMP" << 'PY' | tee -a "$TMP/rows"
import json, sys
r, b, tmp = sys.argv[1:]
s = {x["stage"]: x["mean_ms"] for x in json.load(open(f"{tmp}/one.json"))["stages"]}
rate = json.load(open(f"{tmp}/two.json"))["throughput"]["images_per_s"]
print(f"| {r} | {b} | {s['read'] + s['decode']:.3f} | {rate:.1f} |")
PY
  done
done
/usr/bin/python3 "$(dirname "$0")/ab_medians.py" "$TMP/rows" 3 1
echo "load average after: $(cut -d' ' -f1-3 /proc/loadavg)"
