// SPDX-License-Identifier: Apache-2.0
#include "dspipe/timeline.h"

#include <dlfcn.h>
#include <unistd.h>

#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <mutex>
#include <sstream>
#include <thread>

#include "dspipe/stats.h"

namespace dspipe {
namespace {

// Cumulative process counters from /proc/self.
struct ProcCounters {
  uint64_t utime_ticks = 0, stime_ticks = 0, major_faults = 0;
  uint64_t read_bytes = 0, rss_bytes = 0;
};

std::string Slurp(const char* path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// Value of "key<sep> N" in a /proc key/value file, or 0.
uint64_t Field(const std::string& text, const char* key) {
  const size_t at = text.find(key);
  if (at == std::string::npos) return 0;
  unsigned long long v = 0;
  std::sscanf(text.c_str() + at + std::strlen(key), "%*[: \t]%llu", &v);
  return v;
}

ProcCounters ReadProc() {
  ProcCounters c;
  // /proc/self/stat: "pid (comm) state ..." — comm may hold spaces; fields resume after ')'.
  // After it: state(3) ppid pgrp session tty_nr tpgid flags minflt cminflt majflt(12) cmajflt
  // utime(14) stime(15).
  const std::string stat = Slurp("/proc/self/stat");
  const size_t close = stat.rfind(')');
  if (close != std::string::npos) {
    unsigned long long majflt = 0, utime = 0, stime = 0;
    if (std::sscanf(stat.c_str() + close + 1,
                    " %*c %*d %*d %*d %*d %*d %*u %*u %*u %llu %*u %llu %llu", &majflt, &utime,
                    &stime) == 3) {
      c.major_faults = majflt;
      c.utime_ticks = utime;
      c.stime_ticks = stime;
    }
  }
  c.read_bytes = Field(Slurp("/proc/self/io"), "\nread_bytes");
  c.rss_bytes = Field(Slurp("/proc/self/status"), "\nVmRSS") * 1024;
  return c;
}

// NVML, resolved at run time. Only the calls and structs used here are declared (NVML's C ABI,
// stable since the _v2 entry points).
class Nvml {
 public:
  Nvml() {
    lib_ = ::dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
    if (lib_ == nullptr) return;
    auto sym = [&](const char* name) { return ::dlsym(lib_, name); };
    init_ = reinterpret_cast<int (*)()>(sym("nvmlInit_v2"));
    shutdown_ = reinterpret_cast<int (*)()>(sym("nvmlShutdown"));
    handle_ = reinterpret_cast<int (*)(unsigned, void**)>(sym("nvmlDeviceGetHandleByIndex_v2"));
    util_ = reinterpret_cast<int (*)(void*, Utilization*)>(sym("nvmlDeviceGetUtilizationRates"));
    mem_ = reinterpret_cast<int (*)(void*, Memory*)>(sym("nvmlDeviceGetMemoryInfo"));
    if (!init_ || !shutdown_ || !handle_ || !util_ || !mem_ || init_() != 0) return;
    initialized_ = true;
    ok_ = handle_(0, &device_) == 0;
  }
  ~Nvml() {
    if (initialized_) shutdown_();
    if (lib_ != nullptr) ::dlclose(lib_);
  }
  bool ok() const { return ok_; }
  void Sample(ResourceSample* s) {
    if (!ok_) return;
    Utilization u{};
    if (util_(device_, &u) == 0) s->gpu_util_pct = u.gpu;
    Memory m{};
    if (mem_(device_, &m) == 0) s->gpu_mem_used_mb = static_cast<double>(m.used) / 1e6;
  }

 private:
  struct Utilization {
    unsigned int gpu, memory;
  };
  struct Memory {
    unsigned long long total, free, used;
  };
  void* lib_ = nullptr;
  void* device_ = nullptr;
  bool initialized_ = false, ok_ = false;
  int (*init_)() = nullptr;
  int (*shutdown_)() = nullptr;
  int (*handle_)(unsigned, void**) = nullptr;
  int (*util_)(void*, Utilization*) = nullptr;
  int (*mem_)(void*, Memory*) = nullptr;
};

}  // namespace

struct ResourceTimeline::Impl {
  ProgressFn progress;
  std::unique_ptr<Nvml> nvml;
  double tick_s = 0.01;
  uint64_t start_ns = 0;
  // Previous sample's cumulative values (sampling thread, and Stop after the join).
  uint64_t last_ns = 0;
  ProcCounters last;
  uint64_t last_images = 0, last_wait_ns = 0;

