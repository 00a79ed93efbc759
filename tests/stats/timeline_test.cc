// SPDX-License-Identifier: Apache-2.0
// ResourceTimeline: real /proc samples of this process; no GPU fields without NVML and a GPU.
#include "dspipe/timeline.h"

#include <dlfcn.h>
#include <fcntl.h>
#include <unistd.h>
#include <gtest/gtest.h>

#include <atomic>
#include <cstdio>
#include <vector>

namespace dspipe {
namespace {

bool NvmlPresent() {
  void* lib = ::dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
  if (lib != nullptr) ::dlclose(lib);
  return lib != nullptr;
}

TEST(ResourceTimeline, SamplesExistAndTimestampsIncrease) {
  std::atomic<uint64_t> images{0};
  TimelineOptions o;
  o.sample_ms = 1;
  ResourceTimeline timeline(o, [&](uint64_t* n, uint64_t* wait_ns) {
    *n = images.load();
    *wait_ns = 0;
  });
  // Work the sampler can see: CPU, and memory touched page by page.
  std::vector<char> block(8 << 20);
  volatile unsigned sum = 0;
  for (size_t i = 0; i < block.size(); i += 4096) {
    block[i] = static_cast<char>(i);
    sum = sum + static_cast<unsigned char>(block[i]);
  }
  images.store(40);
  timeline.Stop();
  timeline.Stop();  // idempotent
  const std::vector<ResourceSample> s = timeline.samples();
  ASSERT_GE(s.size(), 2u) << "baseline + final sample";
  uint64_t total_images = 0;
  for (size_t i = 0; i < s.size(); ++i) {
    EXPECT_GT(s[i].rss_bytes, 0u) << i;
    EXPECT_GE(s[i].cpu_user_pct, 0) << i;
    if (i > 0) {
      EXPECT_GT(s[i].t_s, s[i - 1].t_s) << i;
    }
    total_images += s[i].images;
  }
  EXPECT_EQ(total_images, 40u) << "per-interval images add up to the cumulative count";
  EXPECT_EQ(s[0].images, 0u) << "the baseline has no interval";
  if (!timeline.gpu_available()) {
    for (const ResourceSample& x : s) {
      EXPECT_FALSE(x.gpu_util_pct.has_value());
      EXPECT_FALSE(x.gpu_mem_used_mb.has_value());
    }
  }
  if (!NvmlPresent()) {
    EXPECT_FALSE(timeline.gpu_available());
  }
}

TEST(ResourceTimeline, CountsBytesReadFromStorage) {
  // A file written and dropped from the page cache is read back from the device.
  char path[] = "/tmp/dspipe-timeline-XXXXXX";
  const int fd = ::mkstemp(path);
  ASSERT_GE(fd, 0);
  std::vector<char> data(4 << 20, 'x');
  ASSERT_EQ(::write(fd, data.data(), data.size()), static_cast<ssize_t>(data.size()));
  ::fsync(fd);
  ::posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
  TimelineOptions o;
  o.sample_ms = 1000;
  o.gpu = false;
  ResourceTimeline timeline(o);
  ssize_t got = ::pread(fd, data.data(), data.size(), 0);
  timeline.Stop();
  ::close(fd);
  ::unlink(path);
  ASSERT_EQ(got, static_cast<ssize_t>(data.size()));
  uint64_t read = 0;
  for (const ResourceSample& x : timeline.samples()) {
    read += x.read_bytes;
    EXPECT_FALSE(x.gpu_util_pct.has_value()) << "gpu = false";
  }
  if (read == 0) GTEST_SKIP() << "/proc/self/io read_bytes stayed 0 (cache drop ignored here)";
  EXPECT_GE(read, data.size() / 2);
}

}  // namespace
}  // namespace dspipe
