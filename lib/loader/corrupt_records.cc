// SPDX-License-Identifier: Apache-2.0
#include "loader/corrupt_records.h"

namespace dspipe::loader {

void CorruptRecords::StartEpoch() {
  in_epoch_ = 0;
  first_in_epoch_ = Status::OK();
}

uint64_t CorruptRecords::Note(uint64_t index, const std::string& key, uint64_t epoch,
                              const Status& s) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    bool listed = false;
    for (const CorruptRecord& r : report_.records) listed = listed || r.index == index;
    if (!listed) {
      if (report_.records.size() >= CorruptReport::kMaxListed) {
        report_.truncated = true;
      } else {
        report_.records.push_back({index, key, epoch, s.ToString(), s.path()});
      }
    }
  }
  total_.fetch_add(1);
  if (first_in_epoch_.ok()) first_in_epoch_ = s;
  return ++in_epoch_;
}

CorruptReport CorruptRecords::Report() const {
  std::lock_guard<std::mutex> lock(mu_);
  CorruptReport r = report_;
  r.count = total_.load();
  return r;
}

}  // namespace dspipe::loader
