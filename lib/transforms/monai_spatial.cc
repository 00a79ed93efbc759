// SPDX-License-Identifier: Apache-2.0
// MONAI 1.6.1's spatial transforms (monai_leaf.h) on the image and the label together: flips,
// quarter turns, crops and pads, and the crops that choose their centre from the label.
#include <algorithm>
#include <cmath>

#include "transforms/monai_leaf.h"

namespace dspipe::transforms::monai {
namespace {

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
    // The k-th pixel of a category in row-major order (the draws pick by position). Pos/neg on
    // the label alone (the common case): each row's foreground count (a SIMD count), the row
    // found from their running sums, then the pixel in that row. Otherwise every pixel of each
    // category listed in one pass. Per thread, reused.
    const bool by_rows = !classes && image == nullptr;
    thread_local std::vector<uint32_t> row_fg;
    thread_local std::vector<std::vector<uint32_t>> pixels;
    std::vector<uint64_t> count(static_cast<size_t>(categories), 0);
    if (by_rows) {
      row_fg.resize(static_cast<size_t>(in.h));
      for (int y = 0; y < in.h; ++y) {
        row_fg[static_cast<size_t>(y)] = static_cast<uint32_t>(cv::countNonZero(mask->row(y)));
        count[1] += row_fg[static_cast<size_t>(y)];
      }
      count[0] = static_cast<uint64_t>(in.h) * static_cast<uint64_t>(in.w) - count[1];
    } else {
      pixels.resize(static_cast<size_t>(categories));
      for (auto& v : pixels) v.clear();
      for (int y = 0; y < in.h; ++y) {
        const uint32_t row = static_cast<uint32_t>(y) * static_cast<uint32_t>(in.w);
        for (int x = 0; x < in.w; ++x) {
          if (const int c = category(y, x); c >= 0) {
            pixels[static_cast<size_t>(c)].push_back(row + static_cast<uint32_t>(x));
          }
        }
      }
      for (int c = 0; c < categories; ++c)
        count[static_cast<size_t>(c)] = pixels[static_cast<size_t>(c)].size();
    }
    auto kth = [&](int cat, uint64_t k) -> uint32_t {
      if (!by_rows) return pixels[static_cast<size_t>(cat)][k];
      int y = 0;
      for (;; ++y) {  // the row holding it
        const uint64_t in_row = cat == 1
                                    ? row_fg[static_cast<size_t>(y)]
                                    : static_cast<uint64_t>(in.w) - row_fg[static_cast<size_t>(y)];
        if (k < in_row) break;
        k -= in_row;
      }
      for (int x = 0;; ++x) {
        const bool fg =
            mask->depth() == CV_16U ? mask->at<uint16_t>(y, x) != 0 : mask->at<uint8_t>(y, x) != 0;
        if (fg == (cat == 1) && k-- == 0) {
          return static_cast<uint32_t>(y) * static_cast<uint32_t>(in.w) + static_cast<uint32_t>(x);
        }
      }
    };
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
      const uint32_t at = kth(cat, k);
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

// CropForegroundd: the bounding box of the source's values > 0 (MONAI's is_positive; any of
// channel_indices, else of every channel), grown by margin, made k_divisible about its centre,
// then cropped, padding where the box leaves the image (allow_smaller=false). The box depends
// on the pixels: the draw waits for the step's input (deferred), and the output size varies.
// iv: crop x0, y0, w, h; pad top, bottom, left, right.
class CropForeground final : public Spatial {
 public:
  bool from_label = false;
  std::vector<int> channel_indices;  // empty: every channel
  std::array<int, 2> margin = {0, 0}, k = {1, 1};
  bool allow_smaller = false;
  int border[2] = {cv::BORDER_CONSTANT, cv::BORDER_CONSTANT};  // image, label
  double value = 0;

