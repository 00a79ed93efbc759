// SPDX-License-Identifier: Apache-2.0
#include "dspipe/synth.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <opencv2/imgcodecs.hpp>
#include <opencv2/imgproc.hpp>
#include <set>
#include <string>
#include <vector>

#if defined(__SANITIZE_THREAD__)
// Debian's OpenCV loads GDAL, whose lazy mutex creation (CPLCreateOrAcquireMutex) TSan reports
// as a lock-order inversion on the first cv::imread, on the main thread alone: not our code.
extern "C" const char* __tsan_default_suppressions() { return "deadlock:libgdal.so\n"; }
#endif

namespace dspipe {
namespace {

namespace fs = std::filesystem;

class SynthTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    dir_ = fs::path(::testing::TempDir()) /
           ("dspipe_synth_" + std::string(info->name()) + "_" + std::to_string(getpid()));
    fs::remove_all(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  SynthOptions Options(const std::string& sub) const {
    SynthOptions o;
    o.out_dir = (dir_ / sub).string();
    o.count = 6;
    o.width = 96;
    o.height = 64;
    o.seed = 42;
    o.classes = 4;
    o.threads = 2;
    return o;
  }

  fs::path dir_;
};

std::string Slurp(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

std::vector<std::string> ListDir(const fs::path& d) {
  std::set<std::string> names;
  for (const auto& e : fs::directory_iterator(d)) names.insert(e.path().filename().string());
  return {names.begin(), names.end()};
}

cv::Mat ReadImage(const SynthOptions& o, int i, const std::string& ext = "png") {
  char name[32];
  std::snprintf(name, sizeof(name), "%06d.%s", i, ext.c_str());
  return cv::imread((fs::path(o.out_dir) / "images" / name).string(), cv::IMREAD_UNCHANGED);
}

cv::Mat ReadMask(const SynthOptions& o, int i) {
  char name[32];
  std::snprintf(name, sizeof(name), "%06d.png", i);
  return cv::imread((fs::path(o.out_dir) / "masks" / name).string(), cv::IMREAD_UNCHANGED);
}

TEST_F(SynthTest, WritesNamedFilesWithRequestedSizeAndNoTemporaries) {
  SynthOptions o = Options("a");
  o.count = 3;
  ASSERT_TRUE(Synthesize(o).ok());
  const std::vector<std::string> expected{"000000.png", "000001.png", "000002.png"};
  EXPECT_EQ(ListDir(fs::path(o.out_dir) / "images"), expected);
  EXPECT_EQ(ListDir(fs::path(o.out_dir) / "masks"), expected);
  for (int i = 0; i < 3; ++i) {
    const cv::Mat img = ReadImage(o, i);
    ASSERT_FALSE(img.empty());
    EXPECT_EQ(img.type(), CV_8UC3);
    EXPECT_EQ(img.cols, 96);
    EXPECT_EQ(img.rows, 64);
  }
}

TEST_F(SynthTest, DeterministicAcrossRunsAndThreadCounts) {
  SynthOptions a = Options("a"), b = Options("b"), c = Options("c"), d = Options("d");
  a.threads = 1;
  b.threads = 2;
  c.threads = 3;
  d.seed = 43;
  for (const auto* o : {&a, &b, &c, &d}) ASSERT_TRUE(Synthesize(*o).ok());
  ASSERT_TRUE(Synthesize(a).ok());  // rerun over existing files
  for (const char* sub : {"images", "masks"}) {
    const auto names = ListDir(fs::path(a.out_dir) / sub);
    ASSERT_EQ(names.size(), 6u);
    for (const auto& n : names) {
      const std::string ref = Slurp(fs::path(a.out_dir) / sub / n);
      EXPECT_EQ(ref, Slurp(fs::path(b.out_dir) / sub / n)) << sub << "/" << n;
      EXPECT_EQ(ref, Slurp(fs::path(c.out_dir) / sub / n)) << sub << "/" << n;
      EXPECT_NE(ref, Slurp(fs::path(d.out_dir) / sub / n)) << "seed ignored: " << sub << n;
    }
  }
  // Different samples of one dataset differ too.
  EXPECT_NE(Slurp(fs::path(a.out_dir) / "images/000000.png"),
            Slurp(fs::path(a.out_dir) / "images/000001.png"));
}

TEST_F(SynthTest, MasksAreOneChannelWithIdsBelowClassesAndEveryClassAppears) {
  SynthOptions o = Options("a");
  o.classes = 5;
  o.count = 8;
  ASSERT_TRUE(Synthesize(o).ok());
  std::set<int> seen;
  for (int i = 0; i < o.count; ++i) {
    const cv::Mat m = ReadMask(o, i);
    ASSERT_EQ(m.type(), CV_8UC1) << i;
    for (auto it = m.begin<uint8_t>(); it != m.end<uint8_t>(); ++it) seen.insert(*it);
  }
  EXPECT_EQ(seen, (std::set<int>{0, 1, 2, 3, 4}));
}

TEST_F(SynthTest, MaxClassesKeepIdsInRange) {
  SynthOptions o = Options("a");
  o.classes = 255;
  o.count = 3;
  ASSERT_TRUE(Synthesize(o).ok());
  for (int i = 0; i < o.count; ++i) {
    double lo = 0, hi = 0;
    cv::minMaxLoc(ReadMask(o, i), &lo, &hi);
    EXPECT_LT(hi, 255) << i;
    EXPECT_GE(hi, 1) << i;
  }
}

TEST_F(SynthTest, PngCompressionLevelChangesSizeNotPixels) {
  SynthOptions stored = Options("stored"), packed = Options("packed");
  stored.count = packed.count = 2;
  stored.png_compression = 0;
  packed.png_compression = 9;
  ASSERT_TRUE(Synthesize(stored).ok());
  ASSERT_TRUE(Synthesize(packed).ok());
  for (int i = 0; i < 2; ++i) {
    EXPECT_EQ(cv::norm(ReadImage(stored, i), ReadImage(packed, i), cv::NORM_INF), 0) << i;
    EXPECT_EQ(cv::norm(ReadMask(stored, i), ReadMask(packed, i), cv::NORM_INF), 0) << i;
  }
  const auto size = [](const SynthOptions& o) {
    return fs::file_size(fs::path(o.out_dir) / "images/000000.png");
  };
  EXPECT_GE(size(stored), 96u * 64u * 3u);  // raw pixels at least
  EXPECT_LT(size(packed), size(stored));
}

TEST_F(SynthTest, FilesMatchInMemorySample) {
  SynthOptions o = Options("a");
  o.count = 2;
  ASSERT_TRUE(Synthesize(o).ok());
  for (int i = 0; i < 2; ++i) {
    SynthSample s;
    ASSERT_TRUE(SynthesizeSample(o, i, &s).ok());
    ASSERT_EQ(s.width, 96);
    ASSERT_EQ(s.height, 64);
    cv::Mat rgb;
    cv::cvtColor(ReadImage(o, i), rgb, cv::COLOR_BGR2RGB);
    EXPECT_EQ(std::vector<uint8_t>(rgb.datastart, rgb.dataend), s.rgb) << i;
    const cv::Mat m = ReadMask(o, i);
    EXPECT_EQ(std::vector<uint8_t>(m.datastart, m.dataend), s.mask) << i;
    // A sample depends on (seed, index, size, classes) only, not on count or format.
    SynthOptions other = o;
    other.count = 1000;
    other.format = "jpg";
    SynthSample s2;
    ASSERT_TRUE(SynthesizeSample(other, i, &s2).ok());
    EXPECT_EQ(s.rgb, s2.rgb);
  }
}

// Fraction of 4-neighbour pixel pairs whose colour step (L1 over channels) exceeds 30, among
// pairs that straddle a mask boundary (*across) and pairs inside one label (*within).
void StepFractions(const cv::Mat& img, const cv::Mat& mask, double* across, double* within) {
  int64_t n[2] = {0, 0}, big[2] = {0, 0};
  auto pair = [&](int y0, int x0, int y1, int x1) {
    const cv::Vec3b a = img.at<cv::Vec3b>(y0, x0), b = img.at<cv::Vec3b>(y1, x1);
    const int step = std::abs(a[0] - b[0]) + std::abs(a[1] - b[1]) + std::abs(a[2] - b[2]);
    const int k = mask.at<uint8_t>(y0, x0) != mask.at<uint8_t>(y1, x1) ? 0 : 1;
    ++n[k];
    big[k] += step > 30;
  };
  for (int y = 0; y < img.rows; ++y) {
    for (int x = 0; x < img.cols; ++x) {
      if (x + 1 < img.cols) pair(y, x, y, x + 1);
      if (y + 1 < img.rows) pair(y, x, y + 1, x);
    }
  }
  *across = n[0] ? static_cast<double>(big[0]) / n[0] : 0;
  *within = n[1] ? static_cast<double>(big[1]) / n[1] : 0;
}

// Each class region's mean colour differs clearly from the background's, and the mask's
// boundaries are exactly the image's colour steps. Over 300 samples of 16 seeds: across >= 0.99
// (<= 0.35 with the mask shifted by one pixel), within <= 0.06, class-background distance >= 52.
TEST_F(SynthTest, MaskMatchesImageContent) {
  SynthOptions o = Options("a");
  o.width = o.height = 256;
  o.count = 6;
  ASSERT_TRUE(Synthesize(o).ok());
  for (int i = 0; i < o.count; ++i) {
    const cv::Mat img = ReadImage(o, i), mask = ReadMask(o, i);
    const cv::Scalar bg = cv::mean(img, mask == 0);
    ASSERT_GT(cv::countNonZero(mask == 0), 1000) << "no background left in sample " << i;
    for (int c = 1; c < o.classes; ++c) {
      const cv::Mat region = mask == c;
      if (cv::countNonZero(region) < 300) continue;
      const cv::Scalar m = cv::mean(img, region);
      const double dist = std::abs(m[0] - bg[0]) + std::abs(m[1] - bg[1]) + std::abs(m[2] - bg[2]);
      EXPECT_GT(dist, 20.0) << "sample " << i << " class " << c;
    }
    double across = 0, within = 0;
    StepFractions(img, mask, &across, &within);
    EXPECT_GT(across, 0.9) << "mask boundaries off the image edges in sample " << i;
    EXPECT_LT(within, 0.15) << "image edges without a mask boundary in sample " << i;
    cv::Mat shifted;
    const cv::Mat shift = (cv::Mat_<double>(2, 3) << 1, 0, 1, 0, 1, 0);
    cv::warpAffine(mask, shifted, shift, mask.size(), cv::INTER_NEAREST, cv::BORDER_REPLICATE);
    StepFractions(img, shifted, &across, &within);
    EXPECT_LT(across, 0.6) << "the check cannot see a one-pixel shift in sample " << i;
  }
}

// Natural-ish: real contrast, yet neighbouring pixels strongly correlated (pure noise is not).
// A flat image plus the mild noise has sd <= 4 and correlation ~0; over 300 samples of 16 seeds
// the minimum sd was 9.2 and the minimum correlation 0.87.
TEST_F(SynthTest, ImagesAreNeitherFlatNorNoise) {
  SynthOptions o = Options("a");
  o.width = o.height = 128;
  ASSERT_TRUE(Synthesize(o).ok());
  double sd_sum = 0;
  for (int i = 0; i < o.count; ++i) {
    cv::Mat gray;
    cv::cvtColor(ReadImage(o, i), gray, cv::COLOR_BGR2GRAY);
    gray.convertTo(gray, CV_64F);
    cv::Scalar mean, sd;
    cv::meanStdDev(gray, mean, sd);
    EXPECT_GT(sd[0], 6.0) << "flat sample " << i;
    sd_sum += sd[0];
    const cv::Mat left = gray.colRange(0, gray.cols - 1), right = gray.colRange(1, gray.cols);
    cv::Scalar ml, sl, mr, sr;
    cv::meanStdDev(left, ml, sl);
    cv::meanStdDev(right, mr, sr);
    const double cov = cv::mean((left - ml[0]).mul(right - mr[0]))[0];
    EXPECT_GT(cov / (sl[0] * sr[0]), 0.75) << "noise-like sample " << i;
  }
  EXPECT_GT(sd_sum / o.count, 12.0);
}

TEST_F(SynthTest, JpegFormatWritesReadableJpegsAndPngMasks) {
  SynthOptions o = Options("a");
  o.format = "jpg";
  o.count = 2;
  o.jpeg_quality = 80;
  ASSERT_TRUE(Synthesize(o).ok());
  const std::vector<std::string> images{"000000.jpg", "000001.jpg"};
  EXPECT_EQ(ListDir(fs::path(o.out_dir) / "images"), images);
  const std::string bytes = Slurp(fs::path(o.out_dir) / "images/000000.jpg");
  ASSERT_GE(bytes.size(), 2u);
  EXPECT_EQ(static_cast<uint8_t>(bytes[0]), 0xFF);  // SOI
  EXPECT_EQ(static_cast<uint8_t>(bytes[1]), 0xD8);
  const cv::Mat img = ReadImage(o, 1, "jpg");
  ASSERT_EQ(img.type(), CV_8UC3);
  EXPECT_EQ(img.size(), cv::Size(96, 64));
  // Lossy but close to the rendered pixels.
  SynthSample s;
  ASSERT_TRUE(SynthesizeSample(o, 1, &s).ok());
  cv::Mat rgb;
  cv::cvtColor(img, rgb, cv::COLOR_BGR2RGB);
  const cv::Mat ref(64, 96, CV_8UC3, s.rgb.data());
  EXPECT_LT(cv::norm(rgb, ref, cv::NORM_L1) / ref.total() / 3, 10.0);  // swapped/shifted: > 30
  EXPECT_EQ(ReadMask(o, 1).type(), CV_8UC1);
}

TEST_F(SynthTest, RejectsBadOptionsNamingTheOption) {
  struct Case {
    const char* option;
    void (*mutate)(SynthOptions&);
  };
  const Case cases[] = {
      {"out_dir", [](SynthOptions& o) { o.out_dir.clear(); }},
      {"count", [](SynthOptions& o) { o.count = 0; }},
      {"width", [](SynthOptions& o) { o.width = 8; }},
      {"height", [](SynthOptions& o) { o.height = 100000; }},
      {"classes", [](SynthOptions& o) { o.classes = 1; }},
      {"classes", [](SynthOptions& o) { o.classes = 256; }},
      {"format", [](SynthOptions& o) { o.format = "bmp"; }},
      {"threads", [](SynthOptions& o) { o.threads = -1; }},
      {"png_compression", [](SynthOptions& o) { o.png_compression = 10; }},
      {"jpeg_quality", [](SynthOptions& o) { o.jpeg_quality = 0; }},
  };
  for (const Case& c : cases) {
    SynthOptions o = Options("a");
    c.mutate(o);
    const Status s = Synthesize(o);
    EXPECT_EQ(s.code(), Status::Code::kInvalidArgument) << c.option << ": " << s.ToString();
    EXPECT_NE(s.message().find(c.option), std::string::npos) << s.ToString();
  }
  EXPECT_FALSE(fs::exists(dir_ / "a")) << "rejected options must not create anything";
  SynthSample sample;
  EXPECT_EQ(SynthesizeSample(Options("a"), -1, &sample).code(), Status::Code::kInvalidArgument);
}

TEST_F(SynthTest, UnwritableOutDirIsIOErrorNamingThePath) {
  // A regular file where a directory is needed fails even for root (chmod would not).
  fs::create_directories(dir_);
  std::ofstream(dir_ / "file") << "x";
  SynthOptions o = Options("file/out");
  const Status s = Synthesize(o);
  EXPECT_EQ(s.code(), Status::Code::kIOError) << s.ToString();
  EXPECT_NE(s.message().find((dir_ / "file").string()), std::string::npos) << s.ToString();
}

TEST_F(SynthTest, WriteFailureMidRunIsIOErrorNamingTheFile) {
  // images/000001.png exists as a directory: the rename onto it fails, the others succeed.
  SynthOptions o = Options("a");
  o.count = 3;
  fs::create_directories(fs::path(o.out_dir) / "images/000001.png/x");
  const Status s = Synthesize(o);
  EXPECT_EQ(s.code(), Status::Code::kIOError) << s.ToString();
  EXPECT_NE(s.message().find("000001.png"), std::string::npos) << s.ToString();
  for (const auto& name : ListDir(fs::path(o.out_dir) / "images")) {
    EXPECT_NE(name[0], '.') << "temporary file left behind: " << name;
  }
}

}  // namespace
}  // namespace dspipe
