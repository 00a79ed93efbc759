// SPDX-License-Identifier: Apache-2.0
// fault_bench: how to get one large record's bytes resident before decoding it, from a cold page
// cache. Chooses the method the loader's `read` stage uses (lib/format/dataset.cc FaultIn).
//
//   fault_bench [--file PATH] [--count N] [--record-kb K] [--repeats R]
//
// Writes N records of K KiB of random bytes into PATH (reused when it has the right size), then
// R times per method: drops the file's page cache (posix_fadvise DONTNEED, checked with
// mincore), maps it with MADV_RANDOM (what LMDB's MDB_NORDAHEAD does) and visits the records in
// a shuffled order, reading one byte per 4 KiB page as a decoder would:
//   touch      nothing first: every 4 KiB page faults in on its own (today's behavior)
//   willneed   madvise(MADV_WILLNEED) over the record, then touch
//   populate   madvise(MADV_POPULATE_READ) over the record, then touch
//   pread      pread() the record into a buffer, then touch the buffer
//   both       MADV_WILLNEED, then MADV_POPULATE_READ (falls back to touch without it), touch
// Prints MB/s median (min-max) per method. Methods are interleaved within each repeat.
#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#ifndef MADV_POPULATE_READ
#define MADV_POPULATE_READ 22
#endif

namespace {

double Now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

double Resident(int fd, size_t size) {
  void* p = mmap(nullptr, size, PROT_READ, MAP_SHARED, fd, 0);
  if (p == MAP_FAILED) return -1;
  const size_t page = 4096, pages = (size + page - 1) / page;
  std::vector<unsigned char> vec(pages);
  double frac = -1;
  if (mincore(p, size, vec.data()) == 0) {
    size_t in = 0;
    for (unsigned char c : vec) in += c & 1;
    frac = static_cast<double>(in) / static_cast<double>(pages);
  }
  munmap(p, size);
  return frac;
}

}  // namespace

int main(int argc, char** argv) {
  std::string path = "/tmp/dspipe-fault-bench.bin";
  size_t count = 300, record_kb = 768;
  int repeats = 5;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string a = argv[i];
    if (a == "--file") path = argv[i + 1];
    else if (a == "--count") count = std::strtoul(argv[i + 1], nullptr, 10);
    else if (a == "--record-kb") record_kb = std::strtoul(argv[i + 1], nullptr, 10);
    else if (a == "--repeats") repeats = std::atoi(argv[i + 1]);
    else {
      std::fprintf(stderr, "unknown flag %s\n", a.c_str());
      return 2;
    }
  }
  const size_t rec = record_kb * 1024, size = rec * count;
  int fd = open(path.c_str(), O_RDWR | O_CREAT, 0644);
  if (fd < 0) return std::perror(path.c_str()), 1;
  if (static_cast<size_t>(lseek(fd, 0, SEEK_END)) != size) {
    std::mt19937_64 rng(1);
    std::vector<uint64_t> buf(rec / 8);
    if (ftruncate(fd, 0) != 0) return 1;
    for (size_t r = 0; r < count; ++r) {
      for (auto& w : buf) w = rng();
      if (pwrite(fd, buf.data(), rec, static_cast<off_t>(r * rec)) != static_cast<ssize_t>(rec))
        return std::perror("write"), 1;
    }
    fsync(fd);
  }
  std::vector<size_t> order(count);
  std::iota(order.begin(), order.end(), 0);
  std::shuffle(order.begin(), order.end(), std::mt19937_64(7));
  const char* names[] = {"touch", "willneed", "populate", "pread", "both"};
  constexpr int kMethods = 5;
  std::vector<std::vector<double>> mbs(kMethods);
  std::vector<char> buffer(rec);
  bool populate_ok = true;
  for (int r = 0; r < repeats; ++r) {
    for (int m = 0; m < kMethods; ++m) {
      fdatasync(fd);
      posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
      const double res = Resident(fd, size);
      if (res > 0.01) {
        std::fprintf(stderr, "page cache not dropped (%.0f%% resident): figures are warm\n",
                     res * 100);
      }
      auto* base = static_cast<char*>(mmap(nullptr, size, PROT_READ, MAP_SHARED, fd, 0));
      if (base == MAP_FAILED) return std::perror("mmap"), 1;
      madvise(base, size, MADV_RANDOM);
      volatile unsigned sum = 0;
      const double t0 = Now();
      for (size_t i : order) {
        char* p = base + i * rec;
        const char* src = p;
        if (m == 1 || m == 4) madvise(p, rec, MADV_WILLNEED);
        if (m == 4) madvise(p, rec, MADV_POPULATE_READ);
        if (m == 2 && madvise(p, rec, MADV_POPULATE_READ) != 0) populate_ok = false;
        if (m == 3) {
          if (pread(fd, buffer.data(), rec, static_cast<off_t>(i * rec)) !=
              static_cast<ssize_t>(rec))
            return std::perror("pread"), 1;
          src = buffer.data();
        }
        unsigned s = 0;
        for (size_t off = 0; off < rec; off += 4096) s += static_cast<unsigned char>(src[off]);
        sum = sum + s;
      }
      const double dt = Now() - t0;
      munmap(base, size);
      mbs[static_cast<size_t>(m)].push_back(static_cast<double>(size) / 1e6 / dt);
    }
  }
  std::printf("%zu records x %zu KiB, cold, shuffled order, %d repeats (MB/s median (min-max))\n",
              count, record_kb, repeats);
  for (int m = 0; m < kMethods; ++m) {
    auto v = mbs[static_cast<size_t>(m)];
    std::sort(v.begin(), v.end());
    std::printf("%-9s %8.1f (%.1f-%.1f)%s\n", names[m], v[v.size() / 2], v.front(), v.back(),
                m == 2 && !populate_ok ? "  [MADV_POPULATE_READ unsupported: EINVAL]" : "");
  }
  close(fd);
  return 0;
}
