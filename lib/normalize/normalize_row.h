// SPDX-License-Identifier: Apache-2.0
// One row of the CPU float32 normalize, for callers that produce an image a row at a time: the
// loader converts each row of a PNG as the fast decoder finishes it, while it is in L1
// (loader/sample.cc). Internal to dspipe (not installed).
//
// Same formula and results as NormalizeNhwcToNchwF32 (dspipe/normalize.h), bit for bit:
//   y = (float(x) - mean[c]) * inv_std[c],  inv_std[c] = 1.0f / std[c]  (float, no FMA)
// computed with AVX2 (8 pixels a step; the CPU is checked once at run time) or a plain loop.
// The uint8 -> float conversion is exact and each of the two operations rounds once, exactly as
// the lookup table of normalize_cpu.cc is built, so both paths give the same floats.
#pragma once

#include <cstddef>
#include <cstdint>

#include "dspipe/normalize.h"

namespace dspipe::normalize {

class RowNormalizerF32 {
 public:
  // REQUIRES: ValidateNormalizeParams(p).ok(). p.mirror is ignored (rows come in mirrored).
  explicit RowNormalizerF32(const NormalizeParams& p, bool plain = false);

  // src: `width` pixels of p.channels interleaved uint8 (no reads past them). Writes channel c
  // of the row to dst + c * plane, width floats each (planar: NCHW with plane = height * width).
  void Row(const uint8_t* src, int width, float* dst, size_t plane) const;
  // The same for `width` pixels of p.channels interleaved uint16 (typed samples; AVX2 for one
  // channel). Bit for bit NormalizeTyped's (float(x) - mean) * (1.0f / std).
  void Row(const uint16_t* src, int width, float* dst, size_t plane) const;
  // True when Row runs the AVX2 code (1 or 3 channels on an AVX2 CPU, not `plain`).
  bool simd() const { return avx2_; }

 private:
  int channels_ = 0;
  bool avx2_ = false;  // false: the plain loop (also `plain`, which tests use)
  float mean_[4] = {};
  float inv_std_[4] = {};
};

}  // namespace dspipe::normalize
