// SPDX-License-Identifier: Apache-2.0
// Fuzzes the record parser (DecodeRecord) and, like the loader with verify_crc off, decoding
// the parsed payloads into a buffer of the header's shape (raw, raw+zstd, PNG, JPEG, other).
#include <cstdint>
#include <vector>

#include "codec/image.h"
#include "dspipe/format.h"
#include "fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace dspipe;
  const std::span<const uint8_t> value(data, size);
  RecordView view;
  if (!DecodeRecord(value, /*verify_crc=*/false, &view).ok()) return 0;
  const RecordHeader& h = view.header;
  DSPIPE_FUZZ_CHECK(kRecordHeaderSize + view.image.size() + view.mask.size() == size);
  DSPIPE_FUZZ_CHECK(view.image.size() == h.image_size && view.mask.size() == h.mask_size);
  DSPIPE_FUZZ_CHECK(h.channels >= 1 && h.channels <= kMaxChannels);
  DSPIPE_FUZZ_CHECK(h.mask_type == SampleType::kUint8 || h.mask_type == SampleType::kUint16);
  RecordView again;
  (void)DecodeRecord(value, /*verify_crc=*/true, &again);  // the CRC path must not crash

  // The loader sizes its buffer from the header: keep that allocation bounded here.
  const uint64_t pixels = uint64_t{h.height} * h.width;
  if (pixels == 0 || pixels > (uint64_t{1} << 20)) return 0;
  // Typed payloads (record version 2): decoded whole with their type, as the loader does.
  auto typed = [&](Codec codec, std::span<const uint8_t> payload, SampleType type, int channels,
                   bool is_mask) {
    codec::DecodeRequest q;
    q.codec = codec;
    q.payload = payload;
    q.type = type;
    q.channels = channels;
    q.is_mask = is_mask;
    q.height = static_cast<int>(h.height);
    q.width = static_cast<int>(h.width);
    cv::Mat m;
    codec::DecodedImage d;
    if (codec::DecodePayload(q, &m, &d).ok()) {
      DSPIPE_FUZZ_CHECK(d.image.rows == q.height && d.image.cols == q.width &&
                        d.image.channels() == channels &&
                        d.image.depth() == codec::CvDepth(type));
    }
  };
  if (h.image_type != SampleType::kUint8) {
    typed(h.image_codec, view.image, h.image_type, h.channels, false);
  } else {
    std::vector<uint8_t> image(pixels * h.channels);
    (void)codec::DecodePayloadInto(h.image_codec, view.image, h.channels,
                                   static_cast<int>(h.height), static_cast<int>(h.width),
                                   image.data());
  }
  if (h.mask_type == SampleType::kUint16 && h.mask_codec != Codec::kNone) {
    typed(h.mask_codec, view.mask, h.mask_type, 1, true);
  } else if (h.mask_codec != Codec::kNone) {
    std::vector<uint8_t> mask(pixels);
    (void)codec::DecodePayloadInto(h.mask_codec, view.mask, 1, static_cast<int>(h.height),
                                   static_cast<int>(h.width), mask.data(), /*is_mask=*/true);
  }
  return 0;
}
