#!/usr/bin/env bash
# Builds the libFuzzer harnesses (tests/fuzz) with clang, ASan and UBSan in build-fuzz/ and runs
# each for a bounded time from its seed corpus. Fails on the first finding (crash, sanitizer
# report, leak, timeout, out-of-memory); the input that triggered it is left in
# build-fuzz/findings/ and the command that reproduces it is printed.
#   FUZZ_SECONDS   seconds per harness (default 60)
#   FUZZ_TARGETS   space-separated subset (default: all)
#   FUZZ_SEED      libFuzzer's random seed (default 1: a CI run replays the inputs a local run
#                  of the same length tried; set another to explore further)
#   FUZZ_JOBS      build parallelism (default: nproc)
# Prints the executions each harness ran without a finding; the table is also written to
# build-fuzz/fuzz-summary.txt.
set -euo pipefail
cd "$(dirname "$0")/.."
SECONDS_EACH=${FUZZ_SECONDS:-60}
TARGETS=(${FUZZ_TARGETS:-record manifest build_state plain_lmdb decode csv png_fast archive})
JOBS=${FUZZ_JOBS:-$(nproc)}
B=build-fuzz
CC_BIN=${FUZZ_CC:-clang-14}
CXX_BIN=${FUZZ_CXX:-clang++-14}

echo "== fuzz: build (clang, libFuzzer, ASan+UBSan) in $B"
CC=$CC_BIN CXX=$CXX_BIN cmake -S . -B "$B" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DDSPIPE_FUZZ=ON -DDSPIPE_SANITIZE=address,undefined -DDSPIPE_CUDA=OFF \
  -DDSPIPE_BUILD_TESTS=OFF -DDSPIPE_BUILD_BENCH=OFF >/dev/null
cmake --build "$B" -j "$JOBS" --target "${TARGETS[@]/#/fuzz_}"

mkdir -p "$B/findings"
summary="$B/fuzz-summary.txt"
printf '%-12s %10s %12s %s\n' harness seconds executions result >"$summary"
status=0
for t in "${TARGETS[@]}"; do
  corpus="$B/corpus/$t"  # grows across runs; the committed seeds stay as they are
  mkdir -p "$corpus"
  log="$B/fuzz_$t.log"
  echo "== fuzz: $t for ${SECONDS_EACH}s"
  rc=0
  OPENCV_LOG_LEVEL=SILENT ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1 \
    "$B/tests/fuzz/fuzz_$t" -max_total_time="$SECONDS_EACH" -seed="${FUZZ_SEED:-1}" \
    -timeout=25 -rss_limit_mb=2048 \
    -print_final_stats=1 -artifact_prefix="$B/findings/$t-" \
    "$corpus" "tests/fuzz/seeds/$t" >"$log" 2>&1 || rc=$?
  execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
  result=ok
  if [ "$rc" != 0 ]; then
    result="FINDING (exit $rc)"
    status=1
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
