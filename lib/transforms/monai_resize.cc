// SPDX-License-Identifier: Apache-2.0
// MONAI 1.6.1's resampling spatial transforms (monai_leaf.h): Resized and RandZoomd resize
// through torch's interpolate, RandRotated and RandAffined resample an affine grid through
// torch's grid_sample (monai_resample.h). The label holds class ids: its mode must be nearest
// (given per key, e.g. mode=["bilinear", "nearest"]), so it keeps its ids.
#include <algorithm>
#include <cmath>

#include "transforms/monai_grid.h"

namespace dspipe::transforms::monai {
namespace {

// The map from output to input indices of a grid step: v[8..13] (row = v8 r + v9 c + v10,
// column = v11 r + v12 c + v13).
constexpr int kMap = 8;

class Resampling : public Spatial, public GridModes {
 public:
  // [0] the image's, [1] the label's (align: GridModes' for both resamplers).
  Interp interp[2] = {Interp::kBilinear, Interp::kNearest};

 protected:
  static void SetMap(Step* s, const double m[6]) {
    for (int i = 0; i < 6; ++i) s->v[kMap + i] = m[i];
    s->geo.exact = false;
    s->geo.frame = Frame::kBorder;
  }
  void Sample(const Step& s, const cv::Mat& src, cv::Mat* dst, bool is_mask) const {
    const int i = is_mask ? 1 : 0;
    GridSample(src, s.v + kMap, dst, nearest[i], pad[i], align[i]);
  }
};

// Resized: spatial_size (an entry <= 0 keeps the input's), or with size_mode="longest" the
// longest side to spatial_size, the other in proportion (Python's round).
class Resize final : public Resampling {
 public:
  std::array<int, 2> size = {-1, -1};
  bool longest = false;
  Size OutSize(Size in) const {
    if (!longest) return {FallBack(size[0], in.h), FallBack(size[1], in.w)};
    const double scale = static_cast<double>(size[0]) / std::max(in.h, in.w);
    return {PyRound(in.h * scale), PyRound(in.w * scale)};
  }
  std::optional<Size> StaticOutput(Size in) const override {
    if (in.known()) return OutSize(in);
    if (!longest && size[0] > 0 && size[1] > 0) return Size{size[0], size[1]};
    return Size{};
  }
  Status Draw(Rng&, int, const cv::Mat*, Step* s) const override {
    s->out = OutSize(s->in);
    if (s->out.h < 1 || s->out.w < 1) {
      return Status::BadInput(name + ": the output size would be " + std::to_string(s->out.h) +
                              "x" + std::to_string(s->out.w));
    }
    s->geo.exact = s->out == s->in;
    s->geo.fwd = Affine::Resize(s->in, s->out);
    return Status::OK();
  }
  void Warp(const Step& s, const cv::Mat& src, cv::Mat* dst, bool is_mask) const override {
    if (s.out == s.in) {  // MONAI returns the input unchanged
      src.copyTo(*dst);
      return;
    }
    const int i = is_mask ? 1 : 0;
    Interpolate(src, dst, interp[i], align[i]);
  }
  json Params(const Step& s) const override { return {{"size", {s.out.h, s.out.w}}}; }
};

// Crops (about the centre) and pads (symmetrically) src to `to`: ResizeWithPadOrCrop.
void PadCropTo(const cv::Mat& src, Size to, int border, double value, cv::Mat* dst) {
  int start[2], len[2], pad[2];
  const int n[2] = {src.rows, src.cols}, want[2] = {to.h, to.w};
  for (int d = 0; d < 2; ++d) {
    start[d] = std::max(n[d] / 2 - want[d] / 2, 0);
    len[d] = std::min(start[d] + want[d], n[d]) - start[d];
    pad[d] = want[d] - len[d];
  }
  const cv::Mat roi = src(cv::Rect(start[1], start[0], len[1], len[0]));
  cv::copyMakeBorder(roi, *dst, pad[0] / 2, pad[0] - pad[0] / 2, pad[1] / 2, pad[1] - pad[1] / 2,
                     border, cv::Scalar::all(value));
}

// RandZoomd: a factor per axis (one for both when min_zoom / max_zoom are numbers), the image
// resized to floor(size * factor), then (keep_size) cropped or padded back to its size.
// v[0], v[1]: the factors; iv[0], iv[1]: the resized size.
class RandZoom final : public Resampling {
 public:
  double lo[2] = {0.9, 0.9}, hi[2] = {1.1, 1.1};
  bool one_factor = true, keep_size = true;
  int border[2] = {cv::BORDER_REPLICATE, cv::BORDER_REPLICATE};

