// SPDX-License-Identifier: Apache-2.0
// Turns one source sample (image file + optional mask file) into a record value. Internal.
// Pure function of its inputs and options: safe to call from many threads at once.
#pragma once

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "convert/sources.h"
#include "dspipe/convert.h"
#include "dspipe/format.h"
#include "volume/cache.h"

namespace dspipe::convert {

// Float32 samples' statistics keep, per channel, their values in bins: the float's bits mapped
// to an order-preserving 32-bit key, its top kFloatBinBits bits the bin. A bin spans at most
// 2^-(kFloatBinBits - 9) of its values' magnitude (2^-11: 0.05%), and remembers the smallest
// and largest value it holds, so a percentile read from the bins is exact where a bin holds one
// distinct value and otherwise within that bin's span (PercentileOfBins).
inline constexpr int kFloatBinBits = 20;
struct FloatBin {
  uint32_t bin = 0;
  uint64_t count = 0;
  float lo = 0, hi = 0;  // the smallest and largest value counted in it
};
inline uint32_t FloatBinOf(float v) {
  uint32_t u;
  std::memcpy(&u, &v, sizeof u);
  const uint32_t key = (u & 0x80000000u) != 0 ? ~u : u | 0x80000000u;  // ascending with v
  return key >> (32 - kFloatBinBits);
}

struct MadeRecord {
  std::string value;  // header + payloads (see format.h)
  RecordHeader header;
  uint64_t bytes_read = 0;
  // Per-channel pixel statistics, when the image was decoded for them.
  // In the stored samples' units (0-255 for uint8, the source's values for typed images).
  bool has_stats = false;
  double sum[kMaxChannels] = {};
  double sumsq[kMaxChannels] = {};
  double min[kMaxChannels] = {};
  double max[kMaxChannels] = {};
  // Integer samples (uint8, uint16, int16): per channel, the count of each value from min[k]
  // (hist[k][i] pixels hold min[k] + i); empty for float32.
  std::vector<uint32_t> hist[kMaxChannels];
  // Float32 samples: per channel, the values binned by FloatBinOf (above), nonempty bins in
  // bin order; NaN values are not counted. Empty for integer samples.
  std::vector<FloatBin> fbins[kMaxChannels];
  uint64_t pixels = 0;
  int mask_max = -1;                    // largest class id, when the mask was decoded
  uint64_t mask_ids[4] = {0, 0, 0, 0};  // bit i: the mask holds id i
  bool mask_jpeg = false;               // the mask's source file is a JPEG
  bool image_gray = false;  // a gray source image in a 3-channel dataset (replicated at decode)
  // Slices of a volume with labels: the record's entry in the foreground table (ClassCounts,
  // convert/volume_slices.h), written by the build when its plan keeps the table.
  bool has_class_counts = false;
  std::string class_counts;
};

// BuildOptions::mask_map ("255:1,128:2") as a lookup table (ids not named map to themselves);
// InvalidArgument naming the option for anything else.
Status ParseMaskMap(const std::string& text, uint8_t lut[256]);

// A sample's bytes read ahead of MakeRecord (archive members: read in order by one thread).
struct SourceBytes {
  std::string image, mask;
};

// want_stats asks for pixel statistics (decoding the image if the mode would not anyway).
// `plain` is the open plain LMDB source for items with a plain_index (else unused).
// `given`, when set, holds the item's bytes (moved from), read by the caller.
// Errors are kBadInput/kIOError naming the file (or LMDB key) and the reason.
// `volumes` reads the volumes of slice items (SourceItem::slice >= 0), each once.
Status MakeRecord(const SourceItem& item, const BuildOptions& options, bool want_stats,
                  MadeRecord* out, const Dataset* plain = nullptr, SourceBytes* given = nullptr,
                  volume::VolumeCache* volumes = nullptr);

}  // namespace dspipe::convert
