// The dspipe on-disk record format (version 1). docs/FORMAT.md is the normative description;
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

// Fixed 32-byte little-endian header in front of every record value:
//   off size field
//   0   4    magic "DSR1"
//   4   1    version (1)
//   5   1    image codec (Codec)
//   6   1    mask codec (Codec; kNone when there is no mask)
//   7   1    channels of the decoded image (1 or 3); masks always have 1
//   8   4    height (decoded, after EXIF orientation and --resize)
//   12  4    width
//   16  4    label (int32, -1 = none)
//   20  4    image payload size in bytes
//   24  4    mask payload size in bytes (0 = no mask)
//   28  4    CRC-32 (zlib polynomial) over bytes 0..27 then the payload bytes
// then image payload, then mask payload. Value size == 32 + image_size + mask_size exactly.
inline constexpr size_t kRecordHeaderSize = 32;
inline constexpr uint8_t kRecordVersion = 1;

struct RecordHeader {
  Codec image_codec = Codec::kNone;
  Codec mask_codec = Codec::kNone;
  uint8_t channels = 0;
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
