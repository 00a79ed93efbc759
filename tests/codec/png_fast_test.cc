// SPDX-License-Identifier: Apache-2.0
// The PNG fast path (lib/codec/png_fast*): the routing rule, SIMD unfiltering against the plain
// loop, corruption that must fail, and bit-exactness with libspng over a corpus written by
// several encoders (tests/codec/make_png_corpus.py: OpenCV, Pillow, ImageMagick; libspng's own
// encodes, every filter forced, are made here).
#include "codec/png_fast.h"

#include <gtest/gtest.h>
#include <spng.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <random>
#include <sstream>

#include "codec/image.h"
#include "dspipe/normalize.h"
#include "normalize/normalize_row.h"
#include "test_images.h"

namespace dspipe::codec {
namespace {

namespace fs = std::filesystem;
using dspipe::testing::AppendPngChunk;
using dspipe::testing::AsBytes;
using dspipe::testing::PutBe32;

// Restores the process-wide switch when a test ends.
// The router's fused PNG path (DecodePayload with dst and fuse): *fused says whether it took it.
Status DecodeFused(Codec codec, const std::string& png, int channels, int h, int w, bool mirror,
                   PngRowSink* sink, uint8_t* dst, bool* fused) {
  DecodeRequest q;
  q.codec = codec;
  q.payload = AsBytes(png);
  q.channels = channels;
  q.height = h;
  q.width = w;
  q.dst = dst;
  q.fuse = true;
  q.mirror = mirror;
  q.sink = sink;
  cv::Mat scratch;
  DecodedImage d;
  const Status s = DecodePayload(q, &scratch, &d);
  *fused = d.path == DecodePath::kFused;
  return s;
}

struct FastPathScope {
  explicit FastPathScope(bool on) { SetPngFastPathEnabled(on); }
  ~FastPathScope() { SetPngFastPathEnabled(true); }
};

std::string Ihdr(int w, int h, int depth, int color, int interlace = 0) {
  std::string d;
  PutBe32(&d, static_cast<uint32_t>(w));
  PutBe32(&d, static_cast<uint32_t>(h));
  d += static_cast<char>(depth);
  d += static_cast<char>(color);
  d += '\0';
  d += '\0';
  d += static_cast<char>(interlace);
  return d;
}

std::string Zlib(const std::string& raw) {
  uLongf n = compressBound(raw.size());
  std::string z(n, '\0');
  EXPECT_EQ(compress2(reinterpret_cast<Bytef*>(z.data()), &n,
                      reinterpret_cast<const Bytef*>(raw.data()), raw.size(), 6),
            Z_OK);
  z.resize(n);
  return z;
}

// A PNG from its parts: IHDR, chunks before IDAT, the IDAT payload (split into `splits` chunks).
std::string Png(const std::string& ihdr, const std::string& idat_payload,
                const std::vector<std::pair<std::string, std::string>>& before = {},
                int splits = 1) {
  std::string png("\x89PNG\r\n\x1a\n", 8);
  AppendPngChunk(&png, "IHDR", ihdr);
  for (const auto& [type, data] : before) AppendPngChunk(&png, type.c_str(), data);
  const size_t step = (idat_payload.size() + splits - 1) / splits;
  for (size_t at = 0; at < idat_payload.size(); at += step) {
    AppendPngChunk(&png, "IDAT", idat_payload.substr(at, step));
  }
  AppendPngChunk(&png, "IEND", "");
  return png;
}

// Filtered scanlines of a w x h RGB image: row y uses filter y % 5, random bytes.
std::string FilteredRows(int w, int h, int bpp, uint32_t seed = 1) {
  std::mt19937 rng(seed);
  std::string raw;
  for (int y = 0; y < h; ++y) {
    raw += static_cast<char>(y % 5);
    for (int i = 0; i < w * bpp; ++i) raw += static_cast<char>(rng() & 0xFF);
  }
  return raw;
}

cv::Mat Decode(const std::string& png, int channels, bool fast) {
  FastPathScope scope(fast);
  cv::Mat m;
  const Status s = DecodeImage(AsBytes(png), channels, &m);
  EXPECT_TRUE(s.ok()) << s.ToString();
  return m;
}

bool SameMat(const cv::Mat& a, const cv::Mat& b) {
  return a.size() == b.size() && a.type() == b.type() &&
         (a.empty() || std::equal(a.datastart, a.dataend, b.datastart));
}

// ---- routing ---------------------------------------------------------------------------------

TEST(PngRoute, TheDocumentedRule) {
  const std::string z = Zlib(FilteredRows(4, 2, 3));
  auto route = [](const std::string& png) { return ChoosePngDecoder(AsBytes(png)); };
  for (int color : {0, 2, 4, 6}) {
    const PngRoute r = route(Png(Ihdr(4, 2, 8, color), z));
    EXPECT_EQ(r.decoder, PngDecoder::kFast) << "color type " << color;
    EXPECT_EQ(r.header.width, 4u);
    EXPECT_EQ(r.header.height, 2u);
    EXPECT_EQ(r.header.channels, color == 0 ? 1 : color == 2 ? 3 : color == 4 ? 2 : 4);
  }
  // Ancillary chunks before IDAT do not matter.
  EXPECT_EQ(route(Png(Ihdr(4, 2, 8, 2), z, {{"gAMA", std::string(4, '\1')},
                                            {"pHYs", std::string(9, '\0')},
                                            {"tEXt", std::string("a\0b", 3)}}))
                .decoder,
            PngDecoder::kFast);
  // Everything else is libspng's.
  const std::vector<std::pair<std::string, std::string>> to_libspng = {
      {"16-bit", Png(Ihdr(4, 2, 16, 2), z)},
      {"4-bit gray", Png(Ihdr(4, 2, 4, 0), z)},
      {"palette", Png(Ihdr(4, 2, 8, 3), z, {{"PLTE", std::string(6, '\0')}})},
      {"interlaced", Png(Ihdr(4, 2, 8, 2, 1), z)},
      {"tRNS", Png(Ihdr(4, 2, 8, 2), z, {{"tRNS", std::string(6, '\0')}})},
      {"PLTE in RGB", Png(Ihdr(4, 2, 8, 2), z, {{"PLTE", std::string(6, '\0')}})},
      {"unknown critical", Png(Ihdr(4, 2, 8, 2), z, {{"ABCD", "x"}})},
      {"zero width", Png(Ihdr(0, 2, 8, 2), z)},
      {"bad filter method", [&] {
         std::string h = Ihdr(4, 2, 8, 2);
         h[11] = 1;
         return Png(h, z);
       }()},
      {"truncated before IDAT", Png(Ihdr(4, 2, 8, 2), z).substr(0, 40)},
      {"not a PNG", std::string("GIF89a") + std::string(64, '\0')},
  };
  for (const auto& [what, png] : to_libspng) {
    EXPECT_EQ(route(png).decoder, PngDecoder::kLibspng) << what;
  }
  FastPathScope off(false);
  EXPECT_EQ(route(Png(Ihdr(4, 2, 8, 2), z)).decoder, PngDecoder::kLibspng);
}

// ---- SIMD unfilter against the plain loop ----------------------------------------------------

TEST(PngUnfilter, SimdMatchesPlainForEveryFilterAndPixelSize) {
  std::mt19937 rng(7);
  std::vector<UnfilterIsa> isas = {UnfilterIsa::kSse2};
  if (BestUnfilterIsa() == UnfilterIsa::kAvx2) isas.push_back(UnfilterIsa::kAvx2);
  for (int bpp : {1, 2, 3, 4, 6, 8}) {  // 6, 8: 16-bit RGB, RGBA
    for (size_t px = 1; px <= 80; ++px) {
      const size_t n = px * bpp;
      for (int filter = 0; filter <= 4; ++filter) {
        std::vector<uint8_t> src(n), prev(n);
        for (auto& v : src) v = static_cast<uint8_t>(rng());
        // Small ranges too, so Paeth's ties and Avg's odd sums come up.
        for (auto& v : prev) v = static_cast<uint8_t>(px % 2 ? rng() : rng() % 3);
        std::vector<uint8_t> want(n);
        UnfilterRow(UnfilterIsa::kScalar, filter, src.data(), prev.data(), want.data(), n, bpp);
        for (UnfilterIsa isa : isas) {
          std::vector<uint8_t> got(n + 8, 0xEE);  // bytes past the row must stay untouched
          UnfilterRow(isa, filter, src.data(), prev.data(), got.data(), n, bpp);
          EXPECT_TRUE(std::equal(want.begin(), want.end(), got.begin()))
              << "isa " << int(isa) << " filter " << filter << " bpp " << bpp << " n " << n;
          EXPECT_EQ(got[n], 0xEE) << "wrote past the row: filter " << filter << " bpp " << bpp;
          std::vector<uint8_t> in_place = src;  // out == src
          UnfilterRow(isa, filter, in_place.data(), prev.data(), in_place.data(), n, bpp);
          EXPECT_EQ(in_place, want) << "in place: isa " << int(isa) << " filter " << filter
                                    << " bpp " << bpp << " n " << n;
        }
      }
    }
  }
}

// ---- corruption is an error on the fast path -------------------------------------------------

Status DecodeFast(const std::string& png) {
  EXPECT_EQ(ChoosePngDecoder(AsBytes(png)).decoder, PngDecoder::kFast);
  std::vector<uint8_t> dst(8 * 5 * 3);
  return DecodePayloadInto(Codec::kPng, AsBytes(png), 3, 5, 8, dst.data());
}

void ExpectCorrupt(const std::string& png, const std::string& reason) {
  const Status s = DecodeFast(png);
  EXPECT_EQ(s.code(), Status::Code::kCorruption) << s.ToString();
  EXPECT_NE(s.message().find(reason), std::string::npos) << s.ToString();
}

// Rewrites the CRC of the chunk at `pos` (a test that wants the corruption past the CRC check).
void FixCrc(std::string* png, size_t pos) {
  const uint32_t len = static_cast<uint32_t>(static_cast<uint8_t>((*png)[pos]) << 24 |
                                             static_cast<uint8_t>((*png)[pos + 1]) << 16 |
                                             static_cast<uint8_t>((*png)[pos + 2]) << 8 |
                                             static_cast<uint8_t>((*png)[pos + 3]));
  const uint32_t c = static_cast<uint32_t>(
      crc32(0, reinterpret_cast<const Bytef*>(png->data() + pos + 4), len + 4));
  for (int i = 0; i < 4; ++i) (*png)[pos + 8 + len + i] = static_cast<char>(c >> (24 - 8 * i));
}

TEST(PngFastCorrupt, EveryKindOfDamageIsAnErrorWithTheReason) {
  const std::string raw = FilteredRows(8, 5, 3);
  const std::string good = Png(Ihdr(8, 5, 8, 2), Zlib(raw));
  ASSERT_TRUE(DecodeFast(good).ok());
  const size_t idat = good.find("IDAT") - 4;

  std::string bad_crc = good;
  bad_crc[idat + 10] ^= 0x01;
  ExpectCorrupt(bad_crc, "CRC mismatch");

  std::string bad_ancillary = Png(Ihdr(8, 5, 8, 2), Zlib(raw), {{"tEXt", "k\0v"}});
  bad_ancillary[bad_ancillary.find("tEXt") + 4] ^= 0x01;
  ExpectCorrupt(bad_ancillary, "chunk 'tEXt' at offset 33: CRC mismatch");

  std::string bad_adler = good;  // last 4 bytes of the zlib stream, CRC made right again
  bad_adler[good.find("IEND") - 4 - 4 - 1] ^= 0x01;
  FixCrc(&bad_adler, idat);
  ExpectCorrupt(bad_adler, "corrupt zlib stream");

  ExpectCorrupt(Png(Ihdr(8, 5, 8, 2), Zlib(raw.substr(0, raw.size() - 25))), "is short");
  ExpectCorrupt(Png(Ihdr(8, 5, 8, 2), Zlib(raw + "xyz")), "inflates past");
  ExpectCorrupt(Png(Ihdr(8, 5, 8, 2), Zlib(raw) + "junk"), "4 bytes of trailing data");
  std::string bad_filter = raw;
  bad_filter[3 * (8 * 3 + 1)] = 5;
  ExpectCorrupt(Png(Ihdr(8, 5, 8, 2), Zlib(bad_filter)), "row 3 has filter type 5");
  ExpectCorrupt(good.substr(0, good.size() - 12), "no IEND");
  ExpectCorrupt(good.substr(0, good.size() - 20), "truncated PNG");
  ExpectCorrupt(good + "tail", "bytes after IEND");
  ExpectCorrupt(Png(Ihdr(8, 5, 8, 2), ""), "no IDAT");
  // IDAT split across chunks decodes; IDAT chunks with another chunk between them do not.
  EXPECT_TRUE(DecodeFast(Png(Ihdr(8, 5, 8, 2), Zlib(raw), {}, 7)).ok());
  const std::string z = Zlib(raw);
  std::string gap("\x89PNG\r\n\x1a\n", 8);
  AppendPngChunk(&gap, "IHDR", Ihdr(8, 5, 8, 2));
  AppendPngChunk(&gap, "IDAT", z.substr(0, 10));
  AppendPngChunk(&gap, "tEXt", "a\0b");
  AppendPngChunk(&gap, "IDAT", z.substr(10));
  AppendPngChunk(&gap, "IEND", "");
  ExpectCorrupt(gap, "not consecutive");
  // A critical chunk after the image data (a second IHDR, a late PLTE) is malformed.
  for (const char* late : {"IHDR", "PLTE"}) {
    std::string png = good.substr(0, good.size() - 12);
    AppendPngChunk(&png, late, std::string(13, '\0'));
    AppendPngChunk(&png, "IEND", "");
    ExpectCorrupt(png, std::string("PNG critical chunk '") + late + "'");
  }
}

TEST(PngFastCorrupt, DecodeLimitsApplyBeforeInflating) {
  const std::string png = Png(Ihdr(40000, 2, 8, 2), Zlib("x"));
  ASSERT_EQ(ChoosePngDecoder(AsBytes(png)).decoder, PngDecoder::kFast);
  cv::Mat m;
  const Status s = DecodeImage(AsBytes(png), 3, &m);
  EXPECT_EQ(s.code(), Status::Code::kBadInput);
  EXPECT_NE(s.message().find("--max-image-side"), std::string::npos) << s.ToString();
  EXPECT_TRUE(m.empty());
}

// A 16-bit PNG bomb: refused from its header before anything is allocated, on the 16-bit fast
// path and as a mask.
TEST(PngFastCorrupt, DecodeLimitsApplyToSixteenBitPngsBeforeAllocating) {
  const std::string png = Png(Ihdr(40000, 40000, 16, 0), Zlib("x"));
  ASSERT_EQ(ChoosePng16Decoder(AsBytes(png)).decoder, PngDecoder::kFast);
  for (bool mask : {false, true}) {
    cv::Mat m;
    const Status s = DecodeTyped(AsBytes(png), SampleType::kUint16, mask, &m);
    EXPECT_EQ(s.code(), Status::Code::kBadInput) << s.ToString();
    EXPECT_NE(s.message().find("--max-image-side"), std::string::npos) << s.ToString();
    EXPECT_TRUE(m.empty());
  }
}

// The existing stored-block test (image_test.cc) over the fast path explicitly: cv2 level 0
// writes stored deflate blocks, where only the chunk CRC can see a flipped pixel bit.
TEST(PngFastCorrupt, FlippedBitsInStoredBlocksNeverDecodeSilently) {
  cv::Mat rgb(64, 64, CV_8UC3);
  cv::randu(rgb, 0, 255);
  const std::string png = dspipe::testing::Encode(rgb, ".png", {cv::IMWRITE_PNG_COMPRESSION, 0});
  ASSERT_EQ(ChoosePngDecoder(AsBytes(png)).decoder, PngDecoder::kFast);
  std::vector<uint8_t> dst(64 * 64 * 3);
  int silent = 0, tried = 0;
  for (size_t off = png.find("IDAT") + 4; off < png.size() - 12; off += 53, ++tried) {
    std::string bad = png;
    bad[off] = static_cast<char>(bad[off] ^ 0x10);
    const Status s = DecodePayloadInto(Codec::kPng, AsBytes(bad), 3, 64, 64, dst.data());
    if (s.ok()) ++silent;
    else EXPECT_EQ(s.code(), Status::Code::kCorruption) << s.ToString();
  }
  EXPECT_GT(tried, 100);
  EXPECT_EQ(silent, 0);
}

// ---- mirrored rows -----------------------------------------------------------------------------

TEST(PngMirror, SsseAndPlainMirrorEveryWidthWithoutWritingPastTheRow) {
  std::mt19937 rng(7);
  for (int bpp : {1, 3}) {
    for (uint32_t w = 1; w <= 80; ++w) {
      std::vector<uint8_t> src(w * bpp + 16);  // MirrorRow may read 16 bytes past the row
      for (auto& v : src) v = static_cast<uint8_t>(rng());
      std::vector<uint8_t> want(w * bpp);
      for (uint32_t x = 0; x < w; ++x) {
        for (int k = 0; k < bpp; ++k) want[x * bpp + k] = src[(w - 1 - x) * bpp + k];
      }
      for (bool plain : {false, true}) {
        std::vector<uint8_t> dst(w * bpp + 32, 0xEE);
        MirrorRow(src.data(), bpp, w, dst.data(), plain);
        EXPECT_TRUE(std::equal(want.begin(), want.end(), dst.begin()))
            << "bpp " << bpp << " width " << w << " plain " << plain;
        EXPECT_TRUE(std::all_of(dst.begin() + w * bpp, dst.end(), [](uint8_t v) { return v == 0xEE; }))
            << "wrote past the row: bpp " << bpp << " width " << w << " plain " << plain;
      }
    }
  }
}

// ---- the loader's fused path: decode + mirror + normalize per row ----------------------------

// Collects the rows DecodePngFast hands over into float32 planes, checking their order.
class NormalizingSink final : public PngRowSink {
 public:
  NormalizingSink(const NormalizeParams& p, bool plain, int h, int w, const uint8_t* dst,
                  float* out)
      : norm_(p, plain), h_(h), w_(w), channels_(p.channels), dst_(dst), out_(out) {}
  void Row(uint32_t y, const uint8_t* row) override {
    EXPECT_EQ(y, next_++);
    EXPECT_EQ(row, dst_ + size_t{y} * w_ * channels_);  // the final dst row
    norm_.Row(row, w_, out_ + size_t{y} * w_, static_cast<size_t>(h_) * w_);
  }
  uint32_t rows() const { return next_; }

