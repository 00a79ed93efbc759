// SPDX-License-Identifier: Apache-2.0
// Fusion: the loader's fused execution (TransformPipeline::Apply, transforms::Execute) against
// albumentations' sequential semantics (ApplySequential, each leaf's own cv2 code with the same
// draws). Chains of exact steps are bit-identical; chains with resampling differ by one
// interpolation instead of several, bounded here on smooth images; the ROI-decode contract
// (decoding only plan.source_rect) gives the same output.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <opencv2/imgproc.hpp>
#include <random>
#include <string>
#include <vector>

#include "dspipe/transforms.h"
#include "must_parse.h"
#include "transforms/impl.h"

namespace dspipe {
namespace {

using nlohmann::json;

using testing::MustParse;

// A smooth RGB image (detail well above the pixel scale) and a mask of three classes.
void MakeSample(int h, int w, int seed, cv::Mat* image, cv::Mat* mask, bool smooth = true) {
  cv::Mat noise(h, w, CV_8UC3);
  cv::RNG rng(static_cast<uint64_t>(seed) + 1);
  rng.fill(noise, cv::RNG::UNIFORM, 0, 256);
  if (smooth) {
    cv::GaussianBlur(noise, *image, cv::Size(0, 0), 5.0);
    cv::normalize(*image, *image, 0, 255, cv::NORM_MINMAX);
  } else {
    *image = noise;
  }
  *mask = cv::Mat::zeros(h, w, CV_8UC1);
  cv::circle(*mask, cv::Point(w / 3, h / 2), std::min(h, w) / 4, cv::Scalar(2), -1);
  cv::rectangle(*mask, cv::Rect(w / 2, h / 5, w / 3, h / 4), cv::Scalar(1), -1);
}

ImageRef Ref(cv::Mat& m) { return {m.data, m.rows, m.cols, m.channels()}; }
cv::Mat Mat(OwnedImage& o) {
  return cv::Mat(o.height, o.width, CV_8UC(o.channels), o.pixels.data());
}

struct Diff {
  int max = 0;
  double mask_equal = 1;
};

Diff FusedVsSequential(const TransformPipeline& p, cv::Mat image, cv::Mat mask, uint64_t index,
                       const std::vector<int>& allowed_mask_values) {
  OwnedImage fi, fm, si, sm;
  const ImageRef mr = Ref(mask);
  EXPECT_TRUE(p.Apply(3, 0, index, Ref(image), &mr, &fi, &fm).ok());
  EXPECT_TRUE(p.ApplySequential(3, 0, index, Ref(image), &mr, &si, &sm).ok());
  Diff d;
  EXPECT_EQ(fi.height, si.height);
  EXPECT_EQ(fi.width, si.width);
  if (fi.height != si.height || fi.width != si.width) return {255, 0};
  cv::Mat diff;
  cv::absdiff(Mat(fi), Mat(si), diff);
  double mx = 0;
  cv::minMaxLoc(diff.reshape(1), nullptr, &mx);
  d.max = static_cast<int>(mx);
  d.mask_equal = 1.0 - cv::countNonZero(Mat(fm) != Mat(sm)) / static_cast<double>(fm.pixels.size());
  for (uint8_t v : fm.pixels) {
    EXPECT_NE(std::find(allowed_mask_values.begin(), allowed_mask_values.end(), v),
              allowed_mask_values.end())
        << "mask value " << int(v) << " is neither a source class nor fill_mask";
  }
  return d;
}

TEST(TransformFusion, ChainsOfExactStepsAreBitIdenticalToSequential) {
  const std::vector<std::string> exact = {
      R"({"__class_fullname__": "HorizontalFlip", "p": 1})",
      R"({"__class_fullname__": "VerticalFlip", "p": 0.5})",
      R"({"__class_fullname__": "Transpose", "p": 0.5})",
      R"({"__class_fullname__": "RandomRotate90", "p": 1})",
      R"({"__class_fullname__": "SquareSymmetry", "p": 1})",
      R"({"__class_fullname__": "RandomCrop", "p": 1, "height": 41, "width": 37, "pad_if_needed": true, "fill": 9, "fill_mask": 255})",
      R"({"__class_fullname__": "CenterCrop", "p": 1, "height": 50, "width": 30, "pad_if_needed": true, "pad_position": "random"})",
      R"({"__class_fullname__": "PadIfNeeded", "p": 1, "min_height": 80, "min_width": 70, "fill": 5, "fill_mask": 255})",
      R"({"__class_fullname__": "PadIfNeeded", "p": 1, "min_height": 72, "min_width": 66, "border_mode": 4})",
      R"({"__class_fullname__": "Pad", "p": 1, "padding": [3, 1, 4, 2], "border_mode": 2})",
      R"({"__class_fullname__": "Affine", "p": 1, "translate_px": [-6, 6], "fill_mask": 255})",
      R"({"__class_fullname__": "Affine", "p": 1, "translate_px": [-6, 6], "border_mode": 1})",
  };
  std::mt19937 rng(11);
  int multi = 0;
  for (int trial = 0; trial < 60; ++trial) {
    json list = json::array();
    const int n = 2 + static_cast<int>(rng() % 4);
    for (int k = 0; k < n; ++k) list.push_back(json::parse(exact[rng() % exact.size()]));
    auto p = MustParse(list.dump());
    ASSERT_TRUE(p);
    cv::Mat image, mask;
    MakeSample(45 + trial % 7, 52 + trial % 5, trial, &image, &mask, /*smooth=*/false);
    for (uint64_t index = 0; index < 4; ++index) {
      const Diff d = FusedVsSequential(*p, image, mask, index, {0, 1, 2, 255});
      EXPECT_EQ(d.max, 0) << list.dump();
      EXPECT_EQ(d.mask_equal, 1.0) << list.dump();
      transforms::Plan plan;
      ASSERT_TRUE(
          transforms::MakePlan(*p->impl().root, 3, 0, index, {image.rows, image.cols}, 3, &plan)
              .ok());
      for (const auto& g : plan.groups) multi += g.end - g.begin > 1;
    }
  }
  EXPECT_GT(multi, 100) << "the chains must fuse (groups of several steps)";
}

// The documented bound: one resampling instead of several. On smooth content (detail above
// the pixel scale) the fused and the sequential image differ by <= 16 levels and <= 2 on
// average, away from the edge of the content (2 pixels from where a border fill starts: the
// one warp meets the fill at another sub-pixel position than the last of several); masks
// differ only along class edges (2 pixels) and hold no value that is not a source class or
// fill_mask.
TEST(TransformFusion, ResamplingGroupsStayWithinTheDocumentedBound) {
  const char* pipelines[] = {
      R"([{"__class_fullname__": "SmallestMaxSize", "p": 1, "max_size": 160},
          {"__class_fullname__": "RandomCrop", "p": 1, "height": 160, "width": 160},
          {"__class_fullname__": "SquareSymmetry", "p": 1},
          {"__class_fullname__": "Affine", "p": 1, "rotate": [-15, 15], "translate_percent": 0.05, "fill_mask": 255}])",
      R"([{"__class_fullname__": "RandomResizedCrop", "p": 1, "size": [96, 96]}, {"__class_fullname__": "HorizontalFlip"}])",
      R"([{"__class_fullname__": "Resize", "p": 1, "height": 140, "width": 180},
          {"__class_fullname__": "Rotate", "limit": 25, "p": 1, "fill_mask": 255}])",
      R"([{"__class_fullname__": "SmallestMaxSize", "p": 1, "max_size": 160}, {"__class_fullname__": "CenterCrop", "p": 1, "height": 140, "width": 140},
          {"__class_fullname__": "Resize", "p": 1, "height": 96, "width": 96}])",
      R"([{"__class_fullname__": "ShiftScaleRotate", "p": 1, "fill_mask": 255}, {"__class_fullname__": "Transpose", "p": 1}])",
      R"([{"__class_fullname__": "LongestMaxSize", "p": 1, "max_size": 150}, {"__class_fullname__": "PadIfNeeded", "p": 1, "min_height": 150, "min_width": 150, "fill_mask": 255},
          {"__class_fullname__": "RandomCrop", "p": 1, "height": 128, "width": 128}])",
  };
  const cv::Mat k5 = cv::Mat::ones(5, 5, CV_8U);
  for (const char* spec : pipelines) {
    auto p = MustParse(spec);
    ASSERT_TRUE(p);
    double worst = 0, worst_mean = 0;
    for (int s = 0; s < 6; ++s) {
      cv::Mat image, mask;
      MakeSample(200 + 13 * s, 240 - 7 * s, s, &image, &mask);
      OwnedImage fi, fm, si, sm, vi;
      const ImageRef mr = Ref(mask);
      ASSERT_TRUE(p->Apply(3, 0, s, Ref(image), &mr, &fi, &fm).ok());
      ASSERT_TRUE(p->ApplySequential(3, 0, s, Ref(image), &mr, &si, &sm).ok());
      // Where the content is: the same steps on a white image (fill 0).
      cv::Mat white(image.size(), CV_8UC3, cv::Scalar::all(255));
      ASSERT_TRUE(p->ApplySequential(3, 0, s, Ref(white), nullptr, &vi, nullptr).ok());
      cv::Mat content, ch0;
      cv::extractChannel(Mat(vi), ch0, 0);
      cv::erode(ch0 == 255, content, k5);
      cv::Mat diff, gray;
      cv::absdiff(Mat(fi), Mat(si), diff);
      cv::Mat d0;
      cv::extractChannel(diff, d0, 0);
      double mx = 0;
      cv::minMaxLoc(d0, nullptr, &mx, nullptr, nullptr, content);
      worst = std::max(worst, mx);
      worst_mean = std::max(worst_mean, cv::mean(d0, content)[0]);
      // Masks: a difference only within 2 pixels of a class edge of the sequential mask.
      cv::Mat grown, shrunk, edge;
      cv::dilate(Mat(sm), grown, k5);
      cv::erode(Mat(sm), shrunk, k5);
      edge = grown != shrunk;
      const cv::Mat differ = Mat(fm) != Mat(sm);
      EXPECT_EQ(cv::countNonZero(differ & ~edge), 0) << spec << " sample " << s;
      for (uint8_t v : fm.pixels) {
        ASSERT_TRUE(v == 0 || v == 1 || v == 2 || v == 255) << int(v);
      }
    }
    EXPECT_LE(worst, 16) << spec;
    EXPECT_LE(worst_mean, 2.0) << spec;
  }
}

