// SPDX-License-Identifier: Apache-2.0
// codec/tiff.h: TIFF through libtiff. The same pixels as OpenCV's reading for the 1/3/4-channel
// contiguous files OpenCV reads right; any channel count (up to 16), planar files, tiles and
// compressions for the rest; bad input (truncated strips, bombs, several pages) refused with
// the reason and nothing on stderr.
#include "codec/tiff.h"

#include <gtest/gtest.h>
#include <tiffio.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <fstream>
#include <iostream>
#include <iterator>
#include <opencv2/imgcodecs.hpp>
#include <opencv2/imgproc.hpp>
#include <string>
#include <tuple>
#include <vector>

#include "codec/image.h"
#include "codec/test_images.h"
#include "codec/tiff_writer.h"
#include "dspipe/limits.h"

namespace dspipe::codec {
namespace {

using dspipe::testing::AsBytes;
using dspipe::testing::TiffBytes;
using dspipe::testing::TiffWriteOptions;

// h x w x c samples of `depth`, distinct per channel, spanning the type's range (negatives
// for int16 and float32).
cv::Mat Samples(int h, int w, int c, int depth, int seed = 0) {
  cv::Mat m(h, w, CV_MAKETYPE(depth, c));
  for (int y = 0; y < h; ++y) {
    for (int x = 0; x < w; ++x) {
      for (int k = 0; k < c; ++k) {
        const int v = x * 37 + y * 101 + k * 59 + seed * 13;
        const size_t at = (static_cast<size_t>(y) * w + x) * c + k;
        switch (depth) {
          case CV_8U:
            m.ptr<uint8_t>()[at] = static_cast<uint8_t>(v * 7);
            break;
          case CV_16U:
            m.ptr<uint16_t>()[at] = static_cast<uint16_t>(v * 977);
            break;
          case CV_16S:
            m.ptr<int16_t>()[at] = static_cast<int16_t>(v * 977 - 30000);
            break;
          default:
            m.ptr<float>()[at] = static_cast<float>(v) * 1.25f - 500.5f + k * 0.001f;
            break;
        }
      }
    }
  }
  return m;
}

double MaxDiff(const cv::Mat& a, const cv::Mat& b) {
  if (a.size() != b.size() || a.type() != b.type()) return -1;
  return cv::norm(a.reshape(1), b.reshape(1), cv::NORM_INF);
}

// What dspipe's OpenCV path gives for a typed TIFF: IMREAD_UNCHANGED, BGR(A) -> RGB(A).
cv::Mat OpenCvTyped(const std::string& bytes) {
  cv::Mat buf(1, static_cast<int>(bytes.size()), CV_8UC1, const_cast<char*>(bytes.data()));
  cv::Mat raw = cv::imdecode(buf, cv::IMREAD_UNCHANGED), out;
  if (raw.empty()) return raw;
  if (raw.channels() < 3) return raw;
  out.create(raw.size(), raw.type());  // BGR(A) -> RGB(A), any depth (cvtColor has no int16)
  const int swap[] = {0, 2, 1, 1, 2, 0, 3, 3};
  cv::mixChannels(&raw, 1, &out, 1, swap, static_cast<size_t>(raw.channels()));
  return out;
}

std::string TypeName(int depth);

SampleType TypeOf(int depth) {
  switch (depth) {
    case CV_8U:
      return SampleType::kUint8;
    case CV_16U:
      return SampleType::kUint16;
    case CV_16S:
      return SampleType::kInt16;
    default:
      return SampleType::kFloat32;
  }
}

std::string TypeName(int depth) { return SampleTypeName(TypeOf(depth)); }

std::vector<TiffWriteOptions> Layouts() {
  std::vector<TiffWriteOptions> all;
  for (bool planar : {false, true}) {
    for (int tile : {0, 16}) {
      for (int compression : {COMPRESSION_NONE, COMPRESSION_ADOBE_DEFLATE, COMPRESSION_LZW}) {
        TiffWriteOptions o;
        o.planar = planar;
        o.tile = tile;
        o.compression = compression;
        all.push_back(o);
      }
    }
  }
  TiffWriteOptions be;
  be.big_endian = true;
  all.push_back(be);
  return all;
}

std::string Describe(const TiffWriteOptions& o) {
  return std::string(o.planar ? "planar" : "contig") + (o.tile ? " tiled" : " strips") +
         " compression " + std::to_string(o.compression) + (o.big_endian ? " big-endian" : "");
}

TEST(Tiff, ContiguousOneThreeFourChannelsAreOpenCvsPixels) {
  std::vector<std::string> unread;
  for (int depth : {CV_8U, CV_16U, CV_16S, CV_32F}) {
    for (int c : {1, 3, 4}) {
      for (int tile : {0, 16}) {
        TiffWriteOptions o;
        o.tile = tile;
        // OpenCV reads 8-bit RGBA with unassociated alpha through libtiff's RGBA reader, which
        // premultiplies the color: compared on an unspecified 4th sample (kept as it is). The
        // 8-bit path keeps OpenCV for contiguous files, so what it gives is unchanged.
        if (depth == CV_8U) o.alpha = EXTRASAMPLE_UNSPECIFIED;
        const cv::Mat src = Samples(21, 35, c, depth);
        const std::string bytes = TiffBytes(src, o);
        SCOPED_TRACE("depth " + std::to_string(depth) + " channels " + std::to_string(c) +
                     (tile ? " tiled" : ""));
        const cv::Mat want = OpenCvTyped(bytes);
        if (want.empty()) {
          unread.push_back(TypeName(depth) + "x" + std::to_string(c) + (tile ? " tiled" : ""));
          // The 8-bit path reads it with libtiff where OpenCV fails: the source's pixels.
          cv::Mat eight;
          const Status s = DecodeImage(AsBytes(bytes), 3, &eight);
          ASSERT_TRUE(s.ok()) << s.ToString();
          cv::Mat rgb = src;
          if (c == 1) cv::cvtColor(src, rgb, cv::COLOR_GRAY2RGB);
          if (c == 4) cv::cvtColor(src, rgb, cv::COLOR_RGBA2RGB);
          EXPECT_EQ(MaxDiff(eight, rgb), 0);
          continue;
        }
        EXPECT_EQ(MaxDiff(want, src), 0);  // OpenCV reads these right: the reference
        cv::Mat got;
        ASSERT_TRUE(DecodeTiff(AsBytes(bytes), &got).ok());
        EXPECT_EQ(MaxDiff(got, want), 0);
        if (depth != CV_8U) {  // the typed path dspipe takes now
          cv::Mat typed;
          const Status s = DecodeTyped(AsBytes(bytes), TypeOf(depth), false, &typed);
          ASSERT_TRUE(s.ok()) << s.ToString();
          EXPECT_EQ(MaxDiff(typed, want), 0);
        }
        // The 8-bit path stays OpenCV's for these: the same as before, by construction.
        cv::Mat buf(1, static_cast<int>(bytes.size()), CV_8UC1, const_cast<char*>(bytes.data()));
        const cv::Mat color = cv::imdecode(buf, cv::IMREAD_COLOR);
        for (int ch : {1, 3}) {
          if (color.empty()) break;
          cv::Mat eight, ref;
          const Status s = DecodeImage(AsBytes(bytes), ch, &eight);
          ASSERT_TRUE(s.ok()) << s.ToString();
          cv::cvtColor(color, ref, ch == 1 ? cv::COLOR_BGR2GRAY : cv::COLOR_BGR2RGB);
          EXPECT_EQ(MaxDiff(eight, ref), 0);
        }
      }
    }
  }
  std::string list;
  for (const std::string& u : unread) list += " " + u;
  std::cout << "OpenCV 4.6 cannot read (compared with the source elsewhere):" << list << "\n";
}

TEST(Tiff, AnyChannelCountLayoutAndCompressionDecodesToTheSourceSamples) {
  for (int depth : {CV_8U, CV_16U, CV_16S, CV_32F}) {
    for (int c : {1, 2, 3, 4, 5, 6, 16}) {
      for (TiffWriteOptions o : Layouts()) {
        if (o.compression != COMPRESSION_NONE) {
          o.predictor = depth == CV_32F ? PREDICTOR_FLOATINGPOINT : PREDICTOR_HORIZONTAL;
          if (o.compression == COMPRESSION_LZW && depth == CV_32F) o.predictor = 0;
        }
        SCOPED_TRACE("depth " + std::to_string(depth) + " channels " + std::to_string(c) + " " +
                     Describe(o));
        const cv::Mat src = Samples(37, 29, c, depth, c);
        const std::string bytes = TiffBytes(src, o);
        ASSERT_FALSE(bytes.empty());
        TiffInfo info;
        ASSERT_TRUE(ReadTiffInfo(AsBytes(bytes), &info).ok());
        EXPECT_TRUE(info.ours);
        EXPECT_EQ(info.samples, c);
        EXPECT_EQ(info.planar, o.planar);
        cv::Mat got;
        const Status s = DecodeTiff(AsBytes(bytes), &got);
        ASSERT_TRUE(s.ok()) << s.ToString();
        EXPECT_EQ(MaxDiff(got, src), 0);
        ImageProbe p;
        ASSERT_TRUE(Probe(AsBytes(bytes), &p).ok());
        EXPECT_EQ(p.codec, Codec::kEncoded);
        EXPECT_EQ(p.channels, c);
        EXPECT_EQ(p.width, 29);
        EXPECT_EQ(p.height, 37);
        SampleType t;
        ASSERT_TRUE(SampleTypeOf(p, &t).ok());
        EXPECT_EQ(t, TypeOf(depth));
        if (depth != CV_8U) {
          cv::Mat typed;
          ASSERT_TRUE(DecodeTyped(AsBytes(bytes), t, false, &typed).ok());
          EXPECT_EQ(MaxDiff(typed, src), 0);
        }
      }
    }
  }
}

// The 8-bit reading of a planar 16-bit color TIFF (which OpenCV 4.6 misreads) is OpenCV's
// reading of the same pixels stored contiguous.
TEST(Tiff, PlanarSixteenBitReducedToEightBitsIsOpenCvsReadingOfTheContiguousFile) {
  for (int c : {2, 3, 4}) {
    const cv::Mat src = Samples(19, 23, c, CV_16U);
    // An unspecified 4th sample: with unassociated alpha OpenCV's RGBA reader premultiplies
    // the contiguous file's color, which the planar reading (alpha dropped) does not.
    TiffWriteOptions contig, planar;
    contig.alpha = planar.alpha = EXTRASAMPLE_UNSPECIFIED;
    planar.planar = true;
    const std::string contig_bytes = TiffBytes(src, contig), planar_bytes = TiffBytes(src, planar);
    for (int ch : {1, 3}) {
      SCOPED_TRACE(std::to_string(c) + " channels, read as " + std::to_string(ch));
      cv::Mat want, got;
      ASSERT_TRUE(DecodeImage(AsBytes(contig_bytes), ch, &want).ok());
      const Status s = DecodeImage(AsBytes(planar_bytes), ch, &got);
      ASSERT_TRUE(s.ok()) << s.ToString();
      EXPECT_EQ(MaxDiff(got, want), 0);
    }
  }
}

TEST(Tiff, MoreThanFourChannelsAreRefusedAsEightBitPixels) {
  const std::string bytes = TiffBytes(Samples(8, 8, 5, CV_8U));
  cv::Mat m;
  const Status s = DecodeImage(AsBytes(bytes), 3, &m);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("5-channel uint8 TIFF"), std::string::npos) << s.ToString();
  TiffWriteOptions planar;
  planar.planar = true;
  const Status f = DecodeImage(AsBytes(TiffBytes(Samples(8, 8, 3, CV_32F), planar)), 3, &m);
  EXPECT_NE(f.message().find("planar float32 color TIFF"), std::string::npos) << f.ToString();
}

// bytes with the last strip's offset moved so that the strip runs past the end of the file, as
// in a file cut short (libtiff writes its directory after the pixels, so a plain cut would
// lose the directory instead). The strip offsets are found by their values after the pixels.
std::string WithLastStripPastTheEnd(const std::string& bytes) {
  char path[] = "/tmp/dspipe-tifft-XXXXXX";
  const int fd = ::mkstemp(path);
  EXPECT_EQ(::write(fd, bytes.data(), bytes.size()), static_cast<ssize_t>(bytes.size()));
  ::close(fd);
  TIFF* t = TIFFOpen(path, "r");
  EXPECT_NE(t, nullptr);
  uint64_t* offsets = nullptr;
  TIFFGetField(t, TIFFTAG_STRIPOFFSETS, &offsets);
  std::string pattern;
  const uint32_t n = TIFFNumberOfStrips(t);
  uint64_t first = UINT64_MAX;
  for (uint32_t i = 0; i < n; ++i) {
    const uint32_t v = static_cast<uint32_t>(offsets[i]);
    first = std::min<uint64_t>(first, v);
    pattern.append(reinterpret_cast<const char*>(&v), 4);  // little-endian files, hosts
  }
  TIFFClose(t);
  ::unlink(path);
  const size_t at = bytes.find(pattern, 8);
  EXPECT_NE(at, std::string::npos);
  EXPECT_GT(n, 1u);
  std::string out = bytes;
  const uint32_t past = static_cast<uint32_t>(bytes.size() - 10);
  std::memcpy(out.data() + at + (n - 1) * 4, &past, 4);
  return out;
}

TEST(Tiff, AStripPastTheEndIsAnErrorNeverZerosAndLibtiffSaysNothingOnStderr) {
  for (int compression : {COMPRESSION_NONE, COMPRESSION_ADOBE_DEFLATE}) {
    for (bool planar : {false, true}) {
      TiffWriteOptions o;
      o.compression = compression;
      o.planar = planar;
      o.rows_per_strip = 16;
      const cv::Mat src = Samples(64, 64, 5, CV_16U);
      const std::string bytes = TiffBytes(src, o);
      SCOPED_TRACE(std::to_string(compression) + (planar ? " planar" : ""));
      const std::string cut = WithLastStripPastTheEnd(bytes);
      ::testing::internal::CaptureStderr();
      cv::Mat m;
      const Status s = DecodeTiff(AsBytes(cut), &m);
      ImageProbe p;
      const Status probed = Probe(AsBytes(cut), &p);
      cv::Mat typed;
      const Status t = DecodeTyped(AsBytes(cut), SampleType::kUint16, false, &typed);
      const Status half = Probe(AsBytes(bytes.substr(0, bytes.size() / 2)), &p);
      const std::string err = ::testing::internal::GetCapturedStderr();
      EXPECT_EQ(s.code(), Status::Code::kBadInput) << s.ToString();
      EXPECT_NE(s.message().find("TIFF strip"), std::string::npos) << s.ToString();
      EXPECT_FALSE(probed.ok());
      EXPECT_FALSE(t.ok());
      EXPECT_FALSE(half.ok());
      EXPECT_EQ(err, "");
      ASSERT_TRUE(DecodeTiff(AsBytes(bytes), &m).ok());  // the file itself reads
      EXPECT_EQ(MaxDiff(m, src), 0);
    }
  }
}

struct LimitsGuard {
  ~LimitsGuard() { SetDecodeLimits(DecodeLimits{}); }
};

TEST(Tiff, TheDecodeLimitsHoldBeforeAnythingIsAllocated) {
  LimitsGuard guard;
  const std::string bytes = TiffBytes(Samples(40, 50, 16, CV_32F));
  DecodeLimits l;
  l.max_side = 45;
  SetDecodeLimits(l);
  cv::Mat m;
  Status s = DecodeTiff(AsBytes(bytes), &m);
  EXPECT_NE(s.message().find("TIFF header declares 50x40 pixels"), std::string::npos)
      << s.ToString();
  EXPECT_NE(s.message().find("--max-image-side"), std::string::npos) << s.ToString();
  // Within the pixel limit, beyond its bytes: 16 float channels are 64 bytes a pixel.
  l = DecodeLimits{};
  l.max_pixels = 40 * 50 * 8;
  SetDecodeLimits(l);
  s = DecodeTiff(AsBytes(bytes), &m);
  EXPECT_NE(s.message().find("16 x 4-byte samples (128000 bytes); the limit is 64000 bytes"),
            std::string::npos)
      << s.ToString();
  ImageProbe p;
  EXPECT_FALSE(Probe(AsBytes(bytes), &p).ok());
  EXPECT_FALSE(DecodeTyped(AsBytes(bytes), SampleType::kFloat32, false, &m).ok());
  l.max_pixels = 40 * 50 * 16;
  SetDecodeLimits(l);
  EXPECT_TRUE(DecodeTiff(AsBytes(bytes), &m).ok());
}

TEST(Tiff, SeveralPagesAreRefusedWhoeverReadsThem) {
  std::string error;
  for (int c : {1, 3, 5}) {
    const std::string bytes =
        TiffBytes({Samples(8, 8, c, CV_16U), Samples(8, 8, c, CV_16U, 1)}, {}, &error);
    ASSERT_FALSE(bytes.empty()) << error;
    SCOPED_TRACE(c);
    ImageProbe p;
    Status s = Probe(AsBytes(bytes), &p);
    EXPECT_NE(s.message().find("a multi-page TIFF (2 pages)"), std::string::npos) << s.ToString();
    cv::Mat m;
    s = DecodeTyped(AsBytes(bytes), SampleType::kUint16, false, &m);
    EXPECT_NE(s.message().find("a multi-page TIFF (2 pages)"), std::string::npos) << s.ToString();
    s = DecodeImage(AsBytes(bytes), 3, &m);
    EXPECT_NE(s.message().find("a multi-page TIFF (2 pages)"), std::string::npos) << s.ToString();
  }
}

TEST(Tiff, PaletteAndOtherPhotometricsStayWithOpenCv) {
  // MINISWHITE (and palette, YCbCr, CMYK, 1-bit) are not libtiff-path files: OpenCV reads them
  // as it did.
  TiffWriteOptions o;
  o.photometric = PHOTOMETRIC_MINISWHITE;
  const std::string bytes = TiffBytes(Samples(8, 8, 1, CV_8U), o);
  TiffInfo info;
  ASSERT_TRUE(ReadTiffInfo(AsBytes(bytes), &info).ok());
  EXPECT_FALSE(info.ours);
  cv::Mat m;
  EXPECT_FALSE(DecodeTiff(AsBytes(bytes), &m).ok());
  ImageProbe p;
  EXPECT_TRUE(Probe(AsBytes(bytes), &p).ok());
}

}  // namespace
}  // namespace dspipe::codec

