// SPDX-License-Identifier: Apache-2.0
#include "synth/encode.h"

#include <spng.h>
#include <zlib.h>

#include <cstdlib>
#include <memory>
#include <opencv2/imgcodecs.hpp>
#include <opencv2/imgproc.hpp>

namespace dspipe::synth {
namespace {

struct SpngCtxFree {
  void operator()(spng_ctx* ctx) const { spng_ctx_free(ctx); }
};

Status SpngError(const std::string& path, const char* what, int err) {
  return Status::Internal("encode " + path + ": libspng " + what + ": " + spng_strerror(err));
}

}  // namespace

Status EncodePng(const cv::Mat& image, int level, const std::string& path,
                 std::vector<unsigned char>* out) {
  if (image.depth() != CV_8U || (image.channels() != 1 && image.channels() != 3) ||
      !image.isContinuous()) {
    return Status::Internal("encode " + path + ": EncodePng needs a continuous 8-bit 1/3ch Mat");
  }
  std::unique_ptr<spng_ctx, SpngCtxFree> ctx(spng_ctx_new(SPNG_CTX_ENCODER));
  if (!ctx) return Status::Internal("encode " + path + ": spng_ctx_new failed");
  const bool rgb = image.channels() == 3;
  const int filter = level == 0 ? SPNG_FILTER_CHOICE_NONE
                     : rgb      ? SPNG_FILTER_CHOICE_SUB
                                : SPNG_FILTER_CHOICE_NONE;
  spng_ihdr ihdr{};
  ihdr.width = static_cast<uint32_t>(image.cols);
  ihdr.height = static_cast<uint32_t>(image.rows);
  ihdr.bit_depth = 8;
  ihdr.color_type = rgb ? SPNG_COLOR_TYPE_TRUECOLOR : SPNG_COLOR_TYPE_GRAYSCALE;
  int err = spng_set_option(ctx.get(), SPNG_ENCODE_TO_BUFFER, 1);
  if (!err) err = spng_set_option(ctx.get(), SPNG_FILTER_CHOICE, filter);
  if (!err) err = spng_set_option(ctx.get(), SPNG_IMG_COMPRESSION_LEVEL, level);
  if (!err) err = spng_set_option(ctx.get(), SPNG_IMG_COMPRESSION_STRATEGY, Z_RLE);
  if (!err) err = spng_set_ihdr(ctx.get(), &ihdr);
  if (err) return SpngError(path, "setup", err);
  err = spng_encode_image(ctx.get(), image.data, image.total() * image.elemSize(), SPNG_FMT_PNG,
                          SPNG_ENCODE_FINALIZE);
  if (err) return SpngError(path, "encode", err);
  size_t size = 0;
  std::unique_ptr<unsigned char, decltype(&std::free)> buf(
      static_cast<unsigned char*>(spng_get_png_buffer(ctx.get(), &size, &err)), &std::free);
  if (!buf || err) return SpngError(path, "get buffer", err);
  out->assign(buf.get(), buf.get() + size);
  return Status::OK();
}

Status EncodeJpeg(const cv::Mat& rgb, int quality, const std::string& path,
                  std::vector<unsigned char>* out) {
  try {
    cv::Mat bgr;
    cv::cvtColor(rgb, bgr, cv::COLOR_RGB2BGR);
    if (cv::imencode(".jpg", bgr, *out, {cv::IMWRITE_JPEG_QUALITY, quality})) {
      return Status::OK();
    }
  } catch (const cv::Exception& e) {
    return Status::Internal("encode " + path + ": " + e.what());
  }
  return Status::Internal("encode " + path + ": OpenCV imencode(.jpg) failed");
}

}  // namespace dspipe::synth
