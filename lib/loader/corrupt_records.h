// SPDX-License-Identifier: Apache-2.0
// CorruptRecords: the corrupt records a loader met (LoaderOptions::max_corrupt). Per epoch, how
// many and the first (an epoch whose every record read was corrupt ends with an error, never
// silently empty); over the loader's life, how many and which, for corrupt_records(). Note and
// the per-epoch queries are the consumer thread's; total() and Report() may be called from any
// thread.
#pragma once

#include <atomic>
#include <cstdint>
#include <mutex>
#include <string>

#include "dspipe/loader.h"
#include "dspipe/status.h"

namespace dspipe::loader {

class CorruptRecords {
 public:
  // A new epoch: its count and first record start over (the totals do not).
  void StartEpoch();
  // One corrupt record met, at `index` (its key `key`) in `epoch`, failing with `s`: counted,
  // and listed unless it is already or the list holds CorruptReport::kMaxListed. Returns the
  // epoch's count, this one included.
  uint64_t Note(uint64_t index, const std::string& key, uint64_t epoch, const Status& s);
  uint64_t in_epoch() const { return in_epoch_; }
  const Status& first_in_epoch() const { return first_in_epoch_; }
  uint64_t total() const { return total_.load(); }
  // The records listed so far, with `count` the total.
  CorruptReport Report() const;

 private:
  uint64_t in_epoch_ = 0;
  Status first_in_epoch_;
  std::atomic<uint64_t> total_{0};
  mutable std::mutex mu_;  // guards report_
  CorruptReport report_;   // count filled in by Report()
};

}  // namespace dspipe::loader
