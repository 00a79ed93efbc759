// SPDX-License-Identifier: Apache-2.0
// Fuzzes dsconvert's CSV source (ScanSources on a CSV file: libcsv + row/label checks).
#include <cstdint>
#include <string>

#include "convert/sources.h"
#include "fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace dspipe;
  const std::string path = fuzz::ScratchDir() + "/list.csv";
  fuzz::WriteBytes(path, data, size);
  convert::SourceList list;
  const Status s = convert::ScanSources(path, PlainLmdbOptions{}, &list);
  if (!s.ok()) {
    DSPIPE_FUZZ_CHECK(s.message().find(path) != std::string::npos);
    return 0;
  }
  DSPIPE_FUZZ_CHECK(list.kind == "csv" && !list.items.empty());
  for (const convert::SourceItem& it : list.items) {
    DSPIPE_FUZZ_CHECK(!it.image.empty());
    DSPIPE_FUZZ_CHECK(it.label >= -1);
    if (list.has_masks && it.mask.empty()) DSPIPE_FUZZ_CHECK(!it.error.empty());
  }
  return 0;
}
