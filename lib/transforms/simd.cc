// SPDX-License-Identifier: Apache-2.0
// Vector kernels for the two copies every pipeline leans on: a horizontal flip of 1- and
// 3-channel uint8 rows (SSSE3 byte shuffles: 16 / 5 pixels a step) and a 256-entry uint8 table
// lookup (AVX-512 VBMI: two vpermi2b per 64 bytes). Both are chosen at run time from the CPU's
// features and fall back to plain loops; results are identical either way (pure copies).
#include "transforms/simd.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <opencv2/core.hpp>

#include "core/rng.h"

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define DSPIPE_TRANSFORMS_X86 1
// GCC 12's AVX-512 headers trip -Wmaybe-uninitialized on their own _mm512_undefined_*().
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif

namespace dspipe::transforms {
namespace {

constexpr uint64_t kGolden = 0x9E3779B97F4A7C15ULL;
inline uint64_t Word(uint64_t seed, uint64_t k) { return Mix64(seed + k * kGolden); }
inline int Field(uint64_t word, size_t i) {
  return static_cast<int>((word >> (16 * (i & 3))) & 0xFFF);
}

#ifdef DSPIPE_TRANSFORMS_X86
bool HaveNoiseAvx512() {
  static const bool have = __builtin_cpu_supports("avx512f") &&
                           __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512bw");
  return have;
}

// 32 values a step: 8 words (lanes k .. k+7) mixed in parallel, split into 32 16-bit fields.
__attribute__((target("avx512f,avx512dq,avx512bw"))) size_t NoiseAvx512(uint8_t* p, size_t n,
                                                                        const int16_t* table,
                                                                        uint64_t seed,
                                                                        uint64_t first) {
  const __m512i golden = _mm512_set1_epi64(static_cast<long long>(kGolden));
  const __m512i m1 = _mm512_set1_epi64(static_cast<long long>(0xBF58476D1CE4E5B9ULL));
  const __m512i m2 = _mm512_set1_epi64(static_cast<long long>(0x94D049BB133111EBULL));
  const __m512i lanes = _mm512_setr_epi64(0, 1, 2, 3, 4, 5, 6, 7);
  const __m512i field = _mm512_set1_epi16(0xFFF);
  const __m512i zero = _mm512_setzero_si512(), top = _mm512_set1_epi32(255);
  size_t i = 0;
  for (; i + 32 <= n; i += 32) {
    const __m512i k =
        _mm512_add_epi64(_mm512_set1_epi64(static_cast<long long>(first + i / 4)), lanes);
    __m512i z = _mm512_add_epi64(_mm512_set1_epi64(static_cast<long long>(seed)),
                                 _mm512_mullo_epi64(k, golden));
    z = _mm512_mullo_epi64(_mm512_xor_si512(z, _mm512_srli_epi64(z, 30)), m1);
    z = _mm512_mullo_epi64(_mm512_xor_si512(z, _mm512_srli_epi64(z, 27)), m2);
    z = _mm512_xor_si512(z, _mm512_srli_epi64(z, 31));
    const __m512i q = _mm512_and_si512(z, field);  // 32 indices, value order
    // The extract's lane must be an immediate (a loop variable is not one at -O0).
    const __m256i halves[2] = {_mm512_extracti64x4_epi64(q, 0), _mm512_extracti64x4_epi64(q, 1)};
    for (int half = 0; half < 2; ++half) {
      const __m512i idx = _mm512_cvtepu16_epi32(halves[half]);
      // 32-bit reads at 2 * idx: the entry in the low 16 bits (table has a padding entry),
      // sign-extended.
      const __m512i noise =
          _mm512_srai_epi32(_mm512_slli_epi32(_mm512_i32gather_epi32(idx, table, 2), 16), 16);
      const __m128i px = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p + i + 16 * half));
      __m512i v = _mm512_add_epi32(_mm512_cvtepu8_epi32(px), noise);
      v = _mm512_min_epi32(_mm512_max_epi32(v, zero), top);
      _mm_storeu_si128(reinterpret_cast<__m128i*>(p + i + 16 * half), _mm512_cvtepi32_epi8(v));
    }
  }
  return i;
}
#endif

#ifdef DSPIPE_TRANSFORMS_X86
bool HaveSsse3() {
  static const bool have = __builtin_cpu_supports("ssse3");
  return have;
}
bool HaveVbmi() {
  static const bool have = __builtin_cpu_supports("avx512vbmi") &&
                           __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512f");
  return have;
}

