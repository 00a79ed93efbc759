// Internal to lib/cache: what a dataset source holds, and filling a cache temp dir from it.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "dspipe/dataset.h"
#include "dspipe/env.h"
#include "dspipe/status.h"

namespace dspipe::cache {

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
  uint64_t bytes = 0;              // total of files[].size
};

// Lists a local dataset (a directory, recursively, or one file). LMDB reader tables
// (lock.mdb, *-lock) are skipped: LMDB makes a fresh one beside the copy.
Status ListSource(const std::string& source, SourceListing* out);

// True for "http://..." and "https://..." (case-insensitive scheme).
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
Status PopulateFromSource(const SourceListing& listing, const std::string& dest, Env* env);

}  // namespace dspipe::cache