namespace dspipe::codec {
namespace {

// The fuzz seeds of libtiff's path (tests/fuzz/make_seeds.py writes them with a writer of its
// own) read: another writer's files than the libtiff-written ones above.
TEST(Tiff, TheFuzzSeedsOfTheLibtiffPathDecode) {
  for (const auto& [name, channels, depth] : {std::tuple{"typed_tiff16x5_planar", 5, CV_16U},
                                              std::tuple{"typed_tiff_f32x6_tiled", 6, CV_32F},
                                              std::tuple{"tiff16x3_planar", 3, CV_16U}}) {
    SCOPED_TRACE(name);
    std::ifstream in(std::string(DSPIPE_SOURCE_DIR) + "/tests/fuzz/seeds/decode/" + name,
                     std::ios::binary);
    const std::string seed((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    ASSERT_GT(seed.size(), 1u);
    const std::string file = seed.substr(1);  // the harness's operation byte
    cv::Mat m;
    const Status s = DecodeTiff(AsBytes(file), &m);
    ASSERT_TRUE(s.ok()) << s.ToString();
    EXPECT_EQ(m.channels(), channels);
    EXPECT_EQ(m.depth(), depth);
    // Channel k is channel 0 plus 7k (uint16) or 0.5k (float32), as the script writes them.
    std::vector<cv::Mat> planes;
    cv::split(m, planes);
    for (int k = 1; k < channels; ++k) {
      cv::Mat diff;
      cv::subtract(planes[k], planes[0], diff, cv::noArray(), CV_64F);
      double lo = 0, hi = 0;
      cv::minMaxLoc(diff, &lo, &hi);
      EXPECT_EQ(lo, depth == CV_16U ? 7.0 * k : 0.5 * k) << k;
      EXPECT_EQ(hi, lo) << k;
    }
  }
}

}  // namespace
}  // namespace dspipe::codec

namespace dspipe::codec {
namespace {

TEST(Tiff, MoreThanSixteenSamplesAreRefusedNamingThem) {
  cv::Mat m(4, 4, CV_16UC(17));
  std::memset(m.data, 0, m.total() * m.elemSize());
  const std::string bytes = TiffBytes(m);
  ASSERT_FALSE(bytes.empty());
  ::testing::internal::CaptureStderr();
  ImageProbe p;
  const Status probed = Probe(AsBytes(bytes), &p);
  cv::Mat out;
  const Status eight = DecodeImage(AsBytes(bytes), 3, &out);
  const Status typed = DecodeTyped(AsBytes(bytes), SampleType::kUint16, false, &out);
  EXPECT_EQ(::testing::internal::GetCapturedStderr(), "");  // OpenCV never sees it
  for (const Status& s : {probed, eight, typed}) {
    EXPECT_NE(s.message().find("a TIFF of 17 samples per pixel; dspipe reads at most 16 channels"),
              std::string::npos)
        << s.ToString();
  }
}

}  // namespace
}  // namespace dspipe::codec

namespace dspipe::codec {
namespace {

TEST(Tiff, PagesStackAsChannelsOrAreRefusedNamingThePage) {
  std::string error;
  const cv::Mat a = Samples(12, 10, 2, CV_16U, 1), b = Samples(12, 10, 3, CV_16U, 2);
  TiffWriteOptions planar;
  planar.planar = true;
  const std::string bytes = TiffBytes({a, b, a}, planar, &error);
  ASSERT_FALSE(bytes.empty()) << error;
  cv::Mat m, want;
  int pages = 0;
  Status s = DecodeTiffPages(AsBytes(bytes), &m, &pages);
  ASSERT_TRUE(s.ok()) << s.ToString();
  EXPECT_EQ(pages, 3);
  cv::merge(std::vector<cv::Mat>{a, b, a}, want);
  EXPECT_EQ(MaxDiff(m, want), 0);
  // One page: the page.
  s = DecodeTiffPages(AsBytes(TiffBytes(b)), &m, &pages);
  ASSERT_TRUE(s.ok()) << s.ToString();
  EXPECT_EQ(pages, 1);
  EXPECT_EQ(MaxDiff(m, b), 0);
  // Another size, another type, too many channels.
  s = DecodeTiffPages(AsBytes(TiffBytes({a, Samples(12, 11, 2, CV_16U)}, {}, &error)), &m, &pages);
  EXPECT_NE(s.message().find("TIFF page 2 is 11x12 uint16, page 1 10x12 uint16"),
            std::string::npos)
      << s.ToString();
  s = DecodeTiffPages(AsBytes(TiffBytes({a, a, Samples(12, 10, 1, CV_32F)}, {}, &error)), &m,
                      &pages);
  EXPECT_NE(s.message().find("TIFF page 3 is 10x12 float32"), std::string::npos) << s.ToString();
  std::vector<cv::Mat> many(6, Samples(12, 10, 3, CV_16U));
  s = DecodeTiffPages(AsBytes(TiffBytes(many, {}, &error)), &m, &pages);
  EXPECT_NE(s.message().find("TIFF page 6 brings the channels to 18; a record holds at most 16"),
            std::string::npos)
      << s.ToString();
  // The stack is held to the limits as one image (4 bytes a pixel of max_pixels).
  const std::string two = TiffBytes({a, a}, {}, &error);
  LimitsGuard guard;
  DecodeLimits l;
  l.max_pixels = 12 * 10 * 3;  // 4 bytes a pixel: 1440 bytes; the stack is 12x10x4x2 = 960
  SetDecodeLimits(l);
  EXPECT_TRUE(DecodeTiffPages(AsBytes(two), &m, &pages).ok());
  l.max_pixels = 12 * 10 * 1;  // 480 bytes: each page is 480, the stack 960
  SetDecodeLimits(l);
  s = DecodeTiffPages(AsBytes(two), &m, &pages);
  EXPECT_NE(s.message().find("4 x 2-byte samples (960 bytes); the limit is 480 bytes"),
            std::string::npos)
      << s.ToString();
}

}  // namespace
}  // namespace dspipe::codec
