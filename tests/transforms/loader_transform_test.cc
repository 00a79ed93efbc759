// SPDX-License-Identifier: Apache-2.0
// The loader with a transform pipeline (LoaderOptions::transform) over real LMDBs: every batch
// is exactly TransformPipeline::Apply of its records (the same code path), identical for 1, 2
// and 4 threads and after a restore; datasets whose records differ in size; what is refused at
// open; Normalize mapped onto the normalize stage (LUT ops folded into it); the fused PNG path
// kept for flips-only pipelines; the stage table's transform rows.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <opencv2/imgcodecs.hpp>
#include <opencv2/imgproc.hpp>
#include <string>
#include <vector>

#include "dspipe/loader.h"
#include "dspipe/normalize.h"
#include "dspipe/transforms.h"
#include "loader/loader_fixture.h"
#include "loader/sample.h"
#include "must_parse.h"

namespace dspipe {
namespace {

constexpr int kCount = 14, kH = 40, kW = 48;

const char* const kRecipe = R"([
  {"__class_fullname__": "SmallestMaxSize", "p": 1, "max_size": 32},
  {"__class_fullname__": "RandomCrop", "p": 1, "height": 32, "width": 32},
  {"__class_fullname__": "SquareSymmetry", "p": 1},
  {"__class_fullname__": "Affine", "p": 0.7, "rotate": [-15, 15], "translate_percent": 0.05, "fill_mask": 255},
  {"__class_fullname__": "RandomBrightnessContrast", "p": 0.8},
  {"__class_fullname__": "GaussNoise", "p": 0.5},
  {"__class_fullname__": "Normalize", "p": 1}])";

using testing::MustParse;

struct FusedScope {
  explicit FusedScope(bool on) { loader::SetFusedDecodeEnabled(on); }
  ~FusedScope() { loader::SetFusedDecodeEnabled(true); }
};

class LoaderTransformTest : public testing::EncodedLmdbTest {
 protected:
  LoaderTransformTest() : EncodedLmdbTest(kCount, kH, kW) {}

  static LoaderOptions Options(const char* spec, int threads = 2) {
    LoaderOptions o;
    o.batch_size = 4;
    o.threads = threads;
    o.sampler.seed = 17;
    o.transform = MustParse(spec);
    o.normalize = NormalizeMode::kCpuFloat32;
    return o;
  }
  std::unique_ptr<Loader> Open(const LoaderOptions& o, const std::string& path = "") {
    std::unique_ptr<Loader> loader;
    const Status s = Loader::Open(path.empty() ? path_ : path, o, &loader);
    EXPECT_TRUE(s.ok()) << s.ToString();
    return loader;
  }
  Status OpenError(const LoaderOptions& o, const std::string& path = "") {
    std::unique_ptr<Loader> loader;
    return Loader::Open(path.empty() ? path_ : path, o, &loader);
  }
};

TEST_F(LoaderTransformTest, EveryBatchIsTheTransformOfItsRecords) {
  for (
      const char* spec :
      {kRecipe,
       R"([{"__class_fullname__": "HorizontalFlip"}, {"__class_fullname__": "RandomGamma", "p": 1},
            {"__class_fullname__": "Normalize", "p": 1, "mean": 0.5, "std": 0.25}])",
       R"([{"__class_fullname__": "RandomResizedCrop", "p": 1, "size": [24, 30]}, {"__class_fullname__": "CoarseDropout", "p": 1, "fill_mask": 255},
            {"__class_fullname__": "Normalize", "p": 1}])",
       // A crop + Affine group as one warp (simd.h WarpAffine) of an odd size, with the noise and
       // contrast folded into the normalize.
       R"([{"__class_fullname__": "RandomCrop", "p": 1, "height": 27, "width": 30},
            {"__class_fullname__": "Affine", "p": 1, "rotate": [-20, 20], "scale": [0.9, 1.1]},
            {"__class_fullname__": "RandomBrightnessContrast", "p": 1},
            {"__class_fullname__": "GaussNoise", "p": 1}, {"__class_fullname__": "Normalize", "p": 1}])"}) {
    for (bool fused : {true, false}) {
      FusedScope scope(fused);
      const LoaderOptions o = Options(spec);
      auto loader = Open(o);
      ASSERT_TRUE(loader);
      const BatchShape& shape = loader->shape();
      NormalizeParams norm;
      norm.channels = 3;
      for (int c = 0; c < 3; ++c) {
        norm.mean[c] = static_cast<float>(loader->options().mean[c]);
        norm.std[c] = static_cast<float>(loader->options().std[c]);
      }
      const size_t n = static_cast<size_t>(shape.height) * shape.width;
      for (const testing::BatchCopy& b : testing::RunEpochs(loader.get(), 1, 1)) {
        for (size_t i = 0; i < b.indices.size(); ++i) {
          cv::Mat src = testing::GenImage(static_cast<int>(b.indices[i]), kH, kW);
          cv::Mat mask = testing::MaskOf(src);
          const ImageRef in{src.data, kH, kW, 3}, min{mask.data, kH, kW, 1};
          OwnedImage want, want_mask;
          ASSERT_TRUE(o.transform->Apply(17, 1, b.indices[i], in, &min, &want, &want_mask).ok());
          ASSERT_EQ(want.pixels.size(), n * 3);
          EXPECT_EQ(std::memcmp(want.pixels.data(), b.images.data() + i * n * 3, n * 3), 0)
              << spec << " index " << b.indices[i] << " fused " << fused;
          EXPECT_EQ(std::memcmp(want_mask.pixels.data(), b.masks.data() + i * n, n), 0);
          // Normalize is the loader's normalize stage, bit-identical to the batch kernel.
          std::vector<float> floats(n * 3);
          ASSERT_TRUE(NormalizeNhwcToNchwF32(want.pixels.data(), 1, shape.height, shape.width, norm,
                                             floats.data())
                          .ok());
          EXPECT_EQ(std::memcmp(floats.data(), b.normalized.data() + i * n * 3, n * 12), 0);
        }
      }
    }
  }
}