  std::optional<Size> StaticOutput(Size in) const override {
    if (keep_size) return in;
    return std::nullopt;
  }
  Status Draw(Rng& rng, int, const cv::Mat*, Step* s) const override {
    s->v[0] = Uniform(rng, lo[0], hi[0]);
    s->v[1] = one_factor ? s->v[0] : Uniform(rng, lo[1], hi[1]);
    s->iv[0] = static_cast<int>(std::floor(static_cast<double>(s->in.h) * s->v[0]));
    s->iv[1] = static_cast<int>(std::floor(static_cast<double>(s->in.w) * s->v[1]));
    if (s->iv[0] < 1 || s->iv[1] < 1) {
      return Status::BadInput(name + ": a zoom of " + std::to_string(s->v[0]) + " x " +
                              std::to_string(s->v[1]) + " leaves no pixel of a " +
                              std::to_string(s->in.h) + "x" + std::to_string(s->in.w) + " image");
    }
    s->out = keep_size ? s->in : Size{s->iv[0], s->iv[1]};
    s->geo.exact = false;
    s->geo.frame = Frame::kBorder;
    return Status::OK();
  }
  void Warp(const Step& s, const cv::Mat& src, cv::Mat* dst, bool is_mask) const override {
    const int i = is_mask ? 1 : 0;
    cv::Mat zoomed(s.iv[0], s.iv[1], src.type());
    Interpolate(src, &zoomed, interp[i], align[i]);
    if (Size{zoomed.rows, zoomed.cols} == s.out) {
      zoomed.copyTo(*dst);
    } else {
      PadCropTo(zoomed, s.out, border[i], 0.0, dst);
    }
  }
  json Params(const Step& s) const override { return {{"zoom", {s.v[0], s.v[1]}}}; }
};

// RandRotated: an angle in [lo, hi] radians about the centre; the output keeps the input's
// size (keep_size) or holds the whole rotated image. v[0]: the angle.
class RandRotate final : public Resampling {
 public:
  double lo = 0, hi = 0;
  bool keep_size = true;

  std::optional<Size> StaticOutput(Size in) const override {
    if (keep_size) return in;
    if (lo != hi || prob < 1) return std::nullopt;  // the size follows the angle
    return in.known() ? Rotated(in, lo) : Size{};
  }
  Status Draw(Rng& rng, int, const cv::Mat*, Step* s) const override {
    const double a = Uniform(rng, lo, hi);
    s->v[0] = a;
    s->out = keep_size ? s->in : Rotated(s->in, a);
    // input index = R (output index - output centre) + input centre, R = [[cos, -sin],
    // [sin, cos]] on (row, column) (MONAI's create_rotate).
    const double c = std::cos(a), sn = std::sin(a);
    const double co[2] = {(s->out.h - 1) / 2.0, (s->out.w - 1) / 2.0};
    const double ci[2] = {(s->in.h - 1) / 2.0, (s->in.w - 1) / 2.0};
    const double m[6] = {c,  -sn, ci[0] - c * co[0] + sn * co[1],
                         sn, c,   ci[1] - sn * co[0] - c * co[1]};
    SetMap(s, m);
    return Status::OK();
  }
  void Warp(const Step& s, const cv::Mat& src, cv::Mat* dst, bool is_mask) const override {
    Sample(s, src, dst, is_mask);
  }
  json Params(const Step& s) const override { return {{"angle", s.v[0]}}; }

