// SPDX-License-Identifier: Apache-2.0
// The dspipe on-disk record format (versions 1 and 2). docs/FORMAT.md is the normative description;
// this header mirrors it. Values stored on disk: do not change them.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>

#include "dspipe/status.h"

namespace dspipe {

// How one payload (image or mask) is stored. Stored on disk: do not change the numbers.
enum class Codec : uint8_t {
  kNone = 0,      // absent (mask_size == 0)
  kRaw = 1,       // uncompressed pixels, row-major HWC, uint8
  kRawZstd = 2,   // kRaw compressed as one zstd frame
  kPng = 3,       // a PNG file's bytes
  kJpeg = 4,      // a JPEG file's bytes
  kEncoded = 5,   // another format OpenCV's imdecode reads (BMP, TIFF, WebP, ...)
};
const char* CodecName(Codec c);

// The type of one pixel sample of a payload (image or mask). Stored on disk (record version 2,
// the manifest's "sample_type" / "mask_type"): do not change the numbers.
enum class SampleType : uint8_t {
  kUint8 = 0,
  kUint16 = 1,   // 16-bit PNG / TIFF / PGM, e.g. CT and MR slices; uint16 masks (ids to 65535)
  kInt16 = 2,    // signed 16-bit TIFF (e.g. raw Hounsfield units)
  kFloat32 = 3,  // float TIFF
};
inline constexpr int kNumSampleTypes = 4;
// "uint8", "uint16", "int16", "float32" (numpy's dtype names).
const char* SampleTypeName(SampleType t);
// The inverse of SampleTypeName; false for anything else.
bool ParseSampleType(const std::string& name, SampleType* out);
// Bytes per sample: 1, 2, 2, 4.
size_t SampleTypeSize(SampleType t);
// The largest channel count a record holds.
inline constexpr int kMaxChannels = 16;
// Whether images of this sample type and channel count are typed samples: kept with their own
// type and every channel, decoded whole, batched as float32 in their own units. That is every
// type but uint8, and uint8 images of more than 4 channels (a multispectral 8-bit TIFF, 8-bit
// pages stacked as channels). uint8 images of up to 4 channels are stored and batched as 8-bit
// gray or RGB.
inline bool IsTyped(SampleType type, int channels) {
  return type != SampleType::kUint8 || channels > 4;
}

// Fixed 32-byte little-endian header in front of every record value:
//   off size field
//   0   4    magic "DSR1"
//   4   1    version (1 or 2)
//   5   1    image codec (Codec); version 2: low nibble codec, high nibble image SampleType
//   6   1    mask codec (Codec; kNone when there is no mask); version 2: high nibble mask type
//   7   1    channels of the decoded image (version 1: 1 or 3; version 2: 1..kMaxChannels);
//            masks always have 1
//   8   4    height (decoded, after EXIF orientation and --resize)
//   12  4    width
//   16  4    label (int32, -1 = none)
//   20  4    image payload size in bytes
//   24  4    mask payload size in bytes (0 = no mask)
//   28  4    CRC-32 (zlib polynomial) over bytes 0..27 then the payload bytes
// then image payload, then mask payload. Value size == 32 + image_size + mask_size exactly.
// EncodeRecord writes version 1 for uint8 images and masks of 1 or 3 channels (what every
// reader before version 2 opens) and version 2 otherwise; DecodeRecord reads both.
inline constexpr size_t kRecordHeaderSize = 32;
inline constexpr uint8_t kRecordVersion = 2;  // the newest version written

struct RecordHeader {
  Codec image_codec = Codec::kNone;
  Codec mask_codec = Codec::kNone;
  uint8_t channels = 0;
  SampleType image_type = SampleType::kUint8;  // raw payloads: the stored pixels' type
  SampleType mask_type = SampleType::kUint8;
  uint32_t height = 0;
  uint32_t width = 0;
  int32_t label = -1;
  uint32_t image_size = 0;
  uint32_t mask_size = 0;
  uint32_t crc = 0;
};

// A parsed record: views into the value's bytes (zero-copy; valid while the value is).
struct RecordView {
  RecordHeader header;
  std::span<const uint8_t> image;
  std::span<const uint8_t> mask;  // empty when there is no mask
};

// Appends header + payloads to *out (computing the CRC).
void EncodeRecord(RecordHeader header, std::span<const uint8_t> image,
                  std::span<const uint8_t> mask, std::string* out);

// Parses a value. Checks magic, version, codecs and sizes; checks the CRC when verify_crc.
// Errors are kCorruption with the reason; the caller adds the key.
Status DecodeRecord(std::span<const uint8_t> value, bool verify_crc, RecordView* out);

// The codec of an encoded payload from its magic bytes: kPng, kJpeg, kEncoded (any other
// format), kNone (empty).
Codec SniffCodec(std::span<const uint8_t> bytes);

// Record keys: 8-byte big-endian index, so LMDB's byte order is index order.
inline constexpr size_t kKeySize = 8;
void EncodeKey(uint64_t index, uint8_t out[kKeySize]);
uint64_t DecodeKey(const uint8_t in[kKeySize]);
// "00000000000000a7" style name used in messages.
std::string KeyName(uint64_t index);

// Named LMDB databases inside each dspipe LMDB environment.
inline constexpr const char* kRecordsDb = "records";
inline constexpr const char* kMetaDb = "meta";
// Keys in the meta database.
inline constexpr const char* kManifestKey = "manifest";  // JSON, present once complete
inline constexpr const char* kBuildStateKey = "build";   // JSON, present while building

}  // namespace dspipe
