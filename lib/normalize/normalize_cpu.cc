// SPDX-License-Identifier: Apache-2.0
// CPU normalization: one 256-entry lookup table per channel (uint8 input has only 256 values,
// so the table is exact and replaces a subtract, a multiply and, for fp16, a rounding per
// element with one load). float32 of gray and RGB without mirror on an AVX2 CPU takes
// RowNormalizerF32 instead (normalize_row.h: the same two float operations, 8 pixels a step). The
// loops are templated on the channel count and the flip so the source stride is a constant.
#include <bit>
#include <cmath>
#include <cstring>
#include <string>

#include "dspipe/format.h"
#include "dspipe/normalize.h"
#include "normalize/normalize_row.h"

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define DSPIPE_NORMALIZE_X86 1
#endif

namespace dspipe {
namespace {

template <typename T>
using Lut = T[4][256];

template <typename T, typename Convert>
void BuildLut(const NormalizeParams& p, Convert convert, Lut<T>& lut) {
  for (int c = 0; c < p.channels; ++c) {
    const float mean = p.mean[c];
    const float inv_std = 1.0f / p.std[c];  // the one formula shared with the GPU path
    for (int v = 0; v < 256; ++v) lut[c][v] = convert((static_cast<float>(v) - mean) * inv_std);
  }
}

template <int C, bool kMirror, typename T>
void NormalizeImpl(const uint8_t* src, int n, int h, int w, const Lut<T>& lut, T* dst) {
  const size_t plane = static_cast<size_t>(h) * w;
  for (int i = 0; i < n; ++i) {
    const uint8_t* image = src + static_cast<size_t>(i) * plane * C;
    T* out_image = dst + static_cast<size_t>(i) * plane * C;
    for (int y = 0; y < h; ++y) {
      const uint8_t* row = image + static_cast<size_t>(y) * w * C;
      for (int c = 0; c < C; ++c) {
        const T* table = lut[c];
        T* out = out_image + c * plane + static_cast<size_t>(y) * w;
        if constexpr (kMirror) {
          // A decreasing offset: as fast as the forward loop, unlike the indexed
          // row[(w - 1 - x) * C + c] (measured ~1.8x slower with g++ 12 -O2). Unsigned, so the
          // final step past 0 wraps harmlessly instead of forming an out-of-range pointer.
          size_t off = static_cast<size_t>(w - 1) * C + c;
          for (int x = 0; x < w; ++x, off -= C) out[x] = table[row[off]];
        } else {
          const uint8_t* in = row + c;
          for (int x = 0; x < w; ++x) out[x] = table[in[x * C]];
        }
      }
    }
  }
}

template <typename T>
void Dispatch(const uint8_t* src, int n, int h, int w, const NormalizeParams& p, const Lut<T>& lut,
              T* dst) {
#define DSPIPE_NORMALIZE_CASE(C)                          \
  case C:                                                 \
    if (p.mirror) {                                       \
      NormalizeImpl<C, true, T>(src, n, h, w, lut, dst);  \
    } else {                                              \
      NormalizeImpl<C, false, T>(src, n, h, w, lut, dst); \
    }                                                     \
    break;
  switch (p.channels) {
    DSPIPE_NORMALIZE_CASE(1)
    DSPIPE_NORMALIZE_CASE(2)
    DSPIPE_NORMALIZE_CASE(3)
    DSPIPE_NORMALIZE_CASE(4)
    default:
      break;  // rejected by CheckArgs
  }
#undef DSPIPE_NORMALIZE_CASE
}

Status CheckArgs(int n, int h, int w, const NormalizeParams& p, const char* fn) {
  Status s = ValidateNormalizeParams(p);
  if (s.ok() && (n < 0 || h < 0 || w < 0)) {
    s = Status::InvalidArgument("negative shape n=" + std::to_string(n) +
                                " h=" + std::to_string(h) + " w=" + std::to_string(w));
  }
  return s.WithContext(fn);
}

// RowNormalizerF32's plain loop; also the tail of the AVX2 one. Pixels [0, from) are done.
template <typename T>
void RowPlain(const T* src, int channels, int width, const float* mean, const float* inv_std,
              float* dst, size_t plane, int from) {
  for (int c = 0; c < channels; ++c) {
    float* out = dst + static_cast<size_t>(c) * plane;
    const float m = mean[c], inv = inv_std[c];
    for (int x = from; x < width; ++x) {
      out[x] = (static_cast<float>(src[static_cast<size_t>(x) * channels + c]) - m) * inv;
    }
  }
}

#ifdef DSPIPE_NORMALIZE_X86
// RGB, 8 pixels a step: each channel's 8 bytes gathered with byte shuffles from two loads (24
// bytes), widened to int32, converted to float (exact), then one sub and one mul. Returns the
// pixels done.
__attribute__((target("avx2"))) int Rgb8(const uint8_t* src, int width, const float* mean,
                                         const float* inv_std, float* const out[3]) {
  constexpr char Z = -128;  // shuffle: zero the byte
  const __m128i lo_sel[3] = {_mm_setr_epi8(0, 3, 6, 9, 12, 15, Z, Z, Z, Z, Z, Z, Z, Z, Z, Z),
                             _mm_setr_epi8(1, 4, 7, 10, 13, Z, Z, Z, Z, Z, Z, Z, Z, Z, Z, Z),
                             _mm_setr_epi8(2, 5, 8, 11, 14, Z, Z, Z, Z, Z, Z, Z, Z, Z, Z, Z)};
  const __m128i hi_sel[3] = {_mm_setr_epi8(Z, Z, Z, Z, Z, Z, 2, 5, Z, Z, Z, Z, Z, Z, Z, Z),
                             _mm_setr_epi8(Z, Z, Z, Z, Z, 0, 3, 6, Z, Z, Z, Z, Z, Z, Z, Z),
                             _mm_setr_epi8(Z, Z, Z, Z, Z, 1, 4, 7, Z, Z, Z, Z, Z, Z, Z, Z)};
  __m256 m[3], inv[3];
  for (int c = 0; c < 3; ++c) {
    m[c] = _mm256_set1_ps(mean[c]);
    inv[c] = _mm256_set1_ps(inv_std[c]);
  }
  int x = 0;
  for (; x + 8 <= width; x += 8) {
    const uint8_t* p = src + static_cast<size_t>(x) * 3;
    const __m128i lo = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
    const __m128i hi = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(p + 16));
    for (int c = 0; c < 3; ++c) {
      const __m128i b =
          _mm_or_si128(_mm_shuffle_epi8(lo, lo_sel[c]), _mm_shuffle_epi8(hi, hi_sel[c]));
      const __m256 f = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(b));
      _mm256_storeu_ps(out[c] + x, _mm256_mul_ps(_mm256_sub_ps(f, m[c]), inv[c]));
    }
  }
  return x;
}

