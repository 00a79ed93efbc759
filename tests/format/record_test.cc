// SPDX-License-Identifier: Apache-2.0
// dspipe/format.h: the 32-byte record header as FORMAT.md lays it out, CRC-32, keys.
#include <gtest/gtest.h>
#include <zlib.h>

#include <algorithm>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "core/checksum.h"
#include "dspipe/format.h"

namespace dspipe {
namespace {

std::span<const uint8_t> B(const std::string& s) {
  return {reinterpret_cast<const uint8_t*>(s.data()), s.size()};
}
uint32_t Le32(const std::string& s, size_t off) {
  uint32_t v = 0;
  for (int i = 3; i >= 0; --i) v = (v << 8) | static_cast<uint8_t>(s[off + i]);
  return v;
}

RecordHeader Header() {
  RecordHeader h;
  h.image_codec = Codec::kPng;
  h.mask_codec = Codec::kRawZstd;
  h.channels = 3;
  h.height = 0x01020304;
  h.width = 513;
  h.label = -1;
  return h;
}

TEST(Record, LayoutMatchesTheDocumentedBytes) {
  const std::string image = "IMAGE-BYTES-0123456789", mask = "mask!";
  std::string v = "prefix";  // EncodeRecord appends
  EncodeRecord(Header(), B(image), B(mask), &v);
  v.erase(0, 6);
  ASSERT_EQ(v.size(), kRecordHeaderSize + image.size() + mask.size());
  EXPECT_EQ(v.substr(0, 4), "DSR1");
  EXPECT_EQ(v[4], 1);
  EXPECT_EQ(v[5], static_cast<char>(Codec::kPng));
  EXPECT_EQ(v[6], static_cast<char>(Codec::kRawZstd));
  EXPECT_EQ(v[7], 3);
  EXPECT_EQ(Le32(v, 8), 0x01020304u);
  EXPECT_EQ(Le32(v, 12), 513u);
  EXPECT_EQ(Le32(v, 16), 0xFFFFFFFFu);  // label -1
  EXPECT_EQ(Le32(v, 20), image.size());
  EXPECT_EQ(Le32(v, 24), mask.size());
  // CRC-32 (zlib) over bytes 0..27, then the payloads: computed here with zlib itself.
  uLong crc = crc32(0, reinterpret_cast<const Bytef*>(v.data()), 28);
  crc = crc32(crc, reinterpret_cast<const Bytef*>(v.data()) + 32, v.size() - 32);
  EXPECT_EQ(Le32(v, 28), static_cast<uint32_t>(crc));
  EXPECT_EQ(v.substr(32, image.size()), image);
  EXPECT_EQ(v.substr(32 + image.size()), mask);
}

TEST(Record, RoundTripsHeaderAndZeroCopyViews) {
  const std::string image(5000, 'x'), mask(77, '\x02');
  RecordHeader h = Header();
  h.label = 41;
  std::string v;
  EncodeRecord(h, B(image), B(mask), &v);
  RecordView r;
  ASSERT_TRUE(DecodeRecord(B(v), /*verify_crc=*/true, &r).ok());
  EXPECT_EQ(r.header.image_codec, Codec::kPng);
  EXPECT_EQ(r.header.mask_codec, Codec::kRawZstd);
  EXPECT_EQ(r.header.channels, 3);
  EXPECT_EQ(r.header.height, h.height);
  EXPECT_EQ(r.header.width, h.width);
  EXPECT_EQ(r.header.label, 41);
  EXPECT_EQ(r.header.image_size, image.size());
  EXPECT_EQ(r.header.mask_size, mask.size());
  EXPECT_EQ(r.image.data(), reinterpret_cast<const uint8_t*>(v.data()) + 32);  // no copy
  EXPECT_TRUE(std::equal(r.image.begin(), r.image.end(), image.begin()));
  EXPECT_TRUE(std::equal(r.mask.begin(), r.mask.end(), mask.begin()));
}

TEST(Record, NoMaskMeansCodecNone) {
  RecordHeader h = Header();  // says kRawZstd, but there is no mask
  std::string v;
  EncodeRecord(h, B("img"), {}, &v);
  EXPECT_EQ(v[6], 0);
  RecordView r;
  ASSERT_TRUE(DecodeRecord(B(v), true, &r).ok());
  EXPECT_EQ(r.header.mask_codec, Codec::kNone);
  EXPECT_TRUE(r.mask.empty());
}

// Version 2 (typed samples): the sample types in the codec bytes' high nibbles; version 1 stays
// what uint8 records of 1 or 3 channels are written as, so readers before version 2 open them.
TEST(Record, TypedSamplesAreVersion2WithTheTypesInTheCodecBytes) {
  RecordHeader h = Header();
  h.image_type = SampleType::kUint16;
  h.mask_type = SampleType::kUint16;
  h.channels = 4;
  std::string v;
  EncodeRecord(h, B("sixteen"), B("ids"), &v);
  EXPECT_EQ(v[4], 2);
  EXPECT_EQ(static_cast<uint8_t>(v[5]), (1 << 4) | static_cast<int>(Codec::kPng));
  EXPECT_EQ(static_cast<uint8_t>(v[6]), (1 << 4) | static_cast<int>(Codec::kRawZstd));
  EXPECT_EQ(v[7], 4);
  RecordView r;
  ASSERT_TRUE(DecodeRecord(B(v), true, &r).ok());
  EXPECT_EQ(r.header.image_codec, Codec::kPng);
  EXPECT_EQ(r.header.mask_codec, Codec::kRawZstd);
  EXPECT_EQ(r.header.image_type, SampleType::kUint16);
  EXPECT_EQ(r.header.mask_type, SampleType::kUint16);
  EXPECT_EQ(r.header.channels, 4);
  for (SampleType t : {SampleType::kInt16, SampleType::kFloat32}) {
    h.image_type = t;
    h.mask_type = SampleType::kUint8;
    h.channels = 1;
    v.clear();
    EncodeRecord(h, B("typed"), B("m"), &v);
    EXPECT_EQ(v[4], 2);
    ASSERT_TRUE(DecodeRecord(B(v), true, &r).ok());
    EXPECT_EQ(r.header.image_type, t);
    EXPECT_EQ(r.header.mask_type, SampleType::kUint8);
  }
  // Bad nibbles: an unknown type, a float mask, 17 channels.
  auto corrupt = [&](size_t at, uint8_t byte) {
    std::string w = v;
    w[at] = static_cast<char>(byte);
    RecordView rv;
    return DecodeRecord(B(w), false, &rv);
  };
  EXPECT_EQ(corrupt(5, (7 << 4) | 3).code(), Status::Code::kCorruption);
  EXPECT_EQ(corrupt(6, (3 << 4) | 3).code(), Status::Code::kCorruption);
  EXPECT_EQ(corrupt(7, kMaxChannels + 1).code(), Status::Code::kCorruption);
  EXPECT_EQ(corrupt(7, 0).code(), Status::Code::kCorruption);
  // uint8 of 1 or 3 channels: version 1, bytes as before.
  h = Header();
  v.clear();
  EncodeRecord(h, B("rgb"), B("m"), &v);
  EXPECT_EQ(v[4], 1);
  EXPECT_EQ(v[5], static_cast<char>(Codec::kPng));
}

TEST(Record, DecodeRejectsMalformedValues) {
  std::string good;
  EncodeRecord(Header(), B("some image"), B("m"), &good);
  struct Case {
    const char* name;
    std::string value;
    const char* reason;
  };
  auto with = [&](size_t off, char byte) {
    std::string v = good;
    v[off] = byte;
    return v;
  };
  const std::vector<Case> cases = {
      {"short", good.substr(0, 31), "shorter than the 32-byte header"},
      {"magic", with(0, 'X'), "magic"},
      {"version", with(4, 3), "version 3"},
      {"version 1 with 4 channels", with(7, 4), "channel count 4"},
      {"image codec none", with(5, 0), "codec"},
      {"image codec unknown", with(5, 6), "codec"},
      {"mask codec unknown", with(6, 9), "codec"},
      {"channels", with(7, 2), "channel"},
      {"one byte more", good + "z", "header says"},
      {"one byte less", good.substr(0, good.size() - 1), "header says"},
      {"mask codec without mask size", with(24, 0), "header says"},
  };
  for (const Case& c : cases) {
    RecordView r;
    Status s = DecodeRecord(B(c.value), false, &r);
    EXPECT_EQ(s.code(), Status::Code::kCorruption) << c.name << ": " << s.ToString();
    EXPECT_NE(s.message().find(c.reason), std::string::npos) << c.name << ": " << s.ToString();
  }
  // Mask codec set with a zero mask size (sizes consistent): codec and size disagree.
  std::string v;
  RecordHeader h = Header();
  EncodeRecord(h, B("img"), {}, &v);
  v[6] = static_cast<char>(Codec::kPng);
  RecordView r;
  Status s = DecodeRecord(B(v), false, &r);
  EXPECT_EQ(s.code(), Status::Code::kCorruption);
  EXPECT_NE(s.message().find("disagree"), std::string::npos) << s.ToString();
}

TEST(Record, EveryFlippedByteFailsTheChecksum) {
  std::string good;
  EncodeRecord(Header(), B("image payload bytes"), B("mask bytes"), &good);
  for (size_t i = 0; i < good.size(); ++i) {
    if (i < 8 || (i >= 20 && i < 28)) continue;  // magic/version/codecs/sizes fail structurally
    std::string v = good;
    v[i] = static_cast<char>(v[i] ^ 0x10);
    RecordView r;
    Status s = DecodeRecord(B(v), /*verify_crc=*/true, &r);
    EXPECT_EQ(s.code(), Status::Code::kCorruption) << "byte " << i;
    EXPECT_NE(s.message().find("checksum mismatch"), std::string::npos) << s.ToString();
    // Without verify_crc the (structurally valid) value is accepted: the loader's fast path.
    EXPECT_TRUE(DecodeRecord(B(v), /*verify_crc=*/false, &r).ok()) << "byte " << i;
  }
}

TEST(Crc32, MatchesZlibAndContinues) {
  const std::string a = "hello, ", b = "dspipe world";
  const uint32_t zlib_crc = static_cast<uint32_t>(
      crc32(0, reinterpret_cast<const Bytef*>((a + b).data()), (a + b).size()));
  EXPECT_EQ(core::Crc32(B(a + b)), zlib_crc);
  EXPECT_EQ(core::Crc32(B(b), core::Crc32(B(a))), zlib_crc);
  EXPECT_EQ(core::Crc32(B("123456789")), 0xCBF43926u);  // the standard check value
  EXPECT_EQ(core::Crc32({}), 0u);
  // An empty piece (a null data()) continues the running CRC unchanged: libdeflate's crc32
  // returns 0 for a null buffer, whatever the running value.
  EXPECT_EQ(core::Crc32({}, zlib_crc), zlib_crc);
  EXPECT_EQ(core::Crc32(std::span<const uint8_t>(), core::Crc32(B(a + b))), zlib_crc);
}

// Crc32 is computed by libdeflate, not zlib: on a buffer large enough for its folded (SIMD) path,
// the whole-buffer CRC and every odd-sized chained continuation equal zlib's crc32.
TEST(Crc32, LargeBufferAndOddChunksMatchZlib) {
  std::vector<uint8_t> buf((8u << 20) + 13);
  std::mt19937 rng(23);
  for (uint8_t& b : buf) b = static_cast<uint8_t>(rng() & 0xFF);
  const uint32_t want = static_cast<uint32_t>(crc32(0, buf.data(), static_cast<uInt>(buf.size())));
  EXPECT_EQ(core::Crc32(buf), want);
  const std::span<const uint8_t> all(buf);
  for (const size_t chunk : {size_t{1}, size_t{7}, size_t{63}, size_t{4097}, size_t{1} << 20}) {
    // Pieces of `chunk` bytes over a prefix (64 KiB for the tiny ones, else the whole buffer),
    // then the rest in one piece.
    const size_t prefix = chunk < 64 ? size_t{64} << 10 : all.size();
    uint32_t c = 0;
    size_t off = 0;
    for (; off + chunk <= prefix; off += chunk) c = core::Crc32(all.subspan(off, chunk), c);
    c = core::Crc32(all.subspan(off), c);
    EXPECT_EQ(c, want) << "chunk " << chunk;
  }
}

TEST(Keys, BigEndianSoByteOrderIsIndexOrder) {
  const std::vector<uint64_t> idx = {
      0, 1, 2, 255, 256, 257, 65535, 65536, 1ull << 32, (1ull << 40) + 3, ~0ull};
  std::vector<std::string> keys;
  for (uint64_t i : idx) {
    uint8_t k[kKeySize];
    EncodeKey(i, k);
    EXPECT_EQ(DecodeKey(k), i);
    keys.emplace_back(reinterpret_cast<char*>(k), kKeySize);
  }
  uint8_t k[kKeySize];
  EncodeKey(0x0102030405060708ull, k);
  const uint8_t want[8] = {1, 2, 3, 4, 5, 6, 7, 8};
  EXPECT_EQ(std::memcmp(k, want, 8), 0);
  // memcmp order (LMDB's default) equals numeric order.
  EXPECT_TRUE(std::is_sorted(keys.begin(), keys.end()));
  EXPECT_EQ(KeyName(167), "00000000000000a7");
  EXPECT_EQ(KeyName(~0ull), "ffffffffffffffff");
}

TEST(Codecs, NamesAndStoredValues) {
  EXPECT_STREQ(CodecName(Codec::kPng), "png");
  EXPECT_STREQ(CodecName(Codec::kJpeg), "jpeg");
  EXPECT_STREQ(CodecName(Codec::kRawZstd), "raw+zstd");
  // On-disk values must never change.
  EXPECT_EQ(static_cast<int>(Codec::kNone), 0);
  EXPECT_EQ(static_cast<int>(Codec::kRaw), 1);
  EXPECT_EQ(static_cast<int>(Codec::kRawZstd), 2);
  EXPECT_EQ(static_cast<int>(Codec::kPng), 3);
  EXPECT_EQ(static_cast<int>(Codec::kJpeg), 4);
  EXPECT_EQ(static_cast<int>(Codec::kEncoded), 5);
}

}  // namespace
}  // namespace dspipe