// Issue 40 item 10: a tutorial's ToFloat() + ToTensorV2() tail gives img / 255 (float32, within
// one ulp: the normalize stage multiplies by 1/255) in the CHW layout the batches have.
TEST_F(LoaderTransformTest, ToFloatAndToTensorV2AreTheNormalizeStageAndTheLayout) {
  const LoaderOptions o = Options(R"([{"__class_fullname__": "HorizontalFlip", "p": 1},
      {"__class_fullname__": "ToFloat", "p": 1}, {"__class_fullname__": "ToTensorV2", "p": 1}])");
  auto loader = Open(o);
  ASSERT_TRUE(loader);
  EXPECT_EQ(loader->options().mean, std::vector<double>(3, 0.0));
  EXPECT_EQ(loader->options().std, std::vector<double>(3, 255.0));
  const size_t n = static_cast<size_t>(kH) * kW;
  size_t seen = 0;
  for (const testing::BatchCopy& b : testing::RunEpochs(loader.get(), 1, 1)) {
    for (size_t i = 0; i < b.indices.size(); ++i, ++seen) {
      const cv::Mat src = testing::GenImage(static_cast<int>(b.indices[i]), kH, kW);
      for (int y = 0; y < kH; ++y) {
        for (int x = 0; x < kW; ++x) {
          for (int c = 0; c < 3; ++c) {
            const float want = static_cast<float>(src.at<cv::Vec3b>(y, kW - 1 - x)[c]) / 255.0f;
            const float got = b.normalized[i * n * 3 + c * n + static_cast<size_t>(y) * kW + x];
            ASSERT_LE(std::fabs(got - want), std::nextafter(want, 2.0f) - want)
                << "index " << b.indices[i] << " at " << y << "," << x << "," << c;
          }
        }
      }
    }
  }
  EXPECT_EQ(seen, static_cast<size_t>(kCount));
}

TEST_F(LoaderTransformTest, SameBatchesFor1To4ThreadsAndAfterARestore) {
  std::vector<testing::BatchCopy> reference;
  for (int threads : {1, 2, 4}) {
    auto loader = Open(Options(kRecipe, threads));
    const auto batches = testing::RunEpochs(loader.get(), 0, 2);
    ASSERT_EQ(batches.size(), 8u);
    if (reference.empty()) {
      reference = batches;
    } else {
      EXPECT_TRUE(batches == reference) << threads << " threads";
    }
  }
  for (size_t stop : {1u, 3u, 5u}) {
    LoaderState state;
    {
      auto first = Open(Options(kRecipe));
      Batch b;
      for (size_t k = 0; k < stop; ++k) {
        ASSERT_TRUE(first->Next(&b).ok());
        if (!b) {
          ASSERT_TRUE(first->Next(&b).ok());
        }
      }
      state = first->state();
    }
    auto second = Open(Options(kRecipe, 1));
    ASSERT_TRUE(second->Restore(state).ok());
    Batch b;
    for (size_t k = stop; k < reference.size();) {
      ASSERT_TRUE(second->Next(&b).ok());
      if (!b) continue;
      EXPECT_TRUE(testing::Copy(b) == reference[k]) << "stop " << stop << " batch " << k;
      ++k;
    }
  }
}

