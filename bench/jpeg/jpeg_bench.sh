#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# JPEG classification loading: dspipe vs DALI's CPU pipeline vs torchvision, and dspipe's region
# + scaled decode vs its own full decode, on the same data and machine, in one run, as ratios.
#
#   bench/jpeg/jpeg_bench.sh [--dir DIR] [--count 2000] [--classes 10] [--batch 64]
#                            [--threads 2] [--batches 30] [--warmup 5] [--rounds 3]
#                            [--build-dir build] [--modes "train val"] [--configs "..."]
#                            [--large-count 300]
#
# 1. Data (reused when complete): DIR/src, bench/jpeg/make_jpegs.py (ImageNet-like sizes, short
#    side 300-500, aspect 3:4..16:9, natural-image-like content, quality 90, 4:2:0, --classes
#    folders); DIR/src.lmdb = `dsconvert build DIR/src` (--store encoded: the JPEG bytes) and
#    DIR/src_rst.lmdb = the same with --jpeg-restarts (a restart marker after every MCU).
#    DIR/large (--large-count images at 3x those sides, camera-sized) + DIR/large.lmdb, for the
#    validation pipeline where DCT scaling applies. DIR/venv-dali: a venv with
#    bench/jpeg/requirements.txt (nvidia-dali-cuda130, numpy 1.x).
# 2. Runs, --rounds times, interleaved (round r runs every configuration once):
#      dspipe_roi   jpeg_bench loader src.lmdb --decode roi   (region + SIMD DCT scales)
#      dspipe_rst   jpeg_bench loader src_rst.lmdb --decode roi (the same, each region decoded
#                   from its MCUs alone)
#      dspipe_full  jpeg_bench loader src.lmdb --decode full  (whole image at 8/8, then crop)
#      dali         dali_jpeg.py DIR/src  (fn.decoders.image_random_crop + fn.resize +
#                   fn.crop_mirror_normalize, device_id=None)
#      torch        torch_jpeg.py DIR/src (ImageFolder + RandomResizedCrop + ToTensor +
#                   Normalize, DataLoader with --threads workers; Debian python3-torchvision)
#    for --mode train (RandomResizedCrop(224, scale=(0.08, 1)) + hflip 0.5 + float32
#    normalize) and val (Resize(256) + CenterCrop(224) + normalize); val also on large.lmdb
#    (dspipe_roi_large, dspipe_full_large). Batch --batch, --threads threads / workers.
# 3. Prints images/s median (min-max over rounds) per configuration and the ratios: dspipe_roi
#    and dspipe_rst / dali, / torch, / dspipe_full (per mode); writes OUT/summary.json and
#    OUT/table.md.
# Needs: cmake --build BUILD --target dsconvert jpeg_bench; scripts/install-deps.sh --bench
# (python3-torchvision, python3-pil, python3-numpy); pip (PyPI) for the DALI venv.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
PY=/usr/bin/python3
DIR=/tmp/dspipe-jpeg
COUNT=2000 CLASSES=10 BATCH=64 THREADS=2 BATCHES=30 WARMUP=5 ROUNDS=3 LARGE=300
BUILD="$ROOT/build" MODES="train val" CONFIGS=""
die() { echo "jpeg_bench: $*" >&2; exit 1; }
while [ $# -gt 0 ]; do
  case "$1" in
    --dir) DIR="$2"; shift ;;
    --count) COUNT="$2"; shift ;;
    --classes) CLASSES="$2"; shift ;;
    --batch) BATCH="$2"; shift ;;
    --threads) THREADS="$2"; shift ;;
    --batches) BATCHES="$2"; shift ;;
    --warmup) WARMUP="$2"; shift ;;
    --rounds) ROUNDS="$2"; shift ;;
    --large-count) LARGE="$2"; shift ;;
    --build-dir) BUILD="$(cd "$2" && pwd)"; shift ;;
    --modes) MODES="$2"; shift ;;
    --configs) CONFIGS="$2"; shift ;;
    -h|--help) sed -n '2,33p' "$0"; exit 0 ;;
    *) die "unknown argument '$1' (see --help)" ;;
  esac
  shift
done
OUT="$DIR/results"
DSCONVERT="$BUILD/tools/dsconvert/dsconvert"
BENCH="$BUILD/bench/jpeg/jpeg_bench"
[ -x "$DSCONVERT" ] && [ -x "$BENCH" ] ||
  die "build first: cmake --build $BUILD --target dsconvert jpeg_bench"
$PY -c "import torch, torchvision, PIL, numpy" 2>/dev/null ||
  die "$PY lacks torch/torchvision/PIL/numpy: bash scripts/install-deps.sh --bench"
mkdir -p "$DIR" "$OUT"
rm -f "$OUT"/*.json

# ---- data (reused when complete)
make_set() {  # NAME COUNT SIZE_SCALE
  local src="$DIR/$1" db="$DIR/$1.lmdb"
  if [ "$(find "$src" -name '*.jpg' 2>/dev/null | wc -l)" != "$2" ]; then
    rm -rf "$src" "$db"
    $PY "$ROOT/bench/jpeg/make_jpegs.py" "$src" --count "$2" --classes "$CLASSES" \
      --size-scale "$3"
  fi
  if ! "$DSCONVERT" info "$db" >/dev/null 2>&1; then
    "$DSCONVERT" build "$src" "$db" --overwrite -q
  fi
  if ! "$DSCONVERT" info "$DIR/$1_rst.lmdb" >/dev/null 2>&1; then
    "$DSCONVERT" build "$src" "$DIR/$1_rst.lmdb" --jpeg-restarts --overwrite -q
  fi
  cat "$src"/*/*.jpg "$db"/data.mdb "$DIR/$1_rst.lmdb"/data.mdb >/dev/null  # warm the page cache
}
make_set src "$COUNT" 1
case " $MODES " in *" val "*) make_set large "$LARGE" 3 ;; esac
VENV="$DIR/venv-dali"
if [ ! -x "$VENV/bin/python" ] || ! "$VENV/bin/python" -c "import nvidia.dali" 2>/dev/null; then
  $PY -m venv "$VENV"
  "$VENV/bin/pip" install -q -r "$ROOT/bench/jpeg/requirements.txt"
