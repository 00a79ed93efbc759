// SPDX-License-Identifier: Apache-2.0
// The loader's fused PNG path (loader/sample.cc): flip and float32 normalize done per row inside
// the fast PNG decode must give exactly what decode -> flip -> normalize gives, skip corrupt
// records the same way, and keep the stage statistics honest.
#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "codec/test_images.h"
#include "dspipe/format.h"
#include "dspipe/loader.h"
#include "dspipe/normalize.h"
#include "dspipe/stats.h"
#include "loader/loader_fixture.h"
#include "loader/sample.h"
#include "normalize/normalize_row.h"

namespace dspipe {
namespace {

// Restores the process-wide switch when a test ends.
struct FusedScope {
  explicit FusedScope(bool on) { loader::SetFusedDecodeEnabled(on); }
  ~FusedScope() { loader::SetFusedDecodeEnabled(true); }
};

// want: the formula (float(x) - mean[c]) * (1.0f / std[c]) written out, planar. Checks that
// RowNormalizerF32 (its SIMD code and its plain loop) gives exactly it, row by row, for h rows
// of w pixels of p.channels interleaved samples (uint8 or uint16).
template <typename T>
std::vector<float> ExpectRowsAreTheFormula(const NormalizeParams& p, const std::vector<T>& src,
                                           int h, int w) {
  const int channels = p.channels;
  const size_t plane = static_cast<size_t>(h) * w;
  std::vector<float> want(src.size());
  for (size_t i = 0; i < src.size(); ++i) {
    const size_t c = i % static_cast<size_t>(channels), px = i / static_cast<size_t>(channels);
    want[c * plane + px] = (static_cast<float>(src[i]) - p.mean[c]) * (1.0f / p.std[c]);
  }
  for (bool plain : {false, true}) {
    const normalize::RowNormalizerF32 norm(p, plain);
    std::vector<float> got(src.size(), -7.0f);
    for (int y = 0; y < h; ++y) {
      norm.Row(src.data() + static_cast<size_t>(y) * w * channels, w,
               got.data() + static_cast<size_t>(y) * w, plane);
    }
    EXPECT_EQ(std::memcmp(got.data(), want.data(), got.size() * sizeof(float)), 0)
        << sizeof(T) * 8 << "-bit, channels " << channels << " width " << w << " plain " << plain;
  }
  return want;
}

TEST(RowNormalizer, MatchesTheBatchKernelBitForBit) {
  std::mt19937 rng(3);
  for (int channels = 1; channels <= 4; ++channels) {
    NormalizeParams p;
    p.channels = channels;
    for (int c = 0; c < channels; ++c) {
      p.mean[c] = 100.0f + 13.7f * static_cast<float>(c);
      p.std[c] = 51.3f + 7.1f * static_cast<float>(c);
    }
    for (int w = 1; w <= 40; ++w) {
      const int h = 300 / w + 1;  // every uint8 value shows up in every channel
      std::vector<uint8_t> src(static_cast<size_t>(h) * w * channels);
      for (size_t i = 0; i < src.size(); ++i) src[i] = static_cast<uint8_t>(i < 256 ? i : rng());
      // The row normalizer and the table kernel (mirror forces it for every channel count)
      // against the formula written out (the batch kernel itself runs RowNormalizerF32 for gray
      // and RGB).
      const std::vector<float> want = ExpectRowsAreTheFormula(p, src, h, w);
      std::vector<float> table(src.size());
      std::vector<uint8_t> mirrored(src.size());
      for (int y = 0; y < h; ++y) {
        for (int x = 0; x < w; ++x) {
          for (int c = 0; c < channels; ++c) {
            mirrored[(static_cast<size_t>(y) * w + x) * channels + c] =
                src[(static_cast<size_t>(y) * w + (w - 1 - x)) * channels + c];
          }
        }
      }
      NormalizeParams mirror = p;
      mirror.mirror = true;
      ASSERT_TRUE(NormalizeNhwcToNchwF32(mirrored.data(), 1, h, w, mirror, table.data()).ok());
      ASSERT_EQ(std::memcmp(table.data(), want.data(), want.size() * sizeof(float)), 0)
          << "channels " << channels << " width " << w;
    }
  }
}

// The uint16 rows (16-bit gray PNGs on the fast path): the same formula bit for bit, for every
// width around the 8-pixel SIMD step, values across the whole 16-bit range.
TEST(RowNormalizer, SixteenBitRowsMatchTheFormulaBitForBit) {
  std::mt19937 rng(5);
  for (int channels = 1; channels <= 4; ++channels) {
    NormalizeParams p;
    p.channels = channels;
    for (int c = 0; c < channels; ++c) {
      p.mean[c] = 1023.7f + 311.3f * static_cast<float>(c);
      p.std[c] = 517.1f + 7.9f * static_cast<float>(c);
    }
    for (int w = 1; w <= 40; ++w) {
      const int h = 3;
      std::vector<uint16_t> src(static_cast<size_t>(h) * w * channels);
      for (size_t i = 0; i < src.size(); ++i) {
        src[i] = static_cast<uint16_t>(i < 2 ? (i == 0 ? 0 : 65535) : rng());
      }
      ExpectRowsAreTheFormula(p, src, h, w);
    }
  }
}

constexpr int kCount = 13;
constexpr int kH = 19, kW = 37;  // odd: the SIMD loops' tails run

class FusedLoaderTest : public testing::EncodedLmdbTest {
 protected:
  FusedLoaderTest() : EncodedLmdbTest(kCount, kH, kW) {}

