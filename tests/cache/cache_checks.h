// SPDX-License-Identifier: Apache-2.0
// What the cache tests measure: the digest of a dataset (crc32 over "rel\0bytes" of every
// regular file below a path, links followed as the cache resolves them, in name order, LMDB
// reader tables skipped) and the storage a cache dir holds for dataset files. Shared by
// cache_tool, the cache tests and cache_torture. Header-only.
#pragma once

#include <sys/stat.h>

#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "core/checksum.h"

namespace dspipe::cachetest {

inline bool IsLmdbReaderTable(const std::string& name) {
  return name == "lock.mdb" || (name.size() > 5 && name.ends_with("-lock"));
}

inline uint32_t DatasetDigest(const std::string& path) {
  namespace fs = std::filesystem;
  std::vector<std::string> rels;
  std::error_code ec;
  if (fs::is_regular_file(path, ec)) {
    rels.push_back("");
  } else {
    for (auto it = fs::recursive_directory_iterator(
             path, fs::directory_options::follow_directory_symlink, ec);
         !ec && it != fs::recursive_directory_iterator(); it.increment(ec)) {
      if (it->is_regular_file(ec) && !IsLmdbReaderTable(it->path().filename().string())) {
        rels.push_back(it->path().lexically_relative(path).string());
      }
    }
  }
  std::sort(rels.begin(), rels.end());
  uint32_t crc = 0;
  for (const std::string& r : rels) {
    std::ifstream f(r.empty() ? path : path + "/" + r, std::ios::binary);
    const std::string bytes((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
    const std::string head = r + std::string(1, '\0');
    crc = core::Crc32({reinterpret_cast<const uint8_t*>(head.data()), head.size()}, crc);
    crc = core::Crc32({reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size()}, crc);
  }
  return crc;
}

// Bytes of storage (st_blocks) the dataset files (data.mdb, manifest.json: the only files of
// the test datasets) hold below `dir`, in entries and temp dirs alike; *files counts them (each
// may round up to a page). Names removed while it walks are skipped.
inline uint64_t DatasetFileUsage(const std::string& dir, int* files) {
  namespace fs = std::filesystem;
  uint64_t total = 0;
  *files = 0;
  std::error_code ec;
  for (auto it = fs::recursive_directory_iterator(dir, ec);
       !ec && it != fs::recursive_directory_iterator(); it.increment(ec)) {
    const std::string n = it->path().filename().string();
    if (n != "data.mdb" && n != "manifest.json") continue;
    struct stat st;
    if (::lstat(it->path().c_str(), &st) != 0) continue;
    total += static_cast<uint64_t>(st.st_blocks) * 512;
    ++*files;
  }
  return total;
}

}  // namespace dspipe::cachetest
