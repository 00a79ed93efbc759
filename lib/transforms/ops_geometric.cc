// SPDX-License-Identifier: Apache-2.0
// Geometric leaves that keep or rotate the frame: HorizontalFlip, VerticalFlip, Transpose,
// RandomRotate90, SquareSymmetry / D4 (the eight symmetries of the square: exact copies), and
// the affine family Rotate, Affine, ShiftScaleRotate (albumentations 2.0.8's matrix: shift the
// centre (w/2 - 0.5, h/2 - 0.5) to the origin, scale, rotate, shear, translate, shift back).
#include <cmath>
#include <opencv2/imgproc.hpp>

#include "transforms/ops.h"
#include "transforms/simd.h"

namespace dspipe::transforms {
namespace {

using nlohmann::json;

const std::vector<int> kWarpInterpolations = {0, 1, 2, 3, 4};  // NEAREST LINEAR CUBIC AREA LANCZOS4

// The eight symmetries of the square, albumentations' d4 group element names.
enum class D4 { kE, kR90, kR180, kR270, kV, kHVT, kH, kT };
const char* const kD4Names[] = {"e", "r90", "r180", "r270", "v", "hvt", "h", "t"};

// np.rot90(img, k) turns counter-clockwise; transpose swaps x and y.
Affine D4Map(D4 g, Size in, Size* out) {
  const double w1 = in.w - 1, h1 = in.h - 1;
  const bool swaps = g == D4::kR90 || g == D4::kR270 || g == D4::kHVT || g == D4::kT;
  *out = swaps ? Size{in.w, in.h} : in;
  switch (g) {
    case D4::kE:
      return {};
    case D4::kR90:
      return {0, 1, 0, -1, 0, w1};
    case D4::kR180:
      return {-1, 0, w1, 0, -1, h1};
    case D4::kR270:
      return {0, -1, h1, 1, 0, 0};
    case D4::kV:
      return {1, 0, 0, 0, -1, h1};
    case D4::kHVT:
      return {0, -1, h1, -1, 0, w1};
    case D4::kH:
      return {-1, 0, w1, 0, 1, 0};
    case D4::kT:
      return {0, 1, 0, 1, 0, 0};
  }
  return {};
}

void D4Warp(D4 g, const cv::Mat& src, cv::Mat* dst) {
  switch (g) {
    case D4::kE:
      src.copyTo(*dst);
      return;
    case D4::kR90:
      cv::rotate(src, *dst, cv::ROTATE_90_COUNTERCLOCKWISE);
      return;
    case D4::kR180:
      cv::rotate(src, *dst, cv::ROTATE_180);
      return;
    case D4::kR270:
      cv::rotate(src, *dst, cv::ROTATE_90_CLOCKWISE);
      return;
    case D4::kV:
      cv::flip(src, *dst, 0);
      return;
    case D4::kHVT:
      cv::transpose(src, *dst);
      cv::flip(*dst, *dst, -1);
      return;
    case D4::kH:
      FlipHorizontal(src, dst);
      return;
    case D4::kT:
      cv::transpose(src, *dst);
      return;
  }
}

// HorizontalFlip / VerticalFlip / Transpose (fixed element), RandomRotate90 (e, r90, r180,
// r270), D4 / SquareSymmetry (all eight).
class SymmetryLeaf final : public Leaf {
 public:
  enum Mode { kFixed, kRot90, kAll };
  SymmetryLeaf(Mode mode, D4 fixed) : mode_(mode), fixed_(fixed) {}
  Kind kind() const override { return Kind::kGeometric; }
  Status Draw(Rng& rng, int, const cv::Mat*, Step* s) const override {
    D4 g = fixed_;
    if (mode_ == kRot90) {
      static const D4 kRot[] = {D4::kE, D4::kR90, D4::kR180, D4::kR270};
      g = kRot[RandInt(rng, 0, 3)];
    } else if (mode_ == kAll) {
      g = static_cast<D4>(RandInt(rng, 0, 7));
    }
    s->iv[0] = static_cast<int>(g);
    s->geo.fwd = D4Map(g, s->in, &s->out);
    s->geo.frame = Frame::kFull;
    s->geo.exact = true;
    return Status::OK();
  }
  bool commutes_with_hflip() const override {
    return mode_ == kFixed && (fixed_ == D4::kV || fixed_ == D4::kH);
  }
  std::optional<Size> StaticOutput(Size in) const override {
    if (mode_ == kFixed) {
      Size out;
      D4Map(fixed_, in, &out);
      return out;
    }
    if (in.h == in.w) return in;  // a square stays that size whatever is drawn
    return std::nullopt;
  }
  void Warp(const Step& s, const cv::Mat& src, cv::Mat* dst, bool) const override {
    D4Warp(static_cast<D4>(s.iv[0]), src, dst);
  }
  json Params(const Step& s) const override {
    const D4 g = static_cast<D4>(s.iv[0]);
    if (mode_ == kRot90) {
      const int factor = g == D4::kE ? 0 : g == D4::kR90 ? 1 : g == D4::kR180 ? 2 : 3;
      return {{"factor", factor}};
    }
    if (mode_ == kAll) return {{"group_element", kD4Names[s.iv[0]]}};
    return json::object();
  }

