// SPDX-License-Identifier: Apache-2.0
// The cache state a dataset opened by OpenDatasetCached carries, and how the Loader (and
// dsbench's counting wrapper) finds it: a CachedDataset wraps the dataset read in place together
// with its background copy (OpenMode::overlap: CacheCopy) or its per-shard cache
// (OpenMode::per_shard: ShardCache), and CacheStateOf asks a Dataset for it. Internal to
// dspipe (lib/ and tests); the public side is OpenDatasetCached and Loader::reading_from().
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "dspipe/cache.h"
#include "dspipe/dataset.h"
#include "dspipe/status.h"

namespace dspipe::cache {

// The copy of a dataset into the cache made on a background thread while the dataset is read in
// place (OpenMode::overlap). It belongs to the in-place dataset OpenDatasetCached returned:
// when the last reference to that dataset goes, a copy still running is cancelled (its temp dir
// removed, no entry left; a temp dir a kill leaves is an orphan the next start removes) and the
// thread is joined. Thread-safe.
class CacheCopy {
 public:
  enum class State {
    kCopying,  // being made (or waiting for another process that makes it)
    kCached,   // committed: cached() is the dataset opened from the copy
    kInPlace,  // not cached: the cache did not take it or the copy failed (result().reason)
  };
  virtual ~CacheCopy() = default;
  virtual State state() const = 0;
  // kCached: the copy, opened with the same DatasetOpenOptions, holding the entry's lease for
  // as long as it lives; null otherwise.
  virtual std::shared_ptr<const Dataset> cached() const = 0;
  // The decision, once made (state() != kCopying): as AcquireCache's, with copy_seconds the
  // background copy's time; in place: the reason (a failed copy: its error).
  virtual CacheResult result() const = 0;
  // Blocks until state() != kCopying and returns it (tests; dsbench before it exits).
  virtual State Wait() const = 0;
};

// OpenMode::per_shard: the entries of one dataset's shards (each entry is a shard's
// directory, cached by the same rules as a whole dataset: identity, budget, lock, lease, LRU,
// verify). It belongs to the dataset OpenDatasetCached returned (and to the datasets Reopen
// makes): the last of them cancels a copy in progress and releases the leases. Thread-safe.
class ShardCache {
 public:
  virtual ~ShardCache() = default;
  // Asks for these shards (indices in manifest order, as Sampler::EpochShards gives them), in
  // this order. A shard whose entry exists is leased at once (before Want returns); the others
  // are copied one at a time on the background thread (nice +10). Shards asked for before are
  // skipped. A shard the cache does not take, or whose copy fails, stays in place (one log line).
  virtual void Want(const std::vector<uint64_t>& shards) = 0;
  // Blocks until every shard asked for is decided (tests; benches).
  virtual void Wait() const = 0;
  // Shards with a leased entry now.
  virtual size_t cached_count() const = 0;
  // The dataset opened again (lazy, the same options): its shards not opened yet resolve to
  // their entries as they are now. The Loader calls it at an epoch boundary when cached_count()
  // grew, since a shard opened in place stays so for the dataset that opened it.
  virtual Status Reopen(std::shared_ptr<const Dataset>* out) const = 0;
  // "2 of 6 shards cached (4 asked for)".
  virtual std::string Describe() const = 0;
};

// What a streamed dataset has fetched and waited for so far (ShardStream::stats).
struct StreamStats {
  uint64_t fetches = 0;          // shards fetched into the cache (entries made by this stream)
  uint64_t fetched_bytes = 0;    // their bytes (what came over the network)
  uint64_t found = 0;            // shards found in the cache already (no request)
  uint64_t evictions = 0;        // shards this stream released to make room (furthest next use)
  uint64_t hits = 0;             // shard reads that found their shard cached
  uint64_t waits = 0;            // shard reads that waited for their shard's fetch
  double wait_seconds = 0;       // their total wait: the time the reader waited on the network
  uint64_t held_bytes = 0;       // bytes of the shards cached (or being fetched) now
  uint64_t peak_held_bytes = 0;  // the most the directory may have held for it at once
  uint64_t limit_bytes = 0;      // the bound held_bytes never exceeds
};

// OpenMode::stream over a remote sharded dataset (s3:// or http(s)://, docs/STORAGE.md
// "Streaming"): each shard is an entry of the cache, fetched when the reader's order needs it
// (a bounded number ahead, in parallel) and released when room is needed, the one whose next use
// in the order is furthest away first (Belady). The dataset's reads wait for their shard.
// Thread-safe.
class ShardStream {
 public:
  virtual ~ShardStream() = default;
  // The order the reader reads from now on: the dataset indices of this epoch's positions
  // (`current`, read from position 0), then the next epoch's (`next`), for the fetch-ahead
  // across the boundary. Replaces the previous order; positions restart at 0.
  virtual void SetOrder(const std::vector<uint64_t>& current,
                        const std::vector<uint64_t>& next) = 0;
  // The reader is done with the positions before `position` of the current order.
  virtual void Advance(uint64_t position) = 0;
  virtual StreamStats stats() const = 0;
  // "streaming: 3 of 8 shards cached (7.1 of 9.0 MiB), 5 fetched, 2 ahead".
  virtual std::string Describe() const = 0;
};

// What a dataset read in place carries from the cache: at most one of them is set.
struct CacheState {
  std::shared_ptr<CacheCopy> copy;      // OpenMode::overlap: the copy being made
  std::shared_ptr<ShardCache> shards;   // OpenMode::per_shard: the shards' entries
  std::shared_ptr<ShardStream> stream;  // OpenMode::stream: the remote shards streamed
};

// A dataset that carries a CacheState: every Dataset call goes to `inner`. Destroying it drops
// `inner` first, then the state (the last reference to a copy cancels it and joins its thread).
class CachedDataset final : public Dataset {
 public:
  CachedDataset(std::shared_ptr<const Dataset> inner, CacheState state)
      : state_(std::move(state)), inner_(std::move(inner)) {}

