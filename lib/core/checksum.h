// SPDX-License-Identifier: Apache-2.0
// CRC-32 (zlib polynomial, as Python's zlib.crc32; computed by libdeflate) — the record checksum
// of docs/FORMAT.md — and sha256 (OpenSSL): of a string in hex, fed in pieces (Sha256), and the
// test for a sha256 as stored or given (IsHex64). The one home of each: fetch, the cache, the
// manifest and the loader's resume identity use these.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>

struct evp_md_ctx_st;  // OpenSSL's EVP_MD_CTX (openssl/types.h)

namespace dspipe::core {

// Continues a CRC: Crc32(b, Crc32(a)) == Crc32(a + b). Start with crc = 0.
uint32_t Crc32(std::span<const uint8_t> data, uint32_t crc = 0);

// The sha256 of data, 64 lowercase hex digits.
std::string Sha256Hex(std::string_view data);

// True when s is 64 hex digits (either case): the form of a sha256 in a manifest or an option.
bool IsHex64(std::string_view s);

// sha256 fed in pieces.
class Sha256 {
 public:
  Sha256();
  ~Sha256();
  Sha256(const Sha256&) = delete;
  Sha256& operator=(const Sha256&) = delete;

  // Starts over: the hash of no bytes.
  void Reset();
  void Update(const char* p, size_t n);
  // Bytes fed since the last Reset.
  uint64_t bytes() const { return bytes_; }
  // The sha256 of the bytes fed since the last Reset, 64 lowercase hex digits. Ends the hash:
  // Reset before feeding it again.
  std::string HexDigest();

 private:
  evp_md_ctx_st* ctx_;
  uint64_t bytes_ = 0;
};

}  // namespace dspipe::core
