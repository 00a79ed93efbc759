// SPDX-License-Identifier: Apache-2.0
// dspipe._dspipe.build_details() (python -m dspipe prints it): the build's CUDA toolkit and the
// GPU architectures its kernels were compiled for, the SIMD level of dspipe's and OpenCV's code
// (compiled baseline, run-time dispatch and what this CPU has), and the version each linked
// library reports at run time (or its header's, for the few without a version call) — in a
// wheel these are the copies auditwheel bundled, so a user can quote them in a bug report.
#include "build_info.h"

#include <archive.h>
#include <csv.h>
#include <curl/curl.h>
#include <gnu/libc-version.h>
#include <jconfig.h>
#include <libdeflate.h>
#include <lmdb.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>
#include <oneapi/tbb/version.h>
#include <openssl/crypto.h>
#include <spng.h>
#include <tiffio.h>
#include <webp/decode.h>
#include <zstd.h>

#include <opencv2/core/utility.hpp>
#include <opencv2/core/version.hpp>
#include <sstream>
#include <string>
#include <vector>

namespace nb = nanobind;

namespace dspipe {
namespace {

#define DSPIPE_STR2(x) #x
#define DSPIPE_STR(x) DSPIPE_STR2(x)

std::string FirstLine(const char* s) {
  const std::string t = s == nullptr ? "" : s;
  return t.substr(0, t.find('\n'));
}

std::string Hex3(int v) {  // libwebp: 0xMMmmpp
  return std::to_string((v >> 16) & 0xff) + "." + std::to_string((v >> 8) & 0xff) + "." +
         std::to_string(v & 0xff);
}

nb::dict Libraries() {
  nb::dict d;
  d["opencv"] = cv::getVersionString();
  d["onetbb"] = std::string(TBB_runtime_version());
  d["zstd"] = std::string(ZSTD_versionString());
  d["libcurl"] = std::string(curl_version());  // with its TLS, zlib, nghttp2, ...
  d["openssl"] = std::string(OpenSSL_version(OPENSSL_VERSION));
  d["libarchive"] = std::string(archive_version_details());  // with its compressors
  d["libspng"] = std::string(spng_version_string());
  d["libdeflate"] = std::string(LIBDEFLATE_VERSION_STRING) + " (header)";
  d["libjpeg-turbo"] = std::string(DSPIPE_STR(LIBJPEG_TURBO_VERSION)) + " (header)";
  d["libwebp"] = Hex3(WebPGetDecoderVersion());
  d["libtiff"] = FirstLine(TIFFGetVersion());
  int major = 0, minor = 0, patch = 0;
  mdb_version(&major, &minor, &patch);
  d["lmdb"] = std::to_string(major) + "." + std::to_string(minor) + "." + std::to_string(patch);
  d["libcsv"] = std::to_string(CSV_MAJOR) + "." + std::to_string(CSV_MINOR) + "." +
                std::to_string(CSV_RELEASE) + " (header)";
  d["nanobind"] = std::to_string(NB_VERSION_MAJOR) + "." + std::to_string(NB_VERSION_MINOR) + "." +
                  std::to_string(NB_VERSION_PATCH);
  return d;
}

// dspipe's own code is compiled for the x86-64 baseline; the PNG unfilter has an AVX2 version
// chosen at run time (lib/codec/png_fast_unfilter.cc). OpenCV's line lists its baseline and
// dispatched sets, a '?' marking those this CPU lacks.
nb::dict Simd() {
  nb::dict d;
  std::vector<std::string> compiled;
#if defined(__x86_64__)
  compiled.push_back("SSE2");
#endif
#if defined(__SSE4_2__)
  compiled.push_back("SSE4.2");
#endif
#if defined(__AVX2__)
  compiled.push_back("AVX2");
#endif
  d["dspipe_baseline"] = compiled;
#if defined(__x86_64__)
  __builtin_cpu_init();
  d["cpu_avx2"] = __builtin_cpu_supports("avx2") != 0;
  d["cpu_avx512f"] = __builtin_cpu_supports("avx512f") != 0;
#endif
  d["opencv"] = cv::getCPUFeaturesLine();
  return d;
}

nb::dict BuildDetails() {
  nb::dict d;
#ifdef DSPIPE_CUDA_ARCHS
  std::vector<std::string> archs;
  std::istringstream in(DSPIPE_CUDA_ARCHS);
  for (std::string a; in >> a;) archs.push_back(a);
  d["cuda_archs"] = archs;
  d["cuda_toolkit"] = std::string(DSPIPE_CUDA_VERSION);
#else
  d["cuda_archs"] = std::vector<std::string>{};
  d["cuda_toolkit"] = nb::none();
#endif
  d["simd"] = Simd();
  d["libraries"] = Libraries();
  d["wheel"] = DSPIPE_WHEEL_BUILD != 0;  // scripts/build-wheel.sh (cmake/dspipeWheel.cmake)
  d["libstdcxx"] = DSPIPE_WHEEL_BUILD != 0 ? "static" : "shared";
  d["compiler"] = std::string(__VERSION__);
  d["glibc_built"] = std::to_string(__GLIBC__) + "." + std::to_string(__GLIBC_MINOR__);
  d["glibc_running"] = std::string(gnu_get_libc_version());
  return d;
}

}  // namespace

void RegisterBuildInfo(nb::module_& m) {
  m.def("build_details", &BuildDetails,
        "CUDA archs, SIMD level, linked library versions (python -m dspipe prints them)");
}

}  // namespace dspipe