  const CacheState& cache_state() const { return state_; }
  const Dataset& inner() const { return *inner_; }

  const DatasetInfo& info() const override { return inner_->info(); }
  Status Read(uint64_t index, const std::function<Status(const RecordView&)>& fn) const override {
    return inner_->Read(index, fn);
  }
  void WillNeed(std::span<const uint64_t> indices) const override { inner_->WillNeed(indices); }
  std::string KeyName(uint64_t index) const override { return inner_->KeyName(index); }
  Status ReadRecordTable(
      std::string_view table,
      const std::function<Status(uint64_t index, std::string_view value)>& fn) const override {
    return inner_->ReadRecordTable(table, fn);
  }
  Status ReadRecordTableEntry(std::string_view table, uint64_t index, std::string* value,
                              bool* found) const override {
    return inner_->ReadRecordTableEntry(table, index, value, found);
  }

 private:
  const CacheState state_;  // declared first: destroyed after inner_
  const std::shared_ptr<const Dataset> inner_;
};

// The state `dataset` carries when it is a CachedDataset (OpenDatasetCached with overlap or
// per_shard, or a wrapper made like one, as dsbench's); empty otherwise.
inline CacheState CacheStateOf(const Dataset& dataset) {
  const auto* cached = dynamic_cast<const CachedDataset*>(&dataset);
  return cached ? cached->cache_state() : CacheState{};
}

// How OpenDatasetCached makes the copy, beyond CacheOptions: the Loader's choices
// (OpenLoaderDataset sets them from LoaderOptions::cache_overlap and the sampler's order).
struct OpenMode {
  // Local sources: when the dataset is not in the cache yet, return the dataset opened in place
  // at once, carrying the copy (CacheState::copy) made (or waited for, while another process
  // makes it) on a background thread at lower CPU priority (nice +10), instead of before
  // returning. The Loader switches to the copy at the first epoch boundary after it is ready. A
  // copy that fails is logged in one line and the dataset stays in place. CacheOptions::env
  // (when set) must outlive the copy (the returned dataset and what holds it). An entry that
  // exists is opened as without overlap.
  bool overlap = false;
  // A local sharded dataset opened with lazy_shards (order kShards): one cache entry per shard
  // instead of one for the dataset, each made only when asked for (CacheState::shards->Want),
  // on a background thread as with `overlap`. Each shard is opened from its entry when the entry
  // is there at its first read, else in place (docs/CACHE.md "Order shards").
  bool per_shard = false;
  // A remote (s3://, http(s)://) sharded dataset, read in an order that keeps few shards in
  // use at once (the Loader sets it for orders kShards and kBlocks): streamed shard by shard
  // through the cache (CacheState::stream) instead of fetched whole before the first read. A
  // global order over a remote dataset the cache cannot hold is refused, naming these orders.
  bool stream = false;
  // OpenMode::stream: shards fetched at once ahead of the reader (>= 1). The cache limit must
  // hold this many shards plus the one being read.
  int stream_ahead = 2;
};

// dspipe::OpenDatasetCached (dspipe/cache.h) with `mode`; the public one is this with OpenMode{}.
Status OpenDatasetCached(const std::string& path, const DatasetOpenOptions& open_options,
                         CacheOptions cache_options, const OpenMode& mode,
                         const std::function<uint64_t(const DatasetInfo&)>& pipeline_bytes,
                         std::shared_ptr<const Dataset>* out, CacheResult* result = nullptr);

}  // namespace dspipe::cache
