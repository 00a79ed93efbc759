// SPDX-License-Identifier: Apache-2.0
// Issue 40 items 10 and 23: MedianBlur, MotionBlur and ToGray(method="pca") on uint8 pixels.
// MedianBlur against a plain median of the replicated neighbourhood; MotionBlur's kernels as
// albumentations 2.0.8's create_motion_kernel makes them (the lines printed by it), applied
// as cv2.filter2D applies them; PCA grey on pixels whose first component is known. Pixel for
// pixel against albumentations itself: tests/python/test_transforms_albumentations.py.
#include <gtest/gtest.h>

#include <algorithm>
#include <nlohmann/json.hpp>
#include <opencv2/imgproc.hpp>
#include <string>
#include <utility>
#include <vector>

#include "dspipe/transforms.h"
#include "must_parse.h"

namespace dspipe {
namespace {

using nlohmann::json;

using testing::MustParse;

cv::Mat Noise(int h, int w, int channels, uint64_t seed) {
  cv::Mat m(h, w, CV_8UC(channels));
  cv::RNG rng(seed);
  rng.fill(m, cv::RNG::UNIFORM, 0, 256);
  return m;
}

// The pipeline's output through the fused path (Apply) and step by step (ApplySequential),
// which must agree.
cv::Mat Output(const TransformPipeline& p, const cv::Mat& in, uint64_t index = 0) {
  const ImageRef ref{in.data, in.rows, in.cols, in.channels()};
  OwnedImage out, seq;
  Status s = p.Apply(7, 0, index, ref, nullptr, &out, nullptr);
  EXPECT_TRUE(s.ok()) << s.ToString();
  s = p.ApplySequential(7, 0, index, ref, nullptr, &seq, nullptr);
  EXPECT_TRUE(s.ok()) << s.ToString();
  EXPECT_EQ(out.pixels, seq.pixels);
  return cv::Mat(out.height, out.width, CV_8UC(out.channels), out.pixels.data()).clone();
}

json OnlyParams(const TransformPipeline& p, int h, int w, uint64_t index = 0) {
  std::string text;
  const Status s = p.Draws(7, 0, index, h, w, nullptr, &text);
  EXPECT_TRUE(s.ok()) << s.ToString();
  const json d = json::parse(text);
  EXPECT_EQ(d.size(), 1u) << text;
  return d.empty() ? json() : d[0]["params"];
}

TEST(BlurGray, MedianBlurIsTheMedianOfTheReplicatedNeighbourhood) {
  for (int channels : {1, 3}) {
    const cv::Mat in = Noise(23, 31, channels, 5 + channels);
    for (int k : {3, 5, 7, 9}) {
      auto p = MustParse(R"([{"__class_fullname__": "MedianBlur", "p": 1, "blur_limit": [)" +
                         std::to_string(k) + ", " + std::to_string(k) + "]}]");
      ASSERT_TRUE(p);
      EXPECT_EQ(OnlyParams(*p, in.rows, in.cols)["kernel"], k);
      const cv::Mat out = Output(*p, in);
      int wrong = 0;
      std::vector<uint8_t> window;
      for (int y = 0; y < in.rows; ++y) {
        for (int x = 0; x < in.cols; ++x) {
          for (int c = 0; c < channels; ++c) {
            window.clear();
            for (int dy = -k / 2; dy <= k / 2; ++dy) {
              for (int dx = -k / 2; dx <= k / 2; ++dx) {
                const int yy = std::clamp(y + dy, 0, in.rows - 1);
                const int xx = std::clamp(x + dx, 0, in.cols - 1);
                window.push_back(in.ptr<uint8_t>(yy)[xx * channels + c]);
              }
            }
            std::nth_element(window.begin(), window.begin() + window.size() / 2, window.end());
            wrong += out.ptr<uint8_t>(y)[x * channels + c] != window[window.size() / 2];
          }
        }
      }
      EXPECT_EQ(wrong, 0) << "k " << k << ", " << channels << " channels";
    }
  }
}

// Printed by albumentations 2.0.8: np.argwhere(create_motion_kernel(k, angle, direction,
// False, random.Random(0))) as (row, column) pairs.
TEST(BlurGray, MotionBlurKernelsAreAlbumentationsLines) {
  struct Case {
    int k;
    double angle, direction;
    std::vector<std::pair<int, int>> points;
  };
  const Case cases[] = {
      {5, 0, 0, {{2, 0}, {2, 1}, {2, 2}, {2, 3}, {2, 4}}},
      {5, 90, 0, {{0, 2}, {1, 2}, {2, 2}, {3, 2}, {4, 2}}},
      {5, 0, 1, {{2, 2}, {2, 3}, {2, 4}}},
      {5, 0, -1, {{2, 0}, {2, 1}, {2, 2}}},
      {7, 45, 0, {{1, 1}, {2, 2}, {3, 3}, {4, 4}, {5, 5}}},
      {5, 60, 0, {{0, 1}, {1, 2}, {2, 2}, {3, 2}, {4, 3}}},
      {5, 60, 0.5, {{1, 2}, {2, 2}, {3, 3}, {4, 3}}},
      {7, 120, -0.3, {{0, 4}, {1, 4}, {2, 4}, {3, 3}, {4, 2}, {5, 2}}},
      {9, 200, 0.7, {{3, 0}, {3, 1}, {3, 2}, {4, 3}, {4, 4}, {4, 5}}},
      {3, 30, 1, {{1, 1}, {2, 2}}},
  };
  const cv::Mat in = Noise(19, 26, 3, 11);
  for (const Case& c : cases) {
    const std::string k = std::to_string(c.k);
    const std::string spec = R"([{"__class_fullname__": "MotionBlur", "p": 1, "blur_limit": [)" +
                             k + ", " + k + R"(], "angle_range": [)" + json(c.angle).dump() + ", " +
                             json(c.angle).dump() + R"(], "direction_range": [)" +
                             json(c.direction).dump() + ", " + json(c.direction).dump() +
                             R"(], "allow_shifted": false}])";
    auto p = MustParse(spec);
    ASSERT_TRUE(p);
    const json q = OnlyParams(*p, in.rows, in.cols);
    ASSERT_EQ(q["kernel"].size(), static_cast<size_t>(c.k));
    // float32(1) / float32(count) on the line, 0 elsewhere (kernel.astype(float32) / sum).
    const float one = 1.0f / static_cast<float>(c.points.size());
    cv::Mat want = cv::Mat::zeros(c.k, c.k, CV_32F);
    for (const auto& [y, x] : c.points) want.at<float>(y, x) = one;
    for (int y = 0; y < c.k; ++y) {
      for (int x = 0; x < c.k; ++x) {
        EXPECT_EQ(q["kernel"][y][x].get<double>(), static_cast<double>(want.at<float>(y, x)))
            << spec << " at " << y << ", " << x;
      }
    }
    // cv2.filter2D(img, -1, kernel): reflect-101 border, rounded and saturated.
    cv::Mat ref;
    cv::filter2D(in, ref, -1, want);
    const cv::Mat out = Output(*p, in);
    EXPECT_EQ(cv::norm(out, ref, cv::NORM_INF), 0) << spec;
  }
  // With allow_shifted the line (here along x: cos 0 = 1, sin 0 = 0) moves by the drawn shift,
  // clipped to the kernel.
  auto shifted = MustParse(R"([{"__class_fullname__": "MotionBlur", "p": 1, "blur_limit": [9, 9],
      "angle_range": [0, 0], "direction_range": [0, 0]}])");
  ASSERT_TRUE(shifted);
  int moved = 0;
  for (uint64_t i = 0; i < 20; ++i) {
    const json q = OnlyParams(*shifted, 10, 10, i);
    const double sx = q["shift"][0].get<double>(), sy = q["shift"][1].get<double>();
    cv::Mat line = cv::Mat::zeros(9, 9, CV_32F);
    const int row = std::clamp(static_cast<int>(std::nearbyint(4 + sy)), 0, 8);
    for (int t = -4; t <= 4; ++t) {
      line.at<float>(row, std::clamp(static_cast<int>(std::nearbyint(4 + t + sx)), 0, 8)) = 1;
    }
    const float one = 1.0f / static_cast<float>(cv::countNonZero(line));
    for (int y = 0; y < 9; ++y) {
      for (int x = 0; x < 9; ++x) {
        EXPECT_EQ(q["kernel"][y][x].get<double>(), line.at<float>(y, x) > 0 ? one : 0.0f)
            << q.dump();
      }
    }
    moved += row != 4 || std::nearbyint(sx) != 0;
  }
  EXPECT_GT(moved, 0);
}

