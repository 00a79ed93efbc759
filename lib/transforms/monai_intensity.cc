// MONAI 1.6.1's intensity transforms (monai_leaf.h): each computes what MONAI's array transform
// computes on a channels-first float32 tensor, here on an H x W x C float32 cv::Mat (the same
// numbers in another memory order): torch's float32 arithmetic in the same order where the
// result depends on it, statistics (means, percentiles) accumulated in double. Random draws
// come from the plan's per-(seed, epoch, index, position) stream: MONAI's distributions, not
// its samples.
#include <algorithm>
#include <cmath>
#include <numbers>

#include "transforms/monai_leaf.h"

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
    const float lo = b_min ? static_cast<float>(*b_min) : -INFINITY;
    const float hi = b_max ? static_cast<float>(*b_max) : INFINITY;
    ForChannel(m, c, [&](float& x) {
      float t = (x - a_min) / span;
      if (rescale) t = t * scale + offset;
      if (clip) t = std::min(std::max(t, lo), hi);
      x = t;
    });
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
        ForChannel(m, cc, [&](float& x) { x += f; });
      } else {
        const float f = static_cast<float>(1.0 + s.v[c]);
        ForChannel(m, cc, [&](float& x) { x *= f; });
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
    // Standard normals two at a time (Box-Muller: one log, one sqrt, one sin/cos pair per
    // two values), in row-major order of the samples.
    Rng noise(s.seed);
    const double sd = s.v[0];
    double spare = 0;
    bool have_spare = false;
    ForChannel(m, -1, [&](float& x) {
      double z = spare;
      if (!have_spare) {
        double u1 = noise.Uniform();
        if (u1 <= 0.0) u1 = 0x1.0p-54;
        const double r = std::sqrt(-2.0 * std::log(u1)),
                     t = 2.0 * std::numbers::pi * noise.Uniform();
        z = r * std::cos(t);
        spare = r * std::sin(t);
      }
      have_spare = !have_spare;
      x += static_cast<float>(mean + sd * z);
    });
  }
  json Params(const Step& s) const override { return {{"std", s.v[0]}}; }
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

Status MakeRandScaleIntensity(ArgReader& r, std::unique_ptr<MonaiLeaf>* out) {
  return MakeRandIntensity<false>(r, out);
}

Status MakeRandShiftIntensity(ArgReader& r, std::unique_ptr<MonaiLeaf>* out) {
  return MakeRandIntensity<true>(r, out);
}

}  // namespace dspipe::transforms::monai