 private:
  const Mode mode_;
  const D4 fixed_;
};

template <SymmetryLeaf::Mode M, D4 G>
Status MakeSymmetry(ArgReader& r, std::unique_ptr<Leaf>* out) {
  auto leaf = std::make_unique<SymmetryLeaf>(M, G);
  leaf->prob = r.Prob(M == SymmetryLeaf::kFixed ? 0.5 : 1.0);
  DSPIPE_RETURN_IF_ERROR(r.Finish({"p"}));
  *out = std::move(leaf);
  return Status::OK();
}

// 3x3 row-major matrices multiplied left to right as numpy's `@` chain does.
using M3 = std::array<double, 9>;
M3 Mul(const M3& x, const M3& y) {
  M3 z{};
  for (int i = 0; i < 3; ++i) {
    for (int j = 0; j < 3; ++j) {
      z[i * 3 + j] = x[i * 3] * y[j] + x[i * 3 + 1] * y[3 + j] + x[i * 3 + 2] * y[6 + j];
    }
  }
  return z;
}

// fgeometric.create_affine_transformation_matrix with shift = center(image_shape).
Affine AffineMatrix(double tx, double ty, double shear_x, double shear_y, double scale_x,
                    double scale_y, double rotate, Size in) {
  const double cx = in.w / 2.0 - 0.5, cy = in.h / 2.0 - 0.5;
  double r = std::fmod(rotate, 360.0);  // Python's %: the result takes the divisor's sign
  if (r < 0) r += 360.0;
  const double rad = r * (M_PI / 180.0);
  const double shx = shear_x * (M_PI / 180.0), shy = shear_y * (M_PI / 180.0);
  const M3 to_origin{1, 0, -cx, 0, 1, -cy, 0, 0, 1};
  const M3 scale{scale_x, 0, 0, 0, scale_y, 0, 0, 0, 1};
  const M3 rot{std::cos(rad), std::sin(rad), 0, -std::sin(rad), std::cos(rad), 0, 0, 0, 1};
  const M3 shear{1, std::tan(shx), 0, std::tan(shy), 1, 0, 0, 0, 1};
  const M3 translate{1, 0, tx, 0, 1, ty, 0, 0, 1};
  const M3 back{1, 0, cx, 0, 1, cy, 0, 0, 1};
  const M3 m = Mul(Mul(Mul(Mul(Mul(back, translate), shear), rot), scale), to_origin);
  return {m[0], m[1], m[2], m[3], m[4], m[5]};
}

struct XY {
  Range x, y;
};

// Rotate, Affine and ShiftScaleRotate: one warpAffine with albumentations' matrix.
class AffineLeaf final : public Leaf {
 public:
  enum Type { kRotate, kAffine, kShiftScaleRotate };
  explicit AffineLeaf(Type t) : type_(t) {}
  Kind kind() const override { return Kind::kGeometric; }

