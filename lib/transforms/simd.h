// SPDX-License-Identifier: Apache-2.0
// Vector kernels of the transforms (simd.cc): exact copies, picked by the CPU's features at run
// time. Internal to dspipe.
#pragma once

#include <cstddef>
#include <cstdint>
#include <opencv2/core.hpp>

#include "core/rng.h"

namespace dspipe::transforms {

using core::Mix64;
using core::Rng;

// cv::flip(src, *dst, 1) for 1- and 3-channel uint8 images (SSSE3), else cv::flip itself.
// *dst is (re)allocated unless it already has src's size and type (a ROI header is written in
// place); src and dst must not overlap unless they are the same image (then cv::flip).
void FlipHorizontal(const cv::Mat& src, cv::Mat* dst);

// cv::warpAffine(src, *dst, matrix, size, flags, border_mode, value), the same bytes: its own
// AVX-512 loops (warp_affine.cc) for uint8 images of 1, 3 or 4 channels, INTER_NEAREST /
// INTER_LINEAR and a constant or replicated border (a 2x3 CV_64F matrix), cv::warpAffine itself
// otherwise (and on CPUs without AVX-512 F and BW).
void WarpAffine(const cv::Mat& src, cv::Mat* dst, const cv::Mat& matrix, cv::Size size, int flags,
                int border_mode, const cv::Scalar& value);

// p[i] = lut[i % channels][p[i]] for n bytes of interleaved pixels (one table for all channels:
// AVX-512 VBMI, 64 bytes a step), in place.
void LookUpRow(uint8_t* p, size_t n, int channels, const uint8_t lut[4][256]);
void LookUp(cv::Mat* image, const uint8_t lut[4][256]);

// GaussNoise's per-channel noise on n values: p[i] = clamp(p[i] + table[q_i], 0, 255) with
// q_i = bits [16 (i % 4), 16 (i % 4) + 12) of word(first + i / 4), word(k) = splitmix64's k-th
// output from `seed` (Mix64(seed + k * golden)): counter-based, so AVX-512 (8 words a step) and
// the plain loop give the same values. table: 4096 int16 noise values and one more entry (any
// value: the vector path's 32-bit reads of entry 4095 end inside it; 8 KiB, so two threads'
// tables stay in one L1). Returns the words used.
uint64_t AddNoiseRow(uint8_t* p, size_t n, const int16_t* table, uint64_t seed, uint64_t first);
// The same noise value added to every channel of a pixel (per_channel=false): q_i for pixel i.
uint64_t AddSharedNoiseRow(uint8_t* p, size_t pixels, int channels, const int16_t* table,
                           uint64_t seed, uint64_t first);

// MONAI's ScaleIntensityRange on n float32 values, in place, each op in float32 as torch does
// them: t = (x - a_min) / span; with `rescale` t = t * scale + offset; with `clip`
// t = min(max(t, lo), hi) (NaN stays NaN). AVX2 8 values a step (no fused multiply-add), the
// same results as the plain loop.
struct RangeMapParams {
  float a_min = 0, span = 1;
  bool rescale = false;
  float scale = 1, offset = 0;
  bool clip = false;
  float lo = 0, hi = 0;
};
void RangeMapRow(float* p, size_t n, const RangeMapParams& m);

// Gaussian noise on n float32 values: p[i] += mean + sd * z_i in float32, z_i standard normal
// by Marsaglia and Tsang's ziggurat (256 layers, signed 24-bit values). Value j = first + i's
// first try is half j % 2 of the counter word Mix64(seed + (j / 2) * golden) (8 bits: the layer,
// the high 24: the signed value), taken when it falls inside its layer's rectangle (~99.3%); the
// rest (wedge and tail tests, retries) draw from `slow`, in order of i. AVX-512 (F, DQ): 16
// values a step, the same results as the plain loop.
void AddNormalRow(float* p, size_t n, double mean, double sd, uint64_t seed, uint64_t first,
                  Rng* slow);

}  // namespace dspipe::transforms
