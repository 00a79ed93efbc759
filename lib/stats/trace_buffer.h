// SPDX-License-Identifier: Apache-2.0
// Internal: one thread's bounded trace buffer inside a StageStats.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>

#include "dspipe/stats.h"

namespace dspipe {
namespace stats {

struct TraceEvent {
  uint64_t start_ns;
  uint64_t dur_ns;
  uint64_t id;
  Stage stage;
};

}  // namespace stats

// Single writer (the owning thread) appends; readers take size with acquire and read [0, size).
// Events are never overwritten, so a reader never sees a half-written event.
struct StageStats::TraceBuffer {
  TraceBuffer(int thread_id, size_t cap)
      : tid(thread_id),
        capacity(cap),
        events(std::make_unique_for_overwrite<stats::TraceEvent[]>(cap)) {}

  void Append(const stats::TraceEvent& e) noexcept {
    const size_t n = size.load(std::memory_order_relaxed);  // only this thread writes it
    if (n >= capacity) {
      dropped.fetch_add(1, std::memory_order_relaxed);
      return;
    }
    events[n] = e;
    size.store(n + 1, std::memory_order_release);
  }

  const int tid;
  const size_t capacity;
  std::unique_ptr<stats::TraceEvent[]> events;
  std::atomic<size_t> size{0};
  std::atomic<uint64_t> dropped{0};
};

namespace stats {

// Name of a thread id set by SetThreadName, or "thread-<id>".
std::string ThreadNameOf(int tid);

}  // namespace stats

}  // namespace dspipe
