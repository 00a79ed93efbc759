// SPDX-License-Identifier: Apache-2.0
// torch's interpolate and grid_sample (monai_resample.h), written from their definitions: the
// source index of each output pixel, the weights, the padding rules. Coordinates and weights in
// float32 where torch's CPU kernels compute them in float32 (interpolate); grid_sample's
// coordinates in double (torch goes through normalized float32 coordinates: differences in the
// last bits of a coordinate).
#include "transforms/monai_resample.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

namespace dspipe::transforms::monai {
namespace {

// area_pixel_compute_scale / area_pixel_compute_source_index.
float Scale(int in, int out, bool align_corners) {
  if (align_corners) return out > 1 ? static_cast<float>(in - 1) / static_cast<float>(out - 1) : 0;
  return static_cast<float>(in) / static_cast<float>(out);
}
float SourceIndex(float scale, int d, bool align_corners, bool cubic) {
  if (align_corners) return scale * static_cast<float>(d);
  const float s = scale * (static_cast<float>(d) + 0.5f) - 0.5f;
  return !cubic && s < 0 ? 0.0f : s;
}

// One axis of a separable resampling: output index d reads taps idx[d * n + k] with weights
// w[d * n + k].
struct Taps {
  int n = 0;
  std::vector<int> idx;
  std::vector<float> w;
};

Taps Linear(int in, int out, bool align_corners) {
  Taps t;
  t.n = 2;
  const float scale = Scale(in, out, align_corners);
  for (int d = 0; d < out; ++d) {
    const float real = SourceIndex(scale, d, align_corners, false);
    const int i = std::min(static_cast<int>(std::floor(real)), in - 1);
    const float l = std::min(std::max(real - static_cast<float>(i), 0.0f), 1.0f);
    t.idx.insert(t.idx.end(), {i, i + (i < in - 1 ? 1 : 0)});
    t.w.insert(t.w.end(), {1.0f - l, l});
  }
  return t;
}

Taps Cubic(int in, int out, bool align_corners) {
  constexpr float A = -0.75f;
  auto near = [](float x) { return ((A + 2) * x - (A + 3)) * x * x + 1; };       // |x| <= 1
  auto far = [](float x) { return ((A * x - 5 * A) * x + 8 * A) * x - 4 * A; };  // 1 < |x| < 2
  Taps t;
  t.n = 4;
  const float scale = Scale(in, out, align_corners);
  for (int d = 0; d < out; ++d) {
    const float real = SourceIndex(scale, d, align_corners, true);
    const float fl = std::floor(real);
    const int i = static_cast<int>(fl);
    const float x = real - fl;
    for (int k = -1; k <= 2; ++k) t.idx.push_back(std::min(std::max(i + k, 0), in - 1));
    t.w.insert(t.w.end(), {far(x + 1), near(x), near(1 - x), far(2 - x)});
  }
  return t;
}

// Nearest: torch's nearest_idx (floor(d * in / out), or of d + 0.5 for nearest-exact).
std::vector<int> NearestIndex(int in, int out, bool exact) {
  std::vector<int> v(static_cast<size_t>(out));
  const float scale = static_cast<float>(in) / static_cast<float>(out);
  for (int d = 0; d < out; ++d) {
    int s;
    if (exact) {
      s = static_cast<int>(std::floor((static_cast<float>(d) + 0.5f) * scale));
    } else if (out == in) {
      s = d;
    } else if (out == 2 * in) {
      s = d >> 1;
    } else {
      s = static_cast<int>(std::floor(static_cast<float>(d) * scale));
    }
    v[static_cast<size_t>(d)] = std::min(s, in - 1);
  }
  return v;
}

template <typename T>
void Gather(const cv::Mat& src, cv::Mat* dst, const std::vector<int>& ry,
            const std::vector<int>& rx) {
  const int ch = src.channels();
  for (int y = 0; y < dst->rows; ++y) {
    const T* s = src.ptr<T>(ry[static_cast<size_t>(y)]);
    T* d = dst->ptr<T>(y);
    for (int x = 0; x < dst->cols; ++x) {
      const T* p = s + static_cast<size_t>(rx[static_cast<size_t>(x)]) * ch;
      for (int c = 0; c < ch; ++c) d[x * ch + c] = p[c];
    }
  }
}

// Separable: columns first (each source row the taps need), then rows.
void Separable(const cv::Mat& src, cv::Mat* dst, const Taps& ty, const Taps& tx) {
  const int ch = src.channels(), W = dst->cols;
  std::vector<float> row(static_cast<size_t>(W) * ch);
  std::vector<std::vector<float>> rows(static_cast<size_t>(src.rows));
  std::vector<int> ready(static_cast<size_t>(src.rows), 0);
  for (int y = 0; y < dst->rows; ++y) {
    float* d = dst->ptr<float>(y);
    std::fill(d, d + static_cast<size_t>(W) * ch, 0.0f);
    for (int k = 0; k < ty.n; ++k) {
      const int sy = ty.idx[static_cast<size_t>(y * ty.n + k)];
      std::vector<float>& r = rows[static_cast<size_t>(sy)];
      if (!ready[static_cast<size_t>(sy)]) {
        r.assign(static_cast<size_t>(W) * ch, 0.0f);
        const float* s = src.ptr<float>(sy);
        for (int x = 0; x < W; ++x) {
          for (int j = 0; j < tx.n; ++j) {
            const float w = tx.w[static_cast<size_t>(x * tx.n + j)];
            const float* p =
                s + static_cast<size_t>(tx.idx[static_cast<size_t>(x * tx.n + j)]) * ch;
            for (int c = 0; c < ch; ++c) r[static_cast<size_t>(x * ch + c)] += w * p[c];
          }
        }
        ready[static_cast<size_t>(sy)] = 1;
      }
      const float w = ty.w[static_cast<size_t>(y * ty.n + k)];
      for (size_t i = 0; i < r.size(); ++i) d[i] += w * r[i];
    }
  }
}

// adaptive_avg_pool2d: output (i, j) averages rows [floor(i in / out), ceil((i + 1) in / out)).
void Area(const cv::Mat& src, cv::Mat* dst) {
  const int ch = src.channels(), H = src.rows, W = src.cols, OH = dst->rows, OW = dst->cols;
  auto start = [](int a, int out, int in) { return static_cast<int>((int64_t{a} * in) / out); };
  auto end = [](int a, int out, int in) {
    return static_cast<int>(((int64_t{a} + 1) * in + out - 1) / out);
  };
  for (int i = 0; i < OH; ++i) {
    const int y0 = start(i, OH, H), y1 = end(i, OH, H);
    float* d = dst->ptr<float>(i);
    for (int j = 0; j < OW; ++j) {
      const int x0 = start(j, OW, W), x1 = end(j, OW, W);
      for (int c = 0; c < ch; ++c) {
        float sum = 0;
        for (int y = y0; y < y1; ++y) {
          const float* s = src.ptr<float>(y);
          for (int x = x0; x < x1; ++x) sum += s[x * ch + c];
        }
        d[j * ch + c] = sum / static_cast<float>(y1 - y0) / static_cast<float>(x1 - x0);
      }
    }
  }
}

// grid_sampler_compute_source_index's padding, on an unnormalized coordinate.
double Reflect(double v, double twice_low, double twice_high) {
  if (twice_low == twice_high) return 0;
  const double lo = twice_low / 2, span = (twice_high - twice_low) / 2;
  v = std::fabs(v - lo);
  const double extra = std::fmod(v, span);
  const int64_t flips = static_cast<int64_t>(std::floor(v / span));
  return flips % 2 == 0 ? extra + lo : span - extra + lo;
}
double Pad(double v, int size, GridPad pad, bool align_corners) {
  if (pad == GridPad::kZeros) return v;
  if (pad == GridPad::kReflection) {
    v = align_corners ? Reflect(v, 0, 2.0 * (size - 1)) : Reflect(v, -1, 2.0 * size - 1);
  }
  return std::min(static_cast<double>(size - 1), std::max(v, 0.0));
}

// The samplers, for any source of sample points: at(r, c, &y, &x) gives output pixel (r, c)'s
// input coordinate (row y, column x, in input indices) before padding.
template <typename T, typename At>
void SampleNearest(const cv::Mat& src, At at, cv::Mat* dst, GridPad pad, bool align_corners) {
  const int ch = src.channels();
  for (int r = 0; r < dst->rows; ++r) {
    T* d = dst->ptr<T>(r);
    for (int c = 0; c < dst->cols; ++c) {
      double y, x;
      at(r, c, &y, &x);
      y = Pad(y, src.rows, pad, align_corners);
      x = Pad(x, src.cols, pad, align_corners);
      const double ny = std::nearbyint(y), nx = std::nearbyint(x);  // half to even
      const bool in = ny >= 0 && nx >= 0 && ny < src.rows && nx < src.cols;
      const T* p = in ? src.ptr<T>(static_cast<int>(ny)) + static_cast<size_t>(nx) * ch : nullptr;
      for (int k = 0; k < ch; ++k) d[c * ch + k] = in ? p[k] : T(0);
    }
  }
}

template <typename At>
void SampleBilinear(const cv::Mat& src, At at, cv::Mat* dst, GridPad pad, bool align_corners) {
  const int ch = src.channels(), H = src.rows, W = src.cols;
  for (int r = 0; r < dst->rows; ++r) {
    float* d = dst->ptr<float>(r);
    for (int c = 0; c < dst->cols; ++c) {
      double y, x;
      at(r, c, &y, &x);
      y = Pad(y, H, pad, align_corners);
      x = Pad(x, W, pad, align_corners);
      const double fy = std::floor(y), fx = std::floor(x);
      const int y0 = static_cast<int>(fy), x0 = static_cast<int>(fx);
      const float wy = static_cast<float>(y - fy), wx = static_cast<float>(x - fx);
      const float w[4] = {(1 - wx) * (1 - wy), wx * (1 - wy), (1 - wx) * wy, wx * wy};
      const int ys[4] = {y0, y0, y0 + 1, y0 + 1}, xs[4] = {x0, x0 + 1, x0, x0 + 1};
      for (int k = 0; k < ch; ++k) d[c * ch + k] = 0;
      for (int t = 0; t < 4; ++t) {
        if (ys[t] < 0 || xs[t] < 0 || ys[t] >= H || xs[t] >= W) continue;  // zeros outside
        const float* p = src.ptr<float>(ys[t]) + static_cast<size_t>(xs[t]) * ch;
        for (int k = 0; k < ch; ++k) d[c * ch + k] += w[t] * p[k];
      }
    }
  }
}

template <typename At>
void Sample(const cv::Mat& src, At at, cv::Mat* dst, bool nearest, GridPad pad,
            bool align_corners) {
  if (src.depth() == CV_32F && !nearest) return SampleBilinear(src, at, dst, pad, align_corners);
  switch (src.depth()) {
    case CV_8U:
      return SampleNearest<uint8_t>(src, at, dst, pad, align_corners);
    case CV_16U:
      return SampleNearest<uint16_t>(src, at, dst, pad, align_corners);
    default:
      return SampleNearest<float>(src, at, dst, pad, align_corners);
  }
}

}  // namespace

void Interpolate(const cv::Mat& src, cv::Mat* dst, Interp mode, bool align_corners) {
  if (src.depth() != CV_32F || mode == Interp::kNearest || mode == Interp::kNearestExact) {
    const bool exact = mode == Interp::kNearestExact;
    const std::vector<int> ry = NearestIndex(src.rows, dst->rows, exact);
    const std::vector<int> rx = NearestIndex(src.cols, dst->cols, exact);
    switch (src.depth()) {
      case CV_8U:
        return Gather<uint8_t>(src, dst, ry, rx);
      case CV_16U:
        return Gather<uint16_t>(src, dst, ry, rx);
      default:
        return Gather<float>(src, dst, ry, rx);
    }
  }
  if (mode == Interp::kArea) return Area(src, dst);
  if (mode == Interp::kBilinear) {
    return Separable(src, dst, Linear(src.rows, dst->rows, align_corners),
                     Linear(src.cols, dst->cols, align_corners));
  }
  Separable(src, dst, Cubic(src.rows, dst->rows, align_corners),
            Cubic(src.cols, dst->cols, align_corners));
}

void GridSample(const cv::Mat& src, const double m[6], cv::Mat* dst, bool nearest, GridPad pad,
                bool align_corners) {
  auto at = [m](int r, int c, double* y, double* x) {
    *y = m[0] * r + m[1] * c + m[2];
    *x = m[3] * r + m[4] * c + m[5];
  };
  Sample(src, at, dst, nearest, pad, align_corners);
}

void GridSampleMap(const cv::Mat& src, const cv::Mat& map, cv::Mat* dst, bool nearest, GridPad pad,
                   bool align_corners) {
  auto at = [&map](int r, int c, double* y, double* x) {
    const double* p = map.ptr<double>(r) + 2 * static_cast<size_t>(c);
    *y = p[0];
    *x = p[1];
  };
  Sample(src, at, dst, nearest, pad, align_corners);
}

}  // namespace dspipe::transforms::monai
