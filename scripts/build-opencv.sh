#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Builds the small static OpenCV the wheel links (scripts/build-wheel.sh): only core, imgproc and
# imgcodecs, from Debian 12's own source package (apt-get source opencv, 4.6.0+dfsg, the version
# libopencv-dev ships), configured like Debian's build (CPU baseline SSE2, the default SIMD
# dispatch, oneTBB as the parallel backend, the system libjpeg-turbo/libpng/libtiff/libwebp/zlib)
# minus everything dspipe does not use: no GDAL, GDCM, OpenEXR, OpenJPEG/JPEG 2000, HDR, Sun
# raster, PFM, LAPACK, OpenGL/X11, OpenCL, IPP. Debian's libopencv-imgcodecs406 needs 139
# shared libraries (178 MB, GDAL's tree); this one needs the five codec libraries above.
#
# Usage: bash scripts/build-opencv.sh PREFIX   (prints nothing else on success; PREFIX/lib/cmake/
# opencv4 is then what find_package(OpenCV) reads). Reuses PREFIX when it was built by this same
# script text (a stamp holds the script's sha256), so CI and worktrees on one machine build it once.
# The source comes through apt with a private source list (the system's apt config is untouched).
set -euo pipefail
prefix=${1:?usage: build-opencv.sh PREFIX}
here=$(cd "$(dirname "$0")" && pwd)
stamp="$prefix/.dspipe-opencv-stamp"
want=$(sha256sum "$here/build-opencv.sh" | cut -d' ' -f1)
if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ]; then exit 0; fi

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
echo "== OpenCV: apt-get source opencv (Debian 12) into $work"
apt-get "${apt_opts[@]}" update -qq
(cd "$work" && apt-get "${apt_opts[@]}" source --download-only -qq opencv=4.6.0+dfsg-12 2>&1 |
  grep -v "unsandboxed" || true)
tar -xJf "$work"/opencv_4.6.0+dfsg.orig.tar.xz -C "$work"
src="$work/opencv-4.6.0"
[ -f "$src/CMakeLists.txt" ] || { echo "build-opencv.sh: no OpenCV source in $work" >&2; exit 1; }

launcher=()
if command -v ccache >/dev/null; then
  launcher=(-DCMAKE_C_COMPILER_LAUNCHER=ccache -DCMAKE_CXX_COMPILER_LAUNCHER=ccache)
fi
off=(WITH_IPP WITH_ITT WITH_OPENCL WITH_OPENGL WITH_VA WITH_VA_INTEL WITH_LAPACK WITH_EIGEN
  WITH_GDAL WITH_GDCM WITH_OPENEXR WITH_OPENJPEG WITH_JASPER WITH_IMGCODEC_HDR
  WITH_IMGCODEC_SUNRASTER WITH_IMGCODEC_PFM WITH_PROTOBUF WITH_ADE WITH_QUIRC WITH_GTK WITH_QT
  WITH_FFMPEG WITH_GSTREAMER WITH_V4L WITH_1394 WITH_CUDA WITH_VTK WITH_OPENMP WITH_VULKAN
  WITH_OPENVX WITH_HALIDE WITH_ONNX WITH_SPNG WITH_AVIF WITH_OPENCLAMDFFT WITH_OPENCLAMDBLAS
  BUILD_SHARED_LIBS BUILD_TESTS BUILD_PERF_TESTS BUILD_EXAMPLES BUILD_DOCS BUILD_JAVA
  BUILD_opencv_apps BUILD_opencv_python3 BUILD_opencv_python2 BUILD_ZLIB BUILD_PNG BUILD_JPEG
  BUILD_TIFF BUILD_WEBP BUILD_TBB BUILD_ITT ENABLE_PRECOMPILED_HEADERS OPENCV_GENERATE_PKGCONFIG
  CV_TRACE)
on=(WITH_TBB WITH_PNG WITH_JPEG WITH_TIFF WITH_WEBP WITH_IMGCODEC_PXM WITH_PTHREADS_PF
  CMAKE_POSITION_INDEPENDENT_CODE)
flags=()
for f in "${off[@]}"; do flags+=("-D$f=OFF"); done
for f in "${on[@]}"; do flags+=("-D$f=ON"); done
echo "== OpenCV: configure + build core, imgproc, imgcodecs (static)"
cmake -S "$src" -B "$work/build" -G Ninja -Wno-dev -DCMAKE_BUILD_TYPE=Release \
  -DCMAKE_INSTALL_PREFIX="$prefix" -DBUILD_LIST=core,imgproc,imgcodecs \
  -DCPU_BASELINE=SSE2 -DCPU_BASELINE_DISABLE=SSE3 -DOPENCV_DOWNLOAD_TRIES_LIST= \
  "${launcher[@]}" "${flags[@]}" >"$work/configure.log" ||
  { tail -40 "$work/configure.log" >&2; exit 1; }
nice cmake --build "$work/build" -j "${JOBS:-$(nproc)}" >"$work/build.log" ||
  { tail -40 "$work/build.log" >&2; exit 1; }
cmake --install "$work/build" >/dev/null
echo "$want" >"$stamp"
rm -rf "$work"
