// CRC-32 (zlib polynomial, as Python's zlib.crc32) — the record checksum of docs/FORMAT.md —
// and the sha256 of a string in hex (OpenSSL) for identities that are stored or compared.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>

namespace dspipe {

// Continues a CRC: Crc32(b, Crc32(a)) == Crc32(a + b). Start with crc = 0.
uint32_t Crc32(std::span<const uint8_t> data, uint32_t crc = 0);

// The sha256 of data, 64 lowercase hex digits.
std::string Sha256Hex(std::string_view data);

}  // namespace dspipe
