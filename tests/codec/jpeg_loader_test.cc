// SPDX-License-Identifier: Apache-2.0
// The JPEG decode router end to end: a real ImageFolder of JPEGs (odd sizes, 4:2:0, one
// progressive, one EXIF-rotated) built by BuildDataset and read by dspipe::Loader with the
// classification pipelines (random resized crop + flip, and the validation centre crop), the
// region decode against the full decode in the same process; the decode paths counted in the
// loader's stats; and dsconvert build's --max-side and --jpeg-quality.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "codec/image.h"
#include "codec/jpeg_decode.h"
#include "codec/jpeg_test_images.h"
#include "codec/test_images.h"
#include "dspipe/convert.h"
#include "dspipe/dataset.h"
#include "dspipe/loader.h"
#include "profile/profile.h"

namespace dspipe::codec {
namespace {

namespace fs = std::filesystem;
using dspipe::testing::AsBytes;
using dspipe::testing::EncodeJpeg;
using dspipe::testing::NaturalImage;

std::string FreshDir(const std::string& name) {
  const fs::path dir =
      fs::path(DSPIPE_BINARY_DIR) / "test-tmp" / (name + "-" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  return dir.string();
}

void WriteFile(const fs::path& p, const std::string& bytes) {
  fs::create_directories(p.parent_path());
  std::ofstream(p, std::ios::binary) << bytes;
}

// 12 JPEGs in 3 class folders; returns the built dataset's path.
std::string JpegDataset(const std::string& root) {
  for (int i = 0; i < 12; ++i) {
    const int w = 200 + 37 * (i % 4), h = 150 + 23 * (i % 3);
    std::string jpeg =
        EncodeJpeg(NaturalImage(w, h, 100 + static_cast<uint64_t>(i)), {.progressive = i == 5});
    if (i == 7) jpeg = dspipe::testing::WithExifOrientation(jpeg, 6);
    WriteFile(fs::path(root) / "src" / ("c" + std::to_string(i % 3)) / (std::to_string(i) + ".jpg"),
              jpeg);
  }
  BuildOptions b;
  b.source = root + "/src";
  b.output = root + "/data.lmdb";
  BuildResult r;
  const Status s = BuildDataset(b, &r);
  EXPECT_TRUE(s.ok()) << s.ToString();
  return b.output;
}

struct Loaded {
  std::vector<std::vector<uint8_t>> images, masks;
  std::vector<std::vector<float>> normalized;
  std::vector<DecodePathSummary> paths;
};

// Two epochs of batches with the region decode on or off.
// With `transform` set, that pipeline instead of `aug`'s.
Loaded Load(const std::string& db, const AugmentOptions& aug, bool region, JpegScales scales,
            const std::string& transform = "") {
  SetJpegRegionDecode(region);
  SetPngRegionDecode(region);
  SetJpegScales(scales);
  LoaderOptions o;
  o.batch_size = 4;
  o.threads = 2;
  o.height = 64;
  o.width = 48;
  o.channels = 3;
  o.augment = aug;
  if (!transform.empty()) {
    const Status p = TransformPipeline::Parse(transform, &o.transform);
    EXPECT_TRUE(p.ok()) << p.ToString();
  }
  o.normalize = NormalizeMode::kCpuFloat32;
  o.mean = {120, 120, 120};
  o.std = {60, 60, 60};
  std::unique_ptr<Loader> loader;
  Status s = Loader::Open(db, o, &loader);
  EXPECT_TRUE(s.ok()) << s.ToString();
  Loaded run;
  if (!s.ok()) return run;
  for (uint64_t epoch = 0; epoch < 2; ++epoch) {
    loader->set_epoch(epoch);
    Batch b;
    while (true) {
      s = loader->Next(&b);
      EXPECT_TRUE(s.ok()) << s.ToString();
      if (!s.ok() || !b) break;
      const size_t n = static_cast<size_t>(b.size()) * b.shape().image_bytes();
      run.images.emplace_back(b.images(), b.images() + n);
      run.normalized.emplace_back(b.normalized(), b.normalized() + n);
      if (b.masks() != nullptr) {
        const size_t m = static_cast<size_t>(b.size()) * b.shape().mask_bytes();
        run.masks.emplace_back(b.masks(), b.masks() + m);
      }
    }
  }
  run.paths = loader->stats().DecodePaths();
  SetJpegRegionDecode(true);
  SetPngRegionDecode(true);
  SetJpegScales(JpegScales::kSimd);
  return run;
}

uint64_t Count(const Loaded& r, DecodePath p) {
  for (const DecodePathSummary& s : r.paths) {
    if (s.path == p) return s.count;
  }
  return 0;
}

// Mean |diff| of the uint8 batches of two runs of the same size.
double MeanAbsDiff(const Loaded& a, const Loaded& b) {
  double sum = 0, n = 0;
  for (size_t i = 0; i < a.images.size(); ++i) {
    for (size_t k = 0; k < a.images[i].size(); ++k) {
      sum += std::abs(int(a.images[i][k]) - int(b.images[i][k]));
      ++n;
    }
  }
  return n > 0 ? sum / n : 0;
}

TEST(JpegLoader, RegionDecodeGivesTheFullDecodesBatches) {
  const std::string root = FreshDir("jpeg-loader");
  const std::string db = JpegDataset(root);
  AugmentOptions train;
  train.crop_scale_min = 0.08;
  train.hflip = 0.5;
  AugmentOptions val;
  val.resize_shorter = 72;
  for (const AugmentOptions& aug : {train, val}) {
    const Loaded full = Load(db, aug, false, JpegScales::kSimd);
    ASSERT_FALSE(full.images.empty());
    EXPECT_EQ(Count(full, DecodePath::kFull), 24u);  // 12 samples x 2 epochs, all decoded whole
    // Region decode at full scale: the same batches, byte for byte (uint8 and float32).
    const Loaded roi = Load(db, aug, true, JpegScales::kNone);
    EXPECT_EQ(roi.images, full.images);
    EXPECT_EQ(roi.normalized, full.normalized);
    EXPECT_EQ(Count(roi, DecodePath::kProgressive), 2u);  // sample 5, in each epoch
    EXPECT_GT(Count(roi, DecodePath::kRoi), 0u);
    // With the DCT scales (the default): crops at least twice the output decode scaled; the
    // pixels stay within what a resize allows (mean |diff| over everything).
    const Loaded scaled = Load(db, aug, true, JpegScales::kSimd);
    EXPECT_GT(Count(scaled, DecodePath::kRoiScaled) + Count(scaled, DecodePath::kScaled), 0u);
    ASSERT_EQ(scaled.images.size(), full.images.size());
    EXPECT_LT(MeanAbsDiff(scaled, full), 3.0);
  }
  fs::remove_all(root);
}

std::string Compose(const std::string& list) {
  return R"({"__class_fullname__": "Compose", "transforms": [)" + list + "]}";
}

// The transform pipeline's leading crop / resize is what tells the router which region and
// scale to decode (loader/sample.cc, the decode call site): for each kind of leading group,
// the region decode at full scale gives the whole decode's batches byte for byte, the DCT
// scales stay within a resize's tolerance, and PNG records are decoded whole.
TEST(JpegLoader, TransformPipelinesGetRegionAndScaledDecodes) {
  const std::string root = FreshDir("jpeg-transform");
  const std::string db = JpegDataset(root);
  const std::vector<std::string> pipelines = {
      Compose(R"({"__class_fullname__": "RandomResizedCrop", "p": 1, "size": [64, 48],
                  "scale": [0.08, 1.0]},
                 {"__class_fullname__": "HorizontalFlip", "p": 0.5},
                 {"__class_fullname__": "Affine", "p": 1, "rotate": [-10, 10]})"),
      Compose(R"({"__class_fullname__": "SmallestMaxSize", "p": 1, "max_size": 72},
                 {"__class_fullname__": "RandomCrop", "p": 1, "height": 64, "width": 48},
                 {"__class_fullname__": "VerticalFlip", "p": 0.5})"),
      Compose(R"({"__class_fullname__": "CenterCrop", "p": 1, "height": 140, "width": 100},
                 {"__class_fullname__": "Resize", "p": 1, "height": 64, "width": 48},
                 {"__class_fullname__": "RandomBrightnessContrast", "p": 1})"),
      Compose(R"({"__class_fullname__": "LongestMaxSize", "p": 1, "max_size": 96},
                 {"__class_fullname__": "CenterCrop", "p": 1, "height": 64, "width": 48,
                  "pad_if_needed": true})"),
  };
  const AugmentOptions none;
  for (const std::string& t : pipelines) {
    SCOPED_TRACE(t);
    const Loaded full = Load(db, none, false, JpegScales::kSimd, t);
    ASSERT_FALSE(full.images.empty());
    EXPECT_EQ(Count(full, DecodePath::kFull), 24u);
    const Loaded roi = Load(db, none, true, JpegScales::kNone, t);
    EXPECT_EQ(roi.images, full.images);
    EXPECT_EQ(roi.normalized, full.normalized);
    EXPECT_GT(Count(roi, DecodePath::kRoi), 0u);
    const Loaded scaled = Load(db, none, true, JpegScales::kSimd, t);
    EXPECT_GT(Count(scaled, DecodePath::kRoiScaled) + Count(scaled, DecodePath::kScaled), 0u);
    ASSERT_EQ(scaled.images.size(), full.images.size());
    EXPECT_LT(MeanAbsDiff(scaled, full), 3.0);
  }
  // resize_shorter is the pipeline SmallestMaxSize + CenterCrop(pad_if_needed), written out.
  AugmentOptions val;
  val.resize_shorter = 72;
  const Loaded sugar = Load(db, val, true, JpegScales::kSimd);
  const Loaded spelled = Load(db, none, true, JpegScales::kSimd,
                              Compose(R"({"__class_fullname__": "SmallestMaxSize", "p": 1,
                                          "max_size": 72, "interpolation": 1},
                                         {"__class_fullname__": "CenterCrop", "p": 1,
                                          "height": 64, "width": 48, "pad_if_needed": true})"));
  EXPECT_EQ(sugar.images, spelled.images);
  EXPECT_EQ(sugar.paths.size(), spelled.paths.size());
  // PNG records (the same sources re-encoded by --max-side, too small for pipeline 2's crop): a
  // crop's rows and columns only (PngRegionDecode: never at a scale), the whole decode's batches
  // byte for byte; off, decoded whole.
  BuildOptions b;
  b.source = root + "/src";
  b.output = root + "/png.lmdb";
  b.max_side = 150;
  BuildResult r;
  ASSERT_TRUE(BuildDataset(b, &r).ok());
  for (const std::string& t : {pipelines[0], pipelines[1], pipelines[3]}) {
    SCOPED_TRACE("png " + t);
    const Loaded whole = Load(b.output, none, false, JpegScales::kSimd, t);
    ASSERT_FALSE(whole.images.empty());
    EXPECT_EQ(Count(whole, DecodePath::kFull), 24u);
    EXPECT_EQ(whole.paths.size(), 1u);
    const Loaded png = Load(b.output, none, true, JpegScales::kSimd, t);
    EXPECT_EQ(png.images, whole.images);
    EXPECT_EQ(png.normalized, whole.normalized);
    EXPECT_EQ(Count(png, DecodePath::kRoi) + Count(png, DecodePath::kFull), 24u);
    if (t != pipelines[3]) {  // LongestMaxSize resizes the whole image first: decoded whole
      EXPECT_GT(Count(png, DecodePath::kRoi), 0u);
    }
  }
  fs::remove_all(root);
}

// Image + mask pairs (JPEG images, PNG masks; then both PNG): the image's region decode gives
// the whole decode's images, floats and masks, the mask decoded whole. (The region the image
// lies in was once taken from the mask's request, which has no crop: the crop was then run on
// the decoded crop as if it were the whole image.)
TEST(JpegLoader, ImageAndMaskPairsGetTheWholeDecodesBatchesFromARegion) {
  const std::string root = FreshDir("jpeg-masks");
  for (int i = 0; i < 8; ++i) {
    const int w = 200 + 29 * (i % 4), h = 150 + 17 * (i % 3);
    const cv::Mat img = NaturalImage(w, h, 300 + static_cast<uint64_t>(i));
    cv::Mat mask(h, w, CV_8UC1);
    for (int y = 0; y < h; ++y) {
      for (int x = 0; x < w; ++x)
        mask.at<uint8_t>(y, x) = static_cast<uint8_t>((x / 16 + y / 16) % 3);
    }
    const std::string name = std::to_string(i);
    WriteFile(fs::path(root) / "jpg" / "images" / (name + ".jpg"), EncodeJpeg(img));
    WriteFile(fs::path(root) / "jpg" / "masks" / (name + ".png"),
              dspipe::testing::Encode(mask, ".png"));
    WriteFile(fs::path(root) / "png" / "images" / (name + ".png"),
              dspipe::testing::Encode(img, ".png"));
    WriteFile(fs::path(root) / "png" / "masks" / (name + ".png"),
              dspipe::testing::Encode(mask, ".png"));
  }
  const std::string crop = Compose(R"({"__class_fullname__": "RandomCrop", "p": 1, "height": 64,
                                       "width": 48},
                                      {"__class_fullname__": "HorizontalFlip", "p": 0.5})");
  const AugmentOptions none;
  for (const char* kind : {"jpg", "png"}) {
    SCOPED_TRACE(kind);
    BuildOptions b;
    b.source = root + "/" + kind;
    b.output = root + "/" + kind + ".lmdb";
    BuildResult r;
    const Status s = BuildDataset(b, &r);
    ASSERT_TRUE(s.ok()) << s.ToString();
    const Loaded whole = Load(b.output, none, false, JpegScales::kNone, crop);
    ASSERT_FALSE(whole.images.empty());
    ASSERT_FALSE(whole.masks.empty());
    const Loaded roi = Load(b.output, none, true, JpegScales::kNone, crop);
    EXPECT_GT(Count(roi, DecodePath::kRoi), 0u);
    EXPECT_EQ(roi.images, whole.images);
    EXPECT_EQ(roi.normalized, whole.normalized);
    EXPECT_EQ(roi.masks, whole.masks);
  }
  fs::remove_all(root);
}

// dsbench's report names the decode paths when JPEG region decoding happened.
TEST(JpegLoader, ProfileReportNamesTheDecodePaths) {
  const std::string root = FreshDir("jpeg-profile");
  const std::string db = JpegDataset(root);
  profile::ProfileOptions o;
  o.batch_size = 4;
  o.threads = 2;
  o.batches = 3;
  o.warmup = 0;
  o.augment.crop_scale_min = 0.08;
  o.height = 64;  // the images differ in size: the crop is resized to this
  o.width = 48;
  profile::ProfileResult r;
  const Status s = profile::RunProfile(db, o, &r);
  ASSERT_TRUE(s.ok()) << s.ToString();
  bool found = false;
  for (const std::string& n : r.notes) {
    if (n.rfind("decode paths:", 0) == 0) {
      found = true;
      EXPECT_NE(n.find("roi"), std::string::npos) << n;
    }
  }
  EXPECT_TRUE(found);
  fs::remove_all(root);
}

// Records of a built dataset: (height, width, codec, image payload).
struct Rec {
  int h, w;
  Codec codec;
  std::string payload;
};
std::vector<Rec> Records(const std::string& db) {
  std::unique_ptr<Dataset> ds;
  EXPECT_TRUE(Dataset::Open(db, DatasetOpenOptions{}, &ds).ok());
  std::vector<Rec> out;
  for (uint64_t i = 0; ds && i < ds->size(); ++i) {
    EXPECT_TRUE(ds->Read(i, [&](const RecordView& r) {
                    out.push_back({static_cast<int>(r.header.height),
                                   static_cast<int>(r.header.width), r.header.image_codec,
                                   std::string(reinterpret_cast<const char*>(r.image.data()),
                                               r.image.size())});
                    cv::Mat m;
                    return DecodeImage(r.image, 3, &m);
                  }).ok());
  }
  return out;
}

TEST(JpegBuild, MaxSideShrinksLargeImagesAndJpegQualityReencodes) {
  const std::string root = FreshDir("jpeg-build");
  WriteFile(root + "/src/a/0.jpg", EncodeJpeg(NaturalImage(300, 200, 1)));  // shrunk
  WriteFile(root + "/src/a/1.jpg", EncodeJpeg(NaturalImage(120, 90, 2)));   // kept as it is
  BuildOptions b;
  b.source = root + "/src";
  b.output = root + "/side.lmdb";
  b.max_side = 128;
  BuildResult r;
  ASSERT_TRUE(BuildDataset(b, &r).ok());
  std::vector<Rec> recs = Records(b.output);
  ASSERT_EQ(recs.size(), 2u);
  EXPECT_EQ(recs[0].w, 128);  // 300x200 -> 128x85, aspect kept, re-encoded losslessly
  EXPECT_EQ(recs[0].h, 85);
  EXPECT_EQ(recs[0].codec, Codec::kPng);
  EXPECT_EQ(recs[1].w, 120);  // below the limit: the original bytes
  EXPECT_EQ(recs[1].h, 90);
  EXPECT_EQ(recs[1].codec, Codec::kJpeg);
  // The option is part of the resume fingerprint: another value is refused.
  b.resume = true;
  b.max_side = 100;
  Status s = BuildDataset(b, &r);
  EXPECT_EQ(s.code(), Status::Code::kInvalidArgument) << s.ToString();
  EXPECT_NE(s.message().find("max_side"), std::string::npos) << s.ToString();

  // --jpeg-quality: every image becomes a JPEG of that quality; lower quality, fewer bytes.
  std::vector<size_t> sizes;
  for (int q : {95, 50}) {
    BuildOptions j;
    j.source = root + "/src";
    j.output = root + "/q" + std::to_string(q) + ".lmdb";
    j.max_side = 128;
    j.jpeg_quality = q;
    ASSERT_TRUE(BuildDataset(j, &r).ok());
    recs = Records(j.output);
    ASSERT_EQ(recs.size(), 2u);
    EXPECT_EQ(recs[0].codec, Codec::kJpeg);
    EXPECT_EQ(recs[0].w, 128);
    EXPECT_EQ(recs[1].codec, Codec::kJpeg);
    sizes.push_back(recs[0].payload.size() + recs[1].payload.size());
    j.resume = true;
    j.jpeg_quality = q == 95 ? 94 : 49;
    s = BuildDataset(j, &r);
    EXPECT_NE(s.message().find("jpeg_quality"), std::string::npos) << s.ToString();
  }
  EXPECT_LT(sizes[1], sizes[0]);
  // Option errors: --max-side with --resize, --jpeg-quality with --store raw.
  BuildOptions bad;
  bad.source = root + "/src";
  bad.output = root + "/bad.lmdb";
  bad.max_side = 64;
  bad.resize_width = bad.resize_height = 32;
  EXPECT_EQ(BuildDataset(bad, &r).code(), Status::Code::kInvalidArgument);
  bad.max_side = 0;
  bad.resize_width = bad.resize_height = 0;
  bad.overwrite = true;
  bad.store = StoreMode::kRaw;
  bad.jpeg_quality = 80;
  EXPECT_EQ(BuildDataset(bad, &r).code(), Status::Code::kInvalidArgument);
  fs::remove_all(root);
}

// --jpeg-restarts: JPEGs are stored with a restart marker after every MCU, losslessly (a
// progressive one becomes sequential), so the loader's crops take the restart path; other
// images keep their bytes; with --jpeg-quality the re-encoded JPEGs carry the markers too.
TEST(JpegBuild, JpegRestartsStoresTheSamePixelsWithAMarkerAfterEveryMcu) {
  const std::string root = FreshDir("jpeg-restarts");
  const std::string a = EncodeJpeg(NaturalImage(300, 200, 1));
  const std::string b = EncodeJpeg(NaturalImage(240, 180, 2), {.progressive = true});
  WriteFile(root + "/src/a/0.jpg", a);
  WriteFile(root + "/src/a/1.jpg", b);
  std::string png;
  ASSERT_TRUE(EncodePng(NaturalImage(64, 48, 3), 1, &png).ok());
  WriteFile(root + "/src/a/2.png", png);
  auto build = [&](const std::string& name, bool restarts, int quality) {
    BuildOptions o;
    o.source = root + "/src";
    o.output = root + "/" + name;
    o.jpeg_restarts = restarts;
    o.jpeg_quality = quality;
    BuildResult r;
    const Status s = BuildDataset(o, &r);
    EXPECT_TRUE(s.ok()) << s.ToString();
    return o;
  };
  auto whole = [](const std::string& jpeg) {
    cv::Mat m;
    EXPECT_TRUE(DecodeImage(AsBytes(jpeg), 3, &m).ok());
    return m;
  };
  auto crop_restarts = [](const std::string& jpeg) {
    JpegDecodeOptions o;
    o.crop_x = 40;
    o.crop_y = 30;
    o.crop_w = o.crop_h = 100;
    cv::Mat out;
    JpegDecodeResult r;
    EXPECT_TRUE(DecodeJpeg(AsBytes(jpeg), o, &out, &r).ok());
    return r.restarts;
  };
  BuildOptions o = build("restarts.lmdb", true, 0);
  const std::vector<Rec> p = Records(o.output);
  ASSERT_EQ(p.size(), 3u);
  EXPECT_EQ(dspipe::testing::CountDiff(whole(p[0].payload), whole(a)), 0);
  EXPECT_EQ(dspipe::testing::CountDiff(whole(p[1].payload), whole(b)), 0);
  JpegInfo info;
  ASSERT_TRUE(ReadJpegInfo(AsBytes(p[1].payload), &info).ok());
  EXPECT_FALSE(info.progressive);
  EXPECT_TRUE(crop_restarts(p[0].payload));
  EXPECT_TRUE(crop_restarts(p[1].payload));
  EXPECT_FALSE(crop_restarts(a));
  EXPECT_EQ(p[2].payload, png);  // not a JPEG: the file's bytes
  // Part of the resume fingerprint.
  o.resume = true;
  o.jpeg_restarts = false;
  BuildResult r;
  const Status s = BuildDataset(o, &r);
  EXPECT_EQ(s.code(), Status::Code::kInvalidArgument) << s.ToString();
  EXPECT_NE(s.message().find("jpeg_restarts"), std::string::npos) << s.ToString();
  // With --jpeg-quality: re-encoded with the markers.
  const std::vector<Rec> q = Records(build("q80.lmdb", true, 80).output);
  ASSERT_EQ(q.size(), 3u);
  for (const Rec& rec : q) EXPECT_TRUE(crop_restarts(rec.payload));
  fs::remove_all(root);
}

}  // namespace
}  // namespace dspipe::codec