TEST_F(LoaderTransformTest, RecordsOfDifferentSizes) {
  // Records 30x40 .. 52x62: the manifest fixes no size.
  const std::string src = root_ + "/varied";
  std::filesystem::create_directories(src + "/images");
  std::filesystem::create_directories(src + "/masks");
  for (int i = 0; i < 9; ++i) {
    const int h = 30 + 3 * i, w = 40 + (5 * i) % 23;
    cv::Mat img = testing::GenImage(i, h, w), bgr;
    cv::cvtColor(img, bgr, cv::COLOR_RGB2BGR);
    char name[32];
    std::snprintf(name, sizeof(name), "%06d.png", i);
    ASSERT_TRUE(cv::imwrite(src + "/images/" + name, bgr));
    ASSERT_TRUE(cv::imwrite(src + "/masks/" + name, testing::MaskOf(img)));
  }
  const std::string varied = testing::Build(src, root_ + "/varied.lmdb", StoreMode::kEncoded, 1);
  // A pipeline that does not end in a fixed size is refused, saying what to add.
  LoaderOptions o = Options(R"([{"__class_fullname__": "HorizontalFlip"}])");
  const Status s = OpenError(o, varied);
  EXPECT_EQ(s.code(), Status::Code::kInvalidArgument);
  EXPECT_NE(s.message().find("differ in size"), std::string::npos) << s.ToString();
  EXPECT_NE(s.message().find("Resize(height="), std::string::npos) << s.ToString();
  // One that does gives fixed-size batches; so does height/width (a final Resize).
  for (const char* spec : {R"([{"__class_fullname__": "SmallestMaxSize", "p": 1, "max_size": 24},
                              {"__class_fullname__": "RandomCrop", "p": 1, "height": 24, "width": 24}])",
                           R"([{"__class_fullname__": "HorizontalFlip"}])",
                           // A tutorial's tail: the final Resize goes before it (issue 40).
                           R"([{"__class_fullname__": "HorizontalFlip"},
                              {"__class_fullname__": "Normalize", "p": 1},
                              {"__class_fullname__": "ToTensorV2", "p": 1}])"}) {
    o = Options(spec);
    if (std::string(spec).find("Flip") != std::string::npos) o.height = o.width = 24;
    auto loader = Open(o, varied);
    ASSERT_TRUE(loader);
    EXPECT_EQ(loader->shape().height, 24);
    int samples = 0;
    for (const testing::BatchCopy& b : testing::RunEpochs(loader.get(), 0, 1)) {
      samples += static_cast<int>(b.indices.size());
    }
    EXPECT_EQ(samples, 9);
  }
  // Height/width that contradict the size the pipeline ends in.
  o = Options(R"([{"__class_fullname__": "CenterCrop", "p": 1, "height": 20, "width": 20}])");
  o.height = o.width = 24;
  EXPECT_NE(OpenError(o, varied).message().find("ends in 20x20"), std::string::npos);
}

TEST_F(LoaderTransformTest, RefusedBeforeTheFirstBatch) {
  LoaderOptions o = Options(R"([{"__class_fullname__": "HorizontalFlip"}])");
  o.augment.hflip = 0.5;
  // The options named as markers (each front end renders them: --hflip, hflip).
  EXPECT_NE(OpenError(o).message().find(
                "LoaderOptions::transform with AugmentOptions::hflip: set augment or transform"),
            std::string::npos)
      << OpenError(o).ToString();
  // The augment's interpolation would be silently unused under a pipeline: refused too.
  o = Options(R"([{"__class_fullname__": "HorizontalFlip"}])");
  o.augment.image_interpolation = Interpolation::kArea;
  EXPECT_NE(OpenError(o).message().find("LoaderOptions::transform with "
                                        "AugmentOptions::image_interpolation: set augment or "
                                        "transform"),
            std::string::npos)
      << OpenError(o).ToString();
  o = Options(R"([{"__class_fullname__": "Normalize", "p": 1}])");
  o.mean = {1, 2, 3};
  o.std = {4, 5, 6};
  EXPECT_NE(OpenError(o).message().find("leave LoaderOptions::mean and LoaderOptions::std empty"),
            std::string::npos)
      << OpenError(o).ToString();
  // Issue 40 item 22: CoarseDropout holes larger than the 40x48 records, at open.
  o = Options(R"([{"__class_fullname__": "CoarseDropout", "p": 1,
      "hole_height_range": [50, 60], "hole_width_range": [8, 8]}])");
  EXPECT_NE(OpenError(o).message().find(
                "(CoarseDropout): argument hole_height_range=(50.0, 60.0) asks for holes at least "
                "50 px high, larger than the 40x48 image it gets"),
            std::string::npos)
      << OpenError(o).ToString();
  // CropNonEmptyMaskIfExists over a dataset without masks.
  testing::WriteSourceTree(root_ + "/nomask", 4, kH, kW, false);
  const std::string nomask =
      testing::Build(root_ + "/nomask", root_ + "/nomask.lmdb", StoreMode::kEncoded, 1);
  o = Options(
      R"([{"__class_fullname__": "CropNonEmptyMaskIfExists", "p": 1, "height": 8, "width": 8}])");
  o.normalize = NormalizeMode::kNone;
  const Status s = OpenError(o, nomask);
  EXPECT_EQ(s.code(), Status::Code::kInvalidArgument);
  EXPECT_NE(s.message().find("needs masks"), std::string::npos) << s.ToString();
}

