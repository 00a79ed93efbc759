#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# The segmentation recipe (bench/transforms/recipe.json: SmallestMaxSize -> RandomCrop ->
# SquareSymmetry -> Affine -> RandomBrightnessContrast -> GaussNoise -> Normalize) run by dspipe
# and by a PyTorch DataLoader running the same albumentations pipeline, on the same LMDB, in one
# run, as ratios (issue 21's targets: dspipe >= 5x the DataLoader, >= 0.7x dspipe's flip-only).
#
#   bench/transforms/recipe_bench.sh [--dir DIR] [--count 320] [--size 512x512] [--batch 8]
#                                    [--threads 2] [--batches 32] [--warmup 4] [--rounds 3]
#                                    [--build-dir build] [--python PY] [--out DIR]
#                                    [--src FOLDER]
#
# 1. DIR/src: `dsconvert synth` (RGB PNG image + PNG mask, 3 classes), DIR/enc.lmdb (encoded).
#    --src FOLDER: other pairs instead (FOLDER/images + FOLDER/masks, e.g. the photo crops of
#    bench/transforms/photo_pairs.py), built into DIR/<FOLDER's name>.lmdb; --count/--size unused.
# 2. --rounds times, interleaved (each round runs every configuration once):
#      torch_albu     bench/transforms/albu_loader.py: DataLoader, --threads workers, the recipe
#                     with albumentations 2.0.8 on image + mask, float32 CHW out
#      dspipe_recipe  dsbench --transform recipe.json (CPU float32 normalize: the recipe's own)
#      dspipe_flip    dsbench --hflip 0.5 (the fused PNG path; dataset mean/std)
#    all batch 8, --threads workers / threads, shuffled, page cache warm.
# 3. Prints images/s median (min-max) and the two ratios; writes OUT/summary.json, OUT/table.md.
#
# Needs a build with dsconvert and dsbench, and a Python with torch, lmdb and albumentations
# 2.0.8: --python PY, else DIR/venv is made from Debian's python3 (--system-site-packages for
# python3-torch / python3-lmdb) with `pip install albumentations==2.0.8 numpy==1.26.4`.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
DIR=/tmp/dspipe-recipe
COUNT=320 SIZE=512x512 BATCH=8 THREADS=2 BATCHES=32 WARMUP=4 ROUNDS=3
BUILD="$ROOT/build" OUT="" PY="" SRC_GIVEN=""
die() { echo "recipe_bench: $*" >&2; exit 1; }
while [ $# -gt 0 ]; do
  case "$1" in
    --dir) DIR="$2"; shift ;;
    --count) COUNT="$2"; shift ;;
    --size) SIZE="$2"; shift ;;
    --batch) BATCH="$2"; shift ;;
    --threads) THREADS="$2"; shift ;;
    --batches) BATCHES="$2"; shift ;;
    --warmup) WARMUP="$2"; shift ;;
    --rounds) ROUNDS="$2"; shift ;;
    --build-dir) BUILD="$(cd "$2" && pwd)"; shift ;;
    --python) PY="$2"; shift ;;
    --out) OUT="$2"; shift ;;
    --src) SRC_GIVEN="$(cd "$2" && pwd)"; shift ;;
    -h|--help) sed -n '2,27p' "$0"; exit 0 ;;
    *) die "unknown argument '$1' (see --help)" ;;
  esac
  shift
done
OUT="${OUT:-$DIR/results}"
DSCONVERT="$BUILD/tools/dsconvert/dsconvert"
DSBENCH="$BUILD/tools/dsbench/dsbench"
[ -x "$DSCONVERT" ] && [ -x "$DSBENCH" ] ||
  die "dsconvert / dsbench not in $BUILD: cmake --build $BUILD --target dsconvert dsbench"
