// MONAI 1.6.1's dictionary transforms as plan leaves (monai.h). Each leaf computes what MONAI's
// array transform computes on a channels-first float32 tensor, here on an H x W x C float32
// cv::Mat (the same numbers in another memory order): torch's float32 arithmetic in the same
// order where the result depends on it, statistics (means, percentiles) accumulated in double.
// Random draws come from the plan's per-(seed, epoch, index, position) stream: MONAI's
// distributions, not its samples.
#include "transforms/monai.h"

#include <algorithm>
#include <cmath>
#include <numbers>
#include <opencv2/core.hpp>

#include "transforms/args.h"
#include "transforms/ops.h"

namespace dspipe::transforms {
namespace {

using nlohmann::json;

constexpr const char* kImageKeys[] = {"image", "img"};
constexpr const char* kLabelKeys[] = {"label", "seg", "mask"};

bool IsOneOf(const std::string& s, const auto& names) {
  return std::any_of(std::begin(names), std::end(names), [&](const char* n) { return s == n; });
}

std::string ShortTarget(const std::string& t) {
  const size_t dot = t.rfind('.');
  return dot == std::string::npos ? t : t.substr(dot + 1);
}

// ---- reading MONAI arguments ----------------------------------------------------------------

// What the keys name: the image, and whether the label is among them.
struct Keys {
  bool image = false;
  bool label = false;
  json names = json::array();
};

enum class Role { kIntensity, kSpatial, kNoOp };

// keys / allow_missing_keys / dtype / lazy, as every dictionary transform has them.
Keys ReadKeys(ArgReader& r, Role role) {
  Keys k;
  const json* v = r.Raw("keys");
  if (v == nullptr) {
    r.Fail(r.where() + ": argument keys is required (e.g. [\"image\", \"label\"])");
    return k;
  }
  const json list = v->is_string() ? json::array({*v}) : *v;
  if (!list.is_array() || list.empty()) {
    r.Fail(r.where() + ": argument keys must be a key or a list of keys, got " + v->dump());
    return k;
  }
  for (const json& e : list) {
    const std::string s = e.is_string() ? e.get<std::string>() : e.dump();
    if (e.is_string() && !s.empty() && (s[0] == '@' || s[0] == '$' || s[0] == '%')) {
      r.Fail(r.where() + ": argument keys holds the bundle reference " + s +
             ", which dspipe does not evaluate: resolve the config first "
             "(monai.bundle.ConfigParser(...).get_parsed_content) or write the keys out");
      return k;
    }
    if (e.is_string() && IsOneOf(s, kImageKeys)) {
      k.image = true;
    } else if (e.is_string() && IsOneOf(s, kLabelKeys)) {
      k.label = true;
    } else {
      r.Fail(r.where() + ": argument keys names " + s +
             "; a dspipe sample has an image (key \"image\") and a label (key \"label\"; \"seg\" "
             "and \"mask\" are read as it)");
      return k;
    }
  }
  k.names = list;
  r.Put("keys", list);
  if (role == Role::kIntensity && k.label) {
    r.Fail(r.where() +
           ": an intensity transform on the label would change its class ids; "
           "keep only the image in keys");
  }
  if (role != Role::kNoOp && !k.image && !k.label) {
    r.Fail(r.where() + ": argument keys names neither the image nor the label");
  }
  (void)r.Bool("allow_missing_keys", false);
  (void)r.Bool("lazy", false);
  return k;
}

// dtype: MONAI's float32 default (any spelling of it) or None; dspipe computes in float32.
void ReadFloatDtype(ArgReader& r) {
  const json* v = r.Raw("dtype");
  if (v == nullptr) return;
  const std::string s = v->is_string() ? v->get<std::string>() : v->dump();
  const bool f32 = s.size() >= 7 && s.compare(s.size() - 7, 7, "float32") == 0;
  if (!f32) {
    r.Fail(r.where() + ": argument dtype=" + s +
           " is not supported: dspipe computes MONAI's transforms in float32 (its default)");
  }
  r.Put("dtype", "float32");
}

// A number or None.
std::optional<double> OptNumber(ArgReader& r, const char* key) {
  const json* v = r.Raw(key);
  if (v == nullptr) {
    r.Put(key, nullptr);
    return std::nullopt;
  }
  if (!v->is_number() || v->is_boolean()) {
    r.Fail(r.where() + ": argument " + key + " must be a number or null, got " + v->dump());
    return std::nullopt;
  }
  r.Put(key, *v);
  return v->get<double>();
}

double Required(ArgReader& r, const char* key) {
  if (!r.Has(key)) r.Fail(r.where() + ": argument " + key + " is required");
  return r.Number(key, 0.0);
}

double Prob(ArgReader& r, double def) { return r.Number("prob", def, 0.0, 1.0); }

// A (lo, hi) range from a number x (-|x|, |x|) or a pair (min, max), as MONAI's Rand*Intensity.
std::pair<double, double> SymmetricRange(ArgReader& r, const char* key) {
  const json* v = r.Raw(key);
  if (v == nullptr) {
    r.Fail(r.where() + ": argument " + key + " is required");
    return {0, 0};
  }
  if (v->is_number() && !v->is_boolean()) {
    const double x = v->get<double>();
    r.Put(key, json::array({std::min(-x, x), std::max(-x, x)}));
    return {std::min(-x, x), std::max(-x, x)};
  }
  if (v->is_array() && v->size() == 2 && (*v)[0].is_number() && (*v)[1].is_number()) {
    const double a = (*v)[0].get<double>(), b = (*v)[1].get<double>();
    r.Put(key, json::array({std::min(a, b), std::max(a, b)}));
    return {std::min(a, b), std::max(a, b)};
  }
  r.Fail(r.where() + ": argument " + key + " must be a number or a pair of numbers, got " +
         v->dump());
  return {0, 0};
}

// A 2-D spatial size: an int for both axes or [h, w]; a non-positive entry keeps the input's.
std::array<int, 2> SpatialSize(ArgReader& r, const char* key) {
  const json* v = r.Raw(key);
  std::array<int, 2> s = {-1, -1};
  auto as_int = [&](const json& e, int* out) {
    if (!e.is_number() || e.is_boolean() || e.get<double>() != std::floor(e.get<double>()) ||
        std::fabs(e.get<double>()) > 1e8) {
      return false;
    }
    *out = static_cast<int>(e.get<double>());
    return true;
  };
  if (v == nullptr) {
    r.Fail(r.where() + ": argument " + key + " is required (an int, or [height, width])");
    return s;
  }
  bool ok = true;
  if (v->is_array()) {
    ok = v->size() == 2 && as_int((*v)[0], &s[0]) && as_int((*v)[1], &s[1]);
  } else {
    ok = as_int(*v, &s[0]);
    s[1] = s[0];
  }
  if (!ok) {
    r.Fail(r.where() + ": argument " + key +
           " must be an int or a pair [height, width] of ints (a 2-D slice; a non-positive "
           "entry keeps the input's size), got " +
           v->dump());
  }
  r.Put(key, json::array({s[0], s[1]}));
  return s;
}

int FallBack(int want, int have) { return want > 0 ? want : have; }

// ---- float32 pixel helpers -------------------------------------------------------------------

Status NeedFloat(const cv::Mat& m, const std::string& name) {
  if (m.depth() != CV_32F) {
    return Status::Internal(name +
                            ": MONAI transforms run on float32 pixels (ApplyPixels, the "
                            "loader convert them first)");
  }
  return Status::OK();
}

// Calls f(value&) for every sample of channel c (c < 0: every channel).
template <typename F>
void ForChannel(cv::Mat* m, int c, F f) {
  const int ch = m->channels();
  for (int y = 0; y < m->rows; ++y) {
    float* p = m->ptr<float>(y);
    for (int x = 0; x < m->cols; ++x) {
      if (c < 0) {
        for (int k = 0; k < ch; ++k) f(p[x * ch + k]);
      } else {
        f(p[x * ch + c]);
      }
    }
  }
}

std::vector<float> Values(const cv::Mat& m, int c) {
  std::vector<float> v;
  v.reserve(m.total() * static_cast<size_t>(c < 0 ? m.channels() : 1));
  ForChannel(const_cast<cv::Mat*>(&m), c, [&](float& x) { v.push_back(x); });
  return v;
}

// numpy.percentile / torch.quantile with linear interpolation (q in [0, 100]).
float Percentile(std::vector<float> v, double q) {
  if (v.empty()) return 0.0f;
  const double pos = q / 100.0 * static_cast<double>(v.size() - 1);
  const size_t lo = static_cast<size_t>(std::floor(pos));
  const size_t hi = std::min(lo + 1, v.size() - 1);
  std::nth_element(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(lo), v.end());
  const float a = v[lo];
  float b = a;
  if (hi != lo) b = *std::min_element(v.begin() + static_cast<std::ptrdiff_t>(lo) + 1, v.end());
  const float frac = static_cast<float>(pos - static_cast<double>(lo));
  return a + (b - a) * frac;  // torch.lerp's form
}

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

// ---- leaves ----------------------------------------------------------------------------------

class MonaiLeaf : public Leaf {
 public:
  Keys keys;
  json Params(const Step& s) const override {
    json p = json::object();
    for (int i = 0; i < 4; ++i) p["v" + std::to_string(i)] = s.v[i];
    return p;
  }
};

class Intensity : public MonaiLeaf {
 public:
  Kind kind() const override { return Kind::kPixel; }
  Status Draw(Rng& rng, int channels, const cv::Mat*, Step* s) const override {
    s->out = s->in;
    DrawValues(rng, channels, s);
    return Status::OK();
  }
  Status Apply(const Step& s, cv::Mat* image, cv::Mat*) const override {
    DSPIPE_RETURN_IF_ERROR(NeedFloat(*image, name));
    Run(s, image);
    return Status::OK();
  }
  virtual void DrawValues(Rng&, int, Step*) const {}
  virtual void Run(const Step& s, cv::Mat* m) const = 0;
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

// ---- spatial leaves --------------------------------------------------------------------------

class Spatial : public MonaiLeaf {
 public:
  Kind kind() const override { return Kind::kGeometric; }
};

// RandFlipd: iv[0] = cv::flip code (0 rows, 1 columns, -1 both).
class RandFlip final : public Spatial {
 public:
  int code = -1;
  Status Draw(Rng&, int, const cv::Mat*, Step* s) const override {
    s->out = s->in;
    s->iv[0] = code;
    const double w1 = s->in.w - 1, h1 = s->in.h - 1;
    s->geo.fwd = code == 0   ? Affine{1, 0, 0, 0, -1, h1}
                 : code == 1 ? Affine{-1, 0, w1, 0, 1, 0}
                             : Affine{-1, 0, w1, 0, -1, h1};
    s->geo.exact = true;
    return Status::OK();
  }
  void Warp(const Step& s, const cv::Mat& src, cv::Mat* dst, bool) const override {
    cv::flip(src, *dst, s.iv[0]);
  }
  json Params(const Step& s) const override { return {{"flip_code", s.iv[0]}}; }
};

// RandRotate90d: k in [1, max_k] quarter turns, counter-clockwise for spatial_axes (0, 1).
class RandRotate90 final : public Spatial {
 public:
  int max_k = 3;
  bool clockwise = false;  // spatial_axes (1, 0)
  Status Draw(Rng& rng, int, const cv::Mat*, Step* s) const override {
    const int k = RandInt(rng, 1, max_k) % 4;
    s->iv[0] = k;
    const int ccw = clockwise ? (4 - k) % 4 : k;  // counter-clockwise quarter turns
    s->iv[1] = ccw;
    const double w1 = s->in.w - 1, h1 = s->in.h - 1;
    s->out = ccw % 2 == 1 ? Size{s->in.w, s->in.h} : s->in;
    s->geo.fwd = ccw == 0   ? Affine{}
                 : ccw == 1 ? Affine{0, 1, 0, -1, 0, w1}
                 : ccw == 2 ? Affine{-1, 0, w1, 0, -1, h1}
                            : Affine{0, -1, h1, 1, 0, 0};
    s->geo.exact = true;
    return Status::OK();
  }
  std::optional<Size> StaticOutput(Size in) const override {
    if (in.h == in.w) return in;
    if (max_k == 1) return Size{in.w, in.h};  // always one quarter turn
    return std::nullopt;                      // one turn or two: each sample its own size
  }
  void Warp(const Step& s, const cv::Mat& src, cv::Mat* dst, bool) const override {
    switch (s.iv[1]) {
      case 0:
        src.copyTo(*dst);
        return;
      case 1:
        cv::rotate(src, *dst, cv::ROTATE_90_COUNTERCLOCKWISE);
        return;
      case 2:
        cv::rotate(src, *dst, cv::ROTATE_180);
        return;
      default:
        cv::rotate(src, *dst, cv::ROTATE_90_CLOCKWISE);
    }
  }
  json Params(const Step& s) const override { return {{"k", s.iv[0]}}; }
};

// Crops then pads (either may be empty): SpatialPadd, CenterSpatialCropd, RandSpatialCropd,
// ResizeWithPadOrCropd. iv: crop x0, y0, w, h; pad top, bottom, left, right.
class CropPad final : public Spatial {
 public:
  enum Mode { kPad, kCenterCrop, kRandCrop, kResizeWithPadOrCrop };
  Mode mode = kPad;
  std::array<int, 2> size = {-1, -1};      // spatial_size / roi_size
  std::array<int, 2> max_size = {-1, -1};  // RandSpatialCrop's max_roi_size
  bool symmetric = true;                   // pad method
  bool random_center = true, random_size = false;
  int border = cv::BORDER_CONSTANT;
  double value = 0;