// Issue 40 item 1: without a transform, records of different sizes are never squashed to
// record 0's size: a dspipe dataset (the manifest fixes no size) is refused at open, a plain
// LMDB (sizes unknown at open) at the first record of another size, naming it; the output size
// (or a pipeline that fixes it) is the fix.
TEST_F(LoaderTransformTest, RecordsOfDifferentSizesWithoutASizeAreRefusedNotSquashed) {
  const std::string src = root_ + "/varied";
  std::filesystem::create_directories(src + "/images");
  std::vector<std::pair<std::string, std::string>> plain;
  for (int i = 0; i < 5; ++i) {
    const int h = i < 3 ? 30 : 36, w = i < 3 ? 40 : 44;  // records 3 and 4 differ
    cv::Mat img = testing::GenImage(i, h, w), bgr;
    cv::cvtColor(img, bgr, cv::COLOR_RGB2BGR);
    char name[32];
    std::snprintf(name, sizeof(name), "%06d.png", i);
    ASSERT_TRUE(cv::imwrite(src + "/images/" + name, bgr));
    std::vector<uint8_t> png;
    ASSERT_TRUE(cv::imencode(".png", bgr, png));
    plain.emplace_back(std::to_string(i), std::string(png.begin(), png.end()));
  }
  const std::string varied = testing::Build(src, root_ + "/varied.lmdb", StoreMode::kEncoded, 1);
  LoaderOptions o;
  o.batch_size = 2;
  o.threads = 2;
  o.sampler.shuffle = false;
  o.normalize = NormalizeMode::kCpuFloat32;
  o.mean = {0};
  o.std = {1};
  Status s = OpenError(o, varied);
  EXPECT_EQ(s.code(), Status::Code::kInvalidArgument) << s.ToString();
  EXPECT_NE(s.message().find("the images of " + varied +
                             " differ in size (the manifest fixes none) and batches need one: "
                             "set the output size (LoaderOptions::height"),
            std::string::npos)
      << s.ToString();
  o.augment.hflip = 0.5;  // flips do not fix a size
  EXPECT_EQ(OpenError(o, varied).code(), Status::Code::kInvalidArgument);
  o.height = 30, o.width = 40;  // the fix
  EXPECT_TRUE(OpenError(o, varied).ok()) << OpenError(o, varied).ToString();

  // A plain LMDB: record 0 sizes the batches; record 3 is refused, named, not resized.
  const std::string plain_path = root_ + "/plain.lmdb";
  testing::WritePlainLmdb(plain_path, plain);
  for (const bool with_transform : {false, true}) {
    o.height = o.width = 0;
    o.augment.hflip = 0;
    o.transform =
        with_transform ? MustParse(R"([{"__class_fullname__": "HorizontalFlip"}])") : nullptr;
    auto loader = Open(o, plain_path);
    ASSERT_TRUE(loader);
    EXPECT_EQ(loader->shape().height, 30);
    Batch b;
    int delivered = 0;
    while ((s = loader->Next(&b)).ok() && b) delivered += static_cast<int>(b.size());
    EXPECT_EQ(delivered, 2);  // the first batch (records 0, 1); the second holds record 3
    EXPECT_EQ(s.code(), Status::Code::kInvalidArgument) << s.ToString();
    EXPECT_NE(s.message().find("record 3 (key 3) in " + plain_path +
                               " is 36x44, record 0 (key 0) is 30x40: the images differ in size"),
              std::string::npos)
        << s.ToString();
    EXPECT_NE(s.message().find("set the output size (LoaderOptions::height"), std::string::npos);
    o.height = 30, o.width = 40;  // the fix: every record resized to it
    loader = Open(o, plain_path);
    ASSERT_TRUE(loader);
    int samples = 0;
    for (const testing::BatchCopy& c : testing::RunEpochs(loader.get(), 0, 1)) {
      samples += static_cast<int>(c.indices.size());
    }
    EXPECT_EQ(samples, 5);
  }
}

