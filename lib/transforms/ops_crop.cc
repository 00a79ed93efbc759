// Geometric leaves that change the frame: crops (RandomCrop, CenterCrop with pad_if_needed,
// CropNonEmptyMaskIfExists), padding (PadIfNeeded, Pad), resizing (Resize, SmallestMaxSize,
// LongestMaxSize) and crop-then-resize (RandomResizedCrop, RandomSizedCrop), with
// albumentations 2.0.8's sampling (get_crop_coords, the 10-try RandomResizedCrop loop,
// Python's round-half-even) and its cv2 calls for the step on its own.
#include <algorithm>
#include <cmath>
#include <opencv2/imgproc.hpp>

#include "transforms/ops.h"

namespace dspipe::transforms {
namespace {

using nlohmann::json;

const std::vector<int> kResizeInterpolations = {0, 6, 1, 2, 3, 4, 5};
int PyRound(double v) { return static_cast<int>(std::nearbyint(v)); }  // half to even

// fcrops.get_crop_coords.
void CropCoords(Size image, Size crop, double h_start, double w_start, int* xy) {
  const int ch = std::min(crop.h, image.h), cw = std::min(crop.w, image.w);
  xy[1] = static_cast<int>((image.h - ch + 1) * h_start);
  xy[0] = static_cast<int>((image.w - cw + 1) * w_start);
  xy[3] = xy[1] + ch;
  xy[2] = xy[0] + cw;
}

// Padding before, after one side (get_dimension_padding).
std::pair<int, int> DimPadding(int size, int min_size, int divisor) {
  if (min_size > 0) {
    if (size < min_size) {
      const int before = static_cast<int>((min_size - size) / 2.0);
      return {before, min_size - size - before};
    }
  } else if (divisor > 0 && size % divisor > 0) {
    const int total = divisor - size % divisor;
    return {total / 2, total - total / 2};
  }
  return {0, 0};
}

const std::vector<std::string> kPositions = {"center",      "top_left",     "top_right",
                                             "bottom_left", "bottom_right", "random"};

// adjust_padding_by_position on pad = {top, bottom, left, right}.
void PositionPadding(const std::string& position, Rng& rng, int* pad) {
  const int h = pad[0] + pad[1], w = pad[2] + pad[3];
  if (position == "top_left") {
    pad[0] = 0, pad[1] = h, pad[2] = 0, pad[3] = w;
  } else if (position == "top_right") {
    pad[0] = 0, pad[1] = h, pad[2] = w, pad[3] = 0;
  } else if (position == "bottom_left") {
    pad[0] = h, pad[1] = 0, pad[2] = 0, pad[3] = w;
  } else if (position == "bottom_right") {
    pad[0] = h, pad[1] = 0, pad[2] = w, pad[3] = 0;
  } else if (position == "random") {
    pad[0] = RandInt(rng, 0, h), pad[1] = h - pad[0];
    pad[2] = RandInt(rng, 0, w), pad[3] = w - pad[2];
  }
}

// Steps that pad (top, bottom, left, right in iv[4..7]) and then crop (x_min, y_min, x_max,
// y_max of the padded image in iv[0..3]): RandomCrop, CenterCrop, PadIfNeeded, Pad,
// CropNonEmptyMaskIfExists. Exact copies.
class PadCropLeaf final : public Leaf {
 public:
  enum Type { kRandomCrop, kCenterCrop, kPadIfNeeded, kPad, kCropNonEmpty };
  explicit PadCropLeaf(Type t) : type_(t) {}
  Kind kind() const override { return Kind::kGeometric; }
  bool draw_needs_mask() const override { return type_ == kCropNonEmpty; }

