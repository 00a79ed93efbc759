#include "core/checksum.h"

#include <zlib.h>

#include <algorithm>
#include <climits>

namespace dspipe {

uint32_t Crc32(std::span<const uint8_t> data, uint32_t crc) {
  uLong c = crc;
  const uint8_t* p = data.data();
  size_t n = data.size();
  while (n > 0) {  // zlib takes uInt lengths
    const uInt chunk = static_cast<uInt>(std::min<size_t>(n, UINT_MAX));
    c = crc32(c, p, chunk);
    p += chunk;
    n -= chunk;
  }
  return static_cast<uint32_t>(c);
}

}  // namespace dspipe
