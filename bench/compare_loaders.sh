#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# dspipe vs a PyTorch DataLoader on the same data and machine, in one run, as ratios.
#
#   bench/compare_loaders.sh [--dir DIR] [--count 512] [--size 512x512] [--batch 8]
#                            [--threads 2] [--batches 32] [--warmup 4] [--rounds 3]
#                            [--build-dir build] [--out DIR] [--torch-only]
#                            [--configs "torch_lmdb_enc dspipe_enc dspipe_enc_libspng"]
#
# 1. DIR/src: `dsconvert synth` (RGB PNG image + PNG mask, 3 classes), reused when present;
#    DIR/enc.lmdb (--store encoded), DIR/raw.lmdb (--store raw), DIR/plain.lmdb
#    (bench/make_plain_lmdb.py: the Python lmdb + cv2.imencode recipe, images only).
# 2. Runs, --rounds times, interleaved (round 1 runs every configuration once, then round 2, ...
#    so load from other processes hits all configurations alike):
#      torch  files   images/ + masks/ with cv2.imread        (bench/torch_loader.py)
#      torch  plain   plain.lmdb
#      torch  lmdb    enc.lmdb, raw.lmdb (dspipe format read from Python)
#      dspipe         enc.lmdb, raw.lmdb, plain.lmdb with `dsbench --json`
#      dspipe libspng enc.lmdb with the PNG fast path off (DSPIPE_PNG_DECODER=libspng: the
#                     decoder before it, in the same run)
#    --configs picks a subset (names as in the table's source: torch_files, torch_plain,
#    torch_lmdb_enc, torch_lmdb_raw, dspipe_files, dspipe_enc, dspipe_enc_libspng, dspipe_raw,
#    dspipe_plain).
#    Same work everywhere: batch 8, 2 workers/threads, shuffle, random hflip 0.5 (image and
#    mask), float32 NCHW (x - mean) / std on the CPU. Page cache warm (files read once first).
# 3. Prints a table: images/s median (min-max over rounds), ratio to torch-on-files, ratio
#    dspipe / torch on the same data; writes OUT/summary.json and OUT/table.md.
#
# Needs: a build with dsconvert and dsbench (`cmake --build BUILD --target dsconvert dsbench`),
# Debian's python3-torch python3-lmdb python3-opencv python3-numpy python3-zstandard.
# Env: DSBENCH_FLAGS overrides the dsbench flags that select the work (flip + CPU normalize).
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
PY=/usr/bin/python3
DIR=/tmp/dspipe-compare
COUNT=512 SIZE=512x512 BATCH=8 THREADS=2 BATCHES=32 WARMUP=4 ROUNDS=3
BUILD="$ROOT/build" OUT="" TORCH_ONLY=0 CONFIGS=""

die() { echo "compare_loaders: $*" >&2; exit 1; }
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
    --out) OUT="$2"; shift ;;
    --torch-only) TORCH_ONLY=1 ;;
    --configs) CONFIGS="$2"; shift ;;
    -h|--help) sed -n '2,25p' "$0"; exit 0 ;;
    *) die "unknown argument '$1' (see --help)" ;;
  esac
  shift
done
[ "$ROUNDS" -ge 1 ] || die "--rounds must be >= 1"
OUT="${OUT:-$DIR/results}"
DSCONVERT="$BUILD/tools/dsconvert/dsconvert"
DSBENCH="$BUILD/tools/dsbench/dsbench"
# The work dsbench must do to match the torch harness (see docs/DSBENCH.md).
# (CPU float32 normalization is dsbench's default; --no-normalize would turn it off.)
read -r -a DFLAGS <<<"${DSBENCH_FLAGS:---hflip 0.5}"

[ -x "$DSCONVERT" ] || die "$DSCONVERT not found: cmake --build $BUILD --target dsconvert"
if [ "$TORCH_ONLY" = 0 ] && [ ! -x "$DSBENCH" ]; then
  die "$DSBENCH not found: cmake --build $BUILD --target dsbench (or --torch-only)"