TEST(TransformFusion, TheRecipeIsOneGeometricPass) {
  auto p = MustParse(R"([{"__class_fullname__": "SmallestMaxSize", "p": 1, "max_size": 512},
      {"__class_fullname__": "RandomCrop", "p": 1, "height": 512, "width": 512},
      {"__class_fullname__": "SquareSymmetry", "p": 1},
      {"__class_fullname__": "Affine", "p": 1, "rotate": [-15, 15], "translate_percent": 0.05},
      {"__class_fullname__": "RandomBrightnessContrast", "p": 1},
      {"__class_fullname__": "GaussNoise", "p": 1}, {"__class_fullname__": "Normalize", "p": 1}])");
  ASSERT_TRUE(p);
  transforms::Plan plan;
  ASSERT_TRUE(transforms::MakePlan(*p->impl().root, 1, 0, 2, {600, 700}, 3, &plan).ok());
  ASSERT_EQ(plan.groups.size(), 3u);
  EXPECT_EQ(plan.groups[0].kind, transforms::Kind::kGeometric);
  int geometric = 0;
  for (const auto& s : plan.steps) geometric += s.leaf->kind() == transforms::Kind::kGeometric;
  EXPECT_GE(geometric, 3);  // a drawn no-op (SquareSymmetry's "e") is left out of the plan
  EXPECT_EQ(plan.groups[0].end - plan.groups[0].begin, geometric);
  EXPECT_EQ(plan.groups[1].kind, transforms::Kind::kLut);
  EXPECT_EQ(plan.groups[2].kind, transforms::Kind::kPixel);
  // A border step after a crop joins: its border applies at the crop's edge (warp.cc reads
  // the crop's rectangle of the source), bit-identical to sequential (previous test).
  p = MustParse(R"([{"__class_fullname__": "RandomCrop", "p": 1, "height": 30, "width": 30},
      {"__class_fullname__": "PadIfNeeded", "p": 1, "min_height": 40, "min_width": 40, "border_mode": 4},
      {"__class_fullname__": "HorizontalFlip", "p": 1}])");
  ASSERT_TRUE(transforms::MakePlan(*p->impl().root, 1, 0, 2, {50, 50}, 3, &plan).ok());
  ASSERT_EQ(plan.groups.size(), 1u);
  EXPECT_EQ(plan.groups[0].end - plan.groups[0].begin, 3);
  // ...but not after a rotation (its input frame is no rectangle of the source).
  p = MustParse(R"([{"__class_fullname__": "Rotate", "p": 1, "limit": [10, 20]},
      {"__class_fullname__": "PadIfNeeded", "p": 1, "min_height": 60, "min_width": 60}])");
  ASSERT_TRUE(transforms::MakePlan(*p->impl().root, 1, 0, 2, {50, 50}, 3, &plan).ok());
  EXPECT_EQ(plan.groups.size(), 2u);
}