  Status Draw(Rng& rng, int, const cv::Mat*, Step* s) const override {
    const Size in = s->in;
    double tx = 0, ty = 0, shx = 0, shy = 0, sx = 1, sy = 1, angle = 0;
    if (type_ == kRotate) {
      angle = Uniform(rng, rotate_.lo, rotate_.hi);
    } else {
      if (translate_px_) {
        tx = RandInt(rng, static_cast<int>(translate_.x.lo), static_cast<int>(translate_.x.hi));
        ty = RandInt(rng, static_cast<int>(translate_.y.lo), static_cast<int>(translate_.y.hi));
      } else {  // int(fraction * size): truncated toward zero, as Python's int()
        tx = std::trunc(Uniform(rng, translate_.x.lo, translate_.x.hi) * in.w);
        ty = std::trunc(Uniform(rng, translate_.y.lo, translate_.y.hi) * in.h);
      }
      shx = -Uniform(rng, shear_.x.lo, shear_.x.hi);
      shy = -Uniform(rng, shear_.y.lo, shear_.y.hi);
      sx = DrawScale(rng, scale_.x);
      sy = DrawScale(rng, scale_.y);
      if (keep_ratio_) sy = sx;
      angle = Uniform(rng, rotate_.lo, rotate_.hi);
    }
    Affine m = AffineMatrix(tx, ty, shx, shy, sx, sy, angle, in);
    s->out = in;
    if (fit_output_) {  // compute_affine_warp_output_shape: the corners' bounding box
      double min_x = 1e300, min_y = 1e300, max_x = -1e300, max_y = -1e300;
      for (const auto& [x, y] :
           {std::pair<double, double>{0, 0}, {in.w, 0}, {in.w, in.h}, {0, in.h}}) {
        const double u = m.a * x + m.b * y + m.c, v = m.d * x + m.e * y + m.f;
        min_x = std::min(min_x, u), max_x = std::max(max_x, u);
        min_y = std::min(min_y, v), max_y = std::max(max_y, v);
      }
      const double fx = std::floor(min_x), fy = std::floor(min_y);
      s->out = {static_cast<int>(std::ceil(max_y) - fy + 1),
                static_cast<int>(std::ceil(max_x) - fx + 1)};
      m = m.Then(Affine::Translate(-fx, -fy));
      if (m.IsIdentity()) s->out = in;  // warp_affine returns the image itself
    }
    s->v[0] = m.a, s->v[1] = m.b, s->v[2] = m.c, s->v[3] = m.d, s->v[4] = m.e, s->v[5] = m.f;
    s->v[6] = angle, s->v[7] = sx, s->v[8] = sy;
    s->v[9] = tx, s->v[10] = ty, s->v[11] = shx, s->v[12] = shy;
    s->iv[0] = 0, s->iv[1] = 0, s->iv[2] = in.w, s->iv[3] = in.h;  // crop: x_min y_min x_max y_max
    if (crop_border_) {
      RotatedRect(in.h, in.w, angle, s->iv);
      s->out = {s->iv[3] - s->iv[1], s->iv[2] - s->iv[0]};
    }
    s->geo.fwd = m.Then(Affine::Translate(-s->iv[0], -s->iv[1]));
    s->geo.frame = Frame::kBorder;
    s->geo.exact = m.IsIdentity() || m.IsExact();
    s->geo.interp = interp_;
    s->geo.mask_interp = mask_interp_;
    s->geo.border = border_;
    return Status::OK();
  }

  std::optional<Size> StaticOutput(Size in) const override {
    if (fit_output_ || crop_border_) return std::nullopt;
    return in;
  }

  void Warp(const Step& s, const cv::Mat& src, cv::Mat* dst, bool is_mask) const override {
    const Affine m{s.v[0], s.v[1], s.v[2], s.v[3], s.v[4], s.v[5]};
    cv::Mat full;
    cv::Mat* target = crop_border_ ? &full : dst;
    if (m.IsIdentity()) {
      src.copyTo(*target);
    } else {
      const cv::Mat mat = (cv::Mat_<double>(2, 3) << m.a, m.b, m.c, m.d, m.e, m.f);
      const cv::Scalar value =
          is_mask ? cv::Scalar::all(border_.fill_mask) : FillScalar(border_.fill, src.channels());
      const Size warped = crop_border_ ? s.in : s.out;
      if (crop_border_) full.create(warped.h, warped.w, src.type());
      WarpAffine(src, target, mat, cv::Size(warped.w, warped.h), is_mask ? mask_interp_ : interp_,
                 border_.mode, value);
    }
    if (crop_border_) {
      full(cv::Rect(s.iv[0], s.iv[1], s.iv[2] - s.iv[0], s.iv[3] - s.iv[1])).copyTo(*dst);
    }
  }