// dst[j] = src[w - 1 - j] for one row of 3-byte pixels; returns the pixels done (the rest is
// the caller's). Each step loads the 5 pixels ending at src pixel w - 1 - j (and the byte
// before them), reverses them and stores 16 bytes, the last of which the next step overwrites.
__attribute__((target("ssse3"))) int FlipRow3(const uint8_t* src, int w, uint8_t* dst) {
  const __m128i rev = _mm_setr_epi8(13, 14, 15, 10, 11, 12, 7, 8, 9, 4, 5, 6, 1, 2, 3, -1);
  int j = 0;
  for (; j + 6 <= w; j += 5) {
    const __m128i v = _mm_loadu_si128(
        reinterpret_cast<const __m128i*>(src + static_cast<ptrdiff_t>(w - 5 - j) * 3 - 1));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(dst + static_cast<ptrdiff_t>(j) * 3),
                     _mm_shuffle_epi8(v, rev));
  }
  return j;
}

__attribute__((target("ssse3"))) int FlipRow1(const uint8_t* src, int w, uint8_t* dst) {
  const __m128i rev = _mm_setr_epi8(15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0);
  int j = 0;
  for (; j + 16 <= w; j += 16) {
    const __m128i v = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + w - 16 - j));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(dst + j), _mm_shuffle_epi8(v, rev));
  }
  return j;
}

// 64 bytes a step with vpermb: 21 three-byte pixels (63 bytes + 1 the next step overwrites)
// or 64 one-byte ones, reversed; same contract as FlipRow3 / FlipRow1.
__attribute__((target("avx512f,avx512bw,avx512vbmi"))) int FlipRowVbmi(const uint8_t* src, int w,
                                                                       int channels, uint8_t* dst) {
  struct Tables {
    alignas(64) uint8_t idx[2][64];
    Tables() {
      for (int t = 0; t < 2; ++t) {
        const int c = t == 0 ? 1 : 3, per = c == 3 ? 21 : 64;
        for (int b = 0; b < 64; ++b) {
          // Output byte b: pixel m = b / c of the step, channel b % c, from input pixel
          // per-1-m, at byte (per - 1 - m) * c (+1 for c = 3: the load starts a byte early).
          const int m = b / c, k = b % c;
          idx[t][b] = static_cast<uint8_t>(m < per ? (per - 1 - m) * c + k + (c == 3) : 0);
        }
      }
    }
  };
  static const Tables tables;
  const int per = channels == 3 ? 21 : 64;
  const __m512i rev = _mm512_load_si512(tables.idx[channels == 3 ? 1 : 0]);
  int j = 0;
  if (channels == 3) {
    for (; j + per + 1 <= w; j += per) {
      const __m512i v = _mm512_loadu_si512(src + static_cast<ptrdiff_t>(w - per - j) * 3 - 1);
      _mm512_storeu_si512(dst + static_cast<ptrdiff_t>(j) * 3, _mm512_permutexvar_epi8(rev, v));
    }
  } else {
    for (; j + 64 <= w; j += 64) {
      const __m512i v = _mm512_loadu_si512(src + w - 64 - j);
      _mm512_storeu_si512(dst + j, _mm512_permutexvar_epi8(rev, v));
    }
  }
  return j;
}

__attribute__((target("avx512f,avx512bw,avx512vbmi"))) size_t LutVbmi(uint8_t* p, size_t n,
                                                                      const uint8_t* lut) {
  const __m512i t0 = _mm512_loadu_si512(lut), t1 = _mm512_loadu_si512(lut + 64);
  const __m512i t2 = _mm512_loadu_si512(lut + 128), t3 = _mm512_loadu_si512(lut + 192);
  size_t i = 0;
  for (; i + 64 <= n; i += 64) {
    const __m512i x = _mm512_loadu_si512(p + i);
    const __m512i lo = _mm512_permutex2var_epi8(t0, x, t1);  // entries 0..127 (7 index bits)
    const __m512i hi = _mm512_permutex2var_epi8(t2, x, t3);  // entries 128..255
    _mm512_storeu_si512(p + i, _mm512_mask_blend_epi8(_mm512_movepi8_mask(x), lo, hi));
  }
  return i;
}
#endif

}  // namespace

