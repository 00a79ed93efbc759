// SPDX-License-Identifier: Apache-2.0
// The vector kernels (simd.cc) give exactly what the plain code gives: FlipHorizontal is
// cv::flip(.., 1) for every width (the 5- and 16-pixel steps and their tails) and for ROI
// headers; LookUpRow is a table lookup for every length (the 64-byte steps and the tail);
// WarpAffine gives cv::warpAffine's bytes (OpenCV 4.6's fixed point) for every case it takes.
#include "transforms/simd.h"

#include <gtest/gtest.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <opencv2/core.hpp>
#include <opencv2/imgproc.hpp>
#include <random>
#include <vector>

#include "core/rng.h"

namespace dspipe::transforms {
namespace {

TEST(TransformSimd, FlipHorizontalIsCvFlip) {
  cv::RNG rng(4);
  for (int channels : {1, 3}) {
    for (int w = 1; w <= 140; ++w) {
      cv::Mat src(5, w, CV_8UC(channels)), want, got;
      rng.fill(src, cv::RNG::UNIFORM, 0, 256);
      cv::flip(src, want, 1);
      FlipHorizontal(src, &got);
      ASSERT_EQ(cv::norm(want, got, cv::NORM_INF), 0) << channels << " channels, width " << w;
      // Into a ROI of a larger image: nothing around it is touched.
      cv::Mat big(9, w + 8, CV_8UC(channels), cv::Scalar::all(7));
      cv::Mat roi = big(cv::Rect(3, 2, w, 5));
      FlipHorizontal(src, &roi);
      ASSERT_EQ(cv::norm(want, roi, cv::NORM_INF), 0);
      cv::Mat outside = big.clone();
      cv::Mat(5, w, CV_8UC(channels), cv::Scalar::all(7)).copyTo(outside(cv::Rect(3, 2, w, 5)));
      ASSERT_EQ(cv::countNonZero(outside.reshape(1) != 7), 0) << "wrote outside the ROI";
    }
  }
}

// Random maps (rotations, scales, shears, shifts, flips, exact half-pixel and integer ones,
// maps that leave the image) on images of 1-4 channels, sizes down to 1x1, both borders, both
// interpolations, forward and inverse matrices, ROI sources and ROI destinations: the same bytes
// as cv::warpAffine.
TEST(TransformSimd, WarpAffineIsCvWarpAffine) {
  cv::RNG rng(11);
  std::mt19937 gen(5);
  std::uniform_real_distribution<double> u(-1, 1);
  int cases = 0;
  for (int i = 0; i < 1500; ++i) {
    const int channels = 1 + i % 4;
    const int h = i % 97 == 0 ? 1 : 1 + static_cast<int>(gen() % 70);
    const int w = i % 89 == 0 ? 1 : 1 + static_cast<int>(gen() % 70);
    cv::Mat big(h + 4, w + 6, CV_8UC(channels));
    rng.fill(big, cv::RNG::UNIFORM, 0, 256);
    const cv::Mat src = i % 3 == 0 ? big(cv::Rect(2, 1, w, h)) : big(cv::Rect(0, 0, w, h));
    const double angle = u(gen) * (i % 5 == 0 ? 180 : 20) * CV_PI / 180;
    const double scale = i % 7 == 0 ? 1.0 : 1 + 0.4 * u(gen);
    const double shear = i % 2 == 0 ? 0.0 : 0.2 * u(gen);
    double m[6] = {scale * std::cos(angle), -scale * std::sin(angle) + shear, 0,
                   scale * std::sin(angle), scale * std::cos(angle),          0};
    if (i % 11 == 0) m[0] = -1, m[1] = 0, m[3] = 0, m[4] = 1;  // a flip
    m[2] = w * u(gen) * (i % 13 == 0 ? 2 : 0.3) + (i % 17 == 0 ? 0.5 : 0);
    m[5] = h * u(gen) * (i % 13 == 0 ? 2 : 0.3);
    if (i % 19 == 0) m[2] = std::round(m[2]), m[5] = std::round(m[5]) + 0.5;
    const cv::Mat mat(2, 3, CV_64F, m);
    const int most = i % 50 == 0 ? 300 : 80;  // sizes of many 16-pixel vector steps too
    const cv::Size size(1 + static_cast<int>(gen() % most), 1 + static_cast<int>(gen() % most));
    const int interp = i % 2 == 0 ? cv::INTER_LINEAR : cv::INTER_NEAREST;
    const int flags = interp | (i % 4 < 2 ? cv::WARP_INVERSE_MAP : 0);
    const int border = i % 3 == 2 ? cv::BORDER_REPLICATE : cv::BORDER_CONSTANT;
    const cv::Scalar value(7, 200, 33, 255);
    cv::Mat want, got;
    cv::warpAffine(src, want, mat, size, flags, border, value);
    cv::Mat out(size.height + 2, size.width + 2, src.type(), cv::Scalar::all(9));
    cv::Mat roi = out(cv::Rect(1, 1, size.width, size.height));
    got = i % 2 == 0 ? roi : cv::Mat();
    WarpAffine(src, &got, mat, size, flags, border, value);
    ASSERT_EQ(got.size(), size);
    ASSERT_EQ(cv::norm(want, got, cv::NORM_INF), 0)
        << "case " << i << ": " << channels << " channels " << w << "x" << h << " -> " << size
        << (interp == cv::INTER_LINEAR ? " linear" : " nearest") << " border " << border;
    if (i % 2 == 0) {  // written into the ROI, nothing around it
      ASSERT_EQ(got.data, roi.data);
      cv::Mat outside = out.clone();
      outside(cv::Rect(1, 1, size.width, size.height)).setTo(cv::Scalar::all(9));
      ASSERT_EQ(cv::countNonZero(outside.reshape(1) != 9), 0);
    }
    ++cases;
  }
  EXPECT_EQ(cases, 1500);
}

// The vector steps' reads (gathers, which ASan does not see) stay inside the image: images
// that end right before an unmapped page, or start right after one, warped every way.
TEST(TransformSimd, WarpAffineReadsOnlyTheImage) {
  const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  void* mem = mmap(nullptr, 3 * page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  ASSERT_NE(mem, MAP_FAILED);
  uint8_t* base = static_cast<uint8_t*>(mem);
  ASSERT_EQ(mprotect(base, page, PROT_NONE), 0);             // a guard before the middle page
  ASSERT_EQ(mprotect(base + 2 * page, page, PROT_NONE), 0);  // and one after it
  uint8_t* const middle = base + page;
  std::mt19937 gen(3);
  std::uniform_real_distribution<double> u(-1, 1);
  for (int i = 0; i < 400; ++i) {
    const int channels = i % 2 == 0 ? 3 : 1 + (i / 2) % 4;
    const int w = 17 + static_cast<int>(gen() % 16), h = 9 + static_cast<int>(gen() % 16);
    const size_t bytes = static_cast<size_t>(w) * h * channels;
    ASSERT_LE(bytes, page);
    uint8_t* at = i % 4 < 2 ? middle + page - bytes : middle;  // flush with the end, or the start
    for (size_t k = 0; k < bytes; ++k) at[k] = static_cast<uint8_t>(k * 31 + i);
    const cv::Mat src(h, w, CV_8UC(channels), at);
    const double angle = u(gen) * 0.6, scale = 1 + 0.2 * u(gen);
    double m[6] = {scale * std::cos(angle), -scale * std::sin(angle), w * 0.3 * u(gen),
                   scale * std::sin(angle), scale * std::cos(angle),  h * 0.3 * u(gen)};
    const cv::Mat mat(2, 3, CV_64F, m);
    const int interp = i % 3 == 0 ? cv::INTER_NEAREST : cv::INTER_LINEAR;
    const int border = i % 5 == 0 ? cv::BORDER_REPLICATE : cv::BORDER_CONSTANT;
    cv::Mat want, got;
    cv::warpAffine(src, want, mat, cv::Size(w + 16, h + 5), interp, border);
    WarpAffine(src, &got, mat, cv::Size(w + 16, h + 5), interp, border, cv::Scalar());
    ASSERT_EQ(cv::norm(want, got, cv::NORM_INF), 0) << "case " << i;
  }
  munmap(mem, 3 * page);
}

TEST(TransformSimd, LookUpIsATableLookup) {
  std::mt19937 rng(5);
  uint8_t lut[4][256];
  for (auto& t : lut) {
    for (auto& v : t) v = static_cast<uint8_t>(rng());
  }
  uint8_t same[4][256];
  for (auto& t : same) std::copy(lut[0], lut[0] + 256, t);
  for (size_t n : {0u, 1u, 63u, 64u, 65u, 200u, 1000u, 3 * 333u}) {
    std::vector<uint8_t> data(n), a, b(n);
    for (auto& v : data) v = static_cast<uint8_t>(rng());
    a = data;
    LookUpRow(a.data(), n, 1, same);
    for (size_t i = 0; i < n; ++i) b[i] = same[0][data[i]];
    ASSERT_EQ(a, b) << n;
    if (n % 3 != 0) continue;
    a = data;
    LookUpRow(a.data(), n, 3, lut);  // a table per channel
    for (size_t i = 0; i < n; ++i) b[i] = lut[i % 3][data[i]];
    ASSERT_EQ(a, b) << n;
  }
}

// The noise kernel (AVX-512 where the CPU has it) against its definition written out.
TEST(TransformSimd, NoiseRowIsItsDefinition) {
  std::vector<int16_t> table(4097);  // + the padding entry
  std::mt19937 rng(6);
  for (auto& v : table) v = static_cast<int16_t>(static_cast<int>(rng() % 1025) - 512);
  for (size_t n : {1u, 31u, 32u, 33u, 100u, 1536u, 1537u}) {
    std::vector<uint8_t> data(n);
    for (auto& v : data) v = static_cast<uint8_t>(rng());
    std::vector<uint8_t> got = data, want = data;
    const uint64_t seed = 0x1234567u, first = 17;
    EXPECT_EQ(AddNoiseRow(got.data(), n, table.data(), seed, first), (n + 3) / 4);
    for (size_t i = 0; i < n; ++i) {
      const uint64_t word = Mix64(seed + (first + i / 4) * 0x9E3779B97F4A7C15ULL);
      const int q = static_cast<int>((word >> (16 * (i % 4))) & 0xFFF);
      want[i] = static_cast<uint8_t>(
          std::clamp(static_cast<int>(data[i]) + table[static_cast<size_t>(q)], 0, 255));
    }
    ASSERT_EQ(got, want) << n;
  }
}

// RangeMapRow (AVX2, 8 values a step) gives the bits the definition gives, one float32 op at a
// time, for every tail length, with and without rescale / clip, NaN and infinities included.
TEST(TransformSimd, RangeMapRowIsItsDefinition) {
  std::mt19937 gen(5);
  std::uniform_real_distribution<float> u(-3000.0f, 5000.0f);
  for (int variant = 0; variant < 4; ++variant) {
    RangeMapParams m;
    m.a_min = -175, m.span = 425;  // a CT window
    m.rescale = variant & 1, m.scale = 0.7f, m.offset = 0.1f;
    m.clip = variant & 2, m.lo = 0.1f, m.hi = 0.8f;
    for (size_t n = 0; n <= 37; ++n) {
      std::vector<float> v(n);
      for (float& x : v) x = u(gen);
      if (n > 3) v[1] = NAN, v[2] = INFINITY, v[3] = -INFINITY;
      std::vector<float> want = v;
      for (float& x : want) {
        float t = (x - m.a_min) / m.span;
        if (m.rescale) {
          const float scaled = t * m.scale;
          t = scaled + m.offset;
        }
        if (m.clip) t = std::min(std::max(t, m.lo), m.hi);
        x = t;
      }
      RangeMapRow(v.data(), n, m);
      for (size_t i = 0; i < n; ++i) {
        if (std::isnan(want[i])) {
          ASSERT_TRUE(std::isnan(v[i])) << variant << " " << n << " " << i;
        } else {
          ASSERT_EQ(v[i], want[i]) << variant << " " << n << " " << i;
        }
      }
    }
  }
}

// AddNormalRow (AVX-512: 16 values a step, the rare values outside their rectangle from the
// slow stream in order) gives the bits of the plain loop, which one value at a time takes; the
// slow stream ends in the same state. Lengths cover the tails, and rows starting on either
// half of a counter word; 100k values take the slow path ~0.7%.
TEST(TransformSimd, AddNormalRowIsThePlainLoop) {
  for (size_t n : {size_t{0}, size_t{1}, size_t{7}, size_t{15}, size_t{16}, size_t{17}, size_t{33},
                   size_t{100000}}) {
    for (uint64_t first : {uint64_t{17}, uint64_t{18}}) {  // a word's second value, its first
      std::vector<float> a(n), b(n);
      for (size_t i = 0; i < n; ++i) a[i] = b[i] = static_cast<float>(i % 13) - 6.0f;
      Rng slow_a(99), slow_b(99);
      AddNormalRow(a.data(), n, 2.0, 0.5, 1234, first, &slow_a);
      for (size_t i = 0; i < n; ++i) {
        AddNormalRow(b.data() + i, 1, 2.0, 0.5, 1234, first + i, &slow_b);
      }
      for (size_t i = 0; i < n; ++i) ASSERT_EQ(a[i], b[i]) << n << " " << first << " " << i;
      EXPECT_EQ(slow_a.Next(), slow_b.Next()) << n << " " << first;
    }
  }
}

}  // namespace
}  // namespace dspipe::transforms
