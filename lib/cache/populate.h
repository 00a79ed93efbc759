// Internal to lib/cache: what a dataset source holds, and filling a cache temp dir from it.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <string>
#include <vector>

#include "dspipe/dataset.h"
#include "dspipe/env.h"
#include "dspipe/fetch.h"
#include "dspipe/status.h"

namespace dspipe::cache {

// A request to stop a background copy (the loader that wanted it is gone). Thread-safe.
class CancelToken {
 public:
  void Request() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      requested_ = true;
    }
    cv_.notify_all();
  }
  bool requested() const {
    std::lock_guard<std::mutex> lock(mu_);
    return requested_;
  }
  // Waits up to `d` (or until requested); true when requested.
  bool WaitFor(std::chrono::milliseconds d) const {
    std::unique_lock<std::mutex> lock(mu_);
    return cv_.wait_for(lock, d, [this] { return requested_; });
  }
  // Blocks until requested (test hooks).
  void WaitRequested() const {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait(lock, [this] { return requested_; });
  }

 private:
  mutable std::mutex mu_;
  mutable std::condition_variable cv_;
  bool requested_ = false;
};

// The error a cancelled copy returns (kAborted, "cancelled").
Status CancelledError(const std::string& what);
bool IsCancelled(const Status& s);

// Test hook: called on the copying thread after each file of a local copy is complete (while
// the entry's lock is held and the temp dir is partly filled), with the number of files done
// and the copy's cancel token (null for a copy that cannot be cancelled). Tests block here on
// a condition of their own to hold the copy at a known point. Empty (default) = no hook.
using CopyHook = std::function<void(size_t files_done, const CancelToken* cancel)>;
void SetCopyHookForTest(CopyHook hook);

// Test hook: FetchOptions::progress of a URL source's FetchDataset (a test learns from it that
// bytes reached the entry's temp dir, then kills the process there). Empty (default) = none.
void SetFetchProgressHookForTest(std::function<void(const FetchProgress&)> hook);

// How PopulateFromSource moved the bytes of its last local copy on this thread (for tests and
// the bench): "copy_file_range", "sendfile" or "read/write".
std::string LastCopyMethod();

struct SourceFile {
  std::string rel;         // path relative to the source ("" when the source is one file)
  uint64_t size = 0;
  int64_t mtime_ns = 0;
};

struct SourceListing {
  std::string source;      // canonical absolute path; for a URL source, the URL (no trailing '/')
  std::string url;         // an http(s):// dataset URL as given; "" for a local source
  std::string manifest;    // URL sources: the served manifest.json (its text)
  std::string manifest_sha256;  // URL sources: hex sha256 of `manifest` (part of the identity)
  DatasetInfo info;        // URL sources: the manifest's info (sizes the pipeline's buffers)
  bool is_dir = false;
  std::vector<std::string> dirs;   // relative subdirectories, parents first
  std::vector<SourceFile> files;   // sorted by rel
  uint64_t bytes = 0;              // total of files[].size, plus every side's bytes
  // Local sources: LMDBs copied into the same entry beside the source (a plain LMDB's masks
  // LMDB, CacheOptions::masks), each listed like a source; part of the identity (EntryName).
  std::vector<SourceListing> sides;
};

// Where a side listing's copy goes, relative to the entry: "masks/<its basename>".
std::string SideRel(const SourceListing& side);

// Lists a local dataset (a directory, recursively, or one file). LMDB reader tables
// (lock.mdb, *-lock) are skipped: LMDB makes a fresh one beside the copy.
Status ListSource(const std::string& source, SourceListing* out);

// True for "http://...", "https://..." and "s3://..." (case-insensitive scheme): a dataset
// FetchDataset fetches (s3:// objects signed with SigV4, docs/STORAGE.md).
bool IsUrl(const std::string& source);

// Lists a dataset served at an http(s):// URL from its manifest.json (fetched with dspipe::Fetch
// into a temp dir, then removed): files = the manifest's "files" list (path + size), bytes =
// their sum. Nothing but manifest.json is requested. A manifest without the list, or one that
// does not parse, is an error naming its URL.
Status ListUrlSource(const std::string& url, Env* env, SourceListing* out);

// The entry name for a listing: "<basename>-<16 hex of sha256(identity)>" (see cache.h).
std::string EntryName(const SourceListing& listing);

// Fills `dest` (a path inside the cache's temp dir; must not exist) with a verified, fsynced
// copy of the source. This is the ONE place a source becomes cached bytes: local paths are
// copied here; an http(s):// source is fetched here with FetchDataset(url, dest) (every file's
// size + sha256 verified against the manifest), and the manifest it fetched must be the one the
// listing was made from (a dataset rebuilt on the server meanwhile is an error, not a mix).
// Steps: create the dirs, reserve every file's space (fallocate through env: ENOSPC here names
// the file and nothing is copied yet), copy, check each copy's size and that the source did not
// change meanwhile, fsync files and directories. On error `dest` may hold partial bytes: the
// caller removes the temp dir.
// With the default Env the bytes move inside the kernel (copy_file_range, else sendfile, one
// memory copy instead of read + write through user space); any other Env (a FaultEnv) or a
// kernel that refuses both gets read/write through the Env. `cancel` (optional) is checked
// between chunks: a requested cancel stops the copy with CancelledError.
// A local listing's sides (a plain LMDB's masks LMDB) go to dirname(dest)/SideRel(side), with
// the same steps: every file of the source and of its sides is reserved before any is copied.
Status PopulateFromSource(const SourceListing& listing, const std::string& dest, Env* env,
                          const CancelToken* cancel = nullptr);

}  // namespace dspipe::cache
