#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Builds the libFuzzer harnesses (tests/fuzz) with clang, ASan and UBSan in build-fuzz/ and runs
# each for a bounded time from its seed corpus. Fails on the first finding (crash, sanitizer
# report, leak, timeout, out-of-memory); the input that triggered it is left in
# build-fuzz/findings/ and the command that reproduces it is printed.
#   FUZZ_SECONDS   seconds per harness (default 60)
#   FUZZ_TARGETS   space-separated subset (default: all)
#   FUZZ_SEED      libFuzzer's random seed (default 1: a CI run replays the inputs a local run
#                  of the same length tried; set another to explore further)
#   FUZZ_JOBS      build parallelism (default: nproc)
#   FUZZ_PARALLEL  harnesses run at once (default: nproc; each is single-threaded)
# Prints the executions each harness ran without a finding; the table is also written to
# build-fuzz/fuzz-summary.txt.
set -euo pipefail
cd "$(dirname "$0")/.."
SECONDS_EACH=${FUZZ_SECONDS:-60}
TARGETS=(${FUZZ_TARGETS:-record manifest build_state plain_lmdb decode jpeg_region csv png_fast archive transform_spec nifti dicom})
JOBS=${FUZZ_JOBS:-$(nproc)}
B=build-fuzz
CC_BIN=${FUZZ_CC:-clang-14}
CXX_BIN=${FUZZ_CXX:-clang++-14}

echo "== fuzz: build (clang, libFuzzer, ASan+UBSan) in $B"
source scripts/lib/ccache.sh
CC=$CC_BIN CXX=$CXX_BIN cmake -S . -B "$B" -G Ninja "${CCACHE_LAUNCH[@]}" -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DDSPIPE_FUZZ=ON -DDSPIPE_SANITIZE=address,undefined -DDSPIPE_CUDA=OFF \
  -DDSPIPE_BUILD_TESTS=OFF -DDSPIPE_BUILD_BENCH=OFF >/dev/null
cmake --build "$B" -j "$JOBS" --target "${TARGETS[@]/#/fuzz_}"

mkdir -p "$B/findings"
summary="$B/fuzz-summary.txt"
# Harnesses are single-threaded: FUZZ_PARALLEL of them run at once (default: nproc), each for
# the full FUZZ_SECONDS, so the wall time is about ceil(harnesses / FUZZ_PARALLEL) x FUZZ_SECONDS.
PARALLEL=${FUZZ_PARALLEL:-$(nproc)}
run_one() {  # harness -> its log; the exit status goes to $B/fuzz_$t.rc
  local t=$1 corpus="$B/corpus/$1" log="$B/fuzz_$1.log" rc=0
  mkdir -p "$corpus"  # grows across runs; the committed seeds stay as they are
  OPENCV_LOG_LEVEL=SILENT ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1 \
    "$B/tests/fuzz/fuzz_$t" -max_total_time="$SECONDS_EACH" -seed="${FUZZ_SEED:-1}" \
    -timeout=25 -rss_limit_mb=2048 \
    -print_final_stats=1 -artifact_prefix="$B/findings/$t-" \
    "$corpus" "tests/fuzz/seeds/$t" >"$log" 2>&1 || rc=$?
  echo "$rc" >"$B/fuzz_$t.rc"
}
echo "== fuzz: ${#TARGETS[@]} harnesses, ${SECONDS_EACH}s each, $PARALLEL at a time"
running=0
for t in "${TARGETS[@]}"; do
  rm -f "$B/fuzz_$t.rc"
  if [ "$running" -ge "$PARALLEL" ]; then wait -n || true; running=$((running - 1)); fi
  echo "== fuzz: $t"
  run_one "$t" &
  running=$((running + 1))
done
wait
printf '%-12s %10s %12s %s\n' harness seconds executions result >"$summary"
status=0
for t in "${TARGETS[@]}"; do
  log="$B/fuzz_$t.log"
  rc=$(cat "$B/fuzz_$t.rc" 2>/dev/null || echo "missing")
  execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
  result=ok
  if [ "$rc" != 0 ]; then
    result="FINDING (exit $rc)"
    status=1
    echo "== fuzz: $t found something (exit $rc); the end of $log:"
    tail -n 60 "$log"
    for a in "$B"/findings/"$t"-*; do
      [ -e "$a" ] && echo "reproduce: $B/tests/fuzz/fuzz_$t $a"
    done
  fi
  printf '%-12s %10s %12s %s\n' "$t" "$SECONDS_EACH" "${execs:-?}" "$result" | tee -a "$summary"
done
echo "== fuzz summary ($summary)"
cat "$summary"
exit $status