 private:
  const normalize::RowNormalizerF32 norm_;
  const int h_, w_, channels_;
  const uint8_t* dst_;
  float* out_;
  uint32_t next_ = 0;
};

// The fused path (mirror off/on, AVX2 and plain row normalizer) against the unfused steps:
// DecodePayloadInto, cv::flip, NormalizeNhwcToNchwF32 (itself checked against the formula
// written out). Bit for bit, uint8 and float.
void ExpectFusedSameAsUnfused(const std::string& png, const std::string& what) {
  const PngRoute route = ChoosePngDecoder(AsBytes(png));
  const int h = static_cast<int>(route.header.height), w = static_cast<int>(route.header.width);
  for (int channels : {3, 1}) {
    const bool takes = route.decoder == PngDecoder::kFast &&
                       (channels == 3 || route.header.color_type == 0);
    if (!takes) {
      // Not for the fused path: the router decodes it the unfused way (nothing mirrored).
      bool fused = true;
      const int fh = h > 0 ? h : 1, fw = w > 0 ? w : 1;
      std::vector<uint8_t> big(static_cast<size_t>(fh) * fw * channels, 0xAB);
      (void)DecodeFused(Codec::kPng, png, channels, fh, fw, true, nullptr, big.data(), &fused);
      EXPECT_FALSE(fused) << what;
      continue;
    }
    const size_t n = static_cast<size_t>(h) * w * channels;
    std::vector<uint8_t> ref(n);
    ASSERT_TRUE(DecodePayloadInto(Codec::kPng, AsBytes(png), channels, h, w, ref.data()).ok());
    NormalizeParams p = NormalizeParams::ImageNet();
    if (channels == 1) {
      p.channels = 1;
      p.mean[0] = 117.3f;
      p.std[0] = 61.7f;
    }
    for (bool mirror : {false, true}) {
      std::vector<uint8_t> want = ref;
      if (mirror) {
        cv::Mat m(h, w, CV_8UC(channels), want.data());
        cv::flip(m, m, 1);
      }
      std::vector<float> want_f(n);
      ASSERT_TRUE(NormalizeNhwcToNchwF32(want.data(), 1, h, w, p, want_f.data()).ok());
      // The documented formula, written out (NormalizeNhwcToNchwF32 itself uses the row code).
      for (size_t i = 0; i < n; ++i) {
        const size_t c = i % static_cast<size_t>(channels), px = i / static_cast<size_t>(channels);
        const float v = (static_cast<float>(want[i]) - p.mean[c]) * (1.0f / p.std[c]);
        ASSERT_EQ(std::memcmp(&v, &want_f[c * static_cast<size_t>(h) * w + px], 4), 0) << what;
      }
      for (bool plain : {false, true}) {
        std::vector<uint8_t> dst(n, 0xAB);
        std::vector<float> got_f(n, -1.0f);
        NormalizingSink sink(p, plain, h, w, dst.data(), got_f.data());
        bool fused = false;
        const Status s =
            DecodeFused(Codec::kPng, png, channels, h, w, mirror, &sink, dst.data(), &fused);
        const std::string where = what + " channels " + std::to_string(channels) + " mirror " +
                                  std::to_string(mirror) + " plain " + std::to_string(plain);
        ASSERT_TRUE(s.ok()) << where << ": " << s.ToString();
        EXPECT_TRUE(fused) << where;
        EXPECT_EQ(sink.rows(), static_cast<uint32_t>(h)) << where;
        EXPECT_EQ(dst, want) << where;
        EXPECT_EQ(std::memcmp(got_f.data(), want_f.data(), n * sizeof(float)), 0) << where;
      }
    }
  }
}

TEST(PngFused, FallsBackForOtherSizesCodecsAndLibspngFiles) {
  cv::Mat rgb(5, 7, CV_8UC3);
  cv::randu(rgb, 0, 256);
  std::string png;
  ASSERT_TRUE(EncodePng(rgb, 1, &png).ok());
  std::vector<uint8_t> dst(8 * 8 * 3, 0xAB);
  bool fused = true;
  // Another size than the PNG's: not fused, and the router reports the mismatch.
  Status s = DecodeFused(Codec::kPng, png, 3, 8, 8, false, nullptr, dst.data(), &fused);
  EXPECT_EQ(s.code(), Status::Code::kCorruption) << s.ToString();
  EXPECT_FALSE(fused);
  // A raw payload of the wrong size: raw, never fused.
  s = DecodeFused(Codec::kRaw, png, 3, 5, 7, false, nullptr, dst.data(), &fused);
  EXPECT_EQ(s.code(), Status::Code::kCorruption) << s.ToString();
  EXPECT_FALSE(fused);
  // An RGB PNG asked for one channel, the fast path switched off, the request not asking for
  // fusion: decoded the unfused way, never mirrored, same pixels as DecodePayloadInto.
  std::vector<uint8_t> gray(5 * 7), want_gray(5 * 7);
  ASSERT_TRUE(DecodeFused(Codec::kPng, png, 1, 5, 7, true, nullptr, gray.data(), &fused).ok());
  EXPECT_FALSE(fused);
  ASSERT_TRUE(DecodePayloadInto(Codec::kPng, AsBytes(png), 1, 5, 7, want_gray.data()).ok());
  EXPECT_EQ(gray, want_gray);
  std::vector<uint8_t> want(5 * 7 * 3);
  ASSERT_TRUE(DecodePayloadInto(Codec::kPng, AsBytes(png), 3, 5, 7, want.data()).ok());
  {
    FastPathScope off(false);
    fused = true;
    ASSERT_TRUE(DecodeFused(Codec::kEncoded, png, 3, 5, 7, true, nullptr, dst.data(), &fused).ok());
    EXPECT_FALSE(fused);
    EXPECT_TRUE(std::equal(want.begin(), want.end(), dst.begin()));
  }
  DecodeRequest q;
  q.codec = Codec::kPng;
  q.payload = AsBytes(png);
  q.height = 5;
  q.width = 7;
  q.dst = dst.data();
  q.mirror = true;  // ignored without fuse
  cv::Mat scratch;
  DecodedImage d;
  ASSERT_TRUE(DecodePayload(q, &scratch, &d).ok());
  EXPECT_EQ(d.path, DecodePath::kFull);
  EXPECT_FALSE(d.mirrored);
  EXPECT_TRUE(std::equal(want.begin(), want.end(), dst.begin()));
  // Taken: kEncoded with PNG bytes, mirrored.
  ASSERT_TRUE(DecodeFused(Codec::kEncoded, png, 3, 5, 7, true, nullptr, dst.data(), &fused).ok());
  EXPECT_TRUE(fused);
  cv::Mat mirrored;
  cv::flip(cv::Mat(5, 7, CV_8UC3, want.data()), mirrored, 1);
  EXPECT_TRUE(std::equal(dst.begin(), dst.begin() + 5 * 7 * 3, mirrored.data));
}

TEST(PngFused, CorruptFileIsCorruptionWithTheReason) {
  // A bad filter type in the last row: the CRCs and the adler32 are right, so the rows before
  // it have been written and handed over when the error comes.
  const int w = 9, h = 4;
  std::string raw;
  for (int y = 0; y < h; ++y) {
    raw += static_cast<char>(y == h - 1 ? 7 : 1);
    raw += std::string(static_cast<size_t>(w) * 3, static_cast<char>(y * 10 + 1));
  }
  const std::string png = Png(Ihdr(w, h, 8, 2), Zlib(raw));
  std::vector<uint8_t> dst(static_cast<size_t>(w) * h * 3);
  std::vector<float> out(dst.size());
  NormalizingSink sink(NormalizeParams::ImageNet(), false, h, w, dst.data(), out.data());
  bool fused = false;
  const Status s = DecodeFused(Codec::kPng, png, 3, h, w, true, &sink, dst.data(), &fused);
  EXPECT_TRUE(fused);
  EXPECT_EQ(s.code(), Status::Code::kCorruption) << s.ToString();
  EXPECT_NE(s.message().find("filter type 7"), std::string::npos) << s.ToString();
  EXPECT_EQ(sink.rows(), static_cast<uint32_t>(h - 1));
}

// ---- bit-exact with libspng --------------------------------------------------------------------

// Compares every decode the library offers for one PNG, fast path vs libspng. Returns whether
// the file took the fast path.
bool ExpectSameAsLibspng(const std::string& png, const std::string& what) {
  const PngRoute route = ChoosePngDecoder(AsBytes(png));
  for (int channels : {3, 1}) {
    const cv::Mat fast = Decode(png, channels, true);
    const cv::Mat slow = Decode(png, channels, false);
    EXPECT_TRUE(SameMat(fast, slow)) << what << " channels " << channels;
  }
  if (route.decoder == PngDecoder::kFast && route.header.color_type == 0) {
    cv::Mat fast, slow;
    {
      FastPathScope on(true);
      EXPECT_TRUE(DecodeMask(AsBytes(png), &fast).ok()) << what;
    }
    {
      FastPathScope off(false);
      EXPECT_TRUE(DecodeMask(AsBytes(png), &slow).ok()) << what;
    }
    EXPECT_TRUE(SameMat(fast, slow)) << what << " (mask)";
    // Straight into a batch slot, as the loader does.
    std::vector<uint8_t> slot(fast.total(), 0xAB);
    EXPECT_TRUE(DecodePayloadInto(Codec::kPng, AsBytes(png), 1, fast.rows, fast.cols, slot.data(),
                                  /*is_mask=*/true)
                    .ok());
    EXPECT_TRUE(std::equal(slot.begin(), slot.end(), fast.datastart)) << what << " (slot)";
  }
  ExpectFusedSameAsUnfused(png, what);
  return route.decoder == PngDecoder::kFast;
}

std::string SpngEncode(const cv::Mat& img, int color_type, int filter_choice, int level,
                       int bit_depth = 8) {
  spng_ctx* ctx = spng_ctx_new(SPNG_CTX_ENCODER);
  spng_set_option(ctx, SPNG_ENCODE_TO_BUFFER, 1);
  spng_set_option(ctx, SPNG_FILTER_CHOICE, filter_choice);
  spng_set_option(ctx, SPNG_IMG_COMPRESSION_LEVEL, level);
  spng_ihdr ihdr{};
  ihdr.width = static_cast<uint32_t>(img.cols);
  ihdr.height = static_cast<uint32_t>(img.rows);
  ihdr.bit_depth = static_cast<uint8_t>(bit_depth);
  ihdr.color_type = static_cast<uint8_t>(color_type);
  spng_set_ihdr(ctx, &ihdr);
  int rc = spng_encode_image(ctx, img.data, img.total() * img.elemSize(), SPNG_FMT_PNG,
                             SPNG_ENCODE_FINALIZE);
  EXPECT_EQ(rc, 0) << spng_strerror(rc);
  size_t size = 0;
  void* buf = spng_get_png_buffer(ctx, &size, &rc);
  std::string out(static_cast<const char*>(buf), size);
  std::free(buf);
  spng_ctx_free(ctx);
  return out;
}

TEST(PngFastExact, LibspngEncodesWithEveryFilterForced) {
  const int choices[] = {SPNG_DISABLE_FILTERING, SPNG_FILTER_CHOICE_NONE, SPNG_FILTER_CHOICE_SUB,
                         SPNG_FILTER_CHOICE_UP,   SPNG_FILTER_CHOICE_AVG,  SPNG_FILTER_CHOICE_PAETH,
                         SPNG_FILTER_CHOICE_ALL};
  const std::pair<int, int> types[] = {{0, 1}, {4, 2}, {2, 3}, {6, 4}};  // color type, channels
  int fast = 0, total = 0;
  for (int w : {1, 2, 3, 5, 8, 15, 16, 17, 31, 33, 130}) {
    for (int h : {1, 4}) {
      for (auto [color, channels] : types) {
        cv::Mat noisy(h, w, CV_8UC(channels)), smooth(h, w, CV_8UC(channels));
        cv::randu(noisy, 0, 256);
        for (int i = 0; i < static_cast<int>(smooth.total() * channels); ++i) {
          smooth.data[i] = static_cast<uint8_t>(i / 7);
        }
        for (const cv::Mat* img : {&noisy, &smooth}) {
          for (int choice : choices) {
            const std::string png = SpngEncode(*img, color, choice, choice % 10);
            fast += ExpectSameAsLibspng(png, "libspng " + std::to_string(w) + "x" +
                                                 std::to_string(h) + " type " +
                                                 std::to_string(color) + " filter choice " +
                                                 std::to_string(choice));
            ++total;
          }
        }
      }
    }
  }
  EXPECT_EQ(fast, total);  // every one of these is a fast-path file
}

// A region decode (PngFastOptions::crop_*) writes exactly the whole decode's crop, for every
// color type, filter choice and crop (edges, one pixel, the whole image), into a crop-sized
// buffer; an out-of-range crop is refused; a bad filter byte below the crop is still reported.
TEST(PngFastRegion, TheCropOfTheWholeDecodeForEveryColorTypeAndFilter) {
  const int choices[] = {SPNG_DISABLE_FILTERING, SPNG_FILTER_CHOICE_SUB,   SPNG_FILTER_CHOICE_UP,
                         SPNG_FILTER_CHOICE_AVG, SPNG_FILTER_CHOICE_PAETH, SPNG_FILTER_CHOICE_ALL};
  const std::pair<int, int> types[] = {{0, 1}, {4, 2}, {2, 3}, {6, 4}};  // color type, channels
  const int w = 37, h = 23;
  for (auto [color, channels] : types) {
    cv::Mat img(h, w, CV_8UC(channels));
    cv::randu(img, 0, 256);
    for (int choice : choices) {
      const std::string png = SpngEncode(img, color, choice, 6);
      const auto bytes =
          std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(png.data()), png.size());
      const PngRoute route = ChoosePngDecoder(bytes);
      ASSERT_EQ(route.decoder, PngDecoder::kFast);
      for (int out_channels : {1, 3}) {
        if (out_channels == 1 && color != 0) continue;
        cv::Mat whole(h, w, CV_8UC(out_channels));
        ASSERT_TRUE(DecodePngFast(bytes, route.header, out_channels, whole.data).ok());
        for (const cv::Rect r : {cv::Rect(0, 0, w, h), cv::Rect(5, 3, 20, 11), cv::Rect(0, 0, 1, 1),
                                 cv::Rect(w - 1, h - 1, 1, 1), cv::Rect(36, 0, 1, h),
                                 cv::Rect(0, 22, w, 1), cv::Rect(10, 7, 27, 16)}) {
          PngFastOptions o;
          o.crop_x = static_cast<uint32_t>(r.x), o.crop_y = static_cast<uint32_t>(r.y);
          o.crop_w = static_cast<uint32_t>(r.width), o.crop_h = static_cast<uint32_t>(r.height);
          cv::Mat got(r.height, r.width, CV_8UC(out_channels));
          ASSERT_TRUE(DecodePngFast(bytes, route.header, out_channels, got.data, o).ok());
          ASSERT_EQ(cv::norm(whole(r), got, cv::NORM_INF), 0)
              << "color " << color << " choice " << choice << " crop " << r;
        }
      }
      for (const cv::Rect r : {cv::Rect(0, 0, w + 1, h), cv::Rect(w, 0, 1, 1),
                               cv::Rect(0, h - 2, 1, 3), cv::Rect(1, 1, 0, 1)}) {
        PngFastOptions o;
        o.crop_x = static_cast<uint32_t>(r.x), o.crop_y = static_cast<uint32_t>(r.y);
        o.crop_w = static_cast<uint32_t>(r.width), o.crop_h = static_cast<uint32_t>(r.height);
        std::vector<uint8_t> out(size_t(w) * h * 3);
        const Status st = DecodePngFast(bytes, route.header, 3, out.data(), o);
        if (r.width == 0) continue;  // crop_w 0: the whole image
        EXPECT_EQ(st.code(), Status::Code::kInvalidArgument) << r;
      }
    }
  }
  // Filter type 5 in the last row, under a crop of the first two: still the whole decode's error.
  std::string raw;
  for (int y = 0; y < 5; ++y)
    raw += std::string(1, '\0') + std::string(8 * 3, static_cast<char>(y));
  raw[4 * (8 * 3 + 1)] = 5;
  const std::string bad = Png(Ihdr(8, 5, 8, 2), Zlib(raw));
  const auto bytes =
      std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(bad.data()), bad.size());
  const PngRoute route = ChoosePngDecoder(bytes);
  ASSERT_EQ(route.decoder, PngDecoder::kFast);
  std::vector<uint8_t> part(2 * 8 * 3);
  PngFastOptions o;
  o.crop_w = 8, o.crop_h = 2;
  const Status st = DecodePngFast(bytes, route.header, 3, part.data(), o);
  EXPECT_EQ(st.code(), Status::Code::kBadInput);
  EXPECT_NE(st.message().find("row 4 has filter type 5"), std::string::npos) << st.ToString();
}

