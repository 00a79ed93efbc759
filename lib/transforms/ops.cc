// SPDX-License-Identifier: Apache-2.0
// Shared pieces of the leaf transforms: the affine map algebra, the per-step random streams,
// fill values, and the default (unsupported) Leaf methods.
#include "transforms/ops.h"

#include <cmath>
#include <opencv2/imgproc.hpp>

namespace dspipe::transforms {
namespace {

constexpr uint64_t kTransformSalt = 0x5452414E53464DULL;  // "TRANSFM"

bool NearInt(double v) { return std::fabs(v - std::round(v)) < 1e-9; }
bool NearUnitOrZero(double v) {
  return std::fabs(v) < 1e-9 || std::fabs(std::fabs(v) - 1.0) < 1e-9;
}

}  // namespace

Affine Affine::Resize(Size from, Size to) {
  const double sx = static_cast<double>(to.w) / from.w;
  const double sy = static_cast<double>(to.h) / from.h;
  return {sx, 0, 0.5 * sx - 0.5, 0, sy, 0.5 * sy - 0.5};
}

Affine Affine::Then(const Affine& n) const {
  return {n.a * a + n.b * d, n.a * b + n.b * e, n.a * c + n.b * f + n.c,
          n.d * a + n.e * d, n.d * b + n.e * e, n.d * c + n.e * f + n.f};
}

Affine Affine::Inverse() const {
  const double det = a * e - b * d;
  const double ia = e / det, ib = -b / det, id = -d / det, ie = a / det;
  return {ia, ib, -(ia * c + ib * f), id, ie, -(id * c + ie * f)};
}

bool Affine::IsExact() const {
  if (!(NearUnitOrZero(a) && NearUnitOrZero(b) && NearUnitOrZero(d) && NearUnitOrZero(e))) {
    return false;
  }
  const bool rows =
      std::fabs(a) > 0.5 && std::fabs(e) > 0.5 && std::fabs(b) < 0.5 && std::fabs(d) < 0.5;
  const bool cols =
      std::fabs(b) > 0.5 && std::fabs(d) > 0.5 && std::fabs(a) < 0.5 && std::fabs(e) < 0.5;
  return (rows || cols) && NearInt(c) && NearInt(f);
}

bool Affine::IsIdentity() const {
  // np.allclose(m, eye): |m - eye| <= 1e-8 + 1e-5 * |eye|.
  auto close = [](double v, double want) {
    return std::fabs(v - want) <= 1e-8 + 1e-5 * std::fabs(want);
  };
  return close(a, 1) && close(b, 0) && close(c, 0) && close(d, 0) && close(e, 1) && close(f, 0);
}

Rng StepRng(uint64_t seed, uint64_t epoch, uint64_t index, int position, int sample) {
  uint64_t key =
      Mix64(seed ^ kTransformSalt) + 0x9E3779B97F4A7C15ULL * (static_cast<uint64_t>(position) + 1);
  if (sample > 0) key = Mix64(key ^ (0xD1B54A32D192ED03ULL * static_cast<uint64_t>(sample)));
  return Rng::For(key, epoch, index);
}

cv::Scalar FillScalar(const Fill& f, int channels) {
  // albumentations' extend_value: one number repeats for every channel, a list is used as given.
  cv::Scalar s(0, 0, 0, 0);
  if (f.values.size() == 1) {
    for (int c = 0; c < channels && c < 4; ++c) s[c] = f.values[0];
  } else {
    for (size_t c = 0; c < f.values.size() && c < 4; ++c) s[static_cast<int>(c)] = f.values[c];
  }
  return s;
}

void ResizeLike(const cv::Mat& src, cv::Mat* dst, int interpolation) {
  if (src.rows == dst->rows && src.cols == dst->cols) {
    src.copyTo(*dst);
    return;
  }
  cv::resize(src, *dst, dst->size(), 0, 0, interpolation);
}

nlohmann::json AffineJson(const Affine& m) {
  return nlohmann::json::array({nlohmann::json::array({m.a, m.b, m.c}),
                                nlohmann::json::array({m.d, m.e, m.f}),
                                nlohmann::json::array({0.0, 0.0, 1.0})});
}

void Leaf::Warp(const Step&, const cv::Mat& src, cv::Mat* dst, bool) const { src.copyTo(*dst); }

bool Leaf::WarpPart(const Step&, const cv::Mat&, int, int, cv::Mat*, bool) const { return false; }

Status Leaf::Apply(const Step&, cv::Mat*, cv::Mat*) const {
  return Status::Internal(name + ": not a pixel transform");
}

std::unique_ptr<RowOp> Leaf::Rows(const Step&, int) const { return nullptr; }

void Leaf::Lut(const Step&, const cv::Mat&, uint8_t lut[4][256]) const {
  for (int c = 0; c < 4; ++c) {
    for (int v = 0; v < 256; ++v) lut[c][v] = static_cast<uint8_t>(v);
  }
}

}  // namespace dspipe::transforms
