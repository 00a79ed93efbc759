// SPDX-License-Identifier: Apache-2.0
// cv::warpAffine for uint8 images of 1 to 4 channels, nearest or bilinear, constant or
// replicated border: the same integer arithmetic as OpenCV 4.6 (warpAffine's 10-bit fixed-point
// coordinates, remap's 5-bit fractions and 15-bit weights), so the same bytes, without its
// per-block map buffers. Interior pixels (every tap inside the image) take the fast loop; the
// rest follow remap's border rules one by one. With AVX-512 (F, BW), 16 interior pixels a step:
// four 32-bit gathers (the 2x2 taps), the two-stage blend in 16-bit multiply-adds (the same
// integer sums), 1, 3 and 4 channels; without it, cv::warpAffine itself (faster than a plain
// loop).
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

// 32-bit reads at byte offsets o + add of s0.
DSPIPE_AVX512 inline __m512i Gather(const uint8_t* s0, __m512i o, int add) {
  return _mm512_i32gather_epi32(_mm512_add_epi32(o, _mm512_set1_epi32(add)), s0, 1);
}
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

// Bilinear at 16 output pixels x..x+15 of a row, when all 16 have every tap inside the image
// (else false, nothing written): Blend's sums, h = v0 (32 - fx) + v1 fx per source row, then
// (h0 (32 - fy) + h1 fy + 2^9) >> 10, as two 16-bit multiply-add steps.
template <int CN>
DSPIPE_AVX512 bool LinearGroup(const uint8_t* s0, size_t step, unsigned w1, unsigned h1, uint8_t* d,
                               int x0, int y0, const int* adelta, const int* bdelta) {
  const __m512i xf = _mm512_srai_epi32(
      _mm512_add_epi32(_mm512_set1_epi32(x0), _mm512_loadu_si512(adelta)), kAbBits - kInterBits);
  const __m512i yf = _mm512_srai_epi32(
      _mm512_add_epi32(_mm512_set1_epi32(y0), _mm512_loadu_si512(bdelta)), kAbBits - kInterBits);
  const __m512i sx = _mm512_srai_epi32(xf, kInterBits), sy = _mm512_srai_epi32(yf, kInterBits);
  const __mmask16 inside = _mm512_cmplt_epu32_mask(sx, _mm512_set1_epi32(static_cast<int>(w1))) &
                           _mm512_cmplt_epu32_mask(sy, _mm512_set1_epi32(static_cast<int>(h1)));
  if (inside != 0xFFFF) return false;
  const __m512i tab = _mm512_set1_epi32(kTab), low = _mm512_set1_epi32(kTab - 1);
  const __m512i fx = _mm512_and_si512(xf, low), fy = _mm512_and_si512(yf, low);
  // (32 - f) in the low 16 bits of each lane, f in the high: one multiply-add gives the blend.
  const __m512i wx = _mm512_or_si512(_mm512_sub_epi32(tab, fx), _mm512_slli_epi32(fx, 16));
  const __m512i wy = _mm512_or_si512(_mm512_sub_epi32(tab, fy), _mm512_slli_epi32(fy, 16));
  const __m512i off =
      _mm512_add_epi32(_mm512_mullo_epi32(sy, _mm512_set1_epi32(static_cast<int>(step))),
                       CN == 1 ? sx : _mm512_mullo_epi32(sx, _mm512_set1_epi32(CN)));
  const __m512i off1 = _mm512_add_epi32(off, _mm512_set1_epi32(static_cast<int>(step)));
  // Gathers that stay inside the 2x2 taps' bytes (a ROI's last row may end its buffer):
  //   1 channel: top at off (p00 p01 ..), bottom at off1 - 2 (.. .. p10 p11);
  //   3 channels: left at off (R G B ..), right at off + 2 (.. R G B), each row;
  //   4 channels: the four pixels.
  const __m512i round = _mm512_set1_epi32(1 << 9);
  if constexpr (CN == 1) {
    const __m512i t = Gather(s0, off, 0), b = Gather(s0, off1, -2);
    const __m512i r =
        Blend16(Pair(Byte(t, 0), Byte(t, 1)), Pair(Byte(b, 2), Byte(b, 3)), wx, wy, round);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(d), _mm512_cvtepi32_epi8(r));
  } else {
    const int shift = CN == 3 ? 1 : 0;  // the right pixel's channel k is byte k + shift
    const int right = CN == 3 ? 2 : 4;
    const __m512i tl = Gather(s0, off, 0), tr = Gather(s0, off, right);
    const __m512i bl = Gather(s0, off1, 0), br = Gather(s0, off1, right);
    __m512i pix = _mm512_setzero_si512();
    for (int k = 0; k < CN; ++k) {
      const __m512i r = Blend16(Pair(Byte(tl, k), Byte(tr, k + shift)),
                                Pair(Byte(bl, k), Byte(br, k + shift)), wx, wy, round);
      pix = _mm512_or_si512(pix, _mm512_slli_epi32(r, 8 * k));
    }
    if constexpr (CN == 4) {
      _mm512_storeu_si512(d, pix);
    } else {
      Store3(d, pix);
    }
  }
  return true;
}

