// Internal to lib/cache: what a dataset source holds, and filling a cache temp dir from it.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "dspipe/env.h"
#include "dspipe/status.h"

namespace dspipe::cache {

struct SourceFile {
  std::string rel;         // path relative to the source ("" when the source is one file)
  uint64_t size = 0;
  int64_t mtime_ns = 0;
};

struct SourceListing {
  std::string source;      // canonical absolute path
  bool is_dir = false;
  std::vector<std::string> dirs;   // relative subdirectories, parents first
  std::vector<SourceFile> files;   // sorted by rel
  uint64_t bytes = 0;              // total of files[].size
};

// Lists a local dataset (a directory, recursively, or one file). LMDB reader tables
// (lock.mdb, *-lock) are skipped: LMDB makes a fresh one beside the copy.
Status ListSource(const std::string& source, SourceListing* out);

// The entry name for a listing: "<basename>-<16 hex of sha256(identity)>" (see cache.h).
std::string EntryName(const SourceListing& listing);

// Fills `dest` (a path inside the cache's temp dir; must not exist) with a verified, fsynced
// copy of the source. This is the ONE place a source becomes cached bytes: local paths are
// copied here; an http(s):// source is meant to branch here to FetchDataset(url, dest, ...).
// Steps: create the dirs, reserve every file's space (fallocate through env: ENOSPC here names
// the file and nothing is copied yet), copy, check each copy's size and that the source did not
// change meanwhile, fsync files and directories. On error `dest` may hold partial bytes: the
// caller removes the temp dir.
Status PopulateFromSource(const SourceListing& listing, const std::string& dest, Env* env);

}  // namespace dspipe::cache
