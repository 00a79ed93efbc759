// SPDX-License-Identifier: Apache-2.0
// The fast PNG path: a decoder for the PNGs almost every writer produces (8-bit gray,
// gray+alpha, RGB, RGBA, not interlaced, no palette or transparency chunk), beside libspng,
// which keeps everything else. Internal to lib/codec (not installed); image.cc routes every PNG
// decode through ChoosePngDecoder, so the loader, `dsconvert build --check decode` and
// `dsconvert verify` take the same path.
//
// How it decodes: walks the chunks checking every chunk's CRC (libdeflate's crc32), concatenates
// the IDAT data, inflates it with ONE libdeflate zlib call into a buffer of exactly the size
// IHDR implies (libdeflate checks the adler32; a stream that inflates to fewer or more bytes, or
// that leaves bytes after its end, is an error), then undoes the row filters with SIMD (SSE2,
// or AVX2 when the CPU has it, chosen once at run time), writing straight into the caller's
// buffer when no channel conversion is needed. All functions are thread-safe.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

#include "dspipe/status.h"

namespace dspipe::codec {

// IHDR, as the fast path reads it.
struct PngHeader {
  uint32_t width = 0;
  uint32_t height = 0;
  uint8_t bit_depth = 0;
  uint8_t color_type = 0;  // 0 gray, 2 RGB, 3 palette, 4 gray+alpha, 6 RGBA
  uint8_t interlace = 0;
  int channels = 0;        // samples per pixel as stored (1, 2, 3 or 4; 1 for palette)
};

enum class PngDecoder { kFast, kLibspng };

struct PngRoute {
  PngDecoder decoder = PngDecoder::kLibspng;
  PngHeader header;        // valid when decoder == kFast
  const char* reason = ""; // why libspng was chosen (for tests and debugging); "" for kFast
};

// THE routing rule. kFast when all of these hold, else kLibspng:
//  - the fast path is enabled (SetPngFastPathEnabled; DSPIPE_PNG_DECODER=libspng in the
//    environment disables it at start-up);
//  - the PNG signature is followed by a complete IHDR chunk (13 bytes) with compression and
//    filter method 0, interlace method 0, bit depth 8 and color type 0, 2, 4 or 6;
//  - every chunk before the first IDAT (or IEND) is complete, and none of them is PLTE, tRNS
//    or an unknown critical chunk (a type whose first letter is upper case, other than IHDR).
// Ancillary chunks (gAMA, sRGB, pHYs, text, ...) do not matter: dspipe's libspng calls ignore
// them too. Broken files that fail the rule (bad IHDR, truncated before IDAT) go to libspng,
// which reports them as before. Reads only chunk headers: no CRC, no inflate.
PngRoute ChoosePngDecoder(std::span<const uint8_t> bytes);
// The same rule for 16-bit PNGs (CT and MR slices, 16-bit RGB(A) microscopy): bit depth 16 and
// color type 0 (gray), 2 (RGB) or 6 (RGBA) instead of bit depth 8. DecodePngFast then writes
// header.height * header.width pixels of header.channels host-order uint16 samples, RGB(A)
// order (out_channels == header.channels; mirror as for 8-bit; the sink gets each row as those
// uint16 samples). 16-bit gray+alpha stays with libspng.
PngRoute ChoosePng16Decoder(std::span<const uint8_t> bytes);

// Process-wide switch (default on, unless DSPIPE_PNG_DECODER=libspng was set at start-up).
// Benchmarks turn it off to measure today's libspng decoder in the same run.
void SetPngFastPathEnabled(bool enabled);
bool PngFastPathEnabled();

// Receives the finished rows of a DecodePngFast call one at a time, top to bottom, right after
// each is written (while it is still in L1): the loader converts them to float32 there instead
// of reading the whole image back from memory afterwards (loader/sample.cc).
class PngRowSink {
 public:
  virtual ~PngRowSink() = default;
  // row == dst + y * width * out_channels, final (mirrored when PngFastOptions::mirror). Called
  // once per row, y = 0, 1, ... in order. After an error only rows before it were handed over.
  virtual void Row(uint32_t y, const uint8_t* row) = 0;
};

// Whether an 8-bit image's alpha channel holds a transparent pixel, found while it decodes.
struct PngAlphaScan {
  bool opaque = true;  // every alpha sample is 255 (also for an image without alpha)
  // The first pixel, in the image's row-major order (not mirrored), whose alpha is below 255;
  // valid when !opaque.
  uint32_t row = 0;
  uint32_t col = 0;
};

struct PngFastOptions {
  // Write the image mirrored left-right: dst(y, x) = image(y, width - 1 - x). Default off.
  bool mirror = false;
  // Handed every finished row; nullptr (default) for none.
  PngRowSink* sink = nullptr;
  // Filled in for an 8-bit gray+alpha or RGBA PNG (the alpha samples are read as the rows are
  // converted, so it costs no second decode); nullptr (default) for no scan. Left as it is
  // (opaque) for the other color types and for 16-bit PNGs.
  PngAlphaScan* alpha = nullptr;
  // A region (8-bit only, without mirror, sink or alpha scan): crop_w > 0 writes only the
  // crop_h x crop_w pixels at (crop_x, crop_y) to dst (crop_w * out_channels bytes a row). The
  // whole stream is still inflated and checked (zlib's checksum covers all of it) and every
  // row's filter type checked; rows above the crop are unfiltered (the next row predicts from
  // them) but not converted, rows below are never unfiltered, and only the crop's columns are
  // converted. Default: the whole image.
  uint32_t crop_x = 0, crop_y = 0, crop_w = 0, crop_h = 0;
};

// A region of x, y, w, h pixels is non-empty and inside the header's image (what
// PngFastOptions::crop_* takes).
inline bool PngRegionFits(const PngHeader& header, int64_t x, int64_t y, int64_t w, int64_t h) {
  return x >= 0 && y >= 0 && w > 0 && h > 0 && x + w <= int64_t{header.width} &&
         y + h <= int64_t{header.height};
}

// Decodes a PNG that ChoosePngDecoder routed to kFast (header is its PngRoute::header) into dst,
// which holds header.height * header.width * out_channels bytes. out_channels is 3 (RGB: gray
// is replicated, alpha dropped, exactly as libspng's SPNG_FMT_RGB8) or 1 (only for color type
// 0: the gray samples). For a PNG ChoosePng16Decoder routed, out_channels is header.channels
// and dst holds twice the bytes (uint16 samples). Checks the DecodeLimits first. Errors are
// kBadInput with the reason (chunk, byte offset, CRC or zlib failure); the caller adds the file
// name or key. On an error dst may be partly written.
Status DecodePngFast(std::span<const uint8_t> bytes, const PngHeader& header, int out_channels,
                     uint8_t* dst, const PngFastOptions& options = {});

// dst = src mirrored left-right: width pixels of bpp (1 or 3) bytes. src must be readable for
// 16 bytes past its end (the SIMD loads; the bytes are not used); dst gets exactly width * bpp
// bytes. SSSE3 when the CPU has it (chosen at run time), else a plain loop (`plain` forces it;
// tests compare the two). src and dst must not overlap.
void MirrorRow(const uint8_t* src, int bpp, uint32_t width, uint8_t* dst, bool plain = false);

// Row unfiltering (PNG filter types 0-4) of one scanline of n bytes at bpp bytes per pixel
// (1..4, 6 or 8): out[i] = src[i] + predictor(out[i - bpp], prev[i], prev[i - bpp]). prev is the
// previous unfiltered row (all zeros for the first row). out may equal src (in place); prev
// must not overlap out. Exposed so tests compare the SIMD versions with the plain one.
enum class UnfilterIsa { kScalar, kSse2, kAvx2 };
void UnfilterRow(UnfilterIsa isa, int filter, const uint8_t* src, const uint8_t* prev,
                 uint8_t* out, size_t n, int bpp);
// The ISA the decoder uses on this CPU (kAvx2 when __builtin_cpu_supports("avx2")).
UnfilterIsa BestUnfilterIsa();

}  // namespace dspipe::codec
