#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# The main job on a generated sample dataset: synth -> build (encoded and raw) -> verify -> info
# -> dsbench (loader profile with a bottleneck verdict, and files vs LMDB from a cold page
# cache). Run from the repo root after building.
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=${BIN:-build/tools}
OUT=${OUT:-out/demo}
N=${N:-512}
rm -rf "$OUT"
mkdir -p "$OUT"
set -x
"$BIN/dsconvert/dsconvert" synth "$OUT/src" --count "$N" --size 512x512 --classes 3 --seed 7
"$BIN/dsconvert/dsconvert" build "$OUT/src" "$OUT/train.lmdb"
"$BIN/dsconvert/dsconvert" build "$OUT/src" "$OUT/train-raw.lmdb" --store raw
"$BIN/dsconvert/dsconvert" verify "$OUT/train.lmdb"
"$BIN/dsconvert/dsconvert" info "$OUT/train.lmdb"
"$BIN/dsbench/dsbench" "$OUT/train.lmdb" --batch 8 --batches 48 --hflip 0.5
"$BIN/dsbench/dsbench" "$OUT/train-raw.lmdb" --batch 8 --batches 48 --hflip 0.5
# Files vs LMDB from a cold page cache (each source's files dropped with posix_fadvise before
# its run, no warm-up, one whole epoch, no simulated step): the headline ratio is a storage
# comparison, the first epoch of a fresh machine. The report has the resource timeline.
"$BIN/dsbench/dsbench" "$OUT/src" --compare "$OUT/train.lmdb" --batch 8 --epochs 1 --warmup 0 \
  --drop-cache --hflip 0.5 --sample-ms 250 --report "$OUT/report.html" --json "$OUT/report.json" \
  --timeline-csv "$OUT/timeline.csv"
