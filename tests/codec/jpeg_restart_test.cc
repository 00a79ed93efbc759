// SPDX-License-Identifier: Apache-2.0
// The restart path (lib/codec/jpeg_restart.h): in a JPEG with a restart marker after every MCU,
// a region is decoded from a smaller JPEG of its MCUs alone, and must give the same pixels as
// the whole-image decode; AddJpegRestarts rewrites any JPEG that way without changing a pixel.
#include "codec/jpeg_restart.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <opencv2/imgproc.hpp>
#include <string>
#include <vector>

#include "codec/jpeg_decode.h"
#include "codec/jpeg_test_images.h"
#include "codec/test_images.h"

namespace dspipe::codec {
namespace {

using dspipe::testing::AsBytes;
using dspipe::testing::CountDiff;
using dspipe::testing::EncodeJpeg;
using dspipe::testing::NaturalImage;
using dspipe::testing::WithExifOrientation;

cv::Mat Whole(const std::string& jpeg, int channels = 3) {
  JpegDecodeOptions o;
  o.channels = channels;
  o.region = false;
  o.scales = JpegScales::kNone;
  cv::Mat out;
  JpegDecodeResult r;
  EXPECT_TRUE(DecodeJpeg(AsBytes(jpeg), o, &out, &r).ok());
  return out.clone();
}

struct Region {
  cv::Mat crop;  // the requested crop, cut out of what the decoder returned
  JpegDecodeResult result;
};

Region DecodeCrop(const std::string& jpeg, int x, int y, int w, int h, int channels = 3,
                  int out_side = 0) {
  JpegDecodeOptions o;
  o.channels = channels;
  o.crop_x = x;
  o.crop_y = y;
  o.crop_w = w;
  o.crop_h = h;
  o.out_width = o.out_height = out_side;
  o.scales = out_side > 0 ? JpegScales::kSimd : JpegScales::kNone;
  cv::Mat out;
  Region r;
  const Status s = DecodeJpeg(AsBytes(jpeg), o, &out, &r.result);
  EXPECT_TRUE(s.ok()) << s.ToString();
  if (!s.ok() || r.result.scale_num != 8) return r;
  r.crop = out(cv::Rect(static_cast<int>(r.result.crop.x), static_cast<int>(r.result.crop.y), w, h))
               .clone();
  return r;
}

std::vector<cv::Rect> Crops(int w, int h) {
  std::vector<cv::Rect> crops;
  for (const int cw : {1, 2, 3, 15, 16, 17, 33, w / 2, w - 1}) {
    for (const int ch : {1, 2, 9, 16, 31, h / 3, h - 1}) {
      if (cw < 1 || ch < 1 || cw > w || ch > h) continue;
      for (const int fx : {0, 1, 2, 3}) {  // left edge, inside, on an MCU edge, right edge
        const int x = fx == 0   ? 0
                      : fx == 1 ? (w - cw) / 3
                      : fx == 2 ? std::min(16, w - cw)
                                : w - cw;
        for (const int fy : {0, 1, 2, 3}) {
          const int y = fy == 0   ? 0
                        : fy == 1 ? (h - ch) / 2
                        : fy == 2 ? std::min(16, h - ch)
                                  : h - ch;
          crops.emplace_back(x, y, cw, ch);
        }
      }
    }
  }
  return crops;
}

// Every crop of restart-every-MCU files (each subsampling, odd sizes, gray, CMYK, an EXIF
// orientation) is decoded from its MCUs alone and equals the same crop of the whole image.
TEST(JpegRestart, RegionsFromTheirMcusAloneEqualTheWholeImage) {
  struct File {
    std::string name;
    std::string jpeg;
    int channels = 3;
  };
  std::vector<File> files;
  for (const auto& [hs, vs] : std::vector<std::pair<int, int>>{{2, 2}, {2, 1}, {1, 2}, {1, 1}}) {
    for (const auto& [w, h] : std::vector<std::pair<int, int>>{
             {97, 61}, {128, 64}, {50, 35}, {17, 18}, {18, 17}, {34, 33}, {33, 34}}) {
      files.push_back({std::to_string(hs) + "x" + std::to_string(vs) + " " + std::to_string(w) +
                           "x" + std::to_string(h),
                       EncodeJpeg(NaturalImage(w, h, w * 7 + hs + vs),
                                  {.h_samp = hs, .v_samp = vs, .restart_mcus = 1})});
    }
  }
  cv::Mat gray;
  cv::cvtColor(NaturalImage(83, 45, 3), gray, cv::COLOR_RGB2GRAY);
  files.push_back({"gray 83x45", EncodeJpeg(gray, {.restart_mcus = 1}), 1});
  files.push_back(
      {"4:2:0 -> 1 channel 75x41", EncodeJpeg(NaturalImage(75, 41, 4), {.restart_mcus = 1}), 1});
  files.push_back(
      {"EXIF orientation 6 73x51",
       WithExifOrientation(EncodeJpeg(NaturalImage(73, 51, 5), {.restart_mcus = 1}), 6)});
  for (const File& f : files) {
    const cv::Mat whole = Whole(f.jpeg, f.channels);
    int restarts = 0, crops = 0;
    for (const cv::Rect& c : Crops(whole.cols, whole.rows)) {
      const Region r = DecodeCrop(f.jpeg, c.x, c.y, c.width, c.height, f.channels);
      ++crops;
      restarts += r.result.restarts;
      EXPECT_EQ(CountDiff(r.crop, whole(c)), 0) << f.name << " crop " << c;
    }
    // Crops that need every MCU (and the whole image) take the usual path; the rest restart.
    EXPECT_GT(restarts, crops * 3 / 4) << f.name;
  }
}

// At DCT scales the region also comes from its MCUs alone, and its crop rectangle is where the
// whole image's scaled decode has it.
TEST(JpegRestart, ScaledRegionsUseTheRestartPath) {
  const std::string jpeg = EncodeJpeg(NaturalImage(640, 480, 9), {.restart_mcus = 1});
  const Region r = DecodeCrop(jpeg, 100, 60, 400, 300, 3, 100);
  EXPECT_TRUE(r.result.restarts);
  EXPECT_LT(r.result.scale_num, 8);
  EXPECT_TRUE(r.result.region);
}

// A file whose markers are not a clean every-MCU sequence (here one RSTn renumbered) is decoded
// the usual way: the same pixels the whole decode has, never an assembled file of the wrong MCUs.
TEST(JpegRestart, AFileWithMarkersOutOfSequenceTakesTheUsualPath) {
  std::string jpeg = EncodeJpeg(NaturalImage(96, 64, 2), {.restart_mcus = 1});
  size_t sos = jpeg.find("\xFF\xDA");
  ASSERT_NE(sos, std::string::npos);
  size_t rst = jpeg.find("\xFF\xD3", sos);  // the 4th marker
  ASSERT_NE(rst, std::string::npos);
  jpeg[rst + 1] = static_cast<char>(0xD5);
  const cv::Mat whole = Whole(jpeg);
  const Region r = DecodeCrop(jpeg, 40, 20, 30, 20);
  EXPECT_FALSE(r.result.restarts);
  EXPECT_EQ(CountDiff(r.crop, whole(cv::Rect(40, 20, 30, 20))), 0);
}

// Only the MCUs up to the region's last are indexed: a file whose markers go wrong after them
// still decodes the region from its MCUs (exactly: the whole decode of those MCUs reads no byte
// after them either), and a region that reaches the bad marker takes the usual path. Fill bytes
// before a marker (0xFF 0xFF RSTn) are skipped like stuffed ones (0xFF 0x00).
TEST(JpegRestart, OnlyTheMarkersUpToTheRegionsLastMcuAreRead) {
  const std::string good = EncodeJpeg(NaturalImage(96, 64, 3), {.restart_mcus = 1});  // 6x4 MCUs
  const cv::Mat whole = Whole(good);
  const size_t sos = good.find("\xFF\xDA");
  ASSERT_NE(sos, std::string::npos);
  // The marker after MCU k (0-based) is RST(k % 8): after MCU 2 (row 0) and MCU 19 (row 3).
  auto marker_after = [&](const std::string& jpeg, int k) {
    size_t p = sos;
    for (int i = 0; i <= k; ++i) {
      p = jpeg.find(std::string("\xFF") + static_cast<char>(0xD0 + i % 8), p + 2);
      if (p == std::string::npos) return p;
    }
    return p;
  };
  std::string jpeg = good;
  const size_t fill = marker_after(jpeg, 2);
  ASSERT_NE(fill, std::string::npos);
  jpeg.insert(fill, "\xFF");  // a fill byte before RST2
  const size_t bad = marker_after(jpeg, 19);
  ASSERT_NE(bad, std::string::npos);
  jpeg[bad + 1] = static_cast<char>(0xD0 + (19 + 3) % 8);  // out of sequence after row 3's MCU 1

  const Region top = DecodeCrop(jpeg, 20, 3, 50, 25);  // MCU rows 0-1, columns 1-4
  EXPECT_TRUE(top.result.restarts);
  EXPECT_EQ(CountDiff(top.crop, whole(cv::Rect(20, 3, 50, 25))), 0);
  const Region last = DecodeCrop(jpeg, 20, 50, 50, 10);  // row 3: reaches the bad marker
  EXPECT_FALSE(last.result.restarts);
}

// A header declaring far more MCUs than the bytes can hold (a 1 KB file saying 16384 x 16384,
// 4M MCUs) is refused before the index is sized: the index (thread-local in the decoder, kept
// for the thread's life) holds at most one entry per two bytes of the file, never the declared
// count. The true header still indexes every MCU.
TEST(JpegRestart, AHeaderDeclaringMoreMcusThanTheBytesHoldIsRefusedBeforeTheIndexGrows) {
  cv::Mat gray;
  cv::cvtColor(NaturalImage(32, 32, 5), gray, cv::COLOR_RGB2GRAY);
  std::string jpeg = EncodeJpeg(gray, {.restart_mcus = 1});  // 4 x 4 MCUs of 8 x 8
  const size_t sof = jpeg.find("\xFF\xC0");
  const size_t sos = jpeg.find("\xFF\xDA");
  ASSERT_NE(sof, std::string::npos);
  ASSERT_NE(sos, std::string::npos);
  ASSERT_LT(jpeg.size(), 2048u);
  auto header = [&](int side) {
    JpegScanHeader h;
    h.width = h.height = side;
    h.restart_interval = 1;
    h.num_components = h.comps_in_scan = 1;
    h.entropy_begin =
        sos + 2 +
        (size_t{static_cast<uint8_t>(jpeg[sos + 2])} << 8 | static_cast<uint8_t>(jpeg[sos + 3]));
    return h;
  };
  RestartIndex index;
  ASSERT_TRUE(IndexRestarts(AsBytes(jpeg), header(32), 16, &index));
  EXPECT_EQ(index.begin.size(), 16u);

  for (const int at : {5, 7}) {  // the frame's height and width: 16384
    jpeg[sof + at] = static_cast<char>(0x40);
    jpeg[sof + at + 1] = 0;
  }
  const size_t declared = size_t{16384 / 8} * (16384 / 8);
  RestartIndex hostile;
  EXPECT_FALSE(IndexRestarts(AsBytes(jpeg), header(16384), declared, &hostile));
  EXPECT_EQ(hostile.mcus_per_row * size_t{1} * hostile.mcu_rows, declared);
  EXPECT_LE(hostile.begin.capacity(), jpeg.size() / 2);
  EXPECT_LE(hostile.end.capacity(), jpeg.size() / 2);
  // The decoder takes the usual path for it (libjpeg then reports the missing data, or pads it).
  JpegDecodeOptions o;
  o.channels = 1;
  o.crop_x = o.crop_y = 16384 - 16;
  o.crop_w = o.crop_h = 16;
  o.scales = JpegScales::kNone;
  cv::Mat out;
  JpegDecodeResult r;
  (void)DecodeJpeg(AsBytes(jpeg), o, &out, &r);
  EXPECT_FALSE(r.restarts);
}

// The transcode keeps every pixel (same coefficients), makes progressive files sequential,
// keeps the EXIF orientation, and its output takes the restart path.
TEST(JpegRestart, TheTranscodeKeepsEveryPixelAndMakesRegionsRestart) {
  struct In {
    std::string name;
    std::string jpeg;
    int channels = 3;
  };
  cv::Mat gray;
  cv::cvtColor(NaturalImage(131, 77, 21), gray, cv::COLOR_RGB2GRAY);
  const std::vector<In> inputs = {
      {"baseline 4:2:0", EncodeJpeg(NaturalImage(333, 251, 20))},
      {"progressive 4:2:0", EncodeJpeg(NaturalImage(301, 203, 22), {.progressive = true})},
      {"4:4:4 restart rows",
       EncodeJpeg(NaturalImage(160, 120, 23), {.h_samp = 1, .v_samp = 1, .restart_rows = 1})},
      {"gray", EncodeJpeg(gray), 1},
      {"EXIF orientation 8", WithExifOrientation(EncodeJpeg(NaturalImage(120, 90, 24)), 8)},
  };
  for (const In& in : inputs) {
    std::string out;
    ASSERT_TRUE(AddJpegRestarts(AsBytes(in.jpeg), &out).ok()) << in.name;
    JpegInfo a, b;
    ASSERT_TRUE(ReadJpegInfo(AsBytes(in.jpeg), &a).ok());
    ASSERT_TRUE(ReadJpegInfo(AsBytes(out), &b).ok());
    EXPECT_EQ(b.width, a.width);
    EXPECT_EQ(b.height, a.height);
    EXPECT_EQ(b.orientation, a.orientation) << in.name;
    EXPECT_FALSE(b.progressive) << in.name;
    const cv::Mat whole = Whole(in.jpeg, in.channels);
    EXPECT_EQ(CountDiff(Whole(out, in.channels), whole), 0) << in.name;
    const cv::Rect c(whole.cols / 4, whole.rows / 3, whole.cols / 3, whole.rows / 4);
    const Region r = DecodeCrop(out, c.x, c.y, c.width, c.height, in.channels);
    EXPECT_TRUE(r.result.restarts) << in.name;
    EXPECT_EQ(CountDiff(r.crop, whole(c)), 0) << in.name;
    std::printf("%-20s %7zu -> %7zu bytes (%+.1f%%)\n", in.name.c_str(), in.jpeg.size(), out.size(),
                100.0 * (static_cast<double>(out.size()) / in.jpeg.size() - 1));
  }
  std::string out;
  const Status bad = AddJpegRestarts(AsBytes(std::string("\xFF\xD8\xFF\xDB\x00", 5)), &out);
  EXPECT_EQ(bad.code(), Status::Code::kBadInput);
  EXPECT_NE(bad.message().find("JPEG"), std::string::npos) << bad.ToString();
}

}  // namespace
}  // namespace dspipe::codec
