// SPDX-License-Identifier: Apache-2.0
// Test helper: writes TIFFs with libtiff itself (any channel count, contiguous or planar, strips
// or tiles, a compression, several pages), which cv::imwrite cannot (at most 4 channels,
// contiguous). Pixels in: HWC Mats of CV_8U / CV_16U / CV_16S / CV_32F, samples in file order.
#pragma once

#include <tiffio.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <iterator>
#include <opencv2/core.hpp>
#include <string>
#include <vector>

namespace dspipe::testing {

struct TiffWriteOptions {
  bool planar = false;     // PLANARCONFIG_SEPARATE
  int tile = 0;            // > 0: square tiles of this side (a multiple of 16)
  int rows_per_strip = 0;  // strips: 0 = 3 rows (several strips, a short last one)
  int compression = COMPRESSION_NONE;
  int predictor = 0;     // PREDICTOR_HORIZONTAL / PREDICTOR_FLOATINGPOINT with deflate
  int photometric = -1;  // -1: RGB for 3+ channels, MINISBLACK below
  bool big_endian = false;
  // The ExtraSamples kind of a 4th sample after RGB; the others are EXTRASAMPLE_UNSPECIFIED.
  int alpha = EXTRASAMPLE_UNASSALPHA;
};

// The TIFF's bytes; empty on failure (with the reason in *error).
inline std::string TiffBytes(const std::vector<cv::Mat>& pages, const TiffWriteOptions& o,
                             std::string* error) {
  char path[] = "/tmp/dspipe-tiffw-XXXXXX";
  const int fd = ::mkstemp(path);
  if (fd < 0) {
    *error = "mkstemp failed";
    return "";
  }
  ::close(fd);
  TIFF* t = TIFFOpen(path, o.big_endian ? "wb" : "wl");
  if (t == nullptr) {
    *error = "TIFFOpen failed";
    return "";
  }
  bool ok = true;
  for (const cv::Mat& m : pages) {
    const int c = m.channels();
    const int bytes = static_cast<int>(m.elemSize1());
    const int depth = m.depth();
    const int photometric =
        o.photometric >= 0 ? o.photometric : (c >= 3 ? PHOTOMETRIC_RGB : PHOTOMETRIC_MINISBLACK);
    TIFFSetField(t, TIFFTAG_IMAGEWIDTH, static_cast<uint32_t>(m.cols));
    TIFFSetField(t, TIFFTAG_IMAGELENGTH, static_cast<uint32_t>(m.rows));
    TIFFSetField(t, TIFFTAG_SAMPLESPERPIXEL, static_cast<uint16_t>(c));
    TIFFSetField(t, TIFFTAG_BITSPERSAMPLE, static_cast<uint16_t>(bytes * 8));
    TIFFSetField(t, TIFFTAG_SAMPLEFORMAT,
                 static_cast<uint16_t>(depth == CV_32F   ? SAMPLEFORMAT_IEEEFP
                                       : depth == CV_16S ? SAMPLEFORMAT_INT
                                                         : SAMPLEFORMAT_UINT));
    TIFFSetField(t, TIFFTAG_PHOTOMETRIC, static_cast<uint16_t>(photometric));
    TIFFSetField(t, TIFFTAG_PLANARCONFIG,
                 static_cast<uint16_t>(o.planar ? PLANARCONFIG_SEPARATE : PLANARCONFIG_CONTIG));
    TIFFSetField(t, TIFFTAG_COMPRESSION, static_cast<uint16_t>(o.compression));
    if (o.predictor > 0) TIFFSetField(t, TIFFTAG_PREDICTOR, static_cast<uint16_t>(o.predictor));
    const int color = photometric == PHOTOMETRIC_RGB ? 3 : 1;
    if (c > color) {
      std::vector<uint16_t> extra(static_cast<size_t>(c - color), EXTRASAMPLE_UNSPECIFIED);
      if (c == 4 && color == 3) extra[0] = static_cast<uint16_t>(o.alpha);
      TIFFSetField(t, TIFFTAG_EXTRASAMPLES, static_cast<uint16_t>(extra.size()), extra.data());
    }
    if (pages.size() > 1) TIFFSetField(t, TIFFTAG_SUBFILETYPE, uint32_t{FILETYPE_PAGE});
    const int planes = o.planar ? c : 1, per = o.planar ? 1 : c;
    const size_t px = static_cast<size_t>(per) * bytes;
    // One plane's rows (or the interleaved rows), row-major.
    auto plane_bytes = [&](int k) {
      std::vector<uint8_t> p(static_cast<size_t>(m.rows) * m.cols * px);
      for (int y = 0; y < m.rows; ++y) {
        for (int x = 0; x < m.cols; ++x) {
          const uint8_t* s =
              m.ptr<uint8_t>(y) + (static_cast<size_t>(x) * c + (o.planar ? k : 0)) * bytes;
          std::memcpy(p.data() + (static_cast<size_t>(y) * m.cols + x) * px, s, px);
        }
      }
      return p;
    };
    if (o.tile > 0) {
      TIFFSetField(t, TIFFTAG_TILEWIDTH, static_cast<uint32_t>(o.tile));
      TIFFSetField(t, TIFFTAG_TILELENGTH, static_cast<uint32_t>(o.tile));
      std::vector<uint8_t> tile(static_cast<size_t>(o.tile) * o.tile * px);
      for (int k = 0; k < planes && ok; ++k) {
        const std::vector<uint8_t> p = plane_bytes(k);
        for (int ty = 0; ty < m.rows && ok; ty += o.tile) {
          for (int tx = 0; tx < m.cols && ok; tx += o.tile) {
            std::fill(tile.begin(), tile.end(), 0);
            for (int r = 0; r < o.tile && ty + r < m.rows; ++r) {
              const int cols = std::min(o.tile, m.cols - tx);
              std::memcpy(tile.data() + static_cast<size_t>(r) * o.tile * px,
                          p.data() + (static_cast<size_t>(ty + r) * m.cols + tx) * px, cols * px);
            }
            ok = TIFFWriteTile(t, tile.data(), static_cast<uint32_t>(tx), static_cast<uint32_t>(ty),
                               0, static_cast<uint16_t>(k)) >= 0;
          }
        }
      }
    } else {
      const int rps = o.rows_per_strip > 0 ? o.rows_per_strip : 3;
      TIFFSetField(t, TIFFTAG_ROWSPERSTRIP, static_cast<uint32_t>(rps));
      for (int k = 0; k < planes && ok; ++k) {
        const std::vector<uint8_t> p = plane_bytes(k);
        for (int y = 0; y < m.rows && ok; y += rps) {
          const int rows = std::min(rps, m.rows - y);
          const uint32_t strip =
              TIFFComputeStrip(t, static_cast<uint32_t>(y), static_cast<uint16_t>(k));
          ok = TIFFWriteEncodedStrip(
                   t, strip, const_cast<uint8_t*>(p.data() + static_cast<size_t>(y) * m.cols * px),
                   static_cast<tmsize_t>(static_cast<size_t>(rows) * m.cols * px)) >= 0;
        }
      }
    }
    ok = ok && TIFFWriteDirectory(t) == 1;
  }
  TIFFClose(t);
  std::ifstream in(path, std::ios::binary);
  std::string out((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  ::unlink(path);
  if (!ok) {
    *error = "libtiff write failed";
    return "";
  }
  return out;
}

inline std::string TiffBytes(const cv::Mat& m, const TiffWriteOptions& o = {}) {
  std::string error;
  return TiffBytes(std::vector<cv::Mat>{m}, o, &error);
}

inline bool WriteTiffFile(const std::string& path, const cv::Mat& m,
                          const TiffWriteOptions& o = {}) {
  const std::string b = TiffBytes(m, o);
  if (b.empty()) return false;
  std::ofstream f(path, std::ios::binary);
  f.write(b.data(), static_cast<std::streamsize>(b.size()));
  return static_cast<bool>(f);
}

}  // namespace dspipe::testing
