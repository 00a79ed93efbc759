// SPDX-License-Identifier: Apache-2.0
// JPEG files for the region-decode tests, written with libjpeg's compressor so every variant the
// decoder must handle can be made: 4:2:0 / 4:2:2 / 4:4:4 subsampling, progressive, restart
// markers, grayscale, CMYK and YCCK with an Adobe marker. And natural-image-like content
// (smooth shading, texture at several scales, edges), so a resize has something to get wrong.
// Header-only.
#pragma once

#include <csetjmp>
#include <cstdio>
// clang-format off
#include <jpeglib.h>
// clang-format on

#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <opencv2/core.hpp>
#include <opencv2/imgproc.hpp>
#include <stdexcept>
#include <string>

namespace dspipe::testing {

struct JpegEncodeParams {
  int quality = 90;
  int h_samp = 2, v_samp = 2;  // luma sampling factors: 2x2 = 4:2:0, 2x1 = 4:2:2, 1x1 = 4:4:4
  bool progressive = false;
  int restart_rows = 0;  // restart marker every N MCU rows (0 = none)
  int restart_mcus = 0;  // restart marker every N MCUs (0 = none; wins over restart_rows)
  // Input planes: 1 (gray), 3 (RGB) or 4 (CMYK, written with an Adobe marker).
  // ycck: a 4-channel input stored as YCCK (Adobe transform 2) instead of plain CMYK.
  bool ycck = false;
};

// Encodes img (CV_8UC1 gray, CV_8UC3 RGB, CV_8UC4 CMYK) to a JPEG.
inline std::string EncodeJpeg(const cv::Mat& img, const JpegEncodeParams& p = {}) {
  jpeg_compress_struct c{};
  jpeg_error_mgr err{};
  c.err = jpeg_std_error(&err);
  err.error_exit = [](j_common_ptr) { std::abort(); };  // tests write valid parameters only
  jpeg_create_compress(&c);
  unsigned char* buf = nullptr;
  unsigned long size = 0;
  jpeg_mem_dest(&c, &buf, &size);
  c.image_width = static_cast<JDIMENSION>(img.cols);
  c.image_height = static_cast<JDIMENSION>(img.rows);
  c.input_components = img.channels();
  c.in_color_space = img.channels() == 1 ? JCS_GRAYSCALE : img.channels() == 3 ? JCS_RGB : JCS_CMYK;
  jpeg_set_defaults(&c);
  if (img.channels() == 4) {
    jpeg_set_colorspace(&c, p.ycck ? JCS_YCCK : JCS_CMYK);  // writes the Adobe marker
  }
  jpeg_set_quality(&c, p.quality, TRUE);
  if (img.channels() >= 3) {
    c.comp_info[0].h_samp_factor = p.h_samp;
    c.comp_info[0].v_samp_factor = p.v_samp;
    for (int i = 1; i < c.num_components; ++i) {
      c.comp_info[i].h_samp_factor = 1;
      c.comp_info[i].v_samp_factor = 1;
    }
    if (img.channels() == 4) {  // K at full resolution, like the luma
      c.comp_info[3].h_samp_factor = p.h_samp;
      c.comp_info[3].v_samp_factor = p.v_samp;
    }
  }
  if (p.progressive) jpeg_simple_progression(&c);
  c.restart_in_rows = p.restart_rows;
  if (p.restart_mcus > 0) c.restart_interval = static_cast<unsigned>(p.restart_mcus);
  jpeg_start_compress(&c, TRUE);
  while (c.next_scanline < c.image_height) {
    JSAMPROW row = const_cast<uint8_t*>(img.ptr<uint8_t>(static_cast<int>(c.next_scanline)));
    jpeg_write_scanlines(&c, &row, 1);
  }
  jpeg_finish_compress(&c);
  std::string out(reinterpret_cast<const char*>(buf), size);
  jpeg_destroy_compress(&c);
  std::free(buf);
  return out;
}

// A deterministic natural-looking RGB image: a lit gradient, blurred noise at three scales
// (clouds to fine texture), a few sharp-edged discs and bars, and light grain.
inline cv::Mat NaturalImage(int width, int height, uint64_t seed) {
  cv::RNG rng(seed);
  cv::Mat f(height, width, CV_32FC3);
  const cv::Vec3f a(rng.uniform(40.f, 200.f), rng.uniform(40.f, 200.f), rng.uniform(40.f, 200.f));
  const cv::Vec3f b(rng.uniform(40.f, 200.f), rng.uniform(40.f, 200.f), rng.uniform(40.f, 200.f));
  for (int y = 0; y < height; ++y) {
    for (int x = 0; x < width; ++x) {
      const float t = 0.5f * (static_cast<float>(x) / width + static_cast<float>(y) / height);
      f.at<cv::Vec3f>(y, x) = a * (1 - t) + b * t;
    }
  }
  for (double sigma : {24.0, 6.0, 1.5}) {
    cv::Mat n(height, width, CV_32FC3);
    rng.fill(n, cv::RNG::NORMAL, 0, 60.0 * std::sqrt(sigma));
    cv::GaussianBlur(n, n, cv::Size(), sigma);
    f += n;
  }
  for (int i = 0; i < 6; ++i) {
    const cv::Scalar color(rng.uniform(0, 255), rng.uniform(0, 255), rng.uniform(0, 255));
    const cv::Point c(rng.uniform(0, width), rng.uniform(0, height));
    if (i % 2 == 0) {
      cv::circle(f, c, rng.uniform(4, std::max(5, std::min(width, height) / 5)), color, -1,
                 cv::LINE_AA);
    } else {
      cv::line(f, c, cv::Point(rng.uniform(0, width), rng.uniform(0, height)), color,
               rng.uniform(1, 6), cv::LINE_AA);
    }
  }
  cv::Mat grain(height, width, CV_32FC3);
  rng.fill(grain, cv::RNG::NORMAL, 0, 6);
  f += grain;
  cv::Mat out;
  f.convertTo(out, CV_8UC3);
  return out;
}

}  // namespace dspipe::testing
