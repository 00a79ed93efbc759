// SPDX-License-Identifier: Apache-2.0
// Image-only pixel leaves that are not lookup tables: GaussNoise (per-pixel normal noise,
// added truncated as albucore does), GaussianBlur (albumentations' float64 kernel through
// cv::sepFilter2D), MedianBlur (cv::medianBlur), MotionBlur (albumentations' line kernel
// through cv::filter2D) and CoarseDropout (rectangular holes, also filled in the mask with
// fill_mask).
//
// GaussNoise draws its noise from a 4096-entry table of normal quantiles indexed by 12-bit
// splitmix64 words (a per-step seed): exact quantiles at (k + 0.5) / 4096, so the noise's CDF is
// within 1 / 4096 of the normal one (|z| <= 3.66). numpy / cv2.randn draws differ anyway.
#include <algorithm>
#include <array>
#include <cmath>
#include <opencv2/imgproc.hpp>

#include "transforms/ops.h"
#include "transforms/simd.h"

namespace dspipe::transforms {
namespace {

using nlohmann::json;

constexpr int kQuantileBits = 12;  // 4096 quantiles: a table of int16 noise values fits L1
constexpr int kQuantiles = 1 << kQuantileBits;

const std::vector<float>& NormalTable() {
  static const std::vector<float> table = [] {
    std::vector<float> t(kQuantiles);
    for (size_t k = 0; k < t.size(); ++k) {
      t[k] = static_cast<float>(NormalQuantile((static_cast<double>(k) + 0.5) / kQuantiles));
    }
    return t;
  }();
  return table;
}

// GaussNoise at noise_scale_factor 1, a row at a time: each value gets trunc(mean + sigma * z)
// for z the quantile a 12-bit field of the step's stream picks (four per 64-bit word, rows in
// order: simd.h AddNoiseRow), added and saturated as albucore does.
class NoiseRows final : public RowOp {
 public:
  NoiseRows(const Step& s, bool per_channel) : seed_(s.seed), per_channel_(per_channel) {
    const float sigma = static_cast<float>(s.v[0] * 255.0);
    const float mean = static_cast<float>(s.v[1] * 255.0);
    const std::vector<float>& z = NormalTable();
    for (int k = 0; k < kQuantiles; ++k) {
      noise_[static_cast<size_t>(k)] = static_cast<int16_t>(
          std::clamp(std::trunc(mean + sigma * z[static_cast<size_t>(k)]), -512.0f, 512.0f));
    }
  }
  void Row(uint8_t* p, int width, int channels) override {
    const size_t w = static_cast<size_t>(width);
    words_ += per_channel_ ? AddNoiseRow(p, w * static_cast<size_t>(channels), noise_.data(), seed_,
                                         words_ + 1)
                           : AddSharedNoiseRow(p, w, channels, noise_.data(), seed_, words_ + 1);
  }

