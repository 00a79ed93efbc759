// SPDX-License-Identifier: Apache-2.0
// Issue 35: typed samples end to end. 12-bit CT slices in 16-bit PNGs, float32 TIFFs with
// negative values, 4-channel 16-bit stacks and uint16 instance masks are built into datasets
// that keep them (either store) and come out of the loader as float32 in their own units,
// exactly; the build's statistics are those of the source values; geometric transforms run on
// them and photometric ones are refused by name.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <opencv2/core.hpp>
#include <opencv2/imgcodecs.hpp>
#include <opencv2/imgproc.hpp>
#include <string>
#include <tuple>
#include <vector>

#include "codec/tiff_writer.h"
#include "dspipe/convert.h"
#include "dspipe/dataset.h"
#include "dspipe/device_loader.h"
#include "dspipe/loader.h"
#include "dspipe/transforms.h"
#include "loader/sample.h"

namespace dspipe {
namespace {

namespace fs = std::filesystem;

class TempDir {
 public:
  TempDir() {
    char tmpl[] = "/tmp/dspipe-typed-XXXXXX";
    const char* p = ::mkdtemp(tmpl);
    if (p == nullptr) throw std::runtime_error("mkdtemp failed");
    path_ = p;
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path_, ec);
  }
  std::string operator/(const std::string& name) const { return path_ + "/" + name; }