// Nearest at 16 output pixels whose sources are all inside the image (else false).
template <int CN>
DSPIPE_AVX512 bool NearestGroup(const uint8_t* s0, size_t step, int w, int h, uint8_t* d, int x0,
                                int y0, const int* adelta, const int* bdelta) {
  const __m512i sx = _mm512_srai_epi32(
      _mm512_add_epi32(_mm512_set1_epi32(x0), _mm512_loadu_si512(adelta)), kAbBits);
  const __m512i sy = _mm512_srai_epi32(
      _mm512_add_epi32(_mm512_set1_epi32(y0), _mm512_loadu_si512(bdelta)), kAbBits);
  const __mmask16 inside = _mm512_cmplt_epu32_mask(sx, _mm512_set1_epi32(w)) &
                           _mm512_cmplt_epu32_mask(sy, _mm512_set1_epi32(h));
  if (inside != 0xFFFF) return false;
  const __m512i off =
      _mm512_add_epi32(_mm512_mullo_epi32(sy, _mm512_set1_epi32(static_cast<int>(step))),
                       CN == 1 ? sx : _mm512_mullo_epi32(sx, _mm512_set1_epi32(CN)));
  // The pixel's bytes at the top of a 32-bit read that ends with them (4 - CN bytes before it:
  // none before the image's first pixels, so those groups take the plain loop).
  constexpr int kBack = 4 - CN;
  if (kBack > 0 && _mm512_cmplt_epi32_mask(off, _mm512_set1_epi32(kBack)) != 0) {
    return false;
  }
  const __m512i v = _mm512_srli_epi32(
      _mm512_i32gather_epi32(_mm512_sub_epi32(off, _mm512_set1_epi32(kBack)), s0, 1), 8 * kBack);
  if constexpr (CN == 1) {
    _mm_storeu_si128(reinterpret_cast<__m128i*>(d), _mm512_cvtepi32_epi8(v));
  } else if constexpr (CN == 4) {
    _mm512_storeu_si512(d, v);
  } else {
    Store3(d, v);
  }
  return true;
}

