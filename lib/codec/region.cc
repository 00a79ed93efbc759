// SPDX-License-Identifier: Apache-2.0
// ResampleRegion (region.h).
#include "codec/region.h"

#include <algorithm>
#include <cmath>
#include <opencv2/imgproc.hpp>
#include <string>

namespace dspipe::codec {
namespace {

bool Whole(double v) { return std::abs(v - std::round(v)) < 1e-9; }

}  // namespace

int CvInterpolation(Interpolation i) {
  switch (i) {
    case Interpolation::kNearest:
      return cv::INTER_NEAREST_EXACT;
    case Interpolation::kLinear:
      return cv::INTER_LINEAR;
    case Interpolation::kArea:
      return cv::INTER_AREA;
    case Interpolation::kCubic:
      return cv::INTER_CUBIC;
  }
  return cv::INTER_LINEAR;
}

Status ResampleRegion(const cv::Mat& src, const RectF& r, Interpolation interpolation, bool hflip,
                      bool vflip, ImageRef dst) {
  if (src.channels() != dst.channels) {
    return Status::InvalidArgument("resample: source has " + std::to_string(src.channels()) +
                                   " channels, destination " + std::to_string(dst.channels));
  }
  constexpr double kSlack = 1e-6;
  if (!(r.w > 0 && r.h > 0 && r.x > -kSlack && r.y > -kSlack && r.x + r.w < src.cols + kSlack &&
        r.y + r.h < src.rows + kSlack)) {
    return Status::InvalidArgument("resample: crop rectangle outside the " +
                                   std::to_string(src.rows) + "x" + std::to_string(src.cols) +
                                   " source");
  }
  cv::Mat out(dst.height, dst.width, CV_8UC(dst.channels), dst.data);
  const bool whole = Whole(r.x) && Whole(r.y) && Whole(r.w) && Whole(r.h);
  if (whole || interpolation == Interpolation::kArea) {
    const int x0 = std::min(src.cols - 1, static_cast<int>(std::lround(r.x)));
    const int y0 = std::min(src.rows - 1, static_cast<int>(std::lround(r.y)));
    const int x1 = std::min(src.cols, static_cast<int>(std::lround(r.x + r.w)));
    const int y1 = std::min(src.rows, static_cast<int>(std::lround(r.y + r.h)));
    const cv::Mat roi = src(cv::Rect(x0, y0, std::max(1, x1 - x0), std::max(1, y1 - y0)));
    if (roi.rows == out.rows && roi.cols == out.cols) {
      roi.copyTo(out);
    } else {
      cv::resize(roi, out, out.size(), 0, 0, CvInterpolation(interpolation));
    }
    if (hflip || vflip) cv::flip(out, out, hflip && vflip ? -1 : (hflip ? 1 : 0));
    return Status::OK();
  }
  // Output pixel (u, v) samples source (a * u + b, c * v + d): cv::resize's centre mapping,
  // reversed along an axis that is flipped.
  const double sx = r.w / dst.width, sy = r.h / dst.height;
  double a = sx, b = r.x + 0.5 * sx - 0.5, c = sy, d = r.y + 0.5 * sy - 0.5;
  if (hflip) {
    a = -sx;
    b = r.x + (dst.width - 0.5) * sx - 0.5;
  }
  if (vflip) {
    c = -sy;
    d = r.y + (dst.height - 0.5) * sy - 0.5;
  }
  const cv::Matx23d m(a, 0, b, 0, c, d);
  // warpAffine has no NEAREST_EXACT; its NEAREST rounds the same centre-mapped coordinates.
  const int flag =
      interpolation == Interpolation::kNearest ? cv::INTER_NEAREST : CvInterpolation(interpolation);
  cv::warpAffine(src, out, m, out.size(), flag | cv::WARP_INVERSE_MAP, cv::BORDER_REPLICATE);
  return Status::OK();
}

}  // namespace dspipe::codec
