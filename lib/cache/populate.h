// SPDX-License-Identifier: Apache-2.0
// Internal to lib/cache: what a dataset source holds (its listing and the entry name it gets),
// and filling a cache temp dir from it, the one place a source becomes cached bytes.
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

// The error a cancelled copy returns (Status::Cancelled), and the test for it (by the code).
Status CancelledError(const std::string& what);
bool IsCancelled(const Status& s);

// Test hook: FetchOptions::progress of a URL source's FetchDataset (a test learns from it that
// bytes reached the entry's temp dir, then kills the process there). Empty (default) = none.
void SetFetchProgressHookForTest(std::function<void(const FetchProgress&)> hook);

// How PopulateFromSource moved the bytes of its last local copy on this thread (for tests and
// the bench): "copy_file_range", "sendfile" or "read/write".
std::string LastCopyMethod();

struct SourceFile {
  std::string rel;  // path relative to the source ("" when the source is one file)
  uint64_t size = 0;
  int64_t mtime_ns = 0;
  std::string via_link;  // reached through a symlink: the file's canonical path; "" otherwise
  std::string sha256;    // URL sources with fetch_files: the manifest's hex sha256 of the file
};

struct SourceListing {
  std::string source;    // canonical absolute path; for a URL source, the URL (no trailing '/')
  std::string url;       // an http(s):// dataset URL as given; "" for a local source
  std::string manifest;  // URL sources: the served manifest.json (its text)
  std::string manifest_sha256;  // URL sources: hex sha256 of `manifest` (part of the identity)
  DatasetInfo info;             // URL sources: the manifest's info (sizes the pipeline's buffers)
  // URL sources: fetch each of `files` from url/rel (its size and sha256 checked), instead of
  // FetchDataset(url) (which reads url/manifest.json): one shard of a served dataset, whose
  // files the dataset's manifest lists (streaming). `manifest_sha256` is the dataset's.
  bool fetch_files = false;
  bool is_dir = false;
  std::vector<std::string> dirs;  // relative subdirectories, parents first
  std::vector<SourceFile> files;  // sorted by rel
  uint64_t bytes = 0;             // total of files[].size, plus every side's bytes
  // Local sources: LMDBs copied into the same entry beside the source (a plain LMDB's masks
  // LMDB, CacheOptions::masks), each listed like a source; part of the identity (EntryName).
  std::vector<SourceListing> sides;
  // Set when the source cannot be cached as it is (a FIFO or device in it, a symlink to
  // nothing, a directory link loop): why, in one line. The dataset is then read in place.
  std::string not_cacheable;
};

// Where a side listing's copy goes, relative to the entry: "masks/<its basename>".
std::string SideRel(const SourceListing& side);

// Lists a local dataset (a directory, recursively, or one file). Symlinks are resolved
// deliberately: a link to a file lists the file (its size and mtime; the copy holds its bytes),
// a link to a directory is entered (a symlinked shard folder). Every `rel` is made of the names
// the walk found (never computed from the targets), so it stays inside the dataset. LMDB reader
// tables (lock.mdb, *-lock) are skipped: LMDB makes a fresh one beside the copy. What cannot be
// cached sets not_cacheable (and returns OK); a source that does not exist is NotFound.
Status ListSource(const std::string& source, SourceListing* out);

// Lists a dataset served at an http(s):// URL from its manifest.json (fetched with dspipe::Fetch
// into a temp dir, then removed): files = the manifest's "files" list (path + size), bytes =
// their sum. Nothing but manifest.json is requested. A manifest without the list, or one that
// does not parse, is an error naming its URL.
Status ListUrlSource(const std::string& url, Env* env, SourceListing* out);

// The entry name for a listing: "<CopyBase>-<16 hex of sha256(identity)>" (see cache.h).
std::string EntryName(const SourceListing& listing);
// The name of the source's copy inside its entry (E/<CopyBase>): the source's basename (a URL's
// last path component), every character outside [A-Za-z0-9._-] made '_', at most 64, never
// starting with '.'.
std::string CopyBase(const SourceListing& listing);

// The last path component of a URL, the host when it has no path (source_url.cc).
std::string UrlBaseName(const std::string& url);

// A file of a finished copy, relative to the entry directory, for its completion record.
struct EntryFile {
  std::string path;  // "<base>/shard-00000.lmdb/data.mdb", "masks/m.mdb", ...
  uint64_t size = 0;
  uint32_t crc32 = 0;
};

// The files a listing's copy holds (path relative to the entry, size; crc32 unset), sorted by
// path: what the completion record must list.
std::vector<EntryFile> ExpectedFiles(const SourceListing& listing, const std::string& base);

// Fills `tmp` (the entry's temp dir, open; its name `base` must not exist in it) with a
// verified, fsynced copy of the source at tmp/base and its sides at tmp/SideRel(side); *files
// gets every file written with its size and the crc32 of the copy (read back after the fsync).
// Everything is written through `tmp`'s descriptor (new files exclusively, no symlink followed,
// no name outside it); the source is only read (O_RDONLY).
// Local steps: create the dirs, reserve every file's space (fallocate: ENOSPC here names the
// file and nothing is copied yet), copy, check each copy's size and that the source did not
// change meanwhile, fsync files and directories. With the default Env the bytes move inside the
// kernel (copy_file_range, else sendfile); any other Env (a FaultEnv) or a kernel that refuses
// both gets read/write through the Env. An http(s):// source is fetched with
// FetchDataset(url, tmp/base) (every file's size + sha256 verified against the manifest), and the
// manifest it fetched must be the one the listing was made from. `cancel` (optional) is checked
// between chunks: a requested cancel stops the copy with CancelledError. `entry` names the entry
// for the step hooks (kFileCopied). On error `tmp` may hold partial bytes: the caller removes it.
Status PopulateFromSource(const SourceListing& listing, Directory* tmp, const std::string& base,
                          const std::string& entry, Env* env, const CancelToken* cancel,
                          std::vector<EntryFile>* files);

}  // namespace dspipe::cache
