// SPDX-License-Identifier: Apache-2.0
// A resource timeline: process CPU, memory, storage reads and page faults, loader progress and
// (when a GPU and its driver are present) GPU utilization and memory, sampled at a fixed period
// on a background thread — the "CSV performance log, plotted afterwards" as a library.
// Sources: /proc/self/stat (CPU ticks, major faults), /proc/self/io (read_bytes: bytes this
// process caused to be read from storage), /proc/self/status (VmRSS), and NVML loaded with
// dlopen("libnvidia-ml.so.1") at run time, so nothing links against or needs a driver.
// Docs: docs/STATS.md ("Resource timeline"); dsbench --sample-ms / --timeline-csv.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace dspipe {

// One sample; rates and deltas cover the interval since the previous sample (the first sample is
// the baseline at Start: deltas 0).
struct ResourceSample {
  double t_s = 0;             // seconds since the timeline started
  double cpu_user_pct = 0;    // process user CPU over the interval, % of one core (200 = 2 cores)
  double cpu_system_pct = 0;  // process system CPU, same unit
  uint64_t rss_bytes = 0;     // resident set size at the sample (VmRSS)
  uint64_t read_bytes = 0;    // bytes read from storage in the interval (/proc/self/io read_bytes)
  uint64_t major_faults = 0;  // major page faults in the interval
  uint64_t images = 0;        // images delivered in the interval (from the progress callback)
  double images_per_s = 0;    // images / interval
  double wait_ms = 0;         // consumer time blocked waiting for batches in the interval
  // GPU 0, present only when NVML loaded and answered: utilization % over the driver's last
  // sample period, and memory used. Absent (not zero) without a GPU or driver.
  std::optional<double> gpu_util_pct;
  std::optional<double> gpu_mem_used_mb;
};

struct TimelineOptions {
  // Sampling period in milliseconds, >= 1. Default 500.
  int sample_ms = 500;
  // Look for a GPU through NVML (dlopen). Default true; without a driver the GPU fields stay
  // absent.
  bool gpu = true;
};

// Cumulative progress counters the timeline turns into per-interval figures: images delivered
// and nanoseconds the consumer waited, both since the start of the measured part. Must be
// thread-safe (called from the sampling thread).
using ProgressFn = std::function<void(uint64_t* images, uint64_t* wait_ns)>;

class ResourceTimeline {
 public:
  // Takes the baseline sample and starts the sampling thread. progress may be empty.
  explicit ResourceTimeline(const TimelineOptions& options, ProgressFn progress = {});
  ~ResourceTimeline();  // stops (Stop) if still running
  ResourceTimeline(const ResourceTimeline&) = delete;
  ResourceTimeline& operator=(const ResourceTimeline&) = delete;

  // Takes a final sample and joins the thread. Idempotent. After Stop, samples() has at least
  // two entries (baseline + final).
  void Stop();
  // A copy of the samples so far, in time order. Thread-safe.
  std::vector<ResourceSample> samples() const;
  // Whether NVML was found and a GPU answered (then the GPU fields are filled).
  bool gpu_available() const;
  // NowNs() at the baseline sample (t_s = 0), to place samples on other NowNs-based clocks.
  uint64_t start_ns() const;
  const TimelineOptions& options() const { return options_; }

 private:
  struct Impl;
  TimelineOptions options_;
  std::unique_ptr<Impl> impl_;
};

}  // namespace dspipe
