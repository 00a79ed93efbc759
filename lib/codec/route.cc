// SPDX-License-Identifier: Apache-2.0
// The decode router (image.h, "The decode router"): one entry point for every record payload,
// whatever its codec, given the part of the image the sample keeps and the size it is resized
// to. Raw and raw+zstd records are copied / inflated, PNGs go to the fast path (fused with the
// flip and the row normalizer when decoded straight into the batch) or libspng, JPEGs to the
// region + DCT-scaled decoder (jpeg_decode.h), masks to DecodeMask, the rest to OpenCV.
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <string>

#include "codec/image.h"
#include "codec/jpeg_decode.h"
#include "codec/png_fast.h"

namespace dspipe::codec {
namespace {

std::atomic<bool>& RegionFlag() {
  static std::atomic<bool> on{[] {
    const char* env = std::getenv("DSPIPE_JPEG_REGION");
    return !(env != nullptr && std::strcmp(env, "0") == 0);
  }()};
  return on;
}

std::atomic<bool>& PngRegionFlag() {
  static std::atomic<bool> on{[] {
    const char* env = std::getenv("DSPIPE_PNG_REGION");
    return !(env != nullptr && std::strcmp(env, "0") == 0);
  }()};
  return on;
}

// Record payloads were validated when they were written: a decoder's complaint is corruption.
Status AsCorruption(const Status& s) {
  return s.code() == Status::Code::kBadInput ? Status::Corruption(s.message()) : s;
}

// The fused PNG path (png_fast.h): true when it took the payload (then *s is its status).
bool TryFusedPng(const DecodeRequest& q, Status* s) {
  const PngRoute route = ChoosePngDecoder(q.payload);
  if (route.decoder != PngDecoder::kFast || route.header.width != static_cast<uint32_t>(q.width) ||
      route.header.height != static_cast<uint32_t>(q.height) ||
      (q.channels == 1 && route.header.color_type != 0)) {
    return false;
  }
  PngFastOptions options;
  options.mirror = q.mirror;
  options.sink = q.sink;
  *s = AsCorruption(DecodePngFast(q.payload, route.header, q.channels, q.dst, options));
  return true;
}

// An 8-bit PNG image payload's region q.crop_* (png_fast.h PngFastOptions::crop_*) into the
// scratch: true when the fast path takes it (then *s is its status), false to decode whole (a
// PNG libspng decodes, 16-bit, gray wanted from color).
bool TryPngRegion(const DecodeRequest& q, cv::Mat* scratch, Status* s, DecodedImage* out) {
  const PngRoute route = ChoosePngDecoder(q.payload);
  const PngHeader& h = route.header;
  if (route.decoder != PngDecoder::kFast || (q.channels == 1 && h.color_type != 0) ||
      !PngRegionFits(h, q.crop_x, q.crop_y, q.crop_w, q.crop_h)) {
    return false;
  }
  *s = CheckImageSize("PNG header", h.width, h.height);
  if (s->ok()) {
    FitMat(q.crop_h, q.crop_w, CV_8UC(q.channels), scratch);
    PngFastOptions o;
    o.crop_x = static_cast<uint32_t>(q.crop_x);
    o.crop_y = static_cast<uint32_t>(q.crop_y);
    o.crop_w = static_cast<uint32_t>(q.crop_w);
    o.crop_h = static_cast<uint32_t>(q.crop_h);
    *s = DecodePngFast(q.payload, h, q.channels, scratch->data, o);
  }
  *s = AsCorruption(*s);
  out->image = *scratch;
  out->source_width = static_cast<int>(h.width);
  out->source_height = static_cast<int>(h.height);
  out->crop = RectF{0, 0, static_cast<double>(q.crop_w), static_cast<double>(q.crop_h)};
  out->path = DecodePath::kRoi;
  return true;
}

// A JPEG image payload: region + DCT scale as the request allows (jpeg_decode.h), into *image
// (in place when it is dst's header, else over *scratch's memory).
Status RouteJpeg(const DecodeRequest& q, cv::Mat* image, cv::Mat* scratch, DecodedImage* out) {
  const bool cropped = q.crop_w > 0 && q.crop_h > 0;
  const bool region = JpegRegionDecode();
  JpegDecodeOptions o;
  o.channels = q.channels;
  o.region = region;
  if (cropped) {
    o.crop_x = q.crop_x;
    o.crop_y = q.crop_y;
    o.crop_w = q.crop_w;
    o.crop_h = q.crop_h;
  }
  o.out_width = q.out_width;
  o.out_height = q.out_height;
  o.scales = region ? GetJpegScales() : JpegScales::kNone;
  JpegDecodeResult r;
  DSPIPE_RETURN_IF_ERROR(AsCorruption(DecodeJpeg(q.payload, o, image, &r, scratch)));
  out->crop = r.crop;
  out->source_width = r.source_width;
  out->source_height = r.source_height;
  const bool part = cropped && (q.crop_w < r.source_width || q.crop_h < r.source_height);
  if (region && part && r.progressive && !r.region) {
    out->path = DecodePath::kProgressive;
  } else if (r.region) {
    out->path = r.scale_num < 8 ? DecodePath::kRoiScaled : DecodePath::kRoi;
  } else {
    out->path = r.scale_num < 8 ? DecodePath::kScaled : DecodePath::kFull;
  }
  return Status::OK();
}

// A payload of another sample type than uint8 (DecodeRequest::type): whole, into the scratch.
Status DecodeTypedPayload(const DecodeRequest& q, cv::Mat* scratch, DecodedImage* out) {
  const bool sized = q.height > 0 && q.width > 0;
  if (q.dst != nullptr || q.fuse || q.crop_w > 0 || q.crop_h > 0 || q.out_height > 0 ||
      q.out_width > 0 || !sized || (q.is_mask && q.channels != 1) || q.channels < 1 ||
      q.channels > kMaxChannels) {
    return Status::InvalidArgument(
        "DecodePayload: a typed payload is decoded whole at its stored size, into the scratch");
  }
  const int type = CV_MAKETYPE(CvDepth(q.type), q.channels);
  Status s;
  if (q.codec == Codec::kRaw || q.codec == Codec::kRawZstd) {
    FitMat(q.height, q.width, type, scratch);
    const size_t n = scratch->total() * scratch->elemSize();
    if (q.codec == Codec::kRawZstd) {
      s = DecompressZstd(q.payload, scratch->data, n);
    } else if (q.payload.size() != n) {
      s = Status::Corruption("raw payload is " + std::to_string(q.payload.size()) +
                             " bytes, expected " + std::to_string(n));
    } else {
      std::memcpy(scratch->data, q.payload.data(), n);
    }
    out->path = DecodePath::kRaw;
  } else if (q.codec == Codec::kNone) {
    return Status::Corruption("record has no payload to decode");
  } else {
    s = AsCorruption(DecodeTyped(q.payload, q.type, q.is_mask, scratch));
    if (s.ok() && scratch->type() != type) {
      s = Status::Corruption(std::string("decoded ") + std::to_string(scratch->channels()) +
                             " channels of " + SampleTypeName(q.type) + ", the record says " +
                             std::to_string(q.channels));
    }
  }
  if (!s.ok()) return s;
  if (scratch->rows != q.height || scratch->cols != q.width) {
    return Status::Corruption("decoded image is " + std::to_string(scratch->rows) + "x" +
                              std::to_string(scratch->cols) + " (height x width), header says " +
                              std::to_string(q.height) + "x" + std::to_string(q.width));
  }
  out->image = *scratch;
  out->source_height = q.height;
  out->source_width = q.width;
  out->crop = RectF{0, 0, static_cast<double>(q.width), static_cast<double>(q.height)};
  return Status::OK();
}

}  // namespace

void SetJpegRegionDecode(bool enabled) { RegionFlag().store(enabled); }
bool JpegRegionDecode() { return RegionFlag().load(std::memory_order_relaxed); }
void SetPngRegionDecode(bool enabled) { PngRegionFlag().store(enabled); }
bool PngRegionDecode() { return PngRegionFlag().load(std::memory_order_relaxed); }

Status DecodePayload(const DecodeRequest& q, cv::Mat* scratch, DecodedImage* out) {
  try {
    *out = DecodedImage{};
    if (IsTyped(q.type, q.channels)) {
      if (q.height > 0 && q.width > 0) {  // the header sizes the allocation: limits first
        const Status fits = CheckImageSize("record header", static_cast<uint64_t>(q.width),
                                           static_cast<uint64_t>(q.height));
        if (!fits.ok()) return Status::Corruption(fits.message());
      }
      return DecodeTypedPayload(q, scratch, out);
    }
    if (q.channels != 1 && q.channels != 3 &&
        !(q.codec == Codec::kRaw || q.codec == Codec::kRawZstd)) {
      return Status::InvalidArgument("channels must be 1 or 3");
    }
    if (q.is_mask && q.channels != 1) return Status::InvalidArgument("masks have one channel");
    const bool sized = q.height > 0 && q.width > 0;
    const bool cropped = q.crop_w > 0 && q.crop_h > 0;
    if (q.dst != nullptr && (!sized || cropped || q.out_height > 0 || q.out_width > 0)) {
      return Status::InvalidArgument("DecodePayload: dst takes the whole image at its stored size");
    }
    if (sized) {
      // The record header sizes the allocation: hold it to the decode limits first.
      const Status fits = CheckImageSize("record header", static_cast<uint64_t>(q.width),
                                         static_cast<uint64_t>(q.height));
      if (!fits.ok()) return Status::Corruption(fits.message());
    }
    // Where the pixels go: dst, else the scratch. `image` is the header over them.
    cv::Mat image;
    if (q.dst != nullptr) image = cv::Mat(q.height, q.width, CV_8UC(q.channels), q.dst);
    Status s;
    switch (q.codec) {
      case Codec::kRaw:
      case Codec::kRawZstd: {
        if (!sized) return Status::Corruption("raw record without a size");
        const size_t n = static_cast<size_t>(q.height) * q.width * q.channels;
        if (q.dst == nullptr) {
          FitMat(q.height, q.width, CV_8UC(q.channels), scratch);
          image = *scratch;
        }
        if (q.codec == Codec::kRawZstd) {
          s = DecompressZstd(q.payload, image.data, n);
        } else if (q.payload.size() != n) {
          s = Status::Corruption("raw payload is " + std::to_string(q.payload.size()) +
                                 " bytes, expected " + std::to_string(n));
        } else {
          std::memcpy(image.data, q.payload.data(), n);
        }
        out->path = DecodePath::kRaw;
        break;
      }
      case Codec::kPng:
      case Codec::kJpeg:
      case Codec::kEncoded: {
        const Codec sniffed = SniffCodec(q.payload);
        if (q.fuse && q.dst != nullptr && sniffed == Codec::kPng && TryFusedPng(q, &s)) {
          out->path = DecodePath::kFused;
          out->mirrored = q.mirror;
        } else if (sniffed == Codec::kPng && cropped && q.dst == nullptr && !q.is_mask &&
                   PngRegionDecode() && TryPngRegion(q, scratch, &s, out)) {
          image = out->image;
        } else if (sniffed == Codec::kJpeg && !q.is_mask) {
          s = RouteJpeg(q, &image, scratch, out);
        } else {
          // Whole-image decoders: into dst's header when it fits (they decode in place then),
          // else into the scratch.
          cv::Mat* into = q.dst != nullptr ? &image : scratch;
          s = AsCorruption(q.is_mask ? DecodeMask(q.payload, into)
                                     : DecodeImage(q.payload, q.channels, into));
          image = *into;
        }
        break;
      }
      case Codec::kNone:
        return Status::Corruption("record has no payload to decode");
    }
    if (!s.ok()) return s;
    if (out->source_width == 0) {  // decoded whole
      out->source_width = image.cols;
      out->source_height = image.rows;
      out->crop =
          cropped ? RectF{static_cast<double>(q.crop_x), static_cast<double>(q.crop_y),
                          static_cast<double>(q.crop_w), static_cast<double>(q.crop_h)}
                  : RectF{0, 0, static_cast<double>(image.cols), static_cast<double>(image.rows)};
    }
    if (sized && (out->source_width != q.width || out->source_height != q.height)) {
      return Status::Corruption("decoded image is " + std::to_string(out->source_height) + "x" +
                                std::to_string(out->source_width) +
                                " (height x width), header says " + std::to_string(q.height) + "x" +
                                std::to_string(q.width));
    }
    if (q.dst != nullptr && image.data != q.dst) {
      // A decoder that could not write in place (a conversion on the way): copy into dst.
      cv::Mat dst(q.height, q.width, CV_8UC(q.channels), q.dst);
      if (image.type() != dst.type()) return Status::Internal("decoded type differs from dst");
      image.copyTo(dst);
      image = dst;
    }
    out->image = image;
    return Status::OK();
  } catch (const std::exception& e) {
    return Status::BadInput(std::string("DecodePayload: ") + e.what());
  }
}

Status DecodePayloadInto(Codec codec, std::span<const uint8_t> payload, int channels, int height,
                         int width, uint8_t* dst, bool is_mask) {
  DecodeRequest q;
  q.codec = codec;
  q.payload = payload;
  q.channels = channels;
  q.is_mask = is_mask;
  q.height = height;
  q.width = width;
  q.dst = dst;
  cv::Mat unused;
  DecodedImage d;
  return DecodePayload(q, &unused, &d);
}

bool PeekImageSize(std::span<const uint8_t> bytes, int* height, int* width) {
  const Codec codec = SniffCodec(bytes);
  ImageProbe probe;
  if ((codec != Codec::kPng && codec != Codec::kJpeg) || !Probe(bytes, &probe).ok()) return false;
  *height = probe.height;
  *width = probe.width;
  return true;
}

}  // namespace dspipe::codec
