// SPDX-License-Identifier: Apache-2.0
// MONAI 1.6.1's intensity transforms (monai_leaf.h): each computes what MONAI's array transform
// computes on a channels-first float32 tensor, here on an H x W x C float32 cv::Mat (the same
// numbers in another memory order): torch's float32 arithmetic in the same order where the
// result depends on it, statistics (means, percentiles) accumulated in double. Random draws
// come from the plan's per-(seed, epoch, index, position) stream: MONAI's distributions, not
// its samples.
#include <algorithm>
#include <cctype>
#include <cmath>
#include <numbers>

#include "transforms/monai_leaf.h"
#include "transforms/simd.h"

namespace dspipe::transforms::monai {
namespace {

// ScaleIntensityRange's arithmetic on one value (MONAI's float32 op order).
struct RangeMap {
  float a_min = 0, a_max = 1;
  std::optional<double> b_min, b_max;
  bool clip = false;
  void Apply(cv::Mat* m, int c) const {
    const float span = a_max - a_min;
    if (span == 0.0f) {  // MONAI warns "Divide by zero" and shifts
      const float shift = b_min ? static_cast<float>(*b_min) : 0.0f;
      ForChannel(m, c, [&](float& x) { x = b_min ? (x - a_min) + shift : x - a_min; });
      return;
    }
    const bool rescale = b_min && b_max;
    const float scale = rescale ? static_cast<float>(*b_max - *b_min) : 1.0f;
    const float offset = rescale ? static_cast<float>(*b_min) : 0.0f;
    RangeMapParams p;
    p.a_min = a_min, p.span = span, p.rescale = rescale, p.scale = scale, p.offset = offset;
    p.clip = clip;
    p.lo = b_min ? static_cast<float>(*b_min) : -INFINITY;
    p.hi = b_max ? static_cast<float>(*b_max) : INFINITY;
    if (c < 0 && m->isContinuous()) {  // every value: one vector pass
      RangeMapRow(m->ptr<float>(), m->total() * static_cast<size_t>(m->channels()), p);
      return;
    }
    ForChannel(m, c, [&](float& x) { RangeMapRow(&x, 1, p); });
  }
};

class ScaleIntensityRange final : public Intensity {
 public:
  RangeMap map;
  void Run(const Step&, cv::Mat* m) const override { map.Apply(m, -1); }
};

class ScaleIntensityRangePercentiles final : public Intensity {
 public:
  double lower = 0, upper = 100;
  std::optional<double> b_min, b_max;
  bool clip = false, relative = false, channel_wise = false;
  void Run(const Step&, cv::Mat* m) const override {
    const int n = channel_wise ? m->channels() : 1;
    for (int c = 0; c < n; ++c) {
      const int cc = channel_wise ? c : -1;
      const std::vector<float> v = Values(*m, cc);
      RangeMap r;
      r.a_min = Percentile(v, lower);
      r.a_max = Percentile(v, upper);
      r.b_min = b_min, r.b_max = b_max, r.clip = clip;
      if (relative) {
        r.b_min = (*b_max - *b_min) * (lower / 100.0) + *b_min;
        r.b_max = (*b_max - *b_min) * (upper / 100.0) + *b_min;
      }
      r.Apply(m, cc);
    }
  }
};

class ScaleIntensity final : public Intensity {
 public:
  std::optional<double> minv, maxv, factor;
  bool channel_wise = false;
  void Run(const Step&, cv::Mat* m) const override {
    if (!minv && !maxv) {
      if (factor) {
        const float f = static_cast<float>(1.0 + *factor);
        ForChannel(m, -1, [&](float& x) { x *= f; });
      }
      return;
    }
    const int n = channel_wise ? m->channels() : 1;
    for (int c = 0; c < n; ++c) {
      const int cc = channel_wise ? c : -1;
      float lo = INFINITY, hi = -INFINITY;
      ForChannel(m, cc, [&](float& x) { lo = std::min(lo, x), hi = std::max(hi, x); });
      if (lo == hi) {  // rescale_array: arr * minv (or arr)
        if (minv) ForChannel(m, cc, [&](float& x) { x *= static_cast<float>(*minv); });
        continue;
      }
      const float span = hi - lo;
      const bool both = minv && maxv;
      const float scale = both ? static_cast<float>(*maxv - *minv) : 1.0f;
      const float offset = both ? static_cast<float>(*minv) : 0.0f;
      ForChannel(m, cc, [&](float& x) {
        const float t = (x - lo) / span;
        x = both ? t * scale + offset : t;
      });
    }
  }
};

class NormalizeIntensity final : public Intensity {
 public:
  std::vector<double> subtrahend, divisor;  // empty: the image's mean / std
  bool nonzero = false, channel_wise = false;
  void Run(const Step&, cv::Mat* m) const override {
    const int n = channel_wise ? m->channels() : 1;
    for (int c = 0; c < n; ++c) {
      const int cc = channel_wise ? c : -1;
      double sum = 0, count = 0;
      ForChannel(m, cc, [&](float& x) {
        if (!nonzero || x != 0.0f) sum += x, count += 1;
      });
      if (count == 0) continue;  // nonzero with no nonzero value: unchanged
      float sub = 0, div = 1;
      if (!subtrahend.empty()) {
        sub = static_cast<float>(subtrahend[subtrahend.size() == 1 ? 0 : c]);
      } else {
        sub = static_cast<float>(sum / count);
      }
      if (!divisor.empty()) {
        div = static_cast<float>(divisor[divisor.size() == 1 ? 0 : c]);
      } else {
        const double mean = sum / count;
        double ss = 0;
        ForChannel(m, cc, [&](float& x) {
          if (!nonzero || x != 0.0f) ss += (x - mean) * (x - mean);
        });
        div = static_cast<float>(std::sqrt(ss / count));  // torch.std(unbiased=False)
      }
      if (div == 0.0f) div = 1.0f;
      ForChannel(m, cc, [&](float& x) {
        if (!nonzero || x != 0.0f) x = (x - sub) / div;
      });
    }
  }
};

class ThresholdIntensity final : public Intensity {
 public:
  double threshold = 0, cval = 0;
  bool above = true;
  void Run(const Step&, cv::Mat* m) const override {
    const float cv = static_cast<float>(cval);
    const double t = threshold;
    ForChannel(m, -1, [&](float& x) {
      const bool keep = above ? static_cast<double>(x) > t : static_cast<double>(x) < t;
      if (!keep) x = cv;
    });
  }
};

class ClipIntensityPercentiles final : public Intensity {
 public:
  std::optional<double> lower, upper, sharpness;
  bool channel_wise = false;
  void Run(const Step&, cv::Mat* m) const override {
    const int n = channel_wise ? m->channels() : 1;
    for (int c = 0; c < n; ++c) {
      const int cc = channel_wise ? c : -1;
      const std::vector<float> v = Values(*m, cc);
      if (sharpness) {  // soft_clip: x + softplus(-k (x - lo)) / k - softplus(k (x - hi)) / k
        const float k = static_cast<float>(*sharpness);
        const std::optional<float> lo =
            lower ? std::optional<float>(Percentile(v, *lower)) : std::nullopt;
        const std::optional<float> hi =
            upper ? std::optional<float>(Percentile(v, *upper)) : std::nullopt;
        auto softplus = [](float t) {
          return std::max(t, 0.0f) + std::log1p(std::exp(-std::fabs(t)));
        };
        ForChannel(m, cc, [&](float& x) {
          float r = x;
          if (lo) r = r + softplus(-k * (x - *lo)) / k;
          if (hi) r = r - softplus(k * (x - *hi)) / k;
          x = r;
        });
        continue;
      }
      const float lo = Percentile(v, lower ? *lower : 0.0);
      const float hi = Percentile(v, upper ? *upper : 100.0);
      ForChannel(m, cc, [&](float& x) { x = std::min(std::max(x, lo), hi); });
    }
  }
};

// RandScaleIntensityd (x * (1 + f)) and RandShiftIntensityd (x + f): f drawn per sample, or
// per channel (channel_wise).
class RandIntensity final : public Intensity {
 public:
  bool shift = false, channel_wise = false;
  double lo = 0, hi = 0;
  void DrawValues(Rng& rng, int channels, Step* s) const override {
    const int n = channel_wise ? std::min(channels, 16) : 1;
    for (int c = 0; c < n; ++c) s->v[c] = Uniform(rng, lo, hi);
  }
  void Run(const Step& s, cv::Mat* m) const override {
    const int n = channel_wise ? m->channels() : 1;
    for (int c = 0; c < n; ++c) {
      const int cc = channel_wise ? c : -1;
      if (shift) {
        const float f = static_cast<float>(s.v[c]);
        if (cc < 0) {  // every sample: OpenCV's vector x * 1 + f (one rounding, as x + f)
          m->convertTo(*m, -1, 1.0, f);
        } else {
          ForChannel(m, cc, [&](float& x) { x += f; });
        }
      } else {
        const float f = static_cast<float>(1.0 + s.v[c]);
        if (cc < 0) {  // every sample: OpenCV's vector x * f + 0 (one rounding, as x * f)
          m->convertTo(*m, -1, f, 0.0);
        } else {
          ForChannel(m, cc, [&](float& x) { x *= f; });
        }
      }
    }
  }
  json Params(const Step& s) const override {
    json f = json::array();
    for (int c = 0; c < (channel_wise ? 16 : 1); ++c) f.push_back(s.v[c]);
    return {{shift ? "offset" : "factor", f}};
  }
};

class RandGaussianNoise final : public Intensity {
 public:
  double mean = 0, std = 0.1;
  bool sample_std = true;
  void DrawValues(Rng& rng, int, Step* s) const override {
    s->v[0] = sample_std ? Uniform(rng, 0.0, std) : std;
    s->seed = rng.Next();
  }
  void Run(const Step& s, cv::Mat* m) const override {
    // Standard normals by the ziggurat (simd.h AddNormalRow), in row-major order of the
    // samples: value i's first try from counter word i of the step's seed, the rare rest from
    // a second stream.
    Rng slow(Mix64(s.seed ^ 0x5851F42D4C957F2DULL));
    const size_t row = static_cast<size_t>(m->cols) * static_cast<size_t>(m->channels());
    for (int y = 0; y < m->rows; ++y) {
      AddNormalRow(m->ptr<float>(y), row, mean, s.v[0], s.seed, static_cast<size_t>(y) * row,
                   &slow);
    }
  }
  json Params(const Step& s) const override { return {{"std", s.v[0]}}; }
};

// numpy.linspace(start, stop, n) in float64: i * step + start, the last one stop itself.
double Linspace(double start, double stop, int n, int i) {
  if (n <= 1) return start;
  if (i == n - 1) return stop;
  return static_cast<double>(i) * ((stop - start) / (n - 1)) + start;
}

// AdjustContrast: ((x - min) / (range + 1e-7)) ** gamma * range + min on the whole image (every
// channel), optionally on -x (invert_image) and rescaled to the input's mean and (unbiased)
// std (retain_stats), in torch's float32 op order; statistics accumulated in double.
class RandAdjustContrast final : public Intensity {
 public:
  double lo = 0.5, hi = 4.5;
  bool invert = false, retain_stats = false;
  void DrawValues(Rng& rng, int, Step* s) const override { s->v[0] = Uniform(rng, lo, hi); }
  static void MeanStd(cv::Mat* m, float* mean, float* sd) {
    double sum = 0, n = 0;
    ForChannel(m, -1, [&](float& x) { sum += x, n += 1; });
    const double mu = sum / n;
    double ss = 0;
    ForChannel(m, -1, [&](float& x) { ss += (x - mu) * (x - mu); });
    *mean = static_cast<float>(mu);
    *sd = static_cast<float>(n > 1 ? std::sqrt(ss / (n - 1)) : NAN);  // torch.std: unbiased
  }
  void Run(const Step& s, cv::Mat* m) const override {
    if (m->total() == 0) return;
    if (invert) ForChannel(m, -1, [](float& x) { x = -x; });
    float mn = 0, sd = 0;
    if (retain_stats) MeanStd(m, &mn, &sd);
    float lo_v = INFINITY, hi_v = -INFINITY;
    ForChannel(m, -1, [&](float& x) { lo_v = std::min(lo_v, x), hi_v = std::max(hi_v, x); });
    const float range = hi_v - lo_v;
    const float denom = range + static_cast<float>(1e-7);  // torch casts the scalar
    const double gamma = static_cast<float>(s.v[0]);       // torch's pow takes a float32 exponent
    ForChannel(m, -1, [&](float& x) {
      const float t = (x - lo_v) / denom;
      x = static_cast<float>(std::pow(static_cast<double>(t), gamma)) * range + lo_v;
    });
    if (retain_stats) {
      float rm = 0, rs = 0;
      MeanStd(m, &rm, &rs);
      ForChannel(m, -1, [&](float& x) { x = x - rm; });
      MeanStd(m, &rm, &rs);  // the std of the centred values, as MONAI takes it
      const float div = rs + static_cast<float>(1e-8);
      ForChannel(m, -1, [&](float& x) { x = sd * (x / div) + mn; });
    }
    if (invert) ForChannel(m, -1, [](float& x) { x = -x; });
  }
  json Params(const Step& s) const override { return {{"gamma", s.v[0]}}; }
};

// GaussianFilter's 1-D kernel (monai.networks.layers.convutils.gaussian_1d, truncated=4.0,
// not normalized) for a float32 sigma: 2 * tail + 1 taps, tail = int(max(sigma * 4, 0.5) + 0.5).
// erf: the Gaussian's mass over each unit interval, 0.5 * (erf(t (x + 0.5)) - erf(t (x - 0.5)))
// with t = 0.70710678 / |sigma| (torch's scalar / tensor: reciprocal, then the product);
// sampled: exp(-0.5 / sigma^2 x^2) / (2.5066282 sigma). float32 throughout as torch.
std::vector<float> GaussianKernel(float sigma, bool sampled) {
  const int tail = static_cast<int>(std::max(static_cast<double>(sigma) * 4.0, 0.5) + 0.5);
  std::vector<float> k(static_cast<size_t>(2 * tail + 1));
  if (!sampled) {
    const float t = (1.0f / std::fabs(sigma)) * static_cast<float>(0.70710678);
    for (int i = -tail; i <= tail; ++i) {
      const float x = static_cast<float>(i);
      const float a = static_cast<float>(std::erf(static_cast<double>(t * (x + 0.5f))));
      const float b = static_cast<float>(std::erf(static_cast<double>(t * (x - 0.5f))));
      k[static_cast<size_t>(i + tail)] = std::max(0.5f * (a - b), 0.0f);
    }
  } else {
    const float c = (1.0f / (sigma * sigma)) * -0.5f;
    const float norm = static_cast<float>(2.5066282) * sigma;
    for (int i = -tail; i <= tail; ++i) {
      const float x = static_cast<float>(i);
      const float e = static_cast<float>(std::exp(static_cast<double>(c * (x * x))));
      k[static_cast<size_t>(i + tail)] = e / norm;
    }
  }
  return k;
}

// GaussianSmooth: separable_filtering with zero padding, along H (sigma_x) and then along W
// (sigma_y); each pass's sums accumulated in double and stored as float32 (torch's conv
// output), channels independent.
class RandGaussianSmooth final : public Intensity {
 public:
  double x0 = 0.25, x1 = 1.5, y0 = 0.25, y1 = 1.5, z0 = 0.25, z1 = 1.5;
  bool sampled = false;
  void DrawValues(Rng& rng, int, Step* s) const override {
    s->v[0] = Uniform(rng, x0, x1);
    s->v[1] = Uniform(rng, y0, y1);
    s->v[2] = Uniform(rng, z0, z1);  // MONAI draws it too; a 2-D image has no third axis
  }
  void Run(const Step& s, cv::Mat* m) const override {
    const int h = m->rows, w = m->cols, ch = m->channels();
    const std::vector<float> ky = GaussianKernel(static_cast<float>(s.v[0]), sampled);
    const std::vector<float> kx = GaussianKernel(static_cast<float>(s.v[1]), sampled);
    const int py = static_cast<int>(ky.size() / 2), px = static_cast<int>(kx.size() / 2);
    cv::Mat tmp(h, w, m->type());
    for (int y = 0; y < h; ++y) {
      float* o = tmp.ptr<float>(y);
      for (int i = 0; i < w * ch; ++i) {
        double acc = 0;
        for (int k = 0; k < static_cast<int>(ky.size()); ++k) {
          const int yy = y - py + k;
          if (yy >= 0 && yy < h) acc += static_cast<double>(ky[k]) * m->ptr<float>(yy)[i];
        }
        o[i] = static_cast<float>(acc);
      }
    }
    for (int y = 0; y < h; ++y) {
      const float* t = tmp.ptr<float>(y);
      float* o = m->ptr<float>(y);
      for (int x = 0; x < w; ++x) {
        for (int c = 0; c < ch; ++c) {
          double acc = 0;
          for (int k = 0; k < static_cast<int>(kx.size()); ++k) {
            const int xx = x - px + k;
            if (xx >= 0 && xx < w) acc += static_cast<double>(kx[k]) * t[xx * ch + c];
          }
          o[x * ch + c] = static_cast<float>(acc);
        }
      }
    }
  }
  json Params(const Step& s) const override {
    return {{"sigma", json::array({s.v[0], s.v[1]})}, {"sigma_z", s.v[2]}};
  }
};

// RandHistogramShift: n control points (n uniform in [lo, hi]) at linspace(0, 1, n); each inner
// one moved uniform between its left neighbour (already moved) and its right one (not yet), in
// float64; the image mapped piecewise linearly from the reference points to the moved ones,
// both scaled to [min, max] of the whole image, in float32 as MONAI's torch path computes it:
// slope and intercept per segment, the segment searchsorted(left) - 1, the ends held constant.
class RandHistogramShift final : public Intensity {
 public:
  int lo = 10, hi = 10;
  void DrawValues(Rng& rng, int, Step* s) const override { s->seed = rng.Next(); }
  // The moved control points of the step's draw (from its seed), in [0, 1].
  std::vector<double> Points(const Step& s) const {
    Rng r(s.seed);
    const int n = RandInt(r, lo, hi);
    std::vector<double> p(static_cast<size_t>(n));
    for (int i = 0; i < n; ++i) p[i] = Linspace(0.0, 1.0, n, i);
    for (int i = 1; i < n - 1; ++i) p[i] = Uniform(r, p[i - 1], p[i + 1]);
    return p;
  }
  void Run(const Step& s, cv::Mat* m) const override {
    float mn = INFINITY, mx = -INFINITY;
    ForChannel(m, -1, [&](float& x) { mn = std::min(mn, x), mx = std::max(mx, x); });
    if (m->total() == 0 || mn == mx) return;  // MONAI warns and returns the image
    const std::vector<double> p = Points(s);
    const int n = static_cast<int>(p.size());
    const float span = mx - mn;
    std::vector<float> xs(n), ys(n), slope(n - 1), icpt(n - 1);
    for (int i = 0; i < n; ++i) {
      xs[i] = static_cast<float>(Linspace(0.0, 1.0, n, i)) * span + mn;
      ys[i] = static_cast<float>(p[i]) * span + mn;
    }
    for (int i = 0; i + 1 < n; ++i) {
      slope[i] = (ys[i + 1] - ys[i]) / (xs[i + 1] - xs[i]);
      icpt[i] = ys[i] - slope[i] * xs[i];
    }
    ForChannel(m, -1, [&](float& x) {
      if (x < xs[0]) {
        x = ys[0];
      } else if (x > xs[n - 1]) {
        x = ys[n - 1];
      } else {
        const int at = static_cast<int>(std::lower_bound(xs.begin(), xs.end(), x) - xs.begin());
        const int i = std::min(std::max(at - 1, 0), n - 2);
        x = slope[i] * x + icpt[i];
      }
    });
  }
  json Params(const Step& s) const override {
    const std::vector<double> p = Points(s);
    json ref = json::array(), moved = json::array();
    for (int i = 0; i < static_cast<int>(p.size()); ++i) {
      ref.push_back(Linspace(0.0, 1.0, static_cast<int>(p.size()), i));
      moved.push_back(p[i]);
    }
    return {{"reference_control_points", ref}, {"floating_control_points", moved}};
  }
};

// RandBiasField: the image times exp(field), field(y, x) = sum over j <= i <= degree of
// c_ij L_i(y') L_j(x') (Legendre polynomials; y', x' = linspace(-1, 1) over H and W as
// float32; the lower triangle of the coefficient matrix, as MONAI fills it, in
// np.tril_indices order: (0,0), (1,0), (1,1), (2,0), ... with i the H degree), each
// coefficient uniform in coeff_range; float64 as numpy, one rounding to
// float32 at the end. The same field for every channel.
class RandBiasField final : public Intensity {
 public:
  int degree = 3;
  double c0 = 0.0, c1 = 0.1;
  void DrawValues(Rng& rng, int, Step* s) const override { s->seed = rng.Next(); }
  std::vector<double> Coefficients(const Step& s) const {
    Rng r(s.seed);
    std::vector<double> c(static_cast<size_t>((degree + 1) * (degree + 2) / 2));
    for (double& x : c) x = Uniform(r, c0, c1);
    return c;
  }
  // L_0..L_degree at linspace(-1, 1, n)[i] (float32), for every i: n x (degree + 1).
  std::vector<double> Legendre(int n) const {
    const int d1 = degree + 1;
    std::vector<double> out(static_cast<size_t>(n) * d1);
    for (int i = 0; i < n; ++i) {
      const double x = static_cast<float>(Linspace(-1.0, 1.0, n, i));
      double* l = out.data() + static_cast<size_t>(i) * d1;
      l[0] = 1.0;
      if (degree >= 1) l[1] = x;
      for (int k = 2; k <= degree; ++k) {  // Bonnet's recursion
        l[k] = ((2 * k - 1) * x * l[k - 1] - (k - 1) * l[k - 2]) / k;
      }
    }
    return out;
  }
  void Run(const Step& s, cv::Mat* m) const override {
    const std::vector<double> c = Coefficients(s);
    const int h = m->rows, w = m->cols, ch = m->channels(), d1 = degree + 1;
    const std::vector<double> ly = Legendre(h), lx = Legendre(w);
    // Per row: the coefficients of L_j(x) after summing over i (a polynomial in x).
    std::vector<double> row(static_cast<size_t>(d1));
    for (int y = 0; y < h; ++y) {
      std::fill(row.begin(), row.end(), 0.0);
      size_t at = 0;
      for (int i = 0; i <= degree; ++i) {
        for (int j = 0; j <= i; ++j) row[j] += c[at++] * ly[static_cast<size_t>(y) * d1 + i];
      }
      float* p = m->ptr<float>(y);
      for (int x = 0; x < w; ++x) {
        double f = 0;
        for (int j = 0; j <= degree; ++j) f += row[j] * lx[static_cast<size_t>(x) * d1 + j];
        const double e = std::exp(f);
        for (int k = 0; k < ch; ++k) {
          p[x * ch + k] = static_cast<float>(static_cast<double>(p[x * ch + k]) * e);
        }
      }
    }
  }
  json Params(const Step& s) const override { return {{"coefficients", Coefficients(s)}}; }
};

template <bool kShift>
Status MakeRandIntensity(ArgReader& r, std::unique_ptr<MonaiLeaf>* out) {
  auto l = std::make_unique<RandIntensity>();
  l->shift = kShift;
  const Keys k = ReadKeys(r, Role::kIntensity);
  const auto range = SymmetricRange(r, kShift ? "offsets" : "factors");
  l->lo = range.first, l->hi = range.second;
  const double prob = Prob(r, 0.1);
  l->channel_wise = r.Bool("channel_wise", false);
  std::vector<std::string> args = {kShift ? "offsets" : "factors", "prob", "channel_wise"};
  if (kShift) {
    (void)r.Bool("safe", false);  // clamps to an integer dtype's range: float32 has none to hit
    args.push_back("safe");
  } else {
    ReadFloatDtype(r);
    args.push_back("dtype");
  }
  args.push_back("lazy");
  return Done(r, std::move(l), k, prob, args, out);
}

}  // namespace

Status MakeScaleIntensityRange(ArgReader& r, std::unique_ptr<MonaiLeaf>* out) {
  auto l = std::make_unique<ScaleIntensityRange>();
  const Keys k = ReadKeys(r, Role::kIntensity);
  l->map.a_min = static_cast<float>(Required(r, "a_min"));
  l->map.a_max = static_cast<float>(Required(r, "a_max"));
  l->map.b_min = OptNumber(r, "b_min");
  l->map.b_max = OptNumber(r, "b_max");
  l->map.clip = r.Bool("clip", false);
  ReadFloatDtype(r);
  return Done(r, std::move(l), k, 1.0,
              {"a_min", "a_max", "b_min", "b_max", "clip", "dtype", "lazy"}, out);
}

Status MakeScaleIntensityRangePercentiles(ArgReader& r, std::unique_ptr<MonaiLeaf>* out) {
  auto l = std::make_unique<ScaleIntensityRangePercentiles>();
  const Keys k = ReadKeys(r, Role::kIntensity);
  l->lower = Required(r, "lower");
  l->upper = Required(r, "upper");
  if (l->lower < 0 || l->lower > 100 || l->upper < 0 || l->upper > 100) {
    r.Fail(r.where() + ": percentiles must be in [0, 100]");
  }
  l->b_min = OptNumber(r, "b_min");
  l->b_max = OptNumber(r, "b_max");
  l->clip = r.Bool("clip", false);
  l->relative = r.Bool("relative", false);
  l->channel_wise = r.Bool("channel_wise", false);
  if (l->relative && (!l->b_min || !l->b_max)) {
    r.Fail(r.where() + ": relative=true needs b_min and b_max (MONAI raises the same)");
  }
  ReadFloatDtype(r);
  return Done(
      r, std::move(l), k, 1.0,
      {"lower", "upper", "b_min", "b_max", "clip", "relative", "channel_wise", "dtype", "lazy"},
      out);
}

Status MakeScaleIntensity(ArgReader& r, std::unique_ptr<MonaiLeaf>* out) {
  auto l = std::make_unique<ScaleIntensity>();
  const Keys k = ReadKeys(r, Role::kIntensity);
  // minv / maxv default 0 / 1; an explicit null is None.
  for (const char* key : {"minv", "maxv"}) {
    std::optional<double>& dst = std::string(key) == "minv" ? l->minv : l->maxv;
    if (r.IsNull(key)) {
      (void)r.Raw(key);
      r.Put(key, nullptr);
    } else {
      dst = r.Number(key, std::string(key) == "minv" ? 0.0 : 1.0);
      r.Put(key, *dst);
    }
  }
  l->channel_wise = r.Bool("channel_wise", false);
  l->factor = OptNumber(r, "factor");
  ReadFloatDtype(r);
  return Done(r, std::move(l), k, 1.0, {"minv", "maxv", "factor", "channel_wise", "dtype", "lazy"},
              out);
}

Status MakeNormalizeIntensity(ArgReader& r, std::unique_ptr<MonaiLeaf>* out) {
  auto l = std::make_unique<NormalizeIntensity>();
  const Keys k = ReadKeys(r, Role::kIntensity);
  l->nonzero = r.Bool("nonzero", false);
  l->channel_wise = r.Bool("channel_wise", false);
  for (const char* key : {"subtrahend", "divisor"}) {
    std::vector<double>& dst = std::string(key) == "subtrahend" ? l->subtrahend : l->divisor;
    const json* v = r.Raw(key);
    if (v == nullptr) {
      r.Put(key, nullptr);
      continue;
    }
    if (v->is_number() && !v->is_boolean()) {
      dst = {v->get<double>()};
    } else if (v->is_array() && l->channel_wise && !v->empty() &&
               std::all_of(v->begin(), v->end(), [](const json& e) { return e.is_number(); })) {
      for (const json& e : *v) dst.push_back(e.get<double>());
    } else {
      r.Fail(r.where() + ": argument " + key +
             " must be a number (or, with channel_wise=true, one number per channel), got " +
             v->dump());
    }
    r.Put(key, *v);
  }
  ReadFloatDtype(r);
  return Done(r, std::move(l), k, 1.0,
              {"subtrahend", "divisor", "nonzero", "channel_wise", "dtype", "lazy"}, out);
}

Status MakeThresholdIntensity(ArgReader& r, std::unique_ptr<MonaiLeaf>* out) {
  auto l = std::make_unique<ThresholdIntensity>();
  const Keys k = ReadKeys(r, Role::kIntensity);
  l->threshold = Required(r, "threshold");
  l->above = r.Bool("above", true);
  l->cval = r.Number("cval", 0.0);
  return Done(r, std::move(l), k, 1.0, {"threshold", "above", "cval", "lazy"}, out);
}

Status MakeClipIntensityPercentiles(ArgReader& r, std::unique_ptr<MonaiLeaf>* out) {
  auto l = std::make_unique<ClipIntensityPercentiles>();
  const Keys k = ReadKeys(r, Role::kIntensity);
  l->lower = OptNumber(r, "lower");
  l->upper = OptNumber(r, "upper");
  l->sharpness = OptNumber(r, "sharpness_factor");
  l->channel_wise = r.Bool("channel_wise", false);
  r.OnlyDefault("return_clipping_values", false, "dspipe keeps no per-sample metadata");
  if (!l->lower && !l->upper) r.Fail(r.where() + ": lower or upper percentiles must be provided");
  for (const auto& q : {l->lower, l->upper}) {
    if (q && (*q < 0 || *q > 100)) r.Fail(r.where() + ": percentiles must be in [0, 100]");
  }
  if (l->lower && l->upper && *l->upper < *l->lower) {
    r.Fail(r.where() + ": upper must be greater than or equal to lower");
  }
  if (l->sharpness && !(*l->sharpness > 0)) {
    r.Fail(r.where() + ": sharpness_factor must be greater than 0");
  }
  ReadFloatDtype(r);
  return Done(r, std::move(l), k, 1.0,
              {"lower", "upper", "sharpness_factor", "channel_wise", "return_clipping_values",
               "dtype", "lazy"},
              out);
}

Status MakeRandGaussianNoise(ArgReader& r, std::unique_ptr<MonaiLeaf>* out) {
  auto l = std::make_unique<RandGaussianNoise>();
  const Keys k = ReadKeys(r, Role::kIntensity);
  const double prob = Prob(r, 0.1);
  l->mean = r.Number("mean", 0.0);
  l->std = r.Number("std", 0.1, 0.0);
  l->sample_std = r.Bool("sample_std", true);
  ReadFloatDtype(r);
  return Done(r, std::move(l), k, prob, {"prob", "mean", "std", "dtype", "sample_std", "lazy"},
              out);
}

Status MakeRandAdjustContrast(ArgReader& r, std::unique_ptr<MonaiLeaf>* out) {
  auto l = std::make_unique<RandAdjustContrast>();
  const Keys k = ReadKeys(r, Role::kIntensity);
  const double prob = Prob(r, 0.1);
  // gamma: a number g > 0.5 (the range (0.5, g)) or a pair (its min and max).
  const json* g = r.Raw("gamma");
  if (g == nullptr) {
    r.Put("gamma", json::array({0.5, 4.5}));
  } else if (g->is_number() && !g->is_boolean()) {
    const double x = g->get<double>();
    if (!(x > 0.5)) {
      r.Fail(r.where() + ": argument gamma=" + g->dump() +
             ": a number must be greater than 0.5 (gamma is then drawn from (0.5, gamma)); "
             "or give a pair [min, max]");
    }
    l->lo = 0.5, l->hi = x;
    r.Put("gamma", *g);
  } else if (g->is_array() && g->size() == 2 && (*g)[0].is_number() && !(*g)[0].is_boolean() &&
             (*g)[1].is_number() && !(*g)[1].is_boolean()) {
    const double a = (*g)[0].get<double>(), b = (*g)[1].get<double>();
    l->lo = std::min(a, b), l->hi = std::max(a, b);
    r.Put("gamma", *g);
  } else {
    r.Fail(r.where() + ": argument gamma must be a number greater than 0.5 or a pair of numbers " +
           "[min, max], got " + g->dump());
  }
  l->invert = r.Bool("invert_image", false);
  l->retain_stats = r.Bool("retain_stats", false);
  return Done(r, std::move(l), k, prob, {"prob", "gamma", "invert_image", "retain_stats", "lazy"},
              out);
}

Status MakeRandGaussianSmooth(ArgReader& r, std::unique_ptr<MonaiLeaf>* out) {
  auto l = std::make_unique<RandGaussianSmooth>();
  const Keys k = ReadKeys(r, Role::kIntensity);
  // sigma_x / sigma_y / sigma_z: (low, high) pairs, drawn uniform(low, high) as given.
  for (const char* key : {"sigma_x", "sigma_y", "sigma_z"}) {
    const std::string name = key;
    double* lo = name == "sigma_x" ? &l->x0 : name == "sigma_y" ? &l->y0 : &l->z0;
    double* hi = name == "sigma_x" ? &l->x1 : name == "sigma_y" ? &l->y1 : &l->z1;
    const json* v = r.Raw(key);
    if (v == nullptr) {
      r.Put(key, json::array({*lo, *hi}));
      continue;
    }
    if (v->is_array() && v->size() == 2 && (*v)[0].is_number() && !(*v)[0].is_boolean() &&
        (*v)[1].is_number() && !(*v)[1].is_boolean()) {
      *lo = (*v)[0].get<double>(), *hi = (*v)[1].get<double>();
      r.Put(key, *v);
    } else {
      r.Fail(r.where() + ": argument " + name +
             " must be a pair of numbers [low, high] (the sigma is drawn from it), got " +
             v->dump());
    }
  }
  // approx: GaussianFilter's kernel, matched case-blind as MONAI does (approx.lower()).
  if (const json* a = r.Raw("approx"); a == nullptr) {
    r.Put("approx", "erf");
  } else {
    std::string v = a->is_string() ? a->get<std::string>() : a->dump();
    std::transform(v.begin(), v.end(), v.begin(),
                   [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
    if (a->is_string() && (v == "erf" || v == "sampled")) {
      l->sampled = v == "sampled";
    } else if (v == "scalespace") {
      r.Fail(r.where() + ": argument approx=\"scalespace\" (the Bessel-function kernel) is not " +
             "supported by dspipe; accepted: \"erf\" (MONAI's default), \"sampled\"");
    } else {
      r.Fail(r.where() + ": argument approx must be \"erf\" or \"sampled\" (MONAI also has " +
             "\"scalespace\", which dspipe does not implement), got " + a->dump());
    }
    r.Put("approx", *a);
  }
  const double prob = Prob(r, 0.1);
  return Done(r, std::move(l), k, prob, {"sigma_x", "sigma_y", "sigma_z", "approx", "prob", "lazy"},
              out);
}

Status MakeRandHistogramShift(ArgReader& r, std::unique_ptr<MonaiLeaf>* out) {
  auto l = std::make_unique<RandHistogramShift>();
  const Keys k = ReadKeys(r, Role::kIntensity);
  // num_control_points: an int n (exactly n) or a pair of ints (n drawn from [min, max]); >= 3.
  const json* v = r.Raw("num_control_points");
  auto as_int = [](const json& e, int* n) {
    if (!e.is_number_integer() &&
        !(e.is_number_float() && e.get<double>() == std::floor(e.get<double>()))) {
      return false;
    }
    if (e.get<double>() > 1e6 || e.get<double>() < -1e6) return false;
    *n = static_cast<int>(e.get<double>());
    return true;
  };
  if (v == nullptr) {
    r.Put("num_control_points", 10);
  } else {
    int a = 0, b = 0;
    bool ok = false;
    if (v->is_number() && !v->is_boolean()) {
      ok = as_int(*v, &a);
      b = a;
    } else if (v->is_array() && v->size() == 2 && !(*v)[0].is_boolean() && !(*v)[1].is_boolean()) {
      ok = as_int((*v)[0], &a) && as_int((*v)[1], &b);
    }
    if (!ok) {
      r.Fail(r.where() + ": argument num_control_points must be an int or a pair of ints " +
             "[min, max] (at most 1000000), got " + v->dump());
    } else if (std::min(a, b) < 3) {
      r.Fail(r.where() + ": argument num_control_points=" + v->dump() +
             ": num_control_points should be greater than or equal to 3");
    }
    l->lo = std::min(a, b), l->hi = std::max(a, b);
    r.Put("num_control_points", *v);
  }
  const double prob = Prob(r, 0.1);
  return Done(r, std::move(l), k, prob, {"num_control_points", "prob", "lazy"}, out);
}

Status MakeRandBiasField(ArgReader& r, std::unique_ptr<MonaiLeaf>* out) {
  auto l = std::make_unique<RandBiasField>();
  const Keys k = ReadKeys(r, Role::kIntensity);
  if (const json* d = r.Raw("degree"); d != nullptr) {
    const bool whole =
        d->is_number() && !d->is_boolean() && d->get<double>() == std::floor(d->get<double>());
    if (!whole) {
      r.Fail(r.where() + ": argument degree must be an int (>= 1), got " + d->dump());
    } else if (d->get<double>() < 1) {
      r.Fail(r.where() + ": argument degree=" + d->dump() + ": degree should be no less than 1");
    } else if (d->get<double>() > 100) {
      r.Fail(r.where() + ": argument degree=" + d->dump() +
             " is more than dspipe takes (at most 100)");
    } else {
      l->degree = static_cast<int>(d->get<double>());
    }
  }
  r.Put("degree", l->degree);
  // coeff_range: (low, high), each coefficient drawn uniform(low, high) as given.
  if (const json* c = r.Raw("coeff_range"); c == nullptr) {
    r.Put("coeff_range", json::array({0.0, 0.1}));
  } else if (c->is_array() && c->size() == 2 && (*c)[0].is_number() && !(*c)[0].is_boolean() &&
             (*c)[1].is_number() && !(*c)[1].is_boolean()) {
    l->c0 = (*c)[0].get<double>(), l->c1 = (*c)[1].get<double>();
    r.Put("coeff_range", *c);
  } else {
    r.Fail(r.where() + ": argument coeff_range must be a pair of numbers [low, high], got " +
           c->dump());
  }
  ReadFloatDtype(r);
  const double prob = Prob(r, 0.1);
  return Done(r, std::move(l), k, prob, {"degree", "coeff_range", "dtype", "prob", "lazy"}, out);
}

Status MakeRandScaleIntensity(ArgReader& r, std::unique_ptr<MonaiLeaf>* out) {
  return MakeRandIntensity<false>(r, out);
}

Status MakeRandShiftIntensity(ArgReader& r, std::unique_ptr<MonaiLeaf>* out) {
  return MakeRandIntensity<true>(r, out);
}

}  // namespace dspipe::transforms::monai
