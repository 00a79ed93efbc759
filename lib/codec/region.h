// SPDX-License-Identifier: Apache-2.0
// Resampling a decoded region into a sample: the step after codec::DecodePayload (image.h).
// The router hands back the pixels it decoded and where the sample's crop lies within them
// (whole pixels, or fractional ones after a DCT-scaled JPEG decode); ResampleRegion resizes
// that rectangle to the output size with the flips folded in. Internal to dspipe.
#pragma once

#include <opencv2/core.hpp>

#include "codec/jpeg_decode.h"
#include "dspipe/augment.h"
#include "dspipe/status.h"

namespace dspipe::codec {

// cv:: interpolation flag for dspipe's enum (kNearest is INTER_NEAREST_EXACT: pixel centres
// like INTER_LINEAR, so masks line up with linearly resized images).
int CvInterpolation(Interpolation interpolation);

// Resizes rectangle r of src (HWC uint8, any channel count equal to dst's) into dst, then
// mirrors it (hflip: left-right, vflip: top-bottom).
// - r on whole pixels: cv::resize of that sub-image (a plain copy when the size is the same),
//   then cv::flip: exactly what full decode + crop + resize gives.
// - r fractional: one cv::warpAffine mapping output pixel centres onto r the way cv::resize
//   maps them (src = r.x + (u + 0.5) * r.w / out_w - 0.5), the flips folded into the map,
//   border replicated; kArea (which warpAffine lacks) rounds r to whole pixels instead.
// InvalidArgument when r is empty or outside src (beyond rounding), or channels differ.
Status ResampleRegion(const cv::Mat& src, const RectF& r, Interpolation interpolation, bool hflip,
                      bool vflip, ImageRef dst);

}  // namespace dspipe::codec