mkdir -p "$DIR" "$OUT"
rm -f "$OUT"/*.json
if [ -z "$PY" ]; then
  PY="$DIR/venv/bin/python"
  if ! "$PY" -c "import albumentations" 2>/dev/null; then
    /usr/bin/python3 -m venv --system-site-packages "$DIR/venv"
    "$DIR/venv/bin/pip" install -q albumentations==2.0.8 numpy==1.26.4
  fi
fi
"$PY" -c "import torch, lmdb, albumentations; assert albumentations.__version__ == '2.0.8'" ||
  die "$PY lacks torch / lmdb / albumentations 2.0.8"
t_start=$(date +%s)

if [ -n "$SRC_GIVEN" ]; then
  SRC="$SRC_GIVEN"
  [ -d "$SRC/images" ] || die "--src $SRC has no images/ folder"
  DB="$DIR/$(basename "$SRC").lmdb"
  COUNT=$(find "$SRC/images" -type f | wc -l)
  SOURCE="$COUNT image+mask pairs of $SRC"
else
  SRC="$DIR/src"
  if [ ! -d "$SRC/images" ] || [ "$(find "$SRC/images" -type f | wc -l)" != "$COUNT" ]; then
    rm -rf "$SRC"
    "$DSCONVERT" synth "$SRC" --count "$COUNT" --size "$SIZE" --classes 3
  fi
  DB="$DIR/enc.lmdb"
  SOURCE="$COUNT synth $SIZE PNG image+mask pairs"
fi
if ! "$DSCONVERT" info "$DB" >/dev/null 2>&1 || [ "$DB" -ot "$SRC/images" ]; then
  "$DSCONVERT" build "$SRC" "$DB" --overwrite -q
fi
cat "$DB"/data.mdb >/dev/null  # warm the page cache
RECIPE="$ROOT/bench/transforms/recipe.json"

configs=(torch_albu dspipe_recipe dspipe_flip)
run_one() {  # NAME JSON
  local d=(--batch "$BATCH" --threads "$THREADS" --batches "$BATCHES" --warmup "$WARMUP"
           --json "$2" -q)
  case "$1" in
    torch_albu) "$PY" "$ROOT/bench/transforms/albu_loader.py" "$DB" --transform "$RECIPE" \
                  --batch "$BATCH" --workers "$THREADS" --batches "$BATCHES" \
                  --warmup "$WARMUP" --json "$2" ;;
    dspipe_recipe) "$DSBENCH" "$DB" --transform "$RECIPE" "${d[@]}" ;;
    dspipe_flip) "$DSBENCH" "$DB" --hflip 0.5 "${d[@]}" ;;
  esac
}
for r in $(seq 1 "$ROUNDS"); do
  for c in "${configs[@]}"; do
    echo "== round $r/$ROUNDS: $c"
    log="$OUT/$c.$r.log"
    if ! run_one "$c" "$OUT/$c.$r.json" >"$log" 2>&1; then
      tail -5 "$log" >&2
      die "$c failed (round $r); full log: $log"
    fi
  done
done

"$PY" - "$OUT" "$ROUNDS" "$(( $(date +%s) - t_start ))" "$BATCH" "$THREADS" "$SOURCE" \
    "${configs[@]}" <<'PYEOF'
import glob, json, os, statistics, sys
out, rounds, secs, batch, threads, source = sys.argv[1:7]
configs = sys.argv[7:]
def rate(path):
    d = json.load(open(path))
    return float(d["images_per_s"]["median"] if "images_per_s" in d else
                 d["throughput"]["images_per_s"])
rates = {c: [rate(f) for f in sorted(glob.glob(os.path.join(out, f"{c}.*.json")))]
         for c in configs}
med = {c: statistics.median(v) for c, v in rates.items()}
label = {"torch_albu": "PyTorch DataLoader + albumentations 2.0.8, the recipe",
         "dspipe_recipe": "dspipe Loader, the recipe (dsbench --transform)",
         "dspipe_flip": "dspipe Loader, flips only (dsbench --hflip 0.5)"}
rows = ["| configuration | images/s median (min-max) |", "|---|---|"]
for c in configs:
    rows.append(f"| {label[c]} | {med[c]:.1f} ({min(rates[c]):.1f}-{max(rates[c]):.1f}) |")
ratios = {"recipe_vs_torch_albumentations": med["dspipe_recipe"] / med["torch_albu"],
          "recipe_vs_flip_only": med["dspipe_recipe"] / med["dspipe_flip"]}
load = os.getloadavg()[0]
note = (f"{source} in an encoded dspipe LMDB; batch {batch}, "
        f"{threads} threads / DataLoader workers, float32 NCHW out; median of {rounds} "
        f"interleaved rounds; {os.cpu_count()} CPUs, load avg {load:.1f} at the end; {secs} s. "
        f"dspipe recipe / DataLoader+albumentations: {ratios['recipe_vs_torch_albumentations']:.2f}x "
        f"(target >= 5x); recipe / flip-only: {ratios['recipe_vs_flip_only']:.2f}x (target >= 0.7x)")
print("\n".join(rows) + "\n\n" + note)
with open(os.path.join(out, "table.md"), "w") as f:
    f.write("\n".join(rows) + "\n\n" + note + "\n")
with open(os.path.join(out, "summary.json"), "w") as f:
    json.dump({"rates": rates, "median": med, "ratios": ratios, "note": note}, f, indent=1)
PYEOF
