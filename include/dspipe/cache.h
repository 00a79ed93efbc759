// SPDX-License-Identifier: Apache-2.0
// dspipe cache: a copy of a dataset on a RAM disk (tmpfs, /dev/shm by default), made once per
// machine and shared by every process that opens the same dataset.
//
//   dspipe::CacheOptions o;
//   o.mode = "auto";                         // /dev/shm/dspipe-cache-<uid>
//   dspipe::CacheResult r;
//   std::unique_ptr<dspipe::CacheLease> lease;
//   DSPIPE_RETURN_IF_ERROR(dspipe::AcquireCache("/content/drive/train.lmdb", o, &r, &lease));
//   Open(r.path);                            // the copy, or the source when r.cached is false
//
// Rules (docs/CACHE.md has the layout and the tests that prove each):
// - What it touches: the source is only read (O_RDONLY). Everything the cache writes, renames or
//   deletes is inside its own directory ROOT/dspipe-cache-v1/ (ROOT: the directory named by
//   `mode` or DSPIPE_CACHE_DIR, by default the per-user /dev/shm/dspipe-cache-<uid>, made 0700),
//   through that directory's descriptor: new files are created exclusively, no symlink is
//   followed, no computed name can leave it, and only names it can parse as its own
//   ("<base>-<16 hex>" and its .tmp/.lock/.lease/.used) are ever removed. Nothing beside
//   dspipe-cache-v1/ in ROOT is touched.
// - Whose: the cache directory (and the per-user ROOT) is checked by fstat at every open: owned
//   by us, not group/world-writable, marked as dspipe's; otherwise it is not used (in place, the
//   reason in the one log line). An entry is used only when its completion record (every file
//   with its size and crc32, written last, before the rename that commits it) matches.
// - Symlinks in a dataset are resolved deliberately: the copy holds a linked file's bytes, a
//   linked folder (symlinked shards) is entered. A dataset that cannot be copied as it is (a
//   FIFO or device in it, a link to nothing, a link loop) is read in place, with the reason.
// - Budget: the smaller of the free space on the cache's filesystem and, when that filesystem
//   is a tmpfs, the RAM left (MemAvailable) after the caller's own buffers (reserved_ram), minus
//   the margin. The room check and the reservation are made under ONE lock for the cache
//   directory, counting the copies other processes have in progress, so budget and cache_limit
//   hold across processes. A dataset that does not fit (or exceeds cache_limit even after
//   evicting) is used in place, and the reason is logged in one line and returned in
//   CacheResult::reason.
// - The copy is made in ENTRY.tmp on the cache's filesystem: every file's space is reserved
//   first (fallocate through the Env: a full tmpfs is an immediate ENOSPC naming the file, before
//   any byte is copied, never a SIGBUS later), the bytes are copied, sizes are checked against the
//   source (which must not have changed meanwhile), everything is fsynced, the completion record
//   is written, and ENTRY.tmp is renamed to ENTRY. ENTRY never exists incomplete; a crash leaves
//   only ENTRY.tmp.
// - ENTRY.lock (exclusive) is held while an entry is made, checked or evicted: several processes
//   (ranks) opening one dataset make ONE copy; the others wait, then use it. A temp dir whose
//   ENTRY.lock nobody holds belongs to a dead creator and is removed at the next start.
// - A CacheLease holds ENTRY.lease shared for its lifetime. Eviction (least recently used first,
//   to fit cache_limit or the budget) takes ENTRY.lock and ENTRY.lease exclusively without
//   waiting and skips the entry when either is held: an entry a live process reads is never
//   evicted. An evicted entry is renamed to ENTRY.tmp before it is deleted.
// - fork(): a child does not hold the exclusive locks its parent holds (they are closed there),
//   never waits for its parent's background copy, and reads in place what was not cached yet.
//
// Entry names: "<source basename>-<16 hex digits>", the digits from the sha256 of the source's
// canonical absolute path and every file's relative path, size and modification time (and the
// same of CacheOptions::masks, a plain LMDB's masks LMDB cached in the same entry), so a rebuilt
// or changed dataset gets a new entry (the old one ages out by LRU).
//
// A source may be the http(s):// or s3:// URL of a dataset directory (docs/CACHE.md "A dataset
// URL"): its listing comes from URL/manifest.json (identity = the URL + the manifest's sha256,
// bytes = the listed sizes, checked against the budget before any data file is requested), and
// it is populated with FetchDataset (every file verified). A URL is never read in place: mode
// "off" counts as "auto" for it, and a URL the cache does not take (no usable cache dir, over the
// budget or cache_limit) is an Unsupported error naming the URL, the reason and the way out
// (`dsconvert fetch URL DIR`, then open DIR; or make room).
//
// Thread-safety: AcquireCache may be called from several threads and processes at once.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "dspipe/dataset.h"
#include "dspipe/env.h"
#include "dspipe/status.h"

