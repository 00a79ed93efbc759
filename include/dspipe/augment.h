// SPDX-License-Identifier: Apache-2.0
// Joint image + mask augmentation: random resized crop, resize to a fixed output size, random
// horizontal / vertical flips. Image and mask always get the same geometry; masks are always
// resampled with nearest neighbour so class ids stay class ids.
//
// These options are sugar for a transform pipeline (dspipe/transforms.h): AugmentPipelineJson
// gives the albumentations JSON the loader runs for them - RandomResizedCrop(size = the output
// size, scale, ratio) when cropping, HorizontalFlip(p = hflip), VerticalFlip(p = vflip),
// then a Resize to the output size for samples of another size - so flips and crops take the
// same (fused) code path as any pipeline. DrawAugment reports that pipeline's draws.
//
// Randomness: a sample's parameters depend only on (seed, epoch, dataset index) and the source
// size, never on which thread ran it or when; so batches are reproducible for any thread count.
//
// Order of operations: crop (source rectangle) -> resize to the output size -> flips.
// Thread-safety: all functions are pure and thread-safe. No OpenCV types in this header.
#pragma once

#include <cstdint>
#include <string>

#include "dspipe/status.h"
#include "dspipe/transforms.h"

namespace dspipe {

enum class Interpolation { kNearest, kLinear, kArea, kCubic };

struct AugmentOptions {
  // Probability of a horizontal (left-right) flip per sample. Default 0 (off).
  double hflip = 0.0;
  // Probability of a vertical (top-bottom) flip per sample. Default 0 (off).
  double vflip = 0.0;
  // Random resized crop (torchvision RandomResizedCrop): a rectangle with area fraction in
  // [crop_scale_min, crop_scale_max] of the source and aspect ratio (w/h) log-uniform in
  // [crop_ratio_min, crop_ratio_max] is cut out and resized to the output size. Off while
  // crop_scale_min >= 1 (default {1, 1}); then the whole image is resized (only if its size
  // differs from the output size). Typical: {0.08, 1}. Smaller crops: more variety, blurrier.
  double crop_scale_min = 1.0;
  double crop_scale_max = 1.0;
  double crop_ratio_min = 3.0 / 4.0;
  double crop_ratio_max = 4.0 / 3.0;
  // Validation geometry instead of a random crop: torchvision's Resize(resize_shorter) +
  // CenterCrop(output size), i.e. albumentations' SmallestMaxSize(max_size=resize_shorter) +
  // CenterCrop(height, width, pad_if_needed=True) (AugmentPipelineJson): the source is scaled
  // so that its shorter side is resize_shorter pixels and the centred window of the output
  // size is kept (zero-padded where the scaled image is smaller), in one resampling pass of
  // the window. 0 (default) = off; > 0 needs crop_scale_min = 1 (no random crop). Typical: 256
  // for a 224 x 224 output.
  int resize_shorter = 0;
  // Image resampling when the size changes. Default kLinear (fast, smooth); kArea is better for
  // strong downscaling at ~2x the cost; kNearest keeps pixel values exact. Masks: kNearest.
  Interpolation image_interpolation = Interpolation::kLinear;

  // True when samples are cut from the source (a random crop or the validation centre crop).
  bool crops() const { return crop_scale_min < 1.0 || resize_shorter > 0; }
  // InvalidArgument naming the field when out of range (probabilities in [0,1], 0 < scale_min
  // <= scale_max <= 1, 0 < ratio_min <= ratio_max, resize_shorter >= 0 and not with a crop).
  Status Validate() const;
};

// One sample's drawn parameters.
struct AugmentParams {
  int crop_x = 0, crop_y = 0;  // top-left of the source rectangle
  int crop_w = 0, crop_h = 0;  // its size (the whole source when not cropping)
  bool hflip = false;
  bool vflip = false;
};

// Draws sample `index`'s parameters for epoch `epoch` from a src_h x src_w source that is
// resized to out_h x out_w (which only resize_shorter uses; without it, 0 x 0 is fine): the crop
// and flips the loader's pipeline for `options` draws (AugmentPipelineJson).
AugmentParams DrawAugment(const AugmentOptions& options, uint64_t seed, uint64_t epoch,
                          uint64_t index, int src_h, int src_w, int out_h = 0, int out_w = 0);

// The albumentations JSON of the pipeline `options` stand for, for an output of height x width
// (the RandomResizedCrop's / CenterCrop's / final Resize's size). Masks use
// INTER_NEAREST_EXACT (aligned with the image).
std::string AugmentPipelineJson(const AugmentOptions& options, int height, int width);

// Crops src to params' rectangle and resizes it into dst (dst's size is the output size;
// `interpolation` is used only when the size changes), then flips dst. src and dst must not
// overlap and must have the same channel count. Errors: InvalidArgument for a rectangle
// outside src or mismatched channels.
Status ApplyAugment(const AugmentParams& params, Interpolation interpolation, ImageRef src,
                    ImageRef dst);
// Applies only params' flips, in place (for samples decoded straight into the batch).
void FlipInPlace(const AugmentParams& params, ImageRef image);

}  // namespace dspipe