  mutable std::mutex mu;
  std::condition_variable cv;
  bool stop = false;
  bool stopped = false;
  std::vector<ResourceSample> samples;  // guarded by mu
  std::thread thread;

  void Take(bool baseline) {
    const uint64_t now = NowNs();
    const ProcCounters c = ReadProc();
    uint64_t images = 0, wait_ns = 0;
    if (progress) progress(&images, &wait_ns);
    ResourceSample s;
    s.t_s = static_cast<double>(now - start_ns) * 1e-9;
    s.rss_bytes = c.rss_bytes;
    if (!baseline) {
      const double dt = static_cast<double>(now - last_ns) * 1e-9;
      const double secs = dt > 0 ? dt : 1e-9;
      s.cpu_user_pct =
          static_cast<double>(c.utime_ticks - last.utime_ticks) * tick_s / secs * 100.0;
      s.cpu_system_pct =
          static_cast<double>(c.stime_ticks - last.stime_ticks) * tick_s / secs * 100.0;
      s.read_bytes = c.read_bytes - last.read_bytes;
      s.major_faults = c.major_faults - last.major_faults;
      s.images = images - last_images;
      s.images_per_s = static_cast<double>(s.images) / secs;
      s.wait_ms = static_cast<double>(wait_ns - last_wait_ns) * 1e-6;
    }
    if (nvml) nvml->Sample(&s);
    last_ns = now;
    last = c;
    last_images = images;
    last_wait_ns = wait_ns;
    std::lock_guard<std::mutex> lock(mu);
    samples.push_back(s);
  }
};

ResourceTimeline::ResourceTimeline(const TimelineOptions& options, ProgressFn progress)
    : options_(options), impl_(std::make_unique<Impl>()) {
  if (options_.sample_ms < 1) options_.sample_ms = 1;
  Impl& m = *impl_;
  m.progress = std::move(progress);
  if (options_.gpu) {
    m.nvml = std::make_unique<Nvml>();
    if (!m.nvml->ok()) m.nvml.reset();
  }
  const long hz = ::sysconf(_SC_CLK_TCK);
  m.tick_s = hz > 0 ? 1.0 / static_cast<double>(hz) : 0.01;
  m.start_ns = NowNs();
  m.Take(/*baseline=*/true);
  m.thread = std::thread([this] {
    Impl& i = *impl_;
    const auto period = std::chrono::milliseconds(options_.sample_ms);
    std::unique_lock<std::mutex> lock(i.mu);
    while (!i.cv.wait_for(lock, period, [&] { return i.stop; })) {
      lock.unlock();
      i.Take(false);
      lock.lock();
    }
  });
}

ResourceTimeline::~ResourceTimeline() { Stop(); }

void ResourceTimeline::Stop() {
  Impl& m = *impl_;
  {
    std::lock_guard<std::mutex> lock(m.mu);
    if (m.stopped) return;
    m.stop = true;
    m.stopped = true;
  }
  m.cv.notify_all();
  if (m.thread.joinable()) m.thread.join();
  m.Take(false);
}

std::vector<ResourceSample> ResourceTimeline::samples() const {
  std::lock_guard<std::mutex> lock(impl_->mu);
  return impl_->samples;
}

bool ResourceTimeline::gpu_available() const { return impl_->nvml != nullptr; }

uint64_t ResourceTimeline::start_ns() const { return impl_->start_ns; }

}  // namespace dspipe
