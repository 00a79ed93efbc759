// SPDX-License-Identifier: Apache-2.0
// Helpers shared by the libFuzzer harnesses: a private scratch directory (on /dev/shm when it
// exists, so per-input files cost no disk I/O) and small file helpers. Harness-only code.
#pragma once

#include <stdlib.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <string>
#include <string_view>

namespace dspipe::fuzz {

// A directory unique to this process, removed at exit.
inline const std::string& ScratchDir() {
  static const std::string dir = [] {
    std::string base = std::filesystem::is_directory("/dev/shm") ? "/dev/shm" : "/tmp";
    std::string tmpl = base + "/dspipe-fuzz-XXXXXX";
    if (mkdtemp(tmpl.data()) == nullptr) {
      std::perror("mkdtemp");
      std::abort();
    }
    static std::string keep = tmpl;
    std::atexit([] {
      std::error_code ec;
      std::filesystem::remove_all(keep, ec);
    });
    return tmpl;
  }();
  return dir;
}

inline void WriteBytes(const std::string& path, const void* data, size_t size) {
  FILE* f = std::fopen(path.c_str(), "wb");
  if (f == nullptr || (size > 0 && std::fwrite(data, 1, size, f) != size) ||
      std::fclose(f) != 0) {
    std::perror(path.c_str());
    std::abort();
  }
}

inline void ResetDir(const std::string& path) {
  std::error_code ec;
  std::filesystem::remove_all(path, ec);
  std::filesystem::create_directories(path, ec);
  if (ec) {
    std::fprintf(stderr, "create %s: %s\n", path.c_str(), ec.message().c_str());
    std::abort();
  }
}

// A harness found a broken invariant (not just a crash): report it the libFuzzer way.
#define DSPIPE_FUZZ_CHECK(cond)                                                   \
  do {                                                                            \
    if (!(cond)) {                                                                \
      std::fprintf(stderr, "%s:%d: invariant failed: %s\n", __FILE__, __LINE__, #cond); \
      std::abort();                                                               \
    }                                                                             \
  } while (0)

}  // namespace dspipe::fuzz
