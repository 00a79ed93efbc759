#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# The cache's torture test at full size (docs/HARDENING.md, "The torture test", has the figures): rounds
# of cache_tool processes opening plain and symlinked datasets through one cache dir with a
# cache_limit while the driver SIGKILLs random ones at random durable steps; after every round
# the sources, the entries, every surviving open, the limit and everything beside the cache's
# own dir are checked (tests/cache/cache_torture.cc). ctest runs a bounded form (60 rounds).
#
#   bench/cache/torture.sh [--build DIR] [--rounds 400] [--workers 6] [--seeds "1 2 3"]
#                          [--min-kills 200]
# Prints one JSON line of figures per seed and the totals; exits 1 on any violation or when a
# seed made fewer than --min-kills kill points. Needs cache_torture and cache_tool built
# (cmake --build BUILD --target cache_torture cache_tool).
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/../.." && pwd)"
BUILD="$ROOT/build" ROUNDS=400 WORKERS=6 SEEDS="1 2 3" MIN_KILLS=200
while [ $# -gt 0 ]; do
  case "$1" in
    --build) BUILD=$2; shift 2 ;;
    --rounds) ROUNDS=$2; shift 2 ;;
    --workers) WORKERS=$2; shift 2 ;;
    --seeds) SEEDS=$2; shift 2 ;;
    --min-kills) MIN_KILLS=$2; shift 2 ;;
    *) echo "torture.sh: unknown argument $1" >&2; exit 2 ;;
  esac
done
T="$BUILD/tests/cache/cache_torture" TOOL="$BUILD/tests/cache/cache_tool"
for b in "$T" "$TOOL"; do
  [ -x "$b" ] || { echo "torture.sh: $b missing; build cache_torture and cache_tool" >&2; exit 1; }
done
[ "$(stat -f -c %T /dev/shm)" = tmpfs ] || { echo "torture.sh: /dev/shm is not a tmpfs" >&2; exit 1; }
OUT="$(mktemp -d)"
trap 'rm -rf "$OUT"' EXIT
status=0
for seed in $SEEDS; do
  start=$(date +%s)
  if ! DSPIPE_LOG_LEVEL=off "$T" --tool "$TOOL" --rounds "$ROUNDS" --workers "$WORKERS" \
      --seed "$seed" --min-kills "$MIN_KILLS" --json "$OUT/$seed.json" > /dev/null; then
    status=1
  fi
  echo "seed $seed ($(( $(date +%s) - start )) s): $(cat "$OUT/$seed.json" 2>/dev/null || echo none)"
done
python3 - "$OUT" <<'PY'
import json, pathlib, sys
runs = [json.loads(p.read_text()) for p in sorted(pathlib.Path(sys.argv[1]).glob("*.json"))]
total = {k: sum(r[k] for r in runs) for k in ("rounds", "processes", "kill_points", "cached",
                                               "in_place", "usage_samples", "violations")}
print("total:", json.dumps(total))
PY
exit $status
