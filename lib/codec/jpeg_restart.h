// SPDX-License-Identifier: Apache-2.0
// JPEG files with a restart marker after every MCU (DRI = 1, as `dsconvert build
// --jpeg-restarts` writes them by a lossless transcode): each MCU's entropy-coded bytes stand
// alone (the DC predictors restart at 0), so the MCUs that cover a region can be cut out of the
// file and put together into a smaller JPEG, which libjpeg decodes whole. Nothing outside the
// region is Huffman-decoded, where jpeg_crop_scanline + jpeg_skip_scanlines decode every MCU of
// the rows above and beside it.
//
// Internal to lib/codec (jpeg_decode.cc uses it).
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "dspipe/status.h"

namespace dspipe::codec {

// What the frame and scan headers say (jpeg_read_header has read them).
struct JpegScanHeader {
  int width = 0, height = 0;
  int restart_interval = 0;  // in MCUs (0 = no restart markers)
  bool progressive = false;
  int num_components = 0;
  int comps_in_scan = 0;  // of the first scan
  int max_h_samp = 1, max_v_samp = 1;
  size_t entropy_begin = 0;  // the first byte after the first SOS header
};

// Where each MCU's bytes are in a DRI = 1 file.
struct RestartIndex {
  int width = 0, height = 0;          // the image's, as stored
  int mcu_width = 0, mcu_height = 0;  // pixels (8 x sampling factors; 8x8 for one component)
  int mcus_per_row = 0, mcu_rows = 0;
  size_t entropy_begin = 0;
  size_t sof_offset = 0;  // the 0xFF of the frame header (SOFn)
  // MCU i (raster order, i < begin.size()) is bytes [begin[i], end[i]); end[i] is the 0xFF of
  // the marker after it.
  std::vector<uint32_t> begin, end;
};

// Sets index's image size and MCU grid from the header (no bytes read): an MCU is one 8x8 block
// of a single component, or 8 x the largest sampling factors when interleaved. IndexRestarts
// sets them too; the decoder calls this first to choose the region's MCUs.
void SetRestartGrid(const JpegScanHeader& header, RestartIndex* index);

// Indexes the first `mcus` MCUs of bytes (all of them when `mcus` is at least their number)
// when it is a single-scan sequential (baseline or extended, Huffman or arithmetic) file with a
// restart marker after every MCU: each RSTn up to the end of the last MCU indexed in sequence,
// and EOI after the image's last MCU when that one is indexed; false otherwise (the caller
// decodes it the usual way). Nothing after the last MCU indexed is read: a region's MCUs need
// the bytes up to their own end, as the whole image's decode of them does.
bool IndexRestarts(std::span<const uint8_t> bytes, const JpegScanHeader& header, size_t mcus,
                   RestartIndex* index);

// Writes into *out a JPEG of the MCU columns [col0, col1] and rows [row0, row1] of the indexed
// file (all of them indexed): its headers with the frame's size set to those MCUs' pixels (clipped
// to the image at its right and bottom edges, so the edge samples are replicated as in the whole
// image), their bytes with restart markers renumbered, EOI. Its pixel (x, y) is the file's (x +
// col0 * mcu_width, y + row0 * mcu_height), equal to the whole image's decode wherever the chroma
// upsampler's neighbours are inside it (one pixel in from a side that is not an edge of the image).
void AssembleRestartRegion(std::span<const uint8_t> bytes, const RestartIndex& index, int col0,
                           int col1, int row0, int row1, std::vector<uint8_t>* out);

// Losslessly rewrites a JPEG (the same DCT coefficients, so the same pixels) as a sequential
// file with a restart marker after every MCU and optimized Huffman tables; progressive files
// become sequential. APP1-APP13 and APP15 (EXIF, where the orientation is; ICC; XMP) and COM
// markers are kept; APP0 (JFIF) and APP14 (Adobe) are written anew by libjpeg from the color
// space. Errors are kBadInput ("JPEG ...").
Status AddJpegRestarts(std::span<const uint8_t> jpeg, std::string* out);

}  // namespace dspipe::codec
