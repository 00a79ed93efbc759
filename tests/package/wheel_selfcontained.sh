#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# The wheel is self-contained: installs and runs with every library of the system out of sight
# except glibc and the manylinux allow-list's libstdc++, libgcc_s, libz (plus libexpat, which
# the Python interpreter itself needs). Run as root (scripts/test.sh does, after
# scripts/build-wheel.sh):   bash tests/package/wheel_selfcontained.sh dist/dspipe-*.whl
#
# 0. tests/package/wheel_licenses.py: the wheel's dist-info carries a licence for every file in
#    dspipe.libs/ and every static component NOTICE lists (third_party/INDEX.txt), none empty.
# 1. numpy (the wheel's one dependency) is downloaded from PyPI into a wheelhouse, while the
#    system is still whole.
# 2. In a private mount namespace (unshare --mount), /usr/lib/x86_64-linux-gnu (= /lib/...,
#    merged /usr) is replaced by a directory holding only the files of Debian's libc6,
#    libstdc++6, libgcc-s1, zlib1g and libexpat1 packages; /usr/include (the -dev headers),
#    /usr/local (CUDA) and /usr/share/libdcmtk17 (Debian's DICOM dictionary: the wheel's DCMTK
#    has its own compiled in) are empty. The test checks the hiding: libtbb, libcurl,
#    libopencv_core, nvcc and dicom.dic are gone.
# 3. There, a fresh venv with numpy (as on Colab), then the notebook's install cell
#    (examples/colab_unet.ipynb) installs the wheel from a folder (timed: the target is
#    <= 15 s), then tests/package/wheel_roundtrip.py: ld.so --list of every ELF file of the
#    installed wheel resolves inside it or to the allowed libraries, and a build + load +
#    fetch + cache round trip through every bundled library.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
wheel=$(realpath "${1:?usage: wheel_selfcontained.sh WHEEL}")
py=${PYTHON:-/usr/bin/python3}
work=$(mktemp -d /tmp/dspipe-wheel-test.XXXXXX)
trap 'rm -rf "$work"' EXIT
[ "$(id -u)" = 0 ] || { echo "wheel_selfcontained.sh: needs root (unshare --mount)" >&2; exit 1; }

echo "== wheel test: third-party licences in the dist-info (wheel_licenses.py)"
"$py" "$here/wheel_licenses.py" "$wheel"

echo "== wheel test: numpy from PyPI into a wheelhouse"
"$py" -m venv "$work/dl"
"$work/dl/bin/pip" download -q --only-binary :all: -d "$work/wheelhouse" numpy

# The notebook's install cell (examples/colab_unet.ipynb), run as a user runs it, with
# DSPIPE_WHEEL naming a folder that holds the wheel.
mkdir -p "$work/wheels" && cp "$wheel" "$work/wheels/"
cell=$("$py" -c 'import json, sys
cells = json.load(open(sys.argv[1]))["cells"]
print(next(c["source"] for c in cells if "DSPIPE_WHEEL" in "".join(c["source"])))' \
  "$here/../../examples/colab_unet.ipynb")

echo "== wheel test: allowed system libraries (libc6 libstdc++6 libgcc-s1 zlib1g libexpat1)"
multiarch=/usr/lib/x86_64-linux-gnu
allowed="$work/allowed"
mkdir -p "$allowed"
for f in $(dpkg -L libc6:amd64 libstdc++6:amd64 libgcc-s1:amd64 zlib1g:amd64 libexpat1:amd64 |
  sed -E 's#^/lib/#/usr/lib/#' | grep "^$multiarch/"); do
  rel=${f#"$multiarch"/}
  if [ -d "$f" ] && [ ! -L "$f" ]; then mkdir -p "$allowed/$rel"; else
    mkdir -p "$allowed/$(dirname "$rel")"; cp -a "$f" "$allowed/$rel"; fi
done
echo "$(find "$allowed" -name '*.so*' | wc -l) files kept of $(find $multiarch -name '*.so*' | wc -l)"

# Inside the namespace only bash builtins and the venv's python run after the bind mount.
unshare --mount --propagation private -- bash -euo pipefail -c '
  work=$1 allowed=$2 cell=$3 py=$4 here=$5 multiarch=/usr/lib/x86_64-linux-gnu
  mount -t tmpfs tmpfs /usr/include
  mount -t tmpfs tmpfs /usr/local
  if [ -d /usr/share/libdcmtk17 ]; then mount -t tmpfs tmpfs /usr/share/libdcmtk17; fi
  mount --bind "$allowed" "$multiarch"
  for gone in "$multiarch/libtbb.so.12" "$multiarch/libcurl.so.4" \
      "$multiarch/libopencv_core.so.406" /usr/local/cuda/bin/nvcc /usr/include/lmdb.h \
      /usr/share/libdcmtk17/dicom.dic; do
    if [ -e "$gone" ]; then echo "hiding failed: $gone is visible" >&2; exit 1; fi
  done
  echo "== wheel test (hidden system libraries): fresh venv, numpy, the notebook install cell"
  "$py" -m venv "$work/venv"
  "$work/venv/bin/python" -m pip install -q --no-index --find-links "$work/wheelhouse" numpy
  t0=${EPOCHREALTIME/./}
  DSPIPE_WHEEL="$work/wheels" "$work/venv/bin/python" -c "$cell"
  ms=$(( (${EPOCHREALTIME/./} - t0) / 1000 ))
  printf "install cell (pip install of the wheel into the fresh venv, import, python -m dspipe): %d.%03d s\n" \
    $((ms / 1000)) $((ms % 1000))
  cd "$work"
  exec "$work/venv/bin/python" "$here/wheel_roundtrip.py" "$work/rt" "$allowed"
' _ "$work" "$allowed" "$cell" "$py" "$here"
echo "== wheel test: passed"
