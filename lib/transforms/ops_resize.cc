// SPDX-License-Identifier: Apache-2.0
// Geometric leaves that resize the frame: Resize, SmallestMaxSize, LongestMaxSize and
// crop-then-resize (RandomResizedCrop, RandomSizedCrop), with albumentations 2.0.8's sampling
// (get_crop_coords and round-half-even from ops_crop.cc, the 10-try RandomResizedCrop loop) and
// its cv2 calls for the step on its own.
#include <algorithm>
#include <cmath>
#include <opencv2/imgproc.hpp>

#include "transforms/ops.h"

namespace dspipe::transforms {
namespace {

using nlohmann::json;

const std::vector<int> kResizeInterpolations = {0, 6, 1, 2, 3, 4, 5};

// Resize, SmallestMaxSize, LongestMaxSize, RandomResizedCrop, RandomSizedCrop: an optional crop
// (iv[0..3]) of the input resized to step.out with cv2.resize.
class ResizeLeaf final : public Leaf {
 public:
  enum Type { kResize, kSmallestMaxSize, kLongestMaxSize, kRandomResizedCrop, kRandomSizedCrop };
  explicit ResizeLeaf(Type t) : type_(t) {}
  Kind kind() const override { return Kind::kGeometric; }

  Status Draw(Rng& rng, int, const cv::Mat*, Step* s) const override {
    const Size in = s->in;
    int* crop = s->iv;
    crop[0] = 0, crop[1] = 0, crop[2] = in.w, crop[3] = in.h;
    double scale = 1;
    switch (type_) {
      case kResize:
        s->out = size_;
        break;
      case kSmallestMaxSize:
      case kLongestMaxSize: {
        const bool smallest = type_ == kSmallestMaxSize;
        if (!max_sizes_.empty()) {
          const int m = max_sizes_.size() == 1
                            ? max_sizes_[0]
                            : max_sizes_[rng.Below(static_cast<uint64_t>(max_sizes_.size()))];
          scale = static_cast<double>(m) / (smallest ? std::min(in.h, in.w) : std::max(in.h, in.w));
        } else if (hw_[0] > 0 && hw_[1] > 0) {
          const double hs = static_cast<double>(hw_[0]) / in.h;
          const double ws = static_cast<double>(hw_[1]) / in.w;
          scale = smallest ? std::max(hs, ws) : std::min(hs, ws);
        } else {
          scale =
              hw_[0] > 0 ? static_cast<double>(hw_[0]) / in.h : static_cast<double>(hw_[1]) / in.w;
        }
        s->out = {std::max(1, PyRound(in.h * scale)), std::max(1, PyRound(in.w * scale))};
        break;
      }
      case kRandomResizedCrop:
        RandomResized(rng, in, crop);
        s->out = size_;
        break;
      case kRandomSizedCrop: {
        const int ch = RandInt(rng, min_max_h_[0], min_max_h_[1]);
        const int cw = static_cast<int>(ch * w2h_ratio_);
        const double h_start = rng.Uniform(), w_start = rng.Uniform();
        CropCoords(in, {ch, cw}, h_start, w_start, crop);
        s->out = size_;
        break;
      }
    }
    s->v[0] = scale;
    const Size cropped{crop[3] - crop[1], crop[2] - crop[0]};
    const bool down = type_ == kSmallestMaxSize || type_ == kLongestMaxSize
                          ? scale < 1.0
                          : (s->out.h < cropped.h || s->out.w < cropped.w);
    s->iv[4] = area_ != "" && down ? 3 : interp_;  // cv2.INTER_AREA for area_for_downscale
    // _BaseRandomSizedCrop reads `down and image or image_mask`: the mask gets INTER_AREA with
    // "image_mask" whether or not it shrinks; the max-size transforms and Resize check `down`.
    const bool crops = type_ == kRandomResizedCrop || type_ == kRandomSizedCrop;
    s->iv[5] = area_ == "image_mask" && (down || crops) ? 3 : mask_interp_;
    s->geo.fwd = Affine::Translate(-crop[0], -crop[1]).Then(Affine::Resize(cropped, s->out));
    s->geo.reads[0] = crop[0], s->geo.reads[1] = crop[1];
    s->geo.reads[2] = cropped.w, s->geo.reads[3] = cropped.h;
    const double mx = static_cast<double>(s->out.w) / cropped.w;
    const double my = static_cast<double>(s->out.h) / cropped.h;
    s->geo.mask_fwd = Affine::Translate(-crop[0], -crop[1]).Then({mx, 0, 0, 0, my, 0});
    s->geo.exact = cropped == s->out;
    s->geo.mask_floor = !s->geo.exact && s->iv[5] == 0;
    s->geo.frame = cropped == in ? Frame::kFull : Frame::kCrop;
    s->geo.interp = s->iv[4];
    s->geo.mask_interp = s->iv[5];
    s->geo.standalone = !s->geo.exact && !Warpable(s->iv[4]);
    s->geo.mask_steps = !s->geo.exact && !Warpable(s->iv[5]);
    return Status::OK();
  }

