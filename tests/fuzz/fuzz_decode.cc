// SPDX-License-Identifier: Apache-2.0
// Fuzzes the image decode path of dsconvert and the loader: Probe (PNG/JPEG headers, EXIF,
// completeness), DecodeImage (1 and 3 channels), DecodeImageInto a buffer of the probed shape,
// DecodeMask, IsPlainGray8Png, DecodeTyped (deep images kept) and DecodeTiffPages. The first byte picks the
// operation; the rest is the file.
#include <cstdint>
#include <vector>

#include "codec/image.h"
#include "codec/tiff.h"
#include "fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace dspipe;
  if (size < 1) return 0;
  const uint8_t op = data[0];
  const std::span<const uint8_t> file(data + 1, size - 1);
  codec::ImageProbe probe;
  const Status ps = codec::Probe(file, &probe);
  if (!ps.ok()) {
    DSPIPE_FUZZ_CHECK(!ps.message().empty());
    // Decoders must also fail cleanly on files the probe refused (the loader never probes).
    if (op & 1) {
      cv::Mat m;
      (void)codec::DecodeMask(file, &m);
    }
    return 0;
  }
  DSPIPE_FUZZ_CHECK(probe.width > 0 && probe.height > 0);
  // Bound the buffers like the decode-bomb limits do (codec refuses sides above 32768).
  if (uint64_t{static_cast<uint32_t>(probe.width)} * static_cast<uint32_t>(probe.height) >
      (uint64_t{1} << 22)) {
    return 0;
  }
  const int channels = (op & 2) ? 1 : 3;
  switch ((op >> 2) % 4) {
    case 3: {  // the typed decode (16-bit / float kept): what the build and the loader run
      if (op & 2) {  // BuildOptions::pages_as_channels: a TIFF's pages stacked as channels
        cv::Mat m;
        int pages = 0;
        if (codec::DecodeTiffPages(file, &m, &pages).ok()) {
          DSPIPE_FUZZ_CHECK(pages >= 1 && m.channels() >= 1 && m.channels() <= kMaxChannels);
        }
      }
      SampleType type = SampleType::kUint8;
      if (!codec::SampleTypeOf(probe, &type).ok()) break;
      cv::Mat m;
      if (codec::DecodeTyped(file, type, (op & 1) != 0, &m).ok()) {
        DSPIPE_FUZZ_CHECK(m.depth() == codec::CvDepth(type) || (op & 1) != 0);
        DSPIPE_FUZZ_CHECK(m.channels() >= 1 && m.channels() <= kMaxChannels);
      }
      break;
    }
    case 0: {
      cv::Mat m;
      if (codec::DecodeImage(file, channels, &m).ok()) {
        DSPIPE_FUZZ_CHECK(m.channels() == channels && m.depth() == CV_8U);
      }
      break;
    }
    case 1: {
      std::vector<uint8_t> dst(static_cast<size_t>(probe.width) * probe.height * channels);
      (void)codec::DecodeImageInto(file, channels, probe.height, probe.width, dst.data());
      (void)codec::IsPlainGray8Png(file);
      break;
    }
    default: {
      cv::Mat m;
      if (codec::DecodeMask(file, &m).ok()) DSPIPE_FUZZ_CHECK(m.type() == CV_8UC1);
      std::vector<uint8_t> dst(static_cast<size_t>(probe.width) * probe.height);
      (void)codec::DecodePayloadInto(probe.codec, file, 1, probe.height, probe.width, dst.data(),
                                     /*is_mask=*/true);
      break;
    }
  }
  return 0;
}
