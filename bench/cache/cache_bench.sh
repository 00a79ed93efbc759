#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# RAM-disk cache (issue 10): cold in place vs the first epoch with the copy (made before it, or
# overlapped with it) vs warm from the cache vs warm in place, side by side in one run, with
# dsbench.
#
#   bench/cache/cache_bench.sh [--dir DIR] [--count 300] [--threads 2] [--rounds 3]
#                              [--sched "nice"] [--build-dir build]
#
# 1. DIR/src: COUNT noisy 512x512 RGB PNG images (~0.5 MB each) + PNG masks (numpy/cv2,
#    bench/make_noisy_pngs.py, as bench/cold; reused when present); DIR/enc.lmdb (--store encoded) and
#    DIR/raw.lmdb (--store raw, zstd), on DIR's disk.
# 2. --rounds times, interleaved (every round runs every configuration once, so load from other
#    processes hits all alike), each run one whole epoch, --warmup 0, THREADS threads, for each
#    of enc.lmdb and raw.lmdb:
#      cold in place         --drop-cache (posix_fadvise DONTNEED, checked with mincore)
#      copy first, cold src  empty cache dir, --drop-cache --cache C --cache-no-overlap: the
#                            copy from disk, then the epoch from the copy
#      overlap, cold src     empty cache dir, --drop-cache --cache C: the epoch reads in place
#                            while the copy is made in the background (dsbench then waits for
#                            the copy to finish: copy_wait_s)
#      copy first, warm src  as above without --drop-cache (the source's pages are cached)
#      overlap, warm src     as above without --drop-cache
#      warm from cache       --cache C, the entry already there (a later run / epoch)
#      warm in place         no flags (page cache warm)
#    With --sched "nice normal idle" the overlap runs are repeated once per priority of the copy
#    thread (DSPIPE_CACHE_COPY_SCHED: nice +10, the default; normal; SCHED_IDLE).
#    C is a fresh dir on /dev/shm (a tmpfs), removed at exit. A "copy first" run's first-epoch
#    rate is images / (copy seconds + epoch seconds); an overlap run's is images / epoch
#    seconds (the copy ran during the epoch). Then, for scale, `cp -r` of the warm source into
#    the same tmpfs (timed from Python).
# 3. Prints images/s median (min-max) per configuration, the copy time, and the issue's ratios
#    (first epoch with copy / warm in place >= 0.9; warm from cache / warm in place = 1);
#    writes DIR/out/summary.json.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
PY=/usr/bin/python3
DIR=/tmp/dspipe-cache-bench
COUNT=300 THREADS=2 ROUNDS=3 BUILD="$ROOT/build" SCHEDS="nice"
while [ $# -gt 0 ]; do
  case "$1" in
    --dir) DIR=$2; shift 2 ;;
    --count) COUNT=$2; shift 2 ;;
    --threads) THREADS=$2; shift 2 ;;
    --rounds) ROUNDS=$2; shift 2 ;;
    --sched) SCHEDS=$2; shift 2 ;;
    --build-dir) BUILD=$(cd "$2" && pwd); shift 2 ;;
    *) echo "cache_bench.sh: unknown argument $1" >&2; exit 2 ;;
  esac
done
source "$ROOT/bench/noisy_lmdbs.sh"
bench_tools cache_bench.sh "$BUILD"
bench_shm_cache cache_bench.sh dspipe-cache-bench
OUT="$DIR/out"
mkdir -p "$DIR" "$OUT"
bench_noisy_lmdbs "$DIR" "$COUNT" enc raw