  Status Draw(Rng& rng, int, const cv::Mat* mask, Step* s) const override {
    const Size in = s->in;
    int* pad = s->iv + 4;
    int* crop = s->iv;
    pad[0] = pad[1] = pad[2] = pad[3] = 0;
    if (type_ == kPad) {
      std::copy(fixed_pad_, fixed_pad_ + 4, pad);
    } else if (type_ == kPadIfNeeded ||
               ((type_ == kRandomCrop || type_ == kCenterCrop) && pad_if_needed_)) {
      const int mh = type_ == kPadIfNeeded ? min_h_ : height_;
      const int mw = type_ == kPadIfNeeded ? min_w_ : width_;
      std::tie(pad[0], pad[1]) = DimPadding(in.h, mh, type_ == kPadIfNeeded ? div_h_ : 0);
      std::tie(pad[2], pad[3]) = DimPadding(in.w, mw, type_ == kPadIfNeeded ? div_w_ : 0);
      if (pad[0] + pad[1] + pad[2] + pad[3] > 0) PositionPadding(position_, rng, pad);
    }
    const Size padded{in.h + pad[0] + pad[1], in.w + pad[2] + pad[3]};
    if ((type_ == kRandomCrop || type_ == kCenterCrop || type_ == kCropNonEmpty) &&
        (height_ > padded.h || width_ > padded.w)) {
      return Status::BadInput("crop size (" + std::to_string(height_) + ", " +
                              std::to_string(width_) + ") exceeds the image (" +
                              std::to_string(in.h) + ", " + std::to_string(in.w) + ")" +
                              (type_ == kCropNonEmpty ? "" : "; set pad_if_needed=true to pad"));
    }
    crop[0] = 0, crop[1] = 0, crop[2] = padded.w, crop[3] = padded.h;
    if (type_ == kRandomCrop) {
      const double h_start = rng.Uniform(), w_start = rng.Uniform();
      CropCoords(padded, {height_, width_}, h_start, w_start, crop);
    } else if (type_ == kCenterCrop) {
      crop[1] = (padded.h - height_) / 2, crop[0] = (padded.w - width_) / 2;
      crop[3] = crop[1] + height_, crop[2] = crop[0] + width_;
    } else if (type_ == kCropNonEmpty) {
      if (mask == nullptr) {
        s->deferred = true;  // the position needs the mask; the size is known
      } else {
        CropNonEmpty(rng, *mask, crop);
        s->deferred = false;
      }
    }
    s->out = {crop[3] - crop[1], crop[2] - crop[0]};
    s->geo.fwd = Affine::Translate(pad[2] - crop[0], pad[0] - crop[1]);
    s->geo.exact = true;
    const bool padding = pad[0] + pad[1] + pad[2] + pad[3] > 0;
    s->geo.frame = padding ? Frame::kBorder : s->out == in ? Frame::kFull : Frame::kCrop;
    s->geo.border = border_;
    return Status::OK();
  }

  std::optional<Size> StaticOutput(Size in) const override {
    switch (type_) {
      case kRandomCrop:
      case kCenterCrop:
      case kCropNonEmpty:
        return Size{height_, width_};
      case kPad:
        if (!in.known()) return std::nullopt;
        return Size{in.h + fixed_pad_[0] + fixed_pad_[1], in.w + fixed_pad_[2] + fixed_pad_[3]};
      case kPadIfNeeded: {
        if (!in.known()) return std::nullopt;
        const auto [t, b] = DimPadding(in.h, min_h_, div_h_);
        const auto [l, r] = DimPadding(in.w, min_w_, div_w_);
        return Size{in.h + t + b, in.w + l + r};
      }
    }
    return std::nullopt;
  }

  bool WarpPart(const Step& s, const cv::Mat& src, int x0, int y0, cv::Mat* dst,
                bool) const override {
    const int* pad = s.iv + 4;
    const cv::Rect roi(s.iv[0] - x0, s.iv[1] - y0, s.iv[2] - s.iv[0], s.iv[3] - s.iv[1]);
    if (pad[0] + pad[1] + pad[2] + pad[3] != 0 || (roi & cv::Rect(0, 0, src.cols, src.rows)) != roi)
      return false;
    src(roi).copyTo(*dst);
    return true;
  }

  void Warp(const Step& s, const cv::Mat& src, cv::Mat* dst, bool is_mask) const override {
    const int* pad = s.iv + 4;
    const cv::Rect roi(s.iv[0], s.iv[1], s.iv[2] - s.iv[0], s.iv[3] - s.iv[1]);
    if (pad[0] + pad[1] + pad[2] + pad[3] == 0) {
      src(roi).copyTo(*dst);
      return;
    }
    const cv::Scalar value =
        is_mask ? cv::Scalar::all(border_.fill_mask) : FillScalar(border_.fill, src.channels());
    if (roi.x == 0 && roi.y == 0 && roi.width == dst->cols && roi.height == dst->rows &&
        dst->rows == src.rows + pad[0] + pad[1] && dst->cols == src.cols + pad[2] + pad[3]) {
      cv::copyMakeBorder(src, *dst, pad[0], pad[1], pad[2], pad[3], border_.mode, value);
      return;  // the whole padded image: padded straight into dst
    }
    cv::Mat padded;
    cv::copyMakeBorder(src, padded, pad[0], pad[1], pad[2], pad[3], border_.mode, value);
    padded(roi).copyTo(*dst);
  }

