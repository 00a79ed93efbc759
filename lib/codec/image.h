// Image and mask coding: cheap header probes, decode (into a Mat or straight into a caller's
// buffer), PNG encode, and zstd for raw records. Internal to dspipe (not installed).
//
// Pixel conventions everywhere in dspipe: uint8, row-major HWC, RGB order (never BGR), masks one
// channel of class ids. 16-bit images are reduced to 8 bits (the high byte, v >> 8, as
// cv::imread does), alpha is dropped, palette images are expanded, and JPEG EXIF orientation is
// applied. All functions are thread-safe.
#pragma once

#include <cstdint>
#include <span>
#include <string>

#include <opencv2/core.hpp>

#include "codec/png_fast.h"
#include "dspipe/format.h"
#include "dspipe/status.h"

namespace dspipe::codec {

// What a file says about itself without decoding pixels.
struct ImageProbe {
  Codec codec = Codec::kNone;  // kPng, kJpeg or kEncoded
  int width = 0;               // after EXIF orientation for JPEG
  int height = 0;
  int channels = 0;            // channels as stored: 1 gray, 2 gray+alpha, 3 RGB, 4 RGBA
  int bit_depth = 8;
  bool palette = false;        // PNG color type 3
};

// dspipe::SniffCodec (format.h): kPng, kJpeg, kEncoded or kNone from the magic bytes.
using ::dspipe::SniffCodec;

// Reads dimensions and checks the file is complete (PNG: signature, IHDR and a final IEND
// chunk; JPEG: the frame header, EXIF orientation and the EOI marker; others: full decode). Errors are
// kBadInput; the message is the reason only — the caller prepends the file name.
Status Probe(std::span<const uint8_t> bytes, ImageProbe* out);
// BadInput when width x height exceeds the process's DecodeLimits (dspipe/limits.h); the message
// starts with `what` ("PNG header") and names the limit and the flag that raises it.
Status CheckImageSize(const char* what, uint64_t width, uint64_t height);

// Decodes to an 8-bit image with `channels` (1 or 3, RGB). *out is (re)allocated as needed.
Status DecodeImage(std::span<const uint8_t> bytes, int channels, cv::Mat* out);

// Decodes straight into dst (height*width*channels bytes, row-major, RGB). Fails with
// kCorruption if the decoded size differs from height x width.
Status DecodeImageInto(std::span<const uint8_t> bytes, int channels, int height, int width,
                       uint8_t* dst);

// Decodes a mask to CV_8UC1. Accepts 8/16-bit gray, and multi-channel images whose channels
// are all equal (gray stored as RGB/RGBA or a gray palette). 16-bit ids above 255 and truly
// multi-channel masks are kBadInput with the reason.
Status DecodeMask(std::span<const uint8_t> bytes, cv::Mat* out);

// True when the bytes are a PNG that decodes to 8-bit single-channel directly (no palette, no
// alpha): such masks are stored as they are; others are re-encoded.
bool IsPlainGray8Png(std::span<const uint8_t> bytes);

// PNG-encodes an 8-bit image (1 or 3 channels, RGB). compression 0..9 (default 1: fast).
Status EncodePng(const cv::Mat& image, int compression, std::string* out);

// zstd helpers for kRawZstd payloads.
Status CompressZstd(std::span<const uint8_t> raw, int level, std::string* out);
Status DecompressZstd(std::span<const uint8_t> compressed, uint8_t* dst, size_t dst_size);

// Decodes one payload of a record into dst (height*width*channels), whatever its codec.
// is_mask selects mask semantics (1 channel, class ids kept exact: DecodeMask). Failures are
// kCorruption (the record was validated when it was written); the caller adds the key.
Status DecodePayloadInto(Codec codec, std::span<const uint8_t> payload, int channels,
                         int height, int width, uint8_t* dst, bool is_mask = false);

// The loader's fused path (pipeline/sample.cc): decodes a record payload that is a PNG the fast
// path takes (png_fast.h) at exactly height x width, into dst as DecodePayloadInto does,
// mirrored left-right when `mirror`, handing each finished row to sink (may be null) while it
// is still in cache; then *fused = true. channels: 3 (any fast-path PNG), or 1 for gray PNGs
// (color type 0; for masks the only kind, as DecodeMask decodes the others differently). Any
// other payload (another codec, a PNG for libspng, another size or channel layout): nothing is
// written, *fused = false and the status is OK; the caller decodes with DecodePayloadInto.
// Errors are kCorruption with the reason (as DecodePayloadInto); dst may then be partly
// written and some rows handed to the sink.
Status DecodePayloadFused(Codec codec, std::span<const uint8_t> payload, int channels,
                          int height, int width, bool mirror, PngRowSink* sink, uint8_t* dst,
                          bool* fused);

}  // namespace dspipe::codec