// Pixels on a line in RGB space: the first principal component is the line, so the grey is
// the min-max normalized position along it (or its mirror: an eigenvector's sign is OpenCV's
// choice, albumentations' too), rint(255 * u).
TEST(BlurGray, ToGrayPcaIsTheFirstComponentMinMaxNormalized) {
  auto p = MustParse(R"([{"__class_fullname__": "ToGray", "p": 1, "method": "pca"}])");
  ASSERT_TRUE(p);
  cv::Mat in(17, 15, CV_8UC3), t(17, 15, CV_8UC1);
  cv::RNG rng(3);
  for (int y = 0; y < in.rows; ++y) {
    for (int x = 0; x < in.cols; ++x) {
      const int v = rng.uniform(0, 86);
      t.at<uint8_t>(y, x) = static_cast<uint8_t>(v);
      in.at<cv::Vec3b>(y, x) = cv::Vec3b(static_cast<uint8_t>(10 + v), static_cast<uint8_t>(2 * v),
                                         static_cast<uint8_t>(255 - 3 * v));
    }
  }
  double tmin = 0, tmax = 0;
  cv::minMaxLoc(t, &tmin, &tmax);
  const cv::Mat out = Output(*p, in);
  cv::Mat channels[3];
  cv::split(out, channels);
  EXPECT_EQ(cv::norm(channels[0], channels[1], cv::NORM_INF), 0);
  EXPECT_EQ(cv::norm(channels[0], channels[2], cv::NORM_INF), 0);
  int up = 0, down = 0;
  for (int y = 0; y < in.rows; ++y) {
    for (int x = 0; x < in.cols; ++x) {
      const double u = (t.at<uint8_t>(y, x) - tmin) / (tmax - tmin);
      const int g = channels[0].at<uint8_t>(y, x);
      up += g == static_cast<int>(std::nearbyint(255 * u));
      down += g == static_cast<int>(std::nearbyint(255 * (1 - u)));
    }
  }
  EXPECT_EQ(std::max(up, down), in.rows * in.cols) << up << " " << down;
  // The sign of the component is the Jacobi solver's (the opencv-python wheel's cv::eigen):
  // Debian's OpenCV, built with Eigen, gives the mirror image here. Printed by albumentations
  // 2.0.8: A.ToGray(method="pca", p=1)(image=img)["image"][..., 0] for this 4 x 5 image.
  cv::Mat formula(4, 5, CV_8UC3);
  const int step[3] = {11, 19, 41};
  for (int i = 0; i < 20; ++i) {
    for (int c = 0; c < 3; ++c)
      formula.ptr<uint8_t>(i / 5)[(i % 5) * 3 + c] = (i * step[c] + 17 * c) % 256;
  }
  const std::vector<uint8_t> printed = {0,   41,  81,  122, 163, 203, 52,  92,  133, 174,
                                        214, 255, 104, 20,  60,  101, 142, 182, 31,  71};
  cv::Mat grey;
  cv::extractChannel(Output(*p, formula), grey, 0);
  EXPECT_EQ(std::vector<uint8_t>(grey.begin<uint8_t>(), grey.end<uint8_t>()), printed);
  // A constant image: cv2.normalize maps a zero range to 0; a grey image is left as it is.
  const cv::Mat flat(6, 9, CV_8UC3, cv::Scalar(77, 20, 200));
  EXPECT_EQ(cv::countNonZero(Output(*p, flat).reshape(1)), 0);
  const cv::Mat gray = Noise(8, 5, 1, 2);
  EXPECT_EQ(cv::norm(Output(*p, gray), gray, cv::NORM_INF), 0);
}

// albumentations' typed-pixel rule (pipeline.cc): the three compute on uint8 pixels, so a
// uint16 or float32 image is refused by name, as the other photometric transforms are.
TEST(BlurGray, TypedImagesAreRefusedNamingTheTransform) {
  const std::vector<uint16_t> pixels(6 * 7 * 3, 1000);
  const PixelsRef ref{pixels.data(), 6, 7, 3, SampleType::kUint16};
  for (const char* spec : {R"([{"__class_fullname__": "MedianBlur", "p": 1}])",
                           R"([{"__class_fullname__": "MotionBlur", "p": 1}])",
                           R"([{"__class_fullname__": "ToGray", "p": 1, "method": "pca"}])"}) {
    auto p = MustParse(spec);
    ASSERT_TRUE(p);
    OwnedPixels out;
    const Status s = p->ApplyPixels(1, 0, 0, ref, nullptr, &out, nullptr);
    EXPECT_EQ(s.code(), Status::Code::kInvalidArgument) << spec;
    EXPECT_NE(s.message().find("computes on uint8 pixels; a uint16 image takes the geometric"),
              std::string::npos)
        << s.ToString();
  }
}

}  // namespace
}  // namespace dspipe