  json Params(const Step& s) const override {
    const Affine m{s.v[0], s.v[1], s.v[2], s.v[3], s.v[4], s.v[5]};
    json out = {{"matrix", AffineJson(m)},
                {"bbox_matrix", AffineJson(m)},
                {"output_shape", {s.out.h, s.out.w}}};
    if (type_ == kRotate) {
      const bool c = crop_border_;
      out["x_min"] = c ? s.iv[0] : -1, out["y_min"] = c ? s.iv[1] : -1;
      out["x_max"] = c ? s.iv[2] : -1, out["y_max"] = c ? s.iv[3] : -1;
      out["output_shape"] = {s.in.h, s.in.w};
    } else {
      out["rotate"] = s.v[6];
      out["scale"] = {{"x", s.v[7]}, {"y", s.v[8]}};
      out["translate"] = {{"x", s.v[9]}, {"y", s.v[10]}};
      out["shear"] = {{"x", s.v[11]}, {"y", s.v[12]}};
    }
    return out;
  }

  Status Parse(ArgReader& r);

 private:
  double DrawScale(Rng& rng, Range range) const {
    if (!balanced_scale_) return Uniform(rng, range.lo, range.hi);
    const bool lower = range.lo<1, upper = range.hi> 1;
    if (lower && upper) {
      return rng.Below(2) == 0 ? Uniform(rng, range.lo, 1.0) : Uniform(rng, 1.0, range.hi);
    }
    if (lower) return Uniform(rng, range.lo, 1.0);
    if (upper) return Uniform(rng, 1.0, range.hi);
    return 1.0;
  }

  // Rotate._rotated_rect_with_max_area: the largest axis-aligned rectangle inside the turned one.
  static void RotatedRect(int height, int width, double angle_deg, int* iv) {
    const double angle = angle_deg * M_PI / 180.0;
    const bool width_is_longer = width >= height;
    const double side_long = width_is_longer ? width : height;
    const double side_short = width_is_longer ? height : width;
    const double sin_a = std::fabs(std::sin(angle)), cos_a = std::fabs(std::cos(angle));
    double wr, hr;
    if (side_short <= 2.0 * sin_a * cos_a * side_long || std::fabs(sin_a - cos_a) < 1e-10) {
      const double x = 0.5 * side_short;
      wr = width_is_longer ? x / sin_a : x / cos_a;
      hr = width_is_longer ? x / cos_a : x / sin_a;
    } else {
      const double cos_2a = cos_a * cos_a - sin_a * sin_a;
      wr = (width * cos_a - height * sin_a) / cos_2a;
      hr = (height * cos_a - width * sin_a) / cos_2a;
    }
    iv[0] = std::max(0, static_cast<int>(width / 2.0 - wr / 2));
    iv[2] = std::min(width, static_cast<int>(width / 2.0 + wr / 2));
    iv[1] = std::max(0, static_cast<int>(height / 2.0 - hr / 2));
    iv[3] = std::min(height, static_cast<int>(height / 2.0 + hr / 2));
  }

  // Affine's scale / shear / translate: a number, a pair, or {"x": ..., "y": ...}.
  static XY ReadXY(ArgReader& r, const char* key, const json* v, double def, bool integers,
                   bool* ok) {
    auto one = [&](const json& e, double missing) -> Range {
      if (e.is_null()) return {missing, missing};
      if (e.is_number()) return {e.get<double>(), e.get<double>()};
      if (e.is_array() && e.size() == 2 && e[0].is_number() && e[1].is_number()) {
        const double a = e[0].get<double>(), b = e[1].get<double>();
        return {std::min(a, b), std::max(a, b)};
      }
      *ok = false;
      return {missing, missing};
    };
    XY xy;
    if (v->is_object()) {
      if (!v->contains("x") && !v->contains("y")) *ok = false;
      for (auto it = v->begin(); it != v->end(); ++it) {
        if (it.key() != "x" && it.key() != "y") *ok = false;
      }
      xy.x = one(v->contains("x") ? v->at("x") : json(), def);
      xy.y = one(v->contains("y") ? v->at("y") : json(), def);
    } else {
      xy.x = xy.y = one(*v, def);
    }
    if (!*ok)
      r.Fail(r.where() + ": argument " + key + "=" + v->dump() +
             " must be a number, a pair or {\"x\": ..., \"y\": ...}");
    if (integers) {
      for (Range* q : {&xy.x, &xy.y}) q->lo = std::trunc(q->lo), q->hi = std::trunc(q->hi);
      r.Put(key, {{"x", {static_cast<int64_t>(xy.x.lo), static_cast<int64_t>(xy.x.hi)}},
                  {"y", {static_cast<int64_t>(xy.y.lo), static_cast<int64_t>(xy.y.hi)}}});
    } else {
      r.Put(key, {{"x", {xy.x.lo, xy.x.hi}}, {"y", {xy.y.lo, xy.y.hi}}});
    }
    return xy;
  }