  Status Draw(Rng& rng, int, const cv::Mat*, Step* s) const override {
    const int H = s->in.h, W = s->in.w;
    int x0 = 0, y0 = 0, cw = W, ch = H;
    if (mode == kCenterCrop || mode == kResizeWithPadOrCrop) {
      Center(FallBack(size[0], H), H, &y0, &ch);
      Center(FallBack(size[1], W), W, &x0, &cw);
    } else if (mode == kRandCrop) {
      int want[2] = {FallBack(size[0], H), FallBack(size[1], W)};
      if (random_size) {
        const int mx[2] = {max_size[0] > 0 ? max_size[0] : H, max_size[1] > 0 ? max_size[1] : W};
        for (int i = 0; i < 2; ++i) {
          if (want[i] > mx[i]) {
            return Status::BadInput("min ROI size " + std::to_string(want[i]) +
                                    " is larger than the max ROI size " + std::to_string(mx[i]));
          }
          want[i] = RandInt(rng, want[i], mx[i]);
        }
      }
      ch = std::min(want[0], H), cw = std::min(want[1], W);
      if (random_center) {
        y0 = RandInt(rng, 0, std::max(H - ch, 0));
        x0 = RandInt(rng, 0, std::max(W - cw, 0));
      } else {
        Center(want[0], H, &y0, &ch);
        Center(want[1], W, &x0, &cw);
      }
    }
    int pad[4] = {0, 0, 0, 0};
    if (mode == kPad || mode == kResizeWithPadOrCrop) {
      const int dh = std::max(FallBack(size[0], ch) - ch, 0);
      const int dw = std::max(FallBack(size[1], cw) - cw, 0);
      pad[0] = symmetric ? dh / 2 : 0, pad[1] = dh - pad[0];
      pad[2] = symmetric ? dw / 2 : 0, pad[3] = dw - pad[2];
    }
    s->iv[0] = x0, s->iv[1] = y0, s->iv[2] = cw, s->iv[3] = ch;
    for (int i = 0; i < 4; ++i) s->iv[4 + i] = pad[i];
    s->out = {ch + pad[0] + pad[1], cw + pad[2] + pad[3]};
    s->geo.fwd = Affine::Translate(pad[2] - x0, pad[0] - y0);
    s->geo.frame = pad[0] + pad[1] + pad[2] + pad[3] > 0 ? Frame::kBorder : Frame::kCrop;
    s->geo.exact = true;
    s->geo.border.mode = border;
    s->geo.border.fill.values = {value};
    s->geo.border.fill_mask = value;
    return Status::OK();
  }
  std::optional<Size> StaticOutput(Size in) const override {
    if (mode == kRandCrop && random_size) return std::nullopt;
    if (!in.known()) {
      if (mode == kResizeWithPadOrCrop && size[0] > 0 && size[1] > 0) {
        return Size{size[0], size[1]};
      }
      return Size{};
    }
    Rng unused(0);
    Step s;
    s.in = in;
    (void)Draw(unused, 1, nullptr, &s);
    return s.out;
  }
  void Warp(const Step& s, const cv::Mat& src, cv::Mat* dst, bool is_mask) const override {
    const cv::Mat roi = src(cv::Rect(s.iv[0], s.iv[1], s.iv[2], s.iv[3]));
    if (s.iv[4] + s.iv[5] + s.iv[6] + s.iv[7] == 0) {
      roi.copyTo(*dst);
      return;
    }
    (void)is_mask;  // MONAI pads every key with the same mode and value
    cv::copyMakeBorder(roi, *dst, s.iv[4], s.iv[5], s.iv[6], s.iv[7], border,
                       cv::Scalar::all(value));
  }
  json Params(const Step& s) const override {
    return {{"crop", {s.iv[0], s.iv[1], s.iv[2], s.iv[3]}},
            {"pad", {s.iv[4], s.iv[5], s.iv[6], s.iv[7]}}};
  }

