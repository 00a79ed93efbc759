// SPDX-License-Identifier: Apache-2.0
#include "codec/png_fast.h"

#include <libdeflate.h>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#endif

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "codec/image.h"

namespace dspipe::codec {
namespace {

constexpr uint8_t kSignature[8] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n'};
constexpr uint32_t kMaxChunk = 0x7fffffffu;  // PNG: chunk lengths are at most 2^31 - 1

uint32_t Be32(const uint8_t* p) {
  return uint32_t{p[0]} << 24 | uint32_t{p[1]} << 16 | uint32_t{p[2]} << 8 | uint32_t{p[3]};
}

bool TypeIs(const uint8_t* type, const char* name) { return std::memcmp(type, name, 4) == 0; }

std::string TypeName(const uint8_t* type) {
  std::string s;
  for (int i = 0; i < 4; ++i) {
    const char ch = static_cast<char>(type[i]);
    s += (ch >= 0x20 && ch < 0x7f) ? ch : '?';
  }
  return s;
}

bool InitialFastPathSetting() {
  const char* v = std::getenv("DSPIPE_PNG_DECODER");
  return !(v != nullptr && std::strcmp(v, "libspng") == 0);
}

std::atomic<bool>& FastPathFlag() {
  static std::atomic<bool> enabled{InitialFastPathSetting()};
  return enabled;
}

PngRoute Libspng(const char* reason) {
  PngRoute r;
  r.reason = reason;
  return r;
}

struct DecompressorDeleter {
  void operator()(libdeflate_decompressor* d) const { libdeflate_free_decompressor(d); }
};

// Per-thread scratch: the decompressor, the concatenated IDAT data, the filtered image and a
// zero row (the "previous row" of the first row).
struct Scratch {
  std::unique_ptr<libdeflate_decompressor, DecompressorDeleter> inflater{
      libdeflate_alloc_decompressor()};
  std::vector<uint8_t> idat;
  std::vector<uint8_t> filtered;
  std::vector<uint8_t> zeros;
  std::vector<uint8_t> rows;  // two unfiltered rows (+16 bytes each) when mirroring
};

Scratch& ThreadScratch() {
  thread_local Scratch s;
  return s;
}

// A 16-bit row of `channels` samples per pixel from PNG's big-endian samples to host uint16
// (pixels mirrored when asked). SSE2 (x86-64's baseline): 8 samples a step, bytes swapped by two
// shifts, lanes reversed by three shuffles for mirrored gray; mirrored color pixel by pixel.
void Row16ToHost(const uint8_t* row, uint32_t width, int channels, bool mirror, uint16_t* out) {
  if (channels != 1) {
    const size_t c = static_cast<size_t>(channels);
    if (mirror) {
      for (uint32_t x = 0; x < width; ++x) {
        const uint8_t* in = row + size_t{x} * c * 2;
        uint16_t* px = out + size_t{width - 1 - x} * c;
        for (size_t k = 0; k < c; ++k) {
          px[k] = static_cast<uint16_t>((in[2 * k] << 8) | in[2 * k + 1]);
        }
      }
      return;
    }
    width *= static_cast<uint32_t>(channels);  // the samples in a row, swapped as gray's are
  }
  uint32_t x = 0;
#if defined(__SSE2__)
  for (; x + 8 <= width; x += 8) {
    __m128i v = _mm_loadu_si128(reinterpret_cast<const __m128i*>(row + 2 * size_t{x}));
    v = _mm_or_si128(_mm_slli_epi16(v, 8), _mm_srli_epi16(v, 8));
    if (mirror) {
      v = _mm_shufflelo_epi16(v, _MM_SHUFFLE(0, 1, 2, 3));
      v = _mm_shufflehi_epi16(v, _MM_SHUFFLE(0, 1, 2, 3));
      v = _mm_shuffle_epi32(v, _MM_SHUFFLE(1, 0, 3, 2));
      _mm_storeu_si128(reinterpret_cast<__m128i*>(out + (width - 8 - x)), v);
    } else {
      _mm_storeu_si128(reinterpret_cast<__m128i*>(out + x), v);
    }
  }
#endif
  for (; x < width; ++x) {
    const uint16_t v = static_cast<uint16_t>((row[2 * x] << 8) | row[2 * x + 1]);
    out[mirror ? width - 1 - x : x] = v;
  }
}

// Converts one unfiltered row of `channels` samples per pixel to RGB (libspng's SPNG_FMT_RGB8:
// gray replicated, alpha dropped), mirrored left-right when `mirror`.
void RowToRgb(const uint8_t* row, int channels, uint32_t width, bool mirror, uint8_t* out) {
  if (channels == 3 && !mirror) {
    std::memcpy(out, row, size_t{width} * 3);
    return;
  }
  ptrdiff_t step = 3;
  if (mirror) {
    out += (ptrdiff_t{width} - 1) * 3;
    step = -3;
  }
  switch (channels) {
    case 1:
      for (uint32_t x = 0; x < width; ++x, out += step) out[0] = out[1] = out[2] = row[x];
      return;
    case 2:
      for (uint32_t x = 0; x < width; ++x, out += step) out[0] = out[1] = out[2] = row[2 * x];
      return;
    default:
      for (uint32_t x = 0; x < width; ++x, out += step, row += channels) {
        out[0] = row[0];
        out[1] = row[1];
        out[2] = row[2];
      }
      return;
  }
}

// The first pixel of an unfiltered gray+alpha (channels 2) or RGBA (4) row whose alpha sample,
// the pixel's last byte, is below 255; width when there is none. SSE2 compares 16 bytes at once.
uint32_t FirstTranslucent(const uint8_t* row, int channels, uint32_t width) {
  uint32_t x = 0;
#if defined(__SSE2__)
  const int per = 16 / channels;                           // pixels per 16 bytes
  const int alpha_bits = channels == 4 ? 0x8888 : 0xAAAA;  // the alpha bytes' lanes
  const __m128i full = _mm_set1_epi8(static_cast<char>(0xFF));
  for (; x + static_cast<uint32_t>(per) <= width; x += static_cast<uint32_t>(per)) {
    const __m128i v = _mm_loadu_si128(reinterpret_cast<const __m128i*>(row + size_t{x} * channels));
    if ((_mm_movemask_epi8(_mm_cmpeq_epi8(v, full)) & alpha_bits) != alpha_bits) break;
  }
#endif
  for (; x < width; ++x) {
    if (row[size_t{x} * channels + channels - 1] != 255) return x;
  }
  return width;
}

void MirrorPlain(const uint8_t* src, int bpp, uint32_t width, uint8_t* dst, uint32_t from) {
  const size_t b = static_cast<size_t>(bpp);
  for (uint32_t x = from; x < width; ++x) {
    const uint8_t* in = src + size_t{width - 1 - x} * b;
    for (size_t k = 0; k < b; ++k) dst[size_t{x} * b + k] = in[k];
  }
}

#if defined(__x86_64__) || defined(__i386__)
// One 16-byte shuffle reverses 16 gray pixels or 5 RGB pixels (15 bytes). Loads may read past
// the source row (MirrorRow's contract); stores never pass dst's end.
__attribute__((target("ssse3"))) void MirrorSsse3(const uint8_t* src, int bpp, uint32_t width,
                                                  uint8_t* dst) {
  uint32_t x = 0;
  if (bpp == 1) {
    const __m128i rev = _mm_setr_epi8(15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0);
    for (; x + 16 <= width; x += 16) {
      const __m128i v =
          _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + (width - 16 - x)));
      _mm_storeu_si128(reinterpret_cast<__m128i*>(dst + x), _mm_shuffle_epi8(v, rev));
    }
  } else {
    const __m128i rev = _mm_setr_epi8(12, 13, 14, 9, 10, 11, 6, 7, 8, 3, 4, 5, 0, 1, 2, -128);
    // The 16th byte stored is the next pixel's first, rewritten by the next step: stop while a
    // full 16 bytes still fit in dst.
    for (; size_t{x + 5} * 3 + 1 <= size_t{width} * 3; x += 5) {
      const __m128i v =
          _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + size_t{width - 5 - x} * 3));
      _mm_storeu_si128(reinterpret_cast<__m128i*>(dst + size_t{x} * 3), _mm_shuffle_epi8(v, rev));
    }
  }
  MirrorPlain(src, bpp, width, dst, x);
}

