// SPDX-License-Identifier: Apache-2.0
// TIFF through libtiff itself, for what OpenCV 4.6's TIFF reader cannot do: more than 4
// channels (OpenCV refuses them) and planar (PLANARCONFIG_SEPARATE) files deeper than 8 bits
// (OpenCV 4.6 misreads them silently: measured on 3- and 4-channel uint16, int16 and float32).
// Internal to the codec component.
//
// What DecodeTiff takes ("ours", TiffInfo::ours): one page; SamplesPerPixel 1..kMaxChannels;
// BitsPerSample 8 or 16 unsigned, 16 signed, 32 float (SampleFormat); PLANARCONFIG_CONTIG or
// SEPARATE; strips or tiles; any compression this libtiff decodes (except old-style JPEG);
// Photometric MINISBLACK (1..16 samples: the extra samples are channels) or RGB (3..16).
// Everything else (palette, YCbCr, CMYK, Lab, 1..4-bit, MINISWHITE, int8, int32, float16/64)
// is left to OpenCV as before: TiffInfo::ours is false and the caller decodes with cv::imdecode.
//
// The output is what dspipe's OpenCV path gives after its BGR -> RGB swap: HWC interleaved,
// the samples as stored (RGB order), CV_8U / CV_16U / CV_16S / CV_32F with SamplesPerPixel
// channels. For contiguous 1/3/4-channel files the pixels are identical to cv::imdecode's
// IMREAD_UNCHANGED + COLOR_BGR(A)2RGB(A) (tests/codec/tiff_test.cc compares them).
//
// Bad input: the decode limits (dspipe/limits.h) are checked against the header (sides, pixels,
// and width x height x channels x bytes against 4 bytes per pixel of max_pixels, the bound a
// raw+zstd record of it must meet) before anything is allocated; libtiff's own allocations are
// bounded (TIFFOpenOptionsSetMaxSingleMemAlloc); its warnings are dropped and its errors become
// the Status (never stderr); a strip or tile that decodes short (truncated file) is an error.
// Messages are the reason only: the caller names the file.
#pragma once

#include <cstdint>
#include <opencv2/core.hpp>
#include <span>
#include <string>

#include "dspipe/format.h"
#include "dspipe/status.h"

namespace dspipe::codec {

struct TiffInfo {
  uint32_t width = 0, height = 0;  // ImageWidth, ImageLength of the first page
  int samples = 0;                 // SamplesPerPixel
  int bits = 0;                    // BitsPerSample
  int sample_format = 1;           // SAMPLEFORMAT_UINT / INT / IEEEFP ...
  int photometric = -1;
  int compression = 1;
  bool planar = false;  // PLANARCONFIG_SEPARATE
  bool tiled = false;
  // Pages: the directories in the main chain that are not reduced-resolution copies
  // (SubfileType bit FILETYPE_REDUCEDIMAGE: thumbnails and pyramid levels do not count).
  int pages = 1;
  bool ours = false;                     // DecodeTiff takes it (see above); else OpenCV
  SampleType type = SampleType::kUint8;  // when ours
};

// Reads the first directory (and counts the pages). BadInput when libtiff cannot open it.
Status ReadTiffInfo(std::span<const uint8_t> bytes, TiffInfo* out);

// BadInput naming the page count for a TIFF of more than one page (dspipe reads one page per
// image and never takes the first silently), or the samples for one of more than kMaxChannels
// samples per pixel (OpenCV reads no more than 4 either).
Status CheckTiffLayout(const TiffInfo& info);

// Decodes the first and only page of a TIFF that ReadTiffInfo calls ours into *out (reused
// when it has the size and type). A TIFF that is not ours, or has several pages, is BadInput.
Status DecodeTiff(std::span<const uint8_t> bytes, cv::Mat* out);
// As DecodeTiff, but a TIFF that is not ours is OK with info->ours false and *out untouched
// (the caller hands it to OpenCV): one reading of the header for both. info: the first page's.
Status TryDecodeTiff(std::span<const uint8_t> bytes, cv::Mat* out, TiffInfo* info);

// BuildOptions::pages_as_channels: every page of a TIFF (reduced-resolution copies left out)
// stacked as channels, page 1's first: HWC interleaved as DecodeTiff gives one page. Every page
// must be ours and of one size and sample type, at most kMaxChannels channels in all, else
// BadInput naming the page ("TIFF page 3 is 64x48 uint16, page 1 ..."); the stack is held to
// the decode limits as one image. *pages: how many were stacked.
Status DecodeTiffPages(std::span<const uint8_t> bytes, cv::Mat* out, int* pages);

// The first directory's ImageWidth x ImageLength against the DecodeLimits (what every TIFF
// handed to cv::imdecode is checked with; limits_check.h).
Status CheckTiffHeader(std::span<const uint8_t> bytes);

}  // namespace dspipe::codec
