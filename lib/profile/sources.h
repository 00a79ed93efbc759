// SPDX-License-Identifier: Apache-2.0
// Dataset adapters for dsbench. Internal to the profile component.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "dspipe/cache.h"
#include "dspipe/dataset.h"

namespace dspipe::profile {

// Records and stored bytes (header + payloads) read through one or more CountingDatasets.
struct ReadCounters {
  std::atomic<uint64_t> records{0};
  std::atomic<uint64_t> bytes{0};
};

// Wraps a dataset and counts the records and stored bytes (header + payloads) read through it
// into `counters`. One relaxed atomic add per read. Thread-safe like the wrapped dataset.
class CountingDataset : public Dataset {
 public:
  explicit CountingDataset(std::shared_ptr<const Dataset> inner,
                           std::shared_ptr<ReadCounters> counters = nullptr)
      : inner_(std::move(inner)),
        counters_(counters ? std::move(counters) : std::make_shared<ReadCounters>()) {}
  const DatasetInfo& info() const override { return inner_->info(); }
  Status Read(uint64_t index, const std::function<Status(const RecordView&)>& fn) const override;
  void WillNeed(std::span<const uint64_t> indices) const override { inner_->WillNeed(indices); }
  std::string KeyName(uint64_t index) const override { return inner_->KeyName(index); }

  uint64_t records() const { return counters_->records.load(std::memory_order_relaxed); }
  uint64_t bytes() const { return counters_->bytes.load(std::memory_order_relaxed); }

 private:
  std::shared_ptr<const Dataset> inner_;
  std::shared_ptr<ReadCounters> counters_;
};

// The counting wrapper over `inner`, which may have a background copy into the RAM-disk cache
// attached (cache::CacheStateOf, cache::OpenMode::overlap). Reads of `inner` count into `in_place`.
// With a copy, the wrapper carries an adapter of it (cache::CachedDataset): the Loader sees the
// copy through the wrapper and switches to it at an epoch boundary after it committed, and what it
// switches to is a CountingDataset over the copy counting into `cache`. Without one, the
// wrapper alone (nothing counts into `cache`).
std::shared_ptr<const Dataset> CountReads(std::shared_ptr<const Dataset> inner,
                                          std::shared_ptr<ReadCounters> in_place,
                                          std::shared_ptr<ReadCounters> cache);

// A folder of image (+ mask) files seen as a Dataset, so the real loader runs its own stages
// over it. Read() reads the files (into a per-thread buffer) and probes the image header for its
// size: the folder equivalent of an LMDB get + record header check; WillNeed asks the kernel to
// read the image and mask files ahead (POSIX_FADV_WILLNEED), as the LMDB datasets do for their
// records, so --compare puts both sources on the same footing. Thread-safe.
class FolderDataset : public Dataset {
 public:
  // src: anything `dsconvert build` accepts (images/+masks/ folder, CSV, ImageFolder). Items the
  // scan rejects (e.g. an image without its mask) are left out and counted in skipped().
  static Status Open(const std::string& src, std::unique_ptr<FolderDataset>* out);

  const DatasetInfo& info() const override { return info_; }
  Status Read(uint64_t index, const std::function<Status(const RecordView&)>& fn) const override;
  void WillNeed(std::span<const uint64_t> indices) const override;
  std::string KeyName(uint64_t index) const override;

  // Every image and mask file, for cache dropping and the on-disk size.
  std::vector<std::string> Files() const;
  uint64_t skipped() const { return skipped_; }

 private:
  struct Item {
    std::string image, mask;
    int label = -1;
  };
  DatasetInfo info_;
  std::vector<Item> items_;
  uint64_t skipped_ = 0;
};

// The LMDB data files (data.mdb) under a dataset path (a file, an LMDB directory, or a sharded
// dataset directory), sorted.
std::vector<std::string> DatasetFiles(const std::string& path);

}  // namespace dspipe::profile