  std::optional<Size> StaticOutput(Size in) const override {
    if (type_ == kResize || type_ == kRandomResizedCrop || type_ == kRandomSizedCrop) {
      return size_;
    }
    if (!in.known() || max_sizes_.size() > 1) return std::nullopt;
    Step s;
    s.in = in;
    Rng unused(0);
    (void)Draw(unused, 3, nullptr, &s);
    return s.out;
  }

  void Warp(const Step& s, const cv::Mat& src, cv::Mat* dst, bool is_mask) const override {
    const cv::Mat roi = src(cv::Rect(s.iv[0], s.iv[1], s.iv[2] - s.iv[0], s.iv[3] - s.iv[1]));
    ResizeLike(roi, dst, is_mask ? s.iv[5] : s.iv[4]);
  }

  bool WarpPart(const Step& s, const cv::Mat& src, int x0, int y0, cv::Mat* dst,
                bool is_mask) const override {
    const cv::Rect roi(s.iv[0] - x0, s.iv[1] - y0, s.iv[2] - s.iv[0], s.iv[3] - s.iv[1]);
    if ((roi & cv::Rect(0, 0, src.cols, src.rows)) != roi) return false;
    ResizeLike(src(roi), dst, is_mask ? s.iv[5] : s.iv[4]);
    return true;
  }

  json Params(const Step& s) const override {
    if (type_ == kRandomResizedCrop || type_ == kRandomSizedCrop) {
      return {{"crop_coords", {s.iv[0], s.iv[1], s.iv[2], s.iv[3]}}};
    }
    if (type_ == kResize) return json::object();
    return {{"scale", s.v[0]}};
  }

  Status Parse(ArgReader& r);

 private:
  // RandomResizedCrop.get_params_dependent_on_data.
  void RandomResized(Rng& rng, Size in, int* crop) const {
    const double area = static_cast<double>(in.h) * in.w;
    const double log_lo = std::log(ratio_.lo), log_hi = std::log(ratio_.hi);
    for (int attempt = 0; attempt < 10; ++attempt) {
      const double target = Uniform(rng, scale_.lo * area, scale_.hi * area);
      const double aspect = std::exp(Uniform(rng, log_lo, log_hi));
      const int w = PyRound(std::sqrt(target * aspect));
      const int h = PyRound(std::sqrt(target / aspect));
      if (w > 0 && w <= in.w && h > 0 && h <= in.h) {
        const double h_start = rng.Uniform(), w_start = rng.Uniform();
        CropCoords(in, {h, w}, h_start, w_start, crop);
        return;
      }
    }
    const double in_ratio = static_cast<double>(in.w) / in.h;
    int w = in.w, h = in.h;
    if (in_ratio < ratio_.lo) {
      h = PyRound(in.w / ratio_.lo);
    } else if (in_ratio > ratio_.hi) {
      w = PyRound(h * ratio_.hi);
    }
    crop[1] = (in.h - h) / 2, crop[0] = (in.w - w) / 2;  // get_center_crop_coords
    crop[3] = crop[1] + h, crop[2] = crop[0] + w;
  }

