#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Per-rank epoch-order cost, order global vs blocks (vs shards), interleaved in fresh processes.
#
#   cmake --build build --target sampler_bench
#   bash bench/sampler/sampler_bench.sh [--bin build/bench/sampler/sampler_bench]
#        [--sizes "10000000 100000000"] [--ranks 100] [--rounds 3] [--orders "global blocks"]
#
# For each size, each round runs every order once (one process each, rank ranks/2, 3 epochs),
# in turn, so background load hits them alike. Prints per (size, order): the per-epoch seconds
# as median (min-max) over every epoch of every round, the peak RSS median (min-max) in MiB,
# the ratio of medians to the global order, and the load average at the start and end.
set -euo pipefail
BIN=build/bench/sampler/sampler_bench
SIZES="10000000 100000000"
RANKS=100
ROUNDS=3
ORDERS="global blocks"
while [[ $# -gt 0 ]]; do
  case "$1" in
    --bin) BIN="$2"; shift 2 ;;
    --sizes) SIZES="$2"; shift 2 ;;
    --ranks) RANKS="$2"; shift 2 ;;
    --rounds) ROUNDS="$2"; shift 2 ;;
    --orders) ORDERS="$2"; shift 2 ;;
    *) echo "unknown argument $1 (see the header of $0)" >&2; exit 2 ;;
  esac
done
OUT=$(mktemp)
trap 'rm -f "$OUT"' EXIT
echo "load average at start: $(cut -d' ' -f1-3 /proc/loadavg)"
for n in $SIZES; do
  for ((r = 0; r < ROUNDS; r++)); do
    for order in $ORDERS; do
      "$BIN" --n "$n" --ranks "$RANKS" --rank $((RANKS / 2)) --order "$order" --shards 1000 \
        --epochs 3 >> "$OUT"
    done
  done
done
echo "load average at end:   $(cut -d' ' -f1-3 /proc/loadavg)"
python3 - "$OUT" <<'PY'
import json, statistics, sys
rows = [json.loads(line) for line in open(sys.argv[1])]
def fmt(v):
    return f"{statistics.median(v):.4g} ({min(v):.4g}-{max(v):.4g})"
print("| N | ranks | order | samples/rank | s per epoch, median (min-max) | x global | peak RSS MiB |")
print("|---|---|---|---|---|---|---|")
for n in sorted({r["n"] for r in rows}):
    base = None
    for order in dict.fromkeys(r["order"] for r in rows):
        sel = [r for r in rows if r["n"] == n and r["order"] == order]
        secs = [s for r in sel for s in r["seconds"]]
        rss = [r["max_rss_kib"] / 1024 for r in sel]
        med = statistics.median(secs)
        base = med if order == "global" else base
        ratio = f"{med / base:.3g}" if base else "-"
        print(f"| {n:.0e} | {sel[0]['ranks']} | {order} | {sel[0]['samples']} | {fmt(secs)} | "
              f"{ratio} | {fmt(rss)} |")
PY
