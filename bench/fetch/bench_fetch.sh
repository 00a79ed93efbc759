#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Download throughput from 127.0.0.1: `dsconvert fetch` (resumable, fsynced, renamed; with and
# without --sha256) against `curl -s -o` of the same file from the same server
# (tests/fetch/server.py), interleaved, in the same run. Prints MiB/s median (min-max) per
# client and the ratios to curl, and the load average before and after.
# --baseline BIN adds another dsconvert binary (e.g. one built from an earlier commit) with and
# without --sha256 to the same interleaved rounds: an A/B in one run.
# Usage: bash bench/fetch/bench_fetch.sh [--mb 256] [--rounds 5] [--build build] [--baseline BIN]
set -euo pipefail
cd "$(dirname "$0")/../.."
MB=256 ROUNDS=5 BUILD=build BASE=
while [ $# -gt 0 ]; do
  case "$1" in
    --mb) MB=$2; shift 2 ;;
    --rounds) ROUNDS=$2; shift 2 ;;
    --build) BUILD=$2; shift 2 ;;
    --baseline) BASE=$2; shift 2 ;;
    *) echo "usage: $0 [--mb N] [--rounds N] [--build DIR] [--baseline BIN]" >&2; exit 2 ;;
  esac
done
DSCONVERT=$BUILD/tools/dsconvert/dsconvert
W=/tmp/dspipe-fetch-bench
rm -rf "$W" && mkdir -p "$W/srv" "$W/out"
head -c $((MB << 20)) /dev/urandom > "$W/srv/f.bin"
SHA=$(sha256sum "$W/srv/f.bin" | cut -d' ' -f1)
coproc SRV { exec /usr/bin/python3 tests/fetch/server.py "$W/srv"; }
trap 'kill $SRV_PID 2>/dev/null; rm -rf "$W"' EXIT
read -r line <&"${SRV[0]}"
URL="http://127.0.0.1:${line#PORT }/files/f.bin"
now() { date +%s.%N; }
: > "$W/times"
TOOLS=(curl dspipe-sha256 dspipe)
[ -n "$BASE" ] && TOOLS+=(base-sha256 base)
echo "load average before: $(cut -d' ' -f1-3 /proc/loadavg)"
for r in $(seq "$ROUNDS"); do
  # Rotate who goes first, so drift hits all alike.
  k=$(( (r - 1) % ${#TOOLS[@]} ))
  order="${TOOLS[*]:k} ${TOOLS[*]:0:k}"
  for tool in $order; do
    rm -f "$W"/out/*
    t0=$(now)
    case $tool in
      curl) curl -s -o "$W/out/f.bin" "$URL" ;;
      dspipe-sha256) "$DSCONVERT" fetch "$URL" "$W/out/f.bin" --sha256 "$SHA" -q > /dev/null ;;
      dspipe) "$DSCONVERT" fetch "$URL" "$W/out/f.bin" -q > /dev/null ;;
      base-sha256) "$BASE" fetch "$URL" "$W/out/f.bin" --sha256 "$SHA" -q > /dev/null ;;
      base) "$BASE" fetch "$URL" "$W/out/f.bin" -q > /dev/null ;;
    esac
    t1=$(now)
    [ "$(stat -c %s "$W/out/f.bin")" = $((MB << 20)) ] || { echo "short file from $tool" >&2; exit 1; }
    echo "$tool $t0 $t1" >> "$W/times"
  done
done
/usr/bin/python3 - "$W/times" "$MB" <<'PY'
import statistics, sys
mb = float(sys.argv[2])
rates = {}
for line in open(sys.argv[1]):
    tool, t0, t1 = line.split()
    rates.setdefault(tool, []).append(mb / (float(t1) - float(t0)))
curl = statistics.median(rates["curl"])
for tool in ("curl", "dspipe", "dspipe-sha256", "base", "base-sha256"):
    if tool not in rates:
        continue
    r = rates[tool]
    print("%-14s %7.1f MiB/s median (%.1f-%.1f) over %d runs, %.2fx curl" % (
        tool, statistics.median(r), min(r), max(r), len(r), statistics.median(r) / curl))
PY
echo "load average after: $(cut -d' ' -f1-3 /proc/loadavg)"
