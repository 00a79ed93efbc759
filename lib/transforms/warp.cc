// Running one fused geometric group: the composed map of its steps applied in one pass.
// Exact groups (every step a copy: flips, transposes, rot90, crops, integer pads) are one
// dihedral copy of the in-range rectangle plus the border; others are one cv::warpAffine with
// the inverse of the composed map. A one-step group runs the leaf's own albumentations code.
#include <opencv2/imgproc.hpp>

#include "transforms/plan.h"

namespace dspipe::transforms {
namespace {

bool Warpable(int interp) { return interp == 0 || interp == 1 || interp == 2 || interp == 4; }
int WarpInterpolation(int interp) {
  if (Warpable(interp)) return interp;
  return interp == 6 ? cv::INTER_NEAREST : cv::INTER_LINEAR;  // NEAREST_EXACT; AREA, LINEAR_EXACT
}

int Round(double v) { return static_cast<int>(std::lround(v)); }

// src(roi) put into dst(rect) by the dihedral linear part (a, b, d, e) of an exact map.
void DihedralCopy(const cv::Mat& src, const Affine& t, cv::Mat dst) {
  const int a = Round(t.a), b = Round(t.b), d = Round(t.d), e = Round(t.e);
  if (b == 0) {  // axis-preserving
    if (a == 1 && e == 1) {
      src.copyTo(dst);
    } else {
      cv::flip(src, dst, a == -1 && e == -1 ? -1 : a == -1 ? 1 : 0);
    }
    return;
  }
  // x' = b y, y' = d x: transpose, then flip where the signs say.
  cv::transpose(src, dst);
  if (b == 1 && d == 1) return;
  cv::flip(dst, dst, b == -1 && d == -1 ? -1 : b == -1 ? 1 : 0);
}

// Every output pixel of an exact map copies one source pixel; out of range: the border.
void ExactCopy(const cv::Mat& src, const Affine& t, const Border* border, cv::Mat* dst,
               bool is_mask) {
  const Affine s = t.Inverse();
  // The output rectangle whose source is in range (the image of the source's pixel grid).
  const double x0 = t.a * 0 + t.b * 0 + t.c, y0 = t.d * 0 + t.e * 0 + t.f;
  const double x1 = t.a * (src.cols - 1) + t.b * (src.rows - 1) + t.c;
  const double y1 = t.d * (src.cols - 1) + t.e * (src.rows - 1) + t.f;
  const int ox0 = std::max(0, Round(std::min(x0, x1))),
            ox1 = std::min(dst->cols - 1, Round(std::max(x0, x1)));
  const int oy0 = std::max(0, Round(std::min(y0, y1))),
            oy1 = std::min(dst->rows - 1, Round(std::max(y0, y1)));
  cv::Rect in_range;
  if (ox0 <= ox1 && oy0 <= oy1) {
    in_range = cv::Rect(ox0, oy0, ox1 - ox0 + 1, oy1 - oy0 + 1);
    const double sx0 = s.a * ox0 + s.b * oy0 + s.c, sy0 = s.d * ox0 + s.e * oy0 + s.f;
    const double sx1 = s.a * ox1 + s.b * oy1 + s.c, sy1 = s.d * ox1 + s.e * oy1 + s.f;
    const int rx = Round(std::min(sx0, sx1)), ry = Round(std::min(sy0, sy1));
    const cv::Rect roi(rx, ry, Round(std::max(sx0, sx1)) - rx + 1,
                       Round(std::max(sy0, sy1)) - ry + 1);
    DihedralCopy(src(roi), t, (*dst)(in_range));
  }
  if (in_range.area() == dst->rows * dst->cols) return;
  const int mode = border != nullptr ? border->mode : cv::BORDER_CONSTANT;
  if (mode == cv::BORDER_CONSTANT) {
    const cv::Scalar value = border == nullptr ? cv::Scalar::all(0)
                             : is_mask         ? cv::Scalar::all(border->fill_mask)
                                               : FillScalar(border->fill, src.channels());
    cv::Mat whole = *dst;
    const int w = whole.cols, h = whole.rows;
    if (in_range.area() == 0) {
      whole.setTo(value);
      return;
    }
    whole(cv::Rect(0, 0, w, in_range.y)).setTo(value);
    whole(cv::Rect(0, in_range.br().y, w, h - in_range.br().y)).setTo(value);
    whole(cv::Rect(0, in_range.y, in_range.x, in_range.height)).setTo(value);
    whole(cv::Rect(in_range.br().x, in_range.y, w - in_range.br().x, in_range.height)).setTo(value);
    return;
  }
  // Replicate / reflect / wrap: each border pixel from its interpolated source coordinate.
  const size_t px = src.elemSize();
  for (int y = 0; y < dst->rows; ++y) {
    uint8_t* row = dst->ptr<uint8_t>(y);
    for (int x = 0; x < dst->cols; ++x) {
      if (in_range.contains(cv::Point(x, y))) {
        x = in_range.br().x - 1;
        continue;
      }
      const int sx = cv::borderInterpolate(Round(s.a * x + s.b * y + s.c), src.cols, mode);
      const int sy = cv::borderInterpolate(Round(s.d * x + s.e * y + s.f), src.rows, mode);
      std::memcpy(row + static_cast<size_t>(x) * px, src.ptr<uint8_t>(sy) + sx * px, px);
    }
  }
}

}  // namespace

void RunGeometricGroup(const Step* first, const Step* last, const cv::Mat& src,
                       const Region& region, cv::Mat* dst, bool is_mask) {
  if (last - first == 1 && region.full()) {
    first->leaf->Warp(*first, src, dst, is_mask);
    return;
  }
  Affine t;  // decoded pixels -> this group's output
  if (!region.full()) {
    const double s = region.scale;
    t = {s, 0, region.x0 + 0.5 * s - 0.5, 0, s, region.y0 + 0.5 * s - 0.5};
  }
  const Border* border = nullptr;
  int interp = -1, mask_interp = -1;
  for (const Step* s = first; s != last; ++s) {
    t = t.Then(s->geo.fwd);
    if (s->geo.frame == Frame::kBorder) border = &s->geo.border;
    if (!s->geo.exact) {
      interp = s->geo.interp;
      mask_interp = s->geo.mask_interp;
    }
  }
  if (interp < 0 && t.IsExact()) {
    ExactCopy(src, t, border, dst, is_mask);
    return;
  }
  if (interp < 0) interp = cv::INTER_LINEAR, mask_interp = cv::INTER_NEAREST;  // scaled region
  const Affine m = t.Inverse();
  const cv::Mat mat = (cv::Mat_<double>(2, 3) << m.a, m.b, m.c, m.d, m.e, m.f);
  const int mode = border != nullptr ? border->mode : cv::BORDER_REPLICATE;
  const cv::Scalar value = border == nullptr ? cv::Scalar::all(0)
                           : is_mask         ? cv::Scalar::all(border->fill_mask)
                                             : FillScalar(border->fill, src.channels());
  const int flags = WarpInterpolation(is_mask ? mask_interp : interp) | cv::WARP_INVERSE_MAP;
  cv::warpAffine(src, *dst, mat, dst->size(), flags, mode, value);
}

}  // namespace dspipe::transforms
