// SPDX-License-Identifier: Apache-2.0
// Geometric leaves that crop or pad the frame: crops (RandomCrop, CenterCrop with
// pad_if_needed, CropNonEmptyMaskIfExists) and padding (PadIfNeeded, Pad), with albumentations
// 2.0.8's sampling (get_crop_coords, Python's round-half-even: shared with ops_resize.cc) and its
// cv2 calls for the step on its own. Resizing leaves are in ops_resize.cc.
#include <algorithm>
#include <cmath>
#include <opencv2/imgproc.hpp>

#include "transforms/ops.h"

namespace dspipe::transforms {

int PyRound(double v) { return static_cast<int>(std::nearbyint(v)); }  // half to even

void CropCoords(Size image, Size crop, double h_start, double w_start, int* xy) {
  const int ch = std::min(crop.h, image.h), cw = std::min(crop.w, image.w);
  xy[1] = static_cast<int>((image.h - ch + 1) * h_start);
  xy[0] = static_cast<int>((image.w - cw + 1) * w_start);
  xy[3] = xy[1] + ch;
  xy[2] = xy[0] + cw;
}

namespace {

using nlohmann::json;

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
      return CropExceeds(in);
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
        // The position needs the mask; the size is known: the steps after this one are
        // planned for it (planned for the whole image, Resize cut outside the crop).
        s->deferred = true;
        crop[2] = width_, crop[3] = height_;
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

  Status RefusesInput(Size in) const override {
    const bool crop = type_ == kRandomCrop || type_ == kCenterCrop || type_ == kCropNonEmpty;
    if (!crop || pad_if_needed_ || !in.known()) return Status::OK();
    return height_ > in.h || width_ > in.w ? CropExceeds(in) : Status::OK();
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
  Status CropExceeds(Size in) const {
    return Status::BadInput("crop size (" + std::to_string(height_) + ", " +
                            std::to_string(width_) + ") exceeds the image (" +
                            std::to_string(in.h) + ", " + std::to_string(in.w) + ")" +
                            (type_ == kCropNonEmpty ? "" : "; set pad_if_needed=true to pad"));
  }

  // CropNonEmptyMaskIfExists.get_params_dependent_on_data on a one-channel mask.
  void CropNonEmpty(Rng& rng, const cv::Mat& mask, int* crop) const {
    cv::Mat m = mask;
    if (mask.depth() == CV_16U) {  // uint16 ids: the same draw over a 0/1 map of the kept ids
      m.create(mask.rows, mask.cols, CV_8UC1);
      for (int y = 0; y < m.rows; ++y) {
        const uint16_t* in = mask.ptr<uint16_t>(y);
        uint8_t* row = m.ptr<uint8_t>(y);
        for (int x = 0; x < m.cols; ++x) {
          row[x] = in[x] != 0 && std::find(ignore_values_.begin(), ignore_values_.end(),
                                           static_cast<int>(in[x])) == ignore_values_.end();
        }
      }
    } else if (!ignore_values_.empty()) {
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

}  // namespace

void AddCropLeaves(std::vector<LeafType>* t) {
  const char* crop = "same crop (exact copy); padding: fill_mask";
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
}

}  // namespace dspipe::transforms
