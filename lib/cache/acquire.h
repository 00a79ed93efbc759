// SPDX-License-Identifier: Apache-2.0
// Internal to lib/cache: the one function that decides, makes or finds an entry for a source
// (AcquireImpl: lock, trust check, room + reservation, copy, completion record, commit, lease),
// shared by AcquireCache, OpenDatasetCached and the background copies (background.cc).
#pragma once

#include <memory>
#include <string>

#include "cache/budget.h"
#include "cache/populate.h"
#include "dspipe/cache.h"
#include "dspipe/dataset.h"
#include "dspipe/status.h"

namespace dspipe::cache {

struct AcquireArgs {
  // The source's listing, made by the caller (a URL's manifest is fetched once per open).
  const SourceListing* prelisted = nullptr;
  // A background copy's token: waiting for another process's lock then polls it, and the copy
  // stops when it is requested (CancelledError, no entry).
  const CancelToken* cancel = nullptr;
  // Take the entry only when it is there and complete now, without waiting for any lock and
  // without copying (ShardCache::Want on the training thread): otherwise OK with !cached and
  // nothing logged; the caller then asks the background thread.
  bool existing_only = false;
  // A streamed shard's room check (budget.h); null: CacheOptions::cache_limit's.
  const StreamRoom* stream = nullptr;
};

// AcquireCache's body. A URL that is not cached comes back OK with !cached and the reason, like
// a local source: the caller turns that into the error (UrlNotCachedError).
Status AcquireImpl(const std::string& source, const CacheOptions& options, const AcquireArgs& args,
                   CacheResult* result, std::unique_ptr<CacheLease>* lease);

// The error for a URL the cache did not take: the URL, the reason, the way out.
Status UrlNotCachedError(const std::string& url, const CacheResult& r);

// Opens the copy a committed CacheResult names; the lease lives as long as the dataset.
Status OpenCopy(const std::string& source, const CacheResult& r,
                const DatasetOpenOptions& open_options, std::unique_ptr<CacheLease> lease,
                std::shared_ptr<const Dataset>* out);

// Lists a local source and, with CacheOptions::masks, the masks LMDB as its side.
Status ListLocalSource(const std::string& source, const CacheOptions& options, SourceListing* out);

// The cache's own directory for a root: ROOT/dspipe-cache-v1.
std::string OwnDirPath(const std::string& root);

}  // namespace dspipe::cache
