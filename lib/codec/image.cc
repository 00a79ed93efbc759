// SPDX-License-Identifier: Apache-2.0
#include "codec/image.h"

#include <spng.h>
#include <zstd.h>

#include <algorithm>
#include <cstring>
#include <exception>
#include <memory>
#include <opencv2/imgcodecs.hpp>
#include <opencv2/imgproc.hpp>
#include <vector>

#include "codec/limits_check.h"
#include "codec/png_fast.h"
#include "codec/tiff.h"
#include "dspipe/limits.h"

namespace dspipe::codec {
namespace {

constexpr uint8_t kPngIend[12] = {0, 0, 0, 0, 'I', 'E', 'N', 'D', 0xAE, 0x42, 0x60, 0x82};
constexpr uint32_t kSpngMaxSide = 0x7fffffffu;  // libspng's own ceiling; ours is DecodeLimits

struct SpngCtx {
  spng_ctx* ctx = spng_ctx_new(0);
  ~SpngCtx() { spng_ctx_free(ctx); }
};

// OpenCV reports odd input (and allocation failures) by throwing; the codec API never lets an
// exception out: it becomes a BadInput naming the call.
Status FromException(const char* fn, const std::exception& e) {
  return Status::BadInput(std::string(fn) + ": " + e.what());
}

Status SpngError(const char* what, int rc) {
  return Status::BadInput(std::string("PNG ") + what + ": " + spng_strerror(rc));
}

Status OpenPng(std::span<const uint8_t> bytes, SpngCtx* c, spng_ihdr* ihdr) {
  if (c->ctx == nullptr) return Status::Internal("spng_ctx_new failed");
  spng_set_image_limits(c->ctx, kSpngMaxSide, kSpngMaxSide);
  spng_set_chunk_limits(c->ctx, 64u << 20, 64u << 20);
  int rc = spng_set_png_buffer(c->ctx, bytes.data(), bytes.size());
  if (rc != 0) return SpngError("buffer", rc);
  rc = spng_get_ihdr(c->ctx, ihdr);
  if (rc != 0) return SpngError("header", rc);
  return CheckImageSize("PNG header", ihdr->width, ihdr->height);
}

bool HasIend(std::span<const uint8_t> b) {
  return b.size() >= 8 + sizeof kPngIend &&
         std::memcmp(b.data() + b.size() - sizeof kPngIend, kPngIend, sizeof kPngIend) == 0;
}

bool HasJpegEoi(std::span<const uint8_t> b) {
  // EOI is FF D9; some writers pad a few bytes after it.
  const size_t tail = std::min<size_t>(b.size(), 64);
  for (size_t i = b.size() - tail; i + 1 < b.size(); ++i) {
    if (b[i] == 0xFF && b[i + 1] == 0xD9) return true;
  }
  return false;
}

// What every cv::imdecode call checks first: OpenCV allocates whatever size a header declares
// (up to its own 2^30-pixel cap), and reads formats dspipe does not take (DICOM through GDCM
// aborted on a fuzzed file). PNG and JPEG headers are read by libspng and libjpeg-turbo here;
// the other formats on the allow-list, and the refusal of the rest, are in limits_check.h.
Status CheckBeforeOpenCv(std::span<const uint8_t> bytes) {
  switch (SniffImageFormat(bytes)) {
    case ImageFormat::kPng: {
      SpngCtx c;
      spng_ihdr ihdr;
      return OpenPng(bytes, &c, &ihdr);
    }
    case ImageFormat::kJpeg: {
      JpegInfo info;
      return ReadJpegInfo(bytes, &info);
    }
    default:
      return CheckOtherImageHeader(bytes);
  }
}

// Every cv::imdecode call: CheckBeforeOpenCv first, then imdecode with `flags`; OpenCV's throw
// and an empty result become BadInput with the reason.
Status Imdecode(std::span<const uint8_t> bytes, int flags, cv::Mat* out) {
  DSPIPE_RETURN_IF_ERROR(CheckBeforeOpenCv(bytes));
  try {
    cv::Mat buf(1, static_cast<int>(bytes.size()), CV_8UC1, const_cast<uint8_t*>(bytes.data()));
    *out = cv::imdecode(buf, flags);
  } catch (const cv::Exception& e) {
    return Status::BadInput(std::string("decode failed: ") + e.what());
  }
  if (out->empty()) return Status::BadInput("not a decodable image (truncated or corrupt?)");
  return Status::OK();
}

// A TIFF libtiff reads (tiff.h) as 8-bit gray or RGB, as OpenCV's IMREAD_COLOR reads the
// contiguous file: 16-bit color v / 257 rounded (its RGBA reader), 16-bit gray + alpha the
// high byte of the gray (v >> 8); alpha dropped (not premultiplied: OpenCV premultiplies the
// color of a contiguous file whose 4th sample is unassociated alpha, which this leaves alone).
Status DecodeTiffAs8(std::span<const uint8_t> bytes, int channels, cv::Mat* out) {
  cv::Mat wide, rgb;
  DSPIPE_RETURN_IF_ERROR(DecodeTiff(bytes, &wide));
  if (wide.channels() <= 2) {
    cv::Mat gray(wide.rows, wide.cols, CV_8UC1);
    const int c = wide.channels();
    for (int y = 0; y < wide.rows; ++y) {
      uint8_t* d = gray.ptr<uint8_t>(y);
      if (wide.depth() == CV_8U) {
        const uint8_t* s = wide.ptr<uint8_t>(y);
        for (int x = 0; x < wide.cols; ++x) d[x] = s[c * x];
      } else {
        const uint16_t* s = wide.ptr<uint16_t>(y);
        for (int x = 0; x < wide.cols; ++x) d[x] = static_cast<uint8_t>(s[c * x] >> 8);
      }
    }
    if (channels == 1) {
      *out = gray;
    } else {
      cv::cvtColor(gray, *out, cv::COLOR_GRAY2RGB);
    }
    return Status::OK();
  }
  if (wide.channels() == 4) {
    cv::cvtColor(wide, rgb, cv::COLOR_RGBA2RGB);
  } else {
    rgb = wide;
  }
  if (rgb.depth() != CV_8U) rgb.convertTo(rgb, CV_8U, 1.0 / 257.0);
  if (channels == 1) {
    cv::cvtColor(rgb, *out, cv::COLOR_RGB2GRAY);
  } else {
    *out = rgb;
  }
  return Status::OK();
}

// Decodes any non-PNG format with OpenCV (applies EXIF orientation) to RGB or gray.
//
// TIFF: OpenCV as before wherever it reads the file right (its pixels are what existing
// datasets hold; contiguous samples, or 8-bit ones), libtiff (tiff.h) where OpenCV 4.6 misreads
// it (planar 16-bit color: wrong values, silently) or fails (tiled 8-bit gray / RGB whose
// tiles overhang the image: measured in tests/codec/tiff_test.cc). More than 4 channels, and
// planar int16 / float32 color (which OpenCV does not reduce contiguous either), are refused:
// 8-bit images are gray or RGB, and such TIFFs keep their samples when built typed.
Status DecodeOpenCv(std::span<const uint8_t> bytes, int channels, cv::Mat* out) {
  TiffInfo tiff;
  if (SniffImageFormat(bytes) == ImageFormat::kTiff) {
    DSPIPE_RETURN_IF_ERROR(ReadTiffInfo(bytes, &tiff));
    DSPIPE_RETURN_IF_ERROR(CheckTiffLayout(tiff));
    if (tiff.ours && tiff.samples > 4) {
      return Status::BadInput("a " + std::to_string(tiff.samples) + "-channel " +
                              SampleTypeName(tiff.type) +
                              " TIFF, read here as 8-bit gray or RGB; dspipe keeps all the "
                              "channels of 16-bit and float32 TIFFs (a typed build), not of "
                              "8-bit ones");
    }
    if (tiff.ours && tiff.planar && tiff.samples > 1 && tiff.bits > 8) {
      if (tiff.type != SampleType::kUint16) {
        return Status::BadInput(std::string("a planar ") + SampleTypeName(tiff.type) +
                                " color TIFF cannot be reduced to 8 bits; build it typed "
                                "(keeps its samples) instead");
      }
      return DecodeTiffAs8(bytes, channels, out);
    }
  }
  cv::Mat raw;
  if (Status s = Imdecode(bytes, cv::IMREAD_COLOR, &raw); !s.ok()) {
    if (tiff.ours && tiff.bits == 8) return DecodeTiffAs8(bytes, channels, out);
    return s;
  }
  cv::cvtColor(raw, *out, channels == 1 ? cv::COLOR_BGR2GRAY : cv::COLOR_BGR2RGB);
  return Status::OK();
}

// The fast path (png_fast.h) for a PNG ChoosePngDecoder routed there; same outputs as the
// libspng path below.
Status DecodePngFastTo(std::span<const uint8_t> bytes, const PngHeader& hdr, int channels,
                       cv::Mat* out, PngAlphaScan* alpha = nullptr) {
  DSPIPE_RETURN_IF_ERROR(CheckImageSize("PNG header", hdr.width, hdr.height));
  const int h = static_cast<int>(hdr.height), w = static_cast<int>(hdr.width);
  if (channels == 1 && hdr.channels == 1) {
    FitMat(h, w, CV_8UC1, out);
    return DecodePngFast(bytes, hdr, 1, out->data);
  }
  cv::Mat rgb;
  if (channels == 3) FitMat(h, w, CV_8UC3, out);
  cv::Mat& dst = channels == 3 ? *out : rgb;
  if (channels != 3) dst.create(h, w, CV_8UC3);
  PngFastOptions options;
  options.alpha = alpha;
  DSPIPE_RETURN_IF_ERROR(DecodePngFast(bytes, hdr, 3, dst.data, options));
  if (channels == 1) cv::cvtColor(dst, *out, cv::COLOR_RGB2GRAY);
  return Status::OK();
}

Status DecodePngTo(std::span<const uint8_t> bytes, int channels, cv::Mat* out) {
  if (const PngRoute route = ChoosePngDecoder(bytes); route.decoder == PngDecoder::kFast) {
    return DecodePngFastTo(bytes, route.header, channels, out);
  }
  SpngCtx c;
  spng_ihdr ihdr;
  DSPIPE_RETURN_IF_ERROR(OpenPng(bytes, &c, &ihdr));
  const bool gray_src = ihdr.color_type == SPNG_COLOR_TYPE_GRAYSCALE && ihdr.bit_depth <= 8;
  const int fmt = (channels == 1 && gray_src) ? SPNG_FMT_G8 : SPNG_FMT_RGB8;
  const int h = static_cast<int>(ihdr.height), w = static_cast<int>(ihdr.width);
  const int type = fmt == SPNG_FMT_G8 ? CV_8UC1 : CV_8UC3;
  // Decode straight into *out when it already has the right size and type.
  cv::Mat dst;
  if (out->rows == h && out->cols == w && out->type() == type && out->isContinuous()) {
    dst = *out;
  } else {
    dst.create(h, w, type);
  }
  size_t size = 0;
  int rc = spng_decoded_image_size(c.ctx, fmt, &size);
  if (rc != 0) return SpngError("size", rc);
  if (size != dst.total() * dst.elemSize()) return Status::Internal("spng size mismatch");
  rc = spng_decode_image(c.ctx, dst.data, size, fmt, 0);
  if (rc != 0) return SpngError("decode", rc);
  if (channels == 1 && type == CV_8UC3) {
    cv::cvtColor(dst, *out, cv::COLOR_RGB2GRAY);
  } else {
    *out = dst;
  }
  return Status::OK();
}

// JPEG shape from its frame header and EXIF orientation (jpeg_decode.h): orientations 5-8
// rotate by 90 degrees, which the decoder applies, so the decoded sides are swapped.
Status ProbeJpeg(std::span<const uint8_t> bytes, ImageProbe* out) {
  JpegInfo info;
  DSPIPE_RETURN_IF_ERROR(ReadJpegInfo(bytes, &info));
  out->width = info.oriented_width();
  out->height = info.oriented_height();
  out->channels = info.components == 1 ? 1 : 3;
  return Status::OK();
}

// The whole JPEG at full size into *out (reused when it fits), as cv::imdecode would.
Status DecodeJpegWhole(std::span<const uint8_t> bytes, int channels, cv::Mat* out) {
  JpegDecodeOptions o;
  o.channels = channels;
  o.region = false;
  JpegDecodeResult r;
  return DecodeJpeg(bytes, o, out, &r);
}

}  // namespace

Status CheckLoaderDepth(const ImageProbe& probe) {
  if (probe.bit_depth <= 8) return Status::OK();
  return Status::BadInput(
      "a " + std::to_string(probe.bit_depth) + "-bit " + (probe.floating ? "float " : "") +
      "image, and this source is read as 8-bit pixels (only the high byte "
      "would be kept); build a dspipe dataset from it, which keeps the "
      "samples as they are (the loader gives them as float32), or pass " +
      Opt("BuildOptions::depth", "8") + " to that build to reduce it knowingly");
}

Status CheckImageSize(const char* what, uint64_t width, uint64_t height) {
  const DecodeLimits l = GetDecodeLimits();
  const std::string dims = std::to_string(width) + "x" + std::to_string(height);
  if (width > l.max_side || height > l.max_side) {
    return Status::BadInput(std::string(what) + " declares " + dims + " pixels; the limit is " +
                            std::to_string(l.max_side) +
                            " per side (raise it with --max-image-side, or "
                            "DecodeLimits::max_side)");
  }
  if (width * height > l.max_pixels) {
    return Status::BadInput(std::string(what) + " declares " + dims + " pixels; the limit is " +
                            std::to_string(l.max_pixels) +
                            " pixels (raise it with --max-image-pixels, or "
                            "DecodeLimits::max_pixels)");
  }
  return Status::OK();
}

Status Probe(std::span<const uint8_t> bytes, ImageProbe* out) {
  try {
    *out = ImageProbe{};
    out->codec = SniffCodec(bytes);
    if (out->codec == Codec::kNone) return Status::BadInput("empty file (0 bytes)");
    if (out->codec == Codec::kPng) {
      SpngCtx c;
      spng_ihdr ihdr;
      DSPIPE_RETURN_IF_ERROR(OpenPng(bytes, &c, &ihdr));
      if (!HasIend(bytes)) return Status::BadInput("truncated PNG (no IEND chunk at the end)");
      out->width = static_cast<int>(ihdr.width);
      out->height = static_cast<int>(ihdr.height);
      out->bit_depth = ihdr.bit_depth;
      out->palette = ihdr.color_type == SPNG_COLOR_TYPE_INDEXED;
      switch (ihdr.color_type) {
        case SPNG_COLOR_TYPE_GRAYSCALE:
          out->channels = 1;
          break;
        case SPNG_COLOR_TYPE_GRAYSCALE_ALPHA:
          out->channels = 2;
          break;
        case SPNG_COLOR_TYPE_TRUECOLOR:
          out->channels = 3;
          break;
        case SPNG_COLOR_TYPE_INDEXED:
          out->channels = 3;
          break;
        default:
          out->channels = 4;
          break;
      }
      return Status::OK();
    }
    if (out->codec == Codec::kJpeg) {
      if (!HasJpegEoi(bytes)) return Status::BadInput("truncated JPEG (no end-of-image marker)");
      return ProbeJpeg(bytes, out);
    }
    // TIFF: libtiff (tiff.h) for the files it reads: all the channels as stored (1..16),
    // planar ones too; decoded whole, as OpenCV decodes the other formats below, so an
    // incomplete file is refused here. Multi-page TIFFs are refused, whoever reads them.
    if (SniffImageFormat(bytes) == ImageFormat::kTiff) {
      cv::Mat img;
      TiffInfo info;
      DSPIPE_RETURN_IF_ERROR(TryDecodeTiff(bytes, &img, &info));
      if (info.ours) {
        out->width = img.cols;
        out->height = img.rows;
        out->channels = img.channels();
        out->bit_depth = info.bits;
        out->floating = info.type == SampleType::kFloat32;
        out->is_signed = info.type == SampleType::kInt16;
        return Status::OK();
      }
    }
    // Other formats: decode to learn the shape and the sample type. ANYDEPTH | ANYCOLOR keeps
    // both (a 16-bit or float TIFF stays so; gray stays 1 channel) and, unlike UNCHANGED,
    // applies the EXIF orientation as DecodeImage's IMREAD_COLOR does, so the sizes agree.
    cv::Mat img;
    DSPIPE_RETURN_IF_ERROR(Imdecode(bytes, cv::IMREAD_ANYDEPTH | cv::IMREAD_ANYCOLOR, &img));
    out->width = img.cols;
    out->height = img.rows;
    out->channels = img.channels() <= 2 ? img.channels() : 3;
    out->bit_depth = static_cast<int>(img.elemSize1()) * 8;
    out->floating = img.depth() == CV_16F || img.depth() == CV_32F || img.depth() == CV_64F;
    out->is_signed = img.depth() == CV_8S || img.depth() == CV_16S || img.depth() == CV_32S;
    return Status::OK();
  } catch (const std::exception& e) {
    return FromException("Probe", e);
  }
}

Status DecodeImage(std::span<const uint8_t> bytes, int channels, cv::Mat* out) {
  try {
    if (channels != 1 && channels != 3) return Status::InvalidArgument("channels must be 1 or 3");
    if (bytes.empty()) return Status::BadInput("empty file (0 bytes)");
    switch (SniffCodec(bytes)) {
      case Codec::kPng:
        return DecodePngTo(bytes, channels, out);
      case Codec::kJpeg:
        return DecodeJpegWhole(bytes, channels, out);
      default:
        return DecodeOpenCv(bytes, channels, out);
    }
  } catch (const std::exception& e) {
    return FromException("DecodeImage", e);
  }
}

Status DecodeImageInto(std::span<const uint8_t> bytes, int channels, int height, int width,
                       uint8_t* dst) {
  try {
    cv::Mat m(height, width, channels == 1 ? CV_8UC1 : CV_8UC3, dst);
    cv::Mat decoded = m;  // shares dst: the PNG path decodes in place when the size matches
    DSPIPE_RETURN_IF_ERROR(DecodeImage(bytes, channels, &decoded));
    if (decoded.rows != height || decoded.cols != width) {
      return Status::Corruption("decoded image is " + std::to_string(decoded.rows) + "x" +
                                std::to_string(decoded.cols) + " (height x width), header says " +
                                std::to_string(height) + "x" + std::to_string(width));
    }
    if (decoded.data != dst) decoded.copyTo(m);
    return Status::OK();
  } catch (const std::exception& e) {
    return FromException("DecodeImageInto", e);
  }
}

Status DecodeMask(std::span<const uint8_t> bytes, cv::Mat* out, bool wide) {
  try {
    if (bytes.empty()) return Status::BadInput("empty file (0 bytes)");
    if (SniffCodec(bytes) == Codec::kPng) {
      // 8-bit gray masks (the common case) on the fast path: values are class ids already.
      if (const PngRoute route = ChoosePngDecoder(bytes);
          route.decoder == PngDecoder::kFast && route.header.color_type == 0) {
        return DecodePngFastTo(bytes, route.header, 1, out);
      }
      SpngCtx c;
      spng_ihdr ihdr;
      DSPIPE_RETURN_IF_ERROR(OpenPng(bytes, &c, &ihdr));
      const int h = static_cast<int>(ihdr.height), w = static_cast<int>(ihdr.width);
      if (ihdr.color_type == SPNG_COLOR_TYPE_GRAYSCALE && ihdr.bit_depth == 8) {
        // The common case: values are class ids already. Decode in place when *out fits.
        if (!(out->rows == h && out->cols == w && out->type() == CV_8UC1 && out->isContinuous())) {
          out->create(h, w, CV_8UC1);
        }
        const int rc = spng_decode_image(c.ctx, out->data, out->total(), SPNG_FMT_G8, 0);
        if (rc != 0) return SpngError("decode", rc);
        return Status::OK();
      }
      if (ihdr.color_type == SPNG_COLOR_TYPE_INDEXED) {
        // Palette masks (Pascal VOC style): the palette index is the class id.
        size_t size = 0;
        int rc = spng_decoded_image_size(c.ctx, SPNG_FMT_PNG, &size);
        if (rc != 0) return SpngError("size", rc);
        std::vector<uint8_t> packed(size);
        rc = spng_decode_image(c.ctx, packed.data(), size, SPNG_FMT_PNG, 0);
        if (rc != 0) return SpngError("decode", rc);
        out->create(h, w, CV_8UC1);
        const int bits = ihdr.bit_depth;
        const size_t row_bytes = size / static_cast<size_t>(h);
        for (int y = 0; y < h; ++y) {
          const uint8_t* row = packed.data() + static_cast<size_t>(y) * row_bytes;
          uint8_t* o = out->ptr<uint8_t>(y);
          for (int x = 0; x < w; ++x) {
            const int bit = x * bits;
            o[x] = static_cast<uint8_t>((row[bit / 8] >> (8 - bits - bit % 8)) & ((1 << bits) - 1));
          }
        }
        return Status::OK();
      }
    }
    cv::Mat raw;
    DSPIPE_RETURN_IF_ERROR(Imdecode(bytes, cv::IMREAD_UNCHANGED, &raw));
    if (raw.depth() == CV_16U && wide) {
      // Kept as it is: ids above 255 stay (instance maps); checked for one plane below.
    } else if (raw.depth() == CV_16U) {
      double mx = 0;
      cv::minMaxLoc(raw.reshape(1), nullptr, &mx);
      if (mx > 255) {
        return Status::BadInput("16-bit mask holds class id " + std::to_string(int(mx)) + " > 255");
      }
      raw.convertTo(raw, CV_8U);
    } else if (raw.depth() != CV_8U) {
      return Status::BadInput("mask pixel type is neither 8- nor 16-bit");
    }
    if (raw.channels() == 1) {
      *out = raw;
      return Status::OK();
    }
    std::vector<cv::Mat> planes;
    cv::split(raw, planes);
    const int color_planes = std::min(raw.channels(), 3);  // alpha is ignored
    for (int i = 1; i < color_planes; ++i) {
      if (cv::countNonZero(planes[i] != planes[0]) != 0) {
        return Status::BadInput("multi-channel mask (" + std::to_string(raw.channels()) +
                                " channels that differ); masks must hold one class id per pixel");
      }
    }
    *out = planes[0];
    return Status::OK();
  } catch (const std::exception& e) {
    return FromException("DecodeMask", e);
  }
}

Status SampleTypeOf(const ImageProbe& p, SampleType* out) {
  if (p.bit_depth <= 8 && !p.floating) {
    *out = SampleType::kUint8;
  } else if (p.bit_depth == 16 && !p.floating) {
    *out = p.is_signed ? SampleType::kInt16 : SampleType::kUint16;
  } else if (p.bit_depth == 32 && p.floating) {
    *out = SampleType::kFloat32;
  } else {
    return Status::BadInput(std::string("a ") + std::to_string(p.bit_depth) + "-bit " +
                            (p.floating    ? "float"
                             : p.is_signed ? "signed integer"
                                           : "integer") +
                            " image: dspipe keeps uint8, uint16, int16 and float32 samples; "
                            "convert it to one of them first");
  }
  return Status::OK();
}

int CvDepth(SampleType t) {
  switch (t) {
    case SampleType::kUint8:
      return CV_8U;
    case SampleType::kUint16:
      return CV_16U;
    case SampleType::kInt16:
      return CV_16S;
    case SampleType::kFloat32:
      return CV_32F;
  }
  return CV_8U;
}

Status DecodeTyped(std::span<const uint8_t> bytes, SampleType type, bool mask, cv::Mat* out) {
  try {
    if (bytes.empty()) return Status::BadInput("empty file (0 bytes)");
    // 16-bit PNGs (CT / MR slices, id maps; RGB(A) images, not masks): the fast path.
    if (type == SampleType::kUint16) {
      if (const PngRoute route = ChoosePng16Decoder(bytes);
          route.decoder == PngDecoder::kFast && (route.header.channels == 1 || !mask)) {
        // The header sizes the allocation: the decode limits first (a 16-bit PNG bomb).
        DSPIPE_RETURN_IF_ERROR(
            CheckImageSize("PNG header", route.header.width, route.header.height));
        FitMat(static_cast<int>(route.header.height), static_cast<int>(route.header.width),
               CV_16UC(route.header.channels), out);
        return DecodePngFast(bytes, route.header, route.header.channels, out->data);
      }
    }
    if (mask) {
      if (type != SampleType::kUint8 && type != SampleType::kUint16) {
        return Status::InvalidArgument("masks are uint8 or uint16");
      }
      DSPIPE_RETURN_IF_ERROR(DecodeMask(bytes, out, /*wide=*/true));
      if (out->depth() != CvDepth(type)) out->convertTo(*out, CvDepth(type));
      return Status::OK();
    }
    cv::Mat raw;
    // TIFF: libtiff (tiff.h) for every file it reads, whatever the channels and planar
    // configuration; the same pixels as OpenCV's for the contiguous 1/3/4-channel files OpenCV
    // reads right (tests/codec/tiff_test.cc), where OpenCV 4.6 refuses more than 4 channels
    // and misreads planar color deeper than 8 bits. The rest (palette, YCbCr, ...): OpenCV.
    if (SniffImageFormat(bytes) == ImageFormat::kTiff) {
      TiffInfo info;
      DSPIPE_RETURN_IF_ERROR(TryDecodeTiff(bytes, out, &info));
      if (info.ours) {
        if (out->depth() != CvDepth(type)) {
          return Status::BadInput(std::string("decoded samples are ") + SampleTypeName(info.type) +
                                  ", not " + SampleTypeName(type));
        }
        return Status::OK();
      }
    }
    DSPIPE_RETURN_IF_ERROR(Imdecode(bytes, cv::IMREAD_UNCHANGED, &raw));
    if (raw.depth() != CvDepth(type)) {
      return Status::BadInput(std::string("decoded samples are not ") + SampleTypeName(type));
    }
    const int c = raw.channels();
    if (c != 1 && !(type == SampleType::kUint16 && (c == 3 || c == 4))) {
      return Status::BadInput(std::to_string(c) + " channels of " + SampleTypeName(type) +
                              ": dspipe reads 1 channel of int16 / float32 and 1, 3 or 4 of "
                              "uint16 for now");
    }
    if (c == 1) {
      *out = raw;
    } else {
      cv::cvtColor(raw, *out, c == 3 ? cv::COLOR_BGR2RGB : cv::COLOR_BGRA2RGBA);
    }
    return Status::OK();
  } catch (const std::exception& e) {
    return FromException("DecodeTyped", e);
  }
}

Status EncodeTypedPng(const cv::Mat& image, std::string* out) {
  const int c = image.channels();
  if (image.depth() != CV_16U || (c != 1 && c != 3 && c != 4)) {
    return Status::InvalidArgument("EncodeTypedPng takes uint16 images of 1, 3 or 4 channels");
  }
  try {
    cv::Mat bgr;
    if (c == 3) cv::cvtColor(image, bgr, cv::COLOR_RGB2BGR);
    if (c == 4) cv::cvtColor(image, bgr, cv::COLOR_RGBA2BGRA);
    std::vector<uint8_t> buf;
    if (!cv::imencode(".png", c == 1 ? image : bgr, buf, {cv::IMWRITE_PNG_COMPRESSION, 1})) {
      return Status::Internal("PNG encode failed");
    }
    out->assign(reinterpret_cast<const char*>(buf.data()), buf.size());
    return Status::OK();
  } catch (const std::exception& e) {
    return FromException("EncodeTypedPng", e);
  }
}

bool IsPlainGray8Png(std::span<const uint8_t> bytes) {
  if (SniffCodec(bytes) != Codec::kPng) return false;
  SpngCtx c;
  spng_ihdr ihdr;
  if (!OpenPng(bytes, &c, &ihdr).ok()) return false;
  return ihdr.color_type == SPNG_COLOR_TYPE_GRAYSCALE && ihdr.bit_depth == 8;
}

namespace {

// Encodes an RGB (or gray) image with cv::imencode (which wants BGR); what = "PNG" / "JPEG",
// fn the caller's name for exceptions ("EncodePng").
Status Imencode(const char* fn, const char* ext, const char* what, const cv::Mat& image,
                const std::vector<int>& params, std::string* out) {
  try {
    cv::Mat bgr;
    const cv::Mat* src = &image;
    if (image.channels() == 3) {
      cv::cvtColor(image, bgr, cv::COLOR_RGB2BGR);
      src = &bgr;
    }
    std::vector<uint8_t> buf;
    try {
      if (!cv::imencode(ext, *src, buf, params)) {
        return Status::Internal(std::string(what) + " encode failed");
      }
    } catch (const cv::Exception& e) {
      return Status::Internal(std::string(what) + " encode failed: " + e.what());
    }
    out->assign(reinterpret_cast<const char*>(buf.data()), buf.size());
    return Status::OK();
  } catch (const std::exception& e) {
    return FromException(fn, e);
  }
}

}  // namespace

Status EncodePng(const cv::Mat& image, int compression, std::string* out) {
  return Imencode("EncodePng", ".png", "PNG", image, {cv::IMWRITE_PNG_COMPRESSION, compression},
                  out);
}

Status EncodeJpeg(const cv::Mat& image, int quality, std::string* out, bool restarts) {
  if (quality < 1 || quality > 100) return Status::InvalidArgument("JPEG quality must be 1..100");
  // OpenCV's libjpeg defaults: 4:2:0 chroma, baseline, standard tables scaled to quality.
  return Imencode(
      "EncodeJpeg", ".jpg", "JPEG", image,
      {cv::IMWRITE_JPEG_QUALITY, quality, cv::IMWRITE_JPEG_RST_INTERVAL, restarts ? 1 : 0}, out);
}

Status CompressZstd(std::span<const uint8_t> raw, int level, std::string* out) {
  out->resize(ZSTD_compressBound(raw.size()));
  const size_t n = ZSTD_compress(out->data(), out->size(), raw.data(), raw.size(), level);
  if (ZSTD_isError(n)) return Status::Internal(std::string("zstd: ") + ZSTD_getErrorName(n));
  out->resize(n);
  return Status::OK();
}

Status DecompressZstd(std::span<const uint8_t> compressed, uint8_t* dst, size_t dst_size) {
  const unsigned long long content = ZSTD_getFrameContentSize(compressed.data(), compressed.size());
  if (content == ZSTD_CONTENTSIZE_ERROR) return Status::Corruption("not a zstd frame");
  if (content != ZSTD_CONTENTSIZE_UNKNOWN) {
    const DecodeLimits l = GetDecodeLimits();
    const uint64_t max_bytes = l.max_pixels * 4;  // the largest image, 4 bytes per pixel
    if (content > max_bytes) {
      return Status::Corruption("zstd frame claims " + std::to_string(content) +
                                " bytes; the limit is " + std::to_string(max_bytes) +
                                " (4 bytes per pixel of --max-image-pixels, or "
                                "DecodeLimits::max_pixels)");
    }
  }
  if (content != ZSTD_CONTENTSIZE_UNKNOWN && content != dst_size) {
    return Status::Corruption("zstd frame holds " + std::to_string(content) + " bytes, expected " +
                              std::to_string(dst_size));
  }
  // One decompression context per thread: ZSTD_decompress would allocate one per call.
  thread_local std::unique_ptr<ZSTD_DCtx, size_t (*)(ZSTD_DCtx*)> dctx(ZSTD_createDCtx(),
                                                                       ZSTD_freeDCtx);
  const size_t n =
      ZSTD_decompressDCtx(dctx.get(), dst, dst_size, compressed.data(), compressed.size());
  if (ZSTD_isError(n)) return Status::Corruption(std::string("zstd: ") + ZSTD_getErrorName(n));
  if (n != dst_size) {
    return Status::Corruption("zstd frame decompressed to " + std::to_string(n) +
                              " bytes, expected " + std::to_string(dst_size));
  }
  return Status::OK();
}

Status FindTransparency(std::span<const uint8_t> bytes, bool* opaque, int* row, int* col) {
  *opaque = true;
  *row = *col = 0;
  try {
    cv::Mat raw;
    DSPIPE_RETURN_IF_ERROR(Imdecode(bytes, cv::IMREAD_UNCHANGED, &raw));
    if (raw.channels() != 4) return Status::OK();  // OpenCV gives gray+alpha as BGRA too
    cv::Mat alpha;
    cv::extractChannel(raw, alpha, 3);
    const double full = raw.depth() == CV_16U ? 65535.0 : 255.0;
    const cv::Mat below = alpha < full;
    if (cv::countNonZero(below) == 0) return Status::OK();
    for (int y = 0; y < below.rows; ++y) {
      const uint8_t* r = below.ptr<uint8_t>(y);
      for (int x = 0; x < below.cols; ++x) {
        if (r[x] != 0) {
          *opaque = false;
          *row = y, *col = x;
          return Status::OK();
        }
      }
    }
    return Status::OK();
  } catch (const std::exception& e) {
    return FromException("FindTransparency", e);
  }
}

Status DecodeImageFindingTransparency(std::span<const uint8_t> bytes, int channels, cv::Mat* out,
                                      bool* opaque, int* row, int* col) {
  try {
    if (channels == 1 || channels == 3) {
      if (const PngRoute route = ChoosePngDecoder(bytes); route.decoder == PngDecoder::kFast) {
        PngAlphaScan scan;
        DSPIPE_RETURN_IF_ERROR(DecodePngFastTo(bytes, route.header, channels, out, &scan));
        *opaque = scan.opaque;
        *row = static_cast<int>(scan.row);
        *col = static_cast<int>(scan.col);
        return Status::OK();
      }
    }
    DSPIPE_RETURN_IF_ERROR(FindTransparency(bytes, opaque, row, col));
    return DecodeImage(bytes, channels, out);
  } catch (const std::exception& e) {
    return FromException("DecodeImageFindingTransparency", e);
  }
}

}  // namespace dspipe::codec
