// SPDX-License-Identifier: Apache-2.0
// codec/image.h: sniff, probe (completeness), decode (RGB order, 16-bit, gray, alpha, palette,
// EXIF), mask rules, PNG encode, zstd and payload decoding.
#include "codec/image.h"

#include <gtest/gtest.h>

#include <iterator>
#include <string>
#include <tuple>
#include <vector>

#include "codec/test_images.h"
#include "dspipe/limits.h"

namespace dspipe::codec {
namespace {

using dspipe::testing::AsBytes;
using dspipe::testing::CountDiff;
using dspipe::testing::Encode;
using dspipe::testing::MakePng;
using dspipe::testing::OpenCvRgb;
using dspipe::testing::PackIndices;
using dspipe::testing::Pattern;
using dspipe::testing::Rows16;
using dspipe::testing::Rows8;
using dspipe::testing::WithExifOrientation;

cv::Mat Indices(int w, int h, int classes) {
  cv::Mat m(h, w, CV_8UC1);
  for (int y = 0; y < h; ++y) {
    for (int x = 0; x < w; ++x)
      m.at<uint8_t>(y, x) = static_cast<uint8_t>((x / 5 + y / 3) % classes);
  }
  return m;
}

TEST(Sniff, RecognisesMagicBytes) {
  EXPECT_EQ(SniffCodec(AsBytes(Encode(Pattern(8, 8), ".png"))), Codec::kPng);
  EXPECT_EQ(SniffCodec(AsBytes(Encode(Pattern(8, 8), ".jpg"))), Codec::kJpeg);
  EXPECT_EQ(SniffCodec(AsBytes(Encode(Pattern(8, 8), ".bmp"))), Codec::kEncoded);
  EXPECT_EQ(SniffCodec(AsBytes(std::string())), Codec::kNone);
}

TEST(Probe, PngColourTypesAndDepths) {
  const cv::Mat rgb = Pattern(20, 10);
  struct Case {
    std::string bytes;
    int channels, depth;
    bool palette;
  };
  cv::Mat gray, rgba, rgb16;
  cv::cvtColor(rgb, gray, cv::COLOR_RGB2GRAY);
  cv::cvtColor(rgb, rgba, cv::COLOR_RGB2RGBA);
  rgb.convertTo(rgb16, CV_16UC3, 257);
  const std::vector<Case> cases = {
      {Encode(rgb, ".png"), 3, 8, false},
      {Encode(gray, ".png"), 1, 8, false},
      {Encode(rgba, ".png"), 4, 8, false},
      {MakePng(20, 10, 16, 2, Rows16(rgb16)), 3, 16, false},
      {MakePng(20, 10, 8, 4, std::vector<uint8_t>(20 * 10 * 2, 7)), 2, 8, false},
      {MakePng(20, 10, 4, 3, PackIndices(Indices(20, 10, 3), 4), {{0, 0, 0}, {1, 2, 3}, {9, 9, 9}}),
       3, 4, true},
  };
  for (size_t i = 0; i < cases.size(); ++i) {
    ImageProbe p;
    ASSERT_TRUE(Probe(AsBytes(cases[i].bytes), &p).ok()) << "case " << i;
    EXPECT_EQ(p.codec, Codec::kPng);
    EXPECT_EQ(p.width, 20) << "case " << i;
    EXPECT_EQ(p.height, 10) << "case " << i;
    EXPECT_EQ(p.channels, cases[i].channels) << "case " << i;
    EXPECT_EQ(p.bit_depth, cases[i].depth) << "case " << i;
    EXPECT_EQ(p.palette, cases[i].palette) << "case " << i;
  }
}

TEST(Probe, RejectsIncompleteAndNonImages) {
  const std::string png = Encode(Pattern(32, 32), ".png");
  const std::string jpg = Encode(Pattern(32, 32), ".jpg");
  struct Case {
    std::string bytes, reason;
  };
  const std::vector<Case> cases = {
      {png.substr(0, png.size() / 2), "truncated PNG"},
      {png.substr(0, png.size() - 1), "truncated PNG"},
      {jpg.substr(0, jpg.size() / 2), "truncated JPEG"},
      {"", "empty file"},
      {"this is not an image, just text\n", "not a decodable image"},
      {png.substr(0, 12), "PNG"},  // signature and a cut IHDR
  };
  for (const Case& c : cases) {
    ImageProbe p;
    Status s = Probe(AsBytes(c.bytes), &p);
    EXPECT_EQ(s.code(), Status::Code::kBadInput) << c.reason << ": " << s.ToString();
    EXPECT_NE(s.message().find(c.reason), std::string::npos) << s.ToString();
  }
}

TEST(Decode, PngAndJpegMatchOpenCvInRgbOrder) {
  const cv::Mat rgb = Pattern(33, 17);
  for (const char* ext : {".png", ".jpg", ".bmp"}) {
    const std::string bytes = Encode(rgb, ext);
    cv::Mat out;
    ASSERT_TRUE(DecodeImage(AsBytes(bytes), 3, &out).ok()) << ext;
    EXPECT_EQ(out.type(), CV_8UC3);
    EXPECT_EQ(CountDiff(out, OpenCvRgb(bytes)), 0) << ext;
    if (std::string(ext) != ".jpg") {
      EXPECT_EQ(CountDiff(out, rgb), 0) << ext;
    }
  }
}

TEST(Decode, GrayOutputAndGraySource) {
  const cv::Mat rgb = Pattern(16, 12);
  cv::Mat out, expect;
  ASSERT_TRUE(DecodeImage(AsBytes(Encode(rgb, ".png")), 1, &out).ok());
  cv::cvtColor(rgb, expect, cv::COLOR_RGB2GRAY);
  EXPECT_EQ(CountDiff(out, expect), 0);
  // A gray PNG decoded to 3 channels replicates the gray value.
  ASSERT_TRUE(DecodeImage(AsBytes(Encode(expect, ".png")), 3, &out).ok());
  cv::Mat rep;
  cv::cvtColor(expect, rep, cv::COLOR_GRAY2RGB);
  EXPECT_EQ(CountDiff(out, rep), 0);
  ASSERT_TRUE(DecodeImage(AsBytes(Encode(expect, ".png")), 1, &out).ok());
  EXPECT_EQ(CountDiff(out, expect), 0);
}

TEST(Decode, SixteenBitKeepsTheHighByteLikeImread) {
  // Values chosen so that truncation (v >> 8, what cv::imread does) differs from rounding
  // (v / 257): a decoder that rounds would not match what users see with cv2.imread.
  cv::Mat v16(4, 64, CV_16UC3);
  for (int y = 0; y < 4; ++y) {
    for (int x = 0; x < 64; ++x) {
      const int k = x * 4;
      const uint16_t a = static_cast<uint16_t>(std::min(65535, 257 * k + 129));
      const uint16_t b = static_cast<uint16_t>(std::min(65535, 257 * k + 127 + y));
      const uint16_t c = static_cast<uint16_t>(65535 - 97 * x - y);
      v16.at<cv::Vec3w>(y, x) = cv::Vec3w(a, b, c);
    }
  }
  const std::string png = MakePng(64, 4, 16, 2, Rows16(v16));
  cv::Mat out;
  ASSERT_TRUE(DecodeImage(AsBytes(png), 3, &out).ok());
  ASSERT_EQ(out.type(), CV_8UC3);
  EXPECT_EQ(CountDiff(out, OpenCvRgb(png)), 0) << "differs from cv::imread";
  int bad = 0;
  for (int y = 0; y < 4; ++y) {
    for (int x = 0; x < 64; ++x) {
      for (int c = 0; c < 3; ++c) {
        const int want = v16.at<cv::Vec3w>(y, x)[c] >> 8;
        if (out.at<cv::Vec3b>(y, x)[c] != want && bad++ < 5) {
          ADD_FAILURE() << "(" << x << "," << y << ") c" << c << " from "
                        << v16.at<cv::Vec3w>(y, x)[c] << ": got " << int(out.at<cv::Vec3b>(y, x)[c])
                        << ", want " << want;
        }
      }
    }
  }
  EXPECT_EQ(bad, 0);
  // 16-bit gray to 1 channel: the same reduction.
  cv::Mat g16(3, 5, CV_16UC1);
  for (int i = 0; i < 15; ++i)
    g16.at<uint16_t>(i / 5, i % 5) = static_cast<uint16_t>(4369 * i + 200);
  ASSERT_TRUE(DecodeImage(AsBytes(MakePng(5, 3, 16, 0, Rows16(g16))), 1, &out).ok());
  ASSERT_EQ(out.type(), CV_8UC1);
  for (int i = 0; i < 15; ++i) {
    EXPECT_EQ(out.at<uint8_t>(i / 5, i % 5), g16.at<uint16_t>(i / 5, i % 5) >> 8) << i;
  }
}

TEST(Decode, AlphaIsDroppedAndPaletteExpanded) {
  const cv::Mat rgb = Pattern(24, 8);
  cv::Mat rgba;
  cv::cvtColor(rgb, rgba, cv::COLOR_RGB2RGBA);
  for (int y = 0; y < rgba.rows; ++y) {
    for (int x = 0; x < rgba.cols; ++x) rgba.at<cv::Vec4b>(y, x)[3] = static_cast<uint8_t>(x * 10);
  }
  cv::Mat out;
  ASSERT_TRUE(DecodeImage(AsBytes(Encode(rgba, ".png")), 3, &out).ok());
  EXPECT_EQ(CountDiff(out, rgb), 0);

  const std::vector<std::array<uint8_t, 3>> pal = {{10, 20, 30}, {200, 0, 0}, {0, 200, 50}};
  const cv::Mat idx = Indices(24, 8, 3);
  for (int bits : {2, 8}) {
    ASSERT_TRUE(
        DecodeImage(AsBytes(MakePng(24, 8, bits, 3, PackIndices(idx, bits), pal)), 3, &out).ok());
    ASSERT_EQ(out.type(), CV_8UC3);
    int bad = 0;
    for (int y = 0; y < 8; ++y) {
      for (int x = 0; x < 24; ++x) {
        const auto& c = pal[idx.at<uint8_t>(y, x)];
        if (out.at<cv::Vec3b>(y, x) != cv::Vec3b(c[0], c[1], c[2])) ++bad;
      }
    }
    EXPECT_EQ(bad, 0) << bits << "-bit palette";
  }
}

TEST(Decode, JpegExifOrientationIsApplied) {
  const cv::Mat rgb = Pattern(64, 48);  // landscape
  const std::string jpg =
      WithExifOrientation(Encode(rgb, ".jpg", {cv::IMWRITE_JPEG_QUALITY, 95}), 6);
  // Orientation 6: rotate 90° clockwise to display, so the shape becomes 48 wide, 64 tall.
  const cv::Mat ref = OpenCvRgb(jpg);
  ASSERT_EQ(ref.cols, 48) << "OpenCV did not honour the hand-made EXIF segment";
  ASSERT_EQ(ref.rows, 64);
  ImageProbe p;
  ASSERT_TRUE(Probe(AsBytes(jpg), &p).ok());
  EXPECT_EQ(p.codec, Codec::kJpeg);
  EXPECT_EQ(p.width, 48);
  EXPECT_EQ(p.height, 64);
  cv::Mat out;
  ASSERT_TRUE(DecodeImage(AsBytes(jpg), 3, &out).ok());
  EXPECT_EQ(CountDiff(out, ref), 0);
  std::vector<uint8_t> dst(48 * 64 * 3);
  ASSERT_TRUE(DecodePayloadInto(Codec::kJpeg, AsBytes(jpg), 3, 64, 48, dst.data()).ok());
  EXPECT_EQ(CountDiff(cv::Mat(64, 48, CV_8UC3, dst.data()), ref), 0);
  // The unrotated shape is a size mismatch.
  Status s = DecodePayloadInto(Codec::kJpeg, AsBytes(jpg), 3, 48, 64, dst.data());
  EXPECT_EQ(s.code(), Status::Code::kCorruption) << s.ToString();
}

TEST(Mask, GrayPaletteAnd16BitKeepClassIds) {
  const cv::Mat idx = Indices(30, 20, 5);
  cv::Mat out;
  ASSERT_TRUE(DecodeMask(AsBytes(Encode(idx, ".png")), &out).ok());
  EXPECT_EQ(CountDiff(out, idx), 0);
  // Palette masks: the index is the class id, whatever the colours (Pascal VOC style).
  const std::vector<std::array<uint8_t, 3>> voc = {
      {0, 0, 0}, {128, 0, 0}, {0, 128, 0}, {128, 128, 0}, {0, 0, 128}};
  for (int bits : {4, 8}) {
    ASSERT_TRUE(
        DecodeMask(AsBytes(MakePng(30, 20, bits, 3, PackIndices(idx, bits), voc)), &out).ok());
    EXPECT_EQ(CountDiff(out, idx), 0) << bits << "-bit palette";
  }
  cv::Mat idx16;
  idx.convertTo(idx16, CV_16U);
  ASSERT_TRUE(DecodeMask(AsBytes(Encode(idx16, ".png")), &out).ok());
  EXPECT_EQ(CountDiff(out, idx), 0);
  // RGB / RGBA masks whose colour channels agree are gray masks.
  cv::Mat rgb, rgba;
  cv::cvtColor(idx, rgb, cv::COLOR_GRAY2RGB);
  cv::cvtColor(idx, rgba, cv::COLOR_GRAY2RGBA);
  ASSERT_TRUE(DecodeMask(AsBytes(Encode(rgb, ".png")), &out).ok());
  EXPECT_EQ(CountDiff(out, idx), 0);
  ASSERT_TRUE(DecodeMask(AsBytes(Encode(rgba, ".png")), &out).ok());
  EXPECT_EQ(CountDiff(out, idx), 0);
}

TEST(Mask, RejectsMultiChannelAndLargeIds) {
  cv::Mat rgb = Pattern(16, 16);
  cv::Mat out;
  Status s = DecodeMask(AsBytes(Encode(rgb, ".png")), &out);
  EXPECT_EQ(s.code(), Status::Code::kBadInput);
  EXPECT_NE(s.message().find("multi-channel mask"), std::string::npos) << s.ToString();
  cv::Mat m16(8, 8, CV_16U, cv::Scalar(3));
  m16.at<uint16_t>(4, 4) = 300;
  s = DecodeMask(AsBytes(Encode(m16, ".png")), &out);
  EXPECT_EQ(s.code(), Status::Code::kBadInput);
  EXPECT_NE(s.message().find("300"), std::string::npos) << s.ToString();
  s = DecodeMask(AsBytes(std::string()), &out);
  EXPECT_EQ(s.code(), Status::Code::kBadInput);
  EXPECT_NE(s.message().find("empty"), std::string::npos) << s.ToString();
}

TEST(Mask, IsPlainGray8Png) {
  const cv::Mat idx = Indices(10, 10, 3);
  cv::Mat idx16, rgb;
  idx.convertTo(idx16, CV_16U);
  cv::cvtColor(idx, rgb, cv::COLOR_GRAY2RGB);
  EXPECT_TRUE(IsPlainGray8Png(AsBytes(Encode(idx, ".png"))));
  EXPECT_FALSE(IsPlainGray8Png(AsBytes(Encode(idx16, ".png"))));
  EXPECT_FALSE(IsPlainGray8Png(AsBytes(Encode(rgb, ".png"))));
  EXPECT_FALSE(IsPlainGray8Png(
      AsBytes(MakePng(10, 10, 8, 3, Rows8(idx), {{0, 0, 0}, {1, 1, 1}, {2, 2, 2}}))));
  EXPECT_FALSE(IsPlainGray8Png(AsBytes(Encode(idx, ".bmp"))));
}

TEST(Encode, PngRoundTripKeepsRgbOrder) {
  const cv::Mat rgb = Pattern(21, 13, 3);
  std::string png;
  ASSERT_TRUE(EncodePng(rgb, 1, &png).ok());
  EXPECT_EQ(CountDiff(OpenCvRgb(png), rgb), 0);  // OpenCV reads BGR: so the file holds RGB
  cv::Mat back;
  ASSERT_TRUE(DecodeImage(AsBytes(png), 3, &back).ok());
  EXPECT_EQ(CountDiff(back, rgb), 0);
}

// cv::cvtColor throws for a depth it does not convert (64-bit float); EncodePng once called it
// outside any try block, so the exception escaped the Status API (issue 11 defect 2).
TEST(Encode, AnImageCvtColorCannotConvertIsAStatusNotAnException) {
  const cv::Mat doubles(6, 5, CV_64FC3, cv::Scalar(0.25, 0.5, 0.75));
  std::string png = "untouched";
  Status s = Status::OK();
  EXPECT_NO_THROW(s = EncodePng(doubles, 1, &png));
  EXPECT_EQ(s.code(), Status::Code::kBadInput) << s.ToString();
  EXPECT_NE(s.message().find("EncodePng"), std::string::npos) << s.ToString();
  EXPECT_NE(s.message().find("Unsupported depth"), std::string::npos) << s.ToString();
  EXPECT_EQ(png, "untouched");
}

TEST(Zstd, RoundTripAndSizeChecks) {
  const cv::Mat rgb = Pattern(40, 30);
  const std::span<const uint8_t> raw(rgb.data, rgb.total() * 3);
  std::string z;
  ASSERT_TRUE(CompressZstd(raw, 3, &z).ok());
  std::vector<uint8_t> back(raw.size());
  ASSERT_TRUE(DecompressZstd(AsBytes(z), back.data(), back.size()).ok());
  EXPECT_TRUE(std::equal(back.begin(), back.end(), raw.begin()));
  std::vector<uint8_t> small(raw.size() - 1);
  EXPECT_EQ(DecompressZstd(AsBytes(z), small.data(), small.size()).code(),
            Status::Code::kCorruption);
  EXPECT_EQ(DecompressZstd(AsBytes("not zstd at all"), back.data(), back.size()).code(),
            Status::Code::kCorruption);
  std::string cut = z.substr(0, z.size() - 3);
  EXPECT_FALSE(DecompressZstd(AsBytes(cut), back.data(), back.size()).ok());
}

// Restores the default DecodeLimits at scope exit (they are process-wide).
struct LimitsGuard {
  ~LimitsGuard() { SetDecodeLimits(DecodeLimits{}); }
};

// A PNG whose IHDR declares width x height; its IDAT holds a single row (a bomb's few bytes).
std::string HugePng(uint32_t width, uint32_t height) {
  std::string png("\x89PNG\r\n\x1a\n", 8), ihdr;
  dspipe::testing::PutBe32(&ihdr, width);
  dspipe::testing::PutBe32(&ihdr, height);
  ihdr += std::string("\x08\x00\x00\x00\x00", 5);  // 8-bit gray
  dspipe::testing::AppendPngChunk(&png, "IHDR", ihdr);
  dspipe::testing::AppendPngChunk(&png, "IDAT", std::string("\x78\x9c\x03\x00\x00\x00\x00\x01", 8));
  dspipe::testing::AppendPngChunk(&png, "IEND", "");
  return png;
}

// A real JPEG whose frame header (SOF0) is patched to declare width x height.
std::string HugeJpeg(uint16_t width, uint16_t height) {
  std::string jpg = Encode(Pattern(16, 16), ".jpg");
  const size_t sof = jpg.find("\xFF\xC0");
  if (sof == std::string::npos) throw std::runtime_error("no SOF0 marker");
  jpg[sof + 5] = static_cast<char>(height >> 8);
  jpg[sof + 6] = static_cast<char>(height & 0xff);
  jpg[sof + 7] = static_cast<char>(width >> 8);
  jpg[sof + 8] = static_cast<char>(width & 0xff);
  return jpg;
}

TEST(Limits, HugePngAndJpegHeadersNameTheLimitAndTheFlag) {
  LimitsGuard restore;
  for (const std::string& bytes : {HugePng(60000, 60000), HugeJpeg(60000, 60000)}) {
    ImageProbe p;
    Status s = Probe(AsBytes(bytes), &p);
    EXPECT_EQ(s.code(), Status::Code::kBadInput) << s.ToString();
    EXPECT_NE(s.message().find("60000x60000"), std::string::npos) << s.ToString();
    EXPECT_NE(s.message().find("32768 per side"), std::string::npos) << s.ToString();
    EXPECT_NE(s.message().find("--max-image-side"), std::string::npos) << s.ToString();
    cv::Mat m;
    s = DecodeImage(AsBytes(bytes), 3, &m);  // refused before anything is allocated
    EXPECT_NE(s.message().find("--max-image-side"), std::string::npos) << s.ToString();
  }
  // The pixel-count limit, with the sides allowed.
  DecodeLimits l;
  l.max_side = 65535;
  SetDecodeLimits(l);
  ImageProbe p;
  Status s = Probe(AsBytes(HugeJpeg(60000, 60000)), &p);
  EXPECT_NE(s.message().find("--max-image-pixels"), std::string::npos) << s.ToString();
  // Raised limits: the header is accepted (the JPEG's data then fails to decode, honestly).
  l.max_pixels = uint64_t{60000} * 60000;
  SetDecodeLimits(l);
  ASSERT_TRUE(Probe(AsBytes(HugeJpeg(60000, 60000)), &p).ok());
  EXPECT_EQ(p.width, 60000);
  EXPECT_TRUE(Probe(AsBytes(HugePng(60000, 60000)), &p).ok());
  // Record headers go through the same check.
  EXPECT_TRUE(CheckImageSize("record header", 60000, 60000).ok());
  SetDecodeLimits(DecodeLimits{});
  s = CheckImageSize("record header", 1, 40000);
  EXPECT_EQ(s.code(), Status::Code::kBadInput);
  EXPECT_EQ(s.message().rfind("record header declares 1x40000", 0), 0u) << s.ToString();
}

// tests/fuzz record: a BMP (in a 182-byte record) declaring 2053x458758 made OpenCV allocate 2.8 GB before
// reading a pixel. Its header is held to the same limits, for images and masks.
TEST(Limits, HugeBmpHeaderIsRefusedBeforeOpenCvAllocates) {
  LimitsGuard restore;
  cv::Mat small(4, 5, CV_8UC3, cv::Scalar(10, 20, 30));
  std::vector<uint8_t> bmp;
  ASSERT_TRUE(cv::imencode(".bmp", small, bmp));
  ASSERT_GE(bmp.size(), 26u);
  auto put32 = [&](size_t at, uint32_t v) {
    for (int i = 0; i < 4; ++i) bmp[at + i] = static_cast<uint8_t>(v >> (8 * i));
  };
  cv::Mat m;
  ASSERT_TRUE(DecodeImage(bmp, 3, &m).ok());  // the genuine file decodes
  EXPECT_EQ(m.cols, 5);
  put32(18, 2053);
  put32(22, 458758);
  Status s = DecodeImage(bmp, 3, &m);
  EXPECT_EQ(s.code(), Status::Code::kBadInput) << s.ToString();
  EXPECT_NE(s.message().find("BMP header declares 2053x458758"), std::string::npos)
      << s.ToString();
  EXPECT_NE(s.message().find("--max-image-side"), std::string::npos) << s.ToString();
  s = DecodeMask(bmp, &m);
  EXPECT_EQ(s.code(), Status::Code::kBadInput) << s.ToString();
  put32(22, static_cast<uint32_t>(-100000));  // negative height = top-down rows
  s = DecodeImage(bmp, 3, &m);
  EXPECT_NE(s.message().find("2053x100000"), std::string::npos) << s.ToString();
}

// A little-endian TIFF with one strip of 8-bit gray that declares w x h, written byte by byte
// (libtiff would not write a header without its pixels).
std::vector<uint8_t> TiffHeader(uint32_t w, uint32_t h) {
  std::vector<uint8_t> b = {'I', 'I', 42, 0, 8, 0, 0, 0};
  auto put16 = [&](uint16_t v) {
    b.push_back(static_cast<uint8_t>(v));
    b.push_back(static_cast<uint8_t>(v >> 8));
  };
  auto put32 = [&](uint32_t v) {
    for (int i = 0; i < 4; ++i) b.push_back(static_cast<uint8_t>(v >> (8 * i)));
  };
  // tag, type (3 SHORT, 4 LONG), count 1, value
  const uint32_t entries[][3] = {{256, 4, w},  {257, 4, h},  {258, 3, 8},   {259, 3, 1},
                                 {262, 3, 1},  {273, 4, 200}, {277, 3, 1}, {278, 4, h},
                                 {279, 4, 16}};
  put16(static_cast<uint16_t>(std::size(entries)));
  for (const auto& e : entries) {
    put16(static_cast<uint16_t>(e[0]));
    put16(static_cast<uint16_t>(e[1]));
    put32(1);
    if (e[1] == 3) {
      put16(static_cast<uint16_t>(e[2]));
      put16(0);
    } else {
      put32(e[2]);
    }
  }
  put32(0);  // no next directory
  b.resize(216, 0x55);  // the strip at 200
  return b;
}

std::vector<uint8_t> Imencode(const cv::Mat& m, const char* ext) {
  std::vector<uint8_t> out;
  EXPECT_TRUE(cv::imencode(ext, m, out)) << ext;
  return out;
}

std::vector<uint8_t> Text(const std::string& s) { return {s.begin(), s.end()}; }

// The formats besides PNG and JPEG (limits_check.h): each decodes when genuine, and a header
// over the limits is refused naming the limit and its flag, before OpenCV allocates.
TEST(Formats, TiffHeaderIsReadByLibtiffAndHeldToTheLimits) {
  LimitsGuard restore;
  const cv::Mat rgb = Pattern(21, 13);
  cv::Mat bgr, m;
  cv::cvtColor(rgb, bgr, cv::COLOR_RGB2BGR);
  const std::vector<uint8_t> tiff = Imencode(bgr, ".tiff");
  ASSERT_TRUE(DecodeImage(tiff, 3, &m).ok());
  EXPECT_EQ(CountDiff(m, rgb), 0);
  const std::vector<uint8_t> small = TiffHeader(4, 4);
  Status s = DecodeImage(small, 1, &m);
  ASSERT_TRUE(s.ok()) << s.ToString();  // the hand-made header is a valid 4x4 TIFF
  EXPECT_EQ(m.cols, 4);
  for (auto [w, h, flag] : {std::tuple{60000u, 60000u, "--max-image-side"},
                            std::tuple{20000u, 20000u, "--max-image-pixels"}}) {
    const std::vector<uint8_t> bomb = TiffHeader(w, h);
    s = DecodeImage(bomb, 3, &m);
    EXPECT_EQ(s.code(), Status::Code::kBadInput) << s.ToString();
    const std::string dims = std::to_string(w) + "x" + std::to_string(h);
    EXPECT_NE(s.message().find("TIFF header declares " + dims), std::string::npos)
        << s.ToString();
    EXPECT_NE(s.message().find(flag), std::string::npos) << s.ToString();
    s = DecodeMask(bomb, &m);
    EXPECT_NE(s.message().find("TIFF header declares"), std::string::npos) << s.ToString();
  }
  // Raised: the header passes (the one strip then cannot fill the image; not a crash).
  DecodeLimits l;
  l.max_side = 65535;
  l.max_pixels = uint64_t{60000} * 60000;
  SetDecodeLimits(l);
  s = DecodeImage(TiffHeader(60000, 60000), 3, &m);
  EXPECT_EQ(s.message().find("TIFF header declares"), std::string::npos) << s.ToString();
}

TEST(Formats, WebPHeaderIsReadByLibwebpAndHeldToTheLimits) {
  LimitsGuard restore;
  const cv::Mat bgr(24, 40, CV_8UC3, cv::Scalar(10, 200, 30));
  const std::vector<uint8_t> webp = Imencode(bgr, ".webp");
  cv::Mat m;
  ASSERT_TRUE(DecodeImage(webp, 3, &m).ok());
  EXPECT_EQ(m.cols, 40);
  EXPECT_EQ(m.rows, 24);
  // WebP's own format caps a side at 16383, below the default limits: lower them.
  DecodeLimits l;
  l.max_side = 32;
  SetDecodeLimits(l);
  Status s = DecodeImage(webp, 3, &m);
  EXPECT_EQ(s.code(), Status::Code::kBadInput) << s.ToString();
  EXPECT_NE(s.message().find("WebP header declares 40x24"), std::string::npos) << s.ToString();
  EXPECT_NE(s.message().find("--max-image-side"), std::string::npos) << s.ToString();
  l = DecodeLimits{};
  l.max_pixels = 500;
  SetDecodeLimits(l);
  s = DecodeMask(webp, &m);
  EXPECT_NE(s.message().find("--max-image-pixels"), std::string::npos) << s.ToString();
  SetDecodeLimits(DecodeLimits{});
  std::vector<uint8_t> cut(webp.begin(), webp.begin() + 16);  // RIFF....WEBP and no bitstream
  s = DecodeImage(cut, 3, &m);
  EXPECT_EQ(s.code(), Status::Code::kBadInput) << s.ToString();
  EXPECT_NE(s.message().find("WebP header"), std::string::npos) << s.ToString();
}

TEST(Formats, PnmHeaderIsHeldToTheLimits) {
  LimitsGuard restore;
  cv::Mat gray, m;
  cv::cvtColor(Pattern(9, 7), gray, cv::COLOR_RGB2GRAY);
  ASSERT_TRUE(DecodeImage(Imencode(gray, ".pgm"), 1, &m).ok());
  EXPECT_EQ(CountDiff(m, gray), 0);
  const cv::Mat rgb = Pattern(9, 7);
  cv::Mat bgr;
  cv::cvtColor(rgb, bgr, cv::COLOR_RGB2BGR);
  ASSERT_TRUE(DecodeImage(Imencode(bgr, ".ppm"), 3, &m).ok());
  EXPECT_EQ(CountDiff(m, rgb), 0);
  Status s = DecodeImage(Text("P6\n# a comment\n60000 60000\n255\n0123456789"), 3, &m);
  EXPECT_EQ(s.code(), Status::Code::kBadInput) << s.ToString();
  EXPECT_NE(s.message().find("PNM header declares 60000x60000"), std::string::npos)
      << s.ToString();
  EXPECT_NE(s.message().find("--max-image-side"), std::string::npos) << s.ToString();
  s = DecodeMask(Text("P5 20000 20000 255 0123456789"), &m);
  EXPECT_NE(s.message().find("PNM header declares 20000x20000"), std::string::npos)
      << s.ToString();
  EXPECT_NE(s.message().find("--max-image-pixels"), std::string::npos) << s.ToString();
  // A number too long for any integer saturates instead of wrapping to a small size.
  s = DecodeImage(Text("P5 4 184467440737095516170 255 0123456789"), 1, &m);
  EXPECT_NE(s.message().find("--max-image-side"), std::string::npos) << s.ToString();
  // tests/fuzz record: OpenCV ends a number at any non-digit and consumes it, so this '#' does
  // not start a comment and the file declares 24000x30000 (2.16 GB), not 24000x255.
  const std::string fuzzed("P6\n# c\n24000# 30000\n255\n\0\0\xfe\0\0\0\0\0\0\0\0#\0", 37);
  s = DecodeImage(Text(fuzzed), 3, &m);
  EXPECT_EQ(s.code(), Status::Code::kBadInput) << s.ToString();
  EXPECT_NE(s.message().find("PNM header declares 24000x30000"), std::string::npos)
      << s.ToString();
  s = DecodeMask(Text(fuzzed), &m);
  EXPECT_NE(s.message().find("PNM header declares 24000x30000"), std::string::npos)
      << s.ToString();
  // The same reading of an ordinary header with a comment between the sides.
  const std::string commented = "P5\n3 # width\n2\n255\n" + std::string(6, '\x7f');
  s = DecodeImage(Text(commented), 1, &m);
  ASSERT_TRUE(s.ok()) << s.ToString();
  EXPECT_EQ(m.cols, 3);
  EXPECT_EQ(m.rows, 2);
  s = DecodeImage(Text("P5\n# only a comment"), 1, &m);
  EXPECT_EQ(s.code(), Status::Code::kBadInput) << s.ToString();
  EXPECT_NE(s.message().find("PNM header"), std::string::npos) << s.ToString();
}

// Formats OpenCV reads but dspipe does not: refused by name, listing what dspipe reads, for
// images, masks and probes alike, without reaching cv::imdecode.
TEST(Formats, OtherFormatsAreRefusedNamingTheSupportedOnes) {
  const cv::Mat bgr(8, 8, CV_8UC3, cv::Scalar(1, 2, 3));
  cv::Mat f;
  bgr.convertTo(f, CV_32FC3, 1.0 / 255);
  struct Case {
    std::vector<uint8_t> bytes;
    std::string name;
  };
  const std::vector<Case> cases = {
      {Imencode(f, ".hdr"), "Radiance HDR"},
      {Imencode(bgr, ".ras"), "Sun raster"},
      {Imencode(f, ".pfm"), "PFM"},
      {Imencode(bgr, ".pam"), "PAM"},
      {Text("\x76\x2f\x31\x01 rest of an OpenEXR file"), "OpenEXR"},
      {Text(std::string("\x00\x00\x00\x0cjP  \r\n\x87\n", 12)), "JPEG 2000"},
      {Text("GIF89a......"), "GIF"},
      {Text("some text, not an image"), "unknown format"},
  };
  for (const Case& c : cases) {
    // OpenCV itself decodes the files encoded above: the refusal is dspipe's.
    cv::Mat m;
    Status s = DecodeImage(c.bytes, 3, &m);
    EXPECT_EQ(s.code(), Status::Code::kBadInput) << c.name << ": " << s.ToString();
    EXPECT_NE(s.message().find(c.name), std::string::npos) << s.ToString();
    EXPECT_NE(s.message().find("dspipe reads PNG, JPEG, BMP, TIFF, WebP and PNM (PBM/PGM/PPM)"),
              std::string::npos)
        << s.ToString();
    s = DecodeMask(c.bytes, &m);
    EXPECT_NE(s.message().find(c.name), std::string::npos) << s.ToString();
    ImageProbe p;
    s = Probe(c.bytes, &p);
    EXPECT_NE(s.message().find(c.name), std::string::npos) << s.ToString();
  }
  EXPECT_FALSE(cv::imdecode(cases[0].bytes, cv::IMREAD_COLOR).empty());
  EXPECT_FALSE(cv::imdecode(cases[1].bytes, cv::IMREAD_COLOR).empty());
}

// JPEG masks go to cv::imdecode too (IMREAD_UNCHANGED): their frame header is checked first,
// as for images.
TEST(Limits, HugeJpegMaskIsRefusedBeforeOpenCvAllocates) {
  cv::Mat m;
  const Status s = DecodeMask(AsBytes(HugeJpeg(60000, 60000)), &m);
  EXPECT_EQ(s.code(), Status::Code::kBadInput) << s.ToString();
  EXPECT_NE(s.message().find("JPEG header declares 60000x60000"), std::string::npos)
      << s.ToString();
}

TEST(Limits, ZstdFrameClaimingAHugeSizeIsRefusedBeforeDecoding) {
  // Frame header: magic, descriptor with an 8-byte content size, window descriptor, then 2^40.
  std::string frame("\x28\xB5\x2F\xFD\xC0\x58", 6);
  for (int i = 0; i < 8; ++i) frame += static_cast<char>(i == 5 ? 1 : 0);  // 1 << 40, LE
  frame += std::string(16, '\0');
  std::vector<uint8_t> dst(64);
  Status s = DecompressZstd(AsBytes(frame), dst.data(), dst.size());
  EXPECT_EQ(s.code(), Status::Code::kCorruption) << s.ToString();
  EXPECT_NE(s.message().find("claims 1099511627776 bytes"), std::string::npos) << s.ToString();
  EXPECT_NE(s.message().find("--max-image-pixels"), std::string::npos) << s.ToString();
}

TEST(Payload, DecodesEveryCodecAndChecksSizes) {
  const cv::Mat rgb = Pattern(12, 10);
  const std::string raw(reinterpret_cast<const char*>(rgb.data), rgb.total() * 3);
  std::string z;
  ASSERT_TRUE(CompressZstd(AsBytes(raw), 1, &z).ok());
  std::vector<uint8_t> dst(raw.size());
  struct Case {
    Codec codec;
    std::string bytes;
  };
  for (const Case& c :
       {Case{Codec::kRaw, raw}, Case{Codec::kRawZstd, z}, Case{Codec::kPng, Encode(rgb, ".png")},
        Case{Codec::kEncoded, Encode(rgb, ".bmp")}}) {
    std::fill(dst.begin(), dst.end(), 0);
    ASSERT_TRUE(DecodePayloadInto(c.codec, AsBytes(c.bytes), 3, 10, 12, dst.data()).ok())
        << CodecName(c.codec);
    EXPECT_EQ(CountDiff(cv::Mat(10, 12, CV_8UC3, dst.data()), rgb), 0) << CodecName(c.codec);
  }
  EXPECT_EQ(DecodePayloadInto(Codec::kRaw, AsBytes(raw.substr(1)), 3, 10, 12, dst.data()).code(),
            Status::Code::kCorruption);
  EXPECT_EQ(
      DecodePayloadInto(Codec::kPng, AsBytes(Encode(rgb, ".png")), 3, 12, 10, dst.data()).code(),
      Status::Code::kCorruption);
  EXPECT_EQ(DecodePayloadInto(Codec::kPng, AsBytes("garbage"), 3, 10, 12, dst.data()).code(),
            Status::Code::kCorruption);
  EXPECT_FALSE(DecodePayloadInto(Codec::kNone, AsBytes(raw), 3, 10, 12, dst.data()).ok());
  // Mask payloads keep palette indices exact.
  const cv::Mat idx = Indices(12, 10, 4);
  std::vector<uint8_t> m(120);
  ASSERT_TRUE(DecodePayloadInto(Codec::kPng,
                                AsBytes(MakePng(12, 10, 8, 3, Rows8(idx),
                                                {{5, 5, 5}, {9, 0, 0}, {0, 9, 0}, {0, 0, 9}})),
                                1, 10, 12, m.data(), /*is_mask=*/true)
                  .ok());
  EXPECT_EQ(CountDiff(cv::Mat(10, 12, CV_8UC1, m.data()), idx), 0);
}

}  // namespace
}  // namespace dspipe::codec

