// SPDX-License-Identifier: Apache-2.0
#include <cstdio>
#include <cstring>
#include <string>

#include "core/checksum.h"
#include "dspipe/format.h"

namespace dspipe {
namespace {

constexpr uint8_t kMagic[4] = {'D', 'S', 'R', '1'};

void PutU32(uint8_t* p, uint32_t v) {
  p[0] = static_cast<uint8_t>(v);
  p[1] = static_cast<uint8_t>(v >> 8);
  p[2] = static_cast<uint8_t>(v >> 16);
  p[3] = static_cast<uint8_t>(v >> 24);
}
uint32_t GetU32(const uint8_t* p) {
  return static_cast<uint32_t>(p[0]) | (static_cast<uint32_t>(p[1]) << 8) |
         (static_cast<uint32_t>(p[2]) << 16) | (static_cast<uint32_t>(p[3]) << 24);
}
bool ValidCodec(uint8_t c) { return c <= static_cast<uint8_t>(Codec::kEncoded); }
bool ValidType(uint8_t t) { return t < kNumSampleTypes; }

}  // namespace

const char* SampleTypeName(SampleType t) {
  switch (t) {
    case SampleType::kUint8:
      return "uint8";
    case SampleType::kUint16:
      return "uint16";
    case SampleType::kInt16:
      return "int16";
    case SampleType::kFloat32:
      return "float32";
  }
  return "unknown";
}

bool ParseSampleType(const std::string& name, SampleType* out) {
  for (int i = 0; i < kNumSampleTypes; ++i) {
    if (name == SampleTypeName(static_cast<SampleType>(i))) {
      *out = static_cast<SampleType>(i);
      return true;
    }
  }
  return false;
}

size_t SampleTypeSize(SampleType t) {
  switch (t) {
    case SampleType::kUint8:
      return 1;
    case SampleType::kUint16:
    case SampleType::kInt16:
      return 2;
    case SampleType::kFloat32:
      return 4;
  }
  return 1;
}

const char* CodecName(Codec c) {
  switch (c) {
    case Codec::kNone: return "none";
    case Codec::kRaw: return "raw";
    case Codec::kRawZstd: return "raw+zstd";
    case Codec::kPng: return "png";
    case Codec::kJpeg: return "jpeg";
    case Codec::kEncoded: return "encoded";
  }
  return "unknown";
}

void EncodeRecord(RecordHeader h, std::span<const uint8_t> image, std::span<const uint8_t> mask,
                  std::string* out) {
  uint8_t hdr[kRecordHeaderSize];
  std::memcpy(hdr, kMagic, 4);
  const bool v1 = h.image_type == SampleType::kUint8 &&
                  (mask.empty() || h.mask_type == SampleType::kUint8) &&
                  (h.channels == 1 || h.channels == 3);
  hdr[4] = v1 ? 1 : 2;
  hdr[5] = static_cast<uint8_t>(static_cast<uint8_t>(h.image_codec) |
                                (v1 ? 0 : static_cast<uint8_t>(h.image_type) << 4));
  hdr[6] =
      static_cast<uint8_t>(mask.empty() ? 0
                                        : static_cast<uint8_t>(h.mask_codec) |
                                              (v1 ? 0 : static_cast<uint8_t>(h.mask_type) << 4));
  hdr[7] = h.channels;
  PutU32(hdr + 8, h.height);
  PutU32(hdr + 12, h.width);
  PutU32(hdr + 16, static_cast<uint32_t>(h.label));
  PutU32(hdr + 20, static_cast<uint32_t>(image.size()));
  PutU32(hdr + 24, static_cast<uint32_t>(mask.size()));
  uint32_t crc = core::Crc32({hdr, 28});
  crc = core::Crc32(image, crc);
  crc = core::Crc32(mask, crc);
  PutU32(hdr + 28, crc);
  out->append(reinterpret_cast<const char*>(hdr), kRecordHeaderSize);
  out->append(reinterpret_cast<const char*>(image.data()), image.size());
  out->append(reinterpret_cast<const char*>(mask.data()), mask.size());
}

Status DecodeRecord(std::span<const uint8_t> value, bool verify_crc, RecordView* out) {
  if (value.size() < kRecordHeaderSize) {
    return Status::Corruption("record of " + std::to_string(value.size()) +
                              " bytes is shorter than the 32-byte header");
  }
  const uint8_t* p = value.data();
  if (std::memcmp(p, kMagic, 4) != 0) return Status::Corruption("bad record magic");
  const uint8_t version = p[4];
  if (version != 1 && version != 2) {
    return Status::Corruption("unsupported record version " + std::to_string(version) +
                              " (this dspipe reads versions 1 and 2: a newer dspipe wrote it)");
  }
  const uint8_t image_codec = version == 1 ? p[5] : p[5] & 0x0f;
  const uint8_t mask_codec = version == 1 ? p[6] : p[6] & 0x0f;
  const uint8_t image_type = version == 1 ? 0 : p[5] >> 4;
  const uint8_t mask_type = version == 1 ? 0 : p[6] >> 4;
  if (!ValidCodec(image_codec) || !ValidCodec(mask_codec) || image_codec == 0 ||
      !ValidType(image_type) || !ValidType(mask_type)) {
    return Status::Corruption("bad codec byte (image " + std::to_string(p[5]) + ", mask " +
                              std::to_string(p[6]) + ")");
  }
  RecordHeader& h = out->header;
  h.image_codec = static_cast<Codec>(image_codec);
  h.mask_codec = static_cast<Codec>(mask_codec);
  h.image_type = static_cast<SampleType>(image_type);
  h.mask_type = static_cast<SampleType>(mask_type);
  h.channels = p[7];
  h.height = GetU32(p + 8);
  h.width = GetU32(p + 12);
  h.label = static_cast<int32_t>(GetU32(p + 16));
  h.image_size = GetU32(p + 20);
  h.mask_size = GetU32(p + 24);
  h.crc = GetU32(p + 28);
  if (version == 1 ? h.channels != 1 && h.channels != 3
                   : h.channels < 1 || h.channels > kMaxChannels) {
    return Status::Corruption("bad channel count " + std::to_string(h.channels));
  }
  if (h.mask_type != SampleType::kUint8 && h.mask_type != SampleType::kUint16) {
    return Status::Corruption(std::string("bad mask sample type ") + SampleTypeName(h.mask_type));
  }
  const uint64_t expect = kRecordHeaderSize + uint64_t{h.image_size} + h.mask_size;
  if (expect != value.size()) {
    return Status::Corruption("record is " + std::to_string(value.size()) +
                              " bytes, header says " + std::to_string(expect));
  }
  if ((h.mask_size == 0) != (h.mask_codec == Codec::kNone)) {
    return Status::Corruption("mask codec and mask size disagree");
  }
  out->image = value.subspan(kRecordHeaderSize, h.image_size);
  out->mask = value.subspan(kRecordHeaderSize + h.image_size, h.mask_size);
  if (verify_crc) {
    const uint32_t crc =
        core::Crc32(value.subspan(kRecordHeaderSize), core::Crc32(value.first(28)));
    if (crc != h.crc) {
      char buf[96];
      std::snprintf(buf, sizeof buf, "checksum mismatch (stored %08x, computed %08x)", h.crc,
                    crc);
      return Status::Corruption(buf);
    }
  }
  return Status::OK();
}

Codec SniffCodec(std::span<const uint8_t> b) {
  static constexpr uint8_t kPngSig[8] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n'};
  if (b.empty()) return Codec::kNone;
  if (b.size() >= 8 && std::memcmp(b.data(), kPngSig, 8) == 0) return Codec::kPng;
  if (b.size() >= 3 && b[0] == 0xFF && b[1] == 0xD8 && b[2] == 0xFF) return Codec::kJpeg;
  return Codec::kEncoded;
}

void EncodeKey(uint64_t index, uint8_t out[kKeySize]) {
  for (size_t i = 0; i < kKeySize; ++i) out[i] = static_cast<uint8_t>(index >> (56 - 8 * i));
}

uint64_t DecodeKey(const uint8_t in[kKeySize]) {
  uint64_t v = 0;
  for (size_t i = 0; i < kKeySize; ++i) v = (v << 8) | in[i];
  return v;
}

std::string KeyName(uint64_t index) {
  char buf[17];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(index));
  return buf;
}

}  // namespace dspipe