  const Type type_;
  Size size_;
  std::vector<int> max_sizes_;
  int hw_[2] = {0, 0};
  Range scale_{0.08, 1.0}, ratio_{0.75, 4.0 / 3.0};
  int min_max_h_[2] = {1, 1};
  double w2h_ratio_ = 1;
  int interp_ = 1, mask_interp_ = 0;
  std::string area_;  // area_for_downscale: "", "image" or "image_mask"
};

Status ResizeLeaf::Parse(ArgReader& r) {
  prob = r.Prob(1.0);
  interp_ = r.Interpolation("interpolation", 1, kResizeInterpolations);
  mask_interp_ = r.Interpolation("mask_interpolation", 0, kResizeInterpolations);
  if (const json* a = r.Raw("area_for_downscale"); a != nullptr) {
    area_ = a->is_string() ? a->get<std::string>() : "?";
    if (area_ != "image" && area_ != "image_mask") {
      r.Fail(r.where() + ": argument area_for_downscale=" + a->dump() +
             " is not supported (null, \"image\", \"image_mask\")");
    }
    r.Put("area_for_downscale", area_);
  } else {
    r.Put("area_for_downscale", nullptr);
  }
  const std::vector<std::string> common = {"interpolation", "mask_interpolation",
                                           "area_for_downscale", "p"};
  auto with = [&common](std::vector<std::string> v) {
    v.insert(v.end(), common.begin(), common.end());
    return v;
  };
  switch (type_) {
    case kResize:
      size_.h = r.Int("height", 0, 1);
      size_.w = r.Int("width", 0, 1);
      return r.Finish(with({"height", "width"}));
    case kSmallestMaxSize:
    case kLongestMaxSize: {
      const json* ms = r.Raw("max_size");
      const json* hw = r.Raw("max_size_hw");
      if ((ms == nullptr) == (hw == nullptr)) {
        r.Fail(r.where() + ": give exactly one of max_size and max_size_hw");
      }
      if (ms != nullptr) {
        for (const json& e : ms->is_array() ? *ms : json::array({*ms})) {
          if (!e.is_number_integer() || e.get<int>() < 1) {
            r.Fail(r.where() + ": argument max_size must be a positive int or a list of them");
          } else {
            max_sizes_.push_back(e.get<int>());
          }
        }
        if (max_sizes_.empty()) r.Fail(r.where() + ": argument max_size is an empty list");
        r.Put("max_size", *ms);
      } else {
        r.Put("max_size", nullptr);
      }
      if (hw != nullptr) {
        const bool pair = hw->is_array() && hw->size() == 2;
        for (int k = 0; k < 2 && pair; ++k) {
          const json& e = (*hw)[static_cast<size_t>(k)];
          if (e.is_number_integer() && e.get<int>() >= 1) hw_[k] = e.get<int>();
          if (!e.is_null() && hw_[k] == 0) r.Fail(r.where() + ": max_size_hw values: int or null");
        }
        if (!pair || hw_[0] + hw_[1] == 0) {
          r.Fail(r.where() + ": argument max_size_hw must be (height or null, width or null)");
        }
        r.Put("max_size_hw", *hw);
      } else {
        r.Put("max_size_hw", nullptr);
      }
      return r.Finish(with({"max_size", "max_size_hw"}));
    }
    case kRandomResizedCrop: {
      const auto hw = r.IntPair("size", {0, 0}, 1);
      size_ = {hw.first, hw.second};
      scale_ = r.RangeArg("scale", {0.08, 1.0}, Widen::kPairOnly, 0, 1);
      ratio_ = r.RangeArg("ratio", {0.75, 4.0 / 3.0}, Widen::kPairOnly, 1e-9, 1e9);
      return r.Finish(with({"size", "scale", "ratio"}));
    }
    case kRandomSizedCrop: {
      const Range mm =
          r.RangeArg("min_max_height", {1, 1}, Widen::kOnePlus, 1, 1e9, ArgReader::kTruncate);
      min_max_h_[0] = static_cast<int>(mm.lo), min_max_h_[1] = static_cast<int>(mm.hi);
      const auto hw = r.IntPair("size", {0, 0}, 1);
      size_ = {hw.first, hw.second};
      w2h_ratio_ = r.Number("w2h_ratio", 1.0, 1e-9);
      return r.Finish(with({"min_max_height", "size", "w2h_ratio"}));
    }
  }
  return Status::Internal("resize type");
}

template <ResizeLeaf::Type T>
Status MakeResize(ArgReader& r, std::unique_ptr<Leaf>* out) {
  auto leaf = std::make_unique<ResizeLeaf>(T);
  DSPIPE_RETURN_IF_ERROR(leaf->Parse(r));
  *out = std::move(leaf);
  return Status::OK();
}

}  // namespace

void AddResizeLeaves(std::vector<LeafType>* t) {
  const char* resize = "same geometry, mask_interpolation (nearest)";
  const std::vector<std::string> tail = {"interpolation", "mask_interpolation",
                                         "area_for_downscale", "p"};
  auto args = [&tail](std::vector<std::string> v) {
    v.insert(v.end(), tail.begin(), tail.end());
    return v;
  };
  t->push_back({"Resize", MakeResize<ResizeLeaf::kResize>, "geometric", resize, true,
                args({"height", "width"})});
  t->push_back({"SmallestMaxSize", MakeResize<ResizeLeaf::kSmallestMaxSize>, "geometric", resize,
                true, args({"max_size", "max_size_hw"})});
  t->push_back({"LongestMaxSize", MakeResize<ResizeLeaf::kLongestMaxSize>, "geometric", resize,
                true, args({"max_size", "max_size_hw"})});
  t->push_back({"RandomResizedCrop", MakeResize<ResizeLeaf::kRandomResizedCrop>, "geometric",
                resize, true, args({"size", "scale", "ratio"})});
  t->push_back({"RandomSizedCrop", MakeResize<ResizeLeaf::kRandomSizedCrop>, "geometric", resize,
                true, args({"min_max_height", "size", "w2h_ratio"})});
}

}  // namespace dspipe::transforms
