// Turns one source sample (image file + optional mask file) into a record value. Internal.
// Pure function of its inputs and options: safe to call from many threads at once.
#pragma once

#include <cstdint>
#include <string>

#include "convert/sources.h"
#include "dspipe/convert.h"
#include "dspipe/format.h"

namespace dspipe {

struct MadeRecord {
  std::string value;              // header + payloads (see format.h)
  RecordHeader header;
  uint64_t bytes_read = 0;
  // Per-channel pixel statistics, when the image was decoded for them.
  bool has_stats = false;
  double sum[3] = {0, 0, 0};
  double sumsq[3] = {0, 0, 0};
  uint64_t pixels = 0;
  int mask_max = -1;              // largest class id, when the mask was decoded
};

// want_stats asks for pixel statistics (decoding the image if the mode would not anyway).
// `plain` is the open plain LMDB source for items with a plain_index (else unused).
// Errors are kBadInput/kIOError naming the file (or LMDB key) and the reason.
Status MakeRecord(const SourceItem& item, const BuildOptions& options, bool want_stats,
                  MadeRecord* out, const Dataset* plain = nullptr);

}  // namespace dspipe
