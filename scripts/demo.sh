#!/usr/bin/env bash
# The main job on a generated sample dataset: synth -> build (encoded and raw) -> verify -> info
# -> dsbench (loader profile with a bottleneck verdict). Run from the repo root after building.
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=${BIN:-build/tools}
OUT=${OUT:-out/demo}
N=${N:-512}
rm -rf "$OUT"
mkdir -p "$OUT"
"$BIN/dsconvert/dsconvert" synth "$OUT/src" --count "$N" --size 512x512 --classes 3 --seed 7
"$BIN/dsconvert/dsconvert" build "$OUT/src" "$OUT/train.lmdb"
"$BIN/dsconvert/dsconvert" build "$OUT/src" "$OUT/train-raw.lmdb" --store raw
"$BIN/dsconvert/dsconvert" verify "$OUT/train.lmdb"
"$BIN/dsconvert/dsconvert" info "$OUT/train.lmdb"
if [ -x "$BIN/dsbench/dsbench" ]; then
  "$BIN/dsbench/dsbench" "$OUT/train.lmdb" --batch 8 --batches 48 --compute-ms 80
  "$BIN/dsbench/dsbench" "$OUT/train-raw.lmdb" --batch 8 --batches 48 --compute-ms 80
fi