template <int CN>
void LinearRow(const cv::Mat& src, uint8_t* d, int cols, int x0, int y0, const int* adelta,
               const int* bdelta, int mode, const uint8_t* cval) {
  const int w = src.cols, h = src.rows;
  const unsigned w1 = static_cast<unsigned>(std::max(w - 1, 0)),
                 h1 = static_cast<unsigned>(std::max(h - 1, 0));
  const size_t step = src.step[0];
  const uint8_t* s0 = src.data;
  const bool vector = CN != 2 && HaveAvx512();
  int group_end = 0;  // pixels before it: a vector group already wrote them
  for (int x = 0; x < cols; ++x, d += CN) {
    if (vector && x >= group_end && x + 16 <= cols) {
      group_end = x + 16;
      if (LinearGroup<CN>(s0, step, w1, h1, d, x0, y0, adelta + x, bdelta + x)) {
        x += 15, d += 15 * CN;
        continue;
      }
    }
    const int xf = (x0 + adelta[x]) >> (kAbBits - kInterBits);
    const int yf = (y0 + bdelta[x]) >> (kAbBits - kInterBits);
    const int sx = Sat16(xf >> kInterBits), sy = Sat16(yf >> kInterBits);
    const int fx = xf & (kTab - 1), fy = yf & (kTab - 1);
    if (static_cast<unsigned>(sx) < w1 && static_cast<unsigned>(sy) < h1) {
      const uint8_t* p = s0 + sy * step + sx * CN;
      for (int k = 0; k < CN; ++k) {
        d[k] = Blend(p[k], p[k + CN], p[step + k], p[step + k + CN], fx, fy);
      }
      continue;
    }
    if (mode == cv::BORDER_CONSTANT && (sx >= w || sx + 1 < 0 || sy >= h || sy + 1 < 0)) {
      for (int k = 0; k < CN; ++k) d[k] = cval[k];
      continue;
    }
    int x_0, x_1, y_0, y_1;
    if (mode == cv::BORDER_REPLICATE) {
      x_0 = Clip(sx, 0, w), x_1 = Clip(sx + 1, 0, w);
      y_0 = Clip(sy, 0, h), y_1 = Clip(sy + 1, 0, h);
    } else {  // constant: a tap outside reads the border value
      x_0 = sx >= 0 && sx < w ? sx : -1, x_1 = sx + 1 >= 0 && sx + 1 < w ? sx + 1 : -1;
      y_0 = sy >= 0 && sy < h ? sy : -1, y_1 = sy + 1 >= 0 && sy + 1 < h ? sy + 1 : -1;
    }
    for (int k = 0; k < CN; ++k) {
      auto at = [&](int yy, int xx) {
        return xx >= 0 && yy >= 0 ? s0[yy * step + xx * CN + k] : cval[k];
      };
      d[k] = Blend(at(y_0, x_0), at(y_0, x_1), at(y_1, x_0), at(y_1, x_1), fx, fy);
    }
  }
}

template <int CN>
void NearestRow(const cv::Mat& src, uint8_t* d, int cols, int x0, int y0, const int* adelta,
                const int* bdelta, int mode, const uint8_t* cval) {
  const int w = src.cols, h = src.rows;
  const size_t step = src.step[0];
  const bool vector = CN != 2 && HaveAvx512();
  int group_end = 0;
  for (int x = 0; x < cols; ++x, d += CN) {
    if (vector && x >= group_end && x + 16 <= cols) {
      group_end = x + 16;
      if (NearestGroup<CN>(src.data, step, w, h, d, x0, y0, adelta + x, bdelta + x)) {
        x += 15, d += 15 * CN;
        continue;
      }
    }
    int sx = Sat16((x0 + adelta[x]) >> kAbBits), sy = Sat16((y0 + bdelta[x]) >> kAbBits);
    if (static_cast<unsigned>(sx) < static_cast<unsigned>(w) &&
        static_cast<unsigned>(sy) < static_cast<unsigned>(h)) {
      const uint8_t* p = src.data + sy * step + sx * CN;
      for (int k = 0; k < CN; ++k) d[k] = p[k];
      continue;
    }
    if (mode == cv::BORDER_CONSTANT) {
      for (int k = 0; k < CN; ++k) d[k] = cval[k];
      continue;
    }
    sx = Clip(sx, 0, w), sy = Clip(sy, 0, h);
    const uint8_t* p = src.data + sy * step + sx * CN;
    for (int k = 0; k < CN; ++k) d[k] = p[k];
  }
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
  for (int y = 0; y < dst->rows; ++y) {
    const int x0 = CvRound((m[1] * y + m[2]) * kAbScale) + round_delta;
    const int y0 = CvRound((m[4] * y + m[5]) * kAbScale) + round_delta;
    uint8_t* d = dst->ptr<uint8_t>(y);
    if (linear) {
      LinearRow<CN>(src, d, cols, x0, y0, adelta, bdelta, mode, cval);
    } else {
      NearestRow<CN>(src, d, cols, x0, y0, adelta, bdelta, mode, cval);
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