// 8 gray pixels widened to int32 (exact either way).
__attribute__((target("avx2"))) inline __m256i Widen8(const uint8_t* p) {
  return _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p)));
}
__attribute__((target("avx2"))) inline __m256i Widen8(const uint16_t* p) {
  return _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
}

// Gray (8- or 16-bit), 8 pixels a step: widened to int32, converted to float (exact below 2^24),
// then one sub and one mul.
template <typename T>
__attribute__((target("avx2"))) int Gray(const T* src, int width, float mean, float inv_std,
                                         float* out) {
  const __m256 m = _mm256_set1_ps(mean), inv = _mm256_set1_ps(inv_std);
  int x = 0;
  for (; x + 8 <= width; x += 8) {
    const __m256 f = _mm256_cvtepi32_ps(Widen8(src + x));
    _mm256_storeu_ps(out + x, _mm256_mul_ps(_mm256_sub_ps(f, m), inv));
  }
  return x;
}

// (Streaming stores for the float rows were measured slower in the loader: png_bench per
// CPU-second 0.88-0.90 of the decode bound against 0.92-0.93 with these plain stores.)
void RowAvx2(const uint8_t* src, int channels, int width, const float* mean, const float* inv_std,
             float* dst, size_t plane) {
  int x = 0;
  if (channels == 1) {
    x = Gray(src, width, mean[0], inv_std[0], dst);
  } else if (channels == 3) {
    float* const out[3] = {dst, dst + plane, dst + 2 * plane};
    x = Rgb8(src, width, mean, inv_std, out);
  }
  RowPlain(src, channels, width, mean, inv_std, dst, plane, x);
}
#endif

}  // namespace

