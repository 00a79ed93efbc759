// SPDX-License-Identifier: Apache-2.0
// Fuzzes the loader's JPEG region + DCT-scaled decode (codec::DecodePayload with a crop and an
// output size, lib/codec/jpeg_decode.cc) on untrusted bytes. Input: 6 parameter bytes (crop x,
// y, w, h as fractions /255 of the image, output side, flags) then the file. Every call must
// return cleanly; a decoded region must hold the crop inside its pixels; and, differentially, at
// scale 8/8 the region's crop must be byte-identical to the same crop of the whole-image decode
// (the property tests/codec/jpeg_roi_test.cc checks on valid files).
#include <algorithm>
#include <cstdint>
#include <vector>

#include "codec/image.h"
#include "codec/jpeg_decode.h"
#include "fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace dspipe;
  if (size < 7) return 0;
  const uint8_t* p = data;
  const std::span<const uint8_t> file(data + 6, size - 6);
  codec::JpegInfo info;
  if (!codec::ReadJpegInfo(file, &info).ok()) return 0;
  const int w = info.oriented_width(), h = info.oriented_height();
  // Bound the buffers (the decode limits allow 2^28 pixels; the fuzzer's RSS limit does not).
  if (uint64_t{static_cast<uint32_t>(w)} * static_cast<uint32_t>(h) > (uint64_t{1} << 22)) return 0;
  const int channels = (p[5] & 1) ? 1 : 3;
  codec::DecodeRequest q;
  q.codec = Codec::kJpeg;
  q.payload = file;
  q.channels = channels;
  q.height = h;
  q.width = w;
  q.crop_x = p[0] * (w - 1) / 255;
  q.crop_y = p[1] * (h - 1) / 255;
  q.crop_w = std::max(1, p[2] * (w - q.crop_x) / 255);
  q.crop_h = std::max(1, p[3] * (h - q.crop_y) / 255);
  q.out_width = q.out_height = 1 + p[4];
  codec::SetJpegScales((p[5] & 2) ? codec::JpegScales::kNone : codec::JpegScales::kSimd);
  cv::Mat scratch;
  codec::DecodedImage d;
  const Status s = codec::DecodePayload(q, &scratch, &d);
  codec::SetJpegScales(codec::JpegScales::kSimd);
  if (!s.ok()) {
    DSPIPE_FUZZ_CHECK(!s.message().empty());
    return 0;
  }
  DSPIPE_FUZZ_CHECK(d.image.channels() == channels && d.source_width == w && d.source_height == h);
  DSPIPE_FUZZ_CHECK(d.crop.x >= 0 && d.crop.y >= 0 && d.crop.w > 0 && d.crop.h > 0 &&
                    d.crop.x + d.crop.w <= d.image.cols + 1e-6 &&
                    d.crop.y + d.crop.h <= d.image.rows + 1e-6);
  if (!(p[5] & 2) || d.path == DecodePath::kProgressive) return 0;
  // 8/8: the crop of the region equals the crop of the whole image.
  cv::Mat whole;
  if (!codec::DecodeImage(file, channels, &whole).ok()) return 0;
  const cv::Rect crop(q.crop_x, q.crop_y, q.crop_w, q.crop_h);
  const cv::Rect in(static_cast<int>(d.crop.x), static_cast<int>(d.crop.y), q.crop_w, q.crop_h);
  const cv::Mat a = whole(crop), b = d.image(in);
  for (int y = 0; y < a.rows; ++y) {
    DSPIPE_FUZZ_CHECK(
        std::equal(a.ptr<uint8_t>(y), a.ptr<uint8_t>(y) + a.cols * channels, b.ptr<uint8_t>(y)));
  }
  return 0;
}
