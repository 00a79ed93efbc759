#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Cold vs warm page cache, LMDB vs the folder it replaces, side by side in one run (issue 8).
#
#   bench/cold/cold_bench.sh [--dir DIR] [--count 300] [--threads 2] [--rounds 3]
#                            [--build-dir build]
#
# 1. DIR/src: COUNT noisy 512x512 RGB PNG images (gradient + Gaussian noise, ~0.5 MB each) + PNG
#    masks, made with numpy/cv2 (reused when present); DIR/enc.lmdb (--store encoded) and
#    DIR/raw.lmdb (--store raw, zstd).
# 2. --rounds times, interleaved (each round runs every configuration once, so load from other
#    processes hits all alike), every run one whole epoch, --warmup 0, THREADS threads, no
#    --compute-ms (a pure storage + loader comparison):
#      cold  folder vs enc.lmdb     `dsbench DIR/src --compare enc.lmdb --drop-cache`
#      warm  enc.lmdb               the same LMDB again, cache now warm
#      warm  enc.lmdb, --readahead 0  (read-ahead costs nothing when pages are resident?)
#      cold  raw.lmdb               --drop-cache
#      warm  raw.lmdb, and with --readahead 0
#      cold  raw.lmdb, --readahead 0  (fault-in in `read` only, no read-ahead)
#      seq   sequential read of raw.lmdb's data.mdb after a cache drop (dd, 4 MiB blocks)
#    The cache is dropped with posix_fadvise(DONTNEED) (dsbench --drop-cache, checked with
#    mincore; a run whose drop failed says so in its JSON "cache" note and is flagged here).
# 3. Prints images/s median (min-max) per configuration and the issue's ratios; writes
#    DIR/out/summary.json.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
PY=/usr/bin/python3
DIR=/tmp/dspipe-cold-bench
COUNT=300 THREADS=2 ROUNDS=3 BUILD="$ROOT/build"
while [ $# -gt 0 ]; do
  case "$1" in
    --dir) DIR=$2; shift 2 ;;
    --count) COUNT=$2; shift 2 ;;
    --threads) THREADS=$2; shift 2 ;;
    --rounds) ROUNDS=$2; shift 2 ;;
    --build-dir) BUILD=$(cd "$2" && pwd); shift 2 ;;
    *) echo "cold_bench.sh: unknown argument $1" >&2; exit 2 ;;
  esac
done
source "$ROOT/bench/noisy_lmdbs.sh"
bench_tools cold_bench.sh "$BUILD"
OUT="$DIR/out"
mkdir -p "$DIR" "$OUT"
bench_noisy_lmdbs "$DIR" "$COUNT" enc raw

COMMON=(--epochs 1 --warmup 0 --threads "$THREADS" -q)
for r in $(seq 1 "$ROUNDS"); do
  echo "== round $r/$ROUNDS"
  "$DSB" "$DIR/src" --compare "$DIR/enc.lmdb" --drop-cache "${COMMON[@]}" --json "$OUT/cmp-$r.json"
  "$DSB" "$DIR/enc.lmdb" "${COMMON[@]}" --json "$OUT/enc-warm-$r.json"
  "$DSB" "$DIR/enc.lmdb" "${COMMON[@]}" --readahead 0 --json "$OUT/enc-warm-ra0-$r.json"
  "$DSB" "$DIR/raw.lmdb" --drop-cache "${COMMON[@]}" --json "$OUT/raw-cold-$r.json"
  "$DSB" "$DIR/raw.lmdb" "${COMMON[@]}" --json "$OUT/raw-warm-$r.json"
  "$DSB" "$DIR/raw.lmdb" "${COMMON[@]}" --readahead 0 --json "$OUT/raw-warm-ra0-$r.json"
  "$DSB" "$DIR/raw.lmdb" --drop-cache "${COMMON[@]}" --readahead 0 --json "$OUT/raw-cold-ra0-$r.json"
  # Sequential read of the raw data file from a dropped cache (the same fadvise drop).
  "$PY" -c "import os,sys; fd=os.open(sys.argv[1], os.O_RDONLY); os.posix_fadvise(fd,0,0,os.POSIX_FADV_DONTNEED)" "$DIR/raw.lmdb/data.mdb"
  dd if="$DIR/raw.lmdb/data.mdb" of=/dev/null bs=4M 2> "$OUT/seq-$r.txt"
done