bool HaveSsse3() {
  static const bool have = __builtin_cpu_supports("ssse3");
  return have;
}
#endif

}  // namespace

void MirrorRow(const uint8_t* src, int bpp, uint32_t width, uint8_t* dst, bool plain) {
#if defined(__x86_64__) || defined(__i386__)
  if (!plain && (bpp == 1 || bpp == 3) && HaveSsse3()) {
    MirrorSsse3(src, bpp, width, dst);
    return;
  }
#endif
  MirrorPlain(src, bpp, width, dst, 0);
}
void SetPngFastPathEnabled(bool enabled) { FastPathFlag().store(enabled); }
bool PngFastPathEnabled() { return FastPathFlag().load(std::memory_order_relaxed); }

namespace {
PngRoute Route(std::span<const uint8_t> bytes, int depth);
}  // namespace

PngRoute ChoosePngDecoder(std::span<const uint8_t> bytes) { return Route(bytes, 8); }
PngRoute ChoosePng16Decoder(std::span<const uint8_t> bytes) { return Route(bytes, 16); }

namespace {
PngRoute Route(std::span<const uint8_t> bytes, int depth) {
  if (!PngFastPathEnabled()) return Libspng("fast path disabled");
  const uint8_t* p = bytes.data();
  const size_t size = bytes.size();
  if (size < 8 + 12 + 13 || std::memcmp(p, kSignature, 8) != 0) {
    return Libspng("no PNG signature and IHDR");
  }
  if (Be32(p + 8) != 13 || !TypeIs(p + 12, "IHDR")) return Libspng("first chunk is not IHDR");
  const uint8_t* ihdr = p + 16;
  PngRoute r;
  r.header.width = Be32(ihdr);
  r.header.height = Be32(ihdr + 4);
  r.header.bit_depth = ihdr[8];
  r.header.color_type = ihdr[9];
  r.header.interlace = ihdr[12];
  if (r.header.width == 0 || r.header.height == 0 || r.header.width > kMaxChunk ||
      r.header.height > kMaxChunk) {
    return Libspng("IHDR dimensions out of range");
  }
  if (ihdr[10] != 0 || ihdr[11] != 0) return Libspng("unknown compression or filter method");
  if (r.header.interlace != 0) return Libspng("interlaced");
  if (r.header.bit_depth != depth) {
    return Libspng(depth == 8 ? "bit depth is not 8" : "bit depth is not 16");
  }
  if (depth == 16 && r.header.color_type == 4) return Libspng("16-bit gray+alpha");
  switch (r.header.color_type) {
    case 0: r.header.channels = 1; break;
    case 2: r.header.channels = 3; break;
    case 4: r.header.channels = 2; break;
    case 6: r.header.channels = 4; break;
    default: return Libspng("palette or unknown color type");
  }
  // Chunk headers up to the first IDAT.
  size_t pos = 8 + 12 + 13;
  while (true) {
    if (size - pos < 12) return Libspng("truncated before IDAT");
    const uint32_t len = Be32(p + pos);
    const uint8_t* type = p + pos + 4;
    // The fast decoder reports a truncated IDAT or a missing one itself.
    if (TypeIs(type, "IDAT") || TypeIs(type, "IEND")) break;
    if (len > kMaxChunk || len > size - pos - 12) return Libspng("truncated before IDAT");
    if (TypeIs(type, "PLTE")) return Libspng("PLTE chunk");
    if (TypeIs(type, "tRNS")) return Libspng("tRNS chunk");
    if ((type[0] & 0x20) == 0) return Libspng("unknown critical chunk before IDAT");
    pos += 12 + size_t{len};
  }
  r.decoder = PngDecoder::kFast;
  return r;
}
}  // namespace

