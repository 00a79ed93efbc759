#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# GPU acceptance check for dspipe's CUDA path, for a machine with an NVIDIA GPU:
#   1. configure + build (Release, Ninja, this GPU's architecture, only the needed targets),
#   2. run the tests labelled `gpu` (GPU vs CPU reference; they FAIL instead of skipping here),
#   3. run the no-GPU fallback test with DSPIPE_DISABLE_CUDA=1,
#   4. run gpu_bench: normalize bandwidth vs peak, pinned vs pageable H2D, GpuNormalizer H2D,
#   5. run device_bench: end-to-end DeviceLoader images/s, GPU path vs CPU path (synth dataset).
# Usage: bench/gpu_check.sh [build-dir]     (default <repo>/build-gpu-check). Under 5 minutes:
# every step's timeout is capped by what is left of a 285 s budget; typically 2-3 minutes.
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="${1:-$root/build-gpu-check}"
jobs="$(nproc)"
export DSPIPE_REQUIRE_GPU=1

step() { printf '\n== %s (%ds elapsed)\n' "$*" "$SECONDS"; }
# budget N: N seconds, or less when the whole script would otherwise pass 285 s.
budget() {
  local left=$((285 - SECONDS))
  if ((left < 1)); then left=1; fi
  if ((left < $1)); then echo "$left"; else echo "$1"; fi
}

step "device"
if command -v nvidia-smi >/dev/null 2>&1; then
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader || true
else
  echo "nvidia-smi not found; relying on the CUDA runtime's own detection"
fi

step "configure"
cuda_arch="${DSPIPE_CUDA_ARCH:-native}"  # e.g. DSPIPE_CUDA_ARCH=90 if 'native' detection fails
mkdir -p "$build"
timeout "$(budget 60)" cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release \
  -DDSPIPE_CUDA=ON -DDSPIPE_BUILD_TESTS=ON -DDSPIPE_BUILD_BENCH=ON \
  -DCMAKE_CUDA_ARCHITECTURES="$cuda_arch" \
  >"$build/configure.log" 2>&1 || { cat "$build/configure.log"; exit 1; }
grep -E "dspipe: CUDA path" "$build/configure.log" || true

step "build"
timeout "$(budget 170)" cmake --build "$build" -j "$jobs" \
  --target normalize_test normalize_gpu_test gpu_bench normalize_bench \
  device_loader_test device_loader_gpu_test device_bench

step "ctest -L gpu"
(cd "$build" && timeout "$(budget 60)" ctest -L gpu --no-tests=error --output-on-failure -j 4)

step "no-GPU fallback (DSPIPE_DISABLE_CUDA=1)"
DSPIPE_REQUIRE_GPU= DSPIPE_DISABLE_CUDA=1 timeout "$(budget 10)" \
  "$build/tests/normalize/normalize_gpu_test" --gtest_filter='CudaRuntime.*'
# Forces DSPIPE_DISABLE_CUDA itself: DeviceLoader's CPU path, explicit device -> Unsupported.
DSPIPE_REQUIRE_GPU= timeout "$(budget 20)" "$build/tests/device/device_loader_test"

step "gpu_bench"
timeout "$(budget 30)" "$build/bench/normalize/gpu_bench"

step "device_bench: end-to-end images/s, GPU path vs CPU path"
# 256 synth 512x512 PNG images + masks (made once, under the build dir), batch 16, all cores.
timeout "$(budget 60)" "$build/bench/normalize/device_bench" --dir "$build/device-bench" \
  --count 256 --size 512 --batch 16 --epochs 2

step "cpu normalize_bench (1 thread)"
timeout "$(budget 20)" "$build/bench/normalize/normalize_bench" --reps 10

step "done"
