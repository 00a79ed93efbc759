// SPDX-License-Identifier: Apache-2.0
// Pixel generation for synthetic samples (internal to dspipe_synth).
#pragma once

#include <cstdint>
#include <opencv2/core.hpp>

namespace dspipe::synth {

struct SampleSpec {
  int width = 0;
  int height = 0;
  int classes = 2;  // mask ids 0..classes-1
  uint64_t seed = 0;
  int64_t index = 0;
};

// Renders sample spec.index into *rgb (CV_8UC3, RGB order: dspipe never uses BGR) and
// *mask (CV_8UC1 class ids). Reallocates the Mats only when the size changes. Pure function of
// the spec; thread-safe.
void RenderSample(const SampleSpec& spec, cv::Mat* rgb, cv::Mat* mask);

}  // namespace dspipe::synth