fi
$PY -c "import torch, lmdb, cv2, numpy, zstandard" 2>/dev/null ||
  die "$PY lacks torch/lmdb/cv2/numpy/zstandard: bash scripts/install-deps.sh --bench"

mkdir -p "$DIR" "$OUT"
rm -f "$OUT"/*.json
t_start=$(date +%s)

# ---- data (reused when complete)
SRC="$DIR/src"
if [ ! -d "$SRC/images" ] || [ "$(find "$SRC/images" -type f | wc -l)" != "$COUNT" ]; then
  rm -rf "$SRC"
  "$DSCONVERT" synth "$SRC" --count "$COUNT" --size "$SIZE" --classes 3
fi
for store in encoded raw; do
  db="$DIR/${store:0:3}.lmdb"
  if ! "$DSCONVERT" info "$db" >/dev/null 2>&1 || [ "$db" -ot "$SRC/images" ]; then
    "$DSCONVERT" build "$SRC" "$db" --store "$store" --overwrite -q
  fi
done
if [ ! -f "$DIR/plain.lmdb/data.mdb" ] || [ "$DIR/plain.lmdb" -ot "$SRC/images" ]; then
  rm -rf "$DIR/plain.lmdb"
  $PY "$ROOT/bench/make_plain_lmdb.py" "$SRC" "$DIR/plain.lmdb"
fi
cat "$SRC"/images/* "$SRC"/masks/* "$DIR"/*.lmdb/data.mdb >/dev/null  # warm the page cache

# ---- runs: name | command writing JSON to $json
configs=(torch_files torch_plain torch_lmdb_enc torch_lmdb_raw)
[ "$TORCH_ONLY" = 1 ] ||
  configs+=(dspipe_files dspipe_enc dspipe_enc_libspng dspipe_raw dspipe_plain)
[ -z "$CONFIGS" ] || read -r -a configs <<<"$CONFIGS"
run_one() {  # NAME JSON
  local t=(--batch "$BATCH" --workers "$THREADS" --batches "$BATCHES" --warmup "$WARMUP"
           --repeats 1 --json "$2")
  local d=(--batch "$BATCH" --threads "$THREADS" --batches "$BATCHES" --warmup "$WARMUP"
           --json "$2" "${DFLAGS[@]}")
  case "$1" in
    torch_files) $PY "$ROOT/bench/torch_loader.py" "$SRC" --kind files "${t[@]}" ;;
    torch_plain) $PY "$ROOT/bench/torch_loader.py" "$DIR/plain.lmdb" --kind plain "${t[@]}" ;;
    torch_lmdb_enc) $PY "$ROOT/bench/torch_loader.py" "$DIR/enc.lmdb" --kind lmdb "${t[@]}" ;;
    torch_lmdb_raw) $PY "$ROOT/bench/torch_loader.py" "$DIR/raw.lmdb" --kind lmdb "${t[@]}" ;;
    dspipe_files) "$DSBENCH" "$SRC" --compare "$DIR/enc.lmdb" "${d[@]}" ;;
    dspipe_enc) "$DSBENCH" "$DIR/enc.lmdb" "${d[@]}" ;;
    dspipe_enc_libspng) DSPIPE_PNG_DECODER=libspng "$DSBENCH" "$DIR/enc.lmdb" "${d[@]}" ;;
    dspipe_raw) "$DSBENCH" "$DIR/raw.lmdb" "${d[@]}" ;;
    dspipe_plain) "$DSBENCH" "$DIR/plain.lmdb" "${d[@]}" ;;
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
    $PY -c 'import json, sys; d = json.load(open(sys.argv[1])); c = sys.argv[2]
t = d["images_per_s"]["median"] if "images_per_s" in d else (
    d["compare"]["folder"] if c == "dspipe_files" else d)["throughput"]["images_per_s"]
print(f"   {t:.1f} images/s")' "$OUT/$c.$r.json" "$c"
  done
done

# ---- table
$PY - "$OUT" "$ROUNDS" "$(( $(date +%s) - t_start ))" "$BATCH" "$THREADS" "$COUNT" "$SIZE" \
    "${configs[@]}" <<'EOF'
import glob, json, os, statistics, sys, textwrap
out, rounds, secs, batch, threads, count, size = sys.argv[1:8]
configs = sys.argv[8:]

def images_per_s(path, config):
    """torch_loader.py: images_per_s.median; dsbench (docs/DSBENCH.md): throughput.images_per_s,
    for --compare the folder run's compare.folder.throughput.images_per_s."""
    doc = json.load(open(path))
    try:
        if doc.get("tool") == "torch_dataloader":
            return float(doc["images_per_s"]["median"])
        if config == "dspipe_files":
            doc = doc["compare"]["folder"]
        return float(doc["throughput"]["images_per_s"])
    except (KeyError, TypeError) as e:
        sys.exit(f"compare_loaders: {path}: no images/s field ({e!r}); keys: {sorted(doc)}")

rates = {}
for c in configs:
    files = sorted(glob.glob(os.path.join(out, f"{c}.*.json")))
    rates[c] = [images_per_s(f, c) for f in files]
med = {c: statistics.median(v) for c, v in rates.items()}
same = {"dspipe_enc": "torch_lmdb_enc", "dspipe_enc_libspng": "torch_lmdb_enc", "dspipe_raw": "torch_lmdb_raw",
        "dspipe_plain": "torch_plain", "dspipe_files": "torch_files"}
label = {"torch_files": "torch DataLoader, PNG files (cv2.imread)",
         "torch_plain": "torch DataLoader, plain LMDB (PNG, no masks)",
         "torch_lmdb_enc": "torch DataLoader, dspipe LMDB encoded (PNG)",
         "torch_lmdb_raw": "torch DataLoader, dspipe LMDB raw+zstd",
         "dspipe_files": "dspipe (dsbench --compare), PNG files",
         "dspipe_enc": "dspipe Loader, dspipe LMDB encoded (PNG)",
         "dspipe_enc_libspng": "dspipe Loader, dspipe LMDB encoded (PNG), libspng decoder",
         "dspipe_raw": "dspipe Loader, dspipe LMDB raw+zstd",
         "dspipe_plain": "dspipe Loader, plain LMDB (PNG, no masks)"}
rows = ["| configuration | images/s median (min-max) | vs torch files | dspipe / torch same data |",
        "|---|---|---|---|"]
for c in configs:
    v = rates[c]
    vs_same = f"{med[c] / med[same[c]]:.2f}x" if c in same and same[c] in med else "-"
    vs_files = f"{med[c] / med['torch_files']:.2f}x" if "torch_files" in med else "-"
    rows.append(f"| {label[c]} | {med[c]:.1f} ({min(v):.1f}-{max(v):.1f}) | "
                f"{vs_files} | {vs_same} |")
load = os.getloadavg()
note = (f"{count} synth samples {size} RGB PNG + PNG mask; batch {batch}, "
        f"{threads} workers/threads, hflip 0.5 + float32 normalize; "
        f"median of {rounds} interleaved rounds; "
        f"{os.cpu_count()} CPUs, load avg {load[0]:.1f} at the end; {secs} s in all.")
note = textwrap.fill(note, 100)
print("\n" + "\n".join(rows) + "\n\n" + note)
with open(os.path.join(out, "table.md"), "w") as f:
    f.write("\n".join(rows) + "\n\n" + note + "\n")
with open(os.path.join(out, "summary.json"), "w") as f:
    json.dump({"rates": rates, "median": med, "note": note,
               "ratio_vs_torch_files": {c: med[c] / med["torch_files"] for c in configs
                                        if "torch_files" in med},
               "ratio_dspipe_vs_torch_same": {c: med[c] / med[same[c]] for c in configs
                                              if c in same and same[c] in med}}, f, indent=1)
EOF
