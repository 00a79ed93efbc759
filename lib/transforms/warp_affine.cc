// SPDX-License-Identifier: Apache-2.0
// cv::warpAffine for uint8 images of 1 to 4 channels, nearest or bilinear, constant or
// replicated border: the same integer arithmetic as OpenCV 4.6 (warpAffine's 10-bit fixed-point
// coordinates, remap's 5-bit fractions and 15-bit weights), so the same bytes, without its
// per-block map buffers. AVX-512 (F, BW), 16 pixels a step: masked gathers of the taps (32-bit;
// three channels one 64-bit read per source row), the two-stage blend in 16-bit multiply-adds
// (the same integer sums), a constant border's value where no tap is inside; the lanes a step
// cannot take (taps on both sides of an edge, a replicated border) follow remap's rules one by
// one. Without AVX-512, cv::warpAffine itself (faster than a plain loop).
#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <opencv2/imgproc.hpp>
#include <vector>

#include "transforms/simd.h"

// GCC 12's AVX-512 headers trip -W(maybe-)uninitialized on their own _mm512_undefined_*().
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"

namespace dspipe::transforms {
namespace {

constexpr int kAbBits = 10;  // warpAffine's AB_BITS: max(10, INTER_BITS)
constexpr int kAbScale = 1 << kAbBits;
constexpr int kInterBits = 5;  // cv::INTER_BITS
constexpr int kTab = 1 << kInterBits;

// OpenCV's cvRound(double) on x86-64 (cvtsd2si: to nearest, ties to even).
int CvRound(double v) { return static_cast<int>(std::lrint(v)); }
int16_t Sat16(int v) { return static_cast<int16_t>(std::clamp(v, -32768, 32767)); }
int Clip(int x, int a, int b) { return x >= a ? (x < b ? x : b - 1) : a; }  // remap's clip

// Bilinear weights of remap's 8-bit table summed in 10 bits: OpenCV's 15-bit weights are these
// times 32 (exact: products of k / 32 in float), and (sum * 32 + 2^14) >> 15 equals
// (sum + 2^9) >> 10. Its (0, 0) entry saturates to 32767 instead of 32768, which gives the same
// byte for every value up to 255.
inline uint8_t Blend(int v0, int v1, int v2, int v3, int fx, int fy) {
  const int w0 = (kTab - fx) * (kTab - fy), w1 = fx * (kTab - fy), w2 = (kTab - fx) * fy,
            w3 = fx * fy;
  return static_cast<uint8_t>((v0 * w0 + v1 * w1 + v2 * w2 + v3 * w3 + (1 << 9)) >> 10);
}

bool HaveAvx512() {
  static const bool have = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw");
  return have;
}

#define DSPIPE_AVX512 __attribute__((target("avx512f,avx512bw")))

// lo in the low 16 bits of each lane, hi in the high.
DSPIPE_AVX512 inline __m512i Pair(__m512i lo, __m512i hi) {
  return _mm512_or_si512(lo, _mm512_slli_epi32(hi, 16));
}
// (v0 (32 - fx) + v1 fx) per row, then (h0 (32 - fy) + h1 fy + round) >> 10.
DSPIPE_AVX512 inline __m512i Blend16(__m512i top, __m512i bottom, __m512i wx, __m512i wy,
                                     __m512i round) {
  const __m512i h = Pair(_mm512_madd_epi16(top, wx), _mm512_madd_epi16(bottom, wx));
  return _mm512_srli_epi32(_mm512_add_epi32(_mm512_madd_epi16(h, wy), round), 10);
}
// 16 pixels of 3 bytes (the low 3 of each lane) stored as 48 contiguous bytes.
DSPIPE_AVX512 inline void Store3(uint8_t* d, __m512i pix) {
  // 4 pixels to the front of each 128-bit lane, then the lanes' 12 bytes together.
  const __m512i pack =
      _mm512_shuffle_epi8(pix, _mm512_broadcast_i32x4(_mm_setr_epi8(0, 1, 2, 4, 5, 6, 8, 9, 10, 12,
                                                                    13, 14, -1, -1, -1, -1)));
  const __m512i packed = _mm512_permutexvar_epi32(
      _mm512_setr_epi32(0, 1, 2, 4, 5, 6, 8, 9, 10, 12, 13, 14, 15, 15, 15, 15), pack);
  _mm512_mask_storeu_epi8(d, (__mmask64{1} << 48) - 1, packed);
}

// Byte `b` of each 32-bit lane of v, as an int32.
DSPIPE_AVX512 inline __m512i Byte(__m512i v, int b) {
  return _mm512_and_si512(_mm512_srli_epi32(v, 8 * b), _mm512_set1_epi32(0xFF));
}

// The source as the pixel loops see it.
struct Source {
  const uint8_t* s0;
  size_t step;
  int w, h;
  unsigned w1, h1;  // remap's width1 / height1: max(w - 1, 0), max(h - 1, 0)
  bool constant;    // BORDER_CONSTANT, else BORDER_REPLICATE
  const uint8_t* cval;
};

// One bilinear output pixel from its 5-bit fixed-point source position: remap's rules.
template <int CN>
void LinearPixel(const Source& s, uint8_t* d, int xf, int yf) {
  const int sx = Sat16(xf >> kInterBits), sy = Sat16(yf >> kInterBits);
  const int fx = xf & (kTab - 1), fy = yf & (kTab - 1);
  const size_t step = s.step;
  if (static_cast<unsigned>(sx) < s.w1 && static_cast<unsigned>(sy) < s.h1) {
    const uint8_t* p = s.s0 + sy * step + sx * CN;
    for (int k = 0; k < CN; ++k) {
      d[k] = Blend(p[k], p[k + CN], p[step + k], p[step + k + CN], fx, fy);
    }
    return;
  }
  const int w = s.w, h = s.h;
  if (s.constant && (sx >= w || sx + 1 < 0 || sy >= h || sy + 1 < 0)) {
    for (int k = 0; k < CN; ++k) d[k] = s.cval[k];
    return;
  }
  int x_0, x_1, y_0, y_1;
  if (!s.constant) {
    x_0 = Clip(sx, 0, w), x_1 = Clip(sx + 1, 0, w);
    y_0 = Clip(sy, 0, h), y_1 = Clip(sy + 1, 0, h);
  } else {  // a tap outside reads the border value
    x_0 = sx >= 0 && sx < w ? sx : -1, x_1 = sx + 1 >= 0 && sx + 1 < w ? sx + 1 : -1;
    y_0 = sy >= 0 && sy < h ? sy : -1, y_1 = sy + 1 >= 0 && sy + 1 < h ? sy + 1 : -1;
  }
  for (int k = 0; k < CN; ++k) {
    auto at = [&](int yy, int xx) {
      return xx >= 0 && yy >= 0 ? s.s0[yy * step + xx * CN + k] : s.cval[k];
    };
    d[k] = Blend(at(y_0, x_0), at(y_0, x_1), at(y_1, x_0), at(y_1, x_1), fx, fy);
  }
}

// One nearest output pixel from its source pixel (sx, sy): remap's rules.
template <int CN>
void NearestPixel(const Source& s, uint8_t* d, int sx, int sy) {
  sx = Sat16(sx), sy = Sat16(sy);
  if (static_cast<unsigned>(sx) < static_cast<unsigned>(s.w) &&
      static_cast<unsigned>(sy) < static_cast<unsigned>(s.h)) {
    const uint8_t* p = s.s0 + sy * s.step + sx * CN;
    for (int k = 0; k < CN; ++k) d[k] = p[k];
    return;
  }
  if (s.constant) {
    for (int k = 0; k < CN; ++k) d[k] = s.cval[k];
    return;
  }
  sx = Clip(sx, 0, s.w), sy = Clip(sy, 0, s.h);
  const uint8_t* p = s.s0 + sy * s.step + sx * CN;
  for (int k = 0; k < CN; ++k) d[k] = p[k];
}

// A border pixel's CN bytes in one 32-bit lane, every lane.
DSPIPE_AVX512 inline __m512i BorderPixel(const uint8_t* cval, int cn) {
  uint32_t v = 0;
  for (int k = 0; k < cn; ++k) v |= static_cast<uint32_t>(cval[k]) << (8 * k);
  return _mm512_set1_epi32(static_cast<int>(v));
}

// Stores 16 pixels of CN bytes, one per 32-bit lane (the low CN bytes).
template <int CN>
DSPIPE_AVX512 inline void StorePixels(uint8_t* d, __m512i pix) {
  if constexpr (CN == 1) {
    _mm_storeu_si128(reinterpret_cast<__m128i*>(d), _mm512_cvtepi32_epi8(pix));
  } else if constexpr (CN == 4) {
    _mm512_storeu_si512(d, pix);
  } else {
    Store3(d, pix);
  }
}

// Three channels, 8 pixels (the mask's 8 lanes; the others 0): one 64-bit read per source row
// holds both taps (top row at off: R0 G0 B0 R1 G1 B1 . .; bottom row at off1 - 2, which ends at
// its last tap: . . R0 G0 B0 R1 G1 B1). Byte shuffles make each channel's (v0, v1) 16-bit
// pairs, the multiply-adds Blend's two stages. Returns each pixel's bytes in the low 3 bytes of
// a 32-bit lane.
DSPIPE_AVX512 inline __m256i Linear3Half(const uint8_t* s0, __m256i off, __m256i off1,
                                         __mmask8 mask, __m256i wx, __m256i wy) {
  constexpr char Z = -128;  // shuffle: zero the byte
  const __m512i t = _mm512_mask_i32gather_epi64(_mm512_setzero_si512(), mask, off, s0, 1);
  const __m512i b = _mm512_mask_i32gather_epi64(
      _mm512_setzero_si512(), mask, _mm256_sub_epi32(off1, _mm256_set1_epi32(2)), s0, 1);
  const __m512i t_rg =
      _mm512_broadcast_i32x4(_mm_setr_epi8(0, Z, 3, Z, 1, Z, 4, Z, 8, Z, 11, Z, 9, Z, 12, Z));
  const __m512i t_b =
      _mm512_broadcast_i32x4(_mm_setr_epi8(2, Z, 5, Z, Z, Z, Z, Z, 10, Z, 13, Z, Z, Z, Z, Z));
  const __m512i b_rg =
      _mm512_broadcast_i32x4(_mm_setr_epi8(2, Z, 5, Z, 3, Z, 6, Z, 10, Z, 13, Z, 11, Z, 14, Z));
  const __m512i b_b =
      _mm512_broadcast_i32x4(_mm_setr_epi8(4, Z, 7, Z, Z, Z, Z, Z, 12, Z, 15, Z, Z, Z, Z, Z));
  // Each pixel's 32-bit weight pair in both halves of its 64-bit lane.
  const __m512i wx2 = _mm512_cvtepu32_epi64(wx), wy2 = _mm512_cvtepu32_epi64(wy);
  const __m512i wxq = _mm512_or_si512(wx2, _mm512_slli_epi64(wx2, 32));
  const __m512i wyq = _mm512_or_si512(wy2, _mm512_slli_epi64(wy2, 32));
  const __m512i round = _mm512_set1_epi32(1 << 9);
  auto stage2 = [&](__m512i top, __m512i bottom) DSPIPE_AVX512 {
    const __m512i h = Pair(_mm512_madd_epi16(top, wxq), _mm512_madd_epi16(bottom, wxq));
    return _mm512_srli_epi32(_mm512_add_epi32(_mm512_madd_epi16(h, wyq), round), 10);
  };
  const __m512i rg = stage2(_mm512_shuffle_epi8(t, t_rg), _mm512_shuffle_epi8(b, b_rg));
  const __m512i bb = stage2(_mm512_shuffle_epi8(t, t_b), _mm512_shuffle_epi8(b, b_b));
  // Low 32 bits of each 64-bit lane: R | G << 8 | B << 16 (G sits in the high half of rg).
  const __m512i pix =
      _mm512_or_si512(_mm512_or_si512(rg, _mm512_srli_epi64(rg, 24)), _mm512_slli_epi64(bb, 16));
  return _mm512_cvtepi64_epi32(pix);
}

// Bilinear at the 16 output pixels x..x+15 of a row. Pixels with every tap inside the image
// get Blend's sums (h = v0 (32 - fx) + v1 fx per source row, then (h0 (32 - fy) + h1 fy + 2^9)
// >> 10, as 16-bit multiply-adds); with a constant border, pixels with no tap inside get the
// border value. Returns the lanes left for LinearPixel (taps on both sides of an edge; any
// outside with a replicated border); their bytes are written, wrong, first.
template <int CN>
DSPIPE_AVX512 __mmask16 LinearGroup(const Source& s, uint8_t* d, int x0, int y0, const int* adelta,
                                    const int* bdelta) {
  const __m512i xf = _mm512_srai_epi32(
      _mm512_add_epi32(_mm512_set1_epi32(x0), _mm512_loadu_si512(adelta)), kAbBits - kInterBits);
  const __m512i yf = _mm512_srai_epi32(
      _mm512_add_epi32(_mm512_set1_epi32(y0), _mm512_loadu_si512(bdelta)), kAbBits - kInterBits);
  const __m512i sx = _mm512_srai_epi32(xf, kInterBits), sy = _mm512_srai_epi32(yf, kInterBits);
  const __mmask16 inside = _mm512_cmplt_epu32_mask(sx, _mm512_set1_epi32(static_cast<int>(s.w1))) &
                           _mm512_cmplt_epu32_mask(sy, _mm512_set1_epi32(static_cast<int>(s.h1)));
  __mmask16 outside = 0;
  if (s.constant) {
    const __m512i minus1 = _mm512_set1_epi32(-1);
    outside =
        _mm512_cmpge_epi32_mask(sx, _mm512_set1_epi32(s.w)) | _mm512_cmplt_epi32_mask(sx, minus1) |
        _mm512_cmpge_epi32_mask(sy, _mm512_set1_epi32(s.h)) | _mm512_cmplt_epi32_mask(sy, minus1);
  }
  const __mmask16 todo = static_cast<__mmask16>(~(inside | outside));
  __m512i pix = BorderPixel(s.cval, CN);
  if (inside != 0) {
    const __m512i tab = _mm512_set1_epi32(kTab), low = _mm512_set1_epi32(kTab - 1);
    const __m512i fx = _mm512_and_si512(xf, low), fy = _mm512_and_si512(yf, low);
    // (32 - f) in the low 16 bits of each lane, f in the high: one multiply-add blends.
    const __m512i wx = _mm512_or_si512(_mm512_sub_epi32(tab, fx), _mm512_slli_epi32(fx, 16));
    const __m512i wy = _mm512_or_si512(_mm512_sub_epi32(tab, fy), _mm512_slli_epi32(fy, 16));
    const __m512i off =
        _mm512_add_epi32(_mm512_mullo_epi32(sy, _mm512_set1_epi32(static_cast<int>(s.step))),
                         CN == 1 ? sx : _mm512_mullo_epi32(sx, _mm512_set1_epi32(CN)));
    const __m512i off1 = _mm512_add_epi32(off, _mm512_set1_epi32(static_cast<int>(s.step)));
    const __m512i round = _mm512_set1_epi32(1 << 9);
    const __m512i zero = _mm512_setzero_si512();
    // Reads stay inside the 2x2 taps' bytes (a ROI's last row may end its buffer): 1 channel,
    // top at off (p00 p01 . .), bottom at off1 - 2 (. . p10 p11); 4 channels, the four pixels.
    auto gather = [&](__m512i o, int add) DSPIPE_AVX512 {
      return _mm512_mask_i32gather_epi32(zero, inside, _mm512_add_epi32(o, _mm512_set1_epi32(add)),
                                         s.s0, 1);
    };
    __m512i got;
    if constexpr (CN == 1) {
      const __m512i t = gather(off, 0), b = gather(off1, -2);
      got = Blend16(Pair(Byte(t, 0), Byte(t, 1)), Pair(Byte(b, 2), Byte(b, 3)), wx, wy, round);
    } else if constexpr (CN == 3) {
      const __m256i lo = Linear3Half(s.s0, _mm512_castsi512_si256(off),
                                     _mm512_castsi512_si256(off1), static_cast<__mmask8>(inside),
                                     _mm512_castsi512_si256(wx), _mm512_castsi512_si256(wy));
      const __m256i hi =
          Linear3Half(s.s0, _mm512_extracti64x4_epi64(off, 1), _mm512_extracti64x4_epi64(off1, 1),
                      static_cast<__mmask8>(inside >> 8), _mm512_extracti64x4_epi64(wx, 1),
                      _mm512_extracti64x4_epi64(wy, 1));
      got = _mm512_inserti64x4(_mm512_castsi256_si512(lo), hi, 1);
    } else {
      const __m512i tl = gather(off, 0), tr = gather(off, CN);
      const __m512i bl = gather(off1, 0), br = gather(off1, CN);
      got = zero;
      for (int k = 0; k < CN; ++k) {
        const __m512i r =
            Blend16(Pair(Byte(tl, k), Byte(tr, k)), Pair(Byte(bl, k), Byte(br, k)), wx, wy, round);
        got = _mm512_or_si512(got, _mm512_slli_epi32(r, 8 * k));
      }
    }
    pix = _mm512_mask_mov_epi32(pix, inside, got);
  }
  StorePixels<CN>(d, pix);
  return todo;
}

// Nearest at the 16 output pixels x..x+15 of a row: pixels whose source is inside the image
// read it, with a constant border the others get its value. Returns the lanes left for
// NearestPixel (outside with a replicated border; the image's first bytes, see kBack).
template <int CN>
DSPIPE_AVX512 __mmask16 NearestGroup(const Source& s, uint8_t* d, int x0, int y0, const int* adelta,
                                     const int* bdelta) {
  const __m512i sx = _mm512_srai_epi32(
      _mm512_add_epi32(_mm512_set1_epi32(x0), _mm512_loadu_si512(adelta)), kAbBits);
  const __m512i sy = _mm512_srai_epi32(
      _mm512_add_epi32(_mm512_set1_epi32(y0), _mm512_loadu_si512(bdelta)), kAbBits);
  __mmask16 inside = _mm512_cmplt_epu32_mask(sx, _mm512_set1_epi32(s.w)) &
                     _mm512_cmplt_epu32_mask(sy, _mm512_set1_epi32(s.h));
  const __m512i off =
      _mm512_add_epi32(_mm512_mullo_epi32(sy, _mm512_set1_epi32(static_cast<int>(s.step))),
                       CN == 1 ? sx : _mm512_mullo_epi32(sx, _mm512_set1_epi32(CN)));
  // Each pixel's bytes at the top of a 32-bit read that ends with them (4 - CN bytes before
  // it: none before the image's first pixels, which are left to NearestPixel).
  constexpr int kBack = 4 - CN;
  const __mmask16 first =
      kBack > 0 ? _mm512_mask_cmplt_epi32_mask(inside, off, _mm512_set1_epi32(kBack)) : 0;
  inside &= static_cast<__mmask16>(~first);
  const __mmask16 outside = s.constant ? static_cast<__mmask16>(~(inside | first)) : 0;
  const __mmask16 todo = static_cast<__mmask16>(~(inside | outside));
  const __m512i v = _mm512_srli_epi32(
      _mm512_mask_i32gather_epi32(_mm512_setzero_si512(), inside,
                                  _mm512_sub_epi32(off, _mm512_set1_epi32(kBack)), s.s0, 1),
      8 * kBack);
  StorePixels<CN>(d, _mm512_mask_mov_epi32(BorderPixel(s.cval, CN), inside, v));
  return todo;
}

// One output row: 16 pixels a vector step (WarpAffine runs only with AVX-512), then the lanes a
// step leaves and the row's last cols % 16 pixels one by one, by remap's rules.
template <int CN, bool kLinear>
void WarpRow(const Source& s, uint8_t* d, int cols, int x0, int y0, const int* adelta,
             const int* bdelta) {
  auto pixel = [&](int x) {
    if constexpr (kLinear) {
      LinearPixel<CN>(s, d + x * CN, (x0 + adelta[x]) >> (kAbBits - kInterBits),
                      (y0 + bdelta[x]) >> (kAbBits - kInterBits));
    } else {
      NearestPixel<CN>(s, d + x * CN, (x0 + adelta[x]) >> kAbBits, (y0 + bdelta[x]) >> kAbBits);
    }
  };
  int x = 0;
  for (; x + 16 <= cols; x += 16) {
    unsigned todo = kLinear ? LinearGroup<CN>(s, d + x * CN, x0, y0, adelta + x, bdelta + x)
                            : NearestGroup<CN>(s, d + x * CN, x0, y0, adelta + x, bdelta + x);
    for (; todo != 0; todo &= todo - 1) pixel(x + __builtin_ctz(todo));
  }
  for (; x < cols; ++x) pixel(x);
}

template <int CN>
void WarpRows(const cv::Mat& src, cv::Mat* dst, const double* m, bool linear, int mode,
              const uint8_t* cval) {
  thread_local std::vector<int> delta;
  const int cols = dst->cols;
  delta.resize(2 * static_cast<size_t>(cols));
  int* adelta = delta.data();
  int* bdelta = adelta + cols;
  for (int x = 0; x < cols; ++x) {
    adelta[x] = CvRound(m[0] * x * kAbScale);
    bdelta[x] = CvRound(m[3] * x * kAbScale);
  }
  const int round_delta = linear ? kAbScale / kTab / 2 : kAbScale / 2;
  const Source s{src.data,
                 src.step[0],
                 src.cols,
                 src.rows,
                 static_cast<unsigned>(std::max(src.cols - 1, 0)),
                 static_cast<unsigned>(std::max(src.rows - 1, 0)),
                 mode == cv::BORDER_CONSTANT,
                 cval};
  for (int y = 0; y < dst->rows; ++y) {
    const int x0 = CvRound((m[1] * y + m[2]) * kAbScale) + round_delta;
    const int y0 = CvRound((m[4] * y + m[5]) * kAbScale) + round_delta;
    uint8_t* d = dst->ptr<uint8_t>(y);
    if (linear) {
      WarpRow<CN, true>(s, d, cols, x0, y0, adelta, bdelta);
    } else {
      WarpRow<CN, false>(s, d, cols, x0, y0, adelta, bdelta);
    }
  }
}

}  // namespace

void WarpAffine(const cv::Mat& src, cv::Mat* dst, const cv::Mat& matrix, cv::Size size, int flags,
                int border_mode, const cv::Scalar& value) {
  const int interp = flags & cv::INTER_MAX;
  const int cn = src.channels();
  double m[6];
  bool ours = HaveAvx512() && src.depth() == CV_8U && cn != 2 && cn <= 4 && src.dims == 2 &&
              !src.empty() && src.cols < 32767 && src.rows < 32767 &&
              src.step[0] * src.rows < (size_t{1} << 31) &&
              (interp == cv::INTER_NEAREST || interp == cv::INTER_LINEAR) &&
              (border_mode == cv::BORDER_CONSTANT || border_mode == cv::BORDER_REPLICATE) &&
              matrix.rows == 2 && matrix.cols == 3 && matrix.type() == CV_64F && size.width > 0 &&
              size.height > 0;
  if (ours) {
    for (int i = 0; i < 6; ++i) m[i] = matrix.at<double>(i / 3, i % 3);
    if (!(flags & cv::WARP_INVERSE_MAP)) {  // warpAffine's own inversion, step by step
      double det = m[0] * m[4] - m[1] * m[3];
      det = det != 0 ? 1. / det : 0;
      const double a11 = m[4] * det, a22 = m[0] * det;
      m[0] = a11;
      m[1] *= -det;
      m[3] *= -det;
      m[4] = a22;
      const double b1 = -m[0] * m[2] - m[1] * m[5];
      const double b2 = -m[3] * m[2] - m[4] * m[5];
      m[2] = b1;
      m[5] = b2;
    }
    // Every fixed-point coordinate must fit in an int as OpenCV's do (else: OpenCV itself).
    const double lim = static_cast<double>(1 << 30) / kAbScale;
    for (int r = 0; r < 2 && ours; ++r) {
      const double* q = m + 3 * r;
      ours = std::isfinite(q[0]) && std::isfinite(q[1]) && std::isfinite(q[2]) &&
             std::abs(q[0]) * size.width + std::abs(q[1]) * size.height + std::abs(q[2]) < lim;
    }
  }
  const bool overlaps = dst->data != nullptr && dst->data == src.data;
  if (!ours || overlaps) {
    cv::warpAffine(src, *dst, matrix, size, flags, border_mode, value);
    return;
  }
  dst->create(size, src.type());
  uint8_t cval[4];
  for (int k = 0; k < 4; ++k) cval[k] = cv::saturate_cast<uint8_t>(value[k]);
  const bool linear = interp == cv::INTER_LINEAR;
  switch (cn) {
    case 1:
      WarpRows<1>(src, dst, m, linear, border_mode, cval);
      break;
    case 3:
      WarpRows<3>(src, dst, m, linear, border_mode, cval);
      break;
    default:
      WarpRows<4>(src, dst, m, linear, border_mode, cval);
      break;
  }
}

}  // namespace dspipe::transforms
