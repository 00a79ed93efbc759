// SPDX-License-Identifier: Apache-2.0
// The image formats dspipe decodes besides PNG and JPEG, and the size check of each one's
// header against the DecodeLimits (dspipe/limits.h) before cv::imdecode allocates anything.
// Internal to the codec component.
//
// OpenCV's imdecode reads many more formats (JPEG 2000, OpenEXR, Radiance HDR, Sun raster, PFM,
// PAM, DICOM through GDCM, ...) and holds them only to its own cap of 2^30 pixels, so a few
// bytes can ask for gigabytes. dspipe takes an explicit allow-list instead: PNG and JPEG (their
// headers are read by libspng and libjpeg-turbo in image.cc), and the formats below, each with
// a header check; everything else is refused naming the formats dspipe reads.
#pragma once

#include <cstdint>
#include <span>

#include "dspipe/status.h"

namespace dspipe::codec {

// What the leading bytes say the format is. A DICOM file ("DICM" at offset 128) is kOther
// whatever its preamble holds.
enum class ImageFormat {
  kPng,
  kJpeg,
  kBmp,   // "BM"
  kTiff,  // "II*\0" / "MM\0*" (and BigTIFF "II+\0" / "MM\0+")
  kWebP,  // "RIFF" ... "WEBP"
  kPnm,   // "P1".."P6": PBM, PGM, PPM (plain and raw)
  kOther, // anything else: not decoded
};

// For messages: "PNG, JPEG, BMP, TIFF, WebP and PNM (PBM/PGM/PPM)".
extern const char* const kSupportedImageFormats;

ImageFormat SniffImageFormat(std::span<const uint8_t> bytes);

// For bytes about to go to cv::imdecode that are neither PNG nor JPEG: BadInput when the
// format is not on the allow-list ("not a decodable image: OpenEXR files are not supported;
// dspipe reads PNG, JPEG, ...")
// or when its header cannot be read or declares more than the DecodeLimits (the message names
// the limit and the flag that raises it, as CheckImageSize does). BMP and PNM headers are fixed
// and tiny and are read here; TIFF's first directory is read by libtiff (TIFFClientOpenExt over
// the bytes), WebP's by libwebp (WebPGetInfo). The caller names the file or key.
Status CheckOtherImageHeader(std::span<const uint8_t> bytes);

}  // namespace dspipe::codec
