// SPDX-License-Identifier: Apache-2.0
// Hand-made image files for tests: PNGs of any colour type and bit depth (OpenCV cannot write
// palette PNGs), and JPEGs with an EXIF orientation (OpenCV cannot write EXIF). Header-only.
#pragma once

#include <zlib.h>

#include <array>
#include <cstdint>
#include <opencv2/core.hpp>
#include <opencv2/imgcodecs.hpp>
#include <opencv2/imgproc.hpp>
#include <span>
#include <stdexcept>
#include <string>
#include <vector>

namespace dspipe::testing {

inline std::span<const uint8_t> AsBytes(const std::string& s) {
  return {reinterpret_cast<const uint8_t*>(s.data()), s.size()};
}

inline void PutBe32(std::string* out, uint32_t v) {
  for (int s = 24; s >= 0; s -= 8) out->push_back(static_cast<char>((v >> s) & 0xFF));
}

inline void AppendPngChunk(std::string* png, const char type[4], const std::string& data) {
  PutBe32(png, static_cast<uint32_t>(data.size()));
  std::string body(type, 4);
  body += data;
  png->append(body);
  PutBe32(png, static_cast<uint32_t>(
                   crc32(0, reinterpret_cast<const Bytef*>(body.data()), body.size())));
}

// A PNG built byte by byte. `rows` holds height scanlines of packed samples (no filter byte),
// each ceil(width * samples * bit_depth / 8) bytes, 16-bit samples big-endian as PNG stores them.
// color_type: 0 gray, 2 RGB, 3 palette, 4 gray+alpha, 6 RGBA. `palette` is required for type 3.
inline std::string MakePng(int width, int height, int bit_depth, int color_type,
                           const std::vector<uint8_t>& rows,
                           const std::vector<std::array<uint8_t, 3>>& palette = {}) {
  const int samples = color_type == 2 ? 3 : color_type == 4 ? 2 : color_type == 6 ? 4 : 1;
  const size_t row_bytes = (static_cast<size_t>(width) * samples * bit_depth + 7) / 8;
  if (rows.size() != row_bytes * height) throw std::invalid_argument("MakePng: rows size");
  std::string png("\x89PNG\r\n\x1a\n", 8);
  std::string ihdr;
  PutBe32(&ihdr, static_cast<uint32_t>(width));
  PutBe32(&ihdr, static_cast<uint32_t>(height));
  ihdr += static_cast<char>(bit_depth);
  ihdr += static_cast<char>(color_type);
  ihdr += std::string(3, '\0');  // deflate, adaptive filtering, no interlace
  AppendPngChunk(&png, "IHDR", ihdr);
  if (!palette.empty()) {
    std::string plte;
    for (const auto& c : palette) plte.append(reinterpret_cast<const char*>(c.data()), 3);
    AppendPngChunk(&png, "PLTE", plte);
  }
  std::string raw;
  for (int y = 0; y < height; ++y) {
    raw += '\0';  // filter type None
    raw.append(reinterpret_cast<const char*>(rows.data()) + y * row_bytes, row_bytes);
  }
  uLongf zsize = compressBound(raw.size());
  std::string z(zsize, '\0');
  compress(reinterpret_cast<Bytef*>(z.data()), &zsize, reinterpret_cast<const Bytef*>(raw.data()),
           raw.size());
  z.resize(zsize);
  AppendPngChunk(&png, "IDAT", z);
  AppendPngChunk(&png, "IEND", "");
  return png;
}

// Packs 8-bit indices into `bits`-bit samples (1, 2, 4 or 8), MSB first, per row.
inline std::vector<uint8_t> PackIndices(const cv::Mat& idx, int bits) {
  const size_t row_bytes = (static_cast<size_t>(idx.cols) * bits + 7) / 8;
  std::vector<uint8_t> out(row_bytes * idx.rows, 0);
  for (int y = 0; y < idx.rows; ++y) {
    for (int x = 0; x < idx.cols; ++x) {
      const int bit = x * bits;
      out[y * row_bytes + bit / 8] |=
          static_cast<uint8_t>(idx.at<uint8_t>(y, x) << (8 - bits - bit % 8));
    }
  }
  return out;
}

// Big-endian 16-bit samples of a CV_16U Mat, as PNG rows.
inline std::vector<uint8_t> Rows16(const cv::Mat& m) {
  std::vector<uint8_t> out;
  for (int y = 0; y < m.rows; ++y) {
    const uint16_t* p = m.ptr<uint16_t>(y);
    for (int x = 0; x < m.cols * m.channels(); ++x) {
      out.push_back(static_cast<uint8_t>(p[x] >> 8));
      out.push_back(static_cast<uint8_t>(p[x] & 0xFF));
    }
  }
  return out;
}

// Rows of an 8-bit Mat as they are (channel order as stored in the Mat).
inline std::vector<uint8_t> Rows8(const cv::Mat& m) {
  std::vector<uint8_t> out;
  for (int y = 0; y < m.rows; ++y) {
    const uint8_t* p = m.ptr<uint8_t>(y);
    out.insert(out.end(), p, p + m.cols * m.channels());
  }
  return out;
}

// Inserts an APP1 Exif segment right after SOI holding one IFD0 entry: Orientation (0x0112,
// SHORT) = orientation. The TIFF header is big-endian ("MM").
inline std::string WithExifOrientation(const std::string& jpeg, int orientation) {
  const uint8_t tiff[] = {'M',  'M',
                          0,    42,
                          0,    0,
                          0,    8,  // header, IFD0 at offset 8
                          0,    1,  // one entry
                          0x01, 0x12,
                          0,    3,
                          0,    0,
                          0,    1,  // Orientation, SHORT, count 1
                          0,    static_cast<uint8_t>(orientation),
                          0,    0,  // value, padded
                          0,    0,
                          0,    0};  // no next IFD
  std::string app1 = "\xFF\xE1";
  const size_t len = 2 + 6 + sizeof tiff;
  app1 += static_cast<char>(len >> 8);
  app1 += static_cast<char>(len & 0xFF);
  app1.append("Exif\0\0", 6);
  app1.append(reinterpret_cast<const char*>(tiff), sizeof tiff);
  if (jpeg.size() < 2 || static_cast<uint8_t>(jpeg[0]) != 0xFF) {
    throw std::invalid_argument("not a JPEG");
  }
  return jpeg.substr(0, 2) + app1 + jpeg.substr(2);
}

// A smooth, asymmetric RGB test pattern (so rotations and channel swaps are visible), RGB order.
inline cv::Mat Pattern(int width, int height, int seed = 0) {
  cv::Mat m(height, width, CV_8UC3);
  for (int y = 0; y < height; ++y) {
    for (int x = 0; x < width; ++x) {
      m.at<cv::Vec3b>(y, x) = cv::Vec3b(static_cast<uint8_t>((x * 255) / width),
                                        static_cast<uint8_t>((y * 255) / height),
                                        static_cast<uint8_t>((x + 2 * y + seed * 37) % 256));
    }
  }
  return m;
}

// Encodes an RGB (or 1-channel) Mat with OpenCV (which wants BGR) to ext (".png", ".jpg").
inline std::string Encode(const cv::Mat& rgb, const std::string& ext,
                          std::vector<int> params = {}) {
  cv::Mat bgr;  // never aliases rgb: cvtColor into a shared header would convert in place
  if (rgb.channels() == 1) bgr = rgb;
  if (rgb.channels() == 3) cv::cvtColor(rgb, bgr, cv::COLOR_RGB2BGR);
  if (rgb.channels() == 4) cv::cvtColor(rgb, bgr, cv::COLOR_RGBA2BGRA);
  std::vector<uint8_t> buf;
  if (!cv::imencode(ext, bgr, buf, params)) throw std::runtime_error("imencode " + ext);
  return std::string(buf.begin(), buf.end());
}

// Decodes with OpenCV the way a user would (imdecode IMREAD_COLOR, then to RGB).
inline cv::Mat OpenCvRgb(const std::string& bytes) {
  cv::Mat buf(1, static_cast<int>(bytes.size()), CV_8UC1, const_cast<char*>(bytes.data()));
  cv::Mat bgr = cv::imdecode(buf, cv::IMREAD_COLOR);
  if (bgr.empty()) return bgr;
  cv::Mat rgb;
  cv::cvtColor(bgr, rgb, cv::COLOR_BGR2RGB);
  return rgb;
}

// Number of pixels (elements) that differ between two Mats of the same size and type; -1 when
// sizes or types differ.
inline int64_t CountDiff(const cv::Mat& a, const cv::Mat& b) {
  if (a.size() != b.size() || a.type() != b.type()) return -1;
  cv::Mat d;
  cv::compare(a.reshape(1), b.reshape(1), d, cv::CMP_NE);
  return cv::countNonZero(d);
}

}  // namespace dspipe::testing
