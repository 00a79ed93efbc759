// SPDX-License-Identifier: Apache-2.0
// Fuzzes the manifest JSON parser (ParseManifest): lone LMDB, one shard of a set, and the
// sharded top manifest.json; and its "files" list (ParseManifestFiles). Any input must give OK
// or an error status; OK must be coherent.
#include <cstdint>
#include <string>
#include <vector>

#include "format/manifest.h"
#include "fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace dspipe;
  const std::string text(reinterpret_cast<const char*>(data), size);
  DatasetInfo info;
  std::vector<format::ShardRange> ranges;
  std::vector<format::ManifestFile> files;
  bool listed = false;
  const Status fs = format::ParseManifestFiles(text, "fuzz.json", &files, &listed);
  if (!fs.ok()) {
    DSPIPE_FUZZ_CHECK(fs.message().find("fuzz.json") != std::string::npos);
  } else {
    DSPIPE_FUZZ_CHECK(listed == !files.empty());
    for (const format::ManifestFile& f : files) {
      // Every accepted path stays inside the dataset directory.
      DSPIPE_FUZZ_CHECK(!f.path.empty() && f.path[0] != '/');
      for (size_t b = 0; b <= f.path.size();) {
        size_t e = f.path.find('/', b);
        if (e == std::string::npos) e = f.path.size();
        const std::string part = f.path.substr(b, e - b);
        DSPIPE_FUZZ_CHECK(!part.empty() && part != "." && part != "..");
        b = e + 1;
      }
      DSPIPE_FUZZ_CHECK(f.sha256.size() == 64);
    }
  }
  const Status s = format::ParseManifest(text, "fuzz.json", &info, &ranges);
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