 private:
  // The rotated image's extent: int(ptp(R @ corners) + 0.5), corners (0 | size) per axis.
  static Size Rotated(Size in, double a) {
    const double c = std::cos(a), sn = std::sin(a);
    double lo[2] = {1e300, 1e300}, hi[2] = {-1e300, -1e300};
    for (int r : {0, in.h}) {
      for (int q : {0, in.w}) {
        const double p[2] = {c * r - sn * q, sn * r + c * q};
        for (int d = 0; d < 2; ++d) lo[d] = std::min(lo[d], p[d]), hi[d] = std::max(hi[d], p[d]);
      }
    }
    return {static_cast<int>(hi[0] - lo[0] + 0.5), static_cast<int>(hi[1] - lo[1] + 0.5)};
  }
};

// RandAffined: rotate (the first rotate_range entry), shear (coefficients [0][1], [1][0]),
// translate (rows, columns, in pixels) and scale (1 + draw; an axis without one keeps 1) drawn
// when the transform happens (it draws its own prob: an output of another spatial_size is
// resampled either way, as MONAI does), composed as MONAI's AffineGrid: R S_h T S, applied to
// the output grid's centred indices, shifted to the input's centre. v[0..7]: the draws.
class RandAffine final : public Resampling {
 public:
  double p = 0.1;
  AffineRanges ranges;
  std::array<int, 2> size = {-1, -1};

