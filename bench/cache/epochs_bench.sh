#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# RAM-disk cache over several epochs (issue 10): one dsbench run of 3 epochs whose first epoch
# reads in place while the copy is made in the background, and whose later epochs read the
# copy (the loader switches at the epoch boundary), side by side with 3 epochs warm in place.
#
#   bench/cache/epochs_bench.sh [--dir DIR] [--count 300] [--threads 2] [--rounds 3]
#                               [--epochs 3] [--stores "enc"] [--build-dir build]
#
# 1. DIR/src: COUNT noisy 512x512 RGB PNG images + PNG masks (bench/make_noisy_pngs.py, as
#    bench/cache/cache_bench.sh; reused when present); DIR/enc.lmdb (--store encoded) and, with
#    --stores "enc raw", DIR/raw.lmdb (--store raw, zstd).
# 2. --rounds times, interleaved (each round runs both configurations, so load from other
#    processes hits both alike; odd rounds run `cache` first, even rounds `place` first),
#    --epochs E --warmup 0 --threads THREADS:
#      cache   a fresh cache dir C on /dev/shm, `--cache C --cache-wait`: epoch 0 in place with
#              the copy in the background; the run waits for the copy at the end of epoch 0
#              (copy_wait_s, outside the epochs' times) so epochs 1.. read the copy
#      entry   right after `cache`, the same `--cache C`: the entry is there at open, every
#              epoch reads the copy (no switch): what the switched epochs should match
#      place   no cache: every epoch warm in place (the page cache holds the source)
# 3. Prints, per epoch, images/s median (min-max) of the three, where each epoch of `cache` read
#    from, the ratios cache / place and cache / entry per epoch (median (min-max) of the
#    per-round ratios), the copy's time and the wait, and /proc/loadavg before and after;
#    writes DIR/out-epochs/summary.json.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
PY=/usr/bin/python3
DIR=/tmp/dspipe-cache-bench
COUNT=300 THREADS=2 ROUNDS=3 EPOCHS=3 STORES="enc" BUILD="$ROOT/build"
while [ $# -gt 0 ]; do
  case "$1" in
    --dir) DIR=$2; shift 2 ;;
    --count) COUNT=$2; shift 2 ;;
    --threads) THREADS=$2; shift 2 ;;
    --rounds) ROUNDS=$2; shift 2 ;;
    --epochs) EPOCHS=$2; shift 2 ;;
    --stores) STORES=$2; shift 2 ;;
    --build-dir) BUILD=$(cd "$2" && pwd); shift 2 ;;
    *) echo "epochs_bench.sh: unknown argument $1" >&2; exit 2 ;;
  esac
done
source "$ROOT/bench/noisy_lmdbs.sh"
bench_tools epochs_bench.sh "$BUILD"
bench_shm_cache epochs_bench.sh dspipe-epochs-bench
OUT="$DIR/out-epochs"
mkdir -p "$DIR" "$OUT"
# shellcheck disable=SC2086  # STORES is a list
bench_noisy_lmdbs "$DIR" "$COUNT" $STORES

COMMON=(--epochs "$EPOCHS" --warmup 0 --threads "$THREADS" --sample-ms 0 -q)
cat /proc/loadavg > "$OUT/loadavg-before.txt"
for r in $(seq 1 "$ROUNDS"); do
  echo "== round $r/$ROUNDS"
  for s in $STORES; do
    DB="$DIR/$s.lmdb"
    # Alternating which runs first, so that neither always follows the other.
    [ $((r % 2)) -eq 0 ] && "$DSB" "$DB" "${COMMON[@]}" --json "$OUT/$s-place-$r.json"
    rm -rf "${CACHE:?}"/*
    "$DSB" "$DB" --cache "$CACHE" --cache-wait "${COMMON[@]}" --json "$OUT/$s-cache-$r.json"
    "$DSB" "$DB" --cache "$CACHE" "${COMMON[@]}" --json "$OUT/$s-entry-$r.json"
    [ $((r % 2)) -eq 1 ] && "$DSB" "$DB" "${COMMON[@]}" --json "$OUT/$s-place-$r.json"
  done
done
cat /proc/loadavg > "$OUT/loadavg-after.txt"

"$PY" - "$OUT" "$ROUNDS" "$STORES" <<'EOF'
import json, statistics, sys
out, rounds, stores = sys.argv[1], int(sys.argv[2]), sys.argv[3].split()
def load(name, r):
    with open(f"{out}/{name}-{r}.json") as f: return json.load(f)
def fmt(v, d=1): return f"{statistics.median(v):.{d}f} ({min(v):.{d}f}–{max(v):.{d}f})"
print("load average before:", open(f"{out}/loadavg-before.txt").read().strip())
print("load average after: ", open(f"{out}/loadavg-after.txt").read().strip())
summary = {}
for s in stores:
    cache = [load(f"{s}-cache", r) for r in range(1, rounds + 1)]
    place = [load(f"{s}-place", r) for r in range(1, rounds + 1)]
    entry = [load(f"{s}-entry", r) for r in range(1, rounds + 1)]
    for x in entry:
        if not x["ram_cache"]["cached"] or x["ram_cache"]["overlapped"]:
            sys.exit(f"epochs_bench.sh: entry run did not find the entry: {x['ram_cache']['note']}")
    d = cache[0]["dataset"]
    print(f"\n{s}.lmdb ({d['store']}): {d['count']} records, {d['bytes'] / 1e6:.1f} MB, "
          f"{rounds} rounds")
    for x in cache:
        rc = x["ram_cache"]
        if not (rc["overlapped"] and rc["copied"] and rc["cache_from_epoch"] == 1):
            sys.exit(f"epochs_bench.sh: unexpected cache decision: {rc['note']}")
    print("| epoch | --cache --cache-wait: read from | images/s | entry there at open: images/s "
          "| in place, no cache: images/s | cache / in place | cache / entry |")
    print("|---|---|---|---|---|---|---|")
    res = {"epochs": []}
    for e in range(len(cache[0]["epochs"])):
        src = sorted({x["epochs"][e]["source"] for x in cache})
        a = [x["epochs"][e]["images_per_s"] for x in cache]
        b = [x["epochs"][e]["images_per_s"] for x in place]
        c = [x["epochs"][e]["images_per_s"] for x in entry]
        rs = [p / q for p, q in zip(a, b)]
        re = [p / q for p, q in zip(a, c)]
        print(f"| {e} | {', '.join(src)} | {fmt(a)} | {fmt(c)} | {fmt(b)} | "
              f"{statistics.median(rs):.2f}× ({min(rs):.2f}–{max(rs):.2f}) | "
              f"{statistics.median(re):.2f}× ({min(re):.2f}–{max(re):.2f}) |")
        res["epochs"].append({"source": src, "cache": a, "entry": c, "place": b,
                              "cache/place": rs, "cache/entry": re})
    copy = [x["ram_cache"]["copy_s"] for x in cache]
    wait = [x["ram_cache"]["copy_wait_s"] for x in cache]
    print(f"copy (in the background during epoch 0): {fmt(copy, 3)} s; "
          f"waited for it after epoch 0: {fmt(wait, 3)} s")
    res["copy_s"], res["copy_wait_s"] = copy, wait
    summary[s] = res
json.dump(summary, open(f"{out}/summary.json", "w"), indent=1)
EOF