 private:
  std::string path_;
};

constexpr int kH = 24, kW = 32;

// Writes m (RGB(A) order for 3/4 channels) with OpenCV's encoder for the file's extension.
void Write(const std::string& path, const cv::Mat& m) {
  fs::create_directories(fs::path(path).parent_path());
  cv::Mat bgr;  // never a header over m: cvtColor into one would convert m in place
  if (m.channels() == 1) bgr = m;
  if (m.channels() == 3) cv::cvtColor(m, bgr, cv::COLOR_RGB2BGR);
  if (m.channels() == 4) cv::cvtColor(m, bgr, cv::COLOR_RGBA2BGRA);
  ASSERT_TRUE(cv::imwrite(path, bgr)) << path;
}

// True when the loader decoded at least one sample on the fused path (DecodePath::kFused).
bool TookTheFusedPath(Loader& loader) {
  for (const DecodePathSummary& p : loader.stats().DecodePaths()) {
    if (p.path == DecodePath::kFused && p.count > 0) return true;
  }
  return false;
}

// A CT-like slice: 12-bit values 0..4095, different per sample.
cv::Mat CtSlice(int seed) {
  cv::Mat m(kH, kW, CV_16UC1);
  for (int y = 0; y < kH; ++y) {
    for (int x = 0; x < kW; ++x) {
      m.at<uint16_t>(y, x) = static_cast<uint16_t>((x * 131 + y * 17 + seed * 977) % 4096);
    }
  }
  return m;
}

// An instance map: ids up to 5000.
cv::Mat Instances(int seed) {
  cv::Mat m(kH, kW, CV_16UC1);
  for (int y = 0; y < kH; ++y) {
    for (int x = 0; x < kW; ++x) {
      m.at<uint16_t>(y, x) = static_cast<uint16_t>(((x / 8) * 1000 + y / 6 + seed) % 5001);
    }
  }
  return m;
}

BuildOptions Options(const std::string& src, const std::string& out, StoreMode store) {
  BuildOptions o;
  o.source = src;
  o.output = out;
  o.threads = 2;
  o.store = store;
  return o;
}

LoaderOptions Sequential(int batch) {
  LoaderOptions o;
  o.batch_size = batch;
  o.threads = 2;
  o.sampler.shuffle = false;
  return o;
}

// The float32 NCHW image i of a batch as a CV_32FC(c) HWC Mat.
cv::Mat FloatImage(const Batch& b, int i) {
  const int c = b.channels();
  const size_t plane = static_cast<size_t>(b.height()) * b.width();
  const float* p = b.normalized() + static_cast<size_t>(i) * plane * c;
  std::vector<cv::Mat> planes;
  for (int k = 0; k < c; ++k) {
    planes.emplace_back(b.height(), b.width(), CV_32FC1, const_cast<float*>(p + k * plane));
  }
  cv::Mat out;
  cv::merge(planes, out);
  return out;
}

cv::Mat AsFloat(const cv::Mat& m) {
  cv::Mat f;
  m.convertTo(f, CV_32F);
  return f;
}

TEST(TypedSamples, CtSlicesAndInstanceMasksComeOutAsTheirSourceValues) {
  TempDir tmp;
  std::vector<cv::Mat> images, masks;
  for (int i = 0; i < 3; ++i) {
    images.push_back(CtSlice(i));
    masks.push_back(Instances(i));
    Write(tmp / ("src/images/" + std::to_string(i) + ".png"), images.back());
    Write(tmp / ("src/masks/" + std::to_string(i) + ".png"), masks.back());
  }
  // numpy's figures over the same pixels: float64 mean, population std, min, max.
  double sum = 0, sumsq = 0, lo = 1e9, hi = -1e9;
  for (const cv::Mat& m : images) {
    for (int y = 0; y < kH; ++y) {
      for (int x = 0; x < kW; ++x) {
        const double v = m.at<uint16_t>(y, x);
        sum += v, sumsq += v * v, lo = std::min(lo, v), hi = std::max(hi, v);
      }
    }
  }
  const double n = 3.0 * kH * kW, mean = sum / n, sd = std::sqrt(sumsq / n - mean * mean);
  for (StoreMode store : {StoreMode::kEncoded, StoreMode::kRaw}) {
    SCOPED_TRACE(store == StoreMode::kRaw ? "raw" : "encoded");
    const std::string out = tmp / ("ds" + std::to_string(static_cast<int>(store)));
    BuildResult r;
    const Status built = BuildDataset(Options(tmp / "src", out, store), &r);
    ASSERT_TRUE(built.ok()) << built.ToString();
    std::unique_ptr<Dataset> ds;
    ASSERT_TRUE(Dataset::Open(out, {}, &ds).ok());
    const DatasetInfo& info = ds->info();
    EXPECT_EQ(info.sample_type, SampleType::kUint16);
    EXPECT_EQ(info.mask_type, SampleType::kUint16);
    EXPECT_EQ(info.channels, 1);
    double most = 0;
    for (const cv::Mat& ids : masks) {
      double mx = 0;
      cv::minMaxLoc(ids, nullptr, &mx);
      most = std::max(most, mx);
    }
    EXPECT_GT(most, 3000);
    EXPECT_EQ(info.num_classes, static_cast<int>(most) + 1);
    ASSERT_TRUE(info.has_stats);
    EXPECT_NEAR(info.mean[0], mean, 1e-9 * mean);
    EXPECT_NEAR(info.std[0], sd, 1e-9 * sd);
    const auto m = nlohmann::json::parse(info.manifest_json);
    EXPECT_EQ(m.at("format_version"), 2);
    EXPECT_EQ(m.at("sample_type"), "uint16");
    EXPECT_EQ(m.at("stats").at("min")[0].get<double>(), lo);
    EXPECT_EQ(m.at("stats").at("max")[0].get<double>(), hi);

    std::unique_ptr<Loader> loader;
    const Status opened = Loader::Open(out, Sequential(3), &loader);
    ASSERT_TRUE(opened.ok()) << opened.ToString();
    Batch b;
    ASSERT_TRUE(loader->Next(&b).ok());
    ASSERT_EQ(b.size(), 3);
    EXPECT_EQ(b.channels(), 1);
    EXPECT_EQ(b.shape().image_type, SampleType::kUint16);
    ASSERT_NE(b.normalized(), nullptr) << "typed images always come as float32";
    for (int i = 0; i < 3; ++i) {
      EXPECT_EQ(cv::norm(FloatImage(b, i), AsFloat(images[i]), cv::NORM_INF), 0) << i;
      const cv::Mat raw(kH, kW, CV_16UC1, b.image(i).data());
      EXPECT_EQ(cv::norm(raw, images[i], cv::NORM_INF), 0) << i;
      const cv::Mat ids(kH, kW, CV_16UC1, b.mask(i).data());
      EXPECT_EQ(cv::norm(ids, masks[i], cv::NORM_INF), 0) << "ids above 255 intact, " << i;
    }

    // augment's flip (one pass into the slot): mirrored image and ids.
    LoaderOptions flip = Sequential(3);
    flip.augment.hflip = 1.0;
    ASSERT_TRUE(Loader::Open(out, flip, &loader).ok());
    ASSERT_TRUE(loader->Next(&b).ok());
    for (int i = 0; i < 3; ++i) {
      cv::Mat want_image, want_ids;
      cv::flip(images[i], want_image, 1);
      cv::flip(masks[i], want_ids, 1);
      EXPECT_EQ(cv::norm(FloatImage(b, i), AsFloat(want_image), cv::NORM_INF), 0) << i;
      EXPECT_EQ(cv::norm(cv::Mat(kH, kW, CV_16UC1, b.mask(i).data()), want_ids, cv::NORM_INF), 0);
    }

    // The fused path (16-bit gray PNG decoded mirrored into the slot, rows normalized as they
    // are finished) gives exactly what the unfused one does.
    LoaderOptions norm = Sequential(3);
    norm.augment.hflip = 0.5;
    norm.normalize = NormalizeMode::kCpuFloat32;
    norm.sampler.seed = 9;
    std::vector<float> fused, unfused;
    std::vector<uint16_t> fused_ids, unfused_ids;
    for (bool on : {true, false}) {
      loader::SetFusedDecodeEnabled(on);
      std::unique_ptr<Loader> l;
      ASSERT_TRUE(Loader::Open(out, norm, &l).ok());
      Batch nb;
      ASSERT_TRUE(l->Next(&nb).ok());
      std::vector<float>& f = on ? fused : unfused;
      f.assign(nb.normalized(), nb.normalized() + 3 * kH * kW);
      std::vector<uint16_t>& ids = on ? fused_ids : unfused_ids;
      const auto* got_ids = reinterpret_cast<const uint16_t*>(nb.masks());
      ids.assign(got_ids, got_ids + 3 * kH * kW);
      const StageSummary decode = l->stats().Summary(Stage::kDecode);
      EXPECT_GT(decode.count, 0u);
      EXPECT_EQ(TookTheFusedPath(*l), on && store == StoreMode::kEncoded);
    }
    loader::SetFusedDecodeEnabled(true);
    EXPECT_EQ(fused, unfused);
    EXPECT_EQ(fused_ids, unfused_ids);

    // Normalized with the manifest's mean/std, in source units.
    LoaderOptions o = Sequential(3);
    o.normalize = NormalizeMode::kCpuFloat32;
    ASSERT_TRUE(Loader::Open(out, o, &loader).ok());
    ASSERT_TRUE(loader->Next(&b).ok());
    cv::Mat want = AsFloat(images[1]);
    want = (want - static_cast<float>(mean)) / static_cast<float>(sd);
    EXPECT_LE(cv::norm(FloatImage(b, 1), want, cv::NORM_INF), 1e-5);
  }
}

// 16-bit RGB and RGBA PNGs take the fast PNG path (DecodePath::kFused: decoded, mirrored and
// normalized row by row into the slot) and give exactly the unfused path's batches and the
// source's values, channels in RGB(A) order.
TEST(TypedSamples, SixteenBitColorPngsTakeTheFusedPathAndKeepEveryValue) {
  for (int channels : {3, 4}) {
    SCOPED_TRACE(std::to_string(channels) + " channels");
    TempDir tmp;
    std::vector<cv::Mat> images;
    for (int i = 0; i < 3; ++i) {
      cv::Mat m(kH, kW, CV_16UC(channels));
      cv::randu(m, 0, 65536);
      images.push_back(m);
      const std::string name = "/" + std::to_string(i) + ".png";
      Write(tmp / ("src/images" + name), m);
      Write(tmp / ("src/masks" + name), cv::Mat(kH, kW, CV_8UC1, cv::Scalar(i)));
    }
    const std::string out = tmp / "ds";
    BuildResult r;
    const Status built = BuildDataset(Options(tmp / "src", out, StoreMode::kEncoded), &r);
    ASSERT_TRUE(built.ok()) << built.ToString();

    // Source values (no flip), then the fused path against the unfused one with flips.
    std::unique_ptr<Loader> loader;
    ASSERT_TRUE(Loader::Open(out, Sequential(3), &loader).ok());
    Batch b;
    ASSERT_TRUE(loader->Next(&b).ok());
    ASSERT_EQ(b.channels(), channels);
    for (int i = 0; i < 3; ++i) {
      EXPECT_EQ(cv::norm(FloatImage(b, i), AsFloat(images[i]), cv::NORM_INF), 0) << i;
      const cv::Mat raw(kH, kW, CV_16UC(channels), b.image(i).data());
      EXPECT_EQ(cv::norm(raw, images[i], cv::NORM_INF), 0) << i;
    }
    LoaderOptions norm = Sequential(3);
    norm.augment.hflip = 0.5;
    norm.normalize = NormalizeMode::kCpuFloat32;
    norm.sampler.seed = 4;
    std::vector<float> got[2];
    std::vector<uint8_t> raw[2];
    for (bool on : {true, false}) {
      loader::SetFusedDecodeEnabled(on);
      std::unique_ptr<Loader> l;
      ASSERT_TRUE(Loader::Open(out, norm, &l).ok());
      Batch nb;
      ASSERT_TRUE(l->Next(&nb).ok());
      got[on].assign(nb.normalized(), nb.normalized() + size_t{3} * kH * kW * channels);
      for (int i = 0; i < 3; ++i) {
        raw[on].insert(raw[on].end(), nb.image(i).begin(), nb.image(i).end());
      }
      EXPECT_EQ(TookTheFusedPath(*l), on);
    }
    loader::SetFusedDecodeEnabled(true);
    EXPECT_EQ(got[1], got[0]);
    EXPECT_EQ(raw[1], raw[0]);
  }
}

// numpy.percentile(values, q) with its default linear interpolation, term for term.
double NumpyPercentile(std::vector<double> v, double q) {
  std::sort(v.begin(), v.end());
  const double pos = static_cast<double>(v.size() - 1) * (q / 100.0);
  const size_t lo = static_cast<size_t>(std::floor(pos)), hi = std::min(lo + 1, v.size() - 1);
  const double t = pos - static_cast<double>(lo), d = v[hi] - v[lo];
  return t >= 0.5 ? v[hi] - d * (1 - t) : v[lo] + d * t;
}

// The build's statistics in source units: mean / std as numpy computes them, and the 0.5th /
// 99.5th percentiles (nnU-Net's CT normalization inputs) exactly as numpy.percentile does; the
// same whether the dataset is built whole, in two shards, or interrupted and resumed.
TEST(TypedSamples, StatsAndPercentilesAreNumpysWholeShardedAndResumed) {
  TempDir tmp;
  std::vector<double> values;
  for (int i = 0; i < 5; ++i) {
    cv::Mat ct = CtSlice(i);
    ct(cv::Rect(0, 0, 3, 2)).setTo(cv::Scalar(60000 + i));  // a bright outlier corner
    Write(tmp / ("src/images/" + std::to_string(i) + ".png"), ct);
    for (int y = 0; y < kH; ++y) {
      for (int x = 0; x < kW; ++x) values.push_back(ct.at<uint16_t>(y, x));
    }
  }
  auto stats_of = [](const std::string& path) {
    std::unique_ptr<Dataset> ds;
    EXPECT_TRUE(Dataset::Open(path, {}, &ds).ok()) << path;
    return ds ? nlohmann::json::parse(ds->info().manifest_json).at("stats") : nlohmann::json();
  };
  BuildResult r;
  ASSERT_TRUE(BuildDataset(Options(tmp / "src", tmp / "whole", StoreMode::kEncoded), &r).ok());
  const nlohmann::json whole = stats_of(tmp / "whole");
  EXPECT_EQ(whole.at("percentile_00_5")[0].get<double>(), NumpyPercentile(values, 0.5));
  EXPECT_EQ(whole.at("percentile_99_5")[0].get<double>(), NumpyPercentile(values, 99.5));
  EXPECT_GT(whole.at("percentile_99_5")[0].get<double>(), 4000) << "the outliers are counted";
  std::unique_ptr<Dataset> ds;
  ASSERT_TRUE(Dataset::Open(tmp / "whole", {}, &ds).ok());
  ASSERT_EQ(ds->info().percentile_00_5.size(), 1u);
  EXPECT_EQ(ds->info().percentile_00_5[0], NumpyPercentile(values, 0.5));
  EXPECT_EQ(ds->info().max[0], 60004);

  BuildOptions sharded = Options(tmp / "src", tmp / "sharded", StoreMode::kEncoded);
  sharded.shards = 2;
  ASSERT_TRUE(BuildDataset(sharded, &r).ok());
  EXPECT_EQ(stats_of(tmp / "sharded"), whole);

  BuildOptions stopped = Options(tmp / "src", tmp / "resumed", StoreMode::kEncoded);
  stopped.commit_bytes = 1;  // a commit (with the running totals) after every record
  int polls = 0;
  stopped.cancelled = [&polls] { return ++polls == 3; };
  ASSERT_EQ(BuildDataset(stopped, &r).code(), Status::Code::kCancelled);
  stopped.cancelled = nullptr;
  stopped.resume = true;
  const Status resumed = BuildDataset(stopped, &r);
  ASSERT_TRUE(resumed.ok()) << resumed.ToString();
  EXPECT_EQ(stats_of(tmp / "resumed"), whole);
}

TEST(TypedSamples, FloatTiffKeepsNegativeValuesAndStacksKeepTheirChannels) {
  TempDir tmp;
  cv::Mat f32(kH, kW, CV_32FC1);
  for (int y = 0; y < kH; ++y) {
    for (int x = 0; x < kW; ++x) f32.at<float>(y, x) = -1000.25f + 61.5f * x - 3.125f * y;
  }
  Write(tmp / "f/images/a.tiff", f32);
  cv::Mat stack(kH, kW, CV_16UC4);
  for (int y = 0; y < kH; ++y) {
    for (int x = 0; x < kW; ++x) {
      stack.at<cv::Vec4w>(y, x) =
          cv::Vec4w(static_cast<uint16_t>(x * 1000), static_cast<uint16_t>(y * 2000),
                    static_cast<uint16_t>(65535 - x), static_cast<uint16_t>(7 * x + y));
    }
  }
  Write(tmp / "s/images/a.tiff", stack);
  for (StoreMode store : {StoreMode::kEncoded, StoreMode::kRaw}) {
    for (const auto& [dir, src] : {std::pair{"f", f32}, std::pair{"s", stack}}) {
      SCOPED_TRACE(std::string(dir) + (store == StoreMode::kRaw ? " raw" : " encoded"));
      const std::string out = tmp / (std::string(dir) + "-out" + std::to_string(int(store)));
      BuildResult r;
      const Status built = BuildDataset(Options(tmp / dir, out, store), &r);
      ASSERT_TRUE(built.ok()) << built.ToString();
      std::unique_ptr<Loader> loader;
      const Status opened = Loader::Open(out, Sequential(1), &loader);
      ASSERT_TRUE(opened.ok()) << opened.ToString();
      Batch b;
      const Status next = loader->Next(&b);
      ASSERT_TRUE(next.ok()) << next.ToString();
      ASSERT_EQ(b.channels(), src.channels());
      EXPECT_EQ(cv::norm(FloatImage(b, 0), AsFloat(src), cv::NORM_INF), 0);
    }
  }
}

// c channels of `depth` (CV_8U, CV_16U or CV_32F), distinct per channel, image and pixel;
// float32 with negatives and fractions.
cv::Mat MultiChannel(int c, int depth, int seed) {
  cv::Mat m(kH, kW, CV_MAKETYPE(depth, c));
  for (int y = 0; y < kH; ++y) {
    for (int x = 0; x < kW; ++x) {
      for (int k = 0; k < c; ++k) {
        const int v = x * 211 + y * 37 + k * 4099 + seed * 7;
        const size_t at = (static_cast<size_t>(y) * kW + x) * c + k;
        if (depth == CV_8U) {
          m.ptr<uint8_t>()[at] = static_cast<uint8_t>(v);
        } else if (depth == CV_16U) {
          m.ptr<uint16_t>()[at] = static_cast<uint16_t>(v * 3);
        } else {
          m.ptr<float>()[at] = static_cast<float>(v) * 0.125f - 2500.0f * (k % 2);
        }
      }
    }
  }
  return m;
}

void WriteTiff(const std::string& path, const cv::Mat& m, const testing::TiffWriteOptions& o) {
  fs::create_directories(fs::path(path).parent_path());
  ASSERT_TRUE(testing::WriteTiffFile(path, m, o)) << path;
}

// Issue 35: TIFFs of more than 4 channels (multi-modal, microscopy, 8-bit multispectral),
// planar or contiguous, strips or tiles, compressed or not, written with libtiff itself, are
// built (either store, and re-encoded after a resize) and come out of the loader with all their
// channels, as float32 NCHW in their own units, exactly.
TEST(TypedSamples, MultiChannelTiffsKeepEveryChannelThroughBuildAndLoader) {
  TempDir tmp;
  std::map<std::string, std::vector<cv::Mat>> sources;
  for (const auto& [dir, c, depth] :
       {std::tuple{"u16x5", 5, CV_16U}, std::tuple{"f32x6", 6, CV_32F},
        std::tuple{"u8x7", 7, CV_8U}}) {
    std::vector<cv::Mat>& images = sources[dir];
    for (int i = 0; i < 4; ++i) {
      testing::TiffWriteOptions o;
      o.planar = i % 2 == 1;     // contiguous, planar, ...
      o.tile = i >= 2 ? 16 : 0;  // strips, then tiles
      if (i == 3) {
        o.compression = COMPRESSION_ADOBE_DEFLATE;
        o.predictor = depth == CV_32F ? PREDICTOR_FLOATINGPOINT : PREDICTOR_HORIZONTAL;
      }
      images.push_back(MultiChannel(c, depth, i));
      WriteTiff(tmp / (std::string(dir) + "/images/" + std::to_string(i) + ".tiff"), images.back(),
                o);
    }
  }
  for (const auto& [dir, images] : sources) {
    for (int variant = 0; variant < 3; ++variant) {
      const StoreMode store = variant == 1 ? StoreMode::kRaw : StoreMode::kEncoded;
      SCOPED_TRACE(dir + std::string(variant == 0   ? " encoded"
                                     : variant == 1 ? " raw"
                                                    : " encoded, resized to its own size"));
      const std::string out = tmp / (dir + "-out" + std::to_string(variant));
      BuildOptions o = Options(tmp / dir, out, store);
      if (variant == 2) {  // re-encoded after the resize: zstd pixels (no PNG of 5 or 6)
        o.resize_width = kW;
        o.resize_height = kH;
      }
      BuildResult r;
      const Status built = BuildDataset(o, &r);
      ASSERT_TRUE(built.ok()) << built.ToString();
      std::unique_ptr<Dataset> ds;
      ASSERT_TRUE(Dataset::Open(out, {}, &ds).ok());
      EXPECT_EQ(ds->info().channels, images[0].channels());
      EXPECT_EQ(ds->info().sample_type, images[0].depth() == CV_8U    ? SampleType::kUint8
                                        : images[0].depth() == CV_16U ? SampleType::kUint16
                                                                      : SampleType::kFloat32);
      std::unique_ptr<Loader> loader;
      const Status opened = Loader::Open(out, Sequential(4), &loader);
      ASSERT_TRUE(opened.ok()) << opened.ToString();
      Batch b;
      const Status next = loader->Next(&b);
      ASSERT_TRUE(next.ok()) << next.ToString();
      ASSERT_EQ(b.channels(), images[0].channels());
      ASSERT_EQ(b.size(), 4);
      for (int i = 0; i < 4; ++i) {
        EXPECT_EQ(cv::norm(FloatImage(b, i), AsFloat(images[i]), cv::NORM_INF), 0) << i;
      }
    }
  }
}

// Issue 35: an 8-bit image of more than 4 channels is typed (IsTyped): its manifest says uint8
// with 7 channels and format version 2, its statistics are per channel in 0-255 units, the
// loader normalizes each channel by them, moves image and mask together, refuses the transforms
// that compute on gray or RGB by name, and a dataset mixing it with RGB images names the file.
TEST(TypedSamples, EightBitImagesOfMoreThanFourChannelsAreKeptEndToEnd) {
  TempDir tmp;
  std::vector<cv::Mat> images;
  for (int i = 0; i < 3; ++i) {
    images.push_back(MultiChannel(7, CV_8U, i));
    WriteTiff(tmp / ("src/images/" + std::to_string(i) + ".tiff"), images.back(), {});
    cv::Mat mask(kH, kW, CV_8UC1);
    for (int y = 0; y < kH; ++y) {
      for (int x = 0; x < kW; ++x) mask.at<uint8_t>(y, x) = static_cast<uint8_t>((x + i) % 3);
    }
    Write(tmp / ("src/masks/" + std::to_string(i) + ".png"), mask);
  }
  BuildResult r;
  Status s = BuildDataset(Options(tmp / "src", tmp / "ds", StoreMode::kEncoded), &r);
  ASSERT_TRUE(s.ok()) << s.ToString();
  std::unique_ptr<Dataset> ds;
  ASSERT_TRUE(Dataset::Open(tmp / "ds", {}, &ds).ok());
  const nlohmann::json m = nlohmann::json::parse(ds->info().manifest_json);
  EXPECT_EQ(m.at("sample_type"), "uint8");
  EXPECT_EQ(m.at("channels"), 7);
  EXPECT_EQ(m.at("format_version"), 2) << "readers of version 1 know only gray and RGB";
  // Per-channel mean and std over every pixel of the three images, as numpy computes them.
  std::vector<double> mean(7), sd(7);
  for (int k = 0; k < 7; ++k) {
    double sum = 0, sumsq = 0;
    for (const cv::Mat& img : images) {
      for (size_t j = k; j < img.total() * 7; j += 7) {
        sum += img.data[j];
        sumsq += static_cast<double>(img.data[j]) * img.data[j];
      }
    }
    const double n = 3.0 * kH * kW;
    mean[k] = sum / n;
    sd[k] = std::sqrt(sumsq / n - mean[k] * mean[k]);
    EXPECT_NEAR(ds->info().mean[k], mean[k], 1e-9 * mean[k]) << k;
    EXPECT_NEAR(ds->info().std[k], sd[k], 1e-9 * sd[k]) << k;
  }
  // verify decodes every record as it is stored (the TIFF kept), info says what it holds.
  VerifyResult checked;
  s = VerifyDataset(tmp / "ds", {}, &checked);
  ASSERT_TRUE(s.ok()) << s.ToString();
  EXPECT_EQ(checked.records, 3u);
  EXPECT_EQ(checked.bad, 0u);
  std::string text;
  ASSERT_TRUE(DescribeDataset(tmp / "ds", &text).ok());
  EXPECT_NE(text.find("x7 (HxWxC, uint8)"), std::string::npos) << text;

  // Normalized by the dataset's statistics, channel by channel; a flip moves image and mask.
  std::shared_ptr<const TransformPipeline> flip;
  ASSERT_TRUE(TransformPipeline::Parse(R"({"transform": {"__class_fullname__": "Compose",
      "p": 1.0, "transforms": [{"__class_fullname__": "HorizontalFlip", "p": 1.0}]}})",
                                       &flip)
                  .ok());
  LoaderOptions o = Sequential(3);
  o.transform = flip;
  o.normalize = NormalizeMode::kCpuFloat32;
  o.mean_std = MeanStdSource::kDataset;
  std::unique_ptr<Loader> loader;
  s = Loader::Open(tmp / "ds", o, &loader);
  ASSERT_TRUE(s.ok()) << s.ToString();
  Batch b;
  s = loader->Next(&b);
  ASSERT_TRUE(s.ok()) << s.ToString();
  ASSERT_EQ(b.channels(), 7);
  ASSERT_EQ(b.size(), 3);
  for (int i = 0; i < 3; ++i) {
    cv::Mat want;
    cv::flip(AsFloat(images[i]), want, 1);
    std::vector<cv::Mat> planes;
    cv::split(want, planes);
    for (int k = 0; k < 7; ++k) planes[k] = (planes[k] - mean[k]) / sd[k];
    cv::merge(planes, want);
    EXPECT_LE(cv::norm(FloatImage(b, i), want, cv::NORM_INF), 1e-5) << i;
    const uint8_t* mask = b.mask(i).data();
    EXPECT_EQ(mask[0], static_cast<uint8_t>((kW - 1 + i) % 3)) << "the mask flipped with it";
  }

  // A transform that computes on gray or RGB: refused at open, by name.
  std::shared_ptr<const TransformPipeline> rbc;
  ASSERT_TRUE(TransformPipeline::Parse(R"({"transform": {"__class_fullname__": "Compose",
      "p": 1.0, "transforms": [{"__class_fullname__": "RandomBrightnessContrast", "p": 1.0}]}})",
                                       &rbc)
                  .ok());
  o.transform = rbc;
  s = Loader::Open(tmp / "ds", o, &loader);
  EXPECT_EQ(s.code(), Status::Code::kInvalidArgument) << s.ToString();
  EXPECT_NE(s.message().find("are 7 channels of uint8, and the transform pipeline's "
                             "RandomBrightnessContrast computes on gray or RGB pixels"),
            std::string::npos)
      << s.ToString();

  // Mixed with an RGB image: the file that differs, and no gray advice (gray takes RGB only).
  Write(tmp / "src/images/3.png", cv::Mat(kH, kW, CV_8UC3, cv::Scalar(1, 2, 3)));
  Write(tmp / "src/masks/3.png", cv::Mat(kH, kW, CV_8UC1, cv::Scalar(0)));
  s = BuildDataset(Options(tmp / "src", tmp / "mixed", StoreMode::kEncoded), &r);
  EXPECT_EQ(s.code(), Status::Code::kBadInput) << s.ToString();
  EXPECT_NE(s.message().find(tmp / "src/images/3.png: its pixels are 3 channels of uint8, and "
                                   "the dataset's are 7 channels of uint8"),
            std::string::npos)
      << s.ToString();
  EXPECT_EQ(s.message().find("gray"), std::string::npos) << s.ToString();
}

TEST(TypedSamples, TiffsThatCannotKeepTheirChannelsOrPagesAreRefusedNamingTheFile) {
  TempDir tmp;
  // Reduced to 8 bits (depth = 8), an image is stored gray or RGB: 5 channels cannot be kept.
  WriteTiff(tmp / "five/images/a.tiff", MultiChannel(5, CV_16U, 0), {});
  BuildResult r;
  BuildOptions o = Options(tmp / "five", tmp / "o1", StoreMode::kEncoded);
  o.depth = 8;
  Status s = BuildDataset(o, &r);
  EXPECT_EQ(s.code(), Status::Code::kBadInput) << s.ToString();
  EXPECT_NE(s.message().find(tmp / "five/images/a.tiff"), std::string::npos) << s.ToString();
  EXPECT_NE(s.message().find("a 5-channel image reduced to 8 bits"), std::string::npos)
      << s.ToString();
  // gray of 5 channels: no luminance to take, whatever the depth.
  WriteTiff(tmp / "eight/images/a.tiff", MultiChannel(5, CV_8U, 0), {});
  for (const char* dir : {"five", "eight"}) {
    o = Options(tmp / dir, tmp / (std::string(dir) + "-gray"), StoreMode::kEncoded);
    o.gray = true;
    s = BuildDataset(o, &r);
    EXPECT_EQ(s.code(), Status::Code::kBadInput) << s.ToString();
    EXPECT_NE(s.message().find(std::string("a 5-channel ") + (dir[0] == 'f' ? "uint16" : "uint8") +
                               " image and"),
              std::string::npos)
        << s.ToString();
    EXPECT_NE(s.message().find("drop it to keep every channel"), std::string::npos) << s.ToString();
  }
  // JPEG re-encoding holds 1 or 3 channels: an 8-bit image of 5 is refused, not reduced.
  o = Options(tmp / "eight", tmp / "o-jpeg", StoreMode::kEncoded);
  o.jpeg_quality = 90;
  s = BuildDataset(o, &r);
  EXPECT_EQ(s.code(), Status::Code::kBadInput) << s.ToString();
  EXPECT_NE(s.message().find("a 5-channel 8-bit image and"), std::string::npos) << s.ToString();
  EXPECT_NE(s.message().find("JPEG holds 1 or 3 channels"), std::string::npos) << s.ToString();
  // Several pages: never the first one silently.
  std::string error;
  const std::string pages =
      testing::TiffBytes({MultiChannel(5, CV_16U, 0), MultiChannel(5, CV_16U, 1)}, {}, &error);
  ASSERT_FALSE(pages.empty()) << error;
  fs::create_directories(tmp / "pages/images");
  std::ofstream(tmp / "pages/images/a.tiff", std::ios::binary) << pages;
  s = BuildDataset(Options(tmp / "pages", tmp / "o3", StoreMode::kEncoded), &r);
  EXPECT_NE(s.message().find(tmp / "pages/images/a.tiff"), std::string::npos) << s.ToString();
  EXPECT_NE(s.message().find("a multi-page TIFF (2 pages)"), std::string::npos) << s.ToString();
}

// Issue 35: BuildOptions::pages_as_channels stacks a multi-page TIFF's pages as channels (a
// microscopy stack), which the loader gives back exactly; without it the file is refused.
TEST(TypedSamples, PagesAsChannelsStacksAMultiPageTiffAndTheLoaderGivesEveryChannel) {
  TempDir tmp;
  std::vector<cv::Mat> stacks;
  for (int i = 0; i < 2; ++i) {
    const cv::Mat p1 = MultiChannel(1, CV_32F, i), p2 = MultiChannel(2, CV_32F, i + 5),
                  p3 = MultiChannel(1, CV_32F, i + 9);
    testing::TiffWriteOptions o;
    o.planar = i == 1;
    std::string error;
    const std::string bytes = testing::TiffBytes({p1, p2, p3}, o, &error);
    ASSERT_FALSE(bytes.empty()) << error;
    fs::create_directories(tmp / "src/images");
    std::ofstream(tmp / ("src/images/" + std::to_string(i) + ".tiff"), std::ios::binary) << bytes;
    cv::Mat stack;
    cv::merge(std::vector<cv::Mat>{p1, p2, p3}, stack);
    stacks.push_back(stack);
  }
  BuildResult r;
  Status s = BuildDataset(Options(tmp / "src", tmp / "refused", StoreMode::kEncoded), &r);
  EXPECT_NE(s.message().find("a multi-page TIFF (3 pages)"), std::string::npos) << s.ToString();
  for (StoreMode store : {StoreMode::kEncoded, StoreMode::kRaw}) {
    SCOPED_TRACE(store == StoreMode::kRaw ? "raw" : "encoded");
    const std::string out = tmp / ("out" + std::to_string(int(store)));
    BuildOptions o = Options(tmp / "src", out, store);
    o.pages_as_channels = true;
    s = BuildDataset(o, &r);
    ASSERT_TRUE(s.ok()) << s.ToString();
    std::unique_ptr<Loader> loader;
    ASSERT_TRUE(Loader::Open(out, Sequential(2), &loader).ok());
    Batch b;
    s = loader->Next(&b);
    ASSERT_TRUE(s.ok()) << s.ToString();
    ASSERT_EQ(b.channels(), 4);
    for (int i = 0; i < 2; ++i) {
      EXPECT_EQ(cv::norm(FloatImage(b, i), stacks[i], cv::NORM_INF), 0) << i;
    }
  }
  // 8-bit pages: stacked when they make more than 4 channels (a typed uint8 dataset), refused
  // when they would fit gray or RGB (an 8-bit image of up to 4 channels is stored as one).
  std::string error;
  const cv::Mat e1 = MultiChannel(3, CV_8U, 1), e2 = MultiChannel(3, CV_8U, 2);
  const std::string eight = testing::TiffBytes({e1, e2}, {}, &error);
  ASSERT_FALSE(eight.empty()) << error;
  fs::create_directories(tmp / "eight/images");
  std::ofstream(tmp / "eight/images/a.tiff", std::ios::binary) << eight;
  BuildOptions eo = Options(tmp / "eight", tmp / "eight-out", StoreMode::kEncoded);
  eo.pages_as_channels = true;
  s = BuildDataset(eo, &r);
  ASSERT_TRUE(s.ok()) << s.ToString();
  {
    std::unique_ptr<Loader> loader;
    ASSERT_TRUE(Loader::Open(tmp / "eight-out", Sequential(1), &loader).ok());
    Batch b;
    s = loader->Next(&b);
    ASSERT_TRUE(s.ok()) << s.ToString();
    ASSERT_EQ(b.channels(), 6);
    cv::Mat stack;
    cv::merge(std::vector<cv::Mat>{e1, e2}, stack);
    EXPECT_EQ(cv::norm(FloatImage(b, 0), AsFloat(stack), cv::NORM_INF), 0);
  }
  const std::string four =
      testing::TiffBytes({MultiChannel(1, CV_8U, 1), MultiChannel(3, CV_8U, 2)}, {}, &error);
  ASSERT_FALSE(four.empty()) << error;
  fs::create_directories(tmp / "four/images");
  std::ofstream(tmp / "four/images/a.tiff", std::ios::binary) << four;
  eo = Options(tmp / "four", tmp / "four-out", StoreMode::kEncoded);
  eo.pages_as_channels = true;
  s = BuildDataset(eo, &r);
  EXPECT_EQ(s.code(), Status::Code::kBadInput) << s.ToString();
  EXPECT_NE(s.message().find("a TIFF of 2 pages of 4 8-bit channels in all"), std::string::npos)
      << s.ToString();
  // Pages of another size: the file and the page named.
  const std::string bad = testing::TiffBytes(
      {MultiChannel(1, CV_16U, 0), MultiChannel(1, CV_16U, 0)(cv::Rect(0, 0, kW - 1, kH)).clone()},
      {}, &error);
  fs::create_directories(tmp / "bad/images");
  std::ofstream(tmp / "bad/images/a.tiff", std::ios::binary) << bad;
  BuildOptions o = Options(tmp / "bad", tmp / "bad-out", StoreMode::kEncoded);
  o.pages_as_channels = true;
  s = BuildDataset(o, &r);
  EXPECT_NE(s.message().find(tmp / "bad/images/a.tiff"), std::string::npos) << s.ToString();
  EXPECT_NE(s.message().find("TIFF page 2 is 31x24 uint16"), std::string::npos) << s.ToString();
}

TEST(TypedSamples, GeometricTransformsRunAndPhotometricOnesAreRefusedByName) {
  TempDir tmp;
  const cv::Mat ct = CtSlice(5), ids = Instances(5);
  Write(tmp / "src/images/a.png", ct);
  Write(tmp / "src/masks/a.png", ids);
  BuildResult r;
  ASSERT_TRUE(BuildDataset(Options(tmp / "src", tmp / "ds", StoreMode::kEncoded), &r).ok());
  auto pipeline = [](const std::string& leaf) {
    std::shared_ptr<const TransformPipeline> p;
    const std::string spec = R"({"transform": {"__class_fullname__": "Compose", "p": 1.0,
        "transforms": [)" + leaf +
                             "]}}";
    EXPECT_TRUE(TransformPipeline::Parse(spec, &p).ok()) << spec;
    return p;
  };
  LoaderOptions o = Sequential(1);
  o.transform = pipeline(R"({"__class_fullname__": "HorizontalFlip", "p": 1.0},
      {"__class_fullname__": "Resize", "height": 12, "width": 16, "interpolation": 0,
       "p": 1.0})");
  std::unique_ptr<Loader> loader;
  Status s = Loader::Open(tmp / "ds", o, &loader);
  ASSERT_TRUE(s.ok()) << s.ToString();
  Batch b;
  ASSERT_TRUE(loader->Next(&b).ok());
  cv::Mat want, want_ids;
  cv::flip(ct, want, 1);
  cv::resize(want, want, cv::Size(16, 12), 0, 0, cv::INTER_NEAREST);
  cv::flip(ids, want_ids, 1);
  cv::resize(want_ids, want_ids, cv::Size(16, 12), 0, 0, cv::INTER_NEAREST);
  EXPECT_EQ(cv::norm(FloatImage(b, 0), AsFloat(want), cv::NORM_INF), 0);
  EXPECT_EQ(cv::norm(cv::Mat(12, 16, CV_16UC1, b.mask(0).data()), want_ids, cv::NORM_INF), 0);

  o.transform = pipeline(R"({"__class_fullname__": "RandomBrightnessContrast", "p": 1.0})");
  s = Loader::Open(tmp / "ds", o, &loader);
  EXPECT_EQ(s.code(), Status::Code::kInvalidArgument) << s.ToString();
  EXPECT_NE(s.message().find("RandomBrightnessContrast"), std::string::npos) << s.ToString();
  EXPECT_NE(s.message().find("uint16"), std::string::npos) << s.ToString();
  EXPECT_NE(s.message().find("depth"), std::string::npos) << s.ToString();

  o.transform = nullptr;
  o.channels = 3;
  s = Loader::Open(tmp / "ds", o, &loader);
  EXPECT_EQ(s.code(), Status::Code::kInvalidArgument) << s.ToString();
  EXPECT_NE(s.message().find("keep their channels"), std::string::npos) << s.ToString();
}

// The geometric transforms draw and resample a uint16 image as they do its 8-bit form: the same
// seed on v and on v * 257 gives outputs 257 apart, up to one 8-bit rounding step.
TEST(TypedSamples, GeometricTransformsMoveTypedPixelsAsTheyMoveEightBitOnes) {
  TempDir tmp;
  cv::Mat eight(kH, kW, CV_8UC1), sixteen;
  for (int y = 0; y < kH; ++y) {
    for (int x = 0; x < kW; ++x)
      eight.at<uint8_t>(y, x) = static_cast<uint8_t>((x * 37 + y * 11) % 256);
  }
  eight.convertTo(sixteen, CV_16U, 257);
  Write(tmp / "a/images/a.png", eight);
  Write(tmp / "b/images/a.png", sixteen);
  BuildOptions o8 = Options(tmp / "a", tmp / "ds8", StoreMode::kEncoded);
  o8.gray = true;
  BuildResult r;
  ASSERT_TRUE(BuildDataset(o8, &r).ok());
  ASSERT_TRUE(BuildDataset(Options(tmp / "b", tmp / "ds16", StoreMode::kRaw), &r).ok());
  const char* leaves[] = {
      R"({"__class_fullname__": "Rotate", "p": 1.0, "limit": [-40, 40], "interpolation": 1})",
      R"({"__class_fullname__": "Affine", "p": 1.0, "rotate": [-20, 20], "scale": [0.8, 1.2]})",
      R"({"__class_fullname__": "RandomResizedCrop", "p": 1.0, "size": [16, 20]})",
      R"({"__class_fullname__": "GridDistortion", "p": 1.0})",
      R"({"__class_fullname__": "ElasticTransform", "p": 1.0})",
      R"({"__class_fullname__": "RandomRotate90", "p": 1.0},
          {"__class_fullname__": "CenterCrop", "p": 1.0, "height": 20, "width": 20})",
      R"({"__class_fullname__": "PadIfNeeded", "p": 1.0, "min_height": 40, "min_width": 40,
          "border_mode": 4})",
  };
  for (const char* leaf : leaves) {
    SCOPED_TRACE(leaf);
    std::shared_ptr<const TransformPipeline> p;
    const std::string spec = std::string(R"({"transform": {"__class_fullname__": "Compose",
        "p": 1.0, "transforms": [)") +
                             leaf + "]}}";
    ASSERT_TRUE(TransformPipeline::Parse(spec, &p).ok()) << spec;
    LoaderOptions o = Sequential(1);
    o.transform = p;
    o.normalize = NormalizeMode::kCpuFloat32;
    o.mean_std = MeanStdSource::kIdentity;
    std::unique_ptr<Loader> a, b;
    Status s = Loader::Open(tmp / "ds8", o, &a);
    ASSERT_TRUE(s.ok()) << s.ToString();
    s = Loader::Open(tmp / "ds16", o, &b);
    ASSERT_TRUE(s.ok()) << s.ToString();
    for (int epoch = 0; epoch < 3; ++epoch) {
      Batch ba, bb;
      ASSERT_TRUE(a->Next(&ba).ok() && ba);
      ASSERT_TRUE(b->Next(&bb).ok() && bb);
      ASSERT_EQ(ba.height(), bb.height());
      ASSERT_EQ(ba.width(), bb.width());
      const cv::Mat want = FloatImage(ba, 0) * 257, got = FloatImage(bb, 0);
      EXPECT_LE(cv::norm(got, want, cv::NORM_INF), 257) << "epoch " << epoch;
      Batch end;
      ASSERT_TRUE(a->Next(&end).ok() && !end);
      ASSERT_TRUE(b->Next(&end).ok() && !end);
    }
  }
}

TEST(TypedSamples, ADatasetOfMixedDepthsIsAnErrorNamingTheFirstFileThatDiffers) {
  TempDir tmp;
  Write(tmp / "src/images/a.png", CtSlice(1));
  cv::Mat eight(kH, kW, CV_8UC1, cv::Scalar(7));
  Write(tmp / "src/images/b.png", eight);
  BuildResult r;
  const Status s = BuildDataset(Options(tmp / "src", tmp / "ds", StoreMode::kEncoded), &r);
  ASSERT_EQ(s.code(), Status::Code::kBadInput) << s.ToString();
  // (8-bit gray images are stored as 3 channels unless gray is asked: BuildOptions::gray.)
  EXPECT_NE(s.message().find(tmp / "src/images/b.png: its pixels are 3 channels of uint8, and the "
                                   "dataset's are 1 channel of uint16 (set by its first image, " +
                             tmp / "src/images/a.png"),
            std::string::npos)
      << s.ToString();
  EXPECT_NE(s.message().find("BuildOptions::depth = 8"), std::string::npos) << s.ToString();

  // Asked for: both stored as 8-bit.
  BuildOptions o = Options(tmp / "src", tmp / "ds8", StoreMode::kEncoded);
  o.depth = 8;
  ASSERT_TRUE(BuildDataset(o, &r).ok());
  std::unique_ptr<Dataset> ds;
  ASSERT_TRUE(Dataset::Open(tmp / "ds8", {}, &ds).ok());
  EXPECT_EQ(ds->info().sample_type, SampleType::kUint8);
}

