// CRC-32 (zlib polynomial, as Python's zlib.crc32) — the record checksum of docs/FORMAT.md.
#pragma once

#include <cstdint>
#include <span>

namespace dspipe {

// Continues a CRC: Crc32(b, Crc32(a)) == Crc32(a + b). Start with crc = 0.
uint32_t Crc32(std::span<const uint8_t> data, uint32_t crc = 0);

}  // namespace dspipe