  bool draw_needs_mask() const override { return from_label; }
  bool sized_by_pixels() const override { return true; }
  std::optional<Size> StaticOutput(Size) const override { return std::nullopt; }
  Status Draw(Rng&, int, const cv::Mat* mask, Step* s) const override {
    s->geo.exact = true;
    s->geo.frame = Frame::kBorder;
    const cv::Mat* src = from_label ? mask : s->image;
    if (src == nullptr) {  // planning: the pixels come when the step runs
      s->deferred = true;
      s->out = s->in;
      s->iv[0] = 0, s->iv[1] = 0, s->iv[2] = s->in.w, s->iv[3] = s->in.h;
      for (int i = 4; i < 8; ++i) s->iv[i] = 0;
      return Status::OK();
    }
    s->deferred = false;
    const int H = src->rows, W = src->cols;
    std::vector<char> row_any(static_cast<size_t>(H), 0), col_any(static_cast<size_t>(W), 0);
    const int ch = src->channels();
    for (int c : channel_indices) {
      if (c >= ch) {
        return Status::BadInput(name + ": channel_indices names channel " + std::to_string(c) +
                                " of an image with " + std::to_string(ch));
      }
    }
    for (int y = 0; y < H; ++y) {
      for (int x = 0; x < W; ++x) {
        bool on = false;
        auto positive = [&](int c) {
          switch (src->depth()) {
            case CV_8U:
              return src->ptr<uint8_t>(y)[x * ch + c] > 0;
            case CV_16U:
              return src->ptr<uint16_t>(y)[x * ch + c] > 0;
            default:
              return src->ptr<float>(y)[x * ch + c] > 0.0f;
          }
        };
        if (channel_indices.empty()) {
          for (int c = 0; c < ch && !on; ++c) on = positive(c);
        } else {
          for (int c : channel_indices) on = on || positive(c);
        }
        if (on) row_any[static_cast<size_t>(y)] = col_any[static_cast<size_t>(x)] = 1;
      }
    }
    auto first = [](const std::vector<char>& v) {
      return static_cast<int>(std::find(v.begin(), v.end(), 1) - v.begin());
    };
    auto last = [](const std::vector<char>& v) {
      return static_cast<int>(v.rend() - std::find(v.rbegin(), v.rend(), 1)) - 1;
    };
    if (first(row_any) == H) {
      return Status::BadInput(name + ": no foreground (no " + (from_label ? "label" : "image") +
                              " value > 0): MONAI would crop to an empty image");
    }
    const int n[2] = {H, W};
    int start[2] = {first(row_any) - margin[0], first(col_any) - margin[1]};
    int end[2] = {last(row_any) + margin[0] + 1, last(col_any) + margin[1] + 1};
    for (int d = 0; d < 2; ++d) {
      if (allow_smaller) start[d] = std::max(start[d], 0), end[d] = std::min(end[d], n[d]);
      const int orig = end[d] - start[d];
      const int size = k[d] > 0 ? (orig + k[d] - 1) / k[d] * k[d] : orig;  // ceil to k
      start[d] -= (size - orig) / 2;
      end[d] = start[d] + size;
    }
    const int y0 = std::max(start[0], 0), x0 = std::max(start[1], 0);
    const int y1 = std::min(end[0], H), x1 = std::min(end[1], W);
    s->iv[0] = x0, s->iv[1] = y0, s->iv[2] = std::max(x1 - x0, 0), s->iv[3] = std::max(y1 - y0, 0);
    s->iv[4] = std::max(-start[0], 0), s->iv[5] = std::max(end[0] - H, 0);
    s->iv[6] = std::max(-start[1], 0), s->iv[7] = std::max(end[1] - W, 0);
    s->out = {end[0] - start[0], end[1] - start[1]};
    s->geo.fwd = Affine::Translate(-start[1], -start[0]);
    return Status::OK();
  }
  void Warp(const Step& s, const cv::Mat& src, cv::Mat* dst, bool is_mask) const override {
    const cv::Mat roi = src(cv::Rect(s.iv[0], s.iv[1], s.iv[2], s.iv[3]));
    if (s.iv[4] + s.iv[5] + s.iv[6] + s.iv[7] == 0) {
      roi.copyTo(*dst);
      return;
    }
    cv::copyMakeBorder(roi, *dst, s.iv[4], s.iv[5], s.iv[6], s.iv[7], border[is_mask ? 1 : 0],
                       cv::Scalar::all(value));
  }
  json Params(const Step& s) const override {
    return {{"crop", {s.iv[0], s.iv[1], s.iv[2], s.iv[3]}},
            {"pad", {s.iv[4], s.iv[5], s.iv[6], s.iv[7]}}};
  }
};

// RandWeightedCropd: num_samples crops of spatial_size, each centred on a pixel drawn with
// probability proportional to the weight map (w_key: the label's ids or the image's first
// channel; shifted to non-negative when it holds negatives; uniform when the weights sum to 0),
// among MONAI's "valid" centres (per axis [win // 2, n - win + win // 2), or n // 2 where the
// crop is not smaller than the image). The crop is cut at the image (never padded). The draw
// needs the map: deferred until the step runs. iv: sample 0's crop x0, y0, w, h; holes: every
// sample's.
class RandWeightedCrop final : public Spatial {
 public:
  std::array<int, 2> size = {-1, -1};
  bool from_label = false;
  int num_samples = 1;