"$PY" - "$OUT" "$ROUNDS" <<'EOF'
import json, re, statistics, sys
out, rounds = sys.argv[1], int(sys.argv[2])
def load(name, r):
    with open(f"{out}/{name}-{r}.json") as f: return json.load(f)
rows = {}
def add(label, r, run):
    rows.setdefault(label, []).append(run)
for r in range(1, rounds + 1):
    cmp = load("cmp", r)
    add("cold folder (PNG files)", r, cmp["compare"]["folder"])
    add("cold LMDB encoded (PNG)", r, cmp)
    for name, label in [("enc-warm", "warm LMDB encoded"), ("enc-warm-ra0", "warm LMDB encoded, --readahead 0"),
                        ("raw-cold", "cold LMDB raw+zstd"), ("raw-warm", "warm LMDB raw+zstd"),
                        ("raw-warm-ra0", "warm LMDB raw+zstd, --readahead 0"),
                        ("raw-cold-ra0", "cold LMDB raw+zstd, --readahead 0")]:
        add(label, r, load(name, r))
def ips(run): return run["throughput"]["images_per_s"]
def cold_ok(run):
    c = run.get("cache") or {}
    return not c.get("requested") or c.get("dropped") == c.get("files")
def fmt(v): return f"{statistics.median(v):.1f} ({min(v):.1f}–{max(v):.1f})"
summary = {}
print("| configuration | images/s median (min–max) | verdict (round 1) | read ms p50 | decode ms p50 |")
print("|---|---|---|---|---|")
for label, runs in rows.items():
    v = [ips(x) for x in runs]
    st = {s["stage"]: s for s in runs[0]["stages"]}
    flag = "" if all(cold_ok(x) for x in runs) else " (cache drop FAILED: partly warm)"
    print(f"| {label}{flag} | {fmt(v)} | {runs[0]['verdict']['bound']} | "
          f"{st.get('read', {}).get('p50_ms', 0):.3f} | {st.get('decode', {}).get('p50_ms', 0):.3f} |")
    summary[label] = v
def ratio(a, b):
    rs = [x / y for x, y in zip(summary[a], summary[b])]
    return f"{statistics.median(rs):.2f}× ({min(rs):.2f}–{max(rs):.2f})"
print()
print("cold LMDB / cold folder (target >= 1.0):", ratio("cold LMDB encoded (PNG)", "cold folder (PNG files)"))
print("cold LMDB / warm LMDB (target >= 0.85):", ratio("cold LMDB encoded (PNG)", "warm LMDB encoded"))
print("cold raw / warm raw:", ratio("cold LMDB raw+zstd", "warm LMDB raw+zstd"))
print("warm encoded, read-ahead on / off:", ratio("warm LMDB encoded", "warm LMDB encoded, --readahead 0"))
print("warm raw, read-ahead on / off:", ratio("warm LMDB raw+zstd", "warm LMDB raw+zstd, --readahead 0"))
print("cold raw, read-ahead on / off:", ratio("cold LMDB raw+zstd", "cold LMDB raw+zstd, --readahead 0"))
# Sequential read rate of data.mdb and the images/s it allows for this record size.
seq = []
for r in range(1, rounds + 1):
    txt = open(f"{out}/seq-{r}.txt").read()
    m = re.search(r"(\d+) bytes.*?, ([\d.]+) s,", txt)
    seq.append(int(m.group(1)) / float(m.group(2)) / 1e6)
raw = load("raw-cold", 1)
per_image_mb = raw["dataset"]["bytes"] / raw["dataset"]["count"] / 1e6
allowed = [s / per_image_mb for s in seq]
print(f"sequential read of raw data.mdb: {fmt(seq)} MB/s; {per_image_mb:.3f} MB per record on disk "
      f"-> the disk allows {fmt(allowed)} images/s")
cold_raw = statistics.median(summary["cold LMDB raw+zstd"])
warm_raw = statistics.median(summary["warm LMDB raw+zstd"])
target = min(0.8 * warm_raw, 0.8 * statistics.median(allowed))
print(f"cold raw target: min(0.8 x warm {warm_raw:.1f}, 0.8 x disk-allowed {statistics.median(allowed):.1f}) "
      f"= {target:.1f} images/s; measured {cold_raw:.1f} ({cold_raw / target:.2f}x of target)")
summary["seq_mb_per_s"] = seq
summary["disk_allowed_images_per_s"] = allowed
json.dump(summary, open(f"{out}/summary.json", "w"), indent=1)
EOF