namespace normalize {

RowNormalizerF32::RowNormalizerF32(const NormalizeParams& p, bool plain) : channels_(p.channels) {
  for (int c = 0; c < p.channels; ++c) {
    mean_[c] = p.mean[c];
    inv_std_[c] = 1.0f / p.std[c];  // as BuildLut: the one formula
  }
#ifdef DSPIPE_NORMALIZE_X86
  static const bool have_avx2 = __builtin_cpu_supports("avx2");
  avx2_ = !plain && have_avx2 && (channels_ == 1 || channels_ == 3);
#else
  (void)plain;
#endif
}

void RowNormalizerF32::Row(const uint8_t* src, int width, float* dst, size_t plane) const {
#ifdef DSPIPE_NORMALIZE_X86
  if (avx2_) {
    RowAvx2(src, channels_, width, mean_, inv_std_, dst, plane);
    return;
  }
#endif
  RowPlain(src, channels_, width, mean_, inv_std_, dst, plane, 0);
}

void RowNormalizerF32::Row(const uint16_t* src, int width, float* dst, size_t plane) const {
  int x = 0;
#ifdef DSPIPE_NORMALIZE_X86
  if (avx2_ && channels_ == 1) x = Gray(src, width, mean_[0], inv_std_[0], dst);
#endif
  RowPlain(src, channels_, width, mean_, inv_std_, dst, plane, x);
}

}  // namespace normalize

NormalizeParams NormalizeParams::ImageNet() {
  NormalizeParams p;
  p.channels = 3;
  const float mean[3] = {0.485f, 0.456f, 0.406f};
  const float std[3] = {0.229f, 0.224f, 0.225f};
  for (int c = 0; c < 3; ++c) {
    p.mean[c] = mean[c] * 255.0f;
    p.std[c] = std[c] * 255.0f;
  }
  return p;
}

namespace {

Status ValidateNormalizeUpTo(const NormalizeParams& p, int max_channels) {
  if (p.channels < 1 || p.channels > max_channels) {
    return Status::InvalidArgument("NormalizeParams.channels must be 1.." +
                                   std::to_string(max_channels) + ", got " +
                                   std::to_string(p.channels));
  }
  for (int c = 0; c < p.channels; ++c) {
    if (!std::isfinite(p.mean[c])) {
      return Status::InvalidArgument("NormalizeParams.mean[" + std::to_string(c) +
                                     "] is not finite");
    }
    if (!std::isfinite(p.std[c]) || p.std[c] == 0.0f) {
      return Status::InvalidArgument("NormalizeParams.std[" + std::to_string(c) + "] = " +
                                     std::to_string(p.std[c]) + " must be finite and non-zero");
    }
  }
  return Status::OK();
}

}  // namespace

Status ValidateNormalizeParams(const NormalizeParams& p) { return ValidateNormalizeUpTo(p, 4); }

static_assert(kMaxNormalizeChannels == kMaxChannels, "NormalizeParams holds a record's channels");

Status ValidateTypedNormalizeParams(const NormalizeParams& p) {
  return ValidateNormalizeUpTo(p, kMaxNormalizeChannels);
}

Status NormalizeNhwcToNchwF32(const uint8_t* src, int n, int h, int w, const NormalizeParams& p,
                              float* dst) {
  DSPIPE_RETURN_IF_ERROR(CheckArgs(n, h, w, p, "NormalizeNhwcToNchwF32"));
  if (const normalize::RowNormalizerF32 rows(p); rows.simd() && !p.mirror) {
    // Gray and RGB without mirror: the AVX2 rows (same floats as the table, 2-3x faster).
    const size_t plane = static_cast<size_t>(h) * static_cast<size_t>(w);
    const size_t c = static_cast<size_t>(p.channels);
    for (size_t i = 0; i < static_cast<size_t>(n); ++i) {
      for (size_t y = 0; y < static_cast<size_t>(h); ++y) {
        rows.Row(src + (i * plane + y * static_cast<size_t>(w)) * c, w,
                 dst + i * plane * c + y * static_cast<size_t>(w), plane);
      }
    }
    return Status::OK();
  }
  alignas(64) Lut<float> lut;
  BuildLut<float>(
      p, [](float v) { return v; }, lut);
  Dispatch<float>(src, n, h, w, p, lut, dst);
  return Status::OK();
}

