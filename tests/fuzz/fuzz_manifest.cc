// Fuzzes the manifest JSON parser (ParseManifest): lone LMDB, one shard of a set, and the
// sharded top manifest.json. Any input must give OK or an error status; OK must be coherent.
#include <cstdint>
#include <string>
#include <vector>

#include "format/manifest.h"
#include "fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace dspipe;
  const std::string text(reinterpret_cast<const char*>(data), size);
  DatasetInfo info;
  std::vector<ShardRange> ranges;
  const Status s = ParseManifest(text, "fuzz.json", &info, &ranges);
  if (!s.ok()) {
    DSPIPE_FUZZ_CHECK(s.message().find("fuzz.json") != std::string::npos);
    return 0;
  }
  DSPIPE_FUZZ_CHECK(!ranges.empty());
  for (size_t i = 0; i < ranges.size(); ++i) {
    DSPIPE_FUZZ_CHECK(ranges[i].begin <= ranges[i].end);
    if (i > 0) DSPIPE_FUZZ_CHECK(ranges[i].begin == ranges[i - 1].end);
  }
  return 0;
}