fi

run_one() {  # MODE CONFIG JSON
  local m=$1 c=$2 j=$3
  local d=(--mode "$m" --batch "$BATCH" --threads "$THREADS" --batches "$BATCHES"
           --warmup "$WARMUP" --json "$j")
  local p=(--mode "$m" --batch "$BATCH" --batches "$BATCHES" --warmup "$WARMUP" --json "$j")
  case "$c" in
    dspipe_roi) "$BENCH" loader "$DIR/src.lmdb" --decode roi "${d[@]}" ;;
    dspipe_rst) "$BENCH" loader "$DIR/src_rst.lmdb" --decode roi "${d[@]}" ;;
    dspipe_full) "$BENCH" loader "$DIR/src.lmdb" --decode full "${d[@]}" ;;
    dspipe_roi_large) "$BENCH" loader "$DIR/large.lmdb" --decode roi "${d[@]}" ;;
    dspipe_full_large) "$BENCH" loader "$DIR/large.lmdb" --decode full "${d[@]}" ;;
    dali) OPENCV_LOG_LEVEL=SILENT "$VENV/bin/python" "$ROOT/bench/jpeg/dali_jpeg.py" "$DIR/src" \
            --threads "$THREADS" "${p[@]}" ;;
    torch) $PY "$ROOT/bench/jpeg/torch_jpeg.py" "$DIR/src" --workers "$THREADS" "${p[@]}" ;;
  esac
}
t_start=$(date +%s)
load0=$(cut -d' ' -f1-3 /proc/loadavg)
for r in $(seq 1 "$ROUNDS"); do
  for m in $MODES; do
    configs=(dspipe_roi dspipe_rst dspipe_full dali torch)
    [ "$m" = val ] && configs+=(dspipe_roi_large dspipe_full_large)
    [ -z "$CONFIGS" ] || read -r -a configs <<<"$CONFIGS"
    for c in "${configs[@]}"; do
      log="$OUT/$m.$c.$r.log"
      if ! run_one "$m" "$c" "$OUT/$m.$c.$r.json" >"$log" 2>&1; then
        tail -5 "$log" >&2
        die "$m $c failed (round $r); full log: $log"
      fi
      printf '== round %s/%s %-5s %-18s %8.1f images/s\n' "$r" "$ROUNDS" "$m" "$c" \
        "$($PY -c 'import json,sys; print(json.load(open(sys.argv[1]))["images_per_s"])' \
            "$OUT/$m.$c.$r.json")"
    done
  done
done
load1=$(cut -d' ' -f1-3 /proc/loadavg)

# ---- table
$PY - "$OUT" "$(( $(date +%s) - t_start ))" "$load0" "$load1" "$BATCH" "$THREADS" "$COUNT" \
    "$LARGE" <<'EOF'
import glob, json, os, statistics, sys
out, secs, load0, load1, batch, threads, count, large = sys.argv[1:9]
runs = {}
for path in glob.glob(os.path.join(out, "*.json")):
    name = os.path.basename(path)
    if name == "summary.json":
        continue
    mode, config, _r, _ = name.split(".")
    runs.setdefault((mode, config), []).append(json.load(open(path))["images_per_s"])
rows, summary = [], {"runs": {}, "ratios": {}}
def med(m, c):
    v = runs.get((m, c))
    return statistics.median(v) if v else None
for (m, c), v in sorted(runs.items()):
    summary["runs"][f"{m}.{c}"] = {"median": statistics.median(v), "min": min(v), "max": max(v),
                                  "all": v}
    rows.append(f"| {m} | {c} | {statistics.median(v):.1f} ({min(v):.1f}-{max(v):.1f}) |")
ratio_rows = []
for m in ("train", "val"):
    for ours in ("dspipe_roi", "dspipe_rst"):
        for base, target in (("dali", 2.0), ("torch", 4.0), ("dspipe_full", 1.5)):
            a, b = med(m, ours), med(m, base)
            if a and b:
                summary["ratios"][f"{m}: {ours} / {base}"] = a / b
                ratio_rows.append(f"| {m} | {ours} / {base} | {a / b:.2f}x | >= {target}x |")
    a, b = med(m, "dspipe_roi_large"), med(m, "dspipe_full_large")
    if a and b:
        summary["ratios"][f"{m}: dspipe_roi_large / dspipe_full_large"] = a / b
        ratio_rows.append(f"| {m} (3x-size images) | dspipe_roi_large / dspipe_full_large | "
                          f"{a / b:.2f}x | (scaled decode's gain) |")
text = (f"JPEG bench: {count} JPEGs (+{large} at 3x size), batch {batch}, {threads} "
        f"threads/workers, {secs} s, load average {load0} -> {load1}\n\n"
        "| mode | configuration | images/s median (min-max) |\n|---|---|---|\n" +
        "\n".join(rows) + "\n\n| mode | ratio | measured | target |\n|---|---|---|---|\n" +
        "\n".join(ratio_rows) + "\n")
print(text)
open(os.path.join(out, "table.md"), "w").write(text)
json.dump(summary, open(os.path.join(out, "summary.json"), "w"), indent=2)
EOF
