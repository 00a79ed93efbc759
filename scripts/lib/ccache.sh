# SPDX-License-Identifier: Apache-2.0
# Sourced by scripts/test.sh and scripts/fuzz.sh: where ccache is installed (install-deps.sh
# installs it), CCACHE_LAUNCH holds the CMake flags that compile through it, so a rerun on the
# same machine recompiles only what changed. Paths are hashed relative to the checkout
# (CCACHE_BASEDIR) and without the build directory (CCACHE_NOHASHDIR), so another clone of the
# same commit hits too. Without ccache, CCACHE_LAUNCH is empty and nothing changes.
CCACHE_LAUNCH=()
if command -v ccache >/dev/null; then
  export CCACHE_BASEDIR="${CCACHE_BASEDIR:-$PWD}" CCACHE_NOHASHDIR=1
  CCACHE_LAUNCH=(-DCMAKE_C_COMPILER_LAUNCHER=ccache -DCMAKE_CXX_COMPILER_LAUNCHER=ccache
    -DCMAKE_CUDA_COMPILER_LAUNCHER=ccache)
fi