// dsconvert build's alpha check (8-bit gray+alpha and RGBA: a transparent pixel is refused) is
// read from the build's own decode on the fast path: the same answer as FindTransparency (the
// first pixel below 255, in row-major order, wherever the SIMD scan's 16-byte blocks end) and
// the same pixels as DecodeImage, for both decoders and both output channel counts.
TEST(PngFastAlpha, OneDecodeGivesFindTransparencysAnswerAndDecodeImagesPixels) {
  int fast_files = 0;
  for (int w : {1, 2, 3, 5, 8, 9, 15, 16, 17, 31, 33, 130}) {
    for (auto [color, channels] : {std::pair{4, 2}, std::pair{6, 4}}) {
      // -1: opaque; else the pixel index of the first translucent pixel (a later one too).
      for (int first : {-1, 0, w - 1, w, 2 * w + w / 2, 3 * w - 1}) {
        cv::Mat img(3, w, CV_8UC(channels));
        cv::randu(img, 0, 256);
        for (int i = 0; i < 3 * w; ++i) img.data[i * channels + channels - 1] = 255;
        if (first >= 0) {
          img.data[first * channels + channels - 1] = 254;
          if (first + 1 < 3 * w) img.data[(3 * w - 1) * channels + channels - 1] = 0;
        }
        const std::string png = SpngEncode(img, color, SPNG_FILTER_CHOICE_ALL, 6);
        const std::string what = "w " + std::to_string(w) + " color type " + std::to_string(color) +
                                 " first " + std::to_string(first);
        fast_files += ChoosePngDecoder(AsBytes(png)).decoder == PngDecoder::kFast;
        for (bool fast : {true, false}) {
          FastPathScope scope(fast);
          bool want_opaque = false;
          int want_row = -1, want_col = -1;
          ASSERT_TRUE(FindTransparency(AsBytes(png), &want_opaque, &want_row, &want_col).ok());
          EXPECT_EQ(want_opaque, first < 0) << what;
          if (first >= 0) {
            EXPECT_EQ(want_row * w + want_col, first) << what;
          }
          for (int out_channels : {1, 3}) {
            cv::Mat want, got;
            ASSERT_TRUE(DecodeImage(AsBytes(png), out_channels, &want).ok());
            bool opaque = !want_opaque;
            int row = -1, col = -1;
            const Status s = DecodeImageFindingTransparency(AsBytes(png), out_channels, &got,
                                                            &opaque, &row, &col);
            ASSERT_TRUE(s.ok()) << what << ": " << s.ToString();
            EXPECT_TRUE(SameMat(got, want)) << what << " fast " << fast;
            EXPECT_EQ(opaque, want_opaque) << what << " fast " << fast;
            if (!want_opaque) {
              EXPECT_EQ(row, want_row) << what << " fast " << fast;
              EXPECT_EQ(col, want_col) << what << " fast " << fast;
            }
          }
        }
      }
    }
  }
  EXPECT_EQ(fast_files, 12 * 2 * 6);  // every one of these is a fast-path file
}

