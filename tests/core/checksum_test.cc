// SPDX-License-Identifier: Apache-2.0
// core/checksum.h: the one sha256 (Sha256 in pieces, Sha256Hex of a string) and the one test for
// a sha256 as written (IsHex64).
#include "core/checksum.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <string>

namespace dspipe {
namespace {

constexpr const char* kAbc = "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad";
constexpr const char* kEmpty = "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855";

TEST(ChecksumTest, Sha256InPiecesEqualsSha256HexOfTheWhole) {
  EXPECT_EQ(core::Sha256Hex("abc"), kAbc);
  EXPECT_EQ(core::Sha256Hex(""), kEmpty);
  core::Sha256 h;
  EXPECT_EQ(h.bytes(), 0u);
  h.Update("a", 1);
  h.Update("bc", 2);
  EXPECT_EQ(h.bytes(), 3u);
  EXPECT_EQ(h.HexDigest(), kAbc);
  h.Reset();  // starts over
  EXPECT_EQ(h.bytes(), 0u);
  EXPECT_EQ(h.HexDigest(), kEmpty);
  const std::string big(3 << 20, 'x');
  h.Reset();
  for (size_t off = 0; off < big.size(); off += 1000) {
    h.Update(big.data() + off, std::min<size_t>(1000, big.size() - off));
  }
  EXPECT_EQ(h.HexDigest(), core::Sha256Hex(big));
}

TEST(ChecksumTest, IsHex64) {
  EXPECT_TRUE(core::IsHex64(kAbc));
  EXPECT_TRUE(core::IsHex64(std::string(64, 'F')));  // either case: compared lowercased
  EXPECT_FALSE(core::IsHex64(""));
  EXPECT_FALSE(core::IsHex64(std::string(63, 'a')));
  EXPECT_FALSE(core::IsHex64(std::string(65, 'a')));
  EXPECT_FALSE(core::IsHex64(std::string(63, 'a') + "g"));
  EXPECT_FALSE(core::IsHex64(std::string(63, 'a') + " "));
  EXPECT_FALSE(core::IsHex64("0x" + std::string(62, 'a')));
}

}  // namespace
}  // namespace dspipe
