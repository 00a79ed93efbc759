#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Installs everything dspipe needs to build, test and benchmark on Debian 12, by package name.
# Usage: bash scripts/install-deps.sh [--tools | --bench]
#   --tools  only what the library and the two tools build from (the README's first command, the
#            `tools` preset): no tests, Python, sanitizers or fuzzers, and OpenCV's three modules
#            instead of libopencv-dev (cmake/dspipeOpenCVModules.cmake): 237 packages and 0.9 GB
#            on a fresh Debian 12 instead of 531 and 2.3 GB.
#   --bench  adds python3-zstandard and python3-torchvision for bench/.
# The Python package's tests (scripts/test.sh) run in a venv over /usr/bin/python3 with system
# site packages: python3-venv makes it, python3-torch is what they feed. python3-pil and
# imagemagick write the PNG corpus tests/codec compares the fast PNG decoder on (with OpenCV).
# ccache: scripts/test.sh, fuzz.sh and build-wheel.sh compile through it (scripts/lib/ccache.sh).
set -euo pipefail
export DEBIAN_FRONTEND=noninteractive
SUDO=""
if [ "$(id -u)" != 0 ]; then SUDO=sudo; fi
TOOLS=(
  build-essential cmake ninja-build pkg-config
  liblmdb-dev libopencv-core-dev libopencv-imgproc-dev libopencv-imgcodecs-dev libtbb-dev
  libzstd-dev zlib1g-dev libspng-dev libdeflate-dev libjpeg62-turbo-dev libexif-dev libtiff-dev
  libwebp-dev libnifti2-dev libdcmtk-dev libcurl4-openssl-dev libssl-dev libpugixml-dev
  libinih-dev libcsv-dev libarchive-dev libcli11-dev nlohmann-json3-dev libfmt-dev
)
# Everything: the tools' list, plus what the tests, the fuzzers, Python and the benches use
# (libopencv-dev: OpenCV's CMake package, which the test builds find; package_subdir_consumer
# builds without it).
PKGS=(
  "${TOOLS[@]}"
  git ccache lmdb-utils libopencv-dev zstd libgtest-dev libgmock-dev
  python3 python3-dev python3-numpy python3-lmdb python3-opencv python3-venv python3-torch
  python3-pil imagemagick
  clang-14 libclang-rt-14-dev
)
case "${1:-}" in
  --tools) PKGS=("${TOOLS[@]}") ;;
  --bench) PKGS+=(python3-zstandard python3-torchvision) ;;
  "") ;;
  *) echo "install-deps.sh: unknown argument '$1' (usage: bash scripts/install-deps.sh [--tools | --bench])" >&2; exit 2 ;;
esac
missing=()
for p in "${PKGS[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  $SUDO apt-get update -qq
  $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi
