#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Installs everything dspipe needs to build, test and benchmark on Debian 12, by package name.
# Usage: bash scripts/install-deps.sh [--bench]   (--bench adds python3-zstandard and
# python3-torchvision for bench/)
# The Python package's tests (scripts/test.sh) run in a venv over /usr/bin/python3 with system
# site packages: python3-venv makes it, python3-torch is what they feed. python3-pil and
# imagemagick write the PNG corpus tests/codec compares the fast PNG decoder on (with OpenCV).
# ccache: scripts/test.sh, fuzz.sh and build-wheel.sh compile through it (scripts/lib/ccache.sh).
set -euo pipefail
export DEBIAN_FRONTEND=noninteractive
SUDO=""
if [ "$(id -u)" != 0 ]; then SUDO=sudo; fi
PKGS=(
  build-essential cmake ninja-build pkg-config git ccache
  liblmdb-dev lmdb-utils libopencv-dev libtbb-dev libzstd-dev zstd zlib1g-dev
  libspng-dev libdeflate-dev libjpeg62-turbo-dev libexif-dev libtiff-dev libwebp-dev libnifti2-dev
  libdcmtk-dev
  libcurl4-openssl-dev libssl-dev libpugixml-dev libinih-dev
  libcsv-dev libarchive-dev libcli11-dev nlohmann-json3-dev libfmt-dev libgtest-dev libgmock-dev
  python3 python3-dev python3-numpy python3-lmdb python3-opencv python3-venv python3-torch
  python3-pil imagemagick
  clang-14 libclang-rt-14-dev
)
if [ "${1:-}" = "--bench" ]; then PKGS+=(python3-zstandard python3-torchvision); fi
missing=()
for p in "${PKGS[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  $SUDO apt-get update -qq
  $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi
