// SPDX-License-Identifier: Apache-2.0
// Unusual but valid sources, handled as lib/codec/image.h documents: 16-bit, gray, gray+alpha,
// RGBA and palette PNG images; palette, 16-bit and gray-as-RGB masks; JPEG EXIF orientation.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <utility>

#include "convert/test_support.h"

namespace dspipe::testing {
namespace {

constexpr int kW = 40, kH = 30;

const std::vector<std::array<uint8_t, 3>> kVoc = {{0, 0, 0},     {128, 0, 0}, {0, 128, 0},
                                                  {128, 128, 0}, {0, 0, 128}, {128, 0, 128}};

cv::Mat Ids(int seed, int classes) {
  cv::Mat m(kH, kW, CV_8UC1);
  for (int y = 0; y < kH; ++y) {
    for (int x = 0; x < kW; ++x)
      m.at<uint8_t>(y, x) = static_cast<uint8_t>((x / 7 + y / 5 + seed) % classes);
  }
  return m;
}

struct Sample {
  std::string name;
  std::string image;  // file bytes
  std::string mask;
  cv::Mat want_rgb;  // what the loader must return (RGB)
  cv::Mat want_ids;
};

std::vector<Sample> MakeSamples() {
  std::vector<Sample> s;
  const cv::Mat rgb = Pattern(kW, kH, 1);
  cv::Mat gray, rgba, rgb16, gray16, ga, gray_rgb;
  cv::cvtColor(rgb, gray, cv::COLOR_RGB2GRAY);
  cv::cvtColor(gray, gray_rgb, cv::COLOR_GRAY2RGB);
  cv::cvtColor(rgb, rgba, cv::COLOR_RGB2RGBA);
  for (int y = 0; y < kH; ++y) {
    for (int x = 0; x < kW; ++x) rgba.at<cv::Vec4b>(y, x)[3] = static_cast<uint8_t>(y * 8);
  }
  // 16-bit: low bytes that would round differently from truncation.
  rgb.convertTo(rgb16, CV_16UC3, 256, 200);
  gray.convertTo(gray16, CV_16UC1, 256, 255);
  cv::Mat ga_rows(kH, kW, CV_8UC2);
  for (int y = 0; y < kH; ++y) {
    for (int x = 0; x < kW; ++x) ga_rows.at<cv::Vec2b>(y, x) = {gray.at<uint8_t>(y, x), 77};
  }
  const cv::Mat pal_idx = Ids(2, 6);
  cv::Mat pal_rgb(kH, kW, CV_8UC3);
  for (int y = 0; y < kH; ++y) {
    for (int x = 0; x < kW; ++x) {
      const auto& c = kVoc[pal_idx.at<uint8_t>(y, x)];
      pal_rgb.at<cv::Vec3b>(y, x) = {c[0], c[1], c[2]};
    }
  }
  cv::Mat ids16, ids_rgb, ids_rgba;
  Ids(3, 5).convertTo(ids16, CV_16U);
  cv::cvtColor(Ids(4, 4), ids_rgb, cv::COLOR_GRAY2RGB);
  cv::cvtColor(Ids(5, 3), ids_rgba, cv::COLOR_GRAY2RGBA);
  cv::Mat rgb_trunc = rgb.clone();  // 16-bit → 8-bit keeps the high byte: the original values
  s.push_back({"a_rgb16", MakePng(kW, kH, 16, 2, Rows16(rgb16)),
               MakePng(kW, kH, 8, 3, PackIndices(Ids(0, 6), 8), kVoc), rgb_trunc, Ids(0, 6)});
  s.push_back({"b_gray8", Encode(gray, ".png"), Encode(ids16, ".png"), gray_rgb, Ids(3, 5)});
  s.push_back({"c_rgba", Encode(rgba, ".png"), Encode(ids_rgb, ".png"), rgb, Ids(4, 4)});
  s.push_back({"d_palette", MakePng(kW, kH, 8, 3, PackIndices(pal_idx, 8), kVoc),
               Encode(ids_rgba, ".png"), pal_rgb, Ids(5, 3)});
  s.push_back({"e_gray16", MakePng(kW, kH, 16, 0, Rows16(gray16)),
               MakePng(kW, kH, 4, 3, PackIndices(Ids(1, 6), 4), kVoc), gray_rgb, Ids(1, 6)});
  s.push_back({"f_gray_alpha", MakePng(kW, kH, 8, 4, Rows8(ga_rows)), Encode(Ids(6, 2), ".png"),
               gray_rgb, Ids(6, 2)});
  return s;
}

TEST(Formats, PngVariantsAndMaskKinds) {
  TempDir tmp;
  const auto samples = MakeSamples();
  for (const Sample& s : samples) {
    WriteAll(tmp / ("src/images/" + s.name + ".png"), s.image);
    WriteAll(tmp / ("src/masks/" + s.name + ".png"), s.mask);
  }
  for (StoreMode store : {StoreMode::kEncoded, StoreMode::kRaw}) {
    BuildOptions o = Options(tmp / "src", tmp / (store == StoreMode::kRaw ? "raw" : "enc"));
    o.store = store;
    o.depth = 8;          // the 16-bit images: their high byte, asked for (else refused, below)
    o.drop_alpha = true;  // c_rgba and f_gray_alpha are transparent: asked for (else refused)
    BuildResult r;
    Status st = BuildDataset(o, &r);
    ASSERT_TRUE(st.ok()) << st.ToString();
    // Issue 35: the gray sources (b, e, f) replicated into 3 channels are said, with the fix.
    ASSERT_EQ(r.warnings.size(), 1u);
    EXPECT_TRUE(Contains(r.warnings[0],
                         ": 3 of 6 images are gray (1 channel) and the dataset has "
                         "3 channels"))
        << r.warnings[0];
    EXPECT_TRUE(Contains(r.warnings[0], "dsconvert build --gray")) << r.warnings[0];
    std::vector<Rec> recs;
    std::unique_ptr<Dataset> ds;
    ASSERT_TRUE(ReadRecords(o.output, &recs, &ds).ok());
    ASSERT_EQ(recs.size(), samples.size());
    EXPECT_EQ(ds->info().num_classes, 6);
    EXPECT_EQ(ds->info().height, kH);
    EXPECT_EQ(ds->info().channels, 3);
    for (size_t i = 0; i < samples.size(); ++i) {
      const Sample& s = samples[i];
      EXPECT_EQ(recs[i].header.channels, 3) << s.name;
      const cv::Mat got = DecodedImage(recs[i]);
      EXPECT_EQ(CountDiff(got, s.want_rgb), 0) << s.name;
      // ...and the same as a user's cv2.imread + BGR→RGB.
      const cv::Mat cv_rgb = ImreadRgb(tmp / ("src/images/" + s.name + ".png"));
      EXPECT_EQ(CountDiff(got, cv_rgb), 0) << s.name << " differs from cv::imread";
      EXPECT_EQ(CountDiff(DecodedMask(recs[i]), s.want_ids), 0) << s.name << " mask";
      if (store == StoreMode::kEncoded && s.name.find("16") == std::string::npos) {
        EXPECT_TRUE(recs[i].image == s.image) << s.name << ": encoded keeps the file bytes";
        // Masks other than plain 8-bit gray PNGs are re-encoded as 8-bit gray PNGs.
        EXPECT_EQ(recs[i].header.mask_codec, Codec::kPng);
        EXPECT_TRUE(codec::IsPlainGray8Png(AsBytes(recs[i].mask))) << s.name;
      }
    }
    // Gray output of the same sources.
    o.output += "-gray";
    o.gray = true;
    ASSERT_TRUE(BuildDataset(o, &r).ok());
    EXPECT_TRUE(r.warnings.empty()) << r.warnings[0];
    ASSERT_TRUE(ReadRecords(o.output, &recs).ok());
    for (size_t i = 0; i < samples.size(); ++i) {
      cv::Mat want;
      cv::cvtColor(samples[i].want_rgb, want, cv::COLOR_RGB2GRAY);
      EXPECT_EQ(CountDiff(DecodedImage(recs[i]), want), 0) << samples[i].name << " gray";
    }
  }
}

// Issue 35: 8-bit images are stored RGB or gray, so an alpha channel is not kept. An opaque one
// (every alpha 255) holds nothing and goes without a word; a transparent pixel is refused,
// naming the file and the first such pixel, unless drop_alpha asks for the colour channels.
TEST(Formats, TransparentPixelsAreRefusedUnlessDropAlphaIsAsked) {
  TempDir tmp;
  const cv::Mat rgb = Pattern(kW, kH, 3);
  cv::Mat rgba;
  cv::cvtColor(rgb, rgba, cv::COLOR_RGB2RGBA);  // Encode takes RGB(A)
  WriteAll(tmp / "src/images/a_opaque.png", Encode(rgba, ".png"));
  rgba.at<cv::Vec4b>(2, 5)[3] = 254;
  WriteAll(tmp / "src/images/b_one_transparent.png", Encode(rgba, ".png"));
  for (StoreMode store : {StoreMode::kEncoded, StoreMode::kRaw}) {
    const std::string name = store == StoreMode::kRaw ? "raw" : "enc";
    BuildOptions o = Options(tmp / "src", tmp / name);
    o.store = store;
    BuildResult r;
    Status s = BuildDataset(o, &r);
    EXPECT_EQ(s.code(), Status::Code::kBadInput) << s.ToString();
    EXPECT_TRUE(Contains(s.message(),
                         "b_one_transparent.png: an alpha channel with transparent "
                         "pixels (the first at row 2, column 5)"))
        << s.ToString();
    EXPECT_TRUE(Contains(s.message(), "pass BuildOptions::drop_alpha = true")) << s.ToString();
    EXPECT_TRUE(Contains(s.path(), "b_one_transparent.png")) << s.path();
    // Skipped, the opaque one is a record; asked for, both are, holding the colour channels.
    o.output = tmp / (name + "-skip");
    o.on_error = OnError::kSkip;
    ASSERT_TRUE(BuildDataset(o, &r).ok());
    EXPECT_EQ(r.records, 1u);
    EXPECT_EQ(r.skipped, 1u);
    o.output = tmp / (name + "-drop");
    o.on_error = OnError::kFail;
    o.drop_alpha = true;
    s = BuildDataset(o, &r);
    ASSERT_TRUE(s.ok()) << s.ToString();
    std::vector<Rec> recs;
    ASSERT_TRUE(ReadRecords(o.output, &recs).ok());
    ASSERT_EQ(recs.size(), 2u);
    for (const Rec& rec : recs) {
      EXPECT_EQ(rec.header.channels, 3);
      EXPECT_EQ(CountDiff(DecodedImage(rec), rgb), 0);
    }
  }
}

// numpy.percentile(values, q), linear interpolation, from every value.
double NumpyPercentile(std::vector<float> v, double q) {
  std::sort(v.begin(), v.end());
  const double pos = static_cast<double>(v.size() - 1) * (q / 100.0);
  const auto lo = static_cast<size_t>(std::floor(pos));
  const size_t hi = std::min(lo + 1, v.size() - 1);
  const double t = pos - static_cast<double>(lo), a = v[lo], b = v[hi];
  return t >= 0.5 ? b - (b - a) * (1 - t) : a + (b - a) * t;
}

// Issue 35: float32 datasets get the 0.5th / 99.5th percentiles too (they had none): within
// 2^-11 of the value of numpy's over every pixel, exact where the values are few distinct ones;
// the same after a cancelled build resumed (the bins go through the stored build state) and
// for one-shard builds assembled (AssembleDataset merges the bins).
TEST(Formats, Float32PercentilesAreNumpysWithinABin) {
  TempDir tmp;
  std::mt19937 rng(7);
  std::normal_distribution<float> mr(300.f, 120.f);  // an MR-like channel, some negative
  const float levels[] = {-1000.5f, 0.f, 3.25f, 77.f};
  std::vector<float> all[2];
  for (int i = 0; i < 6; ++i) {
    const int part = i < 3 ? 0 : 1;
    cv::Mat img(kH, kW, CV_32FC1);
    for (int y = 0; y < kH; ++y) {
      for (int x = 0; x < kW; ++x) {
        img.at<float>(y, x) = part == 0 ? mr(rng) : levels[(x + y + i) % 4];
      }
    }
    WriteAll(tmp / ("src" + std::to_string(part) + "/images/" + std::to_string(i) + ".tiff"),
             Encode(img, ".tiff"));
    all[part].insert(all[part].end(), img.begin<float>(), img.end<float>());
  }
  for (int part = 0; part < 2; ++part) {
    SCOPED_TRACE(part == 0 ? "normal values" : "four levels");
    const std::string src = tmp / ("src" + std::to_string(part));
    auto check = [&](const std::string& path, const char* how) {
      std::unique_ptr<Dataset> ds;
      ASSERT_TRUE(Dataset::Open(path, DatasetOpenOptions{}, &ds).ok()) << how;
      const DatasetInfo& info = ds->info();
      ASSERT_EQ(info.percentile_00_5.size(), 1u) << how;
      ASSERT_EQ(info.percentile_99_5.size(), 1u) << how;
      for (auto [q, got] :
           {std::pair{0.5, info.percentile_00_5[0]}, std::pair{99.5, info.percentile_99_5[0]}}) {
        const double want = NumpyPercentile(all[part], q);
        if (part == 1) {
          EXPECT_EQ(got, want) << how << " " << q << ": four values, each alone in its bin";
        } else {
          EXPECT_NEAR(got, want, std::ldexp(std::abs(want), -11)) << how << " " << q;
          EXPECT_NE(got, 0.0);
        }
      }
    };
    BuildOptions o = Options(src, tmp / ("whole" + std::to_string(part)));
    BuildResult r;
    ASSERT_TRUE(BuildDataset(o, &r).ok());
    check(o.output, "one build");
    // Cancelled after two records (a commit each), then resumed.
    o.output = tmp / ("resumed" + std::to_string(part));
    o.commit_bytes = 1;
    int calls = 0;
    o.progress = [&](uint64_t, uint64_t) { ++calls; };
    o.cancelled = [&] { return calls > 2; };
    ASSERT_EQ(BuildDataset(o, &r).code(), Status::Code::kCancelled);
    o.cancelled = nullptr;
    o.resume = true;
    ASSERT_TRUE(BuildDataset(o, &r).ok());
    check(o.output, "resumed");
    // Two one-shard builds, assembled.
    BuildOptions sh = Options(src, tmp / ("assembled" + std::to_string(part)));
    sh.shards = 2;
    for (int s = 0; s < 2; ++s) {
      sh.shard_index = s;
      ASSERT_TRUE(BuildDataset(sh, &r).ok());
    }
    AssembleResult ar;
    ASSERT_TRUE(AssembleDataset(sh.output, &ar).ok());
    check(sh.output, "assembled");
  }
}

TEST(Formats, JpegExifOrientationGivesTheRotatedShape) {
  TempDir tmp;
  const cv::Mat rgb = Pattern(64, 48, 2);  // stored landscape, displayed portrait
  const std::string jpg =
      WithExifOrientation(Encode(rgb, ".jpg", {cv::IMWRITE_JPEG_QUALITY, 92}), 6);
  WriteAll(tmp / "src/images/rot.jpg", jpg);
  const cv::Mat ref = ImreadRgb(tmp / "src/images/rot.jpg");
  ASSERT_EQ(ref.cols, 48) << "OpenCV did not honour the EXIF orientation";
  ASSERT_EQ(ref.rows, 64);
  cv::Mat mask(64, 48, CV_8UC1, cv::Scalar(0));
  mask(cv::Rect(0, 0, 48, 20)) = 1;
  WriteAll(tmp / "src/masks/rot.png", Encode(mask, ".png"));
  for (StoreMode store : {StoreMode::kEncoded, StoreMode::kRaw}) {
    BuildOptions o = Options(tmp / "src", tmp / (store == StoreMode::kRaw ? "raw" : "enc"));
    o.store = store;
    BuildResult r;
    Status s = BuildDataset(o, &r);
    ASSERT_TRUE(s.ok()) << s.ToString();
    std::vector<Rec> recs;
    std::unique_ptr<Dataset> ds;
    ASSERT_TRUE(ReadRecords(o.output, &recs, &ds).ok());
    ASSERT_EQ(recs.size(), 1u);
    EXPECT_EQ(recs[0].header.height, 64u);
    EXPECT_EQ(recs[0].header.width, 48u);
    EXPECT_EQ(ds->info().height, 64);
    EXPECT_EQ(ds->info().width, 48);
    EXPECT_EQ(CountDiff(DecodedImage(recs[0]), ref), 0);
    EXPECT_EQ(CountDiff(DecodedMask(recs[0]), mask), 0);
    if (store == StoreMode::kEncoded) {
      EXPECT_TRUE(recs[0].image == jpg);
    }
  }
  // A mask in the stored (unrotated) orientation does not fit the displayed image.
  WriteAll(tmp / "src/masks/rot.png", Encode(cv::Mat(48, 64, CV_8UC1, cv::Scalar(0)), ".png"));
  BuildResult r;
  Status s = BuildDataset(Options(tmp / "src", tmp / "bad"), &r);
  EXPECT_EQ(s.code(), Status::Code::kBadInput) << s.ToString();
  EXPECT_TRUE(Contains(s.message(), "mask is 64x48 but its image")) << s.ToString();
}

TEST(Formats, MixedSizesGiveVaryingShape) {
  TempDir tmp;
  WriteAll(tmp / "src/images/a.png", Encode(Pattern(20, 10), ".png"));
  WriteAll(tmp / "src/images/b.png", Encode(Pattern(30, 12), ".png"));
  BuildResult r;
  BuildOptions o = Options(tmp / "src", tmp / "out");
  ASSERT_TRUE(BuildDataset(o, &r).ok());
  std::vector<Rec> recs;
  std::unique_ptr<Dataset> ds;
  ASSERT_TRUE(ReadRecords(o.output, &recs, &ds).ok());
  EXPECT_EQ(ds->info().height, 0) << "sizes vary: shape 0";
  EXPECT_EQ(ds->info().width, 0);
  EXPECT_EQ(recs[1].header.width, 30u);
  EXPECT_EQ(CountDiff(DecodedImage(recs[1]), Pattern(30, 12)), 0);
}

// Issue 35: an image deeper than 8 bits is never reduced silently. Without BuildOptions::depth
// each kind is refused naming the file, the reason and the option; with depth = 8 the integer
// ones are stored as their high byte (re-encoded, so the dataset holds what it says) and a
// float image is still refused (no reduction is right without knowing its range).
TEST(Formats, DeepImagesAreKeptAndReducedOnlyWhenAsked) {
  TempDir tmp;
  cv::Mat g16(kH, kW, CV_16UC1);
  for (int y = 0; y < kH; ++y) {
    for (int x = 0; x < kW; ++x) g16.at<uint16_t>(y, x) = static_cast<uint16_t>(x * 100 + y * 37);
  }
  cv::Mat f32;
  g16.convertTo(f32, CV_32F, 1.0 / 4095, -0.5);
  struct Deep {
    std::string file, bytes, what;
    SampleType type;
    cv::Mat pixels;
  };
  const std::vector<Deep> deep = {
      {"ct.png", Encode(g16, ".png"), "16-bit image (1 channel)", SampleType::kUint16, g16},
      {"ct.tiff", Encode(g16, ".tiff"), "16-bit image (1 channel)", SampleType::kUint16, g16},
      {"ct.pgm", Encode(g16, ".pgm"), "16-bit image (1 channel)", SampleType::kUint16, g16},
      {"mr.tiff", Encode(f32, ".tiff"), "32-bit float image (1 channel)", SampleType::kFloat32,
       f32},
  };
  cv::Mat high(kH, kW, CV_8UC1);  // what depth = 8 stores: v >> 8
  for (int y = 0; y < kH; ++y) {
    for (int x = 0; x < kW; ++x) high.at<uint8_t>(y, x) = g16.at<uint16_t>(y, x) >> 8;
  }
  for (const Deep& d : deep) {
    SCOPED_TRACE(d.file);
    const std::string src = tmp / ("src-" + d.file);
    WriteAll(src + "/images/" + d.file, d.bytes);
    BuildResult r;
    BuildOptions o = Options(src, tmp / ("out-" + d.file));
    // Kept as they are (the default), in either store: typed records, a version-2 manifest.
    for (StoreMode store : {StoreMode::kEncoded, StoreMode::kRaw}) {
      o.store = store;
      o.output = tmp / ("kept-" + std::to_string(int(store)) + d.file);
      ASSERT_TRUE(BuildDataset(o, &r).ok());
      std::unique_ptr<Dataset> ds;
      std::vector<Rec> recs;
      ASSERT_TRUE(ReadRecords(o.output, &recs, &ds).ok());
      EXPECT_EQ(ds->info().sample_type, d.type);
      EXPECT_EQ(ds->info().channels, 1) << "one channel stays one (no gray copied into RGB)";
      ASSERT_EQ(recs.size(), 1u);
      EXPECT_EQ(recs[0].header.image_type, d.type);
      codec::DecodeRequest q;
      q.codec = recs[0].header.image_codec;
      q.payload = {reinterpret_cast<const uint8_t*>(recs[0].image.data()), recs[0].image.size()};
      q.type = d.type;
      q.channels = 1;
      q.height = kH, q.width = kW;
      cv::Mat got;
      codec::DecodedImage di;
      ASSERT_TRUE(codec::DecodePayload(q, &got, &di).ok());
      EXPECT_EQ(cv::norm(got, d.pixels, cv::NORM_INF), 0) << "every value as in the file";
      if (store == StoreMode::kEncoded) {
        EXPECT_EQ(recs[0].image, d.bytes) << "the file's own bytes";
      }
    }
    // Asked for: the high byte of the integer ones, in either store; float refused.
    o.gray = true;
    for (StoreMode store : {StoreMode::kEncoded, StoreMode::kRaw}) {
      o.depth = 8;
      o.store = store;
      o.output = tmp / ("out8-" + std::to_string(int(store)) + d.file);
      const Status s = BuildDataset(o, &r);
      if (d.what.find("float") != std::string::npos) {
        ASSERT_EQ(s.code(), Status::Code::kBadInput) << s.ToString();
        EXPECT_TRUE(Contains(s.message(), "no reduction of float samples")) << s.ToString();
        EXPECT_TRUE(Contains(s.message(), src + "/images/" + d.file + ": a 32-bit float image"))
            << s.ToString();
        continue;
      }
      ASSERT_TRUE(s.ok()) << s.ToString();
      std::vector<Rec> recs;
      ASSERT_TRUE(ReadRecords(o.output, &recs).ok());
      ASSERT_EQ(recs.size(), 1u);
      const cv::Mat got = DecodedImage(recs[0]);
      EXPECT_EQ(got.type(), CV_8UC1);
      // libspng (PNG) and OpenCV (TIFF, PGM) both keep v >> 8.
      EXPECT_EQ(CountDiff(got, high), 0);
      if (store == StoreMode::kEncoded) {
        EXPECT_EQ(recs[0].header.image_codec, Codec::kPng) << "re-encoded as 8-bit PNG";
      }
    }
  }
  EXPECT_EQ(ValidateBuildOptions([&] {
              BuildOptions o = Options(tmp / "a", tmp / "b");
              o.depth = 16;
              return o;
            }())
                .code(),
            Status::Code::kInvalidArgument);
}

}  // namespace
}  // namespace dspipe::testing
