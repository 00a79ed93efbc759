// SPDX-License-Identifier: Apache-2.0
// torch's two resamplers as MONAI's spatial transforms call them, on an H x W x C float32
// image or a 1-channel uint8 / uint16 label (ids: nearest only):
//   - Interpolate: torch.nn.functional.interpolate (Resize, Zoom): nearest, nearest-exact,
//     bilinear, bicubic (A = -0.75), area (adaptive average pooling), align_corners as torch
//     takes it;
//   - GridSample: torch.nn.functional.grid_sample of an affine grid given in pixel indices
//     (Rotate, Affine): bilinear or nearest, padding zeros / border / reflection;
//   - GridSampleMap: the same sampling of a dense map, one input coordinate per output pixel
//     (Rand2DElastic's deformed grid).
// Internal to the MONAI front end (monai_leaf.h).
#pragma once

#include <opencv2/core.hpp>

namespace dspipe::transforms::monai {

enum class Interp { kNearest, kNearestExact, kBilinear, kBicubic, kArea };
enum class GridPad { kZeros, kBorder, kReflection };

// src -> *dst, resized to dst's size (dst allocated, src's type). The label (CV_8U / CV_16U,
// one channel) takes kNearest or kNearestExact only.
void Interpolate(const cv::Mat& src, cv::Mat* dst, Interp mode, bool align_corners);

// dst pixel (r, c) = src sampled at row m[0] r + m[1] c + m[2], column m[3] r + m[4] c + m[5]
// (indices; grid_sample's coordinates unnormalized), dst allocated at the output size.
void GridSample(const cv::Mat& src, const double m[6], cv::Mat* dst, bool nearest, GridPad pad,
                bool align_corners);

// dst pixel (r, c) = src sampled at row map(r, c)[0], column map(r, c)[1] (input indices, map
// CV_64FC2 of dst's size), as GridSample samples.
void GridSampleMap(const cv::Mat& src, const cv::Mat& map, cv::Mat* dst, bool nearest, GridPad pad,
                   bool align_corners);

}  // namespace dspipe::transforms::monai
