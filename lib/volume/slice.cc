// SPDX-License-Identifier: Apache-2.0
// Slices of a canonical (RAS) volume, read through the file's own axes (volume.h).
#include <algorithm>
#include <cmath>
#include <cstring>
#if defined(__SSE2__)
#include <emmintrin.h>
#endif

#include "codec/image.h"
#include "dspipe/limits.h"
#include "volume/volume.h"

namespace dspipe::volume {

const char* SliceAxisName(SliceAxis a) {
  switch (a) {
    case SliceAxis::kAxial: return "axial";
    case SliceAxis::kCoronal: return "coronal";
    case SliceAxis::kSagittal: return "sagittal";
  }
  return "?";
}

Status ParseSliceAxis(const std::string& text, SliceAxis* out) {
  for (SliceAxis a : {SliceAxis::kAxial, SliceAxis::kCoronal, SliceAxis::kSagittal}) {
    if (text == SliceAxisName(a)) {
      *out = a;
      return Status::OK();
    }
  }
  return Status::InvalidArgument("slice axis '" + text +
                                 "': one of axial, coronal, sagittal");
}

void PlaneAxes(SliceAxis axis, int* row, int* col) {
  const int a = static_cast<int>(axis);
  *row = a == 0 ? 1 : 0;
  *col = a == 2 ? 1 : 2;
}

namespace {

#if defined(__SSE2__)
// Transposes of one block (SSE2), written out so the compiler keeps it in registers: line j
// (p + j * ls) holds N consecutive samples, and output row i (o + i * os) gets lane i of every
// line, line j at column j. N = 8 for 8- and 16-bit samples, 4 for 32-bit ones.
inline __m128i Line8(const uint8_t* p) {
  return _mm_loadl_epi64(reinterpret_cast<const __m128i*>(p));
}
inline __m128i Line(const void* p) { return _mm_loadu_si128(static_cast<const __m128i*>(p)); }
inline void Put8(uint8_t* o, __m128i v) { _mm_storel_epi64(reinterpret_cast<__m128i*>(o), v); }
inline void Put(void* o, __m128i v) { _mm_storeu_si128(static_cast<__m128i*>(o), v); }

inline void TransposeBlock(const uint8_t* p, int64_t ls, uint8_t* o, int64_t os) {
  const __m128i s0 = _mm_unpacklo_epi8(Line8(p), Line8(p + ls));  // lines 0, 1 interleaved
  const __m128i s1 = _mm_unpacklo_epi8(Line8(p + 2 * ls), Line8(p + 3 * ls));
  const __m128i s2 = _mm_unpacklo_epi8(Line8(p + 4 * ls), Line8(p + 5 * ls));
  const __m128i s3 = _mm_unpacklo_epi8(Line8(p + 6 * ls), Line8(p + 7 * ls));
  const __m128i u0 = _mm_unpacklo_epi16(s0, s1), u1 = _mm_unpackhi_epi16(s0, s1);  // lines 0-3
  const __m128i u2 = _mm_unpacklo_epi16(s2, s3), u3 = _mm_unpackhi_epi16(s2, s3);  // lines 4-7
  const __m128i r01 = _mm_unpacklo_epi32(u0, u2), r23 = _mm_unpackhi_epi32(u0, u2);
  const __m128i r45 = _mm_unpacklo_epi32(u1, u3), r67 = _mm_unpackhi_epi32(u1, u3);
  Put8(o, r01);
  Put8(o + os, _mm_unpackhi_epi64(r01, r01));
  Put8(o + 2 * os, r23);
  Put8(o + 3 * os, _mm_unpackhi_epi64(r23, r23));
  Put8(o + 4 * os, r45);
  Put8(o + 5 * os, _mm_unpackhi_epi64(r45, r45));
  Put8(o + 6 * os, r67);
  Put8(o + 7 * os, _mm_unpackhi_epi64(r67, r67));
}

inline void TransposeBlock(const uint16_t* p, int64_t ls, uint16_t* o, int64_t os) {
  const __m128i a0 = Line(p), a1 = Line(p + ls), a2 = Line(p + 2 * ls), a3 = Line(p + 3 * ls);
  const __m128i a4 = Line(p + 4 * ls), a5 = Line(p + 5 * ls), a6 = Line(p + 6 * ls),
                a7 = Line(p + 7 * ls);
  const __m128i s0 = _mm_unpacklo_epi16(a0, a1), s4 = _mm_unpackhi_epi16(a0, a1);
  const __m128i s1 = _mm_unpacklo_epi16(a2, a3), s5 = _mm_unpackhi_epi16(a2, a3);
  const __m128i s2 = _mm_unpacklo_epi16(a4, a5), s6 = _mm_unpackhi_epi16(a4, a5);
  const __m128i s3 = _mm_unpacklo_epi16(a6, a7), s7 = _mm_unpackhi_epi16(a6, a7);
  const __m128i u0 = _mm_unpacklo_epi32(s0, s1), u1 = _mm_unpackhi_epi32(s0, s1);  // lanes 0-3
  const __m128i u2 = _mm_unpacklo_epi32(s2, s3), u3 = _mm_unpackhi_epi32(s2, s3);
  const __m128i u4 = _mm_unpacklo_epi32(s4, s5), u5 = _mm_unpackhi_epi32(s4, s5);  // lanes 4-7
  const __m128i u6 = _mm_unpacklo_epi32(s6, s7), u7 = _mm_unpackhi_epi32(s6, s7);
  Put(o, _mm_unpacklo_epi64(u0, u2));
  Put(o + os, _mm_unpackhi_epi64(u0, u2));
  Put(o + 2 * os, _mm_unpacklo_epi64(u1, u3));
  Put(o + 3 * os, _mm_unpackhi_epi64(u1, u3));
  Put(o + 4 * os, _mm_unpacklo_epi64(u4, u6));
  Put(o + 5 * os, _mm_unpackhi_epi64(u4, u6));
  Put(o + 6 * os, _mm_unpacklo_epi64(u5, u7));
  Put(o + 7 * os, _mm_unpackhi_epi64(u5, u7));
}

inline void TransposeBlock(const uint32_t* p, int64_t ls, uint32_t* o, int64_t os) {
  const __m128i a0 = Line(p), a1 = Line(p + ls), a2 = Line(p + 2 * ls), a3 = Line(p + 3 * ls);
  const __m128i s0 = _mm_unpacklo_epi32(a0, a1), s1 = _mm_unpackhi_epi32(a0, a1);
  const __m128i s2 = _mm_unpacklo_epi32(a2, a3), s3 = _mm_unpackhi_epi32(a2, a3);
  Put(o, _mm_unpacklo_epi64(s0, s2));
  Put(o + os, _mm_unpackhi_epi64(s0, s2));
  Put(o + 2 * os, _mm_unpacklo_epi64(s1, s3));
  Put(o + 3 * os, _mm_unpackhi_epi64(s1, s3));
}

// Gather's transpose when a slice's rows run along the file's fastest axis (row_step +1 or -1),
// in NxN blocks: the rows and columns below the last multiple of N; Gather does the rest. A
// block's lines are output columns c0..c0+N-1, each N consecutive samples from the lowest
// address of rows r0..r0+N-1 (row r0+N-1's with row_step -1: lane i is then row r0+N-1-i, so
// the block is written from that row upwards). Rows of blocks in turn, left to right: each pass
// reads N samples of every line and writes N whole output rows, about 3x faster than column
// strips or 32x32 tiles on 512x512 slices of a volume not in cache.
template <class T>
void TransposeBlocks(const T* src, int64_t base, int64_t row_step, int64_t col_step, int rows,
                     int cols, T* dst) {
  constexpr int N = sizeof(T) == 4 ? 4 : 8;
  const int rows_n = rows - rows % N, cols_n = cols - cols % N;
  const int64_t out_step = row_step > 0 ? cols : -int64_t{cols};
  for (int r0 = 0; r0 < rows_n; r0 += N) {
    const int first = row_step > 0 ? r0 : r0 + N - 1;  // the row at the lines' lowest address
    const T* line = src + base + first * row_step;
    T* out = dst + static_cast<int64_t>(first) * cols;
    for (int c0 = 0; c0 < cols_n; c0 += N) {
      TransposeBlock(line + c0 * col_step, col_step, out + c0, out_step);
    }
  }
}
#endif

template <class T>
void Gather(const T* src, int64_t base, int64_t row_step, int64_t col_step, int64_t ch_step,
            int rows, int cols, int channels, T* dst) {
  if (channels == 1 && col_step != 1) {
    // A transpose in most cases (an axial slice's rows run along the file's fastest axis).
    int done_rows = 0, done_cols = 0;  // the top-left part the SIMD blocks wrote
#if defined(__SSE2__)
    if (row_step == 1 || row_step == -1) {
      TransposeBlocks(src, base, row_step, col_step, rows, cols, dst);
      constexpr int N = sizeof(T) == 4 ? 4 : 8;
      done_rows = rows - rows % N;
      done_cols = cols - cols % N;
    }
#endif
    // The rest in 32x32 tiles, so the source lines a tile reads stay in L1 while it is written:
    // everything, or the last columns and the last rows the 8x8 blocks left.
    constexpr int kTile = 32;
    for (int r0 = 0; r0 < rows; r0 += kTile) {
      const int r1 = std::min(rows, r0 + kTile);
      for (int c0 = 0; c0 < cols; c0 += kTile) {
        const int c1 = std::min(cols, c0 + kTile);
        for (int r = r0; r < r1; ++r) {
          const T* p = src + base + r * row_step;
          T* d = dst + static_cast<int64_t>(r) * cols;
          for (int c = r < done_rows ? std::max(c0, done_cols) : c0; c < c1; ++c) {
            d[c] = p[c * col_step];
          }
        }
      }
    }
    return;
  }
  for (int r = 0; r < rows; ++r) {
    const T* p = src + base + r * row_step;
    if (channels == 1) {
      for (int c = 0; c < cols; ++c) dst[c] = p[c * col_step];
      dst += cols;
    } else {
      for (int c = 0; c < cols; ++c) {
        for (int k = 0; k < channels; ++k) *dst++ = p[c * col_step + k * ch_step];
      }
    }
  }
}
}  // namespace

int64_t SliceCount(const VolumeInfo& info, SliceAxis axis) {
  return info.canon_dim[static_cast<int>(axis)];
}

std::array<double, 2> SliceSpacing(const VolumeInfo& info, SliceAxis axis) {
  int row = 0, col = 0;
  PlaneAxes(axis, &row, &col);
  return {info.canon_spacing[row], info.canon_spacing[col]};
}

Status ExtractSlice(const Volume& v, SliceAxis axis, int64_t index, cv::Mat* out) {
  const VolumeInfo& in = v.info;
  const int a = static_cast<int>(axis);
  if (index < 0 || index >= in.canon_dim[a]) {
    return Status::InvalidArgument(in.path + ": slice " + std::to_string(index) + " of " +
                                   std::to_string(in.canon_dim[a]));
  }
  int row = 0, col = 0;
  PlaneAxes(axis, &row, &col);
  const int64_t rows = in.canon_dim[row], cols = in.canon_dim[col];
  const DecodeLimits lim = GetDecodeLimits();
  if (rows > lim.max_side || cols > lim.max_side ||
      static_cast<uint64_t>(rows) * static_cast<uint64_t>(cols) > lim.max_pixels) {
    return Status::BadInput(in.path + ": its " + SliceAxisName(axis) + " slices are " +
                            std::to_string(rows) + "x" + std::to_string(cols) +
                            ", beyond the decode limits (--max-image-side " +
                            std::to_string(lim.max_side) + ", --max-image-pixels " +
                            std::to_string(lim.max_pixels) + ")");
  }
  // Element strides of the file's axes (i fastest).
  const int64_t stride[3] = {1, in.dim[0], in.dim[0] * in.dim[1]};
  int64_t base = 0, step[3] = {0, 0, 0};
  for (int c = 0; c < 3; ++c) {
    const int f = in.perm[c];
    step[c] = in.flip[c] ? -stride[f] : stride[f];
    if (in.flip[c]) base += (in.dim[f] - 1) * stride[f];
  }
  base += index * step[a];
  const int64_t ch_step = in.dim[0] * in.dim[1] * in.dim[2];
  const int ch = in.channels;
  const int depth = codec::CvDepth(v.type);
  out->create(static_cast<int>(rows), static_cast<int>(cols), CV_MAKETYPE(depth, ch));
  const int r = static_cast<int>(rows), c = static_cast<int>(cols);
  switch (SampleTypeSize(v.type)) {
    case 1:
      Gather(v.data.data(), base, step[row], step[col], ch_step, r, c, ch, out->ptr<uint8_t>());
      break;
    case 2:
      Gather(reinterpret_cast<const uint16_t*>(v.data.data()), base, step[row], step[col],
             ch_step, r, c, ch, out->ptr<uint16_t>());
      break;
    default:
      Gather(reinterpret_cast<const uint32_t*>(v.data.data()), base, step[row], step[col],
             ch_step, r, c, ch, out->ptr<uint32_t>());
      break;
  }
  return Status::OK();
}

int64_t ResampledLength(int64_t n, double from, double to) {
  return static_cast<int64_t>(std::nearbyint(static_cast<double>(n - 1) * from / to)) + 1;
}

namespace {

// Where output voxel i of a side samples the input: i0 (and i0 + 1, weight w), clamped.
struct Tap {
  int i0, i1;
  float w;
};

std::vector<Tap> Taps(int n_out, int n_in, double from, double to) {
  std::vector<Tap> t(static_cast<size_t>(n_out));
  for (int i = 0; i < n_out; ++i) {
    const double x = std::clamp(i * to / from, 0.0, static_cast<double>(n_in - 1));
    const int i0 = static_cast<int>(std::floor(x));
    t[static_cast<size_t>(i)] = {i0, std::min(i0 + 1, n_in - 1), static_cast<float>(x - i0)};
  }
  return t;
}

std::vector<int> Nearest(int n_out, int n_in, double from, double to) {
  std::vector<int> t(static_cast<size_t>(n_out));
  for (int i = 0; i < n_out; ++i) {
    const double x = std::clamp(i * to / from, 0.0, static_cast<double>(n_in - 1));
    t[static_cast<size_t>(i)] = static_cast<int>(std::nearbyint(x));
  }
  return t;
}

template <class T>
void Linear(const cv::Mat& in, const std::vector<Tap>& ry, const std::vector<Tap>& rx,
            cv::Mat* out) {
  const int ch = in.channels();
  for (int y = 0; y < out->rows; ++y) {
    const Tap& ty = ry[static_cast<size_t>(y)];
    const T* a = in.ptr<T>(ty.i0);
    const T* b = in.ptr<T>(ty.i1);
    float* o = out->ptr<float>(y);
    for (int x = 0; x < out->cols; ++x) {
      const Tap& tx = rx[static_cast<size_t>(x)];
      for (int c = 0; c < ch; ++c) {
        const float a0 = static_cast<float>(a[tx.i0 * ch + c]);
        const float a1 = static_cast<float>(a[tx.i1 * ch + c]);
        const float b0 = static_cast<float>(b[tx.i0 * ch + c]);
        const float b1 = static_cast<float>(b[tx.i1 * ch + c]);
        const float top = a0 + (a1 - a0) * tx.w;
        const float bottom = b0 + (b1 - b0) * tx.w;
        o[x * ch + c] = top + (bottom - top) * ty.w;
      }
    }
  }
}

template <class T>
void Pick(const cv::Mat& in, const std::vector<int>& ry, const std::vector<int>& rx,
          cv::Mat* out) {
  const int ch = in.channels();
  for (int y = 0; y < out->rows; ++y) {
    const T* a = in.ptr<T>(ry[static_cast<size_t>(y)]);
    T* o = out->ptr<T>(y);
    for (int x = 0; x < out->cols; ++x) {
      std::memcpy(o + x * ch, a + rx[static_cast<size_t>(x)] * ch, sizeof(T) * ch);
    }
  }
}

}  // namespace

void ResampleSlice(const cv::Mat& in, const std::array<double, 2>& from,
                   const std::array<double, 2>& to, bool nearest, cv::Mat* out) {
  const int rows = static_cast<int>(ResampledLength(in.rows, from[0], to[0]));
  const int cols = static_cast<int>(ResampledLength(in.cols, from[1], to[1]));
  const int ch = in.channels();
  cv::Mat dst;  // `out` may be `in`
  if (nearest) {
    dst.create(rows, cols, in.type());
    const std::vector<int> ry = Nearest(rows, in.rows, from[0], to[0]);
    const std::vector<int> rx = Nearest(cols, in.cols, from[1], to[1]);
    switch (in.elemSize1()) {
      case 1: Pick<uint8_t>(in, ry, rx, &dst); break;
      case 2: Pick<uint16_t>(in, ry, rx, &dst); break;
      default: Pick<uint32_t>(in, ry, rx, &dst); break;
    }
  } else {
    dst.create(rows, cols, CV_MAKETYPE(CV_32F, ch));
    const std::vector<Tap> ry = Taps(rows, in.rows, from[0], to[0]);
    const std::vector<Tap> rx = Taps(cols, in.cols, from[1], to[1]);
    switch (in.depth()) {
      case CV_8U: Linear<uint8_t>(in, ry, rx, &dst); break;
      case CV_16U: Linear<uint16_t>(in, ry, rx, &dst); break;
      case CV_16S: Linear<int16_t>(in, ry, rx, &dst); break;
      default: Linear<float>(in, ry, rx, &dst); break;
    }
  }
  *out = std::move(dst);
}

int64_t PadCropStart(int64_t n, int64_t want) {
  return n >= want ? n / 2 - want / 2 : -((want - n) / 2);
}

void PadCropSlice(const cv::Mat& in, int rows, int cols, cv::Mat* out) {
  const int64_t r0 = PadCropStart(in.rows, rows), c0 = PadCropStart(in.cols, cols);
  // The input's part that lands in the output, and where it lands.
  const int ys = static_cast<int>(std::max<int64_t>(r0, 0));
  const int xs = static_cast<int>(std::max<int64_t>(c0, 0));
  const int h = std::min(in.rows - ys, rows), w = std::min(in.cols - xs, cols);
  const int top = static_cast<int>(std::max<int64_t>(-r0, 0));
  const int left = static_cast<int>(std::max<int64_t>(-c0, 0));
  cv::Mat dst(rows, cols, in.type(), cv::Scalar::all(0));  // `out` may be `in`
  in(cv::Rect(xs, ys, w, h)).copyTo(dst(cv::Rect(left, top, w, h)));
  *out = std::move(dst);
}

Status CheckLabelMatches(const VolumeInfo& image, const VolumeInfo& label) {
  auto both = [&] { return label.path + " does not match its image " + image.path + ": "; };
  for (int a = 0; a < 3; ++a) {
    if (image.canon_dim[a] != label.canon_dim[a]) {
      auto shape = [](const VolumeInfo& v) {
        return std::to_string(v.canon_dim[0]) + "x" + std::to_string(v.canon_dim[1]) + "x" +
               std::to_string(v.canon_dim[2]);
      };
      return Status::BadInput(both() + "shape " + shape(label) + " against " + shape(image) +
                              " (in RAS order)");
    }
  }
  for (int r = 0; r < 3; ++r) {
    for (int c = 0; c < 4; ++c) {
      const double x = image.canon_affine[r][c], y = label.canon_affine[r][c];
      if (std::fabs(x - y) > 1e-3 + 1e-4 * std::fabs(x)) {
        return Status::BadInput(both() + "their affines differ (RAS affine [" +
                                std::to_string(r) + "][" + std::to_string(c) + "] is " +
                                std::to_string(y) + " against " + std::to_string(x) +
                                "): the label is not on the image's voxel grid");
      }
    }
  }
  return Status::OK();
}

}  // namespace dspipe::volume
