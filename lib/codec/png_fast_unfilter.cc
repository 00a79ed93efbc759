// SPDX-License-Identifier: Apache-2.0
// PNG row unfiltering: a plain version (the reference), an SSE2 version (x86-64 baseline) and an
// AVX2 version compiled with a target attribute (no -mavx2 build) and chosen at run time.
//
// What SIMD does here: Up is a vector add (16 or 32 bytes a step). Sub at 1, 2 and 4 bytes per
// pixel is a prefix sum inside each 16-byte block (log-step shifted adds) plus the carry of the
// previous block's last pixel. Sub at 3 bytes, Avg and Paeth at 3 and 4 bytes run one pixel per
// step in a vector register (libpng's approach: the pixel's bytes in parallel, Paeth in 16-bit
// lanes). Avg and Paeth at 1 and 2 bytes per pixel are a serial chain per byte: plain code,
// but with the chain in registers and a branchless Paeth.
#include <algorithm>
#include <cstdlib>
#include <cstring>

#include "codec/png_fast.h"

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define DSPIPE_PNG_X86 1
#endif

namespace dspipe::codec {
namespace {

inline uint8_t Paeth(int a, int b, int c) {
  const int p = a + b - c;
  const int pa = p > a ? p - a : a - p;
  const int pb = p > b ? p - b : b - p;
  const int pc = p > c ? p - c : c - p;
  if (pa <= pb && pa <= pc) return static_cast<uint8_t>(a);
  return static_cast<uint8_t>(pb <= pc ? b : c);
}

// Plain loops; also the tails of the SIMD versions. Bytes [0, start) are already done.
void UnfilterScalar(int filter, const uint8_t* src, const uint8_t* prev, uint8_t* out, size_t n,
                    int bpp, size_t start = 0) {
  const size_t b = static_cast<size_t>(bpp);
  switch (filter) {
    case 0:
      if (out != src) std::memcpy(out + start, src + start, n - start);
      return;
    case 1:
      for (size_t i = start; i < n; ++i) {
        out[i] = static_cast<uint8_t>(src[i] + (i >= b ? out[i - b] : 0));
      }
      return;
    case 2:
      for (size_t i = start; i < n; ++i) out[i] = static_cast<uint8_t>(src[i] + prev[i]);
      return;
    case 3:
      for (size_t i = start; i < n; ++i) {
        const int left = i >= b ? out[i - b] : 0;
        out[i] = static_cast<uint8_t>(src[i] + ((left + prev[i]) >> 1));
      }
      return;
    default:
      for (size_t i = start; i < n; ++i) {
        const int left = i >= b ? out[i - b] : 0;
        const int upleft = i >= b ? prev[i - b] : 0;
        out[i] = static_cast<uint8_t>(src[i] + Paeth(left, prev[i], upleft));
      }
      return;
  }
}

#ifdef DSPIPE_PNG_X86

#define DSPIPE_INLINE inline __attribute__((always_inline))

// One pixel of kBpp bytes into the low lanes of a register. `last` (the row's last pixel)
// reads exactly kBpp bytes; otherwise 4 (for 3-byte pixels one byte of the next pixel, which is
// inside the row).
template <int kBpp>
DSPIPE_INLINE __m128i LoadPixel(const uint8_t* p, bool last) {
  uint32_t v = 0;
  if (kBpp == 4 || !last) {
    std::memcpy(&v, p, 4);
  } else {
    std::memcpy(&v, p, kBpp);
  }
  return _mm_cvtsi32_si128(static_cast<int>(v));
}

// Stores a pixel; a 3-byte pixel that is not the last is stored as 4 bytes (the extra byte is
// the next pixel's, rewritten on the next step; the caller has already loaded it).
template <int kBpp>
DSPIPE_INLINE void StorePixel(uint8_t* p, __m128i v, bool last) {
  const uint32_t u = static_cast<uint32_t>(_mm_cvtsi128_si32(v));
  if (kBpp == 4 || !last) {
    std::memcpy(p, &u, 4);
  } else {
    std::memcpy(p, &u, kBpp);
  }
}

DSPIPE_INLINE __m128i Select(__m128i mask, __m128i a, __m128i b) {
  return _mm_or_si128(_mm_and_si128(mask, a), _mm_andnot_si128(mask, b));
}

DSPIPE_INLINE __m128i Abs16(__m128i x) {
  return _mm_max_epi16(x, _mm_sub_epi16(_mm_setzero_si128(), x));
}

// kFilter 1 (Sub), 3 (Avg) or 4 (Paeth), one pixel per step. n is a multiple of kBpp.
template <int kFilter, int kBpp>
DSPIPE_INLINE void PerPixel(const uint8_t* src, const uint8_t* prev, uint8_t* out, size_t n) {
  if (n == 0) return;
  const __m128i zero = _mm_setzero_si128();
  __m128i a = zero, c = zero;  // left pixel (unfiltered), upper-left pixel
  __m128i x = LoadPixel<kBpp>(src, n == kBpp);
  for (size_t i = 0; i < n; i += kBpp) {
    const bool last = i + kBpp == n;
    const __m128i d = x;
    // Load the next source pixel before storing this one (in place, a 4-byte store of a 3-byte
    // pixel overwrites the next pixel's first byte).
    if (!last) x = LoadPixel<kBpp>(src + i + kBpp, i + 2 * kBpp == n);
    if constexpr (kFilter == 1) {
      a = _mm_add_epi8(d, a);
    } else if constexpr (kFilter == 3) {
      const __m128i b = LoadPixel<kBpp>(prev + i, last);
      // floor((a + b) / 2): pavgb rounds up, so subtract the carried-out low bit.
      const __m128i avg =
          _mm_sub_epi8(_mm_avg_epu8(a, b), _mm_and_si128(_mm_xor_si128(a, b), _mm_set1_epi8(1)));
      a = _mm_add_epi8(d, avg);
    } else {
      const __m128i b = LoadPixel<kBpp>(prev + i, last);
      const __m128i a16 = _mm_unpacklo_epi8(a, zero);
      const __m128i b16 = _mm_unpacklo_epi8(b, zero);
      const __m128i c16 = _mm_unpacklo_epi8(c, zero);
      __m128i pa = _mm_sub_epi16(b16, c16);  // p - a
      __m128i pb = _mm_sub_epi16(a16, c16);  // p - b
      __m128i pc = _mm_add_epi16(pa, pb);    // p - c
      pa = Abs16(pa);
      pb = Abs16(pb);
      pc = Abs16(pc);
      const __m128i smallest = _mm_min_epi16(pc, _mm_min_epi16(pa, pb));
      const __m128i nearest =
          Select(_mm_cmpeq_epi16(smallest, pa), a16,
                 Select(_mm_cmpeq_epi16(smallest, pb), b16, c16));
      a = _mm_add_epi8(d, _mm_packus_epi16(nearest, nearest));
      c = b;
    }
    StorePixel<kBpp>(out + i, a, last);
  }
}

// Sub at 1, 2 or 4 bytes per pixel: prefix sums over 16-byte blocks. Returns bytes done.
template <int kBpp>
DSPIPE_INLINE size_t SubBlocks(const uint8_t* src, uint8_t* out, size_t n) {
  __m128i carry = _mm_setzero_si128();  // the previous block's last pixel in every lane
  size_t i = 0;
  for (; i + 16 <= n; i += 16) {
    __m128i x = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i));
    x = _mm_add_epi8(x, _mm_slli_si128(x, kBpp));
    x = _mm_add_epi8(x, _mm_slli_si128(x, 2 * kBpp));
    if constexpr (kBpp <= 2) x = _mm_add_epi8(x, _mm_slli_si128(x, 4 * kBpp));
    if constexpr (kBpp == 1) x = _mm_add_epi8(x, _mm_slli_si128(x, 8));
    x = _mm_add_epi8(x, carry);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(out + i), x);
    if constexpr (kBpp == 4) {
      carry = _mm_shuffle_epi32(x, 0xFF);
    } else if constexpr (kBpp == 2) {
      carry = _mm_shuffle_epi32(_mm_shufflehi_epi16(x, 0xFF), 0xFF);
    } else {
      carry = _mm_shuffle_epi32(_mm_shufflehi_epi16(_mm_unpackhi_epi8(x, x), 0xFF), 0xFF);
    }
  }
  return i;
}