  std::optional<Size> StaticOutput(Size in) const override { return SizeOrInput(size, in); }
  Status Draw(Rng& rng, int, const cv::Mat*, Step* s) const override {
    s->out = *StaticOutput(s->in);
    const bool apply = rng.Uniform() < p;
    s->iv[0] = apply ? 1 : 0;
    double draws[4][2] = {{0, 0}, {0, 0}, {0, 0}, {1, 1}};
    if (apply) ranges.Draw(rng, draws);
    for (int k = 0; k < 4; ++k) s->v[2 * k] = draws[k][0], s->v[2 * k + 1] = draws[k][1];
    const cv::Matx33d A = AffineMatrix(draws);
    const double co[2] = {(s->out.h - 1) / 2.0, (s->out.w - 1) / 2.0};
    const double ci[2] = {(s->in.h - 1) / 2.0, (s->in.w - 1) / 2.0};
    const double m[6] = {A(0, 0), A(0, 1), A(0, 2) + ci[0] - A(0, 0) * co[0] - A(0, 1) * co[1],
                         A(1, 0), A(1, 1), A(1, 2) + ci[1] - A(1, 0) * co[0] - A(1, 1) * co[1]};
    SetMap(s, m);
    return Status::OK();
  }
  void Warp(const Step& s, const cv::Mat& src, cv::Mat* dst, bool is_mask) const override {
    if (s.iv[0] == 0 && s.out == s.in) {  // not drawn, same size: MONAI returns the input
      src.copyTo(*dst);
      return;
    }
    Sample(s, src, dst, is_mask);
  }
  json Params(const Step& s) const override {
    return {{"applied", s.iv[0] == 1},
            {"rotate", s.v[0]},
            {"shear", {s.v[2], s.v[3]}},
            {"translate", {s.v[4], s.v[5]}},
            {"scale", {s.v[6], s.v[7]}}};
  }
};

// ---- arguments -------------------------------------------------------------------------------

const char* const kLabelNearest =
    ": the label holds class ids, so its mode must be nearest; give one mode per key, e.g. "
    "mode=[\"bilinear\", \"nearest\"] for keys [\"image\", \"label\"]";

// mode (torch.nn.functional.interpolate's) and align_corners, per key.
void ReadInterp(ArgReader& r, const Keys& k, const char* def, Resampling* l) {
  const std::array<json, 2> modes = PerKey(r, k, "mode", def);
  const std::array<json, 2> align = PerKey(r, k, "align_corners", nullptr);
  for (int i = 0; i < 2; ++i) {
    const std::string m = modes[i].is_string() ? modes[i].get<std::string>() : "";
    const Interp v = m == "nearest"         ? Interp::kNearest
                     : m == "nearest-exact" ? Interp::kNearestExact
                     : m == "bilinear"      ? Interp::kBilinear
                     : m == "bicubic"       ? Interp::kBicubic
                                            : Interp::kArea;
    if (m != "area" && v == Interp::kArea) {
      r.Fail(r.where() +
             ": argument mode must be nearest, nearest-exact, bilinear, bicubic or area for a "
             "2-D slice (or one per key), got " +
             modes[i].dump());
      return;
    }
    if (i == 1 && k.label && v != Interp::kNearest && v != Interp::kNearestExact) {
      r.Fail(r.where() + kLabelNearest);
      return;
    }
    if (!align[i].is_null() && !align[i].is_boolean()) {
      r.Fail(r.where() + ": argument align_corners must be true, false or null, got " +
             align[i].dump());
      return;
    }
    const bool a = align[i].is_boolean() && align[i].get<bool>();
    if (!align[i].is_null() && (v != Interp::kBilinear && v != Interp::kBicubic)) {
      r.Fail(r.where() +
             ": align_corners can only be set with bilinear or bicubic (torch "
             "raises the same for " +
             m + ")");
      return;
    }
    l->interp[i] = v;
    l->align[i] = a;
  }
}

}  // namespace

void ReadGrid(ArgReader& r, const Keys& k, const char* pad_def, bool has_align, GridModes* l) {
  const std::array<json, 2> modes = PerKey(r, k, "mode", "bilinear");
  const std::array<json, 2> pads = PerKey(r, k, "padding_mode", pad_def);
  std::array<json, 2> align = {false, false};
  if (has_align) align = PerKey(r, k, "align_corners", false);
  for (int i = 0; i < 2; ++i) {
    const std::string m = modes[i].is_string() ? modes[i].get<std::string>() : "";
    if (m != "bilinear" && m != "nearest") {
      r.Fail(r.where() + ": argument mode must be bilinear or nearest (or one per key), got " +
             modes[i].dump());
      return;
    }
    if (i == 1 && k.label && m != "nearest") {
      r.Fail(r.where() + kLabelNearest);
      return;
    }
    const std::string p = pads[i].is_string() ? pads[i].get<std::string>() : "";
    if (p != "zeros" && p != "border" && p != "reflection") {
      r.Fail(r.where() +
             ": argument padding_mode must be zeros, border or reflection (or one per key), "
             "got " +
             pads[i].dump());
      return;
    }
    if (!align[i].is_boolean()) {
      r.Fail(r.where() + ": argument align_corners must be true or false, got " + align[i].dump());
      return;
    }
    l->nearest[i] = m == "nearest";
    l->pad[i] = p == "zeros"    ? GridPad::kZeros
                : p == "border" ? GridPad::kBorder
                                : GridPad::kReflection;
    l->align[i] = align[i].get<bool>();
  }
}

void ReadRandGridArgs(ArgReader& r, const Keys& k, std::array<int, 2>* size, double* p,
                      AffineRanges* ranges, GridModes* g) {
  if (r.Has("spatial_size")) {
    *size = SpatialSize(r, "spatial_size");
  } else {
    (void)r.Raw("spatial_size");
    r.Put("spatial_size", nullptr);
  }
  *p = Prob(r, 0.1);
  ranges->Read(r);
  ReadGrid(r, k, "reflection", false, g);
}

Range ReadRange(ArgReader& r, const char* key) {
  Range out;
  const json* v = r.Raw(key);
  if (v == nullptr) {
    r.Put(key, nullptr);
    return out;
  }
  r.Put(key, *v);
  const json list = v->is_array() ? *v : json::array({*v});
  for (const json& e : list) {
    if (e.is_null()) continue;
    if (e.is_number() && !e.is_boolean()) {
      out.e.emplace_back(-e.get<double>(), e.get<double>());
    } else if (e.is_array() && e.size() == 2 && e[0].is_number() && e[1].is_number()) {
      out.e.emplace_back(e[0].get<double>(), e[1].get<double>());
    } else {
      r.Fail(r.where() + ": argument " + key +
             " must be a number, or a list of numbers and [min, max] pairs, got " + v->dump());
      break;
    }
  }
  return out;
}

void AffineRanges::Read(ArgReader& r) {
  rotate = ReadRange(r, "rotate_range");
  shear = ReadRange(r, "shear_range");
  translate = ReadRange(r, "translate_range");
  scale = ReadRange(r, "scale_range");
}

void AffineRanges::Draw(Rng& rng, double d[4][2]) const {
  const Range* ranges[4] = {&rotate, &shear, &translate, &scale};
  for (int k = 0; k < 4; ++k) {
    d[k][0] = d[k][1] = k == 3 ? 1.0 : 0.0;
    for (size_t j = 0; j < ranges[k]->e.size(); ++j) {
      const double v = Uniform(rng, ranges[k]->e[j].first, ranges[k]->e[j].second);
      if (j < 2) d[k][j] = k == 3 ? 1.0 + v : v;
    }
  }
}

cv::Matx33d AffineMatrix(const double d[4][2]) {
  const double c = std::cos(d[0][0]), sn = std::sin(d[0][0]);
  const cv::Matx33d R(c, -sn, 0, sn, c, 0, 0, 0, 1);
  const cv::Matx33d Sh =
      cv::Matx33d(1, 0, 0, d[1][1], 1, 0, 0, 0, 1) * cv::Matx33d(1, d[1][0], 0, 0, 1, 0, 0, 0, 1);
  const cv::Matx33d T(1, 0, d[2][0], 0, 1, d[2][1], 0, 0, 1);
  const cv::Matx33d S(d[3][0], 0, 0, 0, d[3][1], 0, 0, 0, 1);
  return R * Sh * T * S;
}

Status MakeResize(ArgReader& r, std::unique_ptr<MonaiLeaf>* out) {
  auto l = std::make_unique<Resize>();
  const Keys k = ReadKeys(r, Role::kSpatial);
  l->longest = r.Choice("size_mode", "all", {"all", "longest"}) == "longest";
  if (l->longest) {
    const json* v = r.Raw("spatial_size");
    if (v == nullptr || !v->is_number_integer() || v->get<int64_t>() < 1 ||
        v->get<int64_t>() > (1 << 20)) {
      r.Fail(r.where() + ": with size_mode=\"longest\", spatial_size must be an int > 0, got " +
             (v ? v->dump() : std::string("nothing")));
    } else {
      l->size = {v->get<int>(), v->get<int>()};
      r.Put("spatial_size", *v);
    }
  } else {
    l->size = SpatialSize(r, "spatial_size");
  }
  ReadInterp(r, k, "area", l.get());
  r.OnlyDefault("anti_aliasing", false, "dspipe resizes without the Gaussian pre-filter");
  r.OnlyDefault("anti_aliasing_sigma", nullptr, "dspipe resizes without the Gaussian pre-filter");
  ReadFloatDtype(r);
  return Done(r, std::move(l), k, 1.0,
              {"spatial_size", "size_mode", "mode", "align_corners", "anti_aliasing",
               "anti_aliasing_sigma", "dtype", "lazy"},
              out);
}

Status MakeRandZoom(ArgReader& r, std::unique_ptr<MonaiLeaf>* out) {
  auto l = std::make_unique<RandZoom>();
  const Keys k = ReadKeys(r, Role::kSpatial);
  const double prob = Prob(r, 0.1);
  int counts[2] = {1, 1};
  for (int z = 0; z < 2; ++z) {
    const char* key = z == 0 ? "min_zoom" : "max_zoom";
    double* dst = z == 0 ? l->lo : l->hi;
    const json* v = r.Raw(key);
    const json def = z == 0 ? 0.9 : 1.1;
    const json list = v == nullptr ? json::array({def}) : v->is_array() ? *v : json::array({*v});
    const bool ok = (list.size() == 1 || list.size() == 2) &&
                    std::all_of(list.begin(), list.end(), [](const json& e) {
                      return e.is_number() && !e.is_boolean() && e.get<double>() > 0;
                    });
    if (!ok) {
      r.Fail(r.where() + ": argument " + key +
             " must be a number > 0 or one per axis [rows, columns], got " + list.dump());
      break;
    }
    dst[0] = list[0].get<double>();
    dst[1] = list[list.size() - 1].get<double>();
    counts[z] = static_cast<int>(list.size());
    r.Put(key, v == nullptr ? def : *v);
  }
  if (counts[0] != counts[1]) {
    r.Fail(r.where() + ": min_zoom and max_zoom must have the same length");
  }
  l->one_factor = counts[0] == 1 && counts[1] == 1;
  for (int d = 0; d < 2; ++d) {
    if (l->lo[d] > l->hi[d]) r.Fail(r.where() + ": min_zoom must be <= max_zoom");
  }
  ReadInterp(r, k, "area", l.get());
  ReadPadModes(r, k, "padding_mode", "edge", l->border);
  l->keep_size = r.Bool("keep_size", true);
  ReadFloatDtype(r);
  return Done(r, std::move(l), k, prob,
              {"prob", "min_zoom", "max_zoom", "mode", "padding_mode", "align_corners", "dtype",
               "keep_size", "lazy"},
              out);
}

Status MakeRandRotate(ArgReader& r, std::unique_ptr<MonaiLeaf>* out) {
  auto l = std::make_unique<RandRotate>();
  const Keys k = ReadKeys(r, Role::kSpatial);
  for (const char* key : {"range_x", "range_y", "range_z"}) {
    std::pair<double, double> range = {0, 0};
    if (r.Has(key)) {
      range = SymmetricRange(r, key);
    } else {
      (void)r.Raw(key);
      r.Put(key, 0.0);
    }
    if (std::string(key) == "range_x") l->lo = range.first, l->hi = range.second;
    // range_y / range_z rotate about the other axes of a volume: a slice has none to turn.
    if (std::string(key) != "range_x" && (range.first != 0 || range.second != 0)) {
      r.Fail(r.where() + ": argument " + key +
             " rotates a volume about another axis; a 2-D slice turns in its plane (range_x)");
    }
  }
  const double prob = Prob(r, 0.1);
  l->keep_size = r.Bool("keep_size", true);
  ReadGrid(r, k, "border", true, l.get());
  ReadFloatDtype(r);
  return Done(r, std::move(l), k, prob,
              {"range_x", "range_y", "range_z", "prob", "keep_size", "mode", "padding_mode",
               "align_corners", "dtype", "lazy"},
              out);
}

Status MakeRandAffine(ArgReader& r, std::unique_ptr<MonaiLeaf>* out) {
  auto l = std::make_unique<RandAffine>();
  const Keys k = ReadKeys(r, Role::kSpatial);
  ReadRandGridArgs(r, k, &l->size, &l->p, &l->ranges, l.get());
  r.OnlyDefault("cache_grid", false, "dspipe computes each sample's map on the fly");
  KeepIgnored(r, {"device"});
  // Its own prob: the plan always runs it (an output of another size is resampled either way).
  return Done(r, std::move(l), k, 1.0,
              {"spatial_size", "prob", "rotate_range", "shear_range", "translate_range",
               "scale_range", "mode", "padding_mode", "cache_grid", "device", "lazy"},
              out);
}

}  // namespace dspipe::transforms::monai
