// SPDX-License-Identifier: Apache-2.0
// Running one fused geometric group: the composed map of its steps applied in one pass.
// Exact groups (every step a copy: flips, transposes, rot90, crops, integer pads) are one
// dihedral copy of the in-range rectangle plus the border; others are one warpAffine (simd.h's
// WarpAffine: cv::warpAffine's bytes) with the inverse of the composed map. A one-step group runs
// the leaf's own albumentations code.
#include <cmath>
#include <cstring>
#include <opencv2/imgproc.hpp>

#include "transforms/plan.h"
#include "transforms/simd.h"

namespace dspipe::transforms {
namespace {

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
    } else if (a == -1 && e == 1) {
      FlipHorizontal(src, &dst);
    } else {
      cv::flip(src, dst, a == -1 ? -1 : 0);
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

// The mask of a group whose resampling steps are all nearest resizes: source pixel
// floor(inverse map) as cv::resize's INTER_NEAREST picks it, exact steps composed in.
void FloorGather(const cv::Mat& src, const Affine& t, const Border* border, cv::Mat* dst) {
  const Affine m = t.Inverse();
  const bool swapped = std::fabs(m.a) < 1e-12 && std::fabs(m.e) < 1e-12;
  constexpr double kEps = 1e-7;
  const int mode = border != nullptr ? border->mode : cv::BORDER_REPLICATE;
  const uint8_t fill = cv::saturate_cast<uint8_t>(border != nullptr ? border->fill_mask : 0);
  auto index = [&](double v, int n) {  // -1: a constant border
    int i = static_cast<int>(std::floor(v + kEps));
    if (i >= 0 && i < n) return i;
    return mode == cv::BORDER_CONSTANT ? -1 : cv::borderInterpolate(i, n, mode);
  };
  std::vector<int> cols(static_cast<size_t>(dst->cols)), rows(static_cast<size_t>(dst->rows));
  for (int x = 0; x < dst->cols; ++x) {
    cols[static_cast<size_t>(x)] =
        swapped ? index(m.d * x + m.f, src.rows) : index(m.a * x + m.c, src.cols);
  }
  for (int y = 0; y < dst->rows; ++y) {
    rows[static_cast<size_t>(y)] =
        swapped ? index(m.b * y + m.c, src.cols) : index(m.e * y + m.f, src.rows);
  }
  for (int y = 0; y < dst->rows; ++y) {
    uint8_t* out = dst->ptr<uint8_t>(y);
    const int r = rows[static_cast<size_t>(y)];
    for (int x = 0; x < dst->cols; ++x) {
      const int c = cols[static_cast<size_t>(x)];
      if (r < 0 || c < 0) {
        out[x] = fill;
      } else {
        out[x] = swapped ? src.at<uint8_t>(c, r) : src.at<uint8_t>(r, c);
      }
    }
  }
}

}  // namespace

// The rectangle of `src` the group reads, beyond which its border mode (or, without a border
// step, replication) applies: a border step's input frame when it has one, else the first
// resampling step's (a RandomResizedCrop's crop); mapped back through the steps before it,
// which are axis-aligned (plan.cc's rule), so it is a rectangle. False: all of src.
bool ViewFrame(const Step* first, const Step* last, const Region& region, cv::Size size,
               cv::Rect* frame) {
  const Step* k = nullptr;
  for (const Step* s = first; s != last && k == nullptr; ++s) {
    if (s->geo.frame == Frame::kBorder) k = s;
  }
  if (k == nullptr) {
    for (const Step* s = first; s != last && k == nullptr; ++s) {
      if (!s->geo.exact) k = s;
    }
    if (k == nullptr) return false;
    for (const Step* s = first; s != k; ++s) {
      if (!s->geo.exact) return false;
    }
  }
  const double sc = region.scale;  // source -> decoded pixels
  Affine pre =
      Affine{sc, 0, region.x0 + 0.5 * sc - 0.5, 0, sc, region.y0 + 0.5 * sc - 0.5}.Inverse();
  for (const Step* s = first; s != k; ++s) pre = s->geo.fwd.Inverse().Then(pre);
  const bool part = k->geo.frame != Frame::kBorder && k->geo.reads[2] > 0;
  const double fx0 = part ? k->geo.reads[0] : 0, fy0 = part ? k->geo.reads[1] : 0;
  const double fx1 = fx0 + (part ? k->geo.reads[2] : k->in.w) - 1;
  const double fy1 = fy0 + (part ? k->geo.reads[3] : k->in.h) - 1;
  const double ax = pre.a * fx0 + pre.b * fy0 + pre.c, ay = pre.d * fx0 + pre.e * fy0 + pre.f;
  const double bx = pre.a * fx1 + pre.b * fy1 + pre.c, by = pre.d * fx1 + pre.e * fy1 + pre.f;
  const int x0 = static_cast<int>(std::floor(std::min(ax, bx) + 1e-6));
  const int y0 = static_cast<int>(std::floor(std::min(ay, by) + 1e-6));
  const int x1 = static_cast<int>(std::ceil(std::max(ax, bx) - 1e-6));
  const int y1 = static_cast<int>(std::ceil(std::max(ay, by) - 1e-6));
  *frame = cv::Rect(x0, y0, x1 - x0 + 1, y1 - y0 + 1) & cv::Rect(0, 0, size.width, size.height);
  return frame->area() > 0 && frame->size() != size;
}

void RunGeometricGroup(const Step* first, const Step* last, const cv::Mat& src,
                       const Region& region, cv::Mat* dst, bool is_mask) {
  const bool shifted = !region.full() && region.shifted();
  const int ox = shifted ? static_cast<int>(region.x0) : 0;
  const int oy = shifted ? static_cast<int>(region.y0) : 0;
  if (last - first == 1) {
    if (region.full()) {
      first->leaf->Warp(*first, src, dst, is_mask);
      return;
    }
    if (shifted && first->leaf->WarpPart(*first, src, ox, oy, dst, is_mask)) return;
  }
  bool mask_steps = false, d4_tail = !first->geo.exact;
  for (const Step* s = first; s != last; ++s) {
    mask_steps |= s->geo.mask_steps;
    if (s != first) d4_tail &= s->geo.exact && s->geo.frame == Frame::kFull;
  }
  if (d4_tail && (region.full() || shifted)) {
    // A resize (or crop + resize) and then flips / transposes / rot90: its own cv::resize,
    // then one copy (what sequential application gives, bit for bit).
    thread_local cv::Mat resized;
    resized.create(first->out.h, first->out.w, src.type());
    bool done = true;
    if (region.full()) {
      first->leaf->Warp(*first, src, &resized, is_mask);
    } else {
      done = first->leaf->WarpPart(*first, src, ox, oy, &resized, is_mask);
    }
    if (done) {
      RunGeometricGroup(first + 1, last, resized, Region{}, dst, is_mask);
      return;
    }
  }
  if (is_mask && mask_steps && region.full()) {
    // Each step's own Warp (NEAREST_EXACT, which warpAffine lacks): albumentations' mask.
    thread_local cv::Mat ping, pong;
    const cv::Mat* cur = &src;
    for (const Step* s = first; s != last; ++s) {
      cv::Mat* out = s + 1 == last ? dst : (cur == &ping ? &pong : &ping);
      if (out != dst) out->create(s->out.h, s->out.w, src.type());
      s->leaf->Warp(*s, *cur, out, true);
      cur = out;
    }
    return;
  }
  const Border* border = nullptr;
  int interp = -1, mask_interp = -1;
  bool floor_mask = is_mask && region.full();
  Affine chain;  // source pixels -> this group's output
  Affine mt;     // the mask map with cv::resize's nearest convention
  for (const Step* s = first; s != last; ++s) {
    mt = mt.Then(s->geo.mask_floor ? s->geo.mask_fwd : s->geo.fwd);
    floor_mask &= s->geo.exact || s->geo.mask_floor;
    chain = chain.Then(s->geo.fwd);
    if (s->geo.frame == Frame::kBorder) border = &s->geo.border;
    if (!s->geo.exact) {
      interp = s->geo.interp;
      mask_interp = s->geo.mask_interp;
    }
  }
  // `view` (the pixels the warp reads; its border mode applies beyond them) and t: view pixels
  // -> output. A shifted region reads the same source rectangle with the same map as the whole
  // decode (only its origin differs), so the output is the whole decode's, bit for bit.
  cv::Mat view = src;
  Affine t = chain;
  bool shift_inverse = false;  // the map is the whole decode's, the view `o` pixels off
  cv::Rect frame;
  if (region.full()) {
    if (ViewFrame(first, last, region, src.size(), &frame)) {
      view = src(frame);
      t = Affine::Translate(frame.x, frame.y).Then(t);
      mt = Affine::Translate(frame.x, frame.y).Then(mt);
    }
  } else if (shifted) {
    const cv::Size source(first->in.w, first->in.h);
    if (ViewFrame(first, last, Region{}, source, &frame)) {
      const cv::Rect in_src = (frame - cv::Point(ox, oy)) & cv::Rect(0, 0, src.cols, src.rows);
      view = src(in_src);
      t = Affine::Translate(in_src.x + ox, in_src.y + oy).Then(chain);
    } else {
      t = Affine::Translate(ox, oy).Then(chain);
      shift_inverse = true;
    }
  } else {
    const double s = region.scale;
    t = Affine{s, 0, region.x0 + 0.5 * s - 0.5, 0, s, region.y0 + 0.5 * s - 0.5}.Then(chain);
    if (ViewFrame(first, last, region, src.size(), &frame)) {
      view = src(frame);
      t = Affine::Translate(frame.x, frame.y).Then(t);
    }
  }
  if (interp < 0 && t.IsExact()) {
    ExactCopy(view, t, border, dst, is_mask);
    return;
  }
  if (floor_mask && src.channels() == 1) {
    FloorGather(view, mt, border, dst);
    return;
  }
  if (interp < 0) interp = cv::INTER_LINEAR, mask_interp = cv::INTER_NEAREST;  // scaled region
  Affine m = t.Inverse();
  if (shift_inverse) {  // output -> source as the whole decode computes it, then -> view
    m = chain.Inverse();
    m.c -= ox;
    m.f -= oy;
  }
  const cv::Mat mat = (cv::Mat_<double>(2, 3) << m.a, m.b, m.c, m.d, m.e, m.f);
  const int mode = border != nullptr ? border->mode : cv::BORDER_REPLICATE;
  const cv::Scalar value = border == nullptr ? cv::Scalar::all(0)
                           : is_mask         ? cv::Scalar::all(border->fill_mask)
                                             : FillScalar(border->fill, src.channels());
  const int flags = WarpInterpolation(is_mask ? mask_interp : interp) | cv::WARP_INVERSE_MAP;
  WarpAffine(view, dst, mat, dst->size(), flags, mode, value);
}

}  // namespace dspipe::transforms
