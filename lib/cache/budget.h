// SPDX-License-Identifier: Apache-2.0
// Internal to lib/cache: the budget, and the one room check + reservation that holds across
// processes.
//
// Budget: the smaller of the free space on the cache's filesystem and, on a tmpfs (whose pages
// are RAM), MemAvailable less the caller's own buffers (CacheOptions::reserved_ram), minus the
// margin. Room for an entry of `need` bytes is checked and reserved under ONE lock for the whole
// cache directory (budget.lock), so that processes copying different datasets at once cannot
// each find room for themselves in the same bytes:
//   need + reserved <= budget, and (with cache_limit) entries + reserved + need <= cache_limit,
// where `entries` is the bytes of the committed entries (their E.used) and `reserved` the
// bytes of every copy in progress in another process (its E.tmp/ whose E.lock is held: the size
// in E.tmp/.dspipe-reserved). Least recently used entries nobody holds are evicted (under the
// same lock) until it fits; the reservation is written before the lock is released. A copy in
// progress counts in full even where part of it already shows as used space (conservative:
// never more than the budget, at worst a dataset read in place that would have fitted).
// A dead process's reservation (its E.lock free) counts for nothing: its E.tmp/ is removed
// under the lock.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "cache/cache_dir.h"
#include "dspipe/cache.h"
#include "dspipe/status.h"

namespace dspipe::cache {

inline constexpr const char* kReservationName = ".dspipe-reserved";

// "12.0 MiB", "512 B".
std::string FormatBytes(uint64_t b);

struct Budget {
  uint64_t bytes = 0;
  std::string text;  // how it was computed, for the reason line
};
Status ComputeBudget(CacheDir& cd, const CacheOptions& o, Budget* b);

struct Room {
  bool fits = false;
  std::string why;                   // !fits: the reason line
  uint64_t budget = 0;               // the budget when it was computed
  std::vector<std::string> evicted;  // entry paths evicted to make room
};

// A streamed shard's room check (OpenStream): the stream bounds what it holds itself (its
// cached shards, its fetches in flight including this one, its deletions in progress, each
// counted with its entry's overhead), always within its limit. Against that limit the check
// counts only that and the entries no process uses (no E.lease or E.lock held: left by an
// earlier run), evicting those, least recently used first, until it fits. Entries other
// streams or processes hold, and their copies in progress, are within their own limits: ranks
// sharing one directory with limits that add up to what it may hold stream together. The
// budget (free space, RAM) is checked as for any copy.
struct StreamRoom {
  std::function<uint64_t()> held;  // the stream's bytes now (takes its lock briefly)
  uint64_t limit = 0;
  uint64_t entry_overhead = 0;  // counted for each entry beside its files (EntryOverhead)
};

// Takes budget.lock (waiting for it; it is held only for short steps). Whatever changes what the
// room check counts is done under it: the check and the reservation, eviction, and the commit
// of an entry (E.used written and E.tmp/ renamed to E/), so the check sees a copy either as a
// reservation or as an entry, never as neither (between its look at the entries and its look
// at the reservations).
Status LockBudget(CacheDir& cd, std::unique_ptr<FileLock>* lock);

// Under budget.lock: evicts until `need` fits (above) or nothing more can go. When it fits, makes
// E.tmp/ for entry `self` (removing what was there, unless keep_partial: a URL's partial fetch
// that this open resumes) and writes its reservation. The caller holds self's E.lock.
// With `stream`, the limit is checked as StreamRoom says (not CacheOptions::cache_limit).
Status ReserveRoom(CacheDir& cd, const std::string& self, uint64_t need, const CacheOptions& o,
                   bool keep_partial, Room* room, const StreamRoom* stream = nullptr);

}  // namespace dspipe::cache
