// SPDX-License-Identifier: Apache-2.0
// Restart-marker region assembly and the lossless restart transcode (jpeg_restart.h).
#include "codec/jpeg_restart.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

#include "codec/image.h"
#include "codec/jpeg_error.h"

namespace dspipe::codec {
namespace {

constexpr uint8_t kRst0 = 0xD0, kEoi = 0xD9;

bool IsSof(uint8_t m) { return m >= 0xC0 && m <= 0xCF && m != 0xC4 && m != 0xC8 && m != 0xCC; }

// The offset of the frame header's 0xFF among the markers before the first scan, or 0.
size_t FindSof(std::span<const uint8_t> b, size_t end) {
  size_t p = 2;  // after SOI
  while (p + 4 <= end) {
    if (b[p] != 0xFF) return 0;
    if (b[p + 1] == 0xFF) {  // fill byte
      ++p;
      continue;
    }
    const uint8_t m = b[p + 1];
    if (IsSof(m)) return p;
    if ((m >= kRst0 && m <= kRst0 + 7) || m == 0x01) {  // no length
      p += 2;
      continue;
    }
    p += 2 + (size_t{b[p + 2]} << 8 | b[p + 3]);
  }
  return 0;
}

void PutBe16(uint8_t* p, int v) {
  p[0] = static_cast<uint8_t>(v >> 8);
  p[1] = static_cast<uint8_t>(v);
}

int CeilDiv(int a, int b) { return (a + b - 1) / b; }

// The offset of the first marker at or after p in entropy-coded bytes: a 0xFF followed by
// neither 0x00 (a stuffed 0xFF) nor 0xFF (fill); n when there is none before the end. Where
// SSE2 is there (x86-64's baseline) it tests 16 positions at a time, stuffed bytes included,
// so only the markers (one after every MCU, ~100 bytes apart) leave the loop.
size_t NextMarker(const uint8_t* d, size_t p, size_t n) {
#if defined(__SSE2__)
  const __m128i ff = _mm_set1_epi8(static_cast<char>(0xFF)), zero = _mm_setzero_si128();
  for (; p + 17 <= n; p += 16) {
    const __m128i here = _mm_loadu_si128(reinterpret_cast<const __m128i*>(d + p));
    const __m128i next = _mm_loadu_si128(reinterpret_cast<const __m128i*>(d + p + 1));
    const int marker = _mm_movemask_epi8(_mm_cmpeq_epi8(here, ff)) &
                       ~_mm_movemask_epi8(_mm_cmpeq_epi8(next, zero)) &
                       ~_mm_movemask_epi8(_mm_cmpeq_epi8(next, ff));
    if (marker != 0) return p + static_cast<size_t>(__builtin_ctz(static_cast<unsigned>(marker)));
  }
#endif
  for (; p + 1 < n; ++p) {
    if (d[p] == 0xFF && d[p + 1] != 0x00 && d[p + 1] != 0xFF) return p;
  }
  return n;
}

// The objects a transcode owns; libjpeg's errors longjmp out of ReadHeader and Write (each
// holds nothing with a destructor), never past this.
struct Transcoder {
  JpegErrorMgr err{};
  jpeg_decompress_struct in{};
  jpeg_compress_struct out{};
  bool in_created = false, out_created = false;
  unsigned char* mem = nullptr;
  unsigned long mem_size = 0;

  Transcoder() {
    in.err = JpegErrors(&err);
    out.err = &err.pub;
  }
  ~Transcoder() {
    if (out_created) jpeg_destroy_compress(&out);
    if (in_created) jpeg_destroy_decompress(&in);
    std::free(mem);
  }
  Transcoder(const Transcoder&) = delete;
  Transcoder& operator=(const Transcoder&) = delete;

