// SPDX-License-Identifier: Apache-2.0
#include "format/residency.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdint>
#include <vector>

#ifndef MADV_POPULATE_READ
#define MADV_POPULATE_READ 22  // Linux 5.14; older headers lack it
#endif

namespace dspipe::format {
namespace {

std::atomic<bool> g_populate_read{true};

size_t PageSize() {
  static const size_t page = [] {
    const long p = ::sysconf(_SC_PAGESIZE);
    return p > 0 ? static_cast<size_t>(p) : size_t{4096};
  }();
  return page;
}

// The page-aligned range covering [data, data + size).
bool PageRange(const void* data, size_t size, void** start, size_t* len) {
  if (data == nullptr || size == 0) return false;
  const size_t page = PageSize();
  const auto begin = reinterpret_cast<uintptr_t>(data);
  const uintptr_t aligned = begin & ~(uintptr_t{page} - 1);
  *start = reinterpret_cast<void*>(aligned);
  *len = size + (begin - aligned);
  return true;
}

}  // namespace

void AdviseWillNeed(const void* data, size_t size) {
  void* start = nullptr;
  size_t len = 0;
  if (PageRange(data, size, &start, &len)) (void)::madvise(start, len, MADV_WILLNEED);
}

void FaultIn(const void* data, size_t size) {
  void* start = nullptr;
  size_t len = 0;
  if (!PageRange(data, size, &start, &len)) return;
  (void)::madvise(start, len, MADV_WILLNEED);
  if (g_populate_read.load(std::memory_order_relaxed)) {
    if (::madvise(start, len, MADV_POPULATE_READ) == 0) return;
    if (errno != EINVAL) return;  // e.g. EFAULT/EIO: leave it to the reader's own access
    g_populate_read.store(false, std::memory_order_relaxed);
  }
  // Fallback: one read per page waits for the WILLNEED readahead page by page.
  const auto* p = static_cast<const volatile unsigned char*>(start);
  const size_t page = PageSize();
  unsigned char sink = 0;
  for (size_t off = 0; off < len; off += page) sink = static_cast<unsigned char>(sink + p[off]);
  (void)sink;
}

double ResidentFraction(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return -1;
  struct stat st;
  double fraction = -1;
  if (::fstat(fd, &st) == 0 && st.st_size > 0) {
    const auto size = static_cast<size_t>(st.st_size);
    void* p = ::mmap(nullptr, size, PROT_READ, MAP_SHARED, fd, 0);
    if (p != MAP_FAILED) {
      const size_t page = PageSize(), pages = (size + page - 1) / page;
      std::vector<unsigned char> vec(pages);
      if (::mincore(p, size, vec.data()) == 0) {
        size_t resident = 0;
        for (unsigned char c : vec) resident += c & 1u;
        fraction = static_cast<double>(resident) / static_cast<double>(pages);
      }
      ::munmap(p, size);
    }
  } else if (::fstat(fd, &st) == 0) {
    fraction = 0;
  }
  ::close(fd);
  return fraction;
}

bool PopulateReadSupported() { return g_populate_read.load(std::memory_order_relaxed); }

}  // namespace dspipe::format
