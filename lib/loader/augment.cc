// SPDX-License-Identifier: Apache-2.0
#include "dspipe/augment.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <opencv2/core.hpp>
#include <opencv2/imgproc.hpp>
#include <string>

#include "codec/region.h"

namespace dspipe {
namespace {

cv::Mat Wrap(ImageRef r) { return cv::Mat(r.height, r.width, CV_8UC(r.channels), r.data); }

}  // namespace

Status AugmentOptions::Validate() const {
  auto prob = [](double p) { return p >= 0.0 && p <= 1.0; };
  if (!prob(hflip))
    return Status::InvalidArgument("augment: " + Opt("AugmentOptions::hflip") +
                                   " must be in [0, 1]");
  if (!prob(vflip))
    return Status::InvalidArgument("augment: " + Opt("AugmentOptions::vflip") +
                                   " must be in [0, 1]");
  // "0.9" rather than std::to_string's "0.900000".
  auto num = [](double v) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "%g", v);
    return std::string(buf);
  };
  if (!(crop_scale_min > 0.0 && crop_scale_min <= crop_scale_max && crop_scale_max <= 1.0)) {
    return Status::InvalidArgument(
        "augment: the crop's area range " +
        Opt("AugmentOptions::crop_scale_min,AugmentOptions::crop_scale_max") + " is (" +
        num(crop_scale_min) + ", " + num(crop_scale_max) +
        "): need 0 < min <= max <= 1 (fractions of the image's area)");
  }
  if (!(crop_ratio_min > 0.0 && crop_ratio_min <= crop_ratio_max)) {
    return Status::InvalidArgument(
        "augment: the crop's aspect ratio range " +
        Opt("AugmentOptions::crop_ratio_min,AugmentOptions::crop_ratio_max") + " is (" +
        num(crop_ratio_min) + ", " + num(crop_ratio_max) + "): need 0 < min <= max");
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

std::string AugmentPipelineJson(const AugmentOptions& options, int height, int width) {
  static const int kCodes[] = {6, 1, 3, 2};  // cv2 INTER_NEAREST_EXACT, LINEAR, AREA, CUBIC
  const int code = kCodes[static_cast<int>(options.image_interpolation)];
  nlohmann::json list = nlohmann::json::array();
  if (options.resize_shorter > 0) {  // Resize(N) + CenterCrop(output), in albumentations' terms
    list.push_back({{"__class_fullname__", "SmallestMaxSize"},
                    {"max_size", options.resize_shorter},
                    {"interpolation", code},
                    {"mask_interpolation", 6},
                    {"p", 1.0}});
    list.push_back({{"__class_fullname__", "CenterCrop"},
                    {"height", height},
                    {"width", width},
                    {"pad_if_needed", true},
                    {"p", 1.0}});
  } else if (options.crops()) {
    list.push_back({{"__class_fullname__", "RandomResizedCrop"},
                    {"size", {height, width}},
                    {"scale", {options.crop_scale_min, options.crop_scale_max}},
                    {"ratio", {options.crop_ratio_min, options.crop_ratio_max}},
                    {"interpolation", code},
                    {"mask_interpolation", 6},
                    {"p", 1.0}});
  } else {  // a no-op for samples of the output size
    list.push_back({{"__class_fullname__", "Resize"},
                    {"height", height},
                    {"width", width},
                    {"interpolation", code},
                    {"mask_interpolation", 6},
                    {"p", 1.0}});
  }
  if (options.hflip > 0) {
    list.push_back({{"__class_fullname__", "HorizontalFlip"}, {"p", options.hflip}});
  }
  if (options.vflip > 0) {
    list.push_back({{"__class_fullname__", "VerticalFlip"}, {"p", options.vflip}});
  }
  return nlohmann::json{{"__class_fullname__", "Compose"}, {"transforms", list}}.dump();
}

AugmentParams DrawAugment(const AugmentOptions& options, uint64_t seed, uint64_t epoch,
                          uint64_t index, int src_h, int src_w, int out_h, int out_w) {
  AugmentParams p;
  p.crop_w = src_w;
  p.crop_h = src_h;
  if (out_h <= 0 || out_w <= 0) out_h = src_h, out_w = src_w;
  std::shared_ptr<const TransformPipeline> pipeline;
  std::string draws;
  double scale = 1;  // SmallestMaxSize's, for the CenterCrop's rectangle in source pixels
  if (!TransformPipeline::Parse(AugmentPipelineJson(options, out_h, out_w), &pipeline).ok() ||
      !pipeline->Draws(seed, epoch, index, src_h, src_w, nullptr, &draws).ok()) {
    return p;  // options that do not Validate(); the loader refuses them
  }
  for (const nlohmann::json& d : nlohmann::json::parse(draws)) {
    const std::string name = d["name"];
    if (name == "HorizontalFlip") p.hflip = true;
    if (name == "VerticalFlip") p.vflip = true;
    if (name == "SmallestMaxSize") scale = d["params"]["scale"].get<double>();
    if (name == "CenterCrop") {  // the window, in source pixels, clamped to the image
      const auto& c = d["params"]["crop_coords"];
      const int x0 = std::max(0, static_cast<int>(std::lround(c[0].get<int>() / scale)));
      const int y0 = std::max(0, static_cast<int>(std::lround(c[1].get<int>() / scale)));
      const int x1 = std::min(src_w, static_cast<int>(std::lround(c[2].get<int>() / scale)));
      const int y1 = std::min(src_h, static_cast<int>(std::lround(c[3].get<int>() / scale)));
      p.crop_x = x0, p.crop_y = y0;
      p.crop_w = std::max(1, x1 - x0), p.crop_h = std::max(1, y1 - y0);
    }
    if (name == "RandomResizedCrop") {
      const auto& c = d["params"]["crop_coords"];
      p.crop_x = c[0], p.crop_y = c[1];
      p.crop_w = c[2].get<int>() - p.crop_x;
      p.crop_h = c[3].get<int>() - p.crop_y;
    }
  }
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
  // One resampler for every path (codec/region.h).
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