  bool draw_needs_mask() const override { return from_label; }
  int samples() const override { return num_samples; }
  std::optional<Size> StaticOutput(Size in) const override {
    if (!in.known()) {
      return size[0] > 0 && size[1] > 0 ? std::optional<Size>(Size{size[0], size[1]})
                                        : std::optional<Size>(Size{});
    }
    return Size{std::min(FallBack(size[0], in.h), in.h), std::min(FallBack(size[1], in.w), in.w)};
  }
  Status Draw(Rng& rng, int, const cv::Mat* mask, Step* s) const override {
    const Size in = s->in;
    const int win[2] = {FallBack(size[0], in.h), FallBack(size[1], in.w)};
    const int n[2] = {in.h, in.w};
    s->out = *StaticOutput(in);
    s->geo.exact = true;
    s->geo.frame = Frame::kCrop;
    const cv::Mat* w = from_label ? mask : s->image;
    if (w == nullptr) {  // planning: the weights come when the step runs
      s->deferred = true;
      s->iv[0] = 0, s->iv[1] = 0, s->iv[2] = s->out.w, s->iv[3] = s->out.h;
      return Status::OK();
    }
    s->deferred = false;
    if (w->rows != in.h || w->cols != in.w) {
      return Status::Internal(name + ": the weight map is not the image's size");
    }
    int lo[2], hi[2];
    for (int d = 0; d < 2; ++d) {
      lo[d] = n[d] > win[d] ? win[d] / 2 : n[d] / 2;
      hi[d] = n[d] > win[d] ? n[d] - win[d] + win[d] / 2 : n[d] / 2 + 1;
    }
    const int vh = hi[0] - lo[0], vw = hi[1] - lo[1];
    auto weight = [&](int y, int x) -> double {
      switch (w->depth()) {
        case CV_8U:
          return w->ptr<uint8_t>(y)[x * w->channels()];
        case CV_16U:
          return w->ptr<uint16_t>(y)[x * w->channels()];
        default:
          return w->ptr<float>(y)[x * w->channels()];
      }
    };
    double low = 0;
    for (int y = lo[0]; y < hi[0]; ++y) {
      for (int x = lo[1]; x < hi[1]; ++x) low = std::min(low, weight(y, x));
    }
    thread_local std::vector<double> cum;
    cum.resize(static_cast<size_t>(vh) * static_cast<size_t>(vw));
    double total = 0;
    for (int y = 0; y < vh; ++y) {
      for (int x = 0; x < vw; ++x) {
        total += weight(lo[0] + y, lo[1] + x) - low;  // shifted to non-negative (MONAI)
        cum[static_cast<size_t>(y) * static_cast<size_t>(vw) + static_cast<size_t>(x)] = total;
      }
    }
    const bool uniform = !(total > 0) || !std::isfinite(total);
    s->holes.clear();
    s->data.clear();
    for (int k = 0; k < num_samples; ++k) {
      size_t idx;
      if (uniform) {
        idx = static_cast<size_t>(rng.Below(cum.size()));
      } else {  // searchsorted(right=True): the first cumulative weight above the draw
        const double u = rng.Uniform() * total;
        idx = static_cast<size_t>(std::upper_bound(cum.begin(), cum.end(), u) - cum.begin());
        idx = std::min(idx, cum.size() - 1);
      }
      const int cy = lo[0] + static_cast<int>(idx / static_cast<size_t>(vw));
      const int cx = lo[1] + static_cast<int>(idx % static_cast<size_t>(vw));
      const int y0 = std::max(cy - win[0] / 2, 0), x0 = std::max(cx - win[1] / 2, 0);
      const int h = std::min(y0 + win[0], in.h) - y0, wd = std::min(x0 + win[1], in.w) - x0;
      if (h != s->out.h || wd != s->out.w) {
        return Status::Internal(name + ": the crop came out " + std::to_string(h) + "x" +
                                std::to_string(wd));
      }
      s->holes.insert(s->holes.end(), {x0, y0, wd, h});
      s->data.push_back(static_cast<float>(cy));
      s->data.push_back(static_cast<float>(cx));
      if (k == 0) {
        s->iv[0] = x0, s->iv[1] = y0, s->iv[2] = wd, s->iv[3] = h;
        s->iv[4] = cy, s->iv[5] = cx;
        s->geo.fwd = Affine::Translate(-x0, -y0);
      }
    }
    return Status::OK();
  }
  void Warp(const Step& s, const cv::Mat& src, cv::Mat* dst, bool) const override {
    src(cv::Rect(s.iv[0], s.iv[1], s.iv[2], s.iv[3])).copyTo(*dst);
  }
  json Params(const Step& s) const override {
    json all = json::array();
    for (size_t k = 0; 4 * k + 3 < s.holes.size() && 2 * k + 1 < s.data.size(); ++k) {
      const int* r = s.holes.data() + 4 * k;
      all.push_back(
          {{"center", {static_cast<int>(s.data[2 * k]), static_cast<int>(s.data[2 * k + 1])}},
           {"crop", {r[0], r[1], r[2], r[3]}}});
    }
    return {{"center", {s.iv[4], s.iv[5]}},
            {"crop", {s.iv[0], s.iv[1], s.iv[2], s.iv[3]}},
            {"samples", all}};
  }
};

// Pad mode (MONAI passes it to numpy.pad / torch.nn.functional.pad) and the constant value.
void ReadPadMode(ArgReader& r, CropPad* l) {
  l->border = PadBorder(r.Choice("mode", "constant", PadModes()));
  l->value = r.Number("value", 0.0);
}

bool ReadMethod(ArgReader& r) {
  return r.Choice("method", "symmetric", {"symmetric", "end"}) == "symmetric";
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

}  // namespace

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

namespace {

// SpatialPadd and ResizeWithPadOrCropd take the same arguments.
Status MakePadTo(ArgReader& r, CropPad::Mode mode, std::unique_ptr<MonaiLeaf>* out) {
  auto l = std::make_unique<CropPad>();
  l->mode = mode;
  const Keys k = ReadKeys(r, Role::kSpatial);
  l->size = SpatialSize(r, "spatial_size");
  l->symmetric = ReadMethod(r);
  ReadPadMode(r, l.get());
  return Done(r, std::move(l), k, 1.0, {"spatial_size", "method", "mode", "value", "lazy"}, out);
}

}  // namespace

Status MakeSpatialPad(ArgReader& r, std::unique_ptr<MonaiLeaf>* out) {
  return MakePadTo(r, CropPad::kPad, out);
}

Status MakeResizeWithPadOrCrop(ArgReader& r, std::unique_ptr<MonaiLeaf>* out) {
  return MakePadTo(r, CropPad::kResizeWithPadOrCrop, out);
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

Status MakeCropForeground(ArgReader& r, std::unique_ptr<MonaiLeaf>* out) {
  auto l = std::make_unique<CropForeground>();
  const Keys k = ReadKeys(r, Role::kSpatial);
  if (!r.Has("source_key")) {
    r.Fail(r.where() + ": argument source_key is required (\"image\" or \"label\")");
  }
  const std::string source =
      r.Choice("source_key", "image", {"image", "img", "label", "seg", "mask"});
  l->from_label = source == "label" || source == "seg" || source == "mask";
  if (r.Has("select_fn")) {
    r.Fail(r.where() +
           ": argument select_fn is not supported: dspipe selects values > 0 (MONAI's default, "
           "is_positive); threshold the source first (ThresholdIntensityd) for another rule");
  }
  (void)r.Raw("select_fn");
  if (const json* v = r.Raw("channel_indices"); v != nullptr) {
    const json list = v->is_array() ? *v : json::array({*v});
    for (const json& e : list) {
      if (!e.is_number_integer() || e.get<int64_t>() < 0 || e.get<int64_t>() > 64) {
        r.Fail(r.where() +
               ": argument channel_indices must be a channel index or a list of them, got " +
               v->dump());
        break;
      }
      l->channel_indices.push_back(e.get<int>());
    }
    r.Put("channel_indices", *v);
  } else {
    r.Put("channel_indices", nullptr);
  }
  if (l->from_label && !l->channel_indices.empty()) {
    for (int c : l->channel_indices) {
      if (c != 0) r.Fail(r.where() + ": the label has one channel: channel_indices must be 0");
    }
  }
  l->margin = IntPair(r, "margin", 0, 0);
  l->allow_smaller = r.Bool("allow_smaller", false);
  l->k = IntPair(r, "k_divisible", 1, 1);
  ReadPadModes(r, k, "mode", "constant", l->border);
  l->value = r.Number("value", 0.0);
  KeepIgnored(r, {"start_coord_key", "end_coord_key"});
  if (l->from_label && !k.label) {
    r.Fail(r.where() + ": source_key is the label: keys must include it too");
  }
  return Done(r, std::move(l), k, 1.0,
              {"source_key", "select_fn", "channel_indices", "margin", "allow_smaller",
               "k_divisible", "mode", "value", "start_coord_key", "end_coord_key", "lazy"},
              out);
}

Status MakeRandWeightedCrop(ArgReader& r, std::unique_ptr<MonaiLeaf>* out) {
  auto l = std::make_unique<RandWeightedCrop>();
  const Keys k = ReadKeys(r, Role::kSpatial);
  if (!r.Has("w_key")) {
    r.Fail(r.where() + ": argument w_key is required: the weight map, \"label\" or \"image\"");
  }
  const std::string w = r.Choice("w_key", "label", {"image", "img", "label", "seg", "mask"});
  l->from_label = w == "label" || w == "seg" || w == "mask";
  l->size = SpatialSize(r, "spatial_size");
  l->num_samples = r.Int("num_samples", 1, 1, 64);
  if (l->from_label && !k.label) {
    r.Fail(r.where() + ": w_key is the label: keys must include it too");
  }
  return Done(r, std::move(l), k, 1.0, {"w_key", "spatial_size", "num_samples", "lazy"}, out);
}

}  // namespace dspipe::transforms::monai