uint64_t AddNoiseRow(uint8_t* p, size_t n, const int16_t* table, uint64_t seed, uint64_t first) {
  size_t i = 0;
#ifdef DSPIPE_TRANSFORMS_X86
  if (HaveNoiseAvx512()) i = NoiseAvx512(p, n, table, seed, first);
#endif
  uint64_t word = 0;
  for (; i < n; ++i) {
    if ((i & 3) == 0 || i == 0) word = Word(seed, first + i / 4);
    p[i] = static_cast<uint8_t>(std::clamp(p[i] + table[Field(word, i)], 0, 255));
  }
  return (n + 3) / 4;
}

uint64_t AddSharedNoiseRow(uint8_t* p, size_t pixels, int channels, const int16_t* table,
                           uint64_t seed, uint64_t first) {
  uint64_t word = 0;
  for (size_t i = 0; i < pixels; ++i) {
    if ((i & 3) == 0) word = Word(seed, first + i / 4);
    const int v = table[Field(word, i)];
    for (int c = 0; c < channels; ++c) {
      uint8_t& q = p[i * static_cast<size_t>(channels) + static_cast<size_t>(c)];
      q = static_cast<uint8_t>(std::clamp(q + v, 0, 255));
    }
  }
  return (pixels + 3) / 4;
}

void FlipHorizontal(const cv::Mat& src, cv::Mat* dst) {
  const int c = src.channels();
  if (src.data == dst->data || src.depth() != CV_8U || (c != 1 && c != 3)) {
    cv::flip(src, *dst, 1);
    return;
  }
  dst->create(src.rows, src.cols, src.type());
  const int w = src.cols;
  for (int y = 0; y < src.rows; ++y) {
    const uint8_t* s = src.ptr<uint8_t>(y);
    uint8_t* d = dst->ptr<uint8_t>(y);
    int j = 0;
#ifdef DSPIPE_TRANSFORMS_X86
    if (HaveVbmi()) {
      j = FlipRowVbmi(s, w, c, d);
      // The rest with the 16-byte steps: pixels j.. of dst from pixels w-1-j.. of src.
      if (HaveSsse3()) j += c == 3 ? FlipRow3(s, w - j, d + j * c) : FlipRow1(s, w - j, d + j * c);
    } else if (HaveSsse3()) {
      j = c == 3 ? FlipRow3(s, w, d) : FlipRow1(s, w, d);
    }
#endif
    for (; j < w; ++j) std::memcpy(d + j * c, s + (w - 1 - j) * c, static_cast<size_t>(c));
  }
}

void LookUpRow(uint8_t* p, size_t n, int channels, const uint8_t lut[4][256]) {
  bool same = true;
  for (int k = 1; k < channels; ++k) same &= std::memcmp(lut[0], lut[k], 256) == 0;
  if (!same) {
    const size_t c = static_cast<size_t>(channels);
    for (size_t i = 0; i < n; i += c) {
      for (size_t k = 0; k < c; ++k) p[i + k] = lut[k][p[i + k]];
    }
    return;
  }
  size_t i = 0;
#ifdef DSPIPE_TRANSFORMS_X86
  if (HaveVbmi()) i = LutVbmi(p, n, lut[0]);
#endif
  const uint8_t* t = lut[0];
  for (; i < n; ++i) p[i] = t[p[i]];
}

void LookUp(cv::Mat* image, const uint8_t lut[4][256]) {
  const int c = image->channels();
  const size_t row = static_cast<size_t>(image->cols) * static_cast<size_t>(c);
  if (image->isContinuous()) {
    LookUpRow(image->data, row * static_cast<size_t>(image->rows), c, lut);
    return;
  }
  for (int y = 0; y < image->rows; ++y) LookUpRow(image->ptr<uint8_t>(y), row, c, lut);
}

