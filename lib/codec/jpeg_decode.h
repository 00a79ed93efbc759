// SPDX-License-Identifier: Apache-2.0
// JPEG decoding with libjpeg-turbo's libjpeg API: the frame header and EXIF orientation, and a
// decode of only the part of the image a sample keeps (jpeg_crop_scanline for the columns,
// jpeg_skip_scanlines for the rows above, stopping after the last row it needs) at a DCT scale
// (scale_num / 8) chosen so the region is still at least the size it will be resized to.
// Internal to lib/codec; the loader reaches it through codec::DecodePayload (image.h).
//
// Output matches cv::imdecode(IMREAD_COLOR) + BGR->RGB (the decoder dspipe used before): the
// same library and settings (islow IDCT, fancy upsampling), CMYK/YCCK files converted with
// OpenCV's formula, color -> gray with cv::cvtColor, EXIF orientation applied as OpenCV does.
// A whole-image decode at scale 8/8 is bit-identical to it (tests/codec/jpeg_roi_test.cc).
//
// Thread-safe: every call uses its own decompressor; nothing is shared.
#pragma once

#include <cstdint>
#include <opencv2/core.hpp>
#include <span>

#include "dspipe/status.h"

namespace dspipe::codec {

// What the header says, read without decoding pixels.
struct JpegInfo {
  int width = 0;  // as stored (before EXIF orientation)
  int height = 0;
  int components = 0;  // 1 gray, 3 YCbCr/RGB, 4 CMYK/YCCK
  bool progressive = false;
  int orientation = 1;  // EXIF orientation 1..8 (1 when absent or out of range)
  bool transposed() const { return orientation >= 5; }
  int oriented_width() const { return transposed() ? height : width; }
  int oriented_height() const { return transposed() ? width : height; }
};

// Reads the frame header (held to the process's DecodeLimits) and the EXIF orientation.
// Errors are kBadInput with the reason ("JPEG header: ...").
Status ReadJpegInfo(std::span<const uint8_t> bytes, JpegInfo* out);

// A rectangle of the EXIF-oriented image with fractional edges (pixel units; x, y = top-left).
struct RectF {
  double x = 0, y = 0, w = 0, h = 0;
};

// The DCT scales a decode may use: none (always 8/8), the SIMD ones (1/8, 1/4, 1/2) or every n/8.
enum class JpegScales { kNone, kSimd, kAll };

struct JpegDecodeOptions {
  int channels = 3;  // 1 or 3 (RGB)
  // The region of the oriented image the caller keeps; w <= 0 = the whole image. Clamped to it.
  int crop_x = 0, crop_y = 0, crop_w = 0, crop_h = 0;
  // The size the crop is resized to afterwards (0 = unknown): picks the DCT scale, the smallest
  // of `scales` whose scaled crop is still at least this size (ChooseJpegScale).
  int out_width = 0, out_height = 0;
  JpegScales scales = JpegScales::kSimd;
  // 1..8 forces the scale (the image is decoded at ceil(size * scale_num / 8)); 0 = choose.
  int scale_num = 0;
  // false: decode every row and column (the full-decode path), then report where the crop is.
  bool region = true;
  // Progressive files need every scan before any row can be output; with this false (default)
  // they are decoded whole at the chosen scale (the fallback the stats count as "progressive").
  bool region_progressive = false;
};

struct JpegDecodeResult {
  // The requested crop within *out, in *out's pixels: integers at scale 8/8, fractional at the
  // others (out pixel i covers oriented source pixels [(X + i) * 8 / n, (X + i + 1) * 8 / n)).
  RectF crop;
  int scale_num = 8;     // the scale used (of 8)
  int source_width = 0;  // the whole oriented image at full size
  int source_height = 0;
  bool region = false;       // *out holds less than the whole image
  bool progressive = false;  // the file is progressive
  // The region was decoded from its MCUs alone (a file with a restart marker after every MCU,
  // jpeg_restart.h), not with jpeg_crop_scanline + jpeg_skip_scanlines.
  bool restarts = false;
};

// Decodes the region (or all) of the oriented image at the scale into *out (CV_8UC1/CV_8UC3).
// *out is written in place when it already has the size and type; otherwise it becomes a
// header over *buffer's memory when buffer is given (grown when too small, never shrunk, so a
// thread decoding crops of every size allocates only for its largest: *out is valid while
// *buffer is), else it is allocated. Errors are kBadInput with libjpeg's message. Corrupt
// entropy data that libjpeg only warns about decodes as libjpeg fills it (as OpenCV did).
Status DecodeJpeg(std::span<const uint8_t> bytes, const JpegDecodeOptions& options, cv::Mat* out,
                  JpegDecodeResult* result, cv::Mat* buffer = nullptr);

// A rows x cols Mat of `type` over *buffer's memory, growing *buffer when it is too small.
cv::Mat ViewOver(cv::Mat* buffer, int rows, int cols, int type);

// The scale_num (of 8) to decode a crop_w x crop_h region that is resized to out_w x out_h at:
// the smallest allowed one whose scaled region is still at least out_w x out_h (8 when none
// is, or when out_w / out_h <= 0) among `allowed`; docs/DECODE.md says why the default is kSimd.
int ChooseJpegScale(int crop_w, int crop_h, int out_w, int out_h, JpegScales allowed);

// The process-wide scale set the decode router passes (default kSimd; DSPIPE_JPEG_SCALES=
// none|simd|all at first use overrides it). Benchmarks and tests set it.
void SetJpegScales(JpegScales scales);
JpegScales GetJpegScales();

}  // namespace dspipe::codec
