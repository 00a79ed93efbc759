// SPDX-License-Identifier: Apache-2.0
// Colour leaves (image only): RandomBrightnessContrast and RandomGamma (uint8 lookup tables,
// foldable into the normalize pass), HueSaturationValue, ColorJitter, ToGray (pca included),
// CLAHE, and Normalize (which maps onto the loader's normalize stage). The tables are built with
// albumentations / albucore 2.0.8's arithmetic (float32 multiply-add, truncating casts).
#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <opencv2/imgproc.hpp>

#include "transforms/ops.h"
#include "transforms/simd.h"

namespace dspipe::transforms {
namespace {

using nlohmann::json;

// albucore's uint8 multiply_add table: clip(arange(256, float32) * factor + value) as uint8.
void MultiplyAddLut(double factor, double value, uint8_t* lut) {
  const float f = static_cast<float>(factor), b = static_cast<float>(value);
  for (int v = 0; v < 256; ++v) {
    volatile float x = static_cast<float>(v) * f;  // two float32 roundings, no fused multiply-add
    const float y = x + b;
    lut[v] = static_cast<uint8_t>(std::clamp(y, 0.0f, 255.0f));
  }
}

void ApplyLut(cv::Mat* image, const uint8_t lut[4][256]) { LookUp(image, lut); }

double GrayMean(const cv::Mat& img) {
  if (img.channels() == 1) return cv::mean(img)[0];
  cv::Mat gray;
  cv::cvtColor(img, gray, cv::COLOR_RGB2GRAY);
  return cv::mean(gray)[0];
}

double MeanAll(const cv::Mat& img) {  // np.mean(image) over every value
  const cv::Scalar m = cv::mean(img);
  double s = 0;
  for (int c = 0; c < img.channels(); ++c) s += m[c];
  return s / img.channels();
}

// A lookup-table leaf: Apply is Lut + ApplyLut.
class LutRows final : public RowOp {
 public:
  void Row(uint8_t* p, int width, int channels) override {
    LookUpRow(p, static_cast<size_t>(width) * static_cast<size_t>(channels), channels, lut);
  }
  uint8_t lut[4][256];
};

class LutLeaf : public Leaf {
 public:
  Kind kind() const override { return Kind::kLut; }
  bool commutes_with_hflip() const override { return true; }
  Status Apply(const Step& s, cv::Mat* image, cv::Mat*) const override {
    uint8_t lut[4][256];
    Lut(s, *image, lut);
    ApplyLut(image, lut);
    return Status::OK();
  }
  std::unique_ptr<RowOp> Rows(const Step& s, int) const override {
    if (lut_reads_image()) return nullptr;
    auto op = std::make_unique<LutRows>();
    Lut(s, cv::Mat(), op->lut);
    return op;
  }
};

class BrightnessContrastLeaf final : public LutLeaf {
 public:
  Status Draw(Rng& rng, int, const cv::Mat*, Step* s) const override {
    s->out = s->in;
    s->v[0] = 1.0 + Uniform(rng, contrast_.lo, contrast_.hi);  // alpha
    s->v[1] = Uniform(rng, brightness_.lo, brightness_.hi);    // beta, fraction
    return Status::OK();
  }
  void Lut(const Step& s, const cv::Mat& image, uint8_t lut[4][256]) const override {
    double alpha = s.v[0], beta = s.v[1] * (by_max_ ? 255.0 : MeanAll(image));
    if (safe_) {  // get_safe_brightness_contrast_params
      if (alpha > 0) {
        beta = std::clamp(beta, 0.0, 255.0);
        alpha = std::min(alpha, (255.0 - beta) / 255.0);
      } else {
        beta = std::min(beta, 255.0);
        alpha = std::max(alpha, -beta / 255.0);
      }
    }
    MultiplyAddLut(alpha, beta, lut[0]);
    for (int c = 1; c < 4; ++c) std::copy(lut[0], lut[0] + 256, lut[c]);
  }
  json Params(const Step& s) const override {
    return {{"alpha", s.v[0]}, {"beta", s.v[1] * 255.0}, {"beta_fraction", s.v[1]}};
  }
  bool lut_reads_image() const override { return !by_max_; }
  Range brightness_, contrast_;
  bool by_max_ = true, safe_ = false;
};

Status MakeBrightnessContrast(ArgReader& r, std::unique_ptr<Leaf>* out) {
  auto l = std::make_unique<BrightnessContrastLeaf>();
  l->prob = r.Prob(0.5);
  l->brightness_ = r.RangeArg("brightness_limit", {-0.2, 0.2}, Widen::kSymmetric, -1e9, 1e9);
  l->contrast_ = r.RangeArg("contrast_limit", {-0.2, 0.2}, Widen::kSymmetric, -1e9, 1e9);
  l->by_max_ = r.Bool("brightness_by_max", true);
  l->safe_ = r.Bool("ensure_safe_range", false);
  DSPIPE_RETURN_IF_ERROR(r.Finish(
      {"brightness_limit", "contrast_limit", "brightness_by_max", "ensure_safe_range", "p"}));
  *out = std::move(l);
  return Status::OK();
}

class GammaLeaf final : public LutLeaf {
 public:
  Status Draw(Rng& rng, int, const cv::Mat*, Step* s) const override {
    s->out = s->in;
    s->v[0] = Uniform(rng, limit_.lo, limit_.hi) / 100.0;
    return Status::OK();
  }
  void Lut(const Step& s, const cv::Mat&, uint8_t lut[4][256]) const override {
    // np.arange(0, 256 / 255, 1 / 255) ** gamma * 255, cast to uint8 (truncated).
    const double step = 1.0 / 255;
    for (int v = 0; v < 256; ++v) {
      lut[0][v] = static_cast<uint8_t>(std::pow(v * step, s.v[0]) * 255);
    }
    for (int c = 1; c < 4; ++c) std::copy(lut[0], lut[0] + 256, lut[c]);
  }
  json Params(const Step& s) const override { return {{"gamma", s.v[0]}}; }
  Range limit_;
};

// RGBShift (2.0.8: an AdditiveNoise, uniform, one value per channel): a limit with any
// |value| > 1 is in pixel units and divided by 255, one within [-1, 1] is a fraction; the shift
// is uniform(lo, hi) * 255, truncated toward zero (albucore's uint8 add table), added with
// saturation. A gray image takes the red channel's shift.
class RgbShiftLeaf final : public LutLeaf {
 public:
  Status Draw(Rng& rng, int channels, const cv::Mat*, Step* s) const override {
    s->out = s->in;
    for (int c = 0; c < std::min(channels, 3); ++c) {
      s->v[c] = Uniform(rng, limit_[c].lo, limit_[c].hi) * 255.0;
    }
    return Status::OK();
  }
  void Lut(const Step& s, const cv::Mat&, uint8_t lut[4][256]) const override {
    for (int c = 0; c < 3; ++c) {
      const float shift = static_cast<float>(std::trunc(s.v[c]));
      for (int v = 0; v < 256; ++v) {
        lut[c][v] = static_cast<uint8_t>(std::clamp(static_cast<float>(v) + shift, 0.0f, 255.0f));
      }
    }
    std::copy(lut[0], lut[0] + 256, lut[3]);
  }
  json Params(const Step& s) const override { return {{"shift", {s.v[0], s.v[1], s.v[2]}}}; }
  Range limit_[3];
};

Status MakeRgbShift(ArgReader& r, std::unique_ptr<Leaf>* out) {
  auto l = std::make_unique<RgbShiftLeaf>();
  l->prob = r.Prob(0.5);
  const char* keys[3] = {"r_shift_limit", "g_shift_limit", "b_shift_limit"};
  for (int c = 0; c < 3; ++c) {
    Range lim = r.RangeArg(keys[c], {-20, 20}, Widen::kSymmetric, -255, 255);
    if (std::abs(lim.lo) > 1 || std::abs(lim.hi) > 1) lim = {lim.lo / 255.0, lim.hi / 255.0};
    l->limit_[c] = lim;
  }
  // What A.to_dict writes of the AdditiveNoise it is: RGBShift's constructor sets them from the
  // limits (uniform, one value per channel), so they are ignored as albumentations does.
  for (const char* k : {"noise_type", "spatial_mode", "noise_params", "approximation"}) {
    r.Ignored(k, nullptr);
  }
  DSPIPE_RETURN_IF_ERROR(r.Finish({"r_shift_limit", "g_shift_limit", "b_shift_limit", "p",
                                   "noise_type", "spatial_mode", "noise_params", "approximation"}));
  *out = std::move(l);
  return Status::OK();
}

Status MakeGamma(ArgReader& r, std::unique_ptr<Leaf>* out) {
  auto l = std::make_unique<GammaLeaf>();
  l->prob = r.Prob(0.5);
  l->limit_ = r.RangeArg("gamma_limit", {80, 120}, Widen::kOnePlus, 1e-9, 1e9);
  DSPIPE_RETURN_IF_ERROR(r.Finish({"gamma_limit", "p"}));
  *out = std::move(l);
  return Status::OK();
}

// fpixel.shift_hsv on uint8: hue table mod 180, saturation / value added with truncation
// toward zero and saturation, grey pixels (saturation 0) kept grey.
void ShiftHsv(cv::Mat* img, double hue, double sat, double val) {
  if (hue == 0 && sat == 0 && val == 0) return;
  const bool gray = img->channels() == 1;
  if (gray) hue = sat = 0;
  cv::Mat rgb = *img, hsv;
  if (gray) cv::cvtColor(*img, rgb, cv::COLOR_GRAY2RGB);
  cv::cvtColor(rgb, hsv, cv::COLOR_RGB2HSV);
  uint8_t hl[256], sl[256], vl[256];
  const int si = static_cast<int>(sat), vi = static_cast<int>(val);
  for (int v = 0; v < 256; ++v) {
    double h = std::fmod(v + hue, 180.0);
    if (h < 0) h += 180.0;
    hl[v] = hue != 0 ? static_cast<uint8_t>(h) : static_cast<uint8_t>(v);
    sl[v] = static_cast<uint8_t>(std::clamp(v + si, 0, 255));
    vl[v] = static_cast<uint8_t>(std::clamp(v + vi, 0, 255));
  }
  for (int y = 0; y < hsv.rows; ++y) {
    uint8_t* p = hsv.ptr<uint8_t>(y);
    for (int x = 0; x < hsv.cols; ++x, p += 3) {
      p[0] = hl[p[0]];
      p[1] = p[1] == 0 ? 0 : sl[p[1]];
      p[2] = vl[p[2]];
    }
  }
  if (gray) {
    cv::cvtColor(hsv, rgb, cv::COLOR_HSV2RGB);
    cv::cvtColor(rgb, *img, cv::COLOR_RGB2GRAY);
  } else {
    cv::cvtColor(hsv, *img, cv::COLOR_HSV2RGB);
  }
}

class HsvLeaf final : public Leaf {
 public:
  Kind kind() const override { return Kind::kPixel; }
  Status Draw(Rng& rng, int, const cv::Mat*, Step* s) const override {
    s->out = s->in;
    s->v[0] = Uniform(rng, hue_.lo, hue_.hi);
    s->v[1] = Uniform(rng, sat_.lo, sat_.hi);
    s->v[2] = Uniform(rng, val_.lo, val_.hi);
    return Status::OK();
  }
  Status Apply(const Step& s, cv::Mat* image, cv::Mat*) const override {
    ShiftHsv(image, s.v[0], s.v[1], s.v[2]);
    return Status::OK();
  }
  json Params(const Step& s) const override {
    return {{"hue_shift", s.v[0]}, {"sat_shift", s.v[1]}, {"val_shift", s.v[2]}};
  }
  Range hue_, sat_, val_;
};

Status MakeHsv(ArgReader& r, std::unique_ptr<Leaf>* out) {
  auto l = std::make_unique<HsvLeaf>();
  l->prob = r.Prob(0.5);
  l->hue_ = r.RangeArg("hue_shift_limit", {-20, 20}, Widen::kSymmetric, -1e9, 1e9);
  l->sat_ = r.RangeArg("sat_shift_limit", {-30, 30}, Widen::kSymmetric, -1e9, 1e9);
  l->val_ = r.RangeArg("val_shift_limit", {-20, 20}, Widen::kSymmetric, -1e9, 1e9);
  DSPIPE_RETURN_IF_ERROR(r.Finish({"hue_shift_limit", "sat_shift_limit", "val_shift_limit", "p"}));
  *out = std::move(l);
  return Status::OK();
}

// ColorJitter: torchvision's four adjustments in a random order, albumentations' uint8 code.
class ColorJitterLeaf final : public Leaf {
 public:
  Kind kind() const override { return Kind::kPixel; }
  Status Draw(Rng& rng, int, const cv::Mat*, Step* s) const override {
    s->out = s->in;
    s->v[0] = Uniform(rng, ranges_[0].lo, ranges_[0].hi);
    s->v[1] = Uniform(rng, ranges_[1].lo, ranges_[1].hi);
    s->v[2] = Uniform(rng, ranges_[2].lo, ranges_[2].hi);
    s->v[3] = Uniform(rng, ranges_[3].lo, ranges_[3].hi);
    int order[4] = {0, 1, 2, 3};
    for (int i = 3; i > 0; --i) std::swap(order[i], order[rng.Below(static_cast<uint64_t>(i) + 1)]);
    std::copy(order, order + 4, s->iv);
    return Status::OK();
  }
  Status Apply(const Step& s, cv::Mat* image, cv::Mat*) const override {
    cv::Mat& img = *image;
    const bool gray = img.channels() == 1;
    for (int k = 0; k < 4; ++k) {
      const double f = s.v[s.iv[k]];
      uint8_t lut[4][256];
      switch (s.iv[k]) {
        case 0:  // brightness: multiply (factor 0: black)
          if (f == 1) break;
          MultiplyAddLut(f, 0, lut[0]);
          for (int c = 1; c < 4; ++c) std::copy(lut[0], lut[0] + 256, lut[c]);
          ApplyLut(&img, lut);
          break;
        case 1: {  // contrast around the grey mean
          if (f == 1) break;
          const double mean = GrayMean(img);
          if (f == 0) {
            img.setTo(cv::Scalar::all(static_cast<int>(mean + 0.5)));
            break;
          }
          MultiplyAddLut(f, mean * (1 - f), lut[0]);
          for (int c = 1; c < 4; ++c) std::copy(lut[0], lut[0] + 256, lut[c]);
          ApplyLut(&img, lut);
          break;
        }
        case 2: {  // saturation: blend with the grey image
          if (f == 1 || gray) break;
          cv::Mat g, g3;
          cv::cvtColor(img, g, cv::COLOR_RGB2GRAY);
          cv::cvtColor(g, g3, cv::COLOR_GRAY2RGB);
          if (f == 0) {
            g3.copyTo(img);
          } else {
            cv::addWeighted(img, f, g3, 1 - f, 0, img);
          }
          break;
        }
        case 3: {  // hue: rotate H (0..179)
          if (gray || f == 0) break;
          cv::Mat hsv;
          cv::cvtColor(img, hsv, cv::COLOR_RGB2HSV);
          uint8_t hl[256];
          for (int v = 0; v < 256; ++v) {
            double h = std::fmod(v + 180 * f, 180.0);
            if (h < 0) h += 180.0;
            hl[v] = static_cast<uint8_t>(h);
          }
          for (int y = 0; y < hsv.rows; ++y) {
            uint8_t* p = hsv.ptr<uint8_t>(y);
            for (int x = 0; x < hsv.cols; ++x) p[3 * x] = hl[p[3 * x]];
          }
          cv::cvtColor(hsv, img, cv::COLOR_HSV2RGB);
          break;
        }
      }
    }
    return Status::OK();
  }
  json Params(const Step& s) const override {
    return {{"brightness", s.v[0]},
            {"contrast", s.v[1]},
            {"saturation", s.v[2]},
            {"hue", s.v[3]},
            {"order", {s.iv[0], s.iv[1], s.iv[2], s.iv[3]}}};
  }
  Range ranges_[4];
};

Status MakeColorJitter(ArgReader& r, std::unique_ptr<Leaf>* out) {
  auto l = std::make_unique<ColorJitterLeaf>();
  l->prob = r.Prob(0.5);
  const char* keys[] = {"brightness", "contrast", "saturation", "hue"};
  for (int k = 0; k < 4; ++k) {
    const bool hue = k == 3;
    const json* v = r.Raw(keys[k]);
    Range range = hue ? Range{-0.5, 0.5} : Range{0.8, 1.2};
    if (v != nullptr && v->is_number()) {  // bias -+ value, clipped at 0 for the factors
      const double x = v->get<double>();
      if (x < 0) r.Fail(r.where() + ": argument " + keys[k] + " must not be negative");
      range = hue ? Range{-x, x} : Range{std::max(1 - x, 0.0), 1 + x};
    } else if (v != nullptr && v->is_array() && v->size() == 2) {
      range = {(*v)[0].get<double>(), (*v)[1].get<double>()};
    } else if (v != nullptr) {
      r.Fail(r.where() + ": argument " + keys[k] + " must be a number or a pair");
    }
    const double lo = hue ? -0.5 : 0, hi = hue ? 0.5 : 1e300;
    if (!(range.lo >= lo && range.hi <= hi && range.lo <= range.hi)) {
      r.Fail(r.where() + ": argument " + std::string(keys[k]) + " is out of range");
    }
    r.Put(keys[k], {range.lo, range.hi});
    l->ranges_[k] = range;
  }
  DSPIPE_RETURN_IF_ERROR(r.Finish({"brightness", "contrast", "saturation", "hue", "p"}));
  *out = std::move(l);
  return Status::OK();
}

// hypot as OpenCV's Jacobi eigen solver computes it (its rounding differs from std::hypot's).
double JacobiHypot(double a, double b) {
  a = std::fabs(a);
  b = std::fabs(b);
  if (a > b) {
    b /= a;
    return a * std::sqrt(1 + b * b);
  }
  if (b > 0) {
    a /= b;
    return b * std::sqrt(1 + a * a);
  }
  return 0;
}

// The eigenvector of the largest eigenvalue of a symmetric 3 x 3 matrix by Jacobi rotations,
// step for step as cv::eigen computes it where OpenCV is built without Eigen (the
// opencv-python wheel albumentations uses; Debian's OpenCV calls Eigen's solver, whose
// eigenvectors may have the other sign, which mirrors the grey image). Each rotation zeroes the
// largest off-diagonal element, found through per-row and per-column candidates that are
// refreshed only for the two rows / columns just rotated, as OpenCV does: the order of the
// rotations, hence the result's last bits and sign, depend on it.
cv::Vec3d FirstEigenvector(const cv::Mat& covar) {
  constexpr int n = 3;
  double a[n][n], v[n][n], w[n];
  int row_max[n] = {}, col_max[n] = {};
  for (int r = 0; r < n; ++r) {
    for (int c = 0; c < n; ++c) {
      a[r][c] = covar.at<double>(r, c);
      v[r][c] = r == c ? 1 : 0;
    }
    w[r] = a[r][r];
  }
  const auto scan_row = [&](int r) {  // the largest |a[r][c]|, c > r (the first on ties)
    int m = r + 1;
    double mv = std::fabs(a[r][m]);
    for (int c = r + 2; c < n; ++c) {
      if (mv < std::fabs(a[r][c])) mv = std::fabs(a[r][c]), m = c;
    }
    row_max[r] = m;
  };
  const auto scan_col = [&](int c) {  // the largest |a[r][c]|, r < c
    int m = 0;
    double mv = std::fabs(a[0][c]);
    for (int r = 1; r < c; ++r) {
      if (mv < std::fabs(a[r][c])) mv = std::fabs(a[r][c]), m = r;
    }
    col_max[c] = m;
  };
  for (int k = 0; k < n; ++k) {
    if (k < n - 1) scan_row(k);
    if (k > 0) scan_col(k);
  }
  for (int iter = 0; iter < n * n * 30; ++iter) {
    int k = 0;
    double mv = std::fabs(a[0][row_max[0]]);
    for (int r = 1; r < n - 1; ++r) {
      if (mv < std::fabs(a[r][row_max[r]])) mv = std::fabs(a[r][row_max[r]]), k = r;
    }
    int l = row_max[k];
    for (int c = 1; c < n; ++c) {
      if (mv < std::fabs(a[col_max[c]][c])) mv = std::fabs(a[col_max[c]][c]), k = col_max[c], l = c;
    }
    const double p = a[k][l];
    if (std::fabs(p) <= std::numeric_limits<double>::epsilon()) break;
    const double y = (w[l] - w[k]) * 0.5;
    double t = std::fabs(y) + JacobiHypot(p, y);
    double s = JacobiHypot(p, t);
    const double c = t / s;
    s = p / s;
    t = (p / t) * p;
    if (y < 0) s = -s, t = -t;
    a[k][l] = 0;
    w[k] -= t;
    w[l] += t;
    const auto rotate = [&](double& x, double& z) {
      const double x0 = x, z0 = z;
      x = x0 * c - z0 * s;
      z = x0 * s + z0 * c;
    };
    for (int i = 0; i < k; ++i) rotate(a[i][k], a[i][l]);
    for (int i = k + 1; i < l; ++i) rotate(a[k][i], a[i][l]);
    for (int i = l + 1; i < n; ++i) rotate(a[k][i], a[l][i]);
    for (int i = 0; i < n; ++i) rotate(v[k][i], v[l][i]);
    for (int idx : {k, l}) {
      if (idx < n - 1) scan_row(idx);
      if (idx > 0) scan_col(idx);
    }
  }
  int top = 0;  // the first largest eigenvalue, as the descending sort puts it first
  for (int i = 1; i < n; ++i) {
    if (w[top] < w[i]) top = i;
  }
  return {v[top][0], v[top][1], v[top][2]};
}

// to_gray_pca: the pixels as float64 rows projected on their first principal component
// (albumentations' PCA class: cv2.PCACompute2, then cv2.PCAProject; the covariance as
// cv::PCA computes it, the eigenvector as FirstEigenvector), cast to float32, min-max
// normalized to [0, 1] by cv::normalize and scaled by from_float: rint(x * 255) in float32,
// half to even.
void ToGrayPca(const cv::Mat& img, cv::Mat* gray) {
  cv::Mat pixels;
  img.convertTo(pixels, CV_64F);  // a new continuous matrix
  pixels = pixels.reshape(1, img.rows * img.cols);
  cv::PCA pca;
  if (pixels.rows < pixels.cols) {  // fewer pixels than channels: cv::PCA's other path
    pca(pixels, cv::noArray(), cv::PCA::DATA_AS_ROW, 1);
  } else {
    cv::Mat covar;
    cv::calcCovarMatrix(pixels, covar, pca.mean,
                        cv::COVAR_SCALE | cv::COVAR_ROWS | cv::COVAR_NORMAL, CV_64F);
    pca.eigenvectors = cv::Mat(FirstEigenvector(covar)).reshape(1, 1).clone();
  }
  cv::Mat projected, projected32, unit;
  pca.project(pixels, projected);
  projected.convertTo(projected32, CV_32F);
  cv::normalize(projected32, unit, 0, 1, cv::NORM_MINMAX, CV_32F);
  const float* u = unit.ptr<float>();
  for (int y = 0; y < img.rows; ++y) {
    uint8_t* q = gray->ptr<uint8_t>(y);
    for (int x = 0; x < img.cols; ++x) {
      const float v = std::nearbyint(u[static_cast<size_t>(y) * img.cols + x] * 255.0f);
      q[x] = static_cast<uint8_t>(std::clamp(v, 0.0f, 255.0f));
    }
  }
}

class ToGrayLeaf final : public Leaf {
 public:
  Kind kind() const override { return Kind::kPixel; }
  // Per pixel, with the same integer arithmetic in OpenCV's vector and scalar code. (Not so
  // HSV / ColorJitter / blurs: their vector and row-tail code round differently, so moving a
  // pixel moves its rounding; nor pca, whose float sums over the image depend on the order.)
  bool commutes_with_hflip() const override { return method_ != "pca"; }
  Status Draw(Rng&, int, const cv::Mat*, Step* s) const override {
    s->out = s->in;
    return Status::OK();
  }
  Status Apply(const Step&, cv::Mat* image, cv::Mat*) const override {
    cv::Mat& img = *image;
    if (img.channels() == 1) return Status::OK();  // already grey: unchanged
    cv::Mat g(img.rows, img.cols, CV_8UC1);
    if (method_ == "weighted_average") {
      cv::cvtColor(img, g, cv::COLOR_RGB2GRAY);
    } else if (method_ == "from_lab") {
      cv::Mat lab;
      cv::cvtColor(img, lab, cv::COLOR_RGB2Lab);
      cv::extractChannel(lab, g, 0);
    } else if (method_ == "pca") {
      ToGrayPca(img, &g);
    } else {
      for (int y = 0; y < img.rows; ++y) {
        const uint8_t* p = img.ptr<uint8_t>(y);
        uint8_t* q = g.ptr<uint8_t>(y);
        for (int x = 0; x < img.cols; ++x, p += 3) {
          const int mx = std::max({p[0], p[1], p[2]}), mn = std::min({p[0], p[1], p[2]});
          if (method_ == "max") {
            q[x] = static_cast<uint8_t>(mx);
          } else if (method_ == "average") {  // np.mean(axis=-1).astype(uint8)
            q[x] = static_cast<uint8_t>((static_cast<double>(p[0]) + p[1] + p[2]) / 3.0);
          } else {  // desaturation: (max + min) / 2 in float32, truncated
            q[x] = static_cast<uint8_t>((static_cast<float>(mx) + static_cast<float>(mn)) / 2);
          }
        }
      }
    }
    cv::cvtColor(g, img, cv::COLOR_GRAY2RGB);
    return Status::OK();
  }
  json Params(const Step&) const override { return json::object(); }
  std::string method_;
};

Status MakeToGray(ArgReader& r, std::unique_ptr<Leaf>* out) {
  auto l = std::make_unique<ToGrayLeaf>();
  l->prob = r.Prob(0.5);
  r.OnlyDefault("num_output_channels", 3,
                "the image keeps its channel count (use LoaderOptions::channels = 1 for grey)");
  l->method_ = r.Choice("method", "weighted_average",
                        {"weighted_average", "from_lab", "desaturation", "average", "max", "pca"});
  DSPIPE_RETURN_IF_ERROR(r.Finish({"num_output_channels", "method", "p"}));
  *out = std::move(l);
  return Status::OK();
}

class ClaheLeaf final : public Leaf {
 public:
  Kind kind() const override { return Kind::kPixel; }
  Status Draw(Rng& rng, int, const cv::Mat*, Step* s) const override {
    s->out = s->in;
    s->v[0] = Uniform(rng, clip_.lo, clip_.hi);
    return Status::OK();
  }
  Status Apply(const Step& s, cv::Mat* image, cv::Mat*) const override {
    cv::Ptr<cv::CLAHE> clahe = cv::createCLAHE(s.v[0], cv::Size(grid_.first, grid_.second));
    if (image->channels() == 1) {
      clahe->apply(*image, *image);
      return Status::OK();
    }
    cv::Mat lab, l;
    cv::cvtColor(*image, lab, cv::COLOR_RGB2Lab);
    cv::extractChannel(lab, l, 0);
    clahe->apply(l, l);
    cv::insertChannel(l, lab, 0);
    cv::cvtColor(lab, *image, cv::COLOR_Lab2RGB);
    return Status::OK();
  }
  json Params(const Step& s) const override { return {{"clip_limit", s.v[0]}}; }
  Range clip_;
  std::pair<int, int> grid_;
};

Status MakeClahe(ArgReader& r, std::unique_ptr<Leaf>* out) {
  auto l = std::make_unique<ClaheLeaf>();
  l->prob = r.Prob(0.5);
  l->clip_ = r.RangeArg("clip_limit", {1, 4}, Widen::kOnePlus, 1, 1e9);
  l->grid_ = r.IntPair("tile_grid_size", {8, 8}, 1);
  DSPIPE_RETURN_IF_ERROR(r.Finish({"clip_limit", "tile_grid_size", "p"}));
  *out = std::move(l);
  return Status::OK();
}

// A transform the pipeline's last step stands for, which changes no pixel here: Normalize and
// ToTensorV2 (pipeline.cc checks they come last).
class LastStepLeaf : public Leaf {
 public:
  Kind kind() const override { return Kind::kNormalize; }
  Status Draw(Rng&, int, const cv::Mat*, Step* s) const override {
    s->out = s->in;
    return Status::OK();
  }
  Status Apply(const Step&, cv::Mat*, cv::Mat*) const override { return Status::OK(); }
  json Params(const Step&) const override { return json::object(); }
};

// Normalize: parsed here, applied by the loader's normalize stage. mean/std kept as
// albumentations computes them: float32(mean) * max_pixel_value.
class NormalizeLeaf final : public LastStepLeaf {
 public:
  std::vector<double> mean_, std_;
};

Status MakeNormalize(ArgReader& r, std::unique_ptr<Leaf>* out) {
  auto l = std::make_unique<NormalizeLeaf>();
  l->prob = r.Prob(1.0);
  if (l->prob != 1.0) {
    r.Fail(r.where() +
           ": Normalize needs p=1 (every sample is normalized; a serialized "
           "transform without \"p\" has p=0.5, as albumentations' from_dict reads it)");
  }
  const double maxv = r.Number("max_pixel_value", 255.0, 1e-9);
  auto list = [&](const char* key, std::vector<double> def) {
    const json* v = r.Raw(key);
    std::vector<double> out_values = def;
    if (v != nullptr) {
      out_values.clear();
      for (const json& e : v->is_array() ? *v : json::array({*v})) {
        if (!e.is_number()) {
          r.Fail(r.where() + ": argument " + key + " must be numbers");
          return def;
        }
        out_values.push_back(e.get<double>());
      }
    }
    if (out_values.empty() || out_values.size() > 4) {
      r.Fail(r.where() + ": argument " + key + " needs 1 to 4 values");
    }
    r.Put(key, v != nullptr ? *v : json(def));
    return out_values;
  };
  const std::vector<double> mean = list("mean", {0.485, 0.456, 0.406});
  const std::vector<double> stdv = list("std", {0.229, 0.224, 0.225});
  r.OnlyDefault("normalization", "standard",
                "only \"standard\" ((x - mean * max) / (std * max)) maps onto the normalize stage");
  const float m = static_cast<float>(maxv);
  for (double v : mean) l->mean_.push_back(static_cast<float>(v) * m);
  for (double v : stdv) {
    if (!(v > 0)) r.Fail(r.where() + ": argument std must be > 0");
    l->std_.push_back(static_cast<float>(v) * m);
  }
  DSPIPE_RETURN_IF_ERROR(r.Finish({"mean", "std", "max_pixel_value", "normalization", "p"}));
  *out = std::move(l);
  return Status::OK();
}

// ToFloat: img / max_value as float32 (albumentations 2.0.8; max_value None: the dtype's
// maximum, 255 for dspipe's uint8 pixels). The normalize stage with mean 0, std max_value.
Status MakeToFloat(ArgReader& r, std::unique_ptr<Leaf>* out) {
  auto l = std::make_unique<NormalizeLeaf>();
  l->prob = r.Prob(1.0);
  if (l->prob != 1.0) {
    r.Fail(r.where() +
           ": ToFloat needs p=1 (every sample becomes float; a serialized transform without "
           "\"p\" has p=0.5, as albumentations' from_dict reads it)");
  }
  const json* v = r.Raw("max_value");
  double maxv = 255.0;
  if (v != nullptr) {
    if (!v->is_number() || v->is_boolean() || !(v->get<double>() > 0)) {
      r.Fail(r.where() +
             ": argument max_value must be a number > 0 or null (255 for uint8 "
             "images), got " +
             v->dump());
    } else {
      maxv = v->get<double>();
    }
  }
  r.Put("max_value", v != nullptr ? json(maxv) : json(nullptr));
  l->mean_ = {0.0};
  l->std_ = {maxv};
  DSPIPE_RETURN_IF_ERROR(r.Finish({"max_value", "p"}));
  *out = std::move(l);
  return Status::OK();
}

// albumentations.pytorch's ToTensorV2: HWC numpy -> CHW torch tensor. dspipe's batches are
// already NCHW tensors (the mask NHW, which transpose_mask leaves as it is: it turns only 3-D
// masks), so it changes nothing; pipeline.cc checks it is the last transform.
class ToTensorLeaf final : public LastStepLeaf {};

Status MakeToTensor(ArgReader& r, std::unique_ptr<Leaf>* out) {
  auto l = std::make_unique<ToTensorLeaf>();
  l->prob = r.Prob(1.0);
  if (l->prob != 1.0) {
    r.Fail(r.where() +
           ": ToTensorV2 needs p=1 (dspipe gives every sample as a CHW tensor; a serialized "
           "transform without \"p\" has p=0.5, as albumentations' from_dict reads it)");
  }
  r.Bool("transpose_mask", false);
  DSPIPE_RETURN_IF_ERROR(r.Finish({"transpose_mask", "p"}));
  *out = std::move(l);
  return Status::OK();
}

}  // namespace

// For pipeline.cc: the mean/std of a Normalize leaf (pixel units).
bool NormalizeOf(const Leaf& leaf, std::vector<double>* mean, std::vector<double>* stdv) {
  const auto* n = dynamic_cast<const NormalizeLeaf*>(&leaf);
  if (n == nullptr) return false;
  *mean = n->mean_;
  *stdv = n->std_;
  return true;
}

void AddColorLeaves(std::vector<LeafType>* t) {
  const char* none = "unchanged";
  t->push_back(
      {"RandomBrightnessContrast",
       MakeBrightnessContrast,
       "photometric",
       none,
       true,
       {"brightness_limit", "contrast_limit", "brightness_by_max", "ensure_safe_range", "p"}});
  t->push_back({"RandomGamma", MakeGamma, "photometric", none, true, {"gamma_limit", "p"}});
  t->push_back({"RGBShift",
                MakeRgbShift,
                "photometric",
                none,
                true,
                {"r_shift_limit", "g_shift_limit", "b_shift_limit", "p"}});
  t->push_back({"HueSaturationValue",
                MakeHsv,
                "photometric",
                none,
                false,
                {"hue_shift_limit", "sat_shift_limit", "val_shift_limit", "p"}});
  t->push_back({"ColorJitter",
                MakeColorJitter,
                "photometric",
                none,
                false,
                {"brightness", "contrast", "saturation", "hue", "p"}});
  t->push_back(
      {"ToGray", MakeToGray, "photometric", none, false, {"num_output_channels", "method", "p"}});
  t->push_back(
      {"CLAHE", MakeClahe, "photometric", none, false, {"clip_limit", "tile_grid_size", "p"}});
  t->push_back({"Normalize",
                MakeNormalize,
                "normalize",
                "unchanged (masks are not normalized)",
                true,
                {"mean", "std", "max_pixel_value", "normalization", "p"}});
  t->push_back({"ToFloat", MakeToFloat, "normalize", "unchanged", true, {"max_value", "p"}});
  t->push_back({"ToTensorV2",
                MakeToTensor,
                "normalize",
                "unchanged (NHW; transpose_mask turns only 3-D masks)",
                true,
                {"transpose_mask", "p"}});
}

}  // namespace dspipe::transforms
