// SPDX-License-Identifier: Apache-2.0
// Fuzzes dsconvert's archive source: libarchive's listing (tar, zip, gzip/zstd/bzip2/xz
// filters: the format is found from the bytes), member path normalization, layout detection
// and streamed member reads (ScanSources + ArchiveSource::Read), with and without the buffer.
#include <cstdint>
#include <string>

#include "convert/sources.h"
#include "convert/sources_archive.h"
#include "fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace dspipe;
  const std::string path = fuzz::ScratchDir() + "/src.tar";
  fuzz::WriteBytes(path, data, size);
  for (uint64_t buffer : {uint64_t{0}, uint64_t{1} << 16}) {
    convert::SourceList list;
    const Status s = convert::ScanSources(path, PlainLmdbOptions{}, &list, buffer);
    if (!s.ok()) {
      DSPIPE_FUZZ_CHECK(s.message().find(path) != std::string::npos);
      continue;
    }
    DSPIPE_FUZZ_CHECK(list.archive != nullptr && !list.items.empty());
    int reads = 0;
    for (const convert::SourceItem& it : list.items) {
      DSPIPE_FUZZ_CHECK(it.image.rfind(path + ":", 0) == 0);
      if (!it.error.empty() || it.archive_image < 0 || ++reads > 64) continue;
      std::string bytes;
      const Status r = list.archive->Read(it.archive_image, it.image, &bytes);
      if (!r.ok()) DSPIPE_FUZZ_CHECK(r.message().find(path) != std::string::npos);
    }
  }
  return 0;
}