// Avg and Paeth at 1 and 2 bytes per pixel: a serial chain per byte; the left and upper-left
// values stay in registers (not reloaded from the row just stored) and Paeth's choice is
// branchless (conditional moves; its branches mispredict on noisy rows).
template <int kBpp>
DSPIPE_INLINE void AvgSmall(const uint8_t* src, const uint8_t* prev, uint8_t* out, size_t n) {
  int left[kBpp] = {};
  for (size_t i = 0; i < n; i += kBpp) {
    for (int k = 0; k < kBpp; ++k) {
      left[k] = (src[i + k] + ((left[k] + prev[i + k]) >> 1)) & 0xFF;
      out[i + k] = static_cast<uint8_t>(left[k]);
    }
  }
}

template <int kBpp>
DSPIPE_INLINE void PaethSmall(const uint8_t* src, const uint8_t* prev, uint8_t* out, size_t n) {
  int a[kBpp] = {}, c[kBpp] = {};
  for (size_t i = 0; i < n; i += kBpp) {
    for (int k = 0; k < kBpp; ++k) {
      const int b = prev[i + k];
      const int pa = std::abs(b - c[k]);
      const int pb = std::abs(a[k] - c[k]);
      const int pc = std::abs(a[k] + b - 2 * c[k]);
      const int bc = pb <= pc ? b : c[k];
      const int pred = pa <= std::min(pb, pc) ? a[k] : bc;
      a[k] = (src[i + k] + pred) & 0xFF;
      c[k] = b;
      out[i + k] = static_cast<uint8_t>(a[k]);
    }
  }
}