  json Params(const Step& s) const override {
    const int* pad = s.iv + 4;
    json pp = nullptr;
    if (pad[0] + pad[1] + pad[2] + pad[3] > 0) {
      pp = {
          {"pad_top", pad[0]}, {"pad_bottom", pad[1]}, {"pad_left", pad[2]}, {"pad_right", pad[3]}};
    }
    if (type_ == kPad || type_ == kPadIfNeeded) {
      return {
          {"pad_top", pad[0]}, {"pad_bottom", pad[1]}, {"pad_left", pad[2]}, {"pad_right", pad[3]}};
    }
    return {{"crop_coords", {s.iv[0], s.iv[1], s.iv[2], s.iv[3]}}, {"pad_params", pp}};
  }

  Status Parse(ArgReader& r);

 private:
  // CropNonEmptyMaskIfExists.get_params_dependent_on_data on a one-channel mask.
  void CropNonEmpty(Rng& rng, const cv::Mat& mask, int* crop) const {
    cv::Mat m = mask;
    if (!ignore_values_.empty()) {
      m = mask.clone();
      for (int y = 0; y < m.rows; ++y) {
        uint8_t* row = m.ptr<uint8_t>(y);
        for (int x = 0; x < m.cols; ++x) {
          if (std::find(ignore_values_.begin(), ignore_values_.end(), row[x]) !=
              ignore_values_.end()) {
            row[x] = 0;
          }
        }
      }
    }
    const int count = cv::countNonZero(m);
    int x_min, y_min;
    if (count > 0) {  // a non-zero pixel chosen uniformly (np.argwhere's row-major order)
      uint64_t k = rng.Below(static_cast<uint64_t>(count));
      int px = 0, py = 0;
      for (int y = 0; y < m.rows; ++y) {
        const int n = cv::countNonZero(m.row(y));
        if (k >= static_cast<uint64_t>(n)) {
          k -= static_cast<uint64_t>(n);
          continue;
        }
        const uint8_t* row = m.ptr<uint8_t>(y);
        for (int x = 0; x < m.cols; ++x) {
          if (row[x] != 0 && k-- == 0) {
            px = x, py = y;
            break;
          }
        }
        break;
      }
      x_min = px - RandInt(rng, 0, width_ - 1);
      y_min = py - RandInt(rng, 0, height_ - 1);
      x_min = std::clamp(x_min, 0, m.cols - width_);
      y_min = std::clamp(y_min, 0, m.rows - height_);
    } else {
      x_min = RandInt(rng, 0, m.cols - width_);
      y_min = RandInt(rng, 0, m.rows - height_);
    }
    crop[0] = x_min, crop[1] = y_min, crop[2] = x_min + width_, crop[3] = y_min + height_;
  }