namespace {

inline float RangeMapOne(float x, const RangeMapParams& m) {
  float t = (x - m.a_min) / m.span;
  if (m.rescale) {
    const float scaled = t * m.scale;  // two roundings, as torch's mul then add
    t = scaled + m.offset;
  }
  if (m.clip) t = std::min(std::max(t, m.lo), m.hi);
  return t;
}

#ifdef DSPIPE_TRANSFORMS_X86
bool HaveAvx2() {
  static const bool have = __builtin_cpu_supports("avx2");
  return have;
}

__attribute__((target("avx2"))) size_t RangeMapAvx2(float* p, size_t n, const RangeMapParams& m) {
  const __m256 a = _mm256_set1_ps(m.a_min), span = _mm256_set1_ps(m.span);
  const __m256 scale = _mm256_set1_ps(m.scale), offset = _mm256_set1_ps(m.offset);
  const __m256 lo = _mm256_set1_ps(m.lo), hi = _mm256_set1_ps(m.hi);
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    __m256 t = _mm256_div_ps(_mm256_sub_ps(_mm256_loadu_ps(p + i), a), span);
    if (m.rescale) t = _mm256_add_ps(_mm256_mul_ps(t, scale), offset);
    // max_ps / min_ps return their second operand when one is NaN: t, as std::max(t, lo) and
    // std::min(t, hi) return t.
    if (m.clip) t = _mm256_min_ps(hi, _mm256_max_ps(lo, t));
    _mm256_storeu_ps(p + i, t);
  }
  return i;
}
#endif

}  // namespace

void RangeMapRow(float* p, size_t n, const RangeMapParams& m) {
  size_t i = 0;
#ifdef DSPIPE_TRANSFORMS_X86
  if (HaveAvx2()) i = RangeMapAvx2(p, n, m);
#endif
  for (; i < n; ++i) p[i] = RangeMapOne(p[i], m);
}