DSPIPE_INLINE size_t UpSse2(const uint8_t* src, const uint8_t* prev, uint8_t* out, size_t n) {
  size_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m128i x = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i));
    const __m128i b = _mm_loadu_si128(reinterpret_cast<const __m128i*>(prev + i));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(out + i), _mm_add_epi8(x, b));
  }
  return i;
}

// Everything but Up.
DSPIPE_INLINE void UnfilterNonUp(int filter, const uint8_t* src, const uint8_t* prev,
                                 uint8_t* out, size_t n, int bpp) {
  if (filter == 1) {
    switch (bpp) {
      case 1: return UnfilterScalar(1, src, prev, out, n, 1, SubBlocks<1>(src, out, n));
      case 2: return UnfilterScalar(1, src, prev, out, n, 2, SubBlocks<2>(src, out, n));
      case 3: return PerPixel<1, 3>(src, prev, out, n);
      default: return UnfilterScalar(1, src, prev, out, n, 4, SubBlocks<4>(src, out, n));
    }
  }
  if (bpp == 3) {
    return filter == 3 ? PerPixel<3, 3>(src, prev, out, n) : PerPixel<4, 3>(src, prev, out, n);
  }
  if (bpp == 4) {
    return filter == 3 ? PerPixel<3, 4>(src, prev, out, n) : PerPixel<4, 4>(src, prev, out, n);
  }
  if (bpp == 1) {
    return filter == 3 ? AvgSmall<1>(src, prev, out, n) : PaethSmall<1>(src, prev, out, n);
  }
  return filter == 3 ? AvgSmall<2>(src, prev, out, n) : PaethSmall<2>(src, prev, out, n);
}

void UnfilterSse2(int filter, const uint8_t* src, const uint8_t* prev, uint8_t* out, size_t n,
                  int bpp) {
  if (filter == 0) return UnfilterScalar(0, src, prev, out, n, bpp);
  if (filter == 2) return UnfilterScalar(2, src, prev, out, n, bpp, UpSse2(src, prev, out, n));
  UnfilterNonUp(filter, src, prev, out, n, bpp);
}

