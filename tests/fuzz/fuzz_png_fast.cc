// SPDX-License-Identifier: Apache-2.0
// Differential fuzzing of the PNG fast path (lib/codec/png_fast*) against libspng: a PNG that
// ChoosePngDecoder routes to the fast path is decoded by both (RGB, and gray for gray files;
// DecodeMask for gray files too); where both accept it, the pixels must be identical. The fast
// path may refuse more (trailing data, an ancillary chunk's CRC, bytes after IEND) but never
// decode differently. Each input is tried as it is and with every chunk CRC recomputed. Errors
// must carry a reason. The loader's fused path (DecodePayload with fuse: rows written mirrored and
// handed to a sink one by one) must fail exactly when the plain fast decode fails, and otherwise
// give its pixels mirrored, every row handed over once, in order. The region decode
// (DecodePayload with a crop: PngRegionDecode) must fail exactly when the whole decode fails
// (the stream is checked whole), and otherwise give the whole decode's crop.
#include <zlib.h>

#include <algorithm>
#include <cstdint>
#include <vector>

#include "codec/image.h"
#include "codec/png_fast.h"
#include "fuzz_util.h"

namespace {

using namespace dspipe;

// Decodes with the fast path on or off (process-wide; libFuzzer runs inputs on one thread).
Status Decode(std::span<const uint8_t> file, int channels, bool mask, bool fast, cv::Mat* out) {
  codec::SetPngFastPathEnabled(fast);
  Status s = mask ? codec::DecodeMask(file, out) : codec::DecodeImage(file, channels, out);
  codec::SetPngFastPathEnabled(true);
  if (!s.ok()) DSPIPE_FUZZ_CHECK(!s.message().empty());
  return s;
}

// A copy with every complete chunk's CRC recomputed, so that mutations reach inflate and the
// unfilter instead of stopping at a CRC mismatch (the CRC checks have their own unit tests).
std::vector<uint8_t> WithFixedCrcs(const uint8_t* data, size_t size) {
  std::vector<uint8_t> v(data, data + size);
  size_t pos = 8;
  while (size >= 8 && pos + 12 <= size) {
    const uint32_t len = uint32_t{v[pos]} << 24 | uint32_t{v[pos + 1]} << 16 |
                         uint32_t{v[pos + 2]} << 8 | v[pos + 3];
    if (len > size - pos - 12) break;
    const uint32_t crc = static_cast<uint32_t>(crc32(0, v.data() + pos + 4, len + 4));
    for (int i = 0; i < 4; ++i) v[pos + 8 + len + i] = static_cast<uint8_t>(crc >> (24 - 8 * i));
    pos += 12 + size_t{len};
  }
  return v;
}

// Checks the rows the fused path hands over: in order, each the final row of dst.
class RowCheck final : public codec::PngRowSink {
 public:
  RowCheck(const uint8_t* dst, size_t row_bytes) : dst_(dst), row_bytes_(row_bytes) {}
  void Row(uint32_t y, const uint8_t* row) override {
    DSPIPE_FUZZ_CHECK(y == rows_ && row == dst_ + y * row_bytes_);
    ++rows_;
  }
  uint32_t rows() const { return rows_; }