// Issue 40 item 2: mean/std in 0..1 units (the torchvision habit) on 0..255 pixels are
// accepted but warned about once, with the fix; pixel-unit values and mean 0 / std 1 are not.
TEST_F(LoaderTransformTest, MeanStdInZeroToOneUnitsAreWarnedAbout) {
  LoaderOptions o;
  o.batch_size = 2;
  o.threads = 1;
  o.normalize = NormalizeMode::kCpuFloat32;
  o.mean = {0.485, 0.456, 0.406};
  o.std = {0.229, 0.224, 0.225};
  auto loader = Open(o);
  ASSERT_TRUE(loader);
  ASSERT_EQ(loader->warnings().size(), 1u);
  const std::string& w = loader->warnings()[0];
  EXPECT_NE(w.find("mean [0.485, 0.456, 0.406] and std [0.229, 0.224, 0.225] are all <= 1, but "
                   "the pixels of " +
                   path_ + " are 0..255"),
            std::string::npos)
      << w;
  EXPECT_NE(w.find("(mean=[123.675, 116.28, 103.53], std=[58.395, 57.12, 57.375])"),
            std::string::npos)
      << w;
  // The pipeline's Normalize with max_pixel_value=1: the fix is its argument.
  o = Options(R"([{"__class_fullname__": "Normalize", "p": 1, "max_pixel_value": 1}])");
  loader = Open(o);
  ASSERT_TRUE(loader);
  ASSERT_EQ(loader->warnings().size(), 1u);
  EXPECT_NE(loader->warnings()[0].find("Normalize has max_pixel_value=1: leave it at 255"),
            std::string::npos)
      << loader->warnings()[0];
  // Not warned: pixel units (albumentations' default Normalize, explicit ones), no
  // normalization (mean 0, std 1), the manifest's statistics.
  for (int k = 0; k < 4; ++k) {
    o = k == 0 ? Options(R"([{"__class_fullname__": "Normalize", "p": 1}])")
               : Options(R"([{"__class_fullname__": "HorizontalFlip"}])");
    if (k == 1) o.mean = {120}, o.std = {60};
    if (k == 2) o.mean = {0}, o.std = {1};
    loader = Open(o);
    ASSERT_TRUE(loader);
    EXPECT_TRUE(loader->warnings().empty()) << k << ": " << loader->warnings()[0];
  }
}

// Issue 40 item 15: channels = 1 on an RGB dataset with no mean/std set: the manifest's are per
// RGB channel; the message says so and which one value each to pass (computed from them).
TEST_F(LoaderTransformTest, GrayOutputOfAnRgbDatasetSaysWhichMeanStdToPass) {
  LoaderOptions o;
  o.batch_size = 2;
  o.threads = 1;
  o.channels = 1;
  o.normalize = NormalizeMode::kCpuFloat32;
  const Status s = OpenError(o);
  EXPECT_EQ(s.code(), Status::Code::kInvalidArgument) << s.ToString();
  const std::string& m = s.message();
  EXPECT_NE(m.find("LoaderOptions::channels = 1 converts the RGB images of " + path_ +
                   " to gray, and its manifest's mean/std are per RGB channel"),
            std::string::npos)
      << m;
  EXPECT_NE(m.find("none were set): pass the gray images' own, one value each, e.g. "
                   "LoaderOptions::mean = "),
            std::string::npos)
      << m;
  EXPECT_EQ(m.find("values for 1 channels"), std::string::npos) << m;
  // The values it names work.
  const size_t at = m.find("LoaderOptions::mean = ") + 22;
  const double mean = std::stod(m.substr(at));
  const double sd = std::stod(m.substr(m.find("LoaderOptions::std = ") + 21));
  o.mean = {mean};
  o.std = {sd};
  EXPECT_GT(mean, 20);
  EXPECT_GT(sd, 1);
  EXPECT_TRUE(OpenError(o).ok()) << OpenError(o).ToString();
}