TEST(TypedSamples, EightBitImagesWithInstanceMasksKeepTheIds) {
  TempDir tmp;
  cv::Mat rgb(kH, kW, CV_8UC3, cv::Scalar(10, 20, 30));
  Write(tmp / "src/images/a.png", rgb);
  Write(tmp / "src/masks/a.png", Instances(2));
  for (StoreMode store : {StoreMode::kEncoded, StoreMode::kRaw}) {
    const std::string out = tmp / ("ds" + std::to_string(int(store)));
    BuildResult r;
    ASSERT_TRUE(BuildDataset(Options(tmp / "src", out, store), &r).ok());
    std::unique_ptr<Loader> loader;
    LoaderOptions o = Sequential(1);
    o.augment.hflip = 1.0;
    const Status opened = Loader::Open(out, o, &loader);
    ASSERT_TRUE(opened.ok()) << opened.ToString();
    Batch b;
    ASSERT_TRUE(loader->Next(&b).ok());
    EXPECT_EQ(b.shape().image_type, SampleType::kUint8);
    EXPECT_EQ(b.shape().mask_type, SampleType::kUint16);
    cv::Mat want;
    cv::flip(Instances(2), want, 1);
    EXPECT_EQ(cv::norm(cv::Mat(kH, kW, CV_16UC1, b.mask(0).data()), want, cv::NORM_INF), 0);
    EXPECT_EQ(cv::norm(cv::Mat(kH, kW, CV_8UC3, b.image(0).data()), rgb, cv::NORM_INF), 0);
  }
}

// A MONAI config in the loader: the batch's images are its float32 output, sample for sample
// what TransformPipeline::ApplyPixels gives for the loader's (seed, epoch, index), on uint16 CT
// slices with uint16 instance masks and on 8-bit RGB images alike; the masks follow the
// spatial transforms with their ids. A config whose output size varies is refused at open with
// the MONAI transform that fixes it; a spatial transform that leaves the label behind too.
TEST(MonaiLoader, BatchesAreTheConfigsFloatOutputSampleForSample) {
  TempDir tmp;
  std::map<std::string, std::vector<std::pair<cv::Mat, cv::Mat>>> sources;  // by dataset
  for (int i = 0; i < 4; ++i) {
    sources["ds-ct"].emplace_back(CtSlice(i), Instances(i));
    Write(tmp / ("ct/images/" + std::to_string(i) + ".png"), sources["ds-ct"].back().first);
    Write(tmp / ("ct/masks/" + std::to_string(i) + ".png"), sources["ds-ct"].back().second);
    cv::Mat rgb(kH, kW, CV_8UC3), ids(kH, kW, CV_8UC1);
    cv::randu(rgb, 0, 256);
    cv::randu(ids, 0, 3);
    sources["ds-rgb"].emplace_back(rgb, ids);
    Write(tmp / ("rgb/images/" + std::to_string(i) + ".png"), rgb);
    Write(tmp / ("rgb/masks/" + std::to_string(i) + ".png"), ids);
  }
  BuildResult r;
  ASSERT_TRUE(BuildDataset(Options(tmp / "ct", tmp / "ds-ct", StoreMode::kEncoded), &r).ok());
  ASSERT_TRUE(BuildDataset(Options(tmp / "rgb", tmp / "ds-rgb", StoreMode::kEncoded), &r).ok());
  const nlohmann::json varying = nlohmann::json::array(
      {{{"_target_", "LoadImaged"}, {"keys", {"image", "label"}}},
       {{"_target_", "ScaleIntensityRanged"},
        {"keys", {"image"}},
        {"a_min", 0},
        {"a_max", 4095},
        {"b_min", 0.0},
        {"b_max", 1.0},
        {"clip", true}},
       {{"_target_", "RandFlipd"},
        {"keys", {"image", "label"}},
        {"prob", 0.5},
        {"spatial_axis", 1}},
       {{"_target_", "RandRotate90d"}, {"keys", {"image", "label"}}, {"prob", 0.5}},
       {{"_target_", "RandGaussianNoised"}, {"keys", {"image"}}, {"prob", 0.5}}});
  LoaderOptions o = Sequential(2);
  o.sampler.seed = 9;
  std::shared_ptr<const TransformPipeline> p;
  ASSERT_TRUE(TransformPipeline::Parse(varying.dump(), &p).ok());
  o.transform = p;
  std::unique_ptr<Loader> loader;
  Status s = Loader::Open(tmp / "ds-ct", o, &loader);
  EXPECT_EQ(s.code(), Status::Code::kInvalidArgument) << s.ToString();
  EXPECT_NE(s.message().find("RandRotate90d"), std::string::npos) << s.ToString();
  EXPECT_NE(s.message().find("ResizeWithPadOrCropd"), std::string::npos) << s.ToString();

  // Fixed by the last transform; on the way a crop sized by the label (each later step draws
  // for the size it gets) and a resampling affine map (the label nearest).
  nlohmann::json fixed = varying;
  const nlohmann::json crop = {{"_target_", "CropForegroundd"},
                               {"keys", {"image", "label"}},
                               {"source_key", "label"},
                               {"margin", 3}};
  fixed.insert(fixed.begin() + 1, crop);
  fixed.push_back({{"_target_", "RandAffined"},
                   {"keys", {"image", "label"}},
                   {"prob", 0.7},
                   {"rotate_range", 0.4},
                   {"scale_range", {{-0.1, 0.2}}},
                   {"mode", {"bilinear", "nearest"}}});
  fixed.push_back({{"_target_", "ResizeWithPadOrCropd"},
                   {"keys", {"image", "label"}},
                   {"spatial_size", {28, 28}}});
  s = TransformPipeline::Parse(fixed.dump(), &p);
  ASSERT_TRUE(s.ok()) << s.ToString();
  o.transform = p;
  for (const char* ds : {"ds-ct", "ds-rgb"}) {
    SCOPED_TRACE(ds);
    s = Loader::Open(tmp / ds, o, &loader);
    ASSERT_TRUE(s.ok()) << s.ToString();
    std::unique_ptr<Dataset> dataset;
    ASSERT_TRUE(Dataset::Open(tmp / ds, {}, &dataset).ok());
    const DatasetInfo& info = dataset->info();
    int samples = 0;
    for (int epoch = 0; epoch < 2; ++epoch) {
      for (Batch b; loader->Next(&b).ok() && b;) {
        samples += b.size();
        EXPECT_EQ(b.shape().image_type, SampleType::kFloat32);
        ASSERT_EQ(b.height(), 28);
        ASSERT_EQ(b.width(), 28);
        ASSERT_EQ(b.channels(), info.channels);
        for (int i = 0; i < b.size(); ++i) {
          const uint64_t index = b.indices()[i];
          ASSERT_LT(index, 4u);
          const cv::Mat& img = sources[ds][index].first;  // records in file order
          const cv::Mat& ids = sources[ds][index].second;
          const PixelsRef in{img.data, img.rows, img.cols, img.channels(), info.sample_type};
          const PixelsRef min{ids.data, ids.rows, ids.cols, 1, info.mask_type};
          OwnedPixels want, want_ids;
          ASSERT_TRUE(p->ApplyPixels(9, b.epoch(), index, in, &min, &want, &want_ids).ok());
          const cv::Mat w(28, 28, CV_32FC(info.channels), want.bytes.data());
          EXPECT_EQ(cv::norm(FloatImage(b, i), w, cv::NORM_INF), 0) << "index " << index;
          EXPECT_EQ(std::memcmp(b.mask(i).data(), want_ids.bytes.data(), want_ids.bytes.size()), 0)
              << "index " << index;
        }
      }
    }
    EXPECT_EQ(samples, 8);  // every record, both epochs: none failed
  }
  // keys without the label on a spatial transform, over a dataset with masks.
  nlohmann::json no_label = fixed;
  no_label[3]["keys"] = {"image"};  // RandFlipd
  ASSERT_TRUE(TransformPipeline::Parse(no_label.dump(), &p).ok());
  o.transform = p;
  s = Loader::Open(tmp / "ds-ct", o, &loader);
  EXPECT_EQ(s.code(), Status::Code::kInvalidArgument) << s.ToString();
  EXPECT_NE(s.message().find("without its label"), std::string::npos) << s.ToString();
}