 private:
  const uint8_t* dst_;
  size_t row_bytes_;
  uint32_t rows_ = 0;
};

// The loader's request for the whole PNG image at its header's size.
codec::DecodeRequest Request(std::span<const uint8_t> file, const codec::PngHeader& header,
                             int channels) {
  codec::DecodeRequest q;
  q.codec = Codec::kPng;
  q.payload = file;
  q.channels = channels;
  q.height = static_cast<int>(header.height);
  q.width = static_cast<int>(header.width);
  return q;
}

void CheckFused(std::span<const uint8_t> file, const codec::PngHeader& header, int channels,
                const Status& fast_status, const cv::Mat& fast) {
  const int h = static_cast<int>(header.height), w = static_cast<int>(header.width);
  const size_t row_bytes = static_cast<size_t>(w) * static_cast<size_t>(channels);
  std::vector<uint8_t> dst(row_bytes * static_cast<size_t>(h));
  RowCheck sink(dst.data(), row_bytes);
  codec::DecodeRequest q = Request(file, header, channels);
  q.dst = dst.data();
  q.fuse = true;
  q.mirror = true;
  q.sink = &sink;
  cv::Mat scratch;
  codec::DecodedImage d;
  const Status s = codec::DecodePayload(q, &scratch, &d);
  // Fused, or refused before decoding (a size over the DecodeLimits: the fast path refuses too).
  DSPIPE_FUZZ_CHECK(d.path == DecodePath::kFused || (!s.ok() && !fast_status.ok()));
  DSPIPE_FUZZ_CHECK(s.ok() == fast_status.ok());
  if (!s.ok()) {
    DSPIPE_FUZZ_CHECK(!s.message().empty());
    return;
  }
  DSPIPE_FUZZ_CHECK(sink.rows() == header.height);
  cv::Mat mirrored;
  cv::flip(fast, mirrored, 1);
  DSPIPE_FUZZ_CHECK(mirrored.isContinuous());
  DSPIPE_FUZZ_CHECK(std::equal(dst.begin(), dst.end(), mirrored.datastart));
}

void CheckRegion(std::span<const uint8_t> file, const codec::PngHeader& header, int channels,
                 const Status& fast_status, const cv::Mat& fast) {
  const int h = static_cast<int>(header.height), w = static_cast<int>(header.width);
  codec::DecodeRequest q = Request(file, header, channels);
  q.crop_x = w / 4, q.crop_y = h / 3;
  q.crop_w = std::max(1, w / 2), q.crop_h = std::max(1, h / 2);
  cv::Mat scratch;
  codec::DecodedImage d;
  const Status s = codec::DecodePayload(q, &scratch, &d);
  DSPIPE_FUZZ_CHECK(s.ok() == fast_status.ok());
  if (!s.ok()) {
    DSPIPE_FUZZ_CHECK(!s.message().empty());
    return;
  }
  DSPIPE_FUZZ_CHECK(d.path == DecodePath::kRoi);
  DSPIPE_FUZZ_CHECK(d.source_width == w && d.source_height == h);
  const cv::Mat want = fast(cv::Rect(q.crop_x, q.crop_y, q.crop_w, q.crop_h));
  DSPIPE_FUZZ_CHECK(d.image.size() == want.size() && d.image.type() == want.type());
  DSPIPE_FUZZ_CHECK(cv::norm(d.image, want, cv::NORM_INF) == 0);
}

void Compare(std::span<const uint8_t> file) {
  const codec::PngRoute route = codec::ChoosePngDecoder(file);
  if (route.decoder != codec::PngDecoder::kFast) return;
  // Bound the buffers (the decode limits allow 2^28 pixels; the fuzzer's RSS limit does not).
  if (uint64_t{route.header.width} * route.header.height > (uint64_t{1} << 22)) return;
  const bool gray = route.header.color_type == 0;
  for (int variant = 0; variant < (gray ? 3 : 1); ++variant) {
    const int channels = variant == 1 ? 1 : 3;
    const bool mask = variant == 2;
    cv::Mat fast, slow;
    const Status fs = Decode(file, channels, mask, true, &fast);
    const Status ss = Decode(file, channels, mask, false, &slow);
    if (!mask) CheckFused(file, route.header, channels, fs, fast);
    if (!mask) CheckRegion(file, route.header, channels, fs, fast);
    if (!fs.ok() || !ss.ok()) continue;
    DSPIPE_FUZZ_CHECK(fast.size() == slow.size() && fast.type() == slow.type());
    DSPIPE_FUZZ_CHECK(fast.isContinuous() && slow.isContinuous());
    DSPIPE_FUZZ_CHECK(std::equal(fast.datastart, fast.dataend, slow.datastart));
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  Compare({data, size});
  const std::vector<uint8_t> fixed = WithFixedCrcs(data, size);
  Compare(fixed);
  return 0;
}