COMMON=(--epochs 1 --warmup 0 --threads "$THREADS" --sample-ms 0 -q)
for r in $(seq 1 "$ROUNDS"); do
  echo "== round $r/$ROUNDS"
  for s in enc raw; do
    DB="$DIR/$s.lmdb"
    "$DSB" "$DB" --drop-cache "${COMMON[@]}" --json "$OUT/$s-cold-$r.json"
    rm -rf "${CACHE:?}"/*
    "$DSB" "$DB" --drop-cache --cache "$CACHE" --cache-no-overlap "${COMMON[@]}" \
      --json "$OUT/$s-seqcold-$r.json"
    for sc in $SCHEDS; do
      rm -rf "${CACHE:?}"/*
      DSPIPE_CACHE_COPY_SCHED=$sc "$DSB" "$DB" --drop-cache --cache "$CACHE" "${COMMON[@]}" \
        --json "$OUT/$s-ovcold_$sc-$r.json"
    done
    rm -rf "${CACHE:?}"/*
    "$DSB" "$DB" --cache "$CACHE" --cache-no-overlap "${COMMON[@]}" --json "$OUT/$s-seqwarm-$r.json"
    for sc in $SCHEDS; do
      rm -rf "${CACHE:?}"/*
      DSPIPE_CACHE_COPY_SCHED=$sc "$DSB" "$DB" --cache "$CACHE" "${COMMON[@]}" \
        --json "$OUT/$s-ovwarm_$sc-$r.json"
    done
    "$DSB" "$DB" --cache "$CACHE" "${COMMON[@]}" --json "$OUT/$s-cached-$r.json"
    "$DSB" "$DB" "${COMMON[@]}" --json "$OUT/$s-warm-$r.json"
    # The copy by hand, for scale: `cp -r` of the (warm) source into the same tmpfs.
    rm -rf "${CACHE:?}"/*
    "$PY" -c 'import subprocess, sys, time
t = time.perf_counter(); subprocess.run(["cp", "-r", sys.argv[1], sys.argv[2]], check=True)
print(time.perf_counter() - t)' "$DB" "$CACHE/by-hand" > "$OUT/$s-cp-$r.txt"
    rm -rf "${CACHE:?}"/*
  done
done

"$PY" - "$OUT" "$ROUNDS" "$SCHEDS" <<'EOF'
import json, statistics, sys
out, rounds, scheds = sys.argv[1], int(sys.argv[2]), sys.argv[3].split()
def load(name, r):
    with open(f"{out}/{name}-{r}.json") as f: return json.load(f)
def fmt(v, d=1): return f"{statistics.median(v):.{d}f} ({min(v):.{d}f}–{max(v):.{d}f})"
configs = [("cold", "cold in place"), ("seqcold", "copy first, cold source")]
configs += [(f"ovcold_{sc}", f"overlapped copy ({sc}), cold source") for sc in scheds]
configs += [("seqwarm", "copy first, warm source")]
configs += [(f"ovwarm_{sc}", f"overlapped copy ({sc}), warm source") for sc in scheds]
configs += [("cached", "warm from cache"), ("warm", "warm in place")]
summary = {}
for s, store in [("enc", "encoded (PNG)"), ("raw", "raw+zstd")]:
    runs = {c: [load(f"{s}-{c}", r) for r in range(1, rounds + 1)] for c, _ in configs}
    first = load(f"{s}-cold", 1)["dataset"]
    print(f"\n{s}.lmdb ({store}): {first['count']} records, {first['bytes'] / 1e6:.1f} MB")
    print("| configuration | images/s, first epoch (copy first: incl. the copy): median (min–max) "
          "| copy s | epoch s | copy wait after the epoch s |")
    print("|---|---|---|---|---|")
    rates = {}
    for c, label in configs:
        rc = [x["ram_cache"] for x in runs[c]]
        for x in rc:
            ok = {"cold": not x["cached"] and not x["overlapped"],
                  "warm": not x["cached"] and not x["overlapped"],
                  "cached": x["cached"] and not x["copied"],
                  }.get(c, x["copied"] and x["overlapped"] == c.startswith("ov"))
            if not ok: sys.exit(f"cache_bench.sh: {label}: unexpected cache decision: {x['note']}")
        if "cold" in c:
            for x in runs[c]:
                d = x["cache"]
                if d["dropped"] != d["files"]: print(f"WARNING {label}: page cache drop failed: {d['note']}")
        copy = [x["copy_s"] for x in rc]
        wait = [x["copy_wait_s"] for x in rc]
        epoch = [x["throughput"]["seconds"] for x in runs[c]]
        imgs = [x["throughput"]["images"] for x in runs[c]]
        if c.startswith("seq"):
            rate = [i / (cp + e) for i, cp, e in zip(imgs, copy, epoch)]
        else:
            rate = [i / e for i, e in zip(imgs, epoch)]
        rates[c] = rate
        print(f"| {label} | {fmt(rate)} | {fmt(copy, 3)} | {fmt(epoch, 3)} | {fmt(wait, 3)} |")
    def ratio(a, b):
        rs = [x / y for x, y in zip(rates[a], rates[b])]
        return rs, f"{statistics.median(rs):.2f}× ({min(rs):.2f}–{max(rs):.2f})"
    cp = [float(open(f"{out}/{s}-cp-{r}.txt").read()) for r in range(1, rounds + 1)]
    ours = [x["ram_cache"]["copy_s"] for x in runs["seqwarm"]]
    rs = [o / c for o, c in zip(ours, cp)]
    print(f"copy, warm source (copy first): dspipe {fmt(ours, 3)} s vs `cp -r` {fmt(cp, 3)} s "
          f"(dspipe / cp: {statistics.median(rs):.2f}× ({min(rs):.2f}–{max(rs):.2f}); "
          "dspipe also reserves the space and fsyncs)")
    res = {"copy_dspipe_s": ours, "copy_cp_s": cp}
    pairs = [("seqcold", "warm", "copy first (cold source) / warm in place (target >= 0.9)")]
    pairs += [(f"ovcold_{sc}", "warm", f"overlapped ({sc}, cold source) / warm in place (target >= 0.9)") for sc in scheds]
    pairs += [("seqwarm", "warm", "copy first (warm source) / warm in place (target >= 0.9)")]
    pairs += [(f"ovwarm_{sc}", "warm", f"overlapped ({sc}, warm source) / warm in place (target >= 0.9)") for sc in scheds]
    pairs += [(f"ovcold_{sc}", "cold", f"overlapped ({sc}, cold source) / cold in place") for sc in scheds]
    pairs += [("cached", "warm", "warm from cache / warm in place (target = 1)")]
    for a, b, what in pairs:
        rs, text = ratio(a, b)
        print(f"{what}: {text}")
        res[f"{a}/{b}"] = rs
    summary[s] = {"rates": rates, "ratios": res}
json.dump(summary, open(f"{out}/summary.json", "w"), indent=1)
EOF
