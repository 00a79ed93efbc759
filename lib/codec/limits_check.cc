// SPDX-License-Identifier: Apache-2.0
#include "codec/limits_check.h"

#include <webp/decode.h>

#include <algorithm>
#include <cctype>
#include <cstring>
#include <memory>
#include <string>

#include "codec/image.h"
#include "codec/tiff.h"

namespace dspipe::codec {

const char* const kSupportedImageFormats = "PNG, JPEG, BMP, TIFF, WebP and PNM (PBM/PGM/PPM)";

namespace {

bool StartsWith(std::span<const uint8_t> b, const char* magic, size_t n) {
  return b.size() >= n && std::memcmp(b.data(), magic, n) == 0;
}

// A name for a refused format, when one is recognisable, for the message.
std::string OtherFormatName(std::span<const uint8_t> b) {
  if (b.size() >= 132 && std::memcmp(b.data() + 128, "DICM", 4) == 0) return "DICOM";
  if (StartsWith(b, "\x00\x00\x00\x0cjP  ", 8) || StartsWith(b, "\xff\x4f\xff\x51", 4)) {
    return "JPEG 2000";
  }
  if (StartsWith(b, "\x76\x2f\x31\x01", 4)) return "OpenEXR";
  if (StartsWith(b, "#?", 2)) return "Radiance HDR";
  if (StartsWith(b, "\x59\xa6\x6a\x95", 4)) return "Sun raster";
  if (StartsWith(b, "PF", 2) || StartsWith(b, "Pf", 2)) return "PFM";
  if (StartsWith(b, "P7", 2)) return "PAM";
  if (StartsWith(b, "GIF8", 4)) return "GIF";
  return "";
}

// BMP: the DIB header's width and height (BITMAPCOREHEADER: 16-bit; others: signed 32-bit,
// height negative for top-down rows). A 182-byte file declaring 2053x458758 made OpenCV ask
// for 2.8 GB (tests/fuzz record).
Status CheckBmp(std::span<const uint8_t> b) {
  if (b.size() < 26) return Status::BadInput("BMP header truncated (" +
                                             std::to_string(b.size()) + " bytes)");
  auto le32 = [&](size_t at) {
    return static_cast<int32_t>(uint32_t{b[at]} | uint32_t{b[at + 1]} << 8 |
                                uint32_t{b[at + 2]} << 16 | uint32_t{b[at + 3]} << 24);
  };
  const uint32_t header_size = static_cast<uint32_t>(le32(14));
  int64_t w = 0, h = 0;
  if (header_size == 12) {  // OS/2 BITMAPCOREHEADER: 16-bit sides
    w = b[18] | b[19] << 8;
    h = b[20] | b[21] << 8;
  } else {
    w = le32(18);
    h = le32(22);
  }
  return CheckImageSize("BMP header", static_cast<uint64_t>(w < 0 ? -w : w),
                        static_cast<uint64_t>(h < 0 ? -h : h));
}

// PNM: "P<n>", then width, height (and maxval) as decimal numbers separated by whitespace, with
// '#' comments to the end of a line (netpbm's rules). Numbers are read saturating, so a huge
// one is a huge size, not an overflow. The sides are read exactly as OpenCV's PxM reader
// (ReadNumber in grfmt_pxm.cpp) reads them, since its reading is the one that allocates: the
// character that ends a number is consumed with it, so in "24000# 30000\n255" the '#' starts
// no comment and the height is 30000, not 255 (tests/fuzz record: a 38-byte PPM that a
// comment-aware reading passed as 24000x255 made OpenCV allocate 2.16 GB).
Status CheckPnm(std::span<const uint8_t> b) {
  size_t at = 2;
  uint64_t sides[2] = {0, 0};
  for (uint64_t& side : sides) {
    while (at < b.size() && (std::isspace(b[at]) || b[at] == '#')) {
      if (b[at] == '#') {
        while (at < b.size() && b[at] != '\n' && b[at] != '\r') ++at;
      } else {
        ++at;
      }
    }
    if (at >= b.size() || !std::isdigit(b[at])) {
      return Status::BadInput("PNM header: no image size after the P" +
                              std::string(1, static_cast<char>(b[1])) + " magic");
    }
    for (; at < b.size() && std::isdigit(b[at]); ++at) {
      side = std::min<uint64_t>(side * 10 + (b[at] - '0'), uint64_t{1} << 40);
    }
    ++at;  // the terminator goes with the number, whatever it is
  }
  return CheckImageSize("PNM header", sides[0], sides[1]);
}

Status CheckWebP(std::span<const uint8_t> b) {
  int w = 0, h = 0;
  if (WebPGetInfo(b.data(), b.size(), &w, &h) == 0 || w <= 0 || h <= 0) {
    return Status::BadInput("WebP header: not a readable WebP bitstream");
  }
  return CheckImageSize("WebP header", static_cast<uint64_t>(w), static_cast<uint64_t>(h));
}

}  // namespace

ImageFormat SniffImageFormat(std::span<const uint8_t> b) {
  // DICOM first: its 128-byte preamble may hold anything, even another format's magic.
  if (b.size() >= 132 && std::memcmp(b.data() + 128, "DICM", 4) == 0) return ImageFormat::kOther;
  if (StartsWith(b, "\x89PNG\r\n\x1a\n", 8)) return ImageFormat::kPng;
  if (StartsWith(b, "\xff\xd8\xff", 3)) return ImageFormat::kJpeg;
  if (StartsWith(b, "BM", 2)) return ImageFormat::kBmp;
  if (StartsWith(b, "II*\0", 4) || StartsWith(b, "MM\0*", 4) || StartsWith(b, "II+\0", 4) ||
      StartsWith(b, "MM\0+", 4)) {
    return ImageFormat::kTiff;
  }
  if (b.size() >= 12 && StartsWith(b, "RIFF", 4) && std::memcmp(b.data() + 8, "WEBP", 4) == 0) {
    return ImageFormat::kWebP;
  }
  if (b.size() >= 2 && b[0] == 'P' && b[1] >= '1' && b[1] <= '6') return ImageFormat::kPnm;
  return ImageFormat::kOther;
}

Status CheckOtherImageHeader(std::span<const uint8_t> bytes) {
  switch (SniffImageFormat(bytes)) {
    case ImageFormat::kBmp: return CheckBmp(bytes);
    case ImageFormat::kTiff: return CheckTiffHeader(bytes);  // tiff.h
    case ImageFormat::kWebP: return CheckWebP(bytes);
    case ImageFormat::kPnm: return CheckPnm(bytes);
    case ImageFormat::kPng:
    case ImageFormat::kJpeg:
      return Status::Internal("CheckOtherImageHeader: PNG and JPEG are checked by their decoders");
    case ImageFormat::kOther: break;
  }
  const std::string name = OtherFormatName(bytes);
  if (name == "DICOM") {
    return Status::BadInput(
        "a DICOM file among 2D images; DICOM is read as series, one volume each: put each "
        "series' files in a folder of its own under images/ (images/<case>/*.dcm) and build "
        "that (docs/VOLUMES.md)");
  }
  return Status::BadInput("not a decodable image: " +
                          (name.empty() ? std::string("unknown format")
                                        : name + " files are not supported") +
                          "; dspipe reads " + kSupportedImageFormats);
}

}  // namespace dspipe::codec
