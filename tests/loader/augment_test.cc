// SPDX-License-Identifier: Apache-2.0
#include "dspipe/augment.h"

#include <gtest/gtest.h>

#include <cmath>
#include <opencv2/core.hpp>
#include <opencv2/imgproc.hpp>
#include <vector>

namespace dspipe {
namespace {

cv::Mat MaskOf(const cv::Mat& image) {
  std::vector<cv::Mat> ch;
  cv::split(image, ch);
  cv::Mat m;
  cv::threshold(ch[0], m, 127, 1, cv::THRESH_BINARY);
  return m;
}

// A 3-channel image with large bright and dark blobs (channel 0) and gradients in 1 and 2,
// and its mask derived from the pixels: 1 where channel 0 > 127.
struct Pair {
  cv::Mat image;
  cv::Mat mask;
};
Pair MakePair(int h, int w) {
  Pair p;
  p.image.create(h, w, CV_8UC3);
  for (int y = 0; y < h; ++y) {
    for (int x = 0; x < w; ++x) {
      const double v = std::sin(x * 0.09 + y * 0.02) + std::cos(y * 0.07 - x * 0.03) +
                       (x < w / 3 && y < h / 4 ? 1.5 : 0.0);
      auto& px = p.image.at<cv::Vec3b>(y, x);
      px[0] = v > 0.2 ? 230 : 20;
      px[1] = static_cast<uint8_t>(x * 255 / w);
      px[2] = static_cast<uint8_t>(y * 255 / h);
    }
  }
  p.mask = MaskOf(p.image);
  return p;
}
ImageRef Ref(cv::Mat& m) { return {m.data, m.rows, m.cols, m.channels()}; }
double Agreement(const cv::Mat& a, const cv::Mat& b) {
  return 1.0 - static_cast<double>(cv::countNonZero(a != b)) / static_cast<double>(a.total());
}

TEST(AugmentTest, DrawIsAFunctionOfSeedEpochIndex) {
  AugmentOptions o;
  o.hflip = o.vflip = 0.5;
  o.crop_scale_min = 0.2;
  auto same = [](const AugmentParams& a, const AugmentParams& b) {
    return a.crop_x == b.crop_x && a.crop_y == b.crop_y && a.crop_w == b.crop_w &&
           a.crop_h == b.crop_h && a.hflip == b.hflip && a.vflip == b.vflip;
  };
  EXPECT_TRUE(same(DrawAugment(o, 1, 2, 3, 100, 120), DrawAugment(o, 1, 2, 3, 100, 120)));
  int differ_index = 0, differ_epoch = 0, differ_seed = 0;
  for (uint64_t i = 0; i < 50; ++i) {
    const auto base = DrawAugment(o, 1, 2, i, 100, 120);
    differ_index += !same(base, DrawAugment(o, 1, 2, i + 1, 100, 120));
    differ_epoch += !same(base, DrawAugment(o, 1, 3, i, 100, 120));
    differ_seed += !same(base, DrawAugment(o, 9, 2, i, 100, 120));
  }
  EXPECT_GT(differ_index, 45);
  EXPECT_GT(differ_epoch, 45);
  EXPECT_GT(differ_seed, 45);
}

TEST(AugmentTest, FlipProbabilitiesAndCropRanges) {
  AugmentOptions o;
  o.hflip = 0.3;
  o.vflip = 0.8;
  o.crop_scale_min = 0.25;
  o.crop_scale_max = 0.5;
  int h = 0, v = 0;
  const int n = 20000;
  for (int i = 0; i < n; ++i) {
    const auto p = DrawAugment(o, 5, 0, static_cast<uint64_t>(i), 200, 300);
    h += p.hflip;
    v += p.vflip;
    ASSERT_GE(p.crop_x, 0);
    ASSERT_GE(p.crop_y, 0);
    ASSERT_LE(p.crop_x + p.crop_w, 300);
    ASSERT_LE(p.crop_y + p.crop_h, 200);
    const double area = static_cast<double>(p.crop_w) * p.crop_h / (200.0 * 300.0);
    ASSERT_GT(area, 0.24);
    ASSERT_LT(area, 0.51);
  }
  EXPECT_NEAR(static_cast<double>(h) / n, 0.3, 0.02);
  EXPECT_NEAR(static_cast<double>(v) / n, 0.8, 0.02);
  o = AugmentOptions();
  const auto p = DrawAugment(o, 5, 0, 1, 200, 300);
  EXPECT_EQ(p.crop_w, 300);
  EXPECT_EQ(p.crop_h, 200);
  EXPECT_FALSE(p.hflip || p.vflip);
}

TEST(AugmentTest, FlipsMatchAPlainLoop) {
  for (int w : {7, 8}) {
    cv::Mat src(5, w, CV_8UC3);
    cv::randu(src, 0, 256);
    for (int mode = 1; mode < 4; ++mode) {
      AugmentParams p;
      p.crop_w = w;
      p.crop_h = 5;
      p.hflip = mode & 1;
      p.vflip = mode & 2;
      cv::Mat out(5, w, CV_8UC3), inplace = src.clone();
      ASSERT_TRUE(ApplyAugment(p, Interpolation::kLinear, Ref(src), Ref(out)).ok());
      FlipInPlace(p, Ref(inplace));
      for (int y = 0; y < 5; ++y) {
        for (int x = 0; x < w; ++x) {
          const int sy = p.vflip ? 4 - y : y, sx = p.hflip ? w - 1 - x : x;
          ASSERT_EQ(out.at<cv::Vec3b>(y, x), src.at<cv::Vec3b>(sy, sx)) << mode;
          ASSERT_EQ(inplace.at<cv::Vec3b>(y, x), src.at<cv::Vec3b>(sy, sx)) << mode;
        }
      }
    }
  }
}

TEST(AugmentTest, CropSelectsTheRectangle) {
  cv::Mat src(40, 50, CV_8UC1);
  cv::randu(src, 0, 256);
  AugmentParams p;
  p.crop_x = 11;
  p.crop_y = 3;
  p.crop_w = 20;
  p.crop_h = 30;
  cv::Mat out(30, 20, CV_8UC1);
  ASSERT_TRUE(ApplyAugment(p, Interpolation::kLinear, Ref(src), Ref(out)).ok());
  EXPECT_EQ(cv::countNonZero(out != src(cv::Rect(11, 3, 20, 30))), 0);
  p.crop_x = 40;  // outside
  EXPECT_EQ(ApplyAugment(p, Interpolation::kLinear, Ref(src), Ref(out)).code(),
            Status::Code::kInvalidArgument);
}

// Image and mask go through the same geometry under every augmentation: with nearest
// interpolation for both, the augmented mask equals the mask derived from the augmented image
// exactly; with linear interpolation only pixels at blob edges may differ.
TEST(AugmentTest, MaskStaysAlignedWithImageUnderEveryAugmentation) {
  const Pair src = MakePair(97, 131);
  struct Case {
    double hflip, vflip, scale_min;
    int out_h, out_w;
  };
  const Case cases[] = {{1, 0, 1, 97, 131},     {0, 1, 1, 97, 131},  {1, 1, 1, 97, 131},
                        {0, 0, 0.1, 64, 64},    {1, 1, 0.3, 80, 50}, {0, 0, 1, 200, 150},
                        {0.5, 0.5, 0.5, 61, 77}};
  for (const Case& c : cases) {
    AugmentOptions o;
    o.hflip = c.hflip;
    o.vflip = c.vflip;
    o.crop_scale_min = c.scale_min;
    for (uint64_t index = 0; index < 20; ++index) {
      const auto p = DrawAugment(o, 3, 1, index, src.image.rows, src.image.cols);
      cv::Mat image(c.out_h, c.out_w, CV_8UC3), mask(c.out_h, c.out_w, CV_8UC1);
      Pair in = src;
      ASSERT_TRUE(ApplyAugment(p, Interpolation::kNearest, Ref(in.image), Ref(image)).ok());
      ASSERT_TRUE(ApplyAugment(p, Interpolation::kNearest, Ref(in.mask), Ref(mask)).ok());
      ASSERT_EQ(cv::countNonZero(mask != MaskOf(image)), 0) << "case scale " << c.scale_min;
      // Sensitivity: the same mask without the flips would not match.
      if (p.hflip || p.vflip) {
        AugmentParams unflipped = p;
        unflipped.hflip = unflipped.vflip = false;
        cv::Mat wrong(c.out_h, c.out_w, CV_8UC1);
        ASSERT_TRUE(
            ApplyAugment(unflipped, Interpolation::kNearest, Ref(in.mask), Ref(wrong)).ok());
        EXPECT_LT(Agreement(wrong, MaskOf(image)), 0.9);
      }
      ASSERT_TRUE(ApplyAugment(p, Interpolation::kLinear, Ref(in.image), Ref(image)).ok());
      EXPECT_GT(Agreement(mask, MaskOf(image)), 0.97);
      // Masks keep their values: only 0 and 1 appear.
      double lo, hi;
      cv::minMaxLoc(mask, &lo, &hi);
      EXPECT_GE(lo, 0);
      EXPECT_LE(hi, 1);
    }
  }
}

TEST(AugmentTest, ValidateNamesTheField) {
  AugmentOptions o;
  EXPECT_TRUE(o.Validate().ok());
  o.hflip = 1.5;
  EXPECT_NE(o.Validate().message().find("hflip"), std::string::npos);
  o = AugmentOptions();
  o.crop_scale_min = 0.0;
  EXPECT_NE(o.Validate().message().find("crop_scale"), std::string::npos);
  // Issue 40 item 16: "need 0 < crop_scale <= crop_scale <= 1" in Python; now the pair once.
  o.crop_scale_min = 0.9;
  o.crop_scale_max = 0.1;
  EXPECT_EQ(o.Validate().message(),
            "augment: the crop's area range AugmentOptions::crop_scale_min and "
            "AugmentOptions::crop_scale_max is (0.9, 0.1): need 0 < min <= max <= 1 (fractions "
            "of the image's area)");
  EXPECT_EQ(o.Validate().Render([](std::string_view f, std::string_view) {
    return f.starts_with("AugmentOptions::crop_scale") ? std::string("crop_scale") : std::string(f);
  }),
            "InvalidArgument: augment: the crop's area range crop_scale is (0.9, 0.1): need 0 < "
            "min <= max <= 1 (fractions of the image's area)");
  o = AugmentOptions();
  o.crop_ratio_min = 2;
  o.crop_ratio_max = 1;
  EXPECT_FALSE(o.Validate().ok());
}

}  // namespace
}  // namespace dspipe
