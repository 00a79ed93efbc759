// SPDX-License-Identifier: Apache-2.0
// Non-affine geometric leaves: GridDistortion and ElasticTransform. Each draws a per-pixel map
// (albumentations 2.0.8's generate_grid / generate_displacement_fields) and runs one
// cv::remap of image and mask with it; they are never fused with other steps (a map is not an
// affine transform) and resample on their own, as albumentations does.
#include <cmath>
#include <opencv2/imgproc.hpp>

#include "transforms/ops.h"

namespace dspipe::transforms {
namespace {

using nlohmann::json;

const std::vector<int> kInterp = {0, 1, 2, 3, 4};

// numpy.linspace(start, stop, n) stored into float32.
void Linspace(double start, double stop, int n, float* out) {
  if (n <= 0) return;
  if (n == 1) {
    out[0] = static_cast<float>(start);
    return;
  }
  const double step = (stop - start) / (n - 1);
  for (int i = 0; i < n; ++i) out[i] = static_cast<float>(i * step + start);
  out[n - 1] = static_cast<float>(stop);
}

// A standard normal value from one draw (the inverse CDF, not Box-Muller, which would need a
// second draw); for the displacement fields' noise.
double Gauss(Rng& rng) {
  const double u = (static_cast<double>(rng.Next() >> 11) + 0.5) * 0x1.0p-53;
  return NormalQuantile(u);
}

class DistortLeaf final : public Leaf {
 public:
  enum Type { kGrid, kElastic };
  explicit DistortLeaf(Type t) : type_(t) {}
  Kind kind() const override { return Kind::kGeometric; }

  Status Draw(Rng& rng, int, const cv::Mat*, Step* s) const override {
    const int h = s->in.h, w = s->in.w;
    s->out = s->in;
    s->geo.frame = Frame::kBorder;
    s->geo.exact = false;
    s->geo.standalone = true;  // a map, not an affine transform: never fused
    s->geo.map = true;
    s->geo.interp = interp_;
    s->geo.mask_interp = mask_interp_;
    s->geo.border = border_;
    if (type_ == kGrid) {
      // GridDistortion.get_params_dependent_on_data + normalize_grid_distortion_steps.
      std::vector<double> sx(static_cast<size_t>(steps_ + 1)), sy(sx.size());
      for (double& v : sx) v = 1 + Uniform(rng, limit_.lo, limit_.hi);
      for (double& v : sy) v = 1 + Uniform(rng, limit_.lo, limit_.hi);
      if (normalized_) {
        Normalize(w, &sx);
        Normalize(h, &sy);
      }
      s->data.assign(static_cast<size_t>(w + h), 0.0f);  // xx (w) then yy (h)
      Grid(w, sx, s->data.data());
      Grid(h, sy, s->data.data() + w);
      return Status::OK();
    }
    // ElasticTransform: smoothed noise fields (2 x h x w stacked, blurred as one image, as
    // albumentations blurs fields.reshape(-1, w)), scaled by alpha.
    const int n = same_dxdy_ ? 1 : 2;
    cv::Mat fields(n * h, w, CV_32FC1);
    float max_abs = 0;
    for (int y = 0; y < fields.rows; ++y) {
      float* row = fields.ptr<float>(y);
      for (int x = 0; x < w; ++x) {
        row[x] =
            gaussian_ ? static_cast<float>(Gauss(rng)) : static_cast<float>(Uniform(rng, -1, 1));
        max_abs = std::max(max_abs, std::fabs(row[x]));
      }
    }
    if (gaussian_ && max_abs > 1e-6f) fields /= max_abs;
    const cv::Size k = approximate_ ? cv::Size(17, 17) : cv::Size(0, 0);
    cv::GaussianBlur(fields, fields, k, sigma_, sigma_, cv::BORDER_REPLICATE);
    fields *= alpha_;
    s->data.assign(fields.begin<float>(), fields.end<float>());
    if (same_dxdy_) s->data.insert(s->data.end(), s->data.begin(), s->data.end());
    return Status::OK();
  }

  std::optional<Size> StaticOutput(Size in) const override { return in; }

  void Warp(const Step& s, const cv::Mat& src, cv::Mat* dst, bool is_mask) const override {
    const cv::Mat map = Map(s);
    // albumentations passes a number as the remap's borderValue as it is: cv2 makes it
    // (v, 0, 0, 0).
    cv::Scalar value = is_mask ? cv::Scalar(border_.fill_mask) : cv::Scalar(border_.fill.values[0]);
    if (!is_mask && border_.fill.values.size() > 1)
      value = FillScalar(border_.fill, src.channels());
    cv::remap(src, *dst, map, cv::Mat(), is_mask ? mask_interp_ : interp_, border_.mode, value);
  }

  json Params(const Step& s) const override {
    const cv::Mat map = Map(s);
    std::vector<cv::Mat> xy;
    cv::split(map, xy);
    auto rows = [](const cv::Mat& m) {
      json out = json::array();
      for (int y = 0; y < m.rows; ++y) {
        const float* r = m.ptr<float>(y);
        out.push_back(std::vector<float>(r, r + m.cols));
      }
      return out;
    };
    return {{"map_x", rows(xy[0])}, {"map_y", rows(xy[1])}};
  }