namespace dspipe {

struct CacheOptions {
  // "off" (default, as LoaderOptions::cache: nothing is copied unless asked): in place, except
  // for a URL (see above). "auto": cache in $DSPIPE_CACHE_DIR when set, else in
  // /dev/shm/dspipe-cache-<uid> (this user's, made 0700) when /dev/shm is a tmpfs, else use the
  // dataset in place; a directory "auto" chose that cannot be made or written is also "in place"
  // (with the reason), never a failed open. Anything else is a directory to cache in (created
  // when missing; an error when it cannot be); the RAM bound of the budget applies only when it
  // is on a tmpfs. Either way the cache lives in DIR/dspipe-cache-v1/ (see the rules).
  std::string mode = "off";
  // Capacity of the cache directory in bytes (the total of its entries); 0 (default) = no limit
  // but the budget. Least recently used entries that no live process holds are evicted to make
  // room; a dataset larger than this is used in place.
  uint64_t cache_limit = 0;
  // Bytes of the budget left unused (for the rest of the machine). Default 512 MiB.
  uint64_t margin = 512ull << 20;
  // RAM the caller's pipeline needs for itself (batch buffers, pinned memory), subtracted from
  // MemAvailable for a tmpfs cache. Default 0; the Loader passes its own estimate.
  uint64_t reserved_ram = 0;
  // The file system for every write, lock and removal; nullptr (default) = Env::Default().
  // Tests pass a fault-injecting Env. With the default Env the bytes are copied inside the kernel
  // (copy_file_range / sendfile); any other Env copies through its own read and write.
  Env* env = nullptr;
  // A plain LMDB's masks LMDB (PlainLmdbOptions::masks: a directory with data.mdb, or an LMDB
  // file), cached in the SAME entry as the source, at ENTRY/masks/<its basename>: its files are
  // part of the entry's identity (a changed masks LMDB gives a new entry) and of the bytes the
  // budget and cache_limit count, and it is reserved, copied, verified and committed with the
  // source (CacheResult::masks_path). Local sources only (ignored for a URL). Default "" (none);
  // OpenDatasetCached sets it from DatasetOpenOptions::plain.masks for a plain LMDB.
  std::string masks;
};

struct CacheResult {
  bool cached = false;      // `path` is the copy in the cache
  std::string path;         // what to open: the copy, or the source itself (in place)
  std::string entry;        // the entry directory; "" in place
  std::string reason;       // in place: why, one line ("cache off", "needs 2.1 GiB, budget ...")
  std::string masks_path;   // cached with CacheOptions::masks: the masks LMDB's copy; "" otherwise
  bool copied = false;      // this call made the copy (false: found it, maybe made by another rank)
  uint64_t bytes = 0;       // bytes of the dataset's files
  uint64_t budget = 0;      // bytes the cache could take, when it was computed (0 otherwise)
  double copy_seconds = 0;  // time spent copying (copied only)
  std::vector<std::string> evicted;  // entries this call evicted
  // One line: "cached at ENTRY (copied 12 MiB in 0.04 s)" / "in place: REASON".
  std::string Describe() const;
};

// Holds an entry's lease (shared lock): while it lives, no process evicts the entry.
class CacheLease {
 public:
  virtual ~CacheLease() = default;
};

// Decides whether the dataset at `source` (a dataset directory or a single LMDB file) is cached,
// makes or finds the copy, and logs the decision in one line (info level). On OK, result->path
// is what to open; *lease is set when result->cached (keep it while the copy is read) and null
// otherwise. Errors (the source cannot be listed; the cache dir cannot be made; reserving space
// failed, e.g. ENOSPC, naming the file; a copy, verify or rename failed) leave no entry and no
// temp dir behind.
Status AcquireCache(const std::string& source, const CacheOptions& options, CacheResult* result,
                    std::unique_ptr<CacheLease>* lease);

// Removes, in the cache directory of `root` (root/dspipe-cache-v1/, when it is there and ours),
// the temp dirs whose creator is dead (its ENTRY.lock not held), the use records' temp files
// (ENTRY.used.tmp-<16 hex>) nobody is writing, and the lock, lease and use files of entries
// that are gone. Nothing else is touched. *removed (optional) counts the temp dirs and files.
// AcquireCache calls it first.
Status CleanCacheOrphans(const std::string& root, Env* env, int* removed = nullptr);

// The cache root `mode` resolves to: DIR, $DSPIPE_CACHE_DIR or /dev/shm/dspipe-cache-<uid> for
// "auto" ("" for "off", and for "auto" when /dev/shm is not a tmpfs; *why then says so). The
// cache itself lives in ROOT/dspipe-cache-v1/.
std::string CacheRoot(const std::string& mode, std::string* why = nullptr);

// Opens the dataset at `path` through the cache. The dataset is opened in place first (so a bad
// or incomplete dataset fails before anything is copied, and pipeline_bytes can size the
// pipeline's buffers from its info); when the cache takes it, the copy is opened instead and the
// lease lives as long as the returned Dataset. mode "off" opens in place and logs nothing.
// (The Loader's overlapped and per-shard copies are made through the same function with its
// internal options, lib/cache/cached_dataset.h.) *result (optional) says which and why. For an
// http(s):// URL nothing is opened in place: pipeline_bytes gets the served manifest's info, and
// the copy is opened (or the error above).
Status OpenDatasetCached(const std::string& path, const DatasetOpenOptions& open_options,
                         CacheOptions cache_options,
                         const std::function<uint64_t(const DatasetInfo&)>& pipeline_bytes,
                         std::shared_ptr<const Dataset>* out, CacheResult* result = nullptr);

}  // namespace dspipe