// Issue 40 item 7: albumentations' meaning. A pipeline without Normalize yields the 0..255
// values (mean 0, std 1) unless the manifest's statistics are asked for (kDataset) or mean/std
// are set; kIdentity with the pipeline's Normalize applies it instead of an error about mean/std
// nobody set; without a pipeline nothing changes (the manifest's).
TEST_F(LoaderTransformTest, APipelineWithoutNormalizeYieldsWhatAlbumentationsYields) {
  const auto mean_of = [&](const LoaderOptions& o) {
    auto loader = Open(o);
    return loader ? loader->options().mean : std::vector<double>{};
  };
  LoaderOptions o = Options(R"([{"__class_fullname__": "HorizontalFlip", "p": 0}])");
  {
    auto loader = Open(o);
    ASSERT_TRUE(loader);
    EXPECT_EQ(loader->options().mean, std::vector<double>(3, 0.0));
    EXPECT_EQ(loader->options().std, std::vector<double>(3, 1.0));
    Batch b;
    ASSERT_TRUE(loader->Next(&b).ok());
    ASSERT_TRUE(b);
    const size_t plane = static_cast<size_t>(kH) * kW;
    for (size_t i = 0; i < plane; ++i) {  // channel 0 of sample 0 is its uint8 pixel value
      ASSERT_EQ(b.normalized()[i], static_cast<float>(b.images()[i * 3])) << i;
    }
  }
  std::unique_ptr<Dataset> ds;
  ASSERT_TRUE(Dataset::Open(path_, {}, &ds).ok());
  const std::vector<double> manifest = ds->info().mean;
  ASSERT_EQ(manifest.size(), 3u);
  o.mean_std = MeanStdSource::kDataset;
  EXPECT_EQ(mean_of(o), manifest);
  o.mean_std = MeanStdSource::kAuto;
  o.mean = {10};
  o.std = {2};
  EXPECT_EQ(mean_of(o), std::vector<double>(3, 10.0));  // asked for
  // Without a pipeline: the manifest's, as before.
  LoaderOptions plain;
  plain.batch_size = 2;
  plain.threads = 1;
  plain.normalize = NormalizeMode::kCpuFloat32;
  EXPECT_EQ(mean_of(plain), manifest);
  plain.mean_std = MeanStdSource::kIdentity;
  EXPECT_EQ(mean_of(plain), std::vector<double>(3, 0.0));
  // kIdentity with the pipeline's Normalize: the Normalize applies (albumentations' result).
  o = Options(R"([{"__class_fullname__": "Normalize", "p": 1}])");
  o.mean_std = MeanStdSource::kIdentity;
  const std::vector<double> m = mean_of(o);
  ASSERT_EQ(m.size(), 3u);
  EXPECT_NEAR(m[0], 0.485 * 255, 1e-3);
  // kIdentity with mean/std: one message naming both, no other.
  o = Options(R"([{"__class_fullname__": "HorizontalFlip"}])");
  o.mean_std = MeanStdSource::kIdentity;
  o.mean = {1};
  o.std = {2};
  const Status s = OpenError(o);
  EXPECT_EQ(s.code(), Status::Code::kInvalidArgument);
  EXPECT_NE(s.message().find("LoaderOptions::mean_std = identity (no normalization) and "
                             "LoaderOptions::mean/LoaderOptions::std exclude each other"),
            std::string::npos)
      << s.ToString();
}

// Issue 40 item 23: A.Normalize() (three ImageNet values) on gray batches uses the first value
// of each, as albumentations does on a 1-channel image; it was "3/3 values for 1 channels".
TEST_F(LoaderTransformTest, ANormalizeOfThreeValuesOnGrayBatchesUsesTheFirst) {
  LoaderOptions o = Options(R"([{"__class_fullname__": "Normalize", "p": 1}])");
  o.channels = 1;
  auto loader = Open(o);
  ASSERT_TRUE(loader);
  ASSERT_EQ(loader->options().mean.size(), 1u);
  EXPECT_NEAR(loader->options().mean[0], 0.485 * 255, 1e-3);
  EXPECT_NEAR(loader->options().std[0], 0.229 * 255, 1e-3);
  Batch b;
  ASSERT_TRUE(loader->Next(&b).ok());
  ASSERT_TRUE(b);
  for (size_t i = 0; i < static_cast<size_t>(kH) * kW; ++i) {
    const float want = static_cast<float>((b.images()[i] / 255.0 - 0.485) / 0.229);
    ASSERT_NEAR(b.normalized()[i], want, 1e-4) << i;
  }
}