Status NormalizeNhwcToNchwF16(const uint8_t* src, int n, int h, int w, const NormalizeParams& p,
                              uint16_t* dst) {
  DSPIPE_RETURN_IF_ERROR(CheckArgs(n, h, w, p, "NormalizeNhwcToNchwF16"));
  alignas(64) Lut<uint16_t> lut;
  BuildLut<uint16_t>(p, FloatToHalfBits, lut);
  Dispatch<uint16_t>(src, n, h, w, p, lut, dst);
  return Status::OK();
}

void MasksToInt64(const uint8_t* src, size_t count, int64_t* dst) {
  for (size_t i = 0; i < count; ++i) dst[i] = src[i];
}

void MasksToInt64Nhw(const uint8_t* src, int n, int h, int w, bool mirror, int64_t* dst) {
  if (n <= 0 || h <= 0 || w <= 0) return;
  const size_t rows = static_cast<size_t>(n) * h;
  if (!mirror) {
    MasksToInt64(src, rows * w, dst);
    return;
  }
  for (size_t r = 0; r < rows; ++r) {
    const uint8_t* in = src + r * w;
    int64_t* out = dst + r * w;
    for (int x = 0; x < w; ++x) out[x] = in[w - 1 - x];
  }
}

uint16_t FloatToHalfBits(float f) {
  const uint32_t x = std::bit_cast<uint32_t>(f);
  const uint32_t sign = (x >> 16) & 0x8000u;
  const uint32_t abs = x & 0x7fffffffu;
  if (abs >= 0x7f800000u) {  // inf or NaN; keep NaN quiet and non-zero
    if (abs == 0x7f800000u) return static_cast<uint16_t>(sign | 0x7c00u);
    return static_cast<uint16_t>(sign | 0x7e00u | ((abs >> 13) & 0x3ffu));
  }
  if (abs >= 0x477ff000u) return static_cast<uint16_t>(sign | 0x7c00u);  // >= 65520 -> inf
  if (abs < 0x38800000u) {  // below 2^-14: half subnormal or zero
    if (abs <= 0x33000000u) return static_cast<uint16_t>(sign);  // <= 2^-25 rounds to 0
    const uint32_t exp = abs >> 23;                              // 102..112
    const uint32_t mant = (abs & 0x7fffffu) | 0x800000u;         // implicit bit
    const uint32_t shift = 126 - exp;                            // 14..24 -> units of 2^-24
    uint32_t h = mant >> shift;
    const uint32_t rem = mant & ((1u << shift) - 1);
    const uint32_t half = 1u << (shift - 1);
    if (rem > half || (rem == half && (h & 1u))) ++h;  // may carry into the smallest normal
    return static_cast<uint16_t>(sign | h);
  }
  uint32_t h = (abs - 0x38000000u) >> 13;  // rebias 127 -> 15, drop 13 mantissa bits
  const uint32_t rem = abs & 0x1fffu;
  if (rem > 0x1000u || (rem == 0x1000u && (h & 1u))) ++h;  // carry into exponent is correct
  return static_cast<uint16_t>(sign | h);
}

float HalfBitsToFloat(uint16_t hbits) {
  const uint32_t sign = static_cast<uint32_t>(hbits & 0x8000u) << 16;
  const uint32_t exp = (hbits >> 10) & 0x1fu;
  const uint32_t mant = hbits & 0x3ffu;
  uint32_t bits;
  if (exp == 0x1fu) {
    bits = sign | 0x7f800000u | (mant << 13);
  } else if (exp != 0) {
    bits = sign | ((exp + 112) << 23) | (mant << 13);
  } else if (mant == 0) {
    bits = sign;
  } else {  // subnormal: mant * 2^-24, exact in float
    const float v = static_cast<float>(mant) * 0x1p-24f;
    return sign ? -v : v;
  }
  return std::bit_cast<float>(bits);
}

}  // namespace dspipe