  static LoaderOptions Options() {
    LoaderOptions o;
    o.batch_size = 4;
    o.threads = 2;
    o.augment.hflip = 0.5;
    o.normalize = NormalizeMode::kCpuFloat32;
    return o;
  }
  std::unique_ptr<Loader> Open(const LoaderOptions& o) {
    std::unique_ptr<Loader> loader;
    const Status s = Loader::Open(path_, o, &loader);
    EXPECT_TRUE(s.ok()) << s.ToString();
    return loader;
  }
  std::vector<testing::BatchCopy> Run(const LoaderOptions& o, bool fused, int epochs = 2) {
    FusedScope scope(fused);
    auto loader = Open(o);
    return testing::RunEpochs(loader.get(), 0, epochs);
  }

  // Replaces record `index`'s image with a valid PNG (right CRCs and adler32) whose last row has
  // filter type 7: the fused decode has written and normalized the rows above when it fails.
  void BadLastRow(uint64_t index) {
    std::string raw;
    for (int y = 0; y < kH; ++y) {
      raw += static_cast<char>(y == kH - 1 ? 7 : 0);
      for (int i = 0; i < kW * 3; ++i) raw += static_cast<char>((y * 31 + i) & 0xFF);
    }
    uLongf n = compressBound(raw.size());
    std::string z(n, '\0');
    ASSERT_EQ(compress2(reinterpret_cast<Bytef*>(z.data()), &n,
                        reinterpret_cast<const Bytef*>(raw.data()), raw.size(), 6),
              Z_OK);
    z.resize(n);
    std::string ihdr;
    testing::PutBe32(&ihdr, kW);
    testing::PutBe32(&ihdr, kH);
    ihdr += std::string("\x08\x02\x00\x00\x00", 5);
    std::string png("\x89PNG\r\n\x1a\n", 8);
    testing::AppendPngChunk(&png, "IHDR", ihdr);
    testing::AppendPngChunk(&png, "IDAT", z);
    testing::AppendPngChunk(&png, "IEND", "");
    const std::string old = testing::ReadRecord(path_, index);
    RecordView view;
    ASSERT_TRUE(DecodeRecord(testing::AsBytes(old), false, &view).ok());
    std::string value;
    EncodeRecord(view.header, testing::AsBytes(png), view.mask, &value);
    testing::OverwriteRecord(path_, index, value);
  }
};

TEST_F(FusedLoaderTest, SameBatchesAsDecodeThenFlipThenNormalize) {
  const LoaderOptions o = Options();
  const auto fused = Run(o, true), unfused = Run(o, false);
  ASSERT_EQ(fused.size(), unfused.size());
  int flipped = 0;
  for (size_t i = 0; i < fused.size(); ++i) {
    EXPECT_TRUE(fused[i] == unfused[i]) << "batch " << i;
    for (uint8_t f : fused[i].hflip) flipped += f;
    ASSERT_FALSE(fused[i].normalized.empty());
  }
  EXPECT_GT(flipped, 0);  // both branches ran
  EXPECT_LT(flipped, 2 * kCount);
  // Without normalize (only the flip is fused), gray output (not fused: RGB records), deferred
  // flips (nothing mirrored).
  LoaderOptions plain = o;
  plain.normalize = NormalizeMode::kNone;
  EXPECT_TRUE(Run(plain, true) == Run(plain, false));
  LoaderOptions gray = o;
  gray.channels = 1;
  gray.mean = {120.0};
  gray.std = {60.0};
  EXPECT_TRUE(Run(gray, true) == Run(gray, false));
  LoaderOptions deferred = o;
  deferred.normalize = NormalizeMode::kNone;
  deferred.defer_hflip = true;
  EXPECT_TRUE(Run(deferred, true) == Run(deferred, false));
}

TEST_F(FusedLoaderTest, CorruptRecordIsSkippedAsBeforeAndNamedByKey) {
  BadLastRow(5);
  LoaderOptions o = Options();
  o.sampler.shuffle = false;  // batch 1 holds 4..7: 5 fails after its other rows were written
  {
    FusedScope scope(true);
    auto loader = Open(o);
    Batch b;
    ASSERT_TRUE(loader->Next(&b).ok());
    const Status s = loader->Next(&b);
    ASSERT_EQ(s.code(), Status::Code::kCorruption) << s.ToString();
    EXPECT_NE(s.message().find(KeyName(5)), std::string::npos) << s.ToString();
    EXPECT_NE(s.message().find("filter type 7"), std::string::npos) << s.ToString();
  }
  o.max_corrupt = 2;
  const auto fused = Run(o, true), unfused = Run(o, false);
  ASSERT_EQ(fused.size(), unfused.size());
  for (size_t i = 0; i < fused.size(); ++i) EXPECT_TRUE(fused[i] == unfused[i]) << "batch " << i;
  ASSERT_GE(fused.size(), 2u);
  EXPECT_EQ(fused[1].indices, (std::vector<uint64_t>{4, 6, 7}));
}

TEST_F(FusedLoaderTest, DecodeStageHoldsTheFusedFlipAndNormalize) {
  const LoaderOptions o = Options();
  for (bool fused : {true, false}) {
    FusedScope scope(fused);
    auto loader = Open(o);
    testing::RunEpochs(loader.get(), 0, 1);
    StageStats& st = loader->stats();
    EXPECT_EQ(st.Summary(Stage::kDecode).count, static_cast<uint64_t>(kCount)) << fused;
    EXPECT_EQ(st.Summary(Stage::kNormalize).count, 4u) << fused;  // one per batch
    if (fused) {
      // Every sample took the fused path: no separate flip, no separate normalize time.
      EXPECT_EQ(st.Summary(Stage::kTransform).count, 0u);
      EXPECT_EQ(st.Summary(Stage::kNormalize).total_ms, 0.0);
    } else {
      EXPECT_EQ(st.Summary(Stage::kTransform).count, static_cast<uint64_t>(kCount));
      EXPECT_GT(st.Summary(Stage::kNormalize).total_ms, 0.0);
    }
  }
}

}  // namespace
}  // namespace dspipe