// AsDiscreted(to_onehot=N) on the label: the DeviceLoader's masks are N float32 one-hot channels
// per sample ([n][N][h][w]), the one-hot of what ApplyPixels gives (ids through the transforms).
TEST(MonaiLoader, OneHotLabelsLeaveTheDeviceLoaderAsFloatChannels) {
  TempDir tmp;
  std::vector<std::pair<cv::Mat, cv::Mat>> src;
  for (int i = 0; i < 3; ++i) {
    cv::Mat ids(kH, kW, CV_8UC1);
    cv::randu(ids, 0, 3);
    src.emplace_back(CtSlice(i), ids);
    Write(tmp / ("ct/images/" + std::to_string(i) + ".png"), src.back().first);
    Write(tmp / ("ct/masks/" + std::to_string(i) + ".png"), ids);
  }
  BuildResult r;
  ASSERT_TRUE(BuildDataset(Options(tmp / "ct", tmp / "ds", StoreMode::kEncoded), &r).ok());
  const nlohmann::json config = nlohmann::json::array(
      {{{"_target_", "RandFlipd"}, {"keys", {"image", "label"}}, {"prob", 0.5}},
       {{"_target_", "AsDiscreted"}, {"keys", {"label"}}, {"to_onehot", 3}}});
  std::shared_ptr<const TransformPipeline> p;
  ASSERT_TRUE(TransformPipeline::Parse(config.dump(), &p).ok());
  EXPECT_EQ(p->label_classes(), 3);
  LoaderOptions o = Sequential(2);
  o.sampler.seed = 5;
  o.transform = p;
  DeviceOptions d;
  d.device = DeviceOptions::kCpu;
  std::unique_ptr<DeviceLoader> loader;
  Status s = DeviceLoader::Open(tmp / "ds", o, d, &loader);
  ASSERT_TRUE(s.ok()) << s.ToString();
  int samples = 0;
  for (TensorBatch b; (s = loader->Next(&b)).ok() && b;) {
    ASSERT_EQ(b.mask_classes(), 3);
    ASSERT_NE(b.masks(), nullptr);  // float32 one-hot
    const auto* onehot = static_cast<const float*>(b.masks());
    for (int i = 0; i < b.size(); ++i, ++samples) {
      const uint64_t index = b.indices()[i];
      const cv::Mat& img = src[index].first;
      const cv::Mat& ids = src[index].second;
      const PixelsRef in{img.data, kH, kW, 1, SampleType::kUint16};
      const PixelsRef in_ids{ids.data, kH, kW, 1, SampleType::kUint8};
      OwnedPixels want, want_ids;
      ASSERT_TRUE(p->ApplyPixels(5, b.epoch(), index, in, &in_ids, &want, &want_ids).ok());
      const size_t pixels = static_cast<size_t>(kH) * kW;
      for (size_t q = 0; q < pixels; ++q) {
        for (int c = 0; c < 3; ++c) {
          const float v = onehot[(static_cast<size_t>(i) * 3 + c) * pixels + q];
          ASSERT_EQ(v, want_ids.bytes[q] == c ? 1.0f : 0.0f) << index << " " << q << " " << c;
        }
      }
    }
  }
  ASSERT_TRUE(s.ok()) << s.ToString();
  EXPECT_EQ(samples, 3);
}

// num_samples: a batch of batch_size records holds num_samples crops of each, in a row, each
// what ApplyPixelsSamples gives for that record; a record that fails drops all its samples.
TEST(MonaiLoader, NumSamplesPutEveryRecordsCropsInTheBatch) {
  TempDir tmp;
  std::vector<std::pair<cv::Mat, cv::Mat>> src;
  for (int i = 0; i < 5; ++i) {
    cv::Mat ids = cv::Mat::zeros(kH, kW, CV_8UC1);
    ids(cv::Rect(3 + i, 4, 5, 3)).setTo(1);
    src.emplace_back(CtSlice(i), ids);
    Write(tmp / ("ct/images/" + std::to_string(i) + ".png"), src.back().first);
    Write(tmp / ("ct/masks/" + std::to_string(i) + ".png"), ids);
  }
  BuildResult r;
  ASSERT_TRUE(BuildDataset(Options(tmp / "ct", tmp / "ds", StoreMode::kEncoded), &r).ok());
  const nlohmann::json config = nlohmann::json::array(
      {{{"_target_", "ScaleIntensityRanged"},
        {"keys", {"image"}},
        {"a_min", 0},
        {"a_max", 4095},
        {"b_min", 0.0},
        {"b_max", 1.0}},
       {{"_target_", "RandCropByPosNegLabeld"},
        {"keys", {"image", "label"}},
        {"label_key", "label"},
        {"spatial_size", {8, 8}},
        {"num_samples", 3}},
       {{"_target_", "RandFlipd"}, {"keys", {"image", "label"}}, {"prob", 0.5}}});
  std::shared_ptr<const TransformPipeline> p;
  ASSERT_TRUE(TransformPipeline::Parse(config.dump(), &p).ok());
  LoaderOptions o = Sequential(2);
  o.sampler.seed = 4;
  o.transform = p;
  std::unique_ptr<Loader> loader;
  const Status s = Loader::Open(tmp / "ds", o, &loader);
  ASSERT_TRUE(s.ok()) << s.ToString();
  int batches = 0, samples = 0;
  for (Batch b; loader->Next(&b).ok() && b; ++batches) {
    ASSERT_EQ(b.size() % 3, 0);
    samples += b.size();
    for (int i = 0; i < b.size(); i += 3) {
      const uint64_t index = b.indices()[i];
      ASSERT_LT(index, 5u);
      const cv::Mat& img = src[index].first;
      const cv::Mat& ids = src[index].second;
      std::vector<OwnedPixels> want, want_ids;
      const PixelsRef in{img.data, kH, kW, 1, SampleType::kUint16};
      const PixelsRef in_ids{ids.data, kH, kW, 1, SampleType::kUint8};
      ASSERT_TRUE(p->ApplyPixelsSamples(4, b.epoch(), index, in, &in_ids, &want, &want_ids).ok());
      ASSERT_EQ(want.size(), 3u);
      for (int k = 0; k < 3; ++k) {
        EXPECT_EQ(b.indices()[i + k], index);
        const cv::Mat w(8, 8, CV_32FC1, want[k].bytes.data());
        EXPECT_EQ(cv::norm(FloatImage(b, i + k), w, cv::NORM_INF), 0) << index << " sample " << k;
        EXPECT_EQ(std::memcmp(b.mask(i + k).data(), want_ids[k].bytes.data(), 64), 0);
      }
    }
  }
  EXPECT_EQ(batches, 3);  // 5 records, 2 per batch
  EXPECT_EQ(samples, 15);
}

}  // namespace
}  // namespace dspipe
