// SPDX-License-Identifier: Apache-2.0
// The accuracy of the loader's JPEG decode (codec::DecodePayload: only the MCUs covering the
// sample's crop, at a DCT scale when the output is smaller; then codec::ResampleRegion) against
// the decoder dspipe used before it: cv::imdecode of the whole file (EXIF orientation applied),
// crop, cv::resize. A sweep of crops and output sizes over every kind of JPEG file: odd sizes,
// 4:2:0 / 4:2:2 / 4:4:4, progressive, restart markers, grayscale, CMYK and YCCK (Adobe), each
// EXIF orientation. Prints max and mean |diff| per case (the table in docs/MEASUREMENTS.md,
// "Accuracy against the full decode"; set DSPIPE_JPEG_ACCURACY_TABLE=FILE to also write it to
// FILE).
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <opencv2/imgcodecs.hpp>
#include <opencv2/imgproc.hpp>
#include <string>
#include <vector>

#include "codec/image.h"
#include "codec/jpeg_decode.h"
#include "codec/jpeg_test_images.h"
#include "codec/region.h"
#include "codec/test_images.h"
#include "dspipe/augment.h"

namespace dspipe::codec {
namespace {

using dspipe::testing::AsBytes;
using dspipe::testing::EncodeJpeg;
using dspipe::testing::JpegEncodeParams;
using dspipe::testing::NaturalImage;
using dspipe::testing::WithExifOrientation;

struct Case {
  std::string name;
  std::string jpeg;
  int channels = 3;  // decoded channels
};

cv::Mat Cmyk(const cv::Mat& rgb) {
  // Any 4 planes do: the test compares two decoders of the same file.
  cv::Mat k;
  cv::cvtColor(rgb, k, cv::COLOR_RGB2GRAY);
  std::vector<cv::Mat> planes;
  cv::split(rgb, planes);
  planes.push_back(255 - k);
  cv::Mat out;
  cv::merge(planes, out);
  return out;
}

std::vector<Case> Cases() {
  std::vector<Case> cases;
  auto add = [&](std::string name, const cv::Mat& img, JpegEncodeParams p, int channels = 3) {
    cases.push_back({std::move(name), EncodeJpeg(img, p), channels});
  };
  add("4:2:0 q90 500x375", NaturalImage(500, 375, 1), {});
  add("4:2:0 odd 333x251", NaturalImage(333, 251, 2), {});
  add("4:2:2 odd 301x203", NaturalImage(301, 203, 3), {.h_samp = 2, .v_samp = 1});
  add("4:4:4 400x300", NaturalImage(400, 300, 4), {.h_samp = 1, .v_samp = 1});
  add("progressive 4:2:0 450x338", NaturalImage(450, 338, 5), {.progressive = true});
  add("restart markers 417x311", NaturalImage(417, 311, 6), {.restart_rows = 1});
  // A restart marker after every MCU: the region is decoded from its MCUs alone.
  add("restart every MCU 4:2:0 417x311", NaturalImage(417, 311, 14), {.restart_mcus = 1});
  add("restart every MCU 4:2:2 301x203", NaturalImage(301, 203, 15),
      {.h_samp = 2, .v_samp = 1, .restart_mcus = 1});
  add("restart every MCU 4:4:4 200x150", NaturalImage(200, 150, 16),
      {.h_samp = 1, .v_samp = 1, .restart_mcus = 1});
  cv::Mat gray;
  cv::cvtColor(NaturalImage(389, 277, 7), gray, cv::COLOR_RGB2GRAY);
  add("grayscale 389x277", gray, {});
  add("grayscale 389x277 -> 1 ch", gray, {}, 1);
  add("grayscale restart every MCU 389x277", gray, {.restart_mcus = 1}, 1);
  add("4:2:0 color -> 1 ch 351x263", NaturalImage(351, 263, 8), {}, 1);
  add("CMYK Adobe 320x240", Cmyk(NaturalImage(320, 240, 9)), {});
  add("YCCK Adobe 4:2:0 321x241", Cmyk(NaturalImage(321, 241, 10)), {.ycck = true});
  add("CMYK restart every MCU 320x240", Cmyk(NaturalImage(320, 240, 17)), {.restart_mcus = 1});
  const std::string oriented = EncodeJpeg(NaturalImage(303, 211, 11), {});
  for (int o = 2; o <= 8; ++o) {
    cases.push_back({"EXIF orientation " + std::to_string(o) + " 303x211",
                     WithExifOrientation(oriented, o), 3});
  }
  cases.push_back(
      {"EXIF orientation 6 restart every MCU 303x211",
       WithExifOrientation(EncodeJpeg(NaturalImage(303, 211, 18), {.restart_mcus = 1}), 6), 3});
  add("4:2:0 large 1601x1201", NaturalImage(1601, 1201, 12), {});
  add("progressive large 1600x1200", NaturalImage(1600, 1200, 13), {.progressive = true});
  return cases;
}

// The old decoder: cv::imdecode(IMREAD_COLOR) (EXIF applied), to RGB or gray.
cv::Mat OpenCvDecode(const std::string& jpeg, int channels) {
  cv::Mat bgr = dspipe::testing::OpenCvRgb(jpeg);
  if (channels == 1) {
    cv::Mat g;
    cv::cvtColor(bgr, g, cv::COLOR_RGB2GRAY);
    return g;
  }
  return bgr;
}

cv::Mat Resized(const cv::Mat& full, const AugmentParams& p, int oh, int ow, int interp) {
  cv::Mat out;
  cv::resize(full(cv::Rect(p.crop_x, p.crop_y, p.crop_w, p.crop_h)), out, cv::Size(ow, oh), 0, 0,
             interp);
  return out;
}

struct Routed {
  cv::Mat pixels;
  DecodePath path = DecodePath::kCount;
};

// The loader's way: DecodePayload for the crop and output size, then ResampleRegion.
Routed Route(const std::string& jpeg, int channels, int h, int w, const AugmentParams& p, int oh,
             int ow) {
  DecodeRequest q;
  q.codec = Codec::kJpeg;
  q.payload = AsBytes(jpeg);
  q.channels = channels;
  q.height = h;
  q.width = w;
  q.crop_x = p.crop_x;
  q.crop_y = p.crop_y;
  q.crop_w = p.crop_w;
  q.crop_h = p.crop_h;
  q.out_height = oh;
  q.out_width = ow;
  cv::Mat scratch;
  DecodedImage d;
  const Status s = DecodePayload(q, &scratch, &d);
  EXPECT_TRUE(s.ok()) << s.ToString();
  Routed r;
  r.path = d.path;
  r.pixels.create(oh, ow, CV_8UC(channels));
  if (!s.ok()) return r;
  const Status rs = ResampleRegion(d.image, d.crop, Interpolation::kLinear, false, false,
                                   ImageRef{r.pixels.data, oh, ow, channels});
  EXPECT_TRUE(rs.ok()) << rs.ToString();
  return r;
}

// The crops of the sweep for a h x w image: RandomResizedCrop draws (scale 0.08..1) plus the
// corners, a thin strip and the whole image.
std::vector<AugmentParams> Crops(int h, int w, int n) {
  AugmentOptions o;
  o.crop_scale_min = 0.08;
  std::vector<AugmentParams> out;
  for (int i = 0; i < n; ++i) out.push_back(DrawAugment(o, 7, 0, static_cast<uint64_t>(i), h, w));
  auto rect = [&](int x, int y, int cw, int ch) {
    AugmentParams p;
    p.crop_x = x;
    p.crop_y = y;
    p.crop_w = cw;
    p.crop_h = ch;
    out.push_back(p);
  };
  rect(0, 0, w / 3, h / 3);
  rect(w - w / 4, h - h / 4, w / 4, h / 4);
  rect(16, 16, w - 32, 9);  // a strip starting on an MCU boundary
  rect(0, 0, w, h);
  return out;
}

struct Diff {
  int max = 0;
  double sum = 0;
  uint64_t n = 0;
  void Add(const cv::Mat& a, const cv::Mat& b) {
    cv::Mat d;
    cv::absdiff(a, b, d);
    double mx = 0;
    cv::minMaxLoc(d.reshape(1), nullptr, &mx);
    max = std::max(max, static_cast<int>(mx));
    sum += cv::sum(d)[0] + cv::sum(d)[1] + cv::sum(d)[2] + cv::sum(d)[3];
    n += d.total() * static_cast<uint64_t>(d.channels());
  }
  double mean() const { return n > 0 ? sum / static_cast<double>(n) : 0; }
};

struct ScalesScope {
  explicit ScalesScope(JpegScales s) : old_(GetJpegScales()) { SetJpegScales(s); }
  ~ScalesScope() { SetJpegScales(old_); }
  JpegScales old_;
};

std::string Fmt(const Diff& d) {
  char buf[48];
  std::snprintf(buf, sizeof buf, "%d / %.3f", d.max, d.mean());
  return buf;
}

// A whole-image decode is the old decoder's output, bit for bit, for every kind of file.
TEST(JpegDecode, WholeImageIsBitIdenticalToOpenCv) {
  for (const Case& c : Cases()) {
    const cv::Mat want = OpenCvDecode(c.jpeg, c.channels);
    ASSERT_FALSE(want.empty()) << c.name;
    cv::Mat got;
    ASSERT_TRUE(DecodeImage(AsBytes(c.jpeg), c.channels, &got).ok()) << c.name;
    EXPECT_EQ(dspipe::testing::CountDiff(got, want), 0) << c.name;
    std::vector<uint8_t> dst(want.total() * want.elemSize());
    ASSERT_TRUE(DecodePayloadInto(Codec::kJpeg, AsBytes(c.jpeg), c.channels, want.rows, want.cols,
                                  dst.data())
                    .ok())
        << c.name;
    EXPECT_TRUE(std::equal(dst.begin(), dst.end(), want.data)) << c.name;
    ImageProbe probe;
    ASSERT_TRUE(Probe(AsBytes(c.jpeg), &probe).ok()) << c.name;
    EXPECT_EQ(probe.width, want.cols) << c.name;
    EXPECT_EQ(probe.height, want.rows) << c.name;
  }
}

// Narrow crops anywhere in small images: jpeg_crop_scanline would leave a crop 1-2 pixels wide
// (at the left edge, or in a last iMCU column 1-2 pixels wide, widths 16k + 1 and 16k + 2 in
// 4:2:0) fewer than 2 chroma samples per row, and libjpeg-turbo would drop fancy upsampling for
// the region, off by tens of levels from the whole image (two fuzz_jpeg_region findings). The
// region decode widens the crop until the chroma keeps 2 samples, and is exact: every column,
// crop widths 1-3, rows at the top, inside and at the bottom.
TEST(JpegDecode, NarrowRegionsAnywhereAreExact) {
  for (const auto& [hs, vs] : std::vector<std::pair<int, int>>{{2, 2}, {2, 1}, {1, 2}, {1, 1}}) {
    for (const int w : {17, 18, 34, 50, 51}) {
      const int h = 21;
      for (const int restart : {0, 1}) {
        const std::string jpeg = EncodeJpeg(NaturalImage(w, h, w + hs),
                                            {.h_samp = hs, .v_samp = vs, .restart_mcus = restart});
        const cv::Mat full = OpenCvDecode(jpeg, 3);
        ASSERT_EQ(full.cols, w);
        for (int x = 0; x < w; ++x) {
          for (int cw = 1; cw <= 3 && x + cw <= w; ++cw) {
            for (const auto& [y, ch] :
                 std::vector<std::pair<int, int>>{{0, 1}, {3, 11}, {h - 2, 2}}) {
              AugmentParams p;
              p.crop_x = x;
              p.crop_y = y;
              p.crop_w = cw;
              p.crop_h = ch;
              ScalesScope none(JpegScales::kNone);
              const Routed r = Route(jpeg, 3, h, w, p, p.crop_h, p.crop_w);
              EXPECT_EQ(r.path, DecodePath::kRoi);
              EXPECT_EQ(dspipe::testing::CountDiff(r.pixels, full(cv::Rect(x, y, cw, ch))), 0)
                  << hs << "x" << vs << " width " << w << " crop x " << x << " w " << cw << " y "
                  << y << " h " << ch << " restart every MCU " << restart;
            }
          }
        }
      }
    }
  }
}

// The sweep. Region decodes at scale 8/8 are compared with full decode + crop + resize, and so
// are the DCT-scaled ones, over the crops that took a scale below 8/8; "resize" is how far two
// standard resizes of those same crops differ (INTER_LINEAR vs INTER_AREA): the tolerance a
// resize allows anyway.
TEST(JpegDecode, RegionAndScaledDecodeMatchFullDecodeWithinResizeTolerance) {
  const std::vector<std::pair<int, int>> outs = {{224, 224}, {47, 61}};
  std::string table =
      "| case | crops | roi 8/8 vs full+linear | crops scaled (1/8, 1/4, 1/2) | roi+scaled vs "
      "full+linear | full+area vs full+linear | roi+scaled vs full+area | crops scaled (any "
      "n/8) | roi+scaled vs full+linear | full+area vs full+linear |\n"
      "|---|---|---|---|---|---|---|---|---|---|\n";
  for (const Case& c : Cases()) {
    const cv::Mat full = OpenCvDecode(c.jpeg, c.channels);
    const int h = full.rows, w = full.cols;
    Diff roi, simd, simd_resize, simd_area, all, all_resize;
    int crops = 0, simd_crops = 0, all_crops = 0;
    const bool progressive = c.name.find("progressive") != std::string::npos;
    for (const auto& [oh, ow] : outs) {
      for (const AugmentParams& p : Crops(h, w, w > 1000 ? 8 : 16)) {
        ++crops;
        const cv::Mat want = Resized(full, p, oh, ow, cv::INTER_LINEAR);
        const cv::Mat area = Resized(full, p, oh, ow, cv::INTER_AREA);
        {
          ScalesScope none(JpegScales::kNone);
          const Routed r = Route(c.jpeg, c.channels, h, w, p, oh, ow);
          roi.Add(r.pixels, want);
          const bool part = p.crop_w < w || p.crop_h < h;
          EXPECT_EQ(r.path, !part ? DecodePath::kFull
                                  : (progressive ? DecodePath::kProgressive : DecodePath::kRoi))
              << c.name;
        }
        if (ChooseJpegScale(p.crop_w, p.crop_h, ow, oh, JpegScales::kSimd) < 8) {
          ScalesScope scope(JpegScales::kSimd);
          const Routed r = Route(c.jpeg, c.channels, h, w, p, oh, ow);
          const bool part = p.crop_w < w || p.crop_h < h;
          // A crop whose scaled MCUs cover the whole image decodes it whole (kScaled).
          EXPECT_TRUE(r.path == DecodePath::kScaled ||
                      r.path == (progressive ? DecodePath::kProgressive : DecodePath::kRoiScaled))
              << c.name << " " << static_cast<int>(r.path) << " part " << part;
          ++simd_crops;
          simd.Add(r.pixels, want);
          simd_resize.Add(area, want);
          simd_area.Add(r.pixels, area);
        }
        if (ChooseJpegScale(p.crop_w, p.crop_h, ow, oh, JpegScales::kAll) < 8) {
          ScalesScope scope(JpegScales::kAll);
          ++all_crops;
          all.Add(Route(c.jpeg, c.channels, h, w, p, oh, ow).pixels, want);
          all_resize.Add(area, want);
        }
      }
    }
    table += "| " + c.name + " | " + std::to_string(crops) + " | " + Fmt(roi) + " | " +
             std::to_string(simd_crops) + " | " + Fmt(simd) + " | " + Fmt(simd_resize) + " | " +
             Fmt(simd_area) + " | " + std::to_string(all_crops) + " | " + Fmt(all) + " | " +
             Fmt(all_resize) + " |\n";
    // Region decodes at full scale are exact: the MCUs that cover the crop (and one column
    // beyond, for the chroma upsampling) decode to what the whole image decodes to there.
    EXPECT_EQ(roi.max, 0) << c.name;
    // DCT scaling averages where INTER_LINEAR picks single pixels, so the scaled result lies
    // between the two standard resizes: about as far from full decode + INTER_LINEAR as
    // INTER_AREA is (at most 1.5x), and nearer INTER_AREA than INTER_LINEAR is (within 10%).
    // Any n/8 (3/8, 5/8, ...) lands on scales just above the output: less averaging, further.
    EXPECT_GT(simd_crops, 0) << c.name;
    EXPECT_LE(simd.mean(), 1.5 * simd_resize.mean()) << c.name;
    EXPECT_LE(simd_area.mean(), 1.1 * simd_resize.mean()) << c.name;
    EXPECT_LE(all.mean(), 2.0 * all_resize.mean()) << c.name;
  }
  std::printf("%s", table.c_str());
  if (const char* path = std::getenv("DSPIPE_JPEG_ACCURACY_TABLE")) std::ofstream(path) << table;
}

}  // namespace
}  // namespace dspipe::codec