 private:
  // Crop.compute_slices around size // 2: start max(c - roi // 2, 0), clamped to the image.
  static void Center(int roi, int n, int* start, int* len) {
    *start = std::max(n / 2 - roi / 2, 0);
    *len = std::min(*start + roi, n) - *start;
  }
};

// RandCropByPosNegLabeld (num_samples 1): a crop of spatial_size centred on a foreground pixel
// (label > 0) with probability pos / (pos + neg), else on a background one (label 0, and with
// image_key the image above image_threshold in some channel), the centre moved inside the
// image as MONAI's correct_crop_centers moves it. The draw needs the label: deferred until the
// step runs (ExecuteSequential). iv: crop x0, y0, w, h; iv[4], iv[5]: the chosen centre (y, x);
// iv[6]: 1 = foreground.
class RandCropByPosNegLabel final : public Spatial {
 public:
  std::array<int, 2> size = {-1, -1};
  double pos_ratio = 0.5, image_threshold = 0;
  bool use_image = false, allow_smaller = false;
  int num_samples = 1;
  // RandCropByLabelClassesd: the crop's centre is a pixel of a class drawn by `ratios`.
  bool classes = false;
  int num_classes = 0;
  std::vector<double> ratios;
  int max_per_class = 0;  // max_samples_per_class; 0 = all

