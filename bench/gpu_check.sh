#!/usr/bin/env bash
# GPU acceptance check for dspipe's CUDA path, for a machine with an NVIDIA GPU:
#   1. configure + build (Release, Ninja, this GPU's architecture, only the needed targets),
#   2. run the tests labelled `gpu` (GPU vs CPU reference; they FAIL instead of skipping here),
#   3. run the no-GPU fallback test with DSPIPE_DISABLE_CUDA=1,
#   4. run gpu_bench: normalize bandwidth vs peak, pinned vs pageable H2D, GpuNormalizer H2D.
# Usage: bench/gpu_check.sh [build-dir]     (default <repo>/build-gpu-check). Under 5 minutes:
# every step has a timeout and the whole run is typically 1-2 minutes.
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="${1:-$root/build-gpu-check}"
jobs="$(nproc)"
export DSPIPE_REQUIRE_GPU=1

step() { printf '\n== %s (%ds elapsed)\n' "$*" "$SECONDS"; }

step "device"
if command -v nvidia-smi >/dev/null 2>&1; then
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader || true
else
  echo "nvidia-smi not found; relying on the CUDA runtime's own detection"
fi

step "configure"
cuda_arch="${DSPIPE_CUDA_ARCH:-native}"  # e.g. DSPIPE_CUDA_ARCH=90 if 'native' detection fails
mkdir -p "$build"
timeout 60 cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DDSPIPE_CUDA=ON \
  -DDSPIPE_BUILD_TESTS=ON -DDSPIPE_BUILD_BENCH=ON -DCMAKE_CUDA_ARCHITECTURES="$cuda_arch" \
  >"$build/configure.log" 2>&1 || { cat "$build/configure.log"; exit 1; }
grep -E "dspipe: CUDA path" "$build/configure.log" || true

step "build"
timeout 150 cmake --build "$build" -j "$jobs" \
  --target normalize_test normalize_gpu_test gpu_bench normalize_bench

step "ctest -L gpu"
(cd "$build" && timeout 40 ctest -L gpu --no-tests=error --output-on-failure -j 4)

step "no-GPU fallback (DSPIPE_DISABLE_CUDA=1)"
DSPIPE_REQUIRE_GPU= DSPIPE_DISABLE_CUDA=1 timeout 10 \
  "$build/tests/kernels/normalize_gpu_test" --gtest_filter='CudaRuntime.*'

step "gpu_bench"
timeout 30 "$build/bench/kernels/gpu_bench"

step "cpu normalize_bench (1 thread)"
timeout 20 "$build/bench/kernels/normalize_bench" --reps 10

step "done"
