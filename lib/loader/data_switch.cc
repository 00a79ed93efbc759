// SPDX-License-Identifier: Apache-2.0
// DataSwitch (data_switch.h): the loader's dataset as opened, its cache's copy, the dataset
// reopened as shards are cached, and the shard stream's plan.
#include "loader/data_switch.h"

#include <utility>

namespace dspipe::loader {

DataSwitch::DataSwitch(std::shared_ptr<const Dataset> opened, bool cache_overlap)
    : origin_(opened),
      current_(std::move(opened)),
      cache_overlap_(cache_overlap),
      copy_(cache::CacheStateOf(*current_).copy),
      shards_(cache::CacheStateOf(*current_).shards),
      stream_(cache::CacheStateOf(*current_).stream) {}

void DataSwitch::Plan(const Sampler& sampler, uint64_t epoch) {
  WantShards(sampler, epoch);
  OrderStream(sampler, epoch);
}

bool DataSwitch::StartEpoch(const Sampler& sampler, uint64_t epoch) {
  const bool reopened = SwitchShardsIfReady(sampler, epoch);
  const bool copied = SwitchToCopyIfReady(epoch);
  OrderStream(sampler, epoch);
  return reopened || copied;
}

void DataSwitch::OrderStream(const Sampler& sampler, uint64_t epoch) {
  if (stream_) stream_->SetOrder(sampler.EpochOrder(epoch), sampler.EpochOrder(epoch + 1));
}

void DataSwitch::Advance(uint64_t position) {
  if (stream_) stream_->Advance(position);
}

// The copy holds the same records (verified against the same listing), so the batches are
// byte-identical; the in-place dataset stays open (origin_).
bool DataSwitch::SwitchToCopyIfReady(uint64_t epoch) {
  if (!copy_ || on_copy_ || copy_->state() != cache::CacheCopy::State::kCached) return false;
  std::shared_ptr<const Dataset> copy = copy_->cached();
  if (!copy || copy->size() != current_->size()) return false;
  current_ = std::move(copy);
  on_copy_ = true;
  copy_epoch_ = epoch;
  return true;
}

// Order kShards with the per-shard cache: this epoch's shards and the next epoch's (copied in
// that order in the background; those already cached are leased at once).
void DataSwitch::WantShards(const Sampler& sampler, uint64_t epoch) {
  if (!shards_) return;
  shards_->Want(sampler.EpochShards(epoch));
  shards_->Want(sampler.EpochShards(epoch + 1));
  // cache_overlap = false: the copies are made before the epoch reads, as without shards.
  if (!cache_overlap_) shards_->Wait();
}

// A shard opened in place stays in place for the dataset that opened it, so when more shards
// are cached than when current_ was opened, the epoch reads a dataset opened again (lazily:
// each shard from its entry when there).
bool DataSwitch::SwitchShardsIfReady(const Sampler& sampler, uint64_t epoch) {
  if (!shards_) return false;
  WantShards(sampler, epoch);
  const size_t n = shards_->cached_count();
  if (n == shards_cached_at_open_) return false;
  std::shared_ptr<const Dataset> ds;
  if (!shards_->Reopen(&ds).ok() || ds->size() != current_->size()) return false;
  // Kept, as origin_ is. At most one per shard (a reopen needs one more cached shard).
  if (current_ != origin_) retired_.push_back(std::move(current_));
  current_ = std::move(ds);
  shards_cached_at_open_ = n;
  return true;
}

std::string DataSwitch::Describe() const {
  const std::string& path = current_->info().path;
  if (shards_) return path + " (" + shards_->Describe() + ")";
  if (stream_) return path + " (" + stream_->Describe() + ")";
  if (!copy_) return path;
  if (on_copy_) return path + " (cache, since epoch " + std::to_string(copy_epoch_) + ")";
  switch (copy_->state()) {
    case cache::CacheCopy::State::kCopying:
      return path + " (in place, copying into the cache)";
    case cache::CacheCopy::State::kCached:
      return path + " (in place, the cache's copy is ready: used from the next epoch)";
    case cache::CacheCopy::State::kInPlace:
      break;
  }
  return path + " (in place: " + copy_->result().reason + ")";
}

void DataSwitch::WaitForCopies() const {
  if (copy_) (void)copy_->Wait();
  if (shards_) shards_->Wait();
}

}  // namespace dspipe::loader