// Paeth at 3 and 4 bytes per pixel, one pixel per step, with a shorter serial chain than
// PerPixel's (the chain runs through the left pixel `a` only): a stays in 16-bit lanes (no pack
// and unpack on the chain; a bytewise add wraps it), p - a = b - c is computed off the chain,
// |x| is one pabsw (SSSE3) and the two choices are pblendvb (SSE4.1), both present on every
// AVX2 CPU. The choice is the same as Paeth()'s: a if pa <= min(pb, pc), else b if pb <= pc,
// else c.
template <int kBpp>
__attribute__((target("avx2"))) void PaethAvx2(const uint8_t* src, const uint8_t* prev,
                                               uint8_t* out, size_t n) {
  if (n == 0) return;
  const __m128i zero = _mm_setzero_si128();
  __m128i a = zero, c = zero;  // left and upper-left pixel, 16-bit lanes
  __m128i x = LoadPixel<kBpp>(src, n == kBpp);
  for (size_t i = 0; i < n; i += kBpp) {
    const bool last = i + kBpp == n;
    const __m128i d = _mm_unpacklo_epi8(x, zero);
    // Load the next source pixel before storing this one (see PerPixel).
    if (!last) x = LoadPixel<kBpp>(src + i + kBpp, i + 2 * kBpp == n);
    const __m128i b = _mm_unpacklo_epi8(LoadPixel<kBpp>(prev + i, last), zero);
    const __m128i pa_signed = _mm_sub_epi16(b, c);  // p - a
    const __m128i pa = _mm_abs_epi16(pa_signed);
    const __m128i pb_signed = _mm_sub_epi16(a, c);  // p - b
    const __m128i pb = _mm_abs_epi16(pb_signed);
    const __m128i pc = _mm_abs_epi16(_mm_add_epi16(pa_signed, pb_signed));  // p - c
    const __m128i b_or_c = _mm_blendv_epi8(b, c, _mm_cmpgt_epi16(pb, pc));
    const __m128i nearest =
        _mm_blendv_epi8(a, b_or_c, _mm_cmpgt_epi16(pa, _mm_min_epi16(pb, pc)));
    a = _mm_add_epi8(d, nearest);  // bytewise: the low byte wraps, the high byte stays 0
    c = b;
    StorePixel<kBpp>(out + i, _mm_packus_epi16(a, a), last);
  }
}

// AVX2 widens Up to 32 bytes a step, and Paeth at 3 and 4 bytes per pixel takes PaethAvx2. The
// other filters run one 16-byte block or one pixel per step; compiled for AVX2 they measured
// equal or slower (Avg at 3-4 bytes per pixel, bench/png), so they take the SSE2 code.
__attribute__((target("avx2"))) void UnfilterAvx2(int filter, const uint8_t* src,
                                                  const uint8_t* prev, uint8_t* out, size_t n,
                                                  int bpp) {
  if (filter == 4 && bpp == 3) return PaethAvx2<3>(src, prev, out, n);
  if (filter == 4 && bpp == 4) return PaethAvx2<4>(src, prev, out, n);
  if (filter != 2) return UnfilterSse2(filter, src, prev, out, n, bpp);
  size_t i = 0;
  for (; i + 32 <= n; i += 32) {
    const __m256i x = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(src + i));
    const __m256i b = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(prev + i));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + i), _mm256_add_epi8(x, b));
  }
  UnfilterScalar(2, src, prev, out, n, bpp, i);
}

#endif  // DSPIPE_PNG_X86

}  // namespace

UnfilterIsa BestUnfilterIsa() {
#ifdef DSPIPE_PNG_X86
  static const UnfilterIsa isa =
      __builtin_cpu_supports("avx2") ? UnfilterIsa::kAvx2 : UnfilterIsa::kSse2;
  return isa;
#else
  return UnfilterIsa::kScalar;
#endif
}

void UnfilterRow(UnfilterIsa isa, int filter, const uint8_t* src, const uint8_t* prev,
                 uint8_t* out, size_t n, int bpp) {
  // 16-bit RGB and RGBA (6 and 8 bytes a pixel): the SIMD code has None and Up, which do not
  // depend on the pixel size; Sub, Average and Paeth run the plain loop.
  if (bpp > 4 && filter != 0 && filter != 2) isa = UnfilterIsa::kScalar;
#ifdef DSPIPE_PNG_X86
  if (isa == UnfilterIsa::kAvx2 && BestUnfilterIsa() == UnfilterIsa::kAvx2) {
    return UnfilterAvx2(filter, src, prev, out, n, bpp);
  }
  if (isa != UnfilterIsa::kScalar) return UnfilterSse2(filter, src, prev, out, n, bpp);
#else
  (void)isa;
#endif
  UnfilterScalar(filter, src, prev, out, n, bpp);
}

}  // namespace dspipe::codec
