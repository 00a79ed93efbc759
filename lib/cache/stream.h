// SPDX-License-Identifier: Apache-2.0
// Internal to lib/cache: OpenMode::stream, a remote sharded dataset streamed shard by shard
// through the cache (stream.cc; the rules are in docs/STORAGE.md "Streaming").
#pragma once

#include <memory>

#include "cache/cached_dataset.h"
#include "cache/populate.h"
#include "dspipe/cache.h"
#include "dspipe/dataset.h"
#include "dspipe/status.h"

namespace dspipe::cache {

// True when a served dataset's manifest (listing.manifest) names shards.
bool IsShardedManifest(const SourceListing& listing);

// Opens the sharded dataset `listing` describes (ListUrlSource) for streaming: nothing is
// fetched yet. The returned dataset is a CachedDataset whose CacheState::stream is the
// ShardStream; each Read waits for its shard. Each shard is one cache entry (the shard's URL +
// the dataset manifest's sha256: a rebuilt dataset gets new entries), its files fetched one by
// one and verified against the manifest (size, sha256). At most `ahead` shards are fetched at
// once, and the shards held (each with its EntryOverhead) never exceed the limit:
// CacheOptions::cache_limit, else the budget (what the cache dir's filesystem and RAM leave, plus
// what this dataset's entries hold). Each fetch's room check counts the stream's own bytes and
// the entries no process uses against the limit (StreamRoom, budget.h). A limit below
// (ahead + 1) x the largest shard is InvalidArgument naming the minimum; no usable cache dir is
// UrlNotCachedError.
Status OpenStream(const SourceListing& listing, const DatasetOpenOptions& open_options,
                  const CacheOptions& cache_options, int ahead, std::shared_ptr<const Dataset>* out,
                  CacheResult* result);

}  // namespace dspipe::cache
