// SPDX-License-Identifier: Apache-2.0
// CPU normalization: the lookup-table path against a plain-loop reference written here.
#include "dspipe/normalize.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <vector>

namespace dspipe {
namespace {

// The documented formula, written out with explicit NCHW / NHWC index arithmetic.
std::vector<float> Reference(const std::vector<uint8_t>& src, int n, int h, int w,
                             const NormalizeParams& p) {
  const int C = p.channels;
  std::vector<float> dst(static_cast<size_t>(n) * C * h * w);
  for (int i = 0; i < n; ++i)
    for (int c = 0; c < C; ++c)
      for (int y = 0; y < h; ++y)
        for (int x = 0; x < w; ++x) {
          const int sx = p.mirror ? w - 1 - x : x;
          const uint8_t v = src[((static_cast<size_t>(i) * h + y) * w + sx) * C + c];
          const float inv_std = 1.0f / p.std[c];
          dst[((static_cast<size_t>(i) * C + c) * h + y) * w + x] =
              (static_cast<float>(v) - p.mean[c]) * inv_std;
        }
  return dst;
}

std::vector<uint8_t> RandomBytes(size_t count, std::mt19937& rng) {
  std::uniform_int_distribution<int> d(0, 255);
  std::vector<uint8_t> v(count);
  for (auto& b : v) b = static_cast<uint8_t>(d(rng));
  return v;
}

NormalizeParams RandomParams(int channels, bool mirror, std::mt19937& rng) {
  std::uniform_real_distribution<float> mean(0.f, 255.f), sd(1.f, 100.f);
  NormalizeParams p;
  p.channels = channels;
  p.mirror = mirror;
  for (int c = 0; c < 4; ++c) p.mean[c] = mean(rng), p.std[c] = sd(rng);
  return p;
}

TEST(NormalizeCpu, HandComputedLayoutIdentity) {
  // 1 image, 2x2 RGB: pixel (y, x) = {10*y + x, 100 + ..., 200 + ...}.
  const std::vector<uint8_t> src = {0, 100, 200, 1, 101, 201, 10, 110, 210, 11, 111, 211};
  NormalizeParams p;  // identity: y = float(x)
  std::vector<float> dst(12, -1.f);
  ASSERT_TRUE(NormalizeNhwcToNchwF32(src.data(), 1, 2, 2, p, dst.data()).ok());
  const std::vector<float> want = {0, 1, 10, 11, 100, 101, 110, 111, 200, 201, 210, 211};
  EXPECT_EQ(dst, want);

  p.mirror = true;
  ASSERT_TRUE(NormalizeNhwcToNchwF32(src.data(), 1, 2, 2, p, dst.data()).ok());
  const std::vector<float> mirrored = {1, 0, 11, 10, 101, 100, 111, 110, 201, 200, 211, 210};
  EXPECT_EQ(dst, mirrored);
}

TEST(NormalizeCpu, HandComputedMeanStd) {
  // Two 1x1 gray images: (x - 100) / 50.
  const std::vector<uint8_t> src = {150, 0};
  NormalizeParams p;
  p.channels = 1;
  p.mean[0] = 100.f;
  p.std[0] = 50.f;
  std::vector<float> dst(2);
  ASSERT_TRUE(NormalizeNhwcToNchwF32(src.data(), 2, 1, 1, p, dst.data()).ok());
  EXPECT_FLOAT_EQ(dst[0], 1.0f);
  EXPECT_FLOAT_EQ(dst[1], -2.0f);
  std::vector<uint16_t> half(2);
  ASSERT_TRUE(NormalizeNhwcToNchwF16(src.data(), 2, 1, 1, p, half.data()).ok());
  EXPECT_EQ(half[0], 0x3c00);  // 1.0
  EXPECT_EQ(half[1], 0xc000);  // -2.0
}

TEST(NormalizeCpu, MatchesReferenceOverShapesAndChannels) {
  std::mt19937 rng(1234);
  for (int c = 1; c <= 4; ++c)
    for (int n : {1, 3})
      for (int h : {1, 3, 7})
        for (int w : {1, 3, 5, 17})
          for (bool mirror : {false, true}) {
            SCOPED_TRACE(testing::Message() << "n=" << n << " h=" << h << " w=" << w << " c=" << c
                                            << " mirror=" << mirror);
            const NormalizeParams p = RandomParams(c, mirror, rng);
            const auto src = RandomBytes(static_cast<size_t>(n) * h * w * c, rng);
            const auto want = Reference(src, n, h, w, p);
            std::vector<float> got(want.size(), std::numeric_limits<float>::quiet_NaN());
            ASSERT_TRUE(NormalizeNhwcToNchwF32(src.data(), n, h, w, p, got.data()).ok());
            ASSERT_EQ(got, want);  // bit-exact: same float operations in the same order

            std::vector<uint16_t> half(want.size(), 0xffff);
            ASSERT_TRUE(NormalizeNhwcToNchwF16(src.data(), n, h, w, p, half.data()).ok());
            for (size_t i = 0; i < want.size(); ++i) {
              const float g = HalfBitsToFloat(half[i]);
              ASSERT_LE(std::fabs(g - want[i]), 1e-3f * std::max(1.0f, std::fabs(want[i])))
                  << "element " << i;
              ASSERT_EQ(half[i], FloatToHalfBits(want[i])) << "element " << i;
            }
          }
}

TEST(NormalizeCpu, LargeImageNetBatch) {
  std::mt19937 rng(7);
  const NormalizeParams p = NormalizeParams::ImageNet();
  EXPECT_FLOAT_EQ(p.mean[0], 0.485f * 255.f);
  EXPECT_FLOAT_EQ(p.std[2], 0.225f * 255.f);
  const auto src = RandomBytes(2 * 64 * 48 * 3, rng);
  std::vector<float> got(src.size());
  ASSERT_TRUE(NormalizeNhwcToNchwF32(src.data(), 2, 64, 48, p, got.data()).ok());
  EXPECT_EQ(got, Reference(src, 2, 64, 48, p));
}

TEST(NormalizeCpu, EmptyShapesWriteNothing) {
  NormalizeParams p;
  float sentinel = 42.f;
  ASSERT_TRUE(NormalizeNhwcToNchwF32(nullptr, 0, 5, 5, p, &sentinel).ok());
  ASSERT_TRUE(NormalizeNhwcToNchwF32(nullptr, 3, 0, 5, p, &sentinel).ok());
  EXPECT_EQ(sentinel, 42.f);
}

TEST(NormalizeCpu, RejectsBadParams) {
  uint8_t px[4] = {};
  float out[4];
  NormalizeParams p;
  p.channels = 5;
  EXPECT_EQ(ValidateNormalizeParams(p).code(), Status::Code::kInvalidArgument);
  EXPECT_NE(ValidateNormalizeParams(p).message().find("channels"), std::string::npos);
  const Status bad = NormalizeNhwcToNchwF32(px, 1, 1, 1, p, out);
  EXPECT_EQ(bad.code(), Status::Code::kInvalidArgument) << bad.ToString();
  EXPECT_NE(bad.message().find("NormalizeNhwcToNchwF32"), std::string::npos) << bad.ToString();
  p.channels = 3;
  p.std[1] = 0.f;
  EXPECT_NE(ValidateNormalizeParams(p).message().find("std[1]"), std::string::npos);
  EXPECT_EQ(NormalizeNhwcToNchwF16(px, 1, 1, 1, p, reinterpret_cast<uint16_t*>(out)).code(),
            Status::Code::kInvalidArgument);
  p.std[1] = 1.f;
  p.mean[2] = std::numeric_limits<float>::infinity();
  EXPECT_NE(ValidateNormalizeParams(p).message().find("mean[2]"), std::string::npos);
  p.mean[2] = 0.f;
  EXPECT_TRUE(ValidateNormalizeParams(p).ok());
  EXPECT_EQ(NormalizeNhwcToNchwF32(px, -1, 1, 1, p, out).code(), Status::Code::kInvalidArgument);
}

TEST(MasksCpu, WidensAndMirrors) {
  std::mt19937 rng(99);
  const int n = 3, h = 5, w = 7;
  const auto src = RandomBytes(n * h * w, rng);
  std::vector<int64_t> plain(src.size(), -1), flipped(src.size(), -1);
  MasksToInt64(src.data(), src.size(), plain.data());
  MasksToInt64Nhw(src.data(), n, h, w, true, flipped.data());
  for (size_t i = 0; i < src.size(); ++i) ASSERT_EQ(plain[i], src[i]);
  for (int r = 0; r < n * h; ++r)
    for (int x = 0; x < w; ++x) ASSERT_EQ(flipped[r * w + x], src[r * w + (w - 1 - x)]);
  std::vector<int64_t> same(src.size(), -1);
  MasksToInt64Nhw(src.data(), n, h, w, false, same.data());
  EXPECT_EQ(same, plain);
  const uint8_t high = 255;
  int64_t out = 0;
  MasksToInt64(&high, 1, &out);
  EXPECT_EQ(out, 255);  // no sign extension
}

TEST(HalfConversion, KnownValues) {
  EXPECT_EQ(FloatToHalfBits(1.0f), 0x3c00);
  EXPECT_EQ(FloatToHalfBits(-0.0f), 0x8000);
  EXPECT_EQ(FloatToHalfBits(65504.f), 0x7bff);
  EXPECT_EQ(FloatToHalfBits(65519.f), 0x7bff);
  EXPECT_EQ(FloatToHalfBits(65520.f), 0x7c00);  // tie rounds to even -> inf
  EXPECT_EQ(FloatToHalfBits(0x1p-24f), 0x0001);
  EXPECT_EQ(FloatToHalfBits(0x1p-25f), 0x0000);      // tie -> even (0)
  EXPECT_EQ(FloatToHalfBits(0x1.8p-24f), 0x0002);    // 1.5 units, tie -> even (2)
  EXPECT_EQ(FloatToHalfBits(0x1.001p0f), 0x3c00);    // below the halfway point
  EXPECT_EQ(FloatToHalfBits(0x1.004p0f), 0x3c01);    // exactly representable
  EXPECT_EQ(FloatToHalfBits(0x1.002p0f), 0x3c00);    // tie -> even
  EXPECT_EQ(FloatToHalfBits(0x1.006p0f), 0x3c02);    // tie -> even (up)
  EXPECT_EQ(FloatToHalfBits(0x1.fffp-15f), 0x0400);  // subnormal rounding into normal
  EXPECT_EQ(FloatToHalfBits(std::numeric_limits<float>::infinity()), 0x7c00);
  const uint16_t nan = FloatToHalfBits(std::numeric_limits<float>::quiet_NaN());
  EXPECT_EQ(nan & 0x7c00, 0x7c00);
  EXPECT_NE(nan & 0x3ff, 0);
  EXPECT_TRUE(std::isnan(HalfBitsToFloat(nan)));
}

TEST(HalfConversion, RoundTripsEveryHalf) {
  for (uint32_t h = 0; h < 0x10000; ++h) {
    const float f = HalfBitsToFloat(static_cast<uint16_t>(h));
    if (std::isnan(f)) continue;
    ASSERT_EQ(FloatToHalfBits(f), h) << std::hex << h;
  }
  EXPECT_EQ(HalfBitsToFloat(0x0001), 0x1p-24f);
  EXPECT_EQ(HalfBitsToFloat(0xc000), -2.0f);
}

#ifdef __FLT16_MAX__
// The compiler's _Float16 conversion (round to nearest even) as an independent oracle.
TEST(HalfConversion, MatchesCompilerFloat16) {
  for (uint64_t bits = 0; bits < (1ull << 32); bits += 4099) {  // ~1M floats, all exponents
    const float f = std::bit_cast<float>(static_cast<uint32_t>(bits));
    if (std::isnan(f)) continue;
    const _Float16 h = static_cast<_Float16>(f);
    ASSERT_EQ(FloatToHalfBits(f), std::bit_cast<uint16_t>(h)) << std::hexfloat << f;
  }
  // Every rounding decision: the exact midpoint between adjacent halves and its neighbours.
  for (uint32_t hb = 0; hb < 0x7bff; ++hb) {
    const float lo = HalfBitsToFloat(static_cast<uint16_t>(hb));
    const float hi = HalfBitsToFloat(static_cast<uint16_t>(hb + 1));
    const float mid = lo + (hi - lo) / 2;  // exact in float
    for (float f : {mid, std::nextafter(mid, 0.f), std::nextafter(mid, 1e9f), -mid}) {
      ASSERT_EQ(FloatToHalfBits(f), std::bit_cast<uint16_t>(static_cast<_Float16>(f)))
          << std::hexfloat << f;
    }
  }
}
#endif

}  // namespace
}  // namespace dspipe