namespace dspipe::codec {
namespace {

// The loader does not check record CRCs by default, so the decoder's own checks (PNG chunk CRCs)
// must catch a flipped bit in compressed pixels — even in stored (incompressible) deflate blocks,
// where inflate itself cannot notice. (Skipping chunk CRCs for speed was tried: all of these then
// decoded silently.)
TEST(Payload, CorruptPngPixelsFailWithoutChunkCrcs) {
  cv::Mat rgb(64, 64, CV_8UC3);
  cv::randu(rgb, 0, 255);
  const std::string png = dspipe::testing::Encode(rgb, ".png");
  const size_t idat = png.find("IDAT");
  ASSERT_NE(idat, std::string::npos);
  std::vector<uint8_t> dst(64 * 64 * 3);
  int silent = 0;
  for (size_t off = idat + 8; off < png.size() - 16; off += 97) {  // inside the zlib stream
    std::string bad = png;
    bad[off] = static_cast<char>(bad[off] ^ 0x10);
    const Status s =
        DecodePayloadInto(Codec::kPng, dspipe::testing::AsBytes(bad), 3, 64, 64, dst.data());
    if (s.ok()) ++silent;
    else EXPECT_EQ(s.code(), Status::Code::kCorruption) << s.ToString();
  }
  EXPECT_EQ(silent, 0);
}

}  // namespace
}  // namespace dspipe::codec
