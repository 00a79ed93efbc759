// SPDX-License-Identifier: Apache-2.0
// DataSwitch: which dataset the loader's new tasks read, and when that changes. What
// OpenDatasetCached attached to the dataset decides (cache/cached_dataset.h):
//   - nothing: the dataset as opened, always;
//   - a background copy into the cache (OpenMode::overlap): the copy, from the first epoch that
//     starts after it committed;
//   - the per-shard cache (OpenMode::per_shard): each epoch asks for its shards and the next
//     epoch's, and starts on the dataset opened again when more shards are cached;
//   - the remote shards' stream (OpenMode::stream): told each epoch's order and the next's, and
//     the position, so it fetches ahead and evicts behind.
// A switch happens only where LoaderImpl calls StartEpoch: an epoch boundary with nothing in
// flight, on the consumer thread. Every dataset it switched away from stays open (a dataset()
// reference taken before stays valid). Not thread-safe: the consumer's calls only.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "cache/cached_dataset.h"
#include "dspipe/dataset.h"
#include "dspipe/sampler.h"

namespace dspipe::loader {

class DataSwitch {
 public:
  // opened: the dataset as OpenLoaderDataset returned it (maybe a CachedDataset).
  // cache_overlap: LoaderOptions::cache_overlap (false: the shards an epoch asks for are copied
  // before it reads).
  DataSwitch(std::shared_ptr<const Dataset> opened, bool cache_overlap);

  // The dataset as opened: the data's identity and the path the state names.
  const Dataset& origin() const { return *origin_; }
  // The dataset new tasks read.
  const std::shared_ptr<const Dataset>& current() const { return current_; }

  // At creation, epoch 0: asks the per-shard cache for its shards, tells the stream its order.
  void Plan(const Sampler& sampler, uint64_t epoch);
  // Epoch `epoch` starts with nothing in flight: switches to the cache's copy or a dataset
  // opened again when one is ready (with as many records as current()), then plans as Plan.
  // True when current() changed.
  bool StartEpoch(const Sampler& sampler, uint64_t epoch);
  // The consumer's position in the epoch (samples handed out): the stream evicts behind it.
  void Advance(uint64_t position);

  // current()'s path and where it reads from, e.g. "PATH (cache, since epoch 2)".
  std::string Describe() const;
  // Blocks until the background copy, or the shard copies asked for so far, are done.
  void WaitForCopies() const;

 private:
  // The stream fetches along this epoch's order and the next's, and evicts the shard used
  // furthest ahead; Advance tells it the position. Nothing without a stream.
  void OrderStream(const Sampler& sampler, uint64_t epoch);
  void WantShards(const Sampler& sampler, uint64_t epoch);
  bool SwitchShardsIfReady(const Sampler& sampler, uint64_t epoch);
  bool SwitchToCopyIfReady(uint64_t epoch);

  const std::shared_ptr<const Dataset> origin_;
  std::shared_ptr<const Dataset> current_;
  const bool cache_overlap_;
  const std::shared_ptr<cache::CacheCopy> copy_;
  bool on_copy_ = false;     // current_ is the cache's copy
  uint64_t copy_epoch_ = 0;  // the first epoch read from it
  const std::shared_ptr<cache::ShardCache> shards_;
  size_t shards_cached_at_open_ = 0;  // shards cached when current_ was opened
  const std::shared_ptr<cache::ShardStream> stream_;
  std::vector<std::shared_ptr<const Dataset>> retired_;  // reopened before current_
};

}  // namespace dspipe::loader