// 16-bit gray, RGB and RGBA PNGs (CT / MR slices, instance maps, 16-bit color) take the fast
// path through DecodeTyped: the same samples as libpng's decode (OpenCV imdecode; RGB(A) order)
// for every filter, width and content, mirrored rows as cv::flip; 16-bit gray+alpha and 8-bit
// files are not routed to it.
TEST(PngFastExact, SixteenBitGrayAndColorWithEveryFilterForcedEqualsLibpng) {
  const int choices[] = {SPNG_DISABLE_FILTERING, SPNG_FILTER_CHOICE_NONE, SPNG_FILTER_CHOICE_SUB,
                         SPNG_FILTER_CHOICE_UP,  SPNG_FILTER_CHOICE_AVG,  SPNG_FILTER_CHOICE_PAETH,
                         SPNG_FILTER_CHOICE_ALL};
  const std::pair<int, int> types[] = {{0, 1}, {2, 3}, {6, 4}};  // color type, channels
  int files = 0;
  for (const auto& [color, channels] : types) {
    for (int w : {1, 2, 3, 5, 8, 15, 16, 17, 31, 33, 130}) {
      for (int h : {1, 4}) {
        const int type = CV_16UC(channels);
        cv::Mat noisy(h, w, type), smooth(h, w, type);
        cv::randu(noisy, 0, 65536);
        auto* sm = reinterpret_cast<uint16_t*>(smooth.data);
        for (size_t i = 0; i < smooth.total() * static_cast<size_t>(channels); ++i) {
          sm[i] = static_cast<uint16_t>(i * 97 % 4096);
        }
        for (const cv::Mat* img : {&noisy, &smooth}) {
          for (int choice : choices) {
            const std::string png = SpngEncode(*img, color, choice, choice % 10, 16);
            const std::string what = std::to_string(channels) + " channels " + std::to_string(w) +
                                     "x" + std::to_string(h) + " choice " + std::to_string(choice);
            const PngRoute route = ChoosePng16Decoder(AsBytes(png));
            ASSERT_EQ(route.decoder, PngDecoder::kFast) << what << ": " << route.reason;
            cv::Mat want = cv::imdecode(
                cv::Mat(1, static_cast<int>(png.size()), CV_8UC1, const_cast<char*>(png.data())),
                cv::IMREAD_UNCHANGED);
            ASSERT_EQ(want.type(), type) << what;
            if (channels == 3) cv::cvtColor(want, want, cv::COLOR_BGR2RGB);
            if (channels == 4) cv::cvtColor(want, want, cv::COLOR_BGRA2RGBA);
            EXPECT_EQ(cv::norm(want, *img, cv::NORM_INF), 0) << what << " (libpng)";
            cv::Mat got;
            ASSERT_TRUE(DecodeTyped(AsBytes(png), SampleType::kUint16, false, &got).ok()) << what;
            ASSERT_EQ(got.type(), type) << what;
            EXPECT_EQ(cv::norm(got, want, cv::NORM_INF), 0) << what;
            if (channels == 1) {
              cv::Mat ids;
              ASSERT_TRUE(DecodeTyped(AsBytes(png), SampleType::kUint16, true, &ids).ok()) << what;
              EXPECT_EQ(cv::norm(ids, want, cv::NORM_INF), 0) << what << " (mask)";
            }
            cv::Mat mirrored(h, w, type), flipped;
            PngFastOptions o;
            o.mirror = true;
            ASSERT_TRUE(DecodePngFast(AsBytes(png), route.header, channels, mirrored.data, o).ok());
            cv::flip(want, flipped, 1);
            EXPECT_EQ(cv::norm(mirrored, flipped, cv::NORM_INF), 0) << what << " (mirrored)";
            // Another channel count is refused, not written past dst.
            EXPECT_FALSE(
                DecodePngFast(AsBytes(png), route.header, channels == 1 ? 3 : 1, mirrored.data, o)
                    .ok())
                << what;
            ++files;
          }
        }
      }
    }
  }
  EXPECT_EQ(files, 3 * 11 * 2 * 2 * 7);
  cv::Mat rgb16(4, 5, CV_16UC3, cv::Scalar(1000, 2000, 3000));
  cv::Mat gray_alpha16(4, 5, CV_16UC2, cv::Scalar(1000, 2000));
  const PngRoute gray_alpha =
      ChoosePng16Decoder(AsBytes(SpngEncode(gray_alpha16, 4, SPNG_FILTER_CHOICE_ALL, 6, 16)));
  EXPECT_EQ(gray_alpha.decoder, PngDecoder::kLibspng);
  EXPECT_STREQ(gray_alpha.reason, "16-bit gray+alpha");
  cv::Mat gray8(4, 5, CV_8UC1, cv::Scalar(7));
  EXPECT_EQ(ChoosePng16Decoder(AsBytes(SpngEncode(gray8, 0, SPNG_FILTER_CHOICE_ALL, 6))).decoder,
            PngDecoder::kLibspng);
  // The 8-bit router still leaves 16-bit files to libspng.
  EXPECT_EQ(ChoosePngDecoder(AsBytes(SpngEncode(rgb16, 2, SPNG_FILTER_CHOICE_ALL, 6, 16))).decoder,
            PngDecoder::kLibspng);
  // Damage is an error with the reason, as for 8-bit files.
  cv::Mat slice(8, 9, CV_16UC1);
  cv::randu(slice, 0, 4096);
  std::string png = SpngEncode(slice, 0, SPNG_FILTER_CHOICE_ALL, 6, 16);
  png[png.size() - 20] = static_cast<char>(png[png.size() - 20] ^ 0x40);  // inside the IDAT
  cv::Mat out;
  const Status s = DecodeTyped(AsBytes(png), SampleType::kUint16, false, &out);
  EXPECT_EQ(s.code(), Status::Code::kBadInput) << s.ToString();
}

TEST(PngFastExact, CorpusOfOpenCvPillowAndImageMagick) {
  const fs::path dir = fs::path(DSPIPE_BINARY_DIR) / "tests" / "codec" /
                       ("png_corpus_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  const std::string cmd = "/usr/bin/python3 " DSPIPE_SOURCE_DIR
                          "/tests/codec/make_png_corpus.py " +
                          dir.string() + " > " + dir.string() + ".log 2>&1";
  ASSERT_EQ(std::system(cmd.c_str()), 0)
      << cmd << " (needs Debian's python3-opencv, python3-pil and imagemagick; see the log)";
  std::map<std::string, int> fast, total;  // by encoder
  for (const auto& e : fs::directory_iterator(dir)) {
    std::ifstream in(e.path(), std::ios::binary);
    std::stringstream ss;
    ss << in.rdbuf();
    const std::string name = e.path().filename().string();
    const std::string encoder = name.substr(0, name.find('-'));
    fast[encoder] += ExpectSameAsLibspng(ss.str(), name);
    ++total[encoder];
  }
  fs::remove_all(dir);
  fs::remove(dir.string() + ".log");
  // Every encoder is present in numbers, and all of its files took the fast path (they are all
  // 8-bit gray, gray+alpha, RGB or RGBA, not interlaced).
  for (const char* encoder : {"cv2", "pil", "magick"}) {
    EXPECT_GE(total[encoder], 500) << encoder;
    EXPECT_EQ(fast[encoder], total[encoder]) << encoder;
  }
}

}  // namespace
}  // namespace dspipe::codec