namespace {

// The ziggurat's tables (Marsaglia and Tsang, J. Stat. Softw. 5(8), 2000), 256 layers, for a
// signed 24-bit value h: layer i's rectangle holds |h| < k[i], where the value is h * w[i].
struct Ziggurat {
  static constexpr double kR = 3.6541528853610088;  // the base layer's right edge
  static constexpr double kV = 0.00492867323399;    // each layer's area
  int32_t k[256];
  float w[256];
  double f[256];
  Ziggurat() {
    const double m = 8388608.0;  // 2^23
    double d = kR, t = d;
    const double q = kV / std::exp(-0.5 * d * d);
    k[0] = static_cast<int32_t>((d / q) * m), k[1] = 0;
    w[0] = static_cast<float>(q / m), w[255] = static_cast<float>(d / m);
    f[0] = 1.0, f[255] = std::exp(-0.5 * d * d);
    for (int i = 254; i >= 1; --i) {
      d = std::sqrt(-2.0 * std::log(kV / d + std::exp(-0.5 * d * d)));
      k[i + 1] = static_cast<int32_t>((d / t) * m);
      t = d;
      f[i] = std::exp(-0.5 * d * d);
      w[i] = static_cast<float>(d / m);
    }
  }
};
const Ziggurat& Zig() {
  static const Ziggurat z;
  return z;
}

// Value j's first 32-bit try: half j % 2 of counter word j / 2 (two values a word).
inline uint32_t NormalWord(uint64_t seed, uint64_t j) {
  const uint64_t word = Word(seed, j >> 1);
  return static_cast<uint32_t>((j & 1) != 0 ? word >> 32 : word);
}

// A 32-bit try whose value fell outside its rectangle: the wedge or tail test, then retries
// from `slow` until one is taken.
float NormalSlow(uint32_t u, Rng* slow) {
  const Ziggurat& z = Zig();
  for (;;) {
    const int i = static_cast<int>(u & 255);
    const int32_t h = static_cast<int32_t>(u) >> 8;  // signed 24 bits
    const float x = static_cast<float>(h) * z.w[i];
    if (std::abs(h) < z.k[i]) return x;
    if (i == 0) {
      double a, b;
      do {
        a = -std::log(1.0 - slow->Uniform()) / Ziggurat::kR;
        b = -std::log(1.0 - slow->Uniform());
      } while (b + b < a * a);
      return static_cast<float>(h > 0 ? Ziggurat::kR + a : -Ziggurat::kR - a);
    }
    const double xd = x;
    if (z.f[i] + slow->Uniform() * (z.f[i - 1] - z.f[i]) < std::exp(-0.5 * xd * xd)) return x;
    u = static_cast<uint32_t>(slow->Next());
  }
}

inline float NormalFirst(uint32_t u, Rng* slow) {
  const Ziggurat& z = Zig();
  const int i = static_cast<int>(u & 255);
  const int32_t h = static_cast<int32_t>(u) >> 8;
  if (std::abs(h) < z.k[i]) return static_cast<float>(h) * z.w[i];
  return NormalSlow(u, slow);
}

// p += mean + sd * z in float32, two roundings (this file is built with -ffp-contract=off, so
// the vector path's multiply and adds stay apart as here).
inline void AddNormalOne(float* p, float mean, float sd, float z) { *p += mean + sd * z; }

#ifdef DSPIPE_TRANSFORMS_X86
bool HaveAvx512Dq() {
  static const bool have = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512dq");
  return have;
}

// 16 values a step from p (value j = first, even): 8 counter words mixed in parallel, each two
// 32-bit tries in memory order (the low half value j, the high half j + 1).
__attribute__((target("avx512f,avx512dq"))) size_t AddNormalAvx512(float* p, size_t n, float mean,
                                                                   float sd, uint64_t seed,
                                                                   uint64_t first, Rng* slow) {
  const Ziggurat& z = Zig();
  const __m512i golden = _mm512_set1_epi64(static_cast<long long>(kGolden));
  const __m512i m1 = _mm512_set1_epi64(static_cast<long long>(0xBF58476D1CE4E5B9ULL));
  const __m512i m2 = _mm512_set1_epi64(static_cast<long long>(0x94D049BB133111EBULL));
  const __m512i lanes = _mm512_setr_epi64(0, 1, 2, 3, 4, 5, 6, 7);
  const __m512i layer = _mm512_set1_epi32(255);
  const __m512 vmean = _mm512_set1_ps(mean), vsd = _mm512_set1_ps(sd);
  size_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const uint64_t word0 = (first + i) >> 1;
    const __m512i c = _mm512_add_epi64(_mm512_set1_epi64(static_cast<long long>(word0)), lanes);
    __m512i u = _mm512_add_epi64(_mm512_set1_epi64(static_cast<long long>(seed)),
                                 _mm512_mullo_epi64(c, golden));
    u = _mm512_mullo_epi64(_mm512_xor_si512(u, _mm512_srli_epi64(u, 30)), m1);
    u = _mm512_mullo_epi64(_mm512_xor_si512(u, _mm512_srli_epi64(u, 27)), m2);
    u = _mm512_xor_si512(u, _mm512_srli_epi64(u, 31));
    const __m512i idx = _mm512_and_si512(u, layer);
    const __m512i h = _mm512_srai_epi32(u, 8);
    const __m512i kk = _mm512_i32gather_epi32(idx, z.k, 4);
    const __m512 ww = _mm512_i32gather_ps(idx, z.w, 4);
    __m512 x = _mm512_mul_ps(_mm512_cvtepi32_ps(h), ww);
    const __mmask16 inside = _mm512_cmplt_epi32_mask(_mm512_abs_epi32(h), kk);
    if (inside != 0xFFFF) {  // the other lanes in order, as the plain loop takes them
      alignas(64) uint32_t words[16];
      alignas(64) float xs[16];
      _mm512_store_si512(words, u);
      _mm512_store_ps(xs, x);
      for (int l = 0; l < 16; ++l) {
        if (!(inside >> l & 1)) xs[l] = NormalSlow(words[l], slow);
      }
      x = _mm512_load_ps(xs);
    }
    const __m512 add = _mm512_add_ps(vmean, _mm512_mul_ps(vsd, x));
    _mm512_storeu_ps(p + i, _mm512_add_ps(_mm512_loadu_ps(p + i), add));
  }
  return i;
}
#endif

}  // namespace

void AddNormalRow(float* p, size_t n, double mean, double sd, uint64_t seed, uint64_t first,
                  Rng* slow) {
  const auto m = static_cast<float>(mean), s = static_cast<float>(sd);
  size_t i = 0;
  if (n > 0 && (first & 1) != 0) {  // the vector steps start on a word's first value
    AddNormalOne(p, m, s, NormalFirst(NormalWord(seed, first), slow));
    i = 1;
  }
#ifdef DSPIPE_TRANSFORMS_X86
  if (HaveAvx512Dq()) i += AddNormalAvx512(p + i, n - i, m, s, seed, first + i, slow);
#endif
  for (; i < n; ++i) AddNormalOne(p + i, m, s, NormalFirst(NormalWord(seed, first + i), slow));
}

}  // namespace dspipe::transforms
