// SPDX-License-Identifier: Apache-2.0
// Image and mask coding: cheap header probes, decode (into a Mat or straight into a caller's
// buffer), PNG encode, and zstd for raw records. Internal to dspipe (not installed).
//
// Pixel conventions everywhere in dspipe: uint8, row-major HWC, RGB order (never BGR), masks one
// channel of class ids. 16-bit images are reduced to 8 bits (the high byte, v >> 8, as
// cv::imread does), alpha is dropped, palette images are expanded, and JPEG EXIF orientation is
// applied (as cv::imdecode does). All functions are thread-safe.
#pragma once

#include <cstdint>
#include <span>
#include <string>

#include <opencv2/core.hpp>

#include "codec/jpeg_decode.h"
#include "codec/png_fast.h"
#include "dspipe/format.h"
#include "dspipe/stats.h"
#include "dspipe/status.h"

namespace dspipe::codec {

// What a file says about itself without decoding pixels.
struct ImageProbe {
  Codec codec = Codec::kNone;  // kPng, kJpeg or kEncoded
  int width = 0;               // after EXIF orientation for JPEG
  int height = 0;
  int channels = 0;            // channels as stored: 1 gray, 2 gray+alpha, 3 RGB, 4 RGBA;
                               // TIFFs libtiff reads (tiff.h): 1..16
  int bit_depth = 8;           // bits per sample as stored: 1..8, 16, 32 or 64
  bool floating = false;       // float samples (a float TIFF): bit_depth 16, 32 or 64
  bool is_signed = false;      // signed integer samples (an int16 TIFF)
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

// Makes *out an h x w matrix of `type`, reusing its buffer when it already is one (so a decode
// goes straight into a caller's buffer).
inline void FitMat(int h, int w, int type, cv::Mat* out) {
  if (!(out->rows == h && out->cols == w && out->type() == type && out->isContinuous())) {
    out->create(h, w, type);
  }
}
// Plain LMDBs and dsbench's folder source are read as 8-bit pixels: OK for an image of at most
// 8 bits per sample, else BadInput "a 16-bit image, and this source is read as 8-bit pixels
// (only the high byte would be kept); ..."
// naming BuildOptions::depth; the caller puts the file or key in front (WithContext).
Status CheckLoaderDepth(const ImageProbe& probe);

// ---- Typed pixels (dspipe/format.h SampleType): images deeper than 8 bits kept as they are.

// The sample type a probed image keeps: uint8 for 8 bits or fewer, uint16 / int16 for 16-bit
// integers, float32 for 32-bit floats. BadInput naming what it is for anything else (64-bit
// floats, half floats, 32-bit integers).
Status SampleTypeOf(const ImageProbe& probe, SampleType* out);
// OpenCV's depth for a sample type: CV_8U, CV_16U, CV_16S, CV_32F.
int CvDepth(SampleType t);
// Decodes an image of `type` keeping its samples and channels (16-bit gray PNGs on the fast
// path, png_fast.h ChoosePng16Decoder; the rest with OpenCV's IMREAD_UNCHANGED: 16-bit color
// PNG, 16-bit PGM/PPM), in RGB / RGBA order; TIFF with libtiff (tiff.h: 1..16 channels as
// stored, contiguous or planar; OpenCV for palette, YCbCr, ... as before). A decode of another
// sample type, or (not a libtiff TIFF) of other than 1, 3 or 4 channels (3 or 4 only for
// uint16), is BadInput saying so. No EXIF orientation (PNG and TIFF carry none that OpenCV
// applies to them). With `mask`: one channel of class ids (uint16 kept, uint8 widened).
Status DecodeTyped(std::span<const uint8_t> bytes, SampleType type, bool mask, cv::Mat* out);
// Encodes a uint16 image (1, 3 or 4 channels, RGB order) or a uint16 mask as a PNG
// (compression 1), lossless. Other types: InvalidArgument.
Status EncodeTypedPng(const cv::Mat& image, std::string* out);

// Decodes to an 8-bit image with `channels` (1 or 3, RGB). *out is (re)allocated as needed.
Status DecodeImage(std::span<const uint8_t> bytes, int channels, cv::Mat* out);

// Decodes straight into dst (height*width*channels bytes, row-major, RGB). Fails with
// kCorruption if the decoded size differs from height x width.
Status DecodeImageInto(std::span<const uint8_t> bytes, int channels, int height, int width,
                       uint8_t* dst);

// Decodes a mask to CV_8UC1. Accepts 8/16-bit gray, and multi-channel images whose channels
// are all equal (gray stored as RGB/RGBA or a gray palette). 16-bit ids above 255 and truly
// multi-channel masks are kBadInput with the reason. With `wide`, a 16-bit mask stays CV_16UC1
// whatever its ids (the build narrows it to 8 bits itself when every id fits).
Status DecodeMask(std::span<const uint8_t> bytes, cv::Mat* out, bool wide = false);

// True when the bytes are a PNG that decodes to 8-bit single-channel directly (no palette, no
// alpha): such masks are stored as they are; others are re-encoded.
bool IsPlainGray8Png(std::span<const uint8_t> bytes);

// PNG-encodes an 8-bit image (1 or 3 channels, RGB). compression 0..9 (default 1: fast).
Status EncodePng(const cv::Mat& image, int compression, std::string* out);

// JPEG-encodes an 8-bit image (1 or 3 channels, RGB) at quality 1..100 (4:2:0, baseline);
// restarts: a restart marker after every MCU (jpeg_restart.h).
Status EncodeJpeg(const cv::Mat& image, int quality, std::string* out, bool restarts = false);

// zstd helpers for kRawZstd payloads.
Status CompressZstd(std::span<const uint8_t> raw, int level, std::string* out);
Status DecompressZstd(std::span<const uint8_t> compressed, uint8_t* dst, size_t dst_size);

// ---- The decode router: every record payload the loader (and verify) decodes goes through
// DecodePayload, whatever its codec: raw, raw+zstd, PNG (fast path or libspng), JPEG (region +
// DCT scale), the OpenCV formats. The caller says which part of the (EXIF-oriented) image the
// sample keeps and the size it will be resized to; the router decodes no more than that needs
// and says where the crop lies in what it decoded (docs/DECODE.md).

struct DecodeRequest {
  Codec codec = Codec::kNone;  // the record's codec for the payload
  std::span<const uint8_t> payload;
  // The record's sample type for the payload. Other than kUint8, the payload is decoded whole
  // into `scratch` as that type (raw: its stored pixels; encoded: DecodeTyped), channels as
  // stored (masks: 1), and crop, out size, dst and fuse must be unset.
  SampleType type = SampleType::kUint8;
  int channels = 3;      // output channels, 1 or 3 (RGB); masks: 1
  bool is_mask = false;  // mask semantics (DecodeMask: class ids kept exact; never scaled)
  // The record header's size; 0 x 0 = unknown (plain LMDBs): whatever the bytes say. When set,
  // a payload of another size is kCorruption.
  int height = 0, width = 0;
  // The part of the image the sample keeps (source pixels); crop_w or crop_h <= 0 = all of it.
  int crop_x = 0, crop_y = 0, crop_w = 0, crop_h = 0;
  // The size the crop is resized to afterwards; 0 = unknown or its own size. A JPEG is then
  // decoded at the smallest DCT scale whose crop is still at least this size.
  int out_height = 0, out_width = 0;
  // Write the whole image at its stored size straight into dst (height*width*channels bytes,
  // row-major) instead of the scratch Mat. Only with height/width set and no crop or out size.
  uint8_t* dst = nullptr;
  // With dst and `fuse`: a PNG the fast path takes (png_fast.h) at exactly height x width is
  // decoded with its rows mirrored left-right when `mirror`, each finished row handed to sink
  // (may be null) while it is still in cache (channels 3, or 1 for gray PNGs; masks: gray PNGs
  // only): DecodePath::kFused. Any other payload ignores the three: the caller flips what comes
  // back unless result.mirrored.
  bool fuse = false;
  bool mirror = false;
  PngRowSink* sink = nullptr;
};

struct DecodedImage {
  DecodePath path = DecodePath::kFull;
  // The decoded pixels: a header over dst (request.dst) or over *scratch. CV_8UC(channels),
  // except raw records, which keep their stored channel count.
  cv::Mat image;
  // The request's crop within `image`, in its pixels: whole pixels except after a DCT-scaled
  // JPEG decode (fractional, see jpeg_decode.h). The whole image when no crop was asked for.
  RectF crop;
  // The source image's full size (EXIF-oriented), whatever part of it was decoded.
  int source_height = 0, source_width = 0;
  bool mirrored = false;  // the rows were written mirrored (kFused with request.mirror)
};

// Decodes request.payload as above into request.dst or *scratch (reused when it has the size
// and type). Failures are kCorruption with the reason (the record was validated when it was
// written; the caller adds the key); request errors are kInvalidArgument. With the fused PNG
// path, dst may be partly written and some rows handed to the sink when it fails.
Status DecodePayload(const DecodeRequest& request, cv::Mat* scratch, DecodedImage* out);

// Shorthand for DecodePayload of the whole payload at its stored size into dst
// (height*width*channels, row-major, RGB), as verify and the record tests use it.
Status DecodePayloadInto(Codec codec, std::span<const uint8_t> payload, int channels,
                         int height, int width, uint8_t* dst, bool is_mask = false);

// The image's size from its header alone, EXIF-oriented (PNG IHDR, JPEG frame header);
// false for other formats and for headers that do not parse (decode to learn the size).
bool PeekImageSize(std::span<const uint8_t> bytes, int* height, int* width);

// Process-wide switch for the JPEG region decode (default on; DSPIPE_JPEG_REGION=0 at first use
// turns it off). Off, or with GetJpegScales() kNone, the router decodes JPEGs whole at full size:
// the "full-decode path" the benchmarks compare with.
void SetJpegRegionDecode(bool enabled);
bool JpegRegionDecode();
// The same for 8-bit PNG images (DSPIPE_PNG_REGION=0 turns it off): the rows below a sample's
// crop are never unfiltered, the rows above it not converted, only its columns converted
// (png_fast.h PngFastOptions::crop_*); the stream is inflated and checked whole either way.
void SetPngRegionDecode(bool enabled);
bool PngRegionDecode();

// An image with an alpha channel (ImageProbe::channels 2 or 4): *opaque is true when every
// alpha sample is the maximum (255; 65535 for 16-bit), else false with (*row, *col) the first
// pixel, in row-major order, that is not. Decodes with OpenCV's IMREAD_UNCHANGED; an image
// without alpha is opaque. Errors as Probe's.
Status FindTransparency(std::span<const uint8_t> bytes, bool* opaque, int* row, int* col);

// DecodeImage(bytes, channels, out) and FindTransparency's answer, from one decode where the
// fast PNG decoder takes the file (an 8-bit gray+alpha or RGBA PNG: the alpha samples are read
// as the rows are converted). Other files are decoded twice, as by the two calls. The pixels
// are DecodeImage's; errors are DecodeImage's or FindTransparency's.
Status DecodeImageFindingTransparency(std::span<const uint8_t> bytes, int channels, cv::Mat* out,
                                      bool* opaque, int* row, int* col);

}  // namespace dspipe::codec