 private:
  const uint64_t seed_;
  uint64_t words_ = 0;  // splitmix64 words used so far (rows start at a new word)
  const bool per_channel_;
  std::array<int16_t, kQuantiles + 1> noise_{};  // + AddNoiseRow's padding entry
};

class GaussNoiseLeaf final : public Leaf {
 public:
  Kind kind() const override { return Kind::kPixel; }
  Status Draw(Rng& rng, int, const cv::Mat*, Step* s) const override {
    s->out = s->in;
    s->v[0] = Uniform(rng, std_.lo, std_.hi);
    s->v[1] = Uniform(rng, mean_.lo, mean_.hi);
    s->seed = rng.Next();
    return Status::OK();
  }
  std::unique_ptr<RowOp> Rows(const Step& s, int) const override {
    if (factor_ < 1.0) return nullptr;
    return std::make_unique<NoiseRows>(s, per_channel_);
  }
  Status Apply(const Step& s, cv::Mat* image, cv::Mat*) const override {
    cv::Mat& img = *image;
    const int c = img.channels();
    if (factor_ >= 1.0) {
      NoiseRows rows(s, per_channel_);
      for (int y = 0; y < img.rows; ++y) rows.Row(img.ptr<uint8_t>(y), img.cols, c);
      return Status::OK();
    }
    const float sigma = static_cast<float>(s.v[0] * 255.0);
    const float mean = static_cast<float>(s.v[1] * 255.0);
    const std::vector<float>& z = NormalTable();
    Rng rng(s.seed);
    // noise_scale_factor < 1: a smaller float noise map resized (bilinear) to the image.
    const int rh = std::max(1, static_cast<int>(img.rows * factor_));
    const int rw = std::max(1, static_cast<int>(img.cols * factor_));
    const int nc = per_channel_ ? c : 1;
    cv::Mat small(rh, rw, CV_32FC(nc)), full;
    for (int y = 0; y < rh; ++y) {
      float* q = small.ptr<float>(y);
      for (int i = 0; i < rw * nc; ++i) q[i] = mean + sigma * z[rng.Next() & (kQuantiles - 1)];
    }
    cv::resize(small, full, img.size(), 0, 0, cv::INTER_LINEAR);
    for (int y = 0; y < img.rows; ++y) {
      uint8_t* p = img.ptr<uint8_t>(y);
      const float* q = full.ptr<float>(y);
      for (int x = 0; x < img.cols; ++x) {
        for (int k = 0; k < c; ++k) {
          const float v = std::trunc(q[x * nc + (per_channel_ ? k : 0)]);
          p[x * c + k] = static_cast<uint8_t>(std::clamp(p[x * c + k] + v, 0.0f, 255.0f));
        }
      }
    }
    return Status::OK();
  }
  json Params(const Step& s) const override {
    return {{"sigma", s.v[0]}, {"mean", s.v[1]}, {"sigma_px", s.v[0] * 255.0}};
  }
  Range std_, mean_;
  bool per_channel_ = true;
  double factor_ = 1;
};

Status MakeGaussNoise(ArgReader& r, std::unique_ptr<Leaf>* out) {
  auto l = std::make_unique<GaussNoiseLeaf>();
  l->prob = r.Prob(0.5);
  l->std_ = r.RangeArg("std_range", {0.2, 0.44}, Widen::kPairOnly, 0, 1);
  l->mean_ = r.RangeArg("mean_range", {0, 0}, Widen::kPairOnly, -1, 1);
  l->per_channel_ = r.Bool("per_channel", true);
  l->factor_ = r.Number("noise_scale_factor", 1.0, 1e-9, 1.0);
  DSPIPE_RETURN_IF_ERROR(
      r.Finish({"std_range", "mean_range", "per_channel", "noise_scale_factor", "p"}));
  *out = std::move(l);
  return Status::OK();
}

class GaussianBlurLeaf final : public Leaf {
 public:
  Kind kind() const override { return Kind::kPixel; }
  Status Draw(Rng& rng, int, const cv::Mat*, Step* s) const override {
    s->out = s->in;
    s->v[0] = Uniform(rng, sigma_.lo, sigma_.hi);
    s->iv[0] = RandInt(rng, static_cast<int>(blur_.lo), static_cast<int>(blur_.hi));
    return Status::OK();
  }
  Status Apply(const Step& s, cv::Mat* image, cv::Mat*) const override {
    const cv::Mat k = Kernel(s.v[0], s.iv[0]);
    cv::sepFilter2D(*image, *image, -1, k, k);
    return Status::OK();
  }
  // blur_functional.create_gaussian_kernel_1d.
  static cv::Mat Kernel(double sigma, int ksize) {
    int size = ksize == 0 ? static_cast<int>(sigma * 3.5) * 2 + 1 : ksize;
    if (size % 2 == 0) ++size;
    cv::Mat k(size, 1, CV_64F);
    double sum = 0;
    for (int i = 0; i < size; ++i) {
      const double x = size < 100
                           ? i - size / 2
                           : -(size / 2) + static_cast<double>(i) * (2 * (size / 2)) / (size - 1);
      k.at<double>(i) = std::exp(-0.5 * (x / sigma) * (x / sigma));
      sum += k.at<double>(i);
    }
    k /= sum;
    return k;
  }
  json Params(const Step& s) const override {
    const cv::Mat k = Kernel(s.v[0], s.iv[0]);
    return {{"kernel", std::vector<double>(k.begin<double>(), k.end<double>())},
            {"sigma", s.v[0]},
            {"ksize", s.iv[0]}};
  }
  Range blur_, sigma_;
};

Status MakeGaussianBlur(ArgReader& r, std::unique_ptr<Leaf>* out) {
  auto l = std::make_unique<GaussianBlurLeaf>();
  l->prob = r.Prob(0.5);
  l->blur_ = r.RangeArg("blur_limit", {0, 0}, Widen::kZeroPlus, 0, 1e6, ArgReader::kIntegers);
  l->sigma_ = r.RangeArg("sigma_limit", {0.5, 3.0}, Widen::kZeroPlus, 0, 1e6);
  if (l->sigma_.hi <= 0) {
    r.Fail(r.where() + ": argument sigma_limit must reach above 0 (a zero sigma divides by zero)");
  }
  DSPIPE_RETURN_IF_ERROR(r.Finish({"blur_limit", "sigma_limit", "p"}));
  *out = std::move(l);
  return Status::OK();
}

// The largest blur kernel dspipe takes (MedianBlur, MotionBlur): albumentations takes any, but
// MotionBlur's kernel is k x k floats and cv::filter2D's cost grows with k^2.
constexpr int kMaxBlurKernel = 1023;

// blur_limit as albumentations 2.0.8's process_blur_limit(min_value=3) reads it: an int n is
// (3, n), a pair is taken as given; each end is raised to at least 3 and an even end to the next
// odd number (albumentations warns and goes on), and a pair whose first end is then larger than
// the second is (second, second).
std::pair<int, int> BlurLimit(ArgReader& r) {
  std::pair<int, int> lim{3, 7};
  if (const json* v = r.Raw("blur_limit"); v != nullptr) {
    const auto whole = [](const json& e, int* out) {
      if (!e.is_number() || e.is_boolean()) return false;
      const double x = e.get<double>();
      if (x != std::trunc(x) || std::fabs(x) > 1e9) return false;
      *out = static_cast<int>(x);
      return true;
    };
    int a = 0, b = 0;
    if (v->is_array() && v->size() == 2 && whole((*v)[0], &a) && whole((*v)[1], &b)) {
      lim = {a, b};
    } else if (whole(*v, &b)) {
      lim = {3, b};
    } else {
      r.Fail(r.where() + ": argument blur_limit must be an integer or a pair of integers, got " +
             v->dump());
    }
  }
  const auto odd = [](int k) {
    k = std::max(k, 3);
    return k % 2 == 0 ? k + 1 : k;
  };
  lim = {odd(lim.first), odd(lim.second)};
  if (lim.first > lim.second) lim.first = lim.second;
  if (lim.second > kMaxBlurKernel) {
    r.Fail(r.where() + ": argument blur_limit=(" + std::to_string(lim.first) + ", " +
           std::to_string(lim.second) + ") asks for kernels up to " + std::to_string(lim.second) +
           " px; dspipe takes up to " + std::to_string(kMaxBlurKernel));
  }
  r.Put("blur_limit", json::array({lim.first, lim.second}));
  return lim;
}

// fblur.sample_odd_from_range on a processed limit (both ends odd, lo <= hi): an odd size drawn
// uniformly, as randint(0, count - 1) picks its index.
int SampleOdd(Rng& rng, std::pair<int, int> lim) {
  if (lim.first == lim.second) return lim.first;
  return lim.first + 2 * RandInt(rng, 0, (lim.second - lim.first) / 2);
}

// MedianBlur: cv::medianBlur (albumentations' median_blur: replicated border) with an odd
// aperture drawn from blur_limit.
class MedianBlurLeaf final : public Leaf {
 public:
  Kind kind() const override { return Kind::kPixel; }
  Status Draw(Rng& rng, int, const cv::Mat*, Step* s) const override {
    s->out = s->in;
    s->iv[0] = SampleOdd(rng, limit_);
    return Status::OK();
  }
  Status Apply(const Step& s, cv::Mat* image, cv::Mat*) const override {
    cv::Mat out;
    cv::medianBlur(*image, out, s.iv[0]);
    out.copyTo(*image);
    return Status::OK();
  }
  json Params(const Step& s) const override { return {{"kernel", s.iv[0]}}; }
  std::pair<int, int> limit_{3, 7};
};

Status MakeMedianBlur(ArgReader& r, std::unique_ptr<Leaf>* out) {
  auto l = std::make_unique<MedianBlurLeaf>();
  l->prob = r.Prob(0.5);
  l->limit_ = BlurLimit(r);
  DSPIPE_RETURN_IF_ERROR(r.Finish({"blur_limit", "p"}));
  *out = std::move(l);
  return Status::OK();
}

// MotionBlur: fblur.create_motion_kernel's line of ones in a k x k float32 kernel, divided by
// its count in float32, applied with cv::filter2D (fpixel.convolve: reflect-101 border, the
// result rounded and saturated to uint8). Draws: k (sample_odd_from_range), angle, direction,
// then with allow_shifted the line's shift in x and y (uniform(-1, 1) * (k // 2) / 2 each).
class MotionBlurLeaf final : public Leaf {
 public:
  Kind kind() const override { return Kind::kPixel; }
  Status Draw(Rng& rng, int, const cv::Mat*, Step* s) const override {
    s->out = s->in;
    const int k = SampleOdd(rng, limit_);
    s->iv[0] = k;
    s->v[0] = Uniform(rng, angle_.lo, angle_.hi);
    s->v[1] = Uniform(rng, direction_.lo, direction_.hi);
    s->v[2] = s->v[3] = 0;
    if (shifted_) {
      s->v[2] = Uniform(rng, -1, 1) * (k / 2) / 2;
      s->v[3] = Uniform(rng, -1, 1) * (k / 2) / 2;
    }
    return Status::OK();
  }
  Status Apply(const Step& s, cv::Mat* image, cv::Mat*) const override {
    cv::filter2D(*image, *image, -1, Kernel(s));
    return Status::OK();
  }
  // The line: k points t = linspace(t0, t1, k) (numpy's: start + i * step, the last one t1)
  // from the centre along (cos, sin) of the angle, t0 = -(k // 2) and t1 = k // 2 shortened
  // toward the centre by the direction's bias, shifted, rounded half to even and clipped to the
  // kernel.
  static cv::Mat Kernel(const Step& s) {
    const int k = s.iv[0], center = k / 2, half = k / 2;
    const double direction = std::clamp(s.v[1], -1.0, 1.0);
    const double rad = s.v[0] * (M_PI / 180.0);  // np.deg2rad
    const double dx = std::cos(rad), dy = std::sin(rad);
    double t0 = -static_cast<double>(half), t1 = half;
    if (direction < 0) {
      t1 = half * (1 - std::fabs(direction));
    } else if (direction > 0) {
      t0 = -half * (1 - direction);
    }
    cv::Mat kernel = cv::Mat::zeros(k, k, CV_32F);
    const double step = (t1 - t0) / (k - 1);
    for (int i = 0; i < k; ++i) {
      const double t = i == k - 1 ? t1 : i * step + t0;
      const double x = (center + dx * t) + s.v[2], y = (center + dy * t) + s.v[3];
      const int xi = static_cast<int>(std::clamp(std::nearbyint(x), 0.0, k - 1.0));
      const int yi = static_cast<int>(std::clamp(std::nearbyint(y), 0.0, k - 1.0));
      kernel.at<float>(yi, xi) = 1.0f;
    }
    // kernel.astype(float32) / np.sum(kernel): each one becomes float32(1) / float32(count).
    const float one = 1.0f / static_cast<float>(cv::countNonZero(kernel));
    for (int y = 0; y < k; ++y) {
      float* row = kernel.ptr<float>(y);
      for (int x = 0; x < k; ++x) row[x] = row[x] != 0 ? one : 0.0f;
    }
    return kernel;
  }
  json Params(const Step& s) const override {
    const cv::Mat k = Kernel(s);
    json rows = json::array();
    for (int y = 0; y < k.rows; ++y) {
      rows.push_back(std::vector<double>(k.ptr<float>(y), k.ptr<float>(y) + k.cols));
    }
    return {{"kernel", rows},
            {"ksize", s.iv[0]},
            {"angle", s.v[0]},
            {"direction", s.v[1]},
            {"shift", {s.v[2], s.v[3]}}};
  }
  std::pair<int, int> limit_{3, 7};
  Range angle_, direction_;
  bool shifted_ = true;
};

Status MakeMotionBlur(ArgReader& r, std::unique_ptr<Leaf>* out) {
  auto l = std::make_unique<MotionBlurLeaf>();
  l->prob = r.Prob(0.5);
  l->limit_ = BlurLimit(r);
  l->shifted_ = r.Bool("allow_shifted", true);
  l->angle_ = r.RangeArg("angle_range", {0, 360}, Widen::kPairOnly, 0, 360);
  l->direction_ = r.RangeArg("direction_range", {-1, 1}, Widen::kPairOnly, -1, 1);
  DSPIPE_RETURN_IF_ERROR(
      r.Finish({"blur_limit", "allow_shifted", "angle_range", "direction_range", "p"}));
  *out = std::move(l);
  return Status::OK();
}

class CoarseDropoutLeaf final : public Leaf {
 public:
  Kind kind() const override { return Kind::kPixel; }
  // albumentations 2.0.8 draws pixel sizes (the height range decides: hi >= 1) with
  // integers(int(lo), min(hi, side) + 1), which raises ValueError (low >= high) when the
  // smallest hole is larger than the image.
  Status CheckInput(Size in) const override {
    if (h_.hi < 1) return Status::OK();  // fractions of the image (MakeCoarseDropout checks)
    const auto refuse = [&](const char* arg, const Range& r, const char* side, int size) {
      return Status::InvalidArgument(
          std::string("argument ") + arg + "=(" + json(r.lo).dump() + ", " + json(r.hi).dump() +
          ") asks for holes at least " + std::to_string(static_cast<int>(r.lo)) + " px " + side +
          ", larger than the " + std::to_string(in.h) + "x" + std::to_string(in.w) +
          " image it gets (albumentations 2.0.8 raises ValueError: low >= high): give sizes "
          "up to " +
          std::to_string(size) + " px, or fractions of the image such as (0.1, 0.2)");
    };
    if (static_cast<int>(h_.lo) > in.h) return refuse("hole_height_range", h_, "high", in.h);
    if (static_cast<int>(w_.lo) > in.w) return refuse("hole_width_range", w_, "wide", in.w);
    return Status::OK();
  }
  Status Draw(Rng& rng, int, const cv::Mat*, Step* s) const override {
    s->out = s->in;
    if (Status st = CheckInput(s->in); !st.ok()) return Status::BadInput(st.message());
    const int n = RandInt(rng, num_.first, num_.second);
    const int height = s->in.h, width = s->in.w;
    s->holes.clear();
    for (int i = 0; i < n; ++i) {
      int hh, hw;
      if (h_.hi >= 1) {  // absolute sizes (decided by the height range, as albumentations)
        hh = RandInt(rng, static_cast<int>(h_.lo), static_cast<int>(std::min(h_.hi, 1.0 * height)));
        hw = RandInt(rng, static_cast<int>(w_.lo), static_cast<int>(std::min(w_.hi, 1.0 * width)));
      } else {
        hh = static_cast<int>(height * Uniform(rng, h_.lo, h_.hi));
        hw = static_cast<int>(width * Uniform(rng, w_.lo, w_.hi));
      }
      hh = std::min(hh, height), hw = std::min(hw, width);
      const int y0 = RandInt(rng, 0, height - hh), x0 = RandInt(rng, 0, width - hw);
      s->holes.insert(s->holes.end(), {x0, y0, x0 + hw, y0 + hh});
    }
    s->seed = rng.Next();
    return Status::OK();
  }
  Status Apply(const Step& s, cv::Mat* image, cv::Mat* mask) const override {
    Rng rng(s.seed);
    const int c = image->channels();
    for (size_t i = 0; i + 3 < s.holes.size(); i += 4) {
      const cv::Rect r(s.holes[i], s.holes[i + 1], s.holes[i + 2] - s.holes[i],
                       s.holes[i + 3] - s.holes[i + 1]);
      if (r.area() == 0) continue;
      cv::Mat hole = (*image)(r);
      if (fill_mode_ == kValue) {
        hole.setTo(FillScalar(fill_, c));
      } else {
        cv::Scalar uniform;
        for (int k = 0; k < c; ++k) uniform[k] = static_cast<double>(rng.Below(256));
        for (int y = 0; y < hole.rows; ++y) {
          uint8_t* p = hole.ptr<uint8_t>(y);
          for (int x = 0; x < hole.cols * c; ++x) {
            p[x] = fill_mode_ == kRandomUniform ? static_cast<uint8_t>(uniform[x % c])
                                                : static_cast<uint8_t>(rng.Next() >> 56);
          }
        }
      }
      if (mask != nullptr && has_fill_mask_) (*mask)(r).setTo(cv::Scalar::all(fill_mask_));
    }
    return Status::OK();
  }
  json Params(const Step& s) const override {
    json holes = json::array();
    for (size_t i = 0; i + 3 < s.holes.size(); i += 4) {
      holes.push_back({s.holes[i], s.holes[i + 1], s.holes[i + 2], s.holes[i + 3]});
    }
    return {{"holes", holes}, {"seed", 0}};
  }
  enum FillMode { kValue, kRandom, kRandomUniform };
  std::pair<int, int> num_;
  Range h_, w_;
  FillMode fill_mode_ = kValue;
  Fill fill_;
  bool has_fill_mask_ = false;
  double fill_mask_ = 0;
};

Status MakeCoarseDropout(ArgReader& r, std::unique_ptr<Leaf>* out) {
  auto l = std::make_unique<CoarseDropoutLeaf>();
  l->prob = r.Prob(0.5);
  const Range n =
      r.RangeArg("num_holes_range", {1, 2}, Widen::kPairOnly, 1, 1e6, ArgReader::kIntegers);
  l->num_ = {static_cast<int>(n.lo), static_cast<int>(n.hi)};
  l->h_ = r.RangeArg("hole_height_range", {0.1, 0.2}, Widen::kPairOnly, 0, 1e6);
  l->w_ = r.RangeArg("hole_width_range", {0.1, 0.2}, Widen::kPairOnly, 0, 1e6);
  if (l->h_.hi < 1 && l->w_.hi > 1) {
    // albumentations reads both ranges as fractions when the height range is one, so a hole is
    // up to w_.hi times the image width and integers(0, width - hole + 1) raises.
    r.Fail(r.where() + ": argument hole_width_range=(" + json(l->w_.lo).dump() + ", " +
           json(l->w_.hi).dump() + ") is larger than 1 while hole_height_range=(" +
           json(l->h_.lo).dump() + ", " + json(l->h_.hi).dump() +
           ") is a fraction: albumentations reads both as fractions of the image (the height "
           "range decides), so holes would be wider than the image (it raises ValueError: high "
           "<= 0); give both in pixels or both as fractions");
  }
  if (const json* f = r.Raw("fill"); f != nullptr && f->is_string()) {
    const std::string mode = f->get<std::string>();
    if (mode == "random") {
      l->fill_mode_ = CoarseDropoutLeaf::kRandom;
    } else if (mode == "random_uniform") {
      l->fill_mode_ = CoarseDropoutLeaf::kRandomUniform;
    } else {
      r.Fail(r.where() + ": argument fill=\"" + mode +
             "\" is not supported (a number, a list, \"random\" or \"random_uniform\"; "
             "inpainting is not implemented)");
    }
    r.Put("fill", mode);
  } else {
    l->fill_ = r.FillArg("fill", 0.0);
  }
  if (r.Has("fill_mask")) {
    l->has_fill_mask_ = true;
    l->fill_mask_ = r.FillArg("fill_mask", 0.0).values[0];
  } else {
    (void)r.Raw("fill_mask");
    r.Put("fill_mask", nullptr);
  }
  DSPIPE_RETURN_IF_ERROR(r.Finish(
      {"num_holes_range", "hole_height_range", "hole_width_range", "fill", "fill_mask", "p"}));
  *out = std::move(l);
  return Status::OK();
}

}  // namespace

double NormalQuantile(double p) {
  static const double a[] = {-3.969683028665376e+01, 2.209460984245205e+02,  -2.759285104469687e+02,
                             1.383577518672690e+02,  -3.066479806614716e+01, 2.506628277459239e+00};
  static const double b[] = {-5.447609879822406e+01, 1.615858368580409e+02, -1.556989798598866e+02,
                             6.680131188771972e+01, -1.328068155288572e+01};
  static const double c[] = {-7.784894002430293e-03, -3.223964580411365e-01, -2.400758277161838e+00,
                             -2.549732539343734e+00, 4.374664141464968e+00,  2.938163982698783e+00};
  static const double d[] = {7.784695709041462e-03, 3.224671290700398e-01, 2.445134137142996e+00,
                             3.754408661907416e+00};
  if (p < 0.02425) {
    const double q = std::sqrt(-2 * std::log(p));
    return (((((c[0] * q + c[1]) * q + c[2]) * q + c[3]) * q + c[4]) * q + c[5]) /
           ((((d[0] * q + d[1]) * q + d[2]) * q + d[3]) * q + 1);
  }
  if (p > 1 - 0.02425) return -NormalQuantile(1 - p);
  const double q = p - 0.5, r = q * q;
  return (((((a[0] * r + a[1]) * r + a[2]) * r + a[3]) * r + a[4]) * r + a[5]) * q /
         (((((b[0] * r + b[1]) * r + b[2]) * r + b[3]) * r + b[4]) * r + 1);
}

void AddPixelLeaves(std::vector<LeafType>* t) {
  t->push_back({"GaussNoise",
                MakeGaussNoise,
                "photometric",
                "unchanged",
                false,
                {"std_range", "mean_range", "per_channel", "noise_scale_factor", "p"}});
  t->push_back({"GaussianBlur",
                MakeGaussianBlur,
                "photometric",
                "unchanged",
                false,
                {"blur_limit", "sigma_limit", "p"}});
  t->push_back(
      {"MedianBlur", MakeMedianBlur, "photometric", "unchanged", false, {"blur_limit", "p"}});
  t->push_back({"MotionBlur",
                MakeMotionBlur,
                "photometric",
                "unchanged",
                false,
                {"blur_limit", "allow_shifted", "angle_range", "direction_range", "p"}});
  t->push_back(
      {"CoarseDropout",
       MakeCoarseDropout,
       "photometric",
       "holes filled with fill_mask (unchanged when fill_mask is null)",
       false,
       {"num_holes_range", "hole_height_range", "hole_width_range", "fill", "fill_mask", "p"}});
}

}  // namespace dspipe::transforms