// Issue 40 item 5: a crop larger than every record is a configuration error at open (the
// manifest knows the size), not a corrupt record per sample.
TEST_F(LoaderTransformTest, ACropLargerThanEveryRecordIsRefusedAtOpen) {
  LoaderOptions o = Options(R"([{"__class_fullname__": "HorizontalFlip"},
                                {"__class_fullname__": "RandomCrop", "p": 1, "height": 41, "width": 30}])");
  o.max_corrupt = 1000;
  Status s = OpenError(o);
  EXPECT_EQ(s.code(), Status::Code::kInvalidArgument) << s.ToString();
  EXPECT_NE(s.message().find("every record of " + path_ +
                             " is 40x48, and transform 2 (RandomCrop) refuses its 40x48 input: "
                             "crop size (41, 30) exceeds the image (40, 48); set "
                             "pad_if_needed=true to pad"),
            std::string::npos)
      << s.ToString();
  // After a size-changing step the size it gets is checked.
  o = Options(R"([{"__class_fullname__": "Resize", "p": 1, "height": 20, "width": 20},
                  {"__class_fullname__": "CenterCrop", "p": 1, "height": 24, "width": 24}])");
  s = OpenError(o);
  EXPECT_NE(s.message().find("transform 2 (CenterCrop) refuses its 20x20 input"), std::string::npos)
      << s.ToString();
  // Not refused: padded, resized up first, or a crop that runs only sometimes (p < 1 and in a
  // OneOf: those samples fail one by one, as in albumentations).
  for (
      const char* spec :
      {R"([{"__class_fullname__": "RandomCrop", "p": 1, "height": 41, "width": 30, "pad_if_needed": true}])",
       R"([{"__class_fullname__": "Resize", "p": 1, "height": 64, "width": 64},
            {"__class_fullname__": "RandomCrop", "p": 1, "height": 41, "width": 30}])",
       R"([{"__class_fullname__": "OneOf", "p": 1, "transforms": [
              {"__class_fullname__": "CenterCrop", "p": 1, "height": 41, "width": 30},
              {"__class_fullname__": "CenterCrop", "p": 1, "height": 41, "width": 30}]},
            {"__class_fullname__": "Resize", "p": 1, "height": 8, "width": 8}])"}) {
    o = Options(spec);
    o.max_corrupt = 1000;
    EXPECT_TRUE(OpenError(o).ok()) << spec << ": " << OpenError(o).ToString();
  }
  // A crop that fits is not refused, and the library call says nothing either.
  EXPECT_TRUE(
      MustParse(R"([{"__class_fullname__": "RandomCrop", "p": 1, "height": 40, "width": 48}])")
          ->CheckInputSize(kH, kW)
          .ok());
  EXPECT_TRUE(
      MustParse(R"([{"__class_fullname__": "RandomCrop", "p": 1, "height": 41, "width": 30}])")
          ->CheckInputSize(0, 0)
          .ok());  // unknown input size: not judged
}

// Flips with row-wise ops (LUTs, noise) keep the fused PNG path: decoded mirrored, each row's
// ops and normalize done as the decoder finishes it; the same batches as the general path.
TEST_F(LoaderTransformTest, FlipsAndRowOpsKeepTheFusedPngPath) {
  for (const char* spec :
       {R"([{"__class_fullname__": "HorizontalFlip"},
      {"__class_fullname__": "RandomBrightnessContrast", "p": 0.7}, {"__class_fullname__": "Normalize", "p": 1}])",
        R"([{"__class_fullname__": "HorizontalFlip"}, {"__class_fullname__": "RandomGamma", "p": 1},
      {"__class_fullname__": "GaussNoise", "p": 0.8}, {"__class_fullname__": "Normalize", "p": 1}])"}) {
    std::vector<testing::BatchCopy> unfused;
    {
      FusedScope scope(false);
      auto loader = Open(Options(spec));
      unfused = testing::RunEpochs(loader.get(), 0, 1);
    }
    auto loader = Open(Options(spec));
    EXPECT_TRUE(testing::RunEpochs(loader.get(), 0, 1) == unfused) << spec;
    StageStats& st = loader->stats();
    EXPECT_EQ(st.Summary(Stage::kDecode).count, static_cast<uint64_t>(kCount));
    EXPECT_EQ(st.Summary(Stage::kTransform).count, 0u) << "every sample took the fused PNG path";
    EXPECT_EQ(st.Summary(Stage::kNormalize).total_ms, 0.0);
    // Their transform rows count them as fused into the decode (none timed on its own).
    bool gamma = false;
    for (const StageSummary& s : st.Summaries()) {
      if (s.stage != Stage::kSegment) continue;
      EXPECT_EQ(s.count, 0u) << s.label;
      EXPECT_GT(s.folded, 0u) << s.label;
      if (s.label.find("RandomGamma") != std::string::npos) {
        gamma = true;
        EXPECT_EQ(s.folded, static_cast<uint64_t>(kCount)) << s.label;  // p=1: every sample
      }
    }
    EXPECT_EQ(gamma, std::string(spec).find("RandomGamma") != std::string::npos);
  }
}

