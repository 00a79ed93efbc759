# SPDX-License-Identifier: Apache-2.0
# Sourced by scripts/test.sh and scripts/build-wheel.sh. CMakeLists.txt finds the CUDA compiler
# the way CMake does (check_language(CUDA): CMAKE_CUDA_COMPILER, the CUDACXX environment
# variable, nvcc on PATH) and names no toolkit directory. A toolkit installed but not on PATH
# (Debian's /etc/profile.d/cuda.sh adds /usr/local/cuda/bin in login shells only; a CI job's
# shell may not be one) is found here: when CUDACXX is unset and no nvcc is on PATH,
# CUDACXX names $CUDA_HOME/bin/nvcc (CUDA_HOME defaults to /usr/local/cuda) if it is there.
# DSPIPE_NVCC: the CUDA compiler CMake will find, empty when none.
if [ -z "${CUDACXX:-}" ] && ! command -v nvcc >/dev/null; then
  if [ -x "${CUDA_HOME:-/usr/local/cuda}/bin/nvcc" ]; then
    export CUDACXX="${CUDA_HOME:-/usr/local/cuda}/bin/nvcc"
  fi
fi
DSPIPE_NVCC=${CUDACXX:-$(command -v nvcc || true)}
