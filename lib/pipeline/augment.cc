#include "dspipe/augment.h"

#include <algorithm>
#include <cmath>
#include <opencv2/core.hpp>
#include <opencv2/imgproc.hpp>
#include <string>

#include "codec/region.h"
#include "core/rng.h"

namespace dspipe {
namespace {

constexpr uint64_t kAugmentSalt = 0x4155474DULL;  // "AUGM"

cv::Mat Wrap(ImageRef r) { return cv::Mat(r.height, r.width, CV_8UC(r.channels), r.data); }

}  // namespace

Status AugmentOptions::Validate() const {
  auto prob = [](double p) { return p >= 0.0 && p <= 1.0; };
  if (!prob(hflip_p))
    return Status::InvalidArgument("augment: " + Opt("AugmentOptions::hflip_p") +
                                   " must be in [0, 1]");
  if (!prob(vflip_p))
    return Status::InvalidArgument("augment: " + Opt("AugmentOptions::vflip_p") +
                                   " must be in [0, 1]");
  if (!(crop_scale_min > 0.0 && crop_scale_min <= crop_scale_max && crop_scale_max <= 1.0)) {
    return Status::InvalidArgument("augment: need 0 < " + Opt("AugmentOptions::crop_scale_min") +
                                   " <= " + Opt("AugmentOptions::crop_scale_max") + " <= 1, got [" +
                                   std::to_string(crop_scale_min) + ", " +
                                   std::to_string(crop_scale_max) + "]");
  }
  if (!(crop_ratio_min > 0.0 && crop_ratio_min <= crop_ratio_max)) {
    return Status::InvalidArgument("augment: need 0 < " + Opt("AugmentOptions::crop_ratio_min") +
                                   " <= " + Opt("AugmentOptions::crop_ratio_max"));
  }
  if (resize_shorter < 0) {
    return Status::InvalidArgument("augment: " + Opt("AugmentOptions::resize_shorter") +
                                   " must be >= 0");
  }
  if (resize_shorter > 0 && crop_scale_min < 1.0) {
    return Status::InvalidArgument("augment: " + Opt("AugmentOptions::resize_shorter") +
                                   " (validation centre crop) and a random crop (" +
                                   Opt("AugmentOptions::crop_scale_min") +
                                   " < 1) exclude each other");
  }
  return Status::OK();
}

AugmentParams DrawAugment(const AugmentOptions& options, uint64_t seed, uint64_t epoch,
                          uint64_t index, int src_h, int src_w, int out_h, int out_w) {
  auto rng = Rng::For(seed ^ kAugmentSalt, epoch, index);
  AugmentParams p;
  p.crop_w = src_w;
  p.crop_h = src_h;
  // Draw every value unconditionally so that turning one option on does not change the others.
  const double u_flip_h = rng.Uniform();
  const double u_flip_v = rng.Uniform();
  p.hflip = u_flip_h < options.hflip_p;
  p.vflip = u_flip_v < options.vflip_p;
  if (options.resize_shorter > 0 && out_h > 0 && out_w > 0) {
    // Resize(N) + CenterCrop(out): the window, in source pixels, is out * shorter / N; torchvision
    // places it at round((size - window) / 2).
    const double s = static_cast<double>(std::min(src_h, src_w)) / options.resize_shorter;
    p.crop_w = std::clamp(static_cast<int>(std::lround(out_w * s)), 1, src_w);
    p.crop_h = std::clamp(static_cast<int>(std::lround(out_h * s)), 1, src_h);
    p.crop_x = static_cast<int>(std::lround((src_w - p.crop_w) / 2.0));
    p.crop_y = static_cast<int>(std::lround((src_h - p.crop_h) / 2.0));
    return p;
  }
  if (options.crop_scale_min >= 1.0) return p;
  // torchvision's RandomResizedCrop: 10 tries, then a centre crop of the clamped ratio.
  const double area = static_cast<double>(src_h) * src_w;
  const double log_r0 = std::log(options.crop_ratio_min);
  const double log_r1 = std::log(options.crop_ratio_max);
  for (int attempt = 0; attempt < 10; ++attempt) {
    const double target = area * rng.Uniform(options.crop_scale_min, options.crop_scale_max);
    const double ratio = std::exp(rng.Uniform(log_r0, log_r1));
    const int w = static_cast<int>(std::lround(std::sqrt(target * ratio)));
    const int h = static_cast<int>(std::lround(std::sqrt(target / ratio)));
    if (w > 0 && h > 0 && w <= src_w && h <= src_h) {
      p.crop_w = w;
      p.crop_h = h;
      p.crop_y = static_cast<int>(rng.Below(static_cast<uint64_t>(src_h - h) + 1));
      p.crop_x = static_cast<int>(rng.Below(static_cast<uint64_t>(src_w - w) + 1));
      return p;
    }
  }
  const double in_ratio = static_cast<double>(src_w) / src_h;
  if (in_ratio < options.crop_ratio_min) {
    p.crop_w = src_w;
    p.crop_h = std::max(1, static_cast<int>(std::lround(src_w / options.crop_ratio_min)));
  } else if (in_ratio > options.crop_ratio_max) {
    p.crop_h = src_h;
    p.crop_w = std::max(1, static_cast<int>(std::lround(src_h * options.crop_ratio_max)));
  }
  p.crop_y = (src_h - p.crop_h) / 2;
  p.crop_x = (src_w - p.crop_w) / 2;
  return p;
}

Status ApplyAugment(const AugmentParams& params, Interpolation interpolation, ImageRef src,
                    ImageRef dst) {
  if (src.channels != dst.channels) {
    return Status::InvalidArgument("augment: source has " + std::to_string(src.channels) +
                                   " channels, destination " + std::to_string(dst.channels));
  }
  if (params.crop_x < 0 || params.crop_y < 0 || params.crop_w <= 0 || params.crop_h <= 0 ||
      params.crop_x + params.crop_w > src.width || params.crop_y + params.crop_h > src.height) {
    return Status::InvalidArgument("augment: crop rectangle outside the " +
                                   std::to_string(src.height) + "x" + std::to_string(src.width) +
                                   " source");
  }
  // One resampler for every path (codec/region.h): the loader's region decodes use it too.
  return codec::ResampleRegion(
      Wrap(src),
      codec::RectF{static_cast<double>(params.crop_x), static_cast<double>(params.crop_y),
                   static_cast<double>(params.crop_w), static_cast<double>(params.crop_h)},
      interpolation, params.hflip, params.vflip, dst);
}

void FlipInPlace(const AugmentParams& params, ImageRef image) {
  if (!params.hflip && !params.vflip) return;
  cv::Mat m = Wrap(image);
  // flipCode: 1 = around the vertical axis (left-right), 0 = top-bottom, -1 = both.
  const int code = params.hflip && params.vflip ? -1 : (params.hflip ? 1 : 0);
  cv::flip(m, m, code);
}

}  // namespace dspipe