  bool draw_needs_mask() const override { return true; }
  int samples() const override { return num_samples; }
  Status RefusesInput(Size in) const override {
    const int h = FallBack(size[0], in.h), w = FallBack(size[1], in.w);
    if (!allow_smaller && (h > in.h || w > in.w)) {
      return Status::BadInput("the crop " + std::to_string(h) + "x" + std::to_string(w) +
                              " is larger than the image " + std::to_string(in.h) + "x" +
                              std::to_string(in.w) + " (allow_smaller=true crops what there is)");
    }
    return Status::OK();
  }
  std::optional<Size> StaticOutput(Size in) const override {
    if (!in.known())
      return size[0] > 0 && size[1] > 0 && !allow_smaller
                 ? std::optional<Size>(Size{size[0], size[1]})
                 : std::optional<Size>(Size{});
    return Size{std::min(FallBack(size[0], in.h), in.h), std::min(FallBack(size[1], in.w), in.w)};
  }
  Status Draw(Rng& rng, int, const cv::Mat* mask, Step* s) const override {
    const Size in = s->in;
    DSPIPE_RETURN_IF_ERROR(RefusesInput(in));
    const int roi[2] = {FallBack(size[0], in.h), FallBack(size[1], in.w)};
    s->out = *StaticOutput(in);
    s->geo.exact = true;
    s->geo.frame = Frame::kCrop;
    if (mask == nullptr) {
      s->deferred = true;
      s->iv[0] = 0, s->iv[1] = 0, s->iv[2] = s->out.w, s->iv[3] = s->out.h;
      return Status::OK();
    }
    s->deferred = false;
    s->data.clear();
    if (mask->rows != in.h || mask->cols != in.w) {
      return Status::Internal(name + ": the label is not the image's size");
    }
    const cv::Mat* image = use_image ? s->image : nullptr;
    if (use_image &&
        (image == nullptr || image->depth() != CV_32F || image->size() != mask->size())) {
      return Status::Internal(name + ": image_key needs the float32 image at this step");
    }
    // Each pixel's category: pos/neg: 1 foreground (label not 0), 0 background (label 0 and,
    // with image_key, some channel of the image above the threshold), -1 neither; classes:
    // its label id when below num_classes (and, with image_key, above the threshold), else -1.
    auto bright = [&](int y, int x) {
      if (image == nullptr) return true;
      const float* p = image->ptr<float>(y) + static_cast<size_t>(x) * image->channels();
      for (int c = 0; c < image->channels(); ++c) {
        if (p[c] > image_threshold) return true;
      }
      return false;
    };
    auto category = [&](int y, int x) -> int {
      const int id = mask->depth() == CV_16U ? mask->at<uint16_t>(y, x) : mask->at<uint8_t>(y, x);
      if (!classes) return id != 0 ? 1 : bright(y, x) ? 0 : -1;
      return id < num_classes && bright(y, x) ? id : -1;
    };
    const int categories = classes ? num_classes : 2;
    // Every pixel of each category, in row-major order, in one pass (the draws then pick by
    // position). Per thread, reused.
    thread_local std::vector<std::vector<uint32_t>> pixels;
    pixels.resize(static_cast<size_t>(categories));
    for (auto& v : pixels) v.clear();
    for (int y = 0; y < in.h; ++y) {
      const uint32_t row = static_cast<uint32_t>(y) * static_cast<uint32_t>(in.w);
      if (mask->depth() == CV_8U && !classes && image == nullptr) {  // the common case, tight
        const uint8_t* p = mask->ptr<uint8_t>(y);
        for (int x = 0; x < in.w; ++x)
          pixels[p[x] != 0 ? 1 : 0].push_back(row + static_cast<uint32_t>(x));
        continue;
      }
      for (int x = 0; x < in.w; ++x) {
        if (const int c = category(y, x); c >= 0) {
          pixels[static_cast<size_t>(c)].push_back(row + static_cast<uint32_t>(x));
        }
      }
    }
    std::vector<uint64_t> count(static_cast<size_t>(categories), 0);
    for (int c = 0; c < categories; ++c)
      count[static_cast<size_t>(c)] = pixels[static_cast<size_t>(c)].size();
    // The category of each sample, in MONAI's order of draws: pos/neg draws it with each
    // sample's position; classes draws every sample's class first (numpy's choice).
    std::vector<double> weight(static_cast<size_t>(categories), 0.0);
    if (classes) {
      for (int c = 0; c < categories; ++c) {  // an empty class gets ratio 0 (MONAI warns)
        weight[static_cast<size_t>(c)] =
            count[static_cast<size_t>(c)] > 0 ? ratios[static_cast<size_t>(c)] : 0.0;
      }
    } else {  // fg or bg empty: all from the other (MONAI warns and does so)
      const double r = count[1] == 0 ? 0.0 : count[0] == 0 ? 1.0 : pos_ratio;
      weight = {1.0 - r, r};
    }
    double total = 0;
    for (double w : weight) total += w;
    if (count[0] + count[1] == 0 && !classes) {
      return Status::BadInput(
          name + ": no sampling location available (no foreground label and " +
          (use_image ? "no image value above image_threshold)" : "no background)"));
    }
    if (!(total > 0)) {
      return Status::BadInput(name + ": no class with a ratio > 0 has a pixel in this label" +
                              (use_image ? std::string(" (above image_threshold)") : ""));
    }
    auto choose = [&]() {
      if (!classes) return rng.Uniform() < weight[1] ? 1 : 0;
      const double u = rng.Uniform() * total;
      double acc = 0;
      int last = 0;
      for (int c = 0; c < categories; ++c) {
        if (weight[static_cast<size_t>(c)] <= 0) continue;
        last = c;
        acc += weight[static_cast<size_t>(c)];
        if (u < acc) return c;
      }
      return last;
    };
    std::vector<int> chosen;
    if (classes) {
      for (int k = 0; k < num_samples; ++k) chosen.push_back(choose());
    }
    s->holes.clear();
    for (int sample = 0; sample < num_samples; ++sample) {
      const int cat = classes ? chosen[static_cast<size_t>(sample)] : choose();
      const uint64_t n = count[static_cast<size_t>(cat)];
      // max_samples_per_class: the class's pixels thinned to that many, evenly (np.linspace,
      // rounded half to even), before the draw.
      const bool thin =
          classes && max_per_class > 0 && n > static_cast<uint64_t>(max_per_class) && n > 1;
      uint64_t k = rng.Below(thin ? static_cast<uint64_t>(max_per_class) : n);
      if (thin) {
        k = static_cast<uint64_t>(std::nearbyint(static_cast<double>(k) *
                                                 static_cast<double>(n - 1) / (max_per_class - 1)));
      }
      const bool pick_fg = !classes && cat == 1;
      const uint32_t at = pixels[static_cast<size_t>(cat)][k];
      const int cy = static_cast<int>(at / static_cast<uint32_t>(in.w));
      const int cx = static_cast<int>(at % static_cast<uint32_t>(in.w));
      const int c[2] = {Correct(cy, roi[0], in.h), Correct(cx, roi[1], in.w)};
      const int y0 = std::max(c[0] - roi[0] / 2, 0), x0 = std::max(c[1] - roi[1] / 2, 0);
      const int h = std::min(y0 + roi[0], in.h) - y0, w = std::min(x0 + roi[1], in.w) - x0;
      if (h != s->out.h || w != s->out.w) {
        return Status::Internal(name + ": the crop came out " + std::to_string(h) + "x" +
                                std::to_string(w));
      }
      s->holes.insert(s->holes.end(), {x0, y0, w, h});
      if (sample == 0) {
        s->iv[0] = x0, s->iv[1] = y0, s->iv[2] = w, s->iv[3] = h;
        s->iv[4] = cy, s->iv[5] = cx, s->iv[6] = classes ? cat : pick_fg ? 1 : 0;
        s->geo.fwd = Affine::Translate(-x0, -y0);
      }
      s->data.push_back(static_cast<float>(classes ? cat : pick_fg ? 1 : 0));
      s->data.push_back(static_cast<float>(cy));
      s->data.push_back(static_cast<float>(cx));
    }
    return Status::OK();
  }
  void Warp(const Step& s, const cv::Mat& src, cv::Mat* dst, bool) const override {
    src(cv::Rect(s.iv[0], s.iv[1], s.iv[2], s.iv[3])).copyTo(*dst);
  }
  json Params(const Step& s) const override {
    json p = {{"center", {s.iv[4], s.iv[5]}}, {"crop", {s.iv[0], s.iv[1], s.iv[2], s.iv[3]}}};
    if (classes) {
      p["class"] = s.iv[6];
    } else {
      p["foreground"] = s.iv[6] == 1;
    }
    if (num_samples > 1) {  // every sample's: centre, foreground, crop
      json all = json::array();
      for (int k = 0; k < num_samples && 4 * k + 3 < static_cast<int>(s.holes.size()); ++k) {
        const int* r = s.holes.data() + 4 * k;
        const float* d = s.data.data() + 3 * k;
        json e = {{"center", {static_cast<int>(d[1]), static_cast<int>(d[2])}},
                  {"crop", {r[0], r[1], r[2], r[3]}}};
        if (classes) {
          e["class"] = static_cast<int>(d[0]);
        } else {
          e["foreground"] = d[0] > 0.5f;
        }
        all.push_back(e);
      }
      p["samples"] = all;
    }
    return p;
  }