  const Type type_;
  int height_ = 0, width_ = 0;
  bool pad_if_needed_ = false;
  std::string position_ = "center";
  int min_h_ = 0, min_w_ = 0, div_h_ = 0, div_w_ = 0;
  int fixed_pad_[4] = {0, 0, 0, 0};  // top, bottom, left, right
  std::vector<int> ignore_values_;
  Border border_;
};

Status PadCropLeaf::Parse(ArgReader& r) {
  if (type_ == kCropNonEmpty) {
    prob = r.Prob(1.0);
    height_ = r.Int("height", 0, 1);
    width_ = r.Int("width", 0, 1);
    if (const json* v = r.Raw("ignore_values"); v != nullptr) {
      if (!v->is_array()) r.Fail(r.where() + ": argument ignore_values must be a list of ints");
      for (const json& e : v->is_array() ? *v : json::array()) {
        if (!e.is_number_integer()) {
          r.Fail(r.where() + ": argument ignore_values must be a list of ints");
        } else {
          ignore_values_.push_back(e.get<int>());
        }
      }
      r.Put("ignore_values", *v);
    } else {
      r.Put("ignore_values", nullptr);
    }
    r.Ignored("ignore_channels", nullptr);  // masks are one channel here
    return r.Finish({"height", "width", "ignore_values", "ignore_channels", "p"});
  }
  prob = r.Prob(1.0);
  border_.mode = r.BorderMode("border_mode", 0);
  border_.fill = r.FillArg("fill", 0.0);
  border_.fill_mask = r.FillArg("fill_mask", 0.0).values[0];
  if (type_ == kPad || type_ == kPadIfNeeded) {
    if (type_ == kPadIfNeeded) {
      r.OnlyDefault("padding", 0, "PadIfNeeded computes its padding");
    } else {
      const json* v = r.Raw("padding");
      const json pv = v ? *v : json(0);
      auto is_int = [](const json& e) { return e.is_number_integer(); };
      if (is_int(pv)) {
        fixed_pad_[0] = fixed_pad_[1] = fixed_pad_[2] = fixed_pad_[3] = pv.get<int>();
      } else if (pv.is_array() && pv.size() == 2 && is_int(pv[0]) && is_int(pv[1])) {
        fixed_pad_[2] = fixed_pad_[3] = pv[0].get<int>();
        fixed_pad_[0] = fixed_pad_[1] = pv[1].get<int>();
      } else if (pv.is_array() && pv.size() == 4 && std::all_of(pv.begin(), pv.end(), is_int)) {
        fixed_pad_[2] = pv[0].get<int>(), fixed_pad_[0] = pv[1].get<int>();
        fixed_pad_[3] = pv[2].get<int>(), fixed_pad_[1] = pv[3].get<int>();
      } else {
        r.Fail(r.where() +
               ": argument padding must be an int, (x, y) or (left, top, right, "
               "bottom)");
      }
      if (*std::min_element(fixed_pad_, fixed_pad_ + 4) < 0) {
        r.Fail(r.where() + ": argument padding must not be negative");
      }
      r.Put("padding", pv);
      return r.Finish({"padding", "fill", "fill_mask", "border_mode", "p"});
    }
    const bool has_h = r.OptionalInt("min_height", false, 1024, 1, &min_h_);
    const bool has_w = r.OptionalInt("min_width", false, 1024, 1, &min_w_);
    const bool has_dh = r.OptionalInt("pad_height_divisor", true, 0, 1, &div_h_);
    const bool has_dw = r.OptionalInt("pad_width_divisor", true, 0, 1, &div_w_);
    if (has_h == has_dh) {
      r.Fail(r.where() + ": give exactly one of min_height and pad_height_divisor");
    }
    if (has_w == has_dw)
      r.Fail(r.where() + ": give exactly one of min_width and pad_width_divisor");
    if (!has_h) min_h_ = 0;
    if (!has_w) min_w_ = 0;
    position_ = r.Choice("position", "center", kPositions);
    return r.Finish({"min_height", "min_width", "pad_height_divisor", "pad_width_divisor",
                     "position", "border_mode", "fill", "fill_mask", "p"});
  }
  height_ = r.Int("height", 0, 1);
  width_ = r.Int("width", 0, 1);
  pad_if_needed_ = r.Bool("pad_if_needed", false);
  position_ = r.Choice("pad_position", "center", kPositions);
  return r.Finish({"height", "width", "pad_if_needed", "pad_position", "border_mode", "fill",
                   "fill_mask", "p"});
}

template <PadCropLeaf::Type T>
Status MakePadCrop(ArgReader& r, std::unique_ptr<Leaf>* out) {
  auto leaf = std::make_unique<PadCropLeaf>(T);
  DSPIPE_RETURN_IF_ERROR(leaf->Parse(r));
  *out = std::move(leaf);
  return Status::OK();
}

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
      const Range mm = r.RangeArg("min_max_height", {1, 1}, Widen::kOnePlus, 1, 1e9, true);
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

void AddCropLeaves(std::vector<LeafType>* t) {
  const char* crop = "same crop (exact copy); padding: fill_mask";
  const char* resize = "same geometry, mask_interpolation (nearest)";
  const std::vector<std::string> crop_args = {
      "height", "width", "pad_if_needed", "pad_position", "border_mode", "fill", "fill_mask", "p"};
  t->push_back(
      {"RandomCrop", MakePadCrop<PadCropLeaf::kRandomCrop>, "geometric", crop, true, crop_args});
  t->push_back(
      {"CenterCrop", MakePadCrop<PadCropLeaf::kCenterCrop>, "geometric", crop, true, crop_args});
  t->push_back({"PadIfNeeded",
                MakePadCrop<PadCropLeaf::kPadIfNeeded>,
                "geometric",
                "same padding, fill_mask (exact copy)",
                true,
                {"min_height", "min_width", "pad_height_divisor", "pad_width_divisor", "position",
                 "border_mode", "fill", "fill_mask", "p"}});
  t->push_back({"Pad",
                MakePadCrop<PadCropLeaf::kPad>,
                "geometric",
                "same padding, fill_mask (exact copy)",
                true,
                {"padding", "fill", "fill_mask", "border_mode", "p"}});
  t->push_back({"CropNonEmptyMaskIfExists",
                MakePadCrop<PadCropLeaf::kCropNonEmpty>,
                "geometric",
                "same crop (exact copy), placed on a non-zero mask pixel",
                true,
                {"height", "width", "ignore_values", "ignore_channels", "p"}});
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
