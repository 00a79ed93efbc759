// SPDX-License-Identifier: Apache-2.0
// CPU normalization kernels: uint8 NHWC images -> float32/float16 NCHW tensors, uint8 masks ->
// int64 class maps. This is the reference the CUDA path (dspipe/cuda.h) is tested against and
// the CPU path of the loader.
//
// The formula, identical on CPU and GPU (same float operations in the same order, no FMA):
//   inv_std[c] = 1.0f / std[c]                      (computed once, on the host, in float)
//   y          = (float(x) - mean[c]) * inv_std[c]  (x is the uint8 pixel value)
// so float32 results are bit-identical between the two paths; float16 is that float32 value
// rounded to nearest-even (IEEE binary16).
//
// Layouts: src is [n][h][w][c] uint8 (interleaved, as decoded); dst is [n][c][h][w].
// Thread safety: all functions are pure (no shared state); call them from as many threads as
// you like on disjoint outputs. Multi-threading over a batch is the caller's business.
#pragma once

#include <cstddef>
#include <cstdint>

#include "dspipe/status.h"

namespace dspipe {

// The element type of a normalized image batch (TensorBatch::images(), DeviceBatch::images):
// float32, or IEEE binary16 (half the device memory and bandwidth, ~3 significant digits).
enum class ImageDtype { kFloat32, kFloat16 };
// The element type of a mask batch (class ids): int64, as cross-entropy losses take them, or
// uint8 (8x smaller). A dataset of uint16 masks (ids above 255) gives int64 either way.
enum class MaskDtype { kInt64, kUInt8 };

// The most channels NormalizeParams holds: kMaxChannels (dspipe/format.h, which the CUDA
// sources do not include; normalize_cpu.cc checks the two agree).
inline constexpr int kMaxNormalizeChannels = 16;

struct NormalizeParams {
  // Number of interleaved channels in the source: 1 (gray), 3 (RGB) or 4 (RGBA). Range 1..4
  // for the uint8 kernels below; the loader's typed path (uint16, int16 and float32 images,
  // such as volumes' modalities and 2.5D slice stacks) takes 1..kMaxNormalizeChannels.
  int channels = 3;
  // Per-channel mean and standard deviation in PIXEL units [0, 255] (not [0, 1]); e.g. the
  // ImageNet values below. Entries at index >= channels are ignored. std must be finite and
  // non-zero. Default: identity (mean 0, std 1) -> y = float(x).
  float mean[kMaxNormalizeChannels] = {};
  float std[kMaxNormalizeChannels] = {1.f, 1.f, 1.f, 1.f, 1.f, 1.f, 1.f, 1.f,
                                      1.f, 1.f, 1.f, 1.f, 1.f, 1.f, 1.f, 1.f};
  // Horizontal flip fused into the conversion: dst(x) = src(w - 1 - x). Default off. Costs
  // nothing extra on either path. Applies to every image of the call.
  bool mirror = false;

  // mean (0.485, 0.456, 0.406) * 255, std (0.229, 0.224, 0.225) * 255, 3 channels.
  static NormalizeParams ImageNet();
};

// OK, or InvalidArgument naming the bad field (channels outside 1..4, non-finite mean,
// zero/non-finite std). The kernels below return this status (and write nothing) on bad params.
Status ValidateNormalizeParams(const NormalizeParams& p);
// The same for the loader's typed path, which takes 1..kMaxNormalizeChannels channels.
Status ValidateTypedNormalizeParams(const NormalizeParams& p);

// dst[i][c][y][x] = (float(src[i][y][x'][c]) - mean[c]) * (1.0f / std[c]), with x' = x or
// w-1-x (mirror). REQUIRES: src holds n*h*w*channels bytes, dst n*channels*h*w floats, n, h,
// w >= 0 (0 -> nothing written), src and dst do not overlap. Uses a 256-entry lookup table
// per channel (exact: every uint8 value is precomputed with the formula above), or for 1 and 3
// channels without mirror on an AVX2 CPU the formula itself, 8 pixels a step (same floats).
// InvalidArgument for bad params or a negative shape.
Status NormalizeNhwcToNchwF32(const uint8_t* src, int n, int h, int w, const NormalizeParams& p,
                              float* dst);

// As above, writing IEEE binary16 bit patterns (round to nearest even), e.g. for torch.float16.
Status NormalizeNhwcToNchwF16(const uint8_t* src, int n, int h, int w, const NormalizeParams& p,
                              uint16_t* dst);

// dst[i] = int64_t(src[i]) for i < count (class ids for a loss such as cross-entropy).
void MasksToInt64(const uint8_t* src, size_t count, int64_t* dst);

// Masks [n][h][w] -> int64 [n][h][w], flipped horizontally when mirror is true (use the same
// flag as the images so pixels and labels stay aligned).
void MasksToInt64Nhw(const uint8_t* src, int n, int h, int w, bool mirror, int64_t* dst);

// IEEE binary16 conversion in software, round to nearest even; NaN stays NaN, overflow -> inf.
uint16_t FloatToHalfBits(float f);
float HalfBitsToFloat(uint16_t h);

}  // namespace dspipe
