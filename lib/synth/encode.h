// SPDX-License-Identifier: Apache-2.0
// Image encoding for synthetic samples (internal to dspipe_synth).
#pragma once

#include <opencv2/core.hpp>
#include <string>
#include <vector>

#include "dspipe/status.h"

namespace dspipe::synth {

// PNG-encodes an 8-bit RGB (CV_8UC3) or gray (CV_8UC1) image with libspng. level 0 stores the
// pixels uncompressed; 1..9 use run-length deflate (Z_RLE) with the Sub filter for RGB and no
// filter for gray. On these noisy images that is both ~2x faster and ~10% smaller than
// libpng's adaptive filters with default deflate, at any zlib level (so 1..9 encode alike).
// `path` only names the file in errors.
Status EncodePng(const cv::Mat& image, int level, const std::string& path,
                 std::vector<unsigned char>* out);

// JPEG-encodes an RGB image (CV_8UC3) at quality 1..100 (OpenCV/libjpeg defaults otherwise:
// 4:2:0 chroma subsampling, baseline).
Status EncodeJpeg(const cv::Mat& rgb, int quality, const std::string& path,
                  std::vector<unsigned char>* out);

}  // namespace dspipe::synth