  Status Parse(ArgReader& r);

 private:
  // normalize_grid_distortion_steps for one axis of `size`.
  void Normalize(int size, std::vector<double>* steps) const {
    const int step = size / steps_;
    const int last = std::min(size, (steps_ + 1) * step) - steps_ * step;
    steps->back() *= static_cast<double>(last) / step;
    const double t = static_cast<double>(size) / std::floor(static_cast<double>(size) / steps_);
    double sum = 0;
    for (double v : *steps) sum += v;
    for (double& v : *steps) v *= t / sum;
  }
  // generate_grid's xx (or yy) for one axis.
  void Grid(int size, const std::vector<double>& steps, float* out) const {
    const int step = size / steps_;
    double prev = 0;
    for (size_t i = 0; i < steps.size(); ++i) {
      const int start = static_cast<int>(i) * step;
      const int end = std::min(start + step, size);
      const double cur = prev + step * steps[i];
      if (end > start) Linspace(prev, cur, end - start, out + start);
      prev = cur;
    }
  }
  // The remap's map (CV_32FC2: x, y per pixel).
  cv::Mat Map(const Step& s) const {
    const int h = s.in.h, w = s.in.w;
    cv::Mat map(h, w, CV_32FC2);
    for (int y = 0; y < h; ++y) {
      float* m = map.ptr<float>(y);
      for (int x = 0; x < w; ++x) {
        if (type_ == kGrid) {
          m[2 * x] = s.data[static_cast<size_t>(x)];
          m[2 * x + 1] = s.data[static_cast<size_t>(w + y)];
        } else {  // coords + fields, in float64 then float32 (numpy's astype)
          const size_t i = static_cast<size_t>(y) * w + x;
          m[2 * x] = static_cast<float>(x + static_cast<double>(s.data[i]));
          m[2 * x + 1] =
              static_cast<float>(y + static_cast<double>(s.data[static_cast<size_t>(h) * w + i]));
        }
      }
    }
    return map;
  }

  const Type type_;
  int steps_ = 5;
  Range limit_{-0.3, 0.3};
  bool normalized_ = true;
  double alpha_ = 1, sigma_ = 50;
  bool approximate_ = false, same_dxdy_ = false, gaussian_ = true;
  int interp_ = 1, mask_interp_ = 0;
  Border border_;
};

Status DistortLeaf::Parse(ArgReader& r) {
  prob = r.Prob(0.5);
  interp_ = r.Interpolation("interpolation", 1, kInterp);
  mask_interp_ = r.Interpolation("mask_interpolation", 0, kInterp);
  border_.mode = r.BorderMode("border_mode", 0);
  border_.fill = r.FillArg("fill", 0.0);
  border_.fill_mask = r.FillArg("fill_mask", 0.0).values[0];
  r.Ignored("keypoint_remapping_method", "mask");  // keypoints only
  const std::vector<std::string> common = {"interpolation",
                                           "mask_interpolation",
                                           "keypoint_remapping_method",
                                           "border_mode",
                                           "fill",
                                           "fill_mask",
                                           "p"};
  auto with = [&common](std::vector<std::string> v) {
    v.insert(v.end(), common.begin(), common.end());
    return v;
  };
  if (type_ == kGrid) {
    steps_ = r.Int("num_steps", 5, 1);
    limit_ = r.RangeArg("distort_limit", {-0.3, 0.3}, Widen::kSymmetric, -1, 1);
    normalized_ = r.Bool("normalized", true);
    return r.Finish(with({"num_steps", "distort_limit", "normalized"}));
  }
  alpha_ = r.Number("alpha", 1.0, 0);
  sigma_ = r.Number("sigma", 50.0, 1);
  approximate_ = r.Bool("approximate", false);
  same_dxdy_ = r.Bool("same_dxdy", false);
  gaussian_ = r.Choice("noise_distribution", "gaussian", {"gaussian", "uniform"}) == "gaussian";
  return r.Finish(with({"alpha", "sigma", "approximate", "same_dxdy", "noise_distribution"}));
}

template <DistortLeaf::Type T>
Status MakeDistort(ArgReader& r, std::unique_ptr<Leaf>* out) {
  auto leaf = std::make_unique<DistortLeaf>(T);
  DSPIPE_RETURN_IF_ERROR(leaf->Parse(r));
  *out = std::move(leaf);
  return Status::OK();
}

}  // namespace

void AddDistortLeaves(std::vector<LeafType>* t) {
  const char* mask = "same map, mask_interpolation (nearest), fill_mask";
  t->push_back({"ElasticTransform",
                MakeDistort<DistortLeaf::kElastic>,
                "geometric",
                mask,
                false,
                {"alpha", "sigma", "interpolation", "approximate", "same_dxdy",
                 "mask_interpolation", "noise_distribution", "keypoint_remapping_method",
                 "border_mode", "fill", "fill_mask", "p"}});
  t->push_back({"GridDistortion",
                MakeDistort<DistortLeaf::kGrid>,
                "geometric",
                mask,
                false,
                {"num_steps", "distort_limit", "interpolation", "normalized", "mask_interpolation",
                 "keypoint_remapping_method", "p", "border_mode", "fill", "fill_mask"}});
}

}  // namespace dspipe::transforms