 private:
  // correct_crop_centers on one axis: the centre moved into [roi // 2, n + 1 - roi / 2) (the
  // roi first reduced to the image with allow_smaller).
  int Correct(int c, int roi, int n) const {
    if (allow_smaller) roi = std::min(roi, n);
    const int lo = roi / 2;
    int hi = static_cast<int>(static_cast<double>(n) + 1.0 - roi / 2.0);  // astype(uint16)
    if (lo == hi) ++hi;
    return std::min(std::max(c, lo), hi - 1);
  }
};

// LoadImaged, EnsureChannelFirstd, EnsureTyped, ToTensord: what dspipe already did.
class NoOp final : public MonaiLeaf {
 public:
  Kind kind() const override { return Kind::kNormalize; }
  Status Draw(Rng&, int, const cv::Mat*, Step* s) const override {
    s->out = s->in;
    return Status::OK();
  }
  json Params(const Step&) const override { return json::object(); }
};

// ---- parsers ---------------------------------------------------------------------------------

using MonaiFactory = Status (*)(ArgReader& r, std::unique_ptr<MonaiLeaf>* out);

struct Entry {
  MonaiType type;
  MonaiFactory make;
};

template <typename T>
Status Done(ArgReader& r, std::unique_ptr<T> leaf, const Keys& keys, double prob,
            const std::vector<std::string>& args, std::unique_ptr<MonaiLeaf>* out) {
  std::vector<std::string> all = {"keys", "allow_missing_keys"};
  all.insert(all.end(), args.begin(), args.end());
  DSPIPE_RETURN_IF_ERROR(r.Finish(all));
  leaf->keys = keys;
  leaf->prob = prob;
  *out = std::move(leaf);
  return Status::OK();
}

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

Status MakeRandFlip(ArgReader& r, std::unique_ptr<MonaiLeaf>* out) {
  auto l = std::make_unique<RandFlip>();
  const Keys k = ReadKeys(r, Role::kSpatial);
  const double prob = Prob(r, 0.1);
  const json* v = r.Raw("spatial_axis");
  bool rows = true, cols = true;  // None: every spatial axis
  if (v != nullptr) {
    const json list = v->is_array() ? *v : json::array({*v});
    rows = cols = false;
    for (const json& a : list) {
      const int ax = a.is_number_integer() ? a.get<int>() : 99;
      if (ax == 0 || ax == -2) {
        rows = true;
      } else if (ax == 1 || ax == -1) {
        cols = true;
      } else {
        r.Fail(r.where() +
               ": argument spatial_axis must be 0 (rows), 1 (columns), a list of "
               "them or null for a 2-D slice, got " +
               v->dump());
      }
    }
    r.Put("spatial_axis", *v);
  } else {
    r.Put("spatial_axis", nullptr);
  }
  l->code = rows && cols ? -1 : rows ? 0 : 1;
  if (!rows && !cols) l->code = -2;  // an empty list: no flip
  if (l->code == -2) r.Fail(r.where() + ": argument spatial_axis is an empty list");
  return Done(r, std::move(l), k, prob, {"prob", "spatial_axis", "lazy"}, out);
}

Status MakeRandRotate90(ArgReader& r, std::unique_ptr<MonaiLeaf>* out) {
  auto l = std::make_unique<RandRotate90>();
  const Keys k = ReadKeys(r, Role::kSpatial);
  const double prob = Prob(r, 0.1);
  l->max_k = r.Int("max_k", 3, 1);
  const json* v = r.Raw("spatial_axes");
  if (v != nullptr) {
    const json ax = *v;
    const bool ok =
        ax.is_array() && ax.size() == 2 && ax[0].is_number_integer() && ax[1].is_number_integer();
    auto norm = [](int a) { return a < 0 ? a + 2 : a; };
    if (ok && norm(ax[0].get<int>()) == 0 && norm(ax[1].get<int>()) == 1) {
      l->clockwise = false;
    } else if (ok && norm(ax[0].get<int>()) == 1 && norm(ax[1].get<int>()) == 0) {
      l->clockwise = true;
    } else {
      r.Fail(r.where() + ": argument spatial_axes must be [0, 1] or [1, 0] for a 2-D slice, got " +
             v->dump());
    }
    r.Put("spatial_axes", ax);
  } else {
    r.Put("spatial_axes", json::array({0, 1}));
  }
  return Done(r, std::move(l), k, prob, {"prob", "max_k", "spatial_axes", "lazy"}, out);
}

// Pad mode (MONAI passes it to numpy.pad / torch.nn.functional.pad) and the constant value.
void ReadPadMode(ArgReader& r, CropPad* l) {
  const std::string m =
      r.Choice("mode", "constant",
               {"constant", "edge", "replicate", "reflect", "symmetric", "wrap", "circular"});
  l->border = m == "constant"                   ? cv::BORDER_CONSTANT
              : m == "edge" || m == "replicate" ? cv::BORDER_REPLICATE
              : m == "reflect"                  ? cv::BORDER_REFLECT_101
              : m == "symmetric"                ? cv::BORDER_REFLECT
                                                : cv::BORDER_WRAP;
  l->value = r.Number("value", 0.0);
}

bool ReadMethod(ArgReader& r) {
  return r.Choice("method", "symmetric", {"symmetric", "end"}) == "symmetric";
}

Status MakeSpatialPad(ArgReader& r, std::unique_ptr<MonaiLeaf>* out) {
  auto l = std::make_unique<CropPad>();
  l->mode = CropPad::kPad;
  const Keys k = ReadKeys(r, Role::kSpatial);
  l->size = SpatialSize(r, "spatial_size");
  l->symmetric = ReadMethod(r);
  ReadPadMode(r, l.get());
  return Done(r, std::move(l), k, 1.0, {"spatial_size", "method", "mode", "value", "lazy"}, out);
}

Status MakeResizeWithPadOrCrop(ArgReader& r, std::unique_ptr<MonaiLeaf>* out) {
  auto l = std::make_unique<CropPad>();
  l->mode = CropPad::kResizeWithPadOrCrop;
  const Keys k = ReadKeys(r, Role::kSpatial);
  l->size = SpatialSize(r, "spatial_size");
  l->symmetric = ReadMethod(r);
  ReadPadMode(r, l.get());
  return Done(r, std::move(l), k, 1.0, {"spatial_size", "method", "mode", "value", "lazy"}, out);
}

Status MakeCenterSpatialCrop(ArgReader& r, std::unique_ptr<MonaiLeaf>* out) {
  auto l = std::make_unique<CropPad>();
  l->mode = CropPad::kCenterCrop;
  const Keys k = ReadKeys(r, Role::kSpatial);
  l->size = SpatialSize(r, "roi_size");
  return Done(r, std::move(l), k, 1.0, {"roi_size", "lazy"}, out);
}

Status MakeRandSpatialCrop(ArgReader& r, std::unique_ptr<MonaiLeaf>* out) {
  auto l = std::make_unique<CropPad>();
  l->mode = CropPad::kRandCrop;
  const Keys k = ReadKeys(r, Role::kSpatial);
  l->size = SpatialSize(r, "roi_size");
  if (r.Has("max_roi_size")) {
    l->max_size = SpatialSize(r, "max_roi_size");
  } else {
    (void)r.Raw("max_roi_size");
    r.Put("max_roi_size", nullptr);
  }
  l->random_center = r.Bool("random_center", true);
  l->random_size = r.Bool("random_size", false);
  return Done(r, std::move(l), k, 1.0,
              {"roi_size", "max_roi_size", "random_center", "random_size", "lazy"}, out);
}

// The crops' label_key: required, the label.
void ReadLabelKey(ArgReader& r) {
  if (r.Has("label_key")) {
    (void)r.Choice("label_key", "label", {"label", "seg", "mask"});
  } else {
    r.Fail(r.where() + ": argument label_key is required (\"label\")");
  }
}

// The crops' image_key (null, or the image) and image_threshold.
void ReadImageKey(ArgReader& r, RandCropByPosNegLabel* l) {
  if (r.Has("image_key")) {
    (void)r.Choice("image_key", "image", {"image", "img"});
    l->use_image = true;
  } else {
    (void)r.Raw("image_key");
    r.Put("image_key", nullptr);
  }
  l->image_threshold = r.Number("image_threshold", 0.0);
}

// Arguments about Python objects and metadata: read, kept as given, no effect on the pixels.
void KeepIgnored(ArgReader& r, const std::vector<std::string>& keys) {
  for (const std::string& key : keys) {
    if (const json* v = r.Raw(key.c_str()); v != nullptr) r.Put(key.c_str(), *v);
  }
}

Status MakeRandCropByPosNegLabel(ArgReader& r, std::unique_ptr<MonaiLeaf>* out) {
  auto l = std::make_unique<RandCropByPosNegLabel>();
  const Keys k = ReadKeys(r, Role::kSpatial);
  ReadLabelKey(r);
  l->size = SpatialSize(r, "spatial_size");
  const double pos = r.Number("pos", 1.0, 0.0), neg = r.Number("neg", 1.0, 0.0);
  if (pos + neg <= 0) r.Fail(r.where() + ": pos and neg are both 0 (MONAI raises the same)");
  l->pos_ratio = pos + neg > 0 ? pos / (pos + neg) : 0.5;
  l->num_samples = r.Int("num_samples", 1, 1, 64);
  ReadImageKey(r, l.get());
  r.OnlyDefault("fg_indices_key", nullptr, "dspipe finds the foreground from the label itself");
  r.OnlyDefault("bg_indices_key", nullptr, "dspipe finds the background from the label itself");
  KeepIgnored(r, {"meta_keys", "meta_key_postfix"});
  l->allow_smaller = r.Bool("allow_smaller", false);
  if (!k.label) r.Fail(r.where() + ": keys must include the label it crops with the image");
  return Done(r, std::move(l), k, 1.0,
              {"label_key", "spatial_size", "pos", "neg", "num_samples", "image_key",
               "image_threshold", "fg_indices_key", "bg_indices_key", "meta_keys",
               "meta_key_postfix", "allow_smaller", "lazy"},
              out);
}

Status MakeRandCropByLabelClasses(ArgReader& r, std::unique_ptr<MonaiLeaf>* out) {
  auto l = std::make_unique<RandCropByPosNegLabel>();
  l->classes = true;
  const Keys k = ReadKeys(r, Role::kSpatial);
  ReadLabelKey(r);
  l->size = SpatialSize(r, "spatial_size");
  if (!r.Has("num_classes")) {
    r.Fail(r.where() +
           ": argument num_classes is required (dspipe's labels are class ids, one "
           "channel: MONAI asks for num_classes then too)");
  }
  l->num_classes = r.Int("num_classes", 2, 1, 65536);
  if (const json* v = r.Raw("ratios"); v != nullptr) {
    const bool ok = v->is_array() && static_cast<int>(v->size()) == l->num_classes &&
                    std::all_of(v->begin(), v->end(), [](const json& e) {
                      return e.is_number() && !e.is_boolean() && e.get<double>() >= 0;
                    });
    if (!ok) {
      r.Fail(r.where() + ": argument ratios must be num_classes numbers >= 0, got " + v->dump());
    } else {
      for (const json& e : *v) l->ratios.push_back(e.get<double>());
    }
    r.Put("ratios", *v);
  } else {
    r.Put("ratios", nullptr);
    l->ratios.assign(static_cast<size_t>(l->num_classes), 1.0);
  }
  l->num_samples = r.Int("num_samples", 1, 1, 64);
  ReadImageKey(r, l.get());
  r.OnlyDefault("indices_key", nullptr, "dspipe finds each class's pixels from the label itself");
  KeepIgnored(r, {"meta_keys", "meta_key_postfix", "warn"});
  l->allow_smaller = r.Bool("allow_smaller", false);
  if (r.Has("max_samples_per_class")) {
    l->max_per_class = r.Int("max_samples_per_class", 0, 1);
  } else {
    (void)r.Raw("max_samples_per_class");
    r.Put("max_samples_per_class", nullptr);
  }
  if (!k.label) r.Fail(r.where() + ": keys must include the label it crops with the image");
  return Done(r, std::move(l), k, 1.0,
              {"label_key", "spatial_size", "ratios", "num_classes", "num_samples", "image_key",
               "image_threshold", "indices_key", "meta_keys", "meta_key_postfix", "allow_smaller",
               "warn", "max_samples_per_class", "lazy"},
              out);
}

Status MakeNoOp(ArgReader& r, std::unique_ptr<MonaiLeaf>* out) {
  auto l = std::make_unique<NoOp>();
  const Keys k = ReadKeys(r, Role::kNoOp);
  // LoadImaged / EnsureTyped arguments that keep their meaning only at their defaults.
  if (r.Has("dtype")) ReadFloatDtype(r);
  if (r.Has("data_type")) {
    const std::string t = r.Choice("data_type", "tensor", {"tensor", "numpy"});
    (void)t;
  }
  // Arguments about Python objects and metadata: read, kept, no effect on the pixels.
  const std::vector<std::string> ignored = {
      "image_only",       "ensure_channel_first", "track_meta",     "device",
      "wrap_sequence",    "channel_dim",          "strict_check",   "reader",
      "simple_keys",      "prune_meta_pattern",   "prune_meta_sep", "meta_keys",
      "meta_key_postfix", "overwriting",          "expanduser"};
  KeepIgnored(r, ignored);
  std::vector<std::string> args = {"dtype", "data_type"};
  args.insert(args.end(), ignored.begin(), ignored.end());
  args.push_back("lazy");
  return Done(r, std::move(l), k, 1.0, args, out);
}

const std::vector<Entry>& Entries() {
  static const std::vector<Entry> e = {
      {{"LoadImaged", "no-op", "-", {"keys"}}, MakeNoOp},
      {{"EnsureChannelFirstd", "no-op", "-", {"keys"}}, MakeNoOp},
      {{"EnsureTyped", "no-op", "-", {"keys"}}, MakeNoOp},
      {{"ToTensord", "no-op", "-", {"keys"}}, MakeNoOp},
      {{"ScaleIntensityRanged",
        "intensity",
        "unchanged",
        {"keys", "a_min", "a_max", "b_min", "b_max", "clip"}},
       MakeScaleIntensityRange},
      {{"ScaleIntensityRangePercentilesd",
        "intensity",
        "unchanged",
        {"keys", "lower", "upper", "b_min", "b_max", "clip", "relative", "channel_wise"}},
       MakeScaleIntensityRangePercentiles},
      {{"ScaleIntensityd",
        "intensity",
        "unchanged",
        {"keys", "minv", "maxv", "factor", "channel_wise"}},
       MakeScaleIntensity},
      {{"NormalizeIntensityd",
        "intensity",
        "unchanged",
        {"keys", "subtrahend", "divisor", "nonzero", "channel_wise"}},
       MakeNormalizeIntensity},
      {{"ThresholdIntensityd", "intensity", "unchanged", {"keys", "threshold", "above", "cval"}},
       MakeThresholdIntensity},
      {{"ClipIntensityPercentilesd",
        "intensity",
        "unchanged",
        {"keys", "lower", "upper", "sharpness_factor", "channel_wise"}},
       MakeClipIntensityPercentiles},
      {{"RandScaleIntensityd",
        "intensity",
        "unchanged",
        {"keys", "factors", "prob", "channel_wise"}},
       MakeRandIntensity<false>},
      {{"RandShiftIntensityd",
        "intensity",
        "unchanged",
        {"keys", "offsets", "prob", "channel_wise"}},
       MakeRandIntensity<true>},
      {{"RandGaussianNoised",
        "intensity",
        "unchanged",
        {"keys", "prob", "mean", "std", "sample_std"}},
       MakeRandGaussianNoise},
      {{"RandFlipd", "spatial", "same flip", {"keys", "prob", "spatial_axis"}}, MakeRandFlip},
      {{"RandRotate90d", "spatial", "same rotation", {"keys", "prob", "max_k", "spatial_axes"}},
       MakeRandRotate90},
      {{"SpatialPadd",
        "spatial",
        "same padding (the pad value)",
        {"keys", "spatial_size", "method", "mode", "value"}},
       MakeSpatialPad},
      {{"CenterSpatialCropd", "spatial", "same crop", {"keys", "roi_size"}}, MakeCenterSpatialCrop},
      {{"RandSpatialCropd",
        "spatial",
        "same crop",
        {"keys", "roi_size", "max_roi_size", "random_center", "random_size"}},
       MakeRandSpatialCrop},
      {{"RandCropByPosNegLabeld",
        "spatial",
        "same crop (chosen from it)",
        {"keys", "label_key", "spatial_size", "pos", "neg", "num_samples", "image_key",
         "image_threshold", "allow_smaller"}},
       MakeRandCropByPosNegLabel},
      {{"RandCropByLabelClassesd",
        "spatial",
        "same crop (chosen from it)",
        {"keys", "label_key", "spatial_size", "ratios", "num_classes", "num_samples", "image_key",
         "image_threshold", "allow_smaller", "max_samples_per_class"}},
       MakeRandCropByLabelClasses},
      {{"ResizeWithPadOrCropd",
        "spatial",
        "same crop and padding",
        {"keys", "spatial_size", "method", "mode", "value"}},
       MakeResizeWithPadOrCrop},
  };
  return e;
}

std::string SupportedList() {
  std::string s;
  for (const Entry& e : Entries()) s += (s.empty() ? "" : ", ") + std::string(e.type.name);
  return s;
}

}  // namespace

bool IsMonaiSpec(const json& j) {
  if (j.is_object()) return j.contains("_target_");
  return j.is_array() && !j.empty() && j[0].is_object() && j[0].contains("_target_");
}

const std::vector<MonaiType>& MonaiTypes() {
  static const std::vector<MonaiType> t = [] {
    std::vector<MonaiType> v;
    for (const Entry& e : Entries()) v.push_back(e.type);
    return v;
  }();
  return t;
}

Status ParseMonaiSpec(const json& j, std::unique_ptr<Node>* root, int* node_count) {
  const json* list = &j;
  auto node = std::make_unique<Node>();
  node->type = Node::kCompose;
  node->position = 0;
  node->extra = json{{"__monai__", true}};
  if (j.is_object()) {
    const json& t = j.at("_target_");
    if (!t.is_string() || ShortTarget(t.get<std::string>()) != "Compose") {
      return Status::InvalidArgument(
          "transforms: a MONAI config is a list of transforms or a Compose with \"transforms\", "
          "got \"_target_\": " +
          t.dump());
    }
    for (auto it = j.begin(); it != j.end(); ++it) {
      if (it.key() != "_target_" && it.key() != "transforms" && it.key() != "map_items" &&
          it.key() != "unpack_items" && it.key() != "lazy" && it.key() != "log_stats") {
        return Status::InvalidArgument("transforms: Compose argument " + it.key() +
                                       " is not supported (supported: transforms)");
      }
    }
    if (!j.contains("transforms") || !j.at("transforms").is_array()) {
      return Status::InvalidArgument("transforms: the MONAI Compose needs a \"transforms\" list");
    }
    list = &j.at("transforms");
  }
  int position = 1;
  for (const json& e : *list) {
    const int pos = position++;
    if (!e.is_object() || !e.contains("_target_") || !e.at("_target_").is_string()) {
      return Status::InvalidArgument("transform " + std::to_string(pos) +
                                     ": expected a {\"_target_\": ...} object, got " +
                                     e.dump().substr(0, 80));
    }
    const std::string name = ShortTarget(e.at("_target_").get<std::string>());
    const std::string where = Where(pos, name);
    const auto& entries = Entries();
    auto it = std::find_if(entries.begin(), entries.end(),
                           [&](const Entry& en) { return name == en.type.name; });
    if (it == entries.end()) {
      return Status::InvalidArgument(where + ": MONAI transform " + name +
                                     " is not supported (supported: " + SupportedList() + ")");
    }
    json args = e;
    args.erase("_target_");
    ArgReader r(args, where);
    std::unique_ptr<MonaiLeaf> leaf;
    DSPIPE_RETURN_IF_ERROR(it->make(r, &leaf));
    leaf->name = name;
    leaf->args = r.normalized();
    auto child = std::make_unique<Node>();
    child->type = Node::kLeaf;
    child->position = pos;
    child->p = leaf->prob;
    child->leaf = std::move(leaf);
    node->children.push_back(std::move(child));
  }
  *node_count = position;
  *root = std::move(node);
  return Status::OK();
}

json MonaiJson(const Node& root) {
  json list = json::array();
  for (const auto& c : root.children) {
    json e = {{"_target_", c->leaf->name}};
    e.update(c->leaf->args);
    list.push_back(e);
  }
  return {{"_target_", "Compose"}, {"transforms", list}};
}

const Node* MonaiSpatialWithoutLabel(const Node& root) {
  for (const auto& c : root.children) {
    if (c->leaf == nullptr || c->leaf->kind() != Kind::kGeometric) continue;
    const auto* m = dynamic_cast<const MonaiLeaf*>(c->leaf.get());
    if (m != nullptr && !m->keys.label) return c.get();
  }
  return nullptr;
}

}  // namespace dspipe::transforms