  const Type type_;
  Range rotate_{0, 0};
  XY scale_{{1, 1}, {1, 1}}, shear_{{0, 0}, {0, 0}}, translate_{{0, 0}, {0, 0}};
  bool translate_px_ = true, fit_output_ = false, keep_ratio_ = false;
  bool balanced_scale_ = false, crop_border_ = false;
  int interp_ = 1, mask_interp_ = 0;
  Border border_;
};

Status AffineLeaf::Parse(ArgReader& r) {
  prob = r.Prob(0.5);
  interp_ = r.Interpolation("interpolation", 1, kWarpInterpolations);
  mask_interp_ = r.Interpolation("mask_interpolation", 0, kWarpInterpolations);
  border_.mode = r.BorderMode("border_mode", 0);
  border_.fill = r.FillArg("fill", 0.0);
  border_.fill_mask = r.FillArg("fill_mask", 0.0).values[0];
  r.Ignored("rotate_method", "largest_box");  // bounding boxes only
  if (type_ == kRotate) {
    rotate_ = r.RangeArg("limit", {-90, 90}, Widen::kSymmetric, -1e9, 1e9);
    crop_border_ = r.Bool("crop_border", false);
    return r.Finish({"limit", "interpolation", "border_mode", "rotate_method", "crop_border",
                     "mask_interpolation", "fill", "fill_mask", "p"});
  }
  if (type_ == kShiftScaleRotate) {
    const Range shift = r.RangeArg("shift_limit", {-0.0625, 0.0625}, Widen::kSymmetric, -1, 1);
    r.Erase("shift_limit");  // A.to_dict keeps only the per-axis ranges
    auto axis = [&](const char* key) {
      if (r.Has(key)) return r.RangeArg(key, {}, Widen::kSymmetric, -1, 1);
      (void)r.Raw(key);
      r.Put(key, {shift.lo, shift.hi});
      return shift;
    };
    translate_px_ = false;
    translate_.x = axis("shift_limit_x");
    translate_.y = axis("shift_limit_y");
    const Range sl = r.RangeArg("scale_limit", {-0.1, 0.1}, Widen::kSymmetric, -1e9, 1e9);
    scale_.x = scale_.y = {sl.lo + 1.0, sl.hi + 1.0};  // to_tuple(bias=1.0)
    if (scale_.x.lo < 0) r.Fail(r.where() + ": argument scale_limit must be >= -1");
    // A.to_dict writes the range back with bias -1 (so (-0.1, 0.1) reads 1.1 - 1 etc.).
    r.Put("scale_limit", {scale_.x.lo - 1.0, scale_.x.hi - 1.0});
    rotate_ = r.RangeArg("rotate_limit", {-45, 45}, Widen::kSymmetric, -1e9, 1e9);
    DSPIPE_RETURN_IF_ERROR(
        r.Finish({"shift_limit", "scale_limit", "rotate_limit", "interpolation", "border_mode",
                  "shift_limit_x", "shift_limit_y", "rotate_method", "mask_interpolation", "fill",
                  "fill_mask", "p"}));
    return Status::OK();
  }
  bool ok = true;
  const json one = 1.0;
  const json* v = r.Raw("scale");
  scale_ = ReadXY(r, "scale", v ? v : &one, 1.0, false, &ok);
  const json* tp = r.Raw("translate_percent");
  const json* tpx = r.Raw("translate_px");
  if (tp != nullptr && tpx != nullptr) {
    r.Fail(r.where() + ": give translate_percent or translate_px, not both");
  }
  const json zero = 0;
  if (tp != nullptr) {
    translate_px_ = false;
    translate_ = ReadXY(r, "translate_percent", tp, 0.0, false, &ok);
    r.Put("translate_px", nullptr);
  } else {
    translate_ = ReadXY(r, "translate_px", tpx ? tpx : &zero, 0.0, true, &ok);
    r.Put("translate_percent", nullptr);
  }
  const json* rot = r.Raw("rotate");
  if (rot == nullptr) rot = &zero;
  if (rot->is_number()) {  // to_tuple(value, value): a number is a fixed angle
    rotate_ = {rot->get<double>(), rot->get<double>()};
    r.Put("rotate", {rotate_.lo, rotate_.hi});
  } else {
    rotate_ = r.RangeArg("rotate", {0, 0}, Widen::kRepeat, -1e9, 1e9);
  }
  const json* sh = r.Raw("shear");
  shear_ = ReadXY(r, "shear", sh ? sh : &zero, 1.0, false, &ok);
  fit_output_ = r.Bool("fit_output", false);
  keep_ratio_ = r.Bool("keep_ratio", false);
  balanced_scale_ = r.Bool("balanced_scale", false);
  if (keep_ratio_ && (scale_.x.lo != scale_.y.lo || scale_.x.hi != scale_.y.hi)) {
    r.Fail(r.where() + ": keep_ratio needs the same x and y scale ranges");
  }
  return r.Finish({"scale", "translate_percent", "translate_px", "rotate", "shear", "interpolation",
                   "mask_interpolation", "fit_output", "keep_ratio", "rotate_method",
                   "balanced_scale", "border_mode", "fill", "fill_mask", "p"});
}

template <AffineLeaf::Type T>
Status MakeAffine(ArgReader& r, std::unique_ptr<Leaf>* out) {
  auto leaf = std::make_unique<AffineLeaf>(T);
  DSPIPE_RETURN_IF_ERROR(leaf->Parse(r));
  *out = std::move(leaf);
  return Status::OK();
}

constexpr const char* kJointInterp = "same geometry, mask_interpolation (nearest), fill_mask";

}  // namespace

void AddGeometricLeaves(std::vector<LeafType>* t) {
  using M = SymmetryLeaf;
  const char* exact = "same geometry (exact copy)";
  t->push_back(
      {"HorizontalFlip", MakeSymmetry<M::kFixed, D4::kH>, "geometric", exact, true, {"p"}});
  t->push_back({"VerticalFlip", MakeSymmetry<M::kFixed, D4::kV>, "geometric", exact, true, {"p"}});
  t->push_back({"Transpose", MakeSymmetry<M::kFixed, D4::kT>, "geometric", exact, true, {"p"}});
  t->push_back(
      {"RandomRotate90", MakeSymmetry<M::kRot90, D4::kE>, "geometric", exact, true, {"p"}});
  t->push_back({"SquareSymmetry", MakeSymmetry<M::kAll, D4::kE>, "geometric", exact, true, {"p"}});
  t->push_back({"D4", MakeSymmetry<M::kAll, D4::kE>, "geometric", exact, true, {"p"}});
  t->push_back({"Rotate",
                MakeAffine<AffineLeaf::kRotate>,
                "geometric",
                kJointInterp,
                true,
                {"limit", "interpolation", "border_mode", "rotate_method", "crop_border",
                 "mask_interpolation", "fill", "fill_mask", "p"}});
  t->push_back({"Affine",
                MakeAffine<AffineLeaf::kAffine>,
                "geometric",
                kJointInterp,
                true,
                {"scale", "translate_percent", "translate_px", "rotate", "shear", "interpolation",
                 "mask_interpolation", "fit_output", "keep_ratio", "rotate_method",
                 "balanced_scale", "border_mode", "fill", "fill_mask", "p"}});
  t->push_back({"ShiftScaleRotate",
                MakeAffine<AffineLeaf::kShiftScaleRotate>,
                "geometric",
                kJointInterp,
                true,
                {"shift_limit", "scale_limit", "rotate_limit", "interpolation", "border_mode",
                 "shift_limit_x", "shift_limit_y", "rotate_method", "mask_interpolation", "fill",
                 "fill_mask", "p"}});
}

}  // namespace dspipe::transforms
