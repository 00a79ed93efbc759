// SPDX-License-Identifier: Apache-2.0
// BuildDataset round trips: what goes in comes out (pixels, masks, order, manifest), for every
// source kind and the main options.
#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <numeric>
#include <set>

#include "convert/test_support.h"

namespace dspipe::testing {
namespace {

constexpr int kCount = 12, kW = 64, kH = 48, kClasses = 3;

class BuildTest : public ::testing::Test {
 protected:
  void SetUp() override {
    Synth(src_, kCount, kW, kH, kClasses);
    images_ = ListDir(src_ + "/images");
    masks_ = ListDir(src_ + "/masks");
    ASSERT_EQ(images_.size(), static_cast<size_t>(kCount));
  }
  Status Build(BuildOptions o, BuildResult* r = nullptr) {
    BuildResult local;
    return BuildDataset(o, r ? r : &local);
  }
  TempDir tmp_;
  std::string src_ = tmp_ / "src";
  std::vector<std::string> images_, masks_;
};

// Per-channel mean/std over all pixels of the images, computed directly.
void ExpectStats(const DatasetInfo& info, const std::vector<cv::Mat>& imgs) {
  const int c = imgs[0].channels();
  ASSERT_TRUE(info.has_stats);
  ASSERT_EQ(info.mean.size(), static_cast<size_t>(c));
  std::vector<double> sum(c, 0), sq(c, 0);
  double n = 0;
  for (const cv::Mat& m : imgs) {
    for (int y = 0; y < m.rows; ++y) {
      for (int x = 0; x < m.cols; ++x) {
        for (int k = 0; k < c; ++k) {
          const double v = m.ptr<uint8_t>(y)[x * c + k];
          sum[k] += v;
          sq[k] += v * v;
        }
      }
    }
    n += m.total();
  }
  for (int k = 0; k < c; ++k) {
    const double mean = sum[k] / n, sd = std::sqrt(sq[k] / n - mean * mean);
    EXPECT_NEAR(info.mean[k], mean, 1e-6) << "channel " << k;
    EXPECT_NEAR(info.std[k], sd, 1e-6) << "channel " << k;
  }
}

int MaxMaskId(const std::vector<std::string>& masks) {
  double mx = 0;
  for (const auto& m : masks) {
    double v = 0;
    cv::minMaxLoc(ImreadMask(m), nullptr, &v);
    mx = std::max(mx, v);
  }
  return static_cast<int>(mx);
}

class RoundTrip : public BuildTest, public ::testing::WithParamInterface<StoreMode> {};

TEST_P(RoundTrip, PixelsMasksAndManifest) {
  BuildOptions o = Options(src_, tmp_ / "out.lmdb");
  o.store = GetParam();
  BuildResult r;
  Status s = Build(o, &r);
  ASSERT_TRUE(s.ok()) << s.ToString();
  EXPECT_EQ(r.records, 12u);
  EXPECT_EQ(r.sources, 12u);
  EXPECT_EQ(r.skipped, 0u);
  EXPECT_GT(r.bytes_read, 0u);
  std::vector<Rec> recs;
  std::unique_ptr<Dataset> ds;
  ASSERT_TRUE(ReadRecords(o.output, &recs, &ds).ok());
  ASSERT_EQ(recs.size(), 12u);
  std::vector<cv::Mat> srcs;
  SynthOptions so;
  so.width = kW;
  so.height = kH;
  so.classes = kClasses;
  so.seed = 1;
  for (int i = 0; i < kCount; ++i) {
    const Rec& rec = recs[i];
    EXPECT_EQ(rec.header.height, static_cast<uint32_t>(kH));
    EXPECT_EQ(rec.header.width, static_cast<uint32_t>(kW));
    EXPECT_EQ(rec.header.channels, 3);
    EXPECT_EQ(rec.header.label, -1);
    const cv::Mat want = ImreadRgb(images_[i]);
    srcs.push_back(want);
    EXPECT_EQ(CountDiff(DecodedImage(rec), want), 0) << images_[i];
    EXPECT_EQ(CountDiff(DecodedMask(rec), ImreadMask(masks_[i])), 0) << masks_[i];
    SynthSample sample;
    ASSERT_TRUE(SynthesizeSample(so, i, &sample).ok());
    EXPECT_EQ(CountDiff(DecodedImage(rec), cv::Mat(kH, kW, CV_8UC3, sample.rgb.data())), 0);
    if (GetParam() == StoreMode::kEncoded) {
      EXPECT_EQ(rec.header.image_codec, Codec::kPng);
      EXPECT_TRUE(rec.image == ReadAll(images_[i])) << "encoded store must keep the file bytes";
      EXPECT_TRUE(rec.mask == ReadAll(masks_[i])) << "plain gray masks are stored as they are";
    } else {
      EXPECT_EQ(rec.header.image_codec, Codec::kRawZstd);
      EXPECT_EQ(rec.header.mask_codec, Codec::kRawZstd);
    }
  }
  const DatasetInfo& info = ds->info();
  EXPECT_EQ(info.kind, DatasetKind::kDspipe);
  EXPECT_EQ(info.count, 12u);
  EXPECT_EQ(info.store, GetParam() == StoreMode::kEncoded ? "encoded" : "raw");
  EXPECT_EQ(info.height, kH);
  EXPECT_EQ(info.width, kW);
  EXPECT_EQ(info.channels, 3);
  EXPECT_TRUE(info.has_masks);
  EXPECT_FALSE(info.has_labels);
  EXPECT_EQ(info.num_classes, MaxMaskId(masks_) + 1);
  EXPECT_GE(info.num_classes, 2);
  ExpectStats(info, srcs);
  VerifyResult vr;
  ASSERT_TRUE(VerifyDataset(o.output, {}, &vr).ok());
  EXPECT_EQ(vr.records, 12u);
  EXPECT_EQ(vr.bad, 0u);
}

INSTANTIATE_TEST_SUITE_P(Store, RoundTrip, ::testing::Values(StoreMode::kEncoded, StoreMode::kRaw),
                         [](const auto& p) {
                           return p.param == StoreMode::kEncoded ? "Encoded" : "Raw";
                         });

class Resize : public BuildTest, public ::testing::WithParamInterface<std::pair<int, int>> {};

TEST_P(Resize, ImagesAreaOrLinearMasksNearest) {
  const auto [w, h] = GetParam();
  for (StoreMode store : {StoreMode::kEncoded, StoreMode::kRaw}) {
    BuildOptions o = Options(src_, tmp_ / ("out" + std::to_string(int(store))));
    o.resize_width = w;
    o.resize_height = h;
    o.store = store;
    ASSERT_TRUE(Build(o).ok());
    std::vector<Rec> recs;
    std::unique_ptr<Dataset> ds;
    ASSERT_TRUE(ReadRecords(o.output, &recs, &ds).ok());
    ASSERT_EQ(recs.size(), 12u);
    EXPECT_EQ(ds->info().width, w);
    EXPECT_EQ(ds->info().height, h);
    std::vector<cv::Mat> resized;
    for (int i = 0; i < kCount; ++i) {
      EXPECT_EQ(recs[i].header.width, static_cast<uint32_t>(w));
      EXPECT_EQ(recs[i].header.height, static_cast<uint32_t>(h));
      cv::Mat want, want_mask;
      cv::resize(ImreadRgb(images_[i]), want, cv::Size(w, h), 0, 0,
                 w < kW ? cv::INTER_AREA : cv::INTER_LINEAR);
      resized.push_back(want);
      EXPECT_EQ(CountDiff(DecodedImage(recs[i]), want), 0) << images_[i];
      const cv::Mat src_mask = ImreadMask(masks_[i]);
      cv::resize(src_mask, want_mask, cv::Size(w, h), 0, 0, cv::INTER_NEAREST_EXACT);
      const cv::Mat got = DecodedMask(recs[i]);
      EXPECT_EQ(CountDiff(got, want_mask), 0) << masks_[i];
      std::set<int> src_ids(src_mask.begin<uint8_t>(), src_mask.end<uint8_t>());
      for (auto it = got.begin<uint8_t>(); it != got.end<uint8_t>(); ++it) {
        ASSERT_TRUE(src_ids.count(*it)) << "mask value " << int(*it) << " not in the source";
      }
    }
    ExpectStats(ds->info(), resized);  // stats describe the stored (resized) images
  }
}

INSTANTIATE_TEST_SUITE_P(Sizes, Resize,
                         ::testing::Values(std::make_pair(32, 24), std::make_pair(96, 72),
                                           std::make_pair(40, 60)),
                         [](const auto& p) {
                           return std::to_string(p.param.first) + "x" +
                                  std::to_string(p.param.second);
                         });

TEST_F(BuildTest, NumClassesCountsEveryMaskNotTheStatsSample) {
  // One mask (not among the sampled ones) holds a class no other mask has.
  cv::Mat mask = ImreadMask(masks_[kCount - 1]);
  mask.at<uint8_t>(3, 5) = 200;
  WriteAll(masks_[kCount - 1], Encode(mask, ".png"));
  BuildOptions o = Options(src_, tmp_ / "out");
  o.stats_sample = 1;  // stats from image 0 only
  BuildResult r;
  ASSERT_TRUE(Build(o, &r).ok());
  std::unique_ptr<Dataset> ds;
  ASSERT_TRUE(Dataset::Open(o.output, {}, &ds).ok());
  EXPECT_EQ(ds->info().num_classes, 201);
  EXPECT_TRUE(r.warnings.empty()) << r.warnings[0];
}

bool HasWarning(const BuildResult& r, const std::string& part) {
  for (const std::string& w : r.warnings) {
    if (w.find(part) != std::string::npos) return true;
  }
  return false;
}

TEST_F(BuildTest, BinaryMasksSavedAs0And255AreNamedAndMaskMapStoresThemAsClasses) {
  std::vector<cv::Mat> binary;
  for (const std::string& m : masks_) {
    cv::Mat b = ImreadMask(m) > 0;  // 0 or 255
    WriteAll(m, Encode(b, ".png"));
    binary.push_back(b);
  }
  BuildOptions plain = Options(src_, tmp_ / "plain");
  BuildResult r;
  ASSERT_TRUE(Build(plain, &r).ok());
  ASSERT_EQ(r.warnings.size(), 1u);
  EXPECT_TRUE(HasWarning(r, "hold only the ids 0 and 255")) << r.warnings[0];
  EXPECT_TRUE(HasWarning(r, "mask_map={255: 1}")) << r.warnings[0];
  EXPECT_TRUE(HasWarning(r, "--mask-map 255:1")) << r.warnings[0];
  std::unique_ptr<Dataset> ds;
  ASSERT_TRUE(Dataset::Open(plain.output, {}, &ds).ok());
  EXPECT_EQ(ds->info().num_classes, 256);

  for (StoreMode store : {StoreMode::kEncoded, StoreMode::kRaw}) {
    BuildOptions o = Options(src_, tmp_ / ("mapped" + std::to_string(int(store))));
    o.store = store;
    o.mask_map = "255:1";
    BuildResult mr;
    ASSERT_TRUE(Build(o, &mr).ok());
    EXPECT_TRUE(mr.warnings.empty()) << mr.warnings[0];
    std::vector<Rec> recs;
    std::unique_ptr<Dataset> mds;
    ASSERT_TRUE(ReadRecords(o.output, &recs, &mds).ok());
    EXPECT_EQ(mds->info().num_classes, 2);
    for (int i = 0; i < kCount; ++i) {
      EXPECT_EQ(CountDiff(DecodedMask(recs[i]), binary[i] / 255), 0) << masks_[i];
    }
  }
}

TEST_F(BuildTest, MaskMapRewritesOnlyTheIdsItNames) {
  BuildOptions o = Options(src_, tmp_ / "out");
  o.mask_map = "2:7, 0:9";
  ASSERT_TRUE(Build(o).ok());
  std::vector<Rec> recs;
  std::unique_ptr<Dataset> ds;
  ASSERT_TRUE(ReadRecords(o.output, &recs, &ds).ok());
  for (int i = 0; i < kCount; ++i) {
    cv::Mat want = ImreadMask(masks_[i]).clone();
    for (auto it = want.begin<uint8_t>(); it != want.end<uint8_t>(); ++it) {
      *it = *it == 2 ? 7 : (*it == 0 ? 9 : *it);
    }
    EXPECT_EQ(CountDiff(DecodedMask(recs[i]), want), 0) << masks_[i];
  }
  EXPECT_EQ(ds->info().num_classes, 10);
}

TEST_F(BuildTest, ABadMaskMapIsRefusedNamingTheOption) {
  for (const char* bad : {"255", "300:1", "1:-1", "1:2,1:3", "a:b", "1:2:3", "1:2,"}) {
    BuildOptions o = Options(src_, tmp_ / "out");
    o.mask_map = bad;
    const Status s = Build(o);
    EXPECT_EQ(s.code(), Status::Code::kInvalidArgument) << bad;
    EXPECT_NE(s.message().find("mask_map"), std::string::npos) << s.message();
    EXPECT_FALSE(fs::exists(o.output)) << bad;
  }
}

TEST_F(BuildTest, JpegMasksDrawAWarning) {
  for (const std::string& m : masks_) {
    const std::string jpg = m.substr(0, m.size() - 4) + ".jpg";
    WriteAll(jpg, Encode(ImreadMask(m), ".jpg"));
    fs::remove(m);
  }
  BuildOptions o = Options(src_, tmp_ / "out");
  BuildResult r;
  ASSERT_TRUE(Build(o, &r).ok());
  EXPECT_TRUE(HasWarning(r, std::to_string(kCount) + " masks are JPEG files"));
  EXPECT_TRUE(HasWarning(r, "save the masks as PNG"));
}

TEST_F(BuildTest, GrayStoresOneChannel) {
  for (StoreMode store : {StoreMode::kEncoded, StoreMode::kRaw}) {
    BuildOptions o = Options(src_, tmp_ / ("gray" + std::to_string(int(store))));
    o.gray = true;
    o.store = store;
    ASSERT_TRUE(Build(o).ok());
    std::vector<Rec> recs;
    std::unique_ptr<Dataset> ds;
    ASSERT_TRUE(ReadRecords(o.output, &recs, &ds).ok());
    EXPECT_EQ(ds->info().channels, 1);
    std::vector<cv::Mat> grays;
    for (int i = 0; i < kCount; ++i) {
      EXPECT_EQ(recs[i].header.channels, 1);
      grays.push_back(ImreadRgb(images_[i], /*gray=*/true));
      EXPECT_EQ(CountDiff(DecodedImage(recs[i]), grays.back()), 0) << images_[i];
      EXPECT_EQ(CountDiff(DecodedMask(recs[i]), ImreadMask(masks_[i])), 0);
    }
    ExpectStats(ds->info(), grays);
  }
}

// Which source file each record holds (encoded store keeps the bytes).
std::vector<int> SourceOrder(const std::vector<Rec>& recs, const std::vector<std::string>& files) {
  std::map<std::string, int> by_bytes;
  for (size_t i = 0; i < files.size(); ++i) by_bytes[ReadAll(files[i])] = static_cast<int>(i);
  std::vector<int> order;
  for (const Rec& r : recs) {
    auto it = by_bytes.find(r.image);
    order.push_back(it == by_bytes.end() ? -1 : it->second);
  }
  return order;
}

TEST_F(BuildTest, ShuffleIsASeededPermutation) {
  auto build = [&](const std::string& name, bool shuffle, uint64_t seed) {
    BuildOptions o = Options(src_, tmp_ / name);
    o.shuffle = shuffle;
    o.seed = seed;
    EXPECT_TRUE(Build(o).ok());
    std::vector<Rec> recs;
    EXPECT_TRUE(ReadRecords(o.output, &recs).ok());
    for (const Rec& r : recs) {  // image and mask move together
      const int i = SourceOrder({r}, images_)[0];
      EXPECT_TRUE(i >= 0 && r.mask == ReadAll(masks_[i]));
    }
    return SourceOrder(recs, images_);
  };
  std::vector<int> identity(kCount);
  std::iota(identity.begin(), identity.end(), 0);
  EXPECT_EQ(build("plain", false, 0), identity);
  const std::vector<int> a = build("a", true, 7), a2 = build("a2", true, 7),
                         b = build("b", true, 8);
  std::vector<int> sorted = a;
  std::sort(sorted.begin(), sorted.end());
  EXPECT_EQ(sorted, identity) << "not a permutation";
  EXPECT_NE(a, identity);
  EXPECT_EQ(a, a2) << "same seed, different order";
  EXPECT_NE(a, b) << "different seeds, same order";
}

// Issue 40: batch["index"] leads back to its file. Shuffled, sharded, a bad file skipped and the
// build cancelled and resumed: each record's source entry names the file whose bytes it holds,
// the skipped file is in no entry.
TEST_F(BuildTest, EachRecordNamesItsSourceFileThroughShuffleShardsSkipAndResume) {
  const std::string bad = src_ + "/images/zz_bad.png";
  WriteAll(bad, "not a png");
  BuildOptions o = Options(src_, tmp_ / "sources");
  o.shuffle = true;
  o.seed = 5;
  o.shards = 2;
  o.on_error = OnError::kSkip;
  o.commit_bytes = 1;
  int calls = 0;
  o.progress = [&](uint64_t, uint64_t) { ++calls; };
  o.cancelled = [&] { return calls > 5; };
  ASSERT_EQ(Build(o).code(), Status::Code::kCancelled);
  o.cancelled = nullptr;
  o.resume = true;
  BuildResult r;
  const Status built = Build(o, &r);
  ASSERT_TRUE(built.ok()) << built.ToString();
  ASSERT_EQ(r.records, static_cast<uint64_t>(kCount));
  std::vector<std::string> sources;
  const Status read = ReadRecordSources(o.output, &sources);
  ASSERT_TRUE(read.ok()) << read.ToString();
  std::vector<Rec> recs;
  ASSERT_TRUE(ReadRecords(o.output, &recs).ok());
  ASSERT_EQ(sources.size(), recs.size());
  std::set<std::string> seen;
  for (size_t i = 0; i < recs.size(); ++i) {
    EXPECT_NE(sources[i], bad) << i;
    ASSERT_TRUE(fs::exists(sources[i])) << i << ": " << sources[i];
    EXPECT_EQ(ReadAll(sources[i]), recs[i].image) << "record " << i << " is not " << sources[i];
    seen.insert(sources[i]);
  }
  EXPECT_EQ(seen.size(), recs.size());
}

TEST_F(BuildTest, ShardsHoldTheSameRecordsInTheSameOrder) {
  std::vector<uint32_t> crcs1;
  for (int shards : {1, 2, 3}) {
    BuildOptions o = Options(src_, tmp_ / ("s" + std::to_string(shards)));
    o.shards = shards;
    o.store = StoreMode::kRaw;
    BuildResult r;
    Status s = Build(o, &r);
    ASSERT_TRUE(s.ok()) << s.ToString();
    EXPECT_EQ(r.records, 12u);
    std::vector<Rec> recs;
    std::unique_ptr<Dataset> ds;
    s = ReadRecords(o.output, &recs, &ds);
    ASSERT_TRUE(s.ok()) << s.ToString();
    EXPECT_EQ(ds->info().kind, shards == 1 ? DatasetKind::kDspipe : DatasetKind::kSharded);
    EXPECT_EQ(ds->info().count, 12u);
    EXPECT_EQ(ds->info().height, kH);
    EXPECT_TRUE(ds->info().has_stats);
    std::vector<uint32_t> crcs;
    for (const Rec& rec : recs) crcs.push_back(rec.header.crc);
    if (shards == 1) {
      crcs1 = crcs;
    } else {
      EXPECT_EQ(crcs, crcs1) << shards << " shards";
      EXPECT_TRUE(fs::exists(o.output + "/manifest.json"));
      for (int k = 0; k < shards; ++k) {
        char name[32];
        std::snprintf(name, sizeof name, "shard-%05d.lmdb", k);
        EXPECT_TRUE(fs::exists(o.output + "/" + name + "/data.mdb")) << name;
      }
    }
    VerifyResult vr;
    ASSERT_TRUE(VerifyDataset(o.output, {}, &vr).ok());
    EXPECT_EQ(vr.records, 12u);
    EXPECT_EQ(vr.bad, 0u);
  }
}

TEST_F(BuildTest, OneShardOfASetOpensOnItsOwn) {
  BuildOptions o = Options(src_, tmp_ / "sharded");
  o.shards = 3;
  ASSERT_TRUE(Build(o).ok());
  std::vector<Rec> all;
  ASSERT_TRUE(ReadRecords(o.output, &all).ok());
  size_t seen = 0;
  for (int k = 0; k < 3; ++k) {
    char name[32];
    std::snprintf(name, sizeof name, "/shard-%05d.lmdb", k);
    std::vector<Rec> part;
    Status s = ReadRecords(o.output + name, &part);
    ASSERT_TRUE(s.ok()) << s.ToString();
    for (const Rec& r : part) {
      ASSERT_LT(seen, all.size());
      EXPECT_EQ(r.header.crc, all[seen++].header.crc);
    }
  }
  EXPECT_EQ(seen, all.size());
}

TEST_F(BuildTest, MasksAreOptional) {
  fs::remove_all(src_ + "/masks");
  BuildOptions o = Options(src_, tmp_ / "out");
  ASSERT_TRUE(Build(o).ok());
  std::vector<Rec> recs;
  std::unique_ptr<Dataset> ds;
  ASSERT_TRUE(ReadRecords(o.output, &recs, &ds).ok());
  ASSERT_EQ(recs.size(), 12u);
  EXPECT_FALSE(ds->info().has_masks);
  for (const Rec& r : recs) {
    EXPECT_EQ(r.header.mask_codec, Codec::kNone);
    EXPECT_TRUE(r.mask.empty());
  }
}

TEST_F(BuildTest, JpegImagesPairWithPngMasksByStem) {
  const std::string jsrc = tmp_ / "jsrc";
  Synth(jsrc, 6, kW, kH, kClasses, "jpg");
  BuildOptions o = Options(jsrc, tmp_ / "out");
  ASSERT_TRUE(Build(o).ok());
  std::vector<Rec> recs;
  ASSERT_TRUE(ReadRecords(o.output, &recs).ok());
  const auto imgs = ListDir(jsrc + "/images"), masks = ListDir(jsrc + "/masks");
  ASSERT_EQ(recs.size(), 6u);
  for (size_t i = 0; i < 6; ++i) {
    EXPECT_EQ(recs[i].header.image_codec, Codec::kJpeg);
    EXPECT_TRUE(recs[i].image == ReadAll(imgs[i]));
    EXPECT_EQ(CountDiff(DecodedImage(recs[i]), ImreadRgb(imgs[i])), 0);
    EXPECT_EQ(CountDiff(DecodedMask(recs[i]), ImreadMask(masks[i])), 0);
  }
}

TEST_F(BuildTest, UnicodeAndSpacesInNames) {
  const std::string u = tmp_ / "ünï cödé src";
  const std::vector<std::string> names = {"Bild ü 1", "画像 2", "a b  c", "émoji 🙂", "x,y;z"};
  for (size_t i = 0; i < names.size(); ++i) {
    WriteAll(u + "/images/" + names[i] + ".png", ReadAll(images_[i]));
    WriteAll(u + "/masks/" + names[i] + ".png", ReadAll(masks_[i]));
  }
  BuildOptions o = Options(u, tmp_ / "out put ü.lmdb");
  BuildResult r;
  Status s = Build(o, &r);
  ASSERT_TRUE(s.ok()) << s.ToString();
  std::vector<Rec> recs;
  ASSERT_TRUE(ReadRecords(o.output, &recs).ok());
  ASSERT_EQ(recs.size(), names.size());
  // Sorted bytewise by file name; each record is its own file's image and mask.
  std::vector<std::string> sorted = ListDir(u + "/images");
  for (size_t i = 0; i < recs.size(); ++i) {
    EXPECT_TRUE(recs[i].image == ReadAll(sorted[i])) << sorted[i];
    const std::string mask = u + "/masks/" + fs::path(sorted[i]).filename().string();
    EXPECT_TRUE(recs[i].mask == ReadAll(mask)) << mask;
  }
}

TEST_F(BuildTest, CsvWithHeaderQuotesRelativePathsAndLabels) {
  const std::string dir = tmp_ / "csv";
  const std::vector<std::string> img_names = {"pics/img, one.png", "pics/two \"q\".png",
                                              "pics/drei ü.png", "other dir/4.png"};
  const std::vector<std::string> mask_names = {"labels/m 1.png", "labels/m,2.png", "labels/m3.png",
                                               "labels/m4.png"};
  const std::vector<int> labels = {2, 0, 5, 1};
  std::string csv = "image,mask,label\n";
  auto quote = [](const std::string& s) {
    std::string q = "\"";
    for (char c : s) q += c == '"' ? std::string("\"\"") : std::string(1, c);
    return q + "\"";
  };
  // Rows in a non-sorted order: the CSV's order is the record order.
  const std::vector<int> rows = {2, 0, 3, 1};
  for (int i : rows) {
    WriteAll(dir + "/" + img_names[i], ReadAll(images_[i]));
    WriteAll(dir + "/" + mask_names[i], ReadAll(masks_[i]));
    csv +=
        quote(img_names[i]) + "," + quote(mask_names[i]) + "," + std::to_string(labels[i]) + "\r\n";
  }
  WriteAll(dir + "/list.csv", csv);
  BuildOptions o = Options(dir + "/list.csv", tmp_ / "out");
  Status s = Build(o);
  ASSERT_TRUE(s.ok()) << s.ToString();
  std::vector<Rec> recs;
  std::unique_ptr<Dataset> ds;
  ASSERT_TRUE(ReadRecords(o.output, &recs, &ds).ok());
  ASSERT_EQ(recs.size(), rows.size());
  EXPECT_TRUE(ds->info().has_labels);
  EXPECT_TRUE(ds->info().has_masks);
  for (size_t k = 0; k < rows.size(); ++k) {
    const int i = rows[k];
    EXPECT_TRUE(recs[k].image == ReadAll(images_[i])) << "row " << k;
    EXPECT_TRUE(recs[k].mask == ReadAll(masks_[i])) << "row " << k;
    EXPECT_EQ(recs[k].header.label, labels[i]) << "row " << k;
  }
}

TEST_F(BuildTest, CsvWithoutHeaderOrLabels) {
  const std::string dir = tmp_ / "csv2";
  std::string csv;
  for (int i = 0; i < 3; ++i) {
    const std::string n = "f" + std::to_string(i);
    WriteAll(dir + "/i/" + n + ".png", ReadAll(images_[i]));
    WriteAll(dir + "/m/" + n + ".png", ReadAll(masks_[i]));
    csv += "i/" + n + ".png,m/" + n + ".png\n";
  }
  WriteAll(dir + "/list.csv", csv);
  BuildOptions o = Options(dir + "/list.csv", tmp_ / "out");
  ASSERT_TRUE(Build(o).ok());
  std::vector<Rec> recs;
  std::unique_ptr<Dataset> ds;
  ASSERT_TRUE(ReadRecords(o.output, &recs, &ds).ok());
  ASSERT_EQ(recs.size(), 3u) << "the first row is data when it is not a header";
  EXPECT_FALSE(ds->info().has_labels);
  for (int i = 0; i < 3; ++i) EXPECT_TRUE(recs[i].image == ReadAll(images_[i]));
}

TEST_F(BuildTest, CsvErrorsNameTheLine) {
  const std::string dir = tmp_ / "csv3";
  WriteAll(dir + "/a.png", ReadAll(images_[0]));
  struct Case {
    std::string csv, reason;
  };
  for (const Case& c : {Case{"image,mask,label\na.png,,x7\n", ":2: label 'x7'"},
                        Case{"a.png,,1,extra\n", ":1: expected image,mask[,label]"},
                        Case{"\"a.png,\n", "CSV parse error"}}) {
    WriteAll(dir + "/list.csv", c.csv);
    BuildOptions o = Options(dir + "/list.csv", tmp_ / "out");
    Status s = Build(o);
    EXPECT_EQ(s.code(), Status::Code::kBadInput) << s.ToString();
    EXPECT_TRUE(Contains(s.message(), dir + "/list.csv")) << s.ToString();
    EXPECT_TRUE(Contains(s.message(), c.reason)) << s.ToString();
    fs::remove_all(tmp_ / "out");
  }
}

TEST_F(BuildTest, ImageFolderGivesLabelsAndClassNames) {
  const std::string dir = tmp_ / "if";
  const std::map<std::string, std::vector<int>> classes = {
      {"cat", {0, 1}}, {"dog", {2}}, {"zebra fish", {3, 4, 5}}};
  for (const auto& [name, idx] : classes) {
    for (int i : idx)
      WriteAll(dir + "/" + name + "/" + std::to_string(i) + ".png", ReadAll(images_[i]));
  }
  WriteAll(dir + "/.hidden/x.png", ReadAll(images_[6]));  // ignored
  WriteAll(dir + "/notes.txt", "not a class");            // a file, not a class folder
  BuildOptions o = Options(dir, tmp_ / "out");
  Status s = Build(o);
  ASSERT_TRUE(s.ok()) << s.ToString();
  std::vector<Rec> recs;
  std::unique_ptr<Dataset> ds;
  ASSERT_TRUE(ReadRecords(o.output, &recs, &ds).ok());
  ASSERT_EQ(recs.size(), 6u);
  EXPECT_TRUE(ds->info().has_labels);
  EXPECT_FALSE(ds->info().has_masks);
  EXPECT_EQ(ds->info().class_names, (std::vector<std::string>{"cat", "dog", "zebra fish"}));
  const std::vector<int> want_label = {0, 0, 1, 2, 2, 2};
  for (int i = 0; i < 6; ++i) {
    EXPECT_EQ(recs[i].header.label, want_label[i]) << i;
    EXPECT_TRUE(recs[i].image == ReadAll(images_[i])) << i;
    EXPECT_TRUE(recs[i].mask.empty());
  }
  // Issue 40 item 14: an empty class folder would be a label with no samples (torchvision's
  // ImageFolder refuses it too): refused, naming the folder and its label.
  fs::create_directories(dir + "/bird");
  o.output = tmp_ / "out-empty";
  s = Build(o);
  EXPECT_EQ(s.code(), Status::Code::kBadInput) << s.ToString();
  EXPECT_TRUE(Contains(s.message(), dir + "/bird: an empty class folder: it would be label 0 (bird)"))
      << s.ToString();
  EXPECT_TRUE(Contains(s.message(), "pass BuildOptions::allow_empty_classes = true to keep it"))
      << s.ToString();
  EXPECT_FALSE(fs::exists(o.output)) << "a refused source leaves no output";
  // allow_empty_classes keeps it as label 0 with no samples; the others move up by one.
  o.allow_empty_classes = true;
  s = Build(o);
  ASSERT_TRUE(s.ok()) << s.ToString();
  ASSERT_TRUE(ReadRecords(o.output, &recs, &ds).ok());
  ASSERT_EQ(recs.size(), 6u);
  EXPECT_EQ(ds->info().class_names, (std::vector<std::string>{"bird", "cat", "dog", "zebra fish"}));
  for (int i = 0; i < 6; ++i) EXPECT_EQ(recs[i].header.label, want_label[i] + 1) << i;
}

// Issue 40 item 8: BuildOptions::cancelled (Python's Ctrl-C) stops the build after the record
// in hand, keeping every record made with its cursor; the message names how far it got and the
// resume call, and resume finishes the same dataset a build without the stop makes.
TEST_F(BuildTest, ACancelledBuildKeepsItsRecordsAndResumes) {
  BuildOptions o = Options(src_, tmp_ / "cancelled");
  o.commit_bytes = 1;  // a commit per record
  int calls = 0;
  o.progress = [&](uint64_t, uint64_t) { ++calls; };
  o.cancelled = [&] { return calls > 4; };  // the start call, then four records
  Status s = Build(o);
  ASSERT_EQ(s.code(), Status::Code::kCancelled) << s.ToString();
  EXPECT_TRUE(Contains(s.message(), "build interrupted at ")) << s.ToString();
  EXPECT_TRUE(Contains(s.message(), "build stopped after 4 records (kept); rerun with "
                                    "BuildOptions::resume = true and the same options"))
      << s.ToString();
  EXPECT_FALSE(fs::exists(o.output + "/manifest.json"));
  o.cancelled = nullptr;
  o.resume = true;
  BuildResult r;
  ASSERT_TRUE(Build(o, &r).ok());
  EXPECT_EQ(r.resumed_from, 4u);
  BuildOptions whole = Options(src_, tmp_ / "whole");
  ASSERT_TRUE(Build(whole).ok());
  ExpectSameRecords(o.output, whole.output);
}

TEST_F(BuildTest, ThreadCountDoesNotChangeTheOutputAndProgressEndsAtTotal) {
  std::vector<uint32_t> first;
  for (int threads : {1, 2, 4}) {
    BuildOptions o = Options(src_, tmp_ / ("t" + std::to_string(threads)));
    o.threads = threads;
    o.store = StoreMode::kRaw;
    o.commit_bytes = 20000;  // several commits
    std::vector<std::pair<uint64_t, uint64_t>> calls;
    o.progress = [&](uint64_t done, uint64_t total) { calls.emplace_back(done, total); };
    ASSERT_TRUE(Build(o).ok());
    ASSERT_GE(calls.size(), 2u);
    for (size_t i = 1; i < calls.size(); ++i) EXPECT_GE(calls[i].first, calls[i - 1].first);
    EXPECT_EQ(calls.back(), std::make_pair(uint64_t{12}, uint64_t{12}));
    std::vector<Rec> recs;
    ASSERT_TRUE(ReadRecords(o.output, &recs).ok());
    std::vector<uint32_t> crcs;
    for (const Rec& r : recs) crcs.push_back(r.header.crc);
    if (first.empty()) first = crcs;
    EXPECT_EQ(crcs, first) << threads << " threads";
  }
}

}  // namespace
}  // namespace dspipe::testing
