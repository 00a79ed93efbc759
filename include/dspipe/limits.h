// SPDX-License-Identifier: Apache-2.0
// dspipe::DecodeLimits: how large an image a header may declare before dspipe refuses it,
// against decompression bombs (a few bytes of PNG, JPEG or zstd that claim gigabytes).
//
// The limits apply to image headers (PNG IHDR, JPEG frame header) when probing or decoding,
// to record headers read back from a dataset, and to the size a zstd frame claims. A refusal
// names the limit and how to raise it, e.g.
//   "PNG header declares 60000x60000 pixels; the limit is 32768 per side (raise it with
//    --max-image-side, or DecodeLimits::max_side)".
// Process-wide: set them once before building or loading. Thread-safe.
#pragma once

#include <cstdint>

namespace dspipe {

struct DecodeLimits {
  // Largest width or height in pixels. Default 32768. dsconvert: --max-image-side.
  uint32_t max_side = 32768;
  // Largest width * height in pixels. Default 2^28 (268 M pixels: 805 MB as 8-bit RGB).
  // dsconvert: --max-image-pixels.
  uint64_t max_pixels = uint64_t{1} << 28;
};

void SetDecodeLimits(const DecodeLimits& limits);
DecodeLimits GetDecodeLimits();

}  // namespace dspipe