transforms::Region Shifted(int x, int y) {
  transforms::Region r;
  r.x0 = x, r.y0 = y;
  return r;
}

// The ROI-decode contract (plan.h, loader/sample.cc): decoding only plan.source_rect and
// telling Execute where it sits gives the whole decode's output, bit for bit (the same maps
// read the same pixels); at half resolution (a DCT-scaled decode) within the resampling bound.
TEST(TransformFusion, DecodingOnlyTheSourceRectGivesTheSameOutput) {
  struct Case {
    const char* spec;
    int tolerance, half_tolerance;
  };
  const Case cases[] = {
      {R"([{"__class_fullname__": "RandomCrop", "p": 1, "height": 40, "width": 50}, {"__class_fullname__": "HorizontalFlip", "p": 1}])",
       0, -1},
      {R"([{"__class_fullname__": "RandomResizedCrop", "p": 1, "size": [32, 32], "scale": [0.1, 0.3]}])",
       0, 12},
      {R"([{"__class_fullname__": "RandomResizedCrop", "p": 1, "size": [32, 32], "scale": [0.1, 0.3]}, {"__class_fullname__": "HorizontalFlip", "p": 1}])",
       0, 12},
      {R"([{"__class_fullname__": "SmallestMaxSize", "p": 1, "max_size": 60}, {"__class_fullname__": "RandomCrop", "p": 1, "height": 40, "width": 40},
          {"__class_fullname__": "Affine", "p": 1, "rotate": [-10, 10]}])",
       0, 12},
      {R"([{"__class_fullname__": "SmallestMaxSize", "p": 1, "max_size": 48}, {"__class_fullname__": "CenterCrop", "p": 1, "height": 32, "width": 40}])",
       0, 12},
      {R"([{"__class_fullname__": "RandomCrop", "p": 1, "height": 80, "width": 80}, {"__class_fullname__": "Rotate", "p": 1, "limit": [-20, 20]}])",
       0, -1},
  };
  for (const Case& c : cases) {
    auto p = MustParse(c.spec);
    ASSERT_TRUE(p);
    for (uint64_t index = 0; index < 8; ++index) {
      cv::Mat image, mask;
      MakeSample(120, 150, static_cast<int>(index), &image, &mask);
      transforms::Plan plan, full_plan;
      ASSERT_TRUE(transforms::MakePlan(*p->impl().root, 5, 0, index, {120, 150}, 3, &plan).ok());
      full_plan = plan;
      const cv::Rect r = plan.source_rect;
      EXPECT_LT(r.area(), 120 * 150) << c.spec << " reads a part of the image";
      cv::Mat want(plan.out.h, plan.out.w, CV_8UC3), got(plan.out.h, plan.out.w, CV_8UC3);
      cv::Mat want_mask(plan.out.h, plan.out.w, CV_8UC1), got_mask(plan.out.h, plan.out.w, CV_8UC1);
      transforms::Scratch scratch;
      ASSERT_TRUE(
          transforms::Execute(&full_plan, image, {}, mask, &want, &want_mask, &scratch, nullptr, {})
              .ok());
      const cv::Mat part = image(r).clone();
      ASSERT_TRUE(transforms::Execute(&plan, part, Shifted(r.x, r.y), mask, &got, &got_mask, &scratch,
                                      nullptr, {})
                      .ok());
      cv::Mat diff;
      cv::absdiff(want, got, diff);
      double mx = 0;
      cv::minMaxLoc(diff.reshape(1), nullptr, &mx);
      EXPECT_LE(mx, c.tolerance) << c.spec << " index " << index;
      EXPECT_EQ(cv::countNonZero(want_mask != got_mask), 0) << c.spec;
      if (c.half_tolerance < 0 || plan.source_per_output < 2) continue;
      // Half resolution: what a 1/2 DCT-scaled JPEG decode of the region gives (box filter).
      const cv::Rect even(r.x, r.y, r.width / 2 * 2, r.height / 2 * 2);
      cv::Mat half;
      cv::resize(image(even), half, cv::Size(even.width / 2, even.height / 2), 0, 0,
                 cv::INTER_AREA);
      transforms::Plan half_plan = full_plan;
      ASSERT_TRUE(transforms::Execute(&half_plan, half, {double(even.x), double(even.y), 2.0}, mask, &got, &got_mask,
                                      &scratch, nullptr, {})
                      .ok());
      cv::absdiff(want, got, diff);
      // Away from the edge of the content (the sample's frame and where a fill starts).
      cv::Mat white(image.size(), CV_8UC3, cv::Scalar::all(255)), content, d0;
      transforms::Plan white_plan = full_plan;
      cv::Mat shown(plan.out.h, plan.out.w, CV_8UC3);
      ASSERT_TRUE(transforms::Execute(&white_plan, white, {}, cv::Mat(), &shown, nullptr, &scratch,
                                      nullptr, {})
                      .ok());
      cv::extractChannel(shown, d0, 0);
      cv::erode(d0 == 255, content, cv::Mat::ones(5, 5, CV_8U), cv::Point(-1, -1), 1,
                cv::BORDER_CONSTANT, 0);
      cv::extractChannel(diff, d0, 0);
      cv::minMaxLoc(d0, nullptr, &mx, nullptr, nullptr, content);
      EXPECT_LE(mx, c.half_tolerance) << c.spec << " index " << index << " at 1/2";
    }
  }
}

}  // namespace
}  // namespace dspipe