Status DecodePngFast(std::span<const uint8_t> bytes, const PngHeader& header, int out_channels,
                     uint8_t* dst, const PngFastOptions& options) {
  DSPIPE_RETURN_IF_ERROR(CheckImageSize("PNG header", header.width, header.height));
  const bool wide = header.bit_depth == 16;  // ChoosePng16Decoder: into host uint16
  if (wide && (out_channels != header.channels || header.channels == 2)) {
    return Status::InvalidArgument("PNG fast path: a 16-bit PNG of " +
                                   std::to_string(header.channels) + " channels decodes to " +
                                   "as many (gray, RGB or RGBA), not " +
                                   std::to_string(out_channels));
  }
  if (!wide && out_channels != 3 && !(out_channels == 1 && header.channels == 1)) {
    return Status::InvalidArgument("PNG fast path: " + std::to_string(out_channels) +
                                   " output channels from " + std::to_string(header.channels));
  }
  const bool cropped = options.crop_w > 0;
  if (cropped && (wide || options.mirror || options.sink != nullptr || options.alpha != nullptr ||
                  !PngRegionFits(header, options.crop_x, options.crop_y, options.crop_w,
                                 options.crop_h))) {
    return Status::InvalidArgument(
        "PNG fast path: a region is an 8-bit decode's, inside the image, without mirror, sink "
        "or alpha scan");
  }
  Scratch& s = ThreadScratch();
  if (!s.inflater) return Status::Internal("libdeflate_alloc_decompressor failed");
  // The scratch buffers stay allocated between calls (the loader decodes the same sizes again
  // and again), but not after a huge image: a thread would hold that memory for good.
  struct Trim {
    Scratch& s;
    ~Trim() {
      constexpr size_t kKeep = size_t{64} << 20;
      if (s.filtered.capacity() > kKeep) std::vector<uint8_t>().swap(s.filtered);
      if (s.idat.capacity() > kKeep) std::vector<uint8_t>().swap(s.idat);
    }
  } trim{s};
  const uint8_t* p = bytes.data();
  const size_t size = bytes.size();

  // Every chunk: complete, CRC right; IDAT chunks consecutive; IEND last.
  const uint8_t* first_idat = nullptr;
  size_t idat_total = 0, idat_count = 0;
  bool idat_done = false, iend = false;
  size_t pos = 8;
  while (pos < size) {
    if (size - pos < 12) {
      return Status::BadInput("truncated PNG: " + std::to_string(size - pos) +
                              " stray bytes at offset " + std::to_string(pos) +
                              " (a chunk needs at least 12)");
    }
    const uint32_t len = Be32(p + pos);
    const uint8_t* type = p + pos + 4;
    if (len > kMaxChunk || len > size - pos - 12) {
      return Status::BadInput("truncated PNG: chunk '" + TypeName(type) + "' at offset " +
                              std::to_string(pos) + " declares " + std::to_string(len) +
                              " bytes, " + std::to_string(size - pos - 12) + " remain");
    }
    const uint32_t stored = Be32(p + pos + 8 + len);
    const uint32_t computed = libdeflate_crc32(0, type, size_t{len} + 4);
    if (stored != computed) {
      return Status::BadInput("PNG chunk '" + TypeName(type) + "' at offset " +
                              std::to_string(pos) + ": CRC mismatch (corrupt data)");
    }
    if (TypeIs(type, "IDAT")) {
      if (idat_done) {
        return Status::BadInput("PNG IDAT chunks are not consecutive (another IDAT at offset " +
                                std::to_string(pos) + ")");
      }
      if (idat_count == 0) first_idat = type + 4;
      ++idat_count;
      idat_total += len;
    } else if (idat_count > 0) {
      idat_done = true;
    }
    if (TypeIs(type, "IEND")) {
      pos += 12 + size_t{len};
      iend = true;
      break;
    }
    // Critical chunks: IHDR first (the router checked it), then only IDAT (PLTE and unknown
    // ones before IDAT went to libspng; anywhere later they are malformed).
    if ((type[0] & 0x20) == 0 && !(pos == 8 && TypeIs(type, "IHDR")) && !TypeIs(type, "IDAT")) {
      return Status::BadInput("PNG critical chunk '" + TypeName(type) + "' at offset " +
                              std::to_string(pos) + " out of place");
    }
    pos += 12 + size_t{len};
  }
  if (!iend) return Status::BadInput("truncated PNG (no IEND chunk)");
  if (pos != size) {
    return Status::BadInput("PNG has " + std::to_string(size - pos) + " bytes after IEND");
  }
  if (idat_count == 0) return Status::BadInput("PNG has no IDAT chunk");

  // The zlib stream: one span when there is one IDAT, else the chunks' data concatenated.
  const uint8_t* stream = first_idat;
  if (idat_count > 1) {
    s.idat.resize(idat_total);
    size_t at = 0;
    for (size_t q = static_cast<size_t>(first_idat - 8 - p); at < idat_total;) {
      const uint32_t len = Be32(p + q);
      std::memcpy(s.idat.data() + at, p + q + 8, len);
      at += len;
      q += 12 + size_t{len};
    }
    stream = s.idat.data();
  }

  const size_t bpp = static_cast<size_t>(header.channels) * (wide ? 2 : 1);
  const size_t row_bytes = size_t{header.width} * bpp;
  const size_t stride = row_bytes + 1;
  const size_t expected = stride * header.height;
  s.filtered.resize(expected);
  size_t in_used = 0, out_size = 0;
  const libdeflate_result rc = libdeflate_zlib_decompress_ex(
      s.inflater.get(), stream, idat_total, s.filtered.data(), expected, &in_used, &out_size);
  if (rc == LIBDEFLATE_INSUFFICIENT_SPACE) {
    return Status::BadInput("PNG image data inflates past the " + std::to_string(expected) +
                            " bytes a " + std::to_string(header.width) + "x" +
                            std::to_string(header.height) + " image holds");
  }
  if (rc != LIBDEFLATE_SUCCESS) {
    return Status::BadInput(
        "PNG image data: corrupt zlib stream (bad deflate data, truncated, or adler32 mismatch)");
  }
  if (out_size != expected) {
    return Status::BadInput("PNG image data is short: it inflates to " + std::to_string(out_size) +
                            " bytes, the image needs " + std::to_string(expected));
  }
  if (in_used != idat_total) {
    return Status::BadInput("PNG image data: " + std::to_string(idat_total - in_used) +
                            " bytes of trailing data after the zlib stream");
  }

  // Unfilter. Without a channel conversion each row goes straight into dst (the previous dst
  // row is the prediction row); when mirrored, into one of two scratch rows (the other is the
  // prediction row) and then mirrored into dst; with a conversion, in place in the filtered
  // buffer, then converted (and mirrored) into dst. Each finished dst row goes to the sink.
  const bool direct = !wide && static_cast<size_t>(out_channels) == bpp;
  const bool mirror = options.mirror;
  if (s.zeros.size() < row_bytes) s.zeros.assign(row_bytes, 0);
  const size_t padded = row_bytes + 16;
  if (direct && mirror && s.rows.size() < 2 * padded) s.rows.resize(2 * padded);
  const UnfilterIsa isa = BestUnfilterIsa();
  uint8_t* const filtered = s.filtered.data();
  const size_t out_row = size_t{header.width} * static_cast<size_t>(out_channels) * (wide ? 2 : 1);
  const uint32_t crop_end = options.crop_y + options.crop_h;
  const size_t crop_row = size_t{options.crop_w} * static_cast<size_t>(out_channels);
  for (uint32_t y = 0; y < header.height; ++y) {
    uint8_t* row = filtered + size_t{y} * stride;
    const int filter = row[0];
    if (filter > 4) {
      return Status::BadInput("PNG row " + std::to_string(y) + " has filter type " +
                              std::to_string(filter) + " (0-4 exist)");
    }
    if (cropped) {  // in place in the filtered buffer; the crop's columns out
      if (y >= crop_end) continue;
      const uint8_t* prev = y == 0 ? s.zeros.data() : row - stride + 1;
      UnfilterRow(isa, filter, row + 1, prev, row + 1, row_bytes, static_cast<int>(bpp));
      if (y < options.crop_y) continue;
      const uint8_t* from = row + 1 + size_t{options.crop_x} * bpp;
      uint8_t* to = dst + size_t{y - options.crop_y} * crop_row;
      if (direct) {
        std::memcpy(to, from, crop_row);
      } else {
        RowToRgb(from, header.channels, options.crop_w, false, to);
      }
      continue;
    }
    uint8_t* out = dst + size_t{y} * out_row;
    if (direct && !mirror) {
      const uint8_t* prev = y == 0 ? s.zeros.data() : out - row_bytes;
      UnfilterRow(isa, filter, row + 1, prev, out, row_bytes, static_cast<int>(bpp));
    } else if (direct) {
      uint8_t* cur = s.rows.data() + (y % 2) * padded;
      const uint8_t* prev = y == 0 ? s.zeros.data() : s.rows.data() + ((y + 1) % 2) * padded;
      UnfilterRow(isa, filter, row + 1, prev, cur, row_bytes, static_cast<int>(bpp));
      MirrorRow(cur, static_cast<int>(bpp), header.width, out);
    } else {
      const uint8_t* prev = y == 0 ? s.zeros.data() : row - stride + 1;
      UnfilterRow(isa, filter, row + 1, prev, row + 1, row_bytes, static_cast<int>(bpp));
      if (wide) {
        Row16ToHost(row + 1, header.width, header.channels, mirror,
                    reinterpret_cast<uint16_t*>(out));
      } else {
        PngAlphaScan* scan = options.alpha;
        if (scan != nullptr && scan->opaque && header.channels % 2 == 0) {
          const uint32_t x = FirstTranslucent(row + 1, header.channels, header.width);
          if (x < header.width) *scan = PngAlphaScan{false, y, x};
        }
        RowToRgb(row + 1, header.channels, header.width, mirror, out);
      }
    }
    if (options.sink != nullptr) options.sink->Row(y, out);
  }
  return Status::OK();
}

}  // namespace dspipe::codec
