#!/usr/bin/env bash
# The main job on a generated sample dataset: synth -> build (encoded and raw) -> verify -> info
# -> dsbench (loader profile with a bottleneck verdict, and files vs LMDB under a simulated
# 80 ms training step). Run from the repo root after building.
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
"$BIN/dsbench/dsbench" "$OUT/src" --compare "$OUT/train.lmdb" --batch 8 --batches 24 \
  --hflip 0.5 --compute-ms 80 --report "$OUT/report.html" --json "$OUT/report.json"