TEST_F(LoaderTransformTest, StageTableHasATransformRowPerSegment) {
  // Without the normalize pass nothing is folded: every segment that ran has its row.
  LoaderOptions o = Options(kRecipe);
  o.normalize = NormalizeMode::kNone;
  auto loader = Open(o);
  testing::RunEpochs(loader.get(), 0, 2);
  std::vector<StageSummary> rows = loader->stats().Summaries();
  std::vector<std::string> labels;
  uint64_t geometric = 0;
  std::vector<uint64_t> ran(3, 0);  // samples each segment ran for
  for (const StageSummary& s : rows) {
    if (s.stage != Stage::kSegment) continue;
    labels.push_back(s.label);
    if (s.row == 0) geometric = s.count;
    EXPECT_EQ(s.folded, 0u) << s.label;
    if (s.row >= 0 && s.row < 3) ran[static_cast<size_t>(s.row)] = s.count;
  }
  ASSERT_EQ(labels.size(), 3u);
  EXPECT_EQ(labels[0], "geometric: SmallestMaxSize > RandomCrop > SquareSymmetry > Affine");
  EXPECT_EQ(labels[1], "lut: RandomBrightnessContrast");
  EXPECT_EQ(labels[2], "GaussNoise");
  EXPECT_GT(geometric, 0u);
  EXPECT_LE(geometric, 2u * kCount);  // samples that drew no geometry (e, no Affine) have none
  const std::string table = FormatTable(rows, 4);
  EXPECT_NE(table.find(" transform1"), std::string::npos) << table;
  EXPECT_NE(table.find("geometric: SmallestMaxSize"), std::string::npos) << table;
  const Verdict v = Diagnose(rows, loader->loader_shape(), 0);
  EXPECT_NE(v.limiting_stage, Stage::kSegment);
  // With CPU normalize the LUT and noise steps are folded into it: timed there, and counted in
  // their rows as folded, so a row never looks as if its transform rarely ran (the draws do not
  // depend on the normalize mode: the same samples ran each segment).
  loader = Open(Options(kRecipe));
  testing::RunEpochs(loader.get(), 0, 2);
  rows = loader->stats().Summaries();
  int seen = 0;
  for (const StageSummary& s : rows) {
    if (s.stage != Stage::kSegment) continue;
    ++seen;
    if (s.row == 0) {
      EXPECT_EQ(s.count, ran[0]);
      EXPECT_EQ(s.folded, 0u);
    } else {
      EXPECT_EQ(s.count, 0u) << s.label;
      EXPECT_GT(s.folded, 0u) << s.label;
      EXPECT_EQ(s.folded, ran[static_cast<size_t>(s.row)]) << s.label;
    }
  }
  EXPECT_EQ(seen, 3);
  const std::string folded_table = FormatTable(rows, 4);
  EXPECT_NE(folded_table.find("lut: RandomBrightnessContrast (+" + std::to_string(ran[1]) + " of " +
                              std::to_string(ran[1]) + " samples fused into another stage"),
            std::string::npos)
      << folded_table;
  EXPECT_GT(loader->stats().Summary(Stage::kNormalize).total_ms, 0.0);
}

TEST_F(LoaderTransformTest, DeferredHflipOnlyWhenTheRestCommutes) {
  LoaderOptions o = Options(R"([{"__class_fullname__": "RandomGamma", "p": 1},
      {"__class_fullname__": "HorizontalFlip", "p": 1}, {"__class_fullname__": "ToGray", "p": 1},
      {"__class_fullname__": "VerticalFlip", "p": 0.5}])");
  o.normalize = NormalizeMode::kNone;
  o.defer_hflip = true;
  auto deferred = Open(o);
  o.defer_hflip = false;
  auto plain = Open(o);
  const auto a = testing::RunEpochs(deferred.get(), 0, 1),
             b = testing::RunEpochs(plain.get(), 0, 1);
  ASSERT_EQ(a.size(), b.size());
  const size_t n = static_cast<size_t>(kH) * kW;
  for (size_t k = 0; k < a.size(); ++k) {
    for (size_t i = 0; i < a[k].indices.size(); ++i) {
      EXPECT_EQ(a[k].hflip[i], 1);
      EXPECT_EQ(b[k].hflip[i], 1);
      // The consumer's mirror of the deferred sample is the CPU-flipped one.
      cv::Mat d(kH, kW, CV_8UC3, const_cast<uint8_t*>(a[k].images.data() + i * n * 3));
      cv::Mat f(kH, kW, CV_8UC3, const_cast<uint8_t*>(b[k].images.data() + i * n * 3)), m;
      cv::flip(d, m, 1);
      const cv::Mat differ = m != f;
      EXPECT_EQ(cv::countNonZero(differ.reshape(1)), 0);
    }
  }
  // Noise after the flip depends on the position:
  // the flip stays on the CPU (flag 0).
  o = Options(
      R"([{"__class_fullname__": "HorizontalFlip", "p": 1}, {"__class_fullname__": "GaussNoise", "p": 1}])");
  o.normalize = NormalizeMode::kNone;
  o.defer_hflip = true;
  auto kept = Open(o);
  for (const testing::BatchCopy& c : testing::RunEpochs(kept.get(), 0, 1)) {
    for (uint8_t f : c.hflip) EXPECT_EQ(f, 0);
  }
}

}  // namespace
}  // namespace dspipe