  // Through the header: false on a libjpeg error.
  bool ReadHeader(std::span<const uint8_t> jpeg) {
    if (setjmp(err.jump) != 0) return false;
    jpeg_create_decompress(&in);
    in_created = true;
    jpeg_mem_src(&in, jpeg.data(), static_cast<unsigned long>(jpeg.size()));
    for (int m = 1; m < 16; ++m) {
      if (m != 14) jpeg_save_markers(&in, JPEG_APP0 + m, 0xFFFF);  // APP14: libjpeg writes it
    }
    jpeg_save_markers(&in, JPEG_COM, 0xFFFF);
    jpeg_read_header(&in, TRUE);
    return true;
  }
  bool Write() {
    if (setjmp(err.jump) != 0) return false;
    jvirt_barray_ptr* coefficients = jpeg_read_coefficients(&in);
    jpeg_create_compress(&out);
    out_created = true;
    jpeg_mem_dest(&out, &mem, &mem_size);
    jpeg_copy_critical_parameters(&in, &out);
    out.restart_interval = 1;
    out.optimize_coding = TRUE;
    jpeg_write_coefficients(&out, coefficients);
    for (jpeg_saved_marker_ptr m = in.marker_list; m != nullptr; m = m->next) {
      jpeg_write_marker(&out, m->marker, m->data, m->data_length);
    }
    jpeg_finish_compress(&out);
    jpeg_finish_decompress(&in);
    return true;
  }
};

}  // namespace

void SetRestartGrid(const JpegScanHeader& h, RestartIndex* index) {
  RestartIndex& x = *index;
  x.width = h.width;
  x.height = h.height;
  x.mcu_width = h.num_components == 1 ? 8 : 8 * h.max_h_samp;
  x.mcu_height = h.num_components == 1 ? 8 : 8 * h.max_v_samp;
  x.mcus_per_row = CeilDiv(h.width, x.mcu_width);
  x.mcu_rows = CeilDiv(h.height, x.mcu_height);
}

bool IndexRestarts(std::span<const uint8_t> b, const JpegScanHeader& h, size_t mcus,
                   RestartIndex* index) {
  if (h.restart_interval != 1 || h.progressive || h.num_components < 1 ||
      h.comps_in_scan != h.num_components || h.width <= 0 || h.height <= 0 ||
      b.size() > UINT32_MAX || h.entropy_begin < 4 || h.entropy_begin >= b.size()) {
    return false;
  }
  RestartIndex& x = *index;
  SetRestartGrid(h, &x);
  x.entropy_begin = h.entropy_begin;
  x.sof_offset = FindSof(b, h.entropy_begin);
  if (x.sof_offset == 0 || x.sof_offset + 9 > h.entropy_begin) return false;
  const size_t total = static_cast<size_t>(x.mcus_per_row) * static_cast<size_t>(x.mcu_rows);
  const size_t count = std::min(std::max<size_t>(mcus, 1), total);
  // Each MCU ends at a 2-byte marker, so the bytes hold at most (n - entropy_begin) / 2 of them:
  // a header declaring more (a 1 KB file saying 16384 x 16384) is refused before the index is
  // sized, so a thread's index never grows past what its file could hold.
  if (count > (b.size() - h.entropy_begin) / 2) return false;
  x.begin.resize(count);
  x.end.resize(count);
  const uint8_t* const data = b.data();
  const size_t n = b.size();
  size_t p = h.entropy_begin;
  for (size_t i = 0; i < count; ++i) {
    x.begin[i] = static_cast<uint32_t>(p);
    const size_t q = NextMarker(data, p, n);
    if (q >= n) return false;  // no marker after the MCU
    x.end[i] = static_cast<uint32_t>(q);
    const uint8_t m = data[q + 1];
    if (i + 1 == total) return m == kEoi;
    if (m != kRst0 + i % 8) return false;  // out of sequence, EOI early, or another marker
    p = q + 2;
  }
  return true;
}

void AssembleRestartRegion(std::span<const uint8_t> b, const RestartIndex& x, int col0, int col1,
                           int row0, int row1, std::vector<uint8_t>* out) {
  // The frame's size: whole MCUs, or up to the image's edge where the region reaches it.
  const int w =
      col1 + 1 == x.mcus_per_row ? x.width - col0 * x.mcu_width : (col1 - col0 + 1) * x.mcu_width;
  const int h =
      row1 + 1 == x.mcu_rows ? x.height - row0 * x.mcu_height : (row1 - row0 + 1) * x.mcu_height;
  size_t bytes = x.entropy_begin + 2;
  for (int r = row0; r <= row1; ++r) {
    const size_t first = static_cast<size_t>(r) * x.mcus_per_row + col0;
    bytes += x.end[first + col1 - col0] - x.begin[first] + 2;  // with the markers between
  }
  out->resize(bytes);
  uint8_t* o = out->data();
  std::memcpy(o, b.data(), x.entropy_begin);
  PutBe16(o + x.sof_offset + 5, h);
  PutBe16(o + x.sof_offset + 7, w);
  o += x.entropy_begin;
  int k = 0;
  for (int r = row0; r <= row1; ++r) {
    for (int c = col0; c <= col1; ++c, ++k) {
      const size_t i = static_cast<size_t>(r) * x.mcus_per_row + c;
      if (k > 0) {
        *o++ = 0xFF;
        *o++ = static_cast<uint8_t>(kRst0 + (k - 1) % 8);
      }
      std::memcpy(o, b.data() + x.begin[i], x.end[i] - x.begin[i]);
      o += x.end[i] - x.begin[i];
    }
  }
  *o++ = 0xFF;
  *o++ = kEoi;
  out->resize(o - out->data());
}

Status AddJpegRestarts(std::span<const uint8_t> jpeg, std::string* out) {
  if (jpeg.empty()) return Status::BadInput("empty file (0 bytes)");
  Transcoder t;
  if (!t.ReadHeader(jpeg)) return Status::BadInput(std::string("JPEG header: ") + t.err.message);
  DSPIPE_RETURN_IF_ERROR(CheckImageSize("JPEG header", t.in.image_width, t.in.image_height));
  if (!t.Write()) {
    return Status::BadInput(std::string("JPEG restart transcode: ") + t.err.message);
  }
  out->assign(reinterpret_cast<const char*>(t.mem), t.mem_size);
  return Status::OK();
}

}  // namespace dspipe::codec
