#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Builds the small static DCMTK the wheel links (scripts/build-wheel.sh; lib/volume/dicom.cc),
# from Debian 12's own source package (apt-get source dcmtk, 3.6.7-9~deb12u4, the version
# libdcmtk-dev ships, with Debian's patches applied: its CVE fixes included), configured like
# Debian's build (C++17, DCMTK's STL mode, zlib) minus everything dspipe does not use: only the
# modules ofstd, oflog, dcmdata, dcmimgle, dcmimage (dcmjpeg and dcmjpls link it), dcmjpeg (with
# its IJG 8/12/16-bit libraries) and dcmjpls (with its CharLS); no XML (libxml2), ICU, iconv,
# OpenSSL, TIFF, PNG, OpenJPEG, libwrap, libsndfile, docs, apps or tests; no private-tag
# dictionary. Debian's shared libdcmdata needs libxml2 -> libicuuc/libicudata (31 MB, and
# GLIBCXX_3.4.30, which alone makes the wheel manylinux_2_35); this one needs only libz.
# The data dictionary is compiled in (DCMTK_DEFAULT_DICT=builtin): Debian's build reads
# /usr/share/libdcmtk17/dicom.dic, which a wheel's user does not have (without a dictionary an
# implicit-VR file's elements have no VR and cannot be read). DCMTK's socket-library probe would
# find Debian's libnsl (libnsl2, not on the manylinux allow-list) and put it in oflog's link
# interface; glibc has the functions, so the probe's answer is given as "no".
# Build time on the 2-core (shared) development machine, download and configure included: 3-4 min
# without ccache (4.1 min of CPU; 8.3 min while other builds ran), under 1 min again for the same
# PREFIX with ccache (PREFIX is compiled into osconfig.h, so a new PREFIX compiles everything
# anew). The install (PREFIX) is 24 MB.
#
# Usage: bash scripts/build-dcmtk.sh PREFIX   (prints nothing else on success; PREFIX/lib/cmake/
# dcmtk is then what find_package(DCMTK) reads, DCMTK_DIR). Reuses PREFIX when it was built by
# this same script text (a stamp holds the script's sha256), so CI and worktrees on one machine
# build it once. The source comes through apt with a private source list (the system's apt config
# is untouched); dpkg-source (dpkg-dev, part of build-essential) unpacks it and applies the
# patches.
set -euo pipefail
prefix=${1:?usage: build-dcmtk.sh PREFIX}
here=$(cd "$(dirname "$0")" && pwd)
stamp="$prefix/.dspipe-dcmtk-stamp"
want=$(sha256sum "$here/build-dcmtk.sh" | cut -d' ' -f1)
if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ]; then exit 0; fi

version=3.6.7-9~deb12u4
work="$prefix.work"
rm -rf "$work" "$prefix"
mkdir -p "$work/apt/lists/partial" "$work/apt/parts" "$work/apt/cache"
cat >"$work/apt/parts/debian-src.sources" <<'EOF'
Types: deb-src
URIs: http://deb.debian.org/debian
Suites: bookworm
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
EOF
apt_opts=(-o Dir::Etc::SourceList=/dev/null -o "Dir::Etc::SourceParts=$work/apt/parts"
  -o "Dir::State::Lists=$work/apt/lists" -o "Dir::Cache=$work/apt/cache")
echo "== DCMTK: apt-get source dcmtk=$version (Debian 12) into $work"
apt-get "${apt_opts[@]}" update -qq
(cd "$work" && apt-get "${apt_opts[@]}" source --download-only -qq "dcmtk=$version" 2>&1 |
  grep -v "unsandboxed" || true)
src="$work/dcmtk"
# -x applies debian/patches (quilt series); the .dsc signature is not checked against a keyring
# here, the files' checksums come from the signed Release file through apt.
dpkg-source -q --no-check -x "$work/dcmtk_$version.dsc" "$src" >/dev/null
[ -f "$src/CMakeLists.txt" ] || { echo "build-dcmtk.sh: no DCMTK source in $work" >&2; exit 1; }
# dcmdata's image-to-DICOM library (libi2d, for img2dcm), apps, tests and docs: not built.
sed -i 's/^foreach(SUBDIR libsrc libi2d apps include docs data tests)$/foreach(SUBDIR libsrc include data)/' \
  "$src/dcmdata/CMakeLists.txt"
grep -q "^foreach(SUBDIR libsrc include data)$" "$src/dcmdata/CMakeLists.txt" ||
  { echo "build-dcmtk.sh: dcmdata/CMakeLists.txt is not the expected 3.6.7 one" >&2; exit 1; }

launcher=()
if command -v ccache >/dev/null; then
  launcher=(-DCMAKE_C_COMPILER_LAUNCHER=ccache -DCMAKE_CXX_COMPILER_LAUNCHER=ccache)
fi
off=(BUILD_SHARED_LIBS BUILD_APPS BUILD_SINGLE_SHARED_LIBRARY DCMTK_WITH_XML DCMTK_WITH_ICU
  DCMTK_WITH_ICONV DCMTK_WITH_STDLIBC_ICONV DCMTK_WITH_OPENSSL DCMTK_WITH_TIFF DCMTK_WITH_PNG
  DCMTK_WITH_OPENJPEG DCMTK_WITH_WRAP DCMTK_WITH_SNDFILE DCMTK_WITH_DOXYGEN
  DCMTK_ENABLE_MANPAGES DCMTK_ENABLE_PRIVATE_TAGS)
on=(DCMTK_WITH_ZLIB DCMTK_WITH_THREADS DCMTK_ENABLE_STL CMAKE_POSITION_INDEPENDENT_CODE)
# One section per function and object, so that the wheel's --gc-sections drops what dspipe does
# not reach (the encoders, DicomImage's scaling and color models, most of oflog): measured, the
# module and each CLI carry 2.5 MiB of DCMTK with it, 3.1 MiB without.
sections="-ffunction-sections -fdata-sections"
flags=()
for f in "${off[@]}"; do flags+=("-D$f=OFF"); done
for f in "${on[@]}"; do flags+=("-D$f=ON"); done
echo "== DCMTK: configure + build ofstd, oflog, dcmdata, dcmimgle, dcmimage, dcmjpeg, dcmjpls (static)"
cmake -S "$src" -B "$work/build" -G Ninja -Wno-dev -DCMAKE_BUILD_TYPE=Release \
  -DCMAKE_INSTALL_PREFIX="$prefix" -DCMAKE_INSTALL_DATADIC=share/dcmtk -DCMAKE_CXX_STANDARD=17 \
  "-DCMAKE_C_FLAGS=$sections" "-DCMAKE_CXX_FLAGS=$sections" \
  "-DDCMTK_MODULES=ofstd;oflog;dcmdata;dcmimgle;dcmimage;dcmjpeg;dcmjpls" \
  -DDCMTK_DEFAULT_DICT=builtin -DDCMTK_ENABLE_CHARSET_CONVERSION="<disabled>" \
  -DHAVE_LIBNSL_MAIN=0 -DHAVE_LIBNSL=0 \
  "${launcher[@]}" "${flags[@]}" >"$work/configure.log" ||
  { tail -40 "$work/configure.log" >&2; exit 1; }
nice cmake --build "$work/build" -j "${JOBS:-$(nproc)}" >"$work/build.log" ||
  { tail -40 "$work/build.log" >&2; exit 1; }
cmake --install "$work/build" >/dev/null
echo "$want" >"$stamp"
rm -rf "$work"
