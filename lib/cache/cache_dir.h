// SPDX-License-Identifier: Apache-2.0
// Internal to lib/cache: the cache's own directory, ROOT/dspipe-cache-v1/, and the names in it.
//
// ROOT is the directory the user named (CacheOptions::mode, DSPIPE_CACHE_DIR) or, by default,
// the per-user /dev/shm/dspipe-cache-<uid> (made 0700). The cache writes, renames and removes
// only inside ROOT/dspipe-cache-v1/, through its descriptor (core's Directory: no symlink is
// followed, no name leaves it), and only names it can parse as its own (ParseName). ROOT itself
// and everything beside dspipe-cache-v1/ in it is never touched.
//
// A cache directory is used only when it is ours alone, checked by fstat at every open: owned
// by us and not group/world-writable (ROOT too when it is the per-user default), and marked
// (.dspipe-cache holds kMarkerText; an empty directory is marked at its first use). Otherwise
// it is not used: the dataset is read in place and the reason says why.
#pragma once

#include <memory>
#include <string>

#include "dspipe/env.h"
#include "dspipe/status.h"

namespace dspipe::cache {

inline constexpr const char* kOwnDirName = "dspipe-cache-v1";
inline constexpr const char* kMarkerName = ".dspipe-cache";
inline constexpr const char* kMarkerText =
    "dspipe cache, layout v1: every name in this directory is dspipe's (docs/CACHE.md)\n";
// The root-level lock around the room check and the reservation (budget.h).
inline constexpr const char* kBudgetLockName = "budget.lock";

// The per-user default root: /dev/shm/dspipe-cache-<effective uid>.
std::string PerUserRoot();

// What a name in the cache's own directory is, for entry E = "<base>-<16 hex>" (EntryName):
// E/ (an entry), E.tmp/ (a copy being made, or being evicted), E.lock, E.lease, E.used, and
// E.used.tmp-<16 hex> (a use record being written). kNotOurs: anything else (never removed).
enum class NameKind { kNotOurs, kEntry, kTemp, kLock, kLease, kUse, kUseTemp };
struct ParsedName {
  NameKind kind = NameKind::kNotOurs;
  std::string entry;  // E
};
ParsedName ParseName(const std::string& name);
// True for "<base>-<16 hex>" with base 1-64 of [A-Za-z0-9._-], not starting with '.'.
bool IsEntryName(const std::string& name);

class CacheDir {
 public:
  // Opens ROOT (made when missing: mkdir -p, or 0700 for a per-user root: one named
  // "dspipe-cache-<our uid>", as the default is, wherever it is; its parent must exist) and its
  // dspipe-cache-v1/ (made 0700 when missing, then marked). An error when they cannot be made
  // or opened (the caller decides: "auto" reads in place, a directory the user named fails).
  // OK with *untrusted set (and *out null) when they exist but are not ours alone (above).
  static Status Open(const std::string& root, Env* env, std::unique_ptr<CacheDir>* out,
                     std::string* untrusted);

  Directory& dir() { return *own_; }
  Env* env() const { return env_; }
  const std::string& root() const { return root_; }
  // ROOT/dspipe-cache-v1
  const std::string& path() const { return own_->path(); }
  std::string PathOf(const std::string& name) const { return path() + "/" + name; }

  // Removes what dead processes left: every E.tmp/ whose E.lock nobody holds (except
  // keep + ".tmp": a URL entry's partial fetch, resumed by its own open), every use record
  // temp file whose E.lock nobody holds, and the E.used / E.lease / E.lock of an entry that no
  // longer has E/ or E.tmp/ (taken first: nobody is using them). *removed (optional) counts the
  // temp dirs and temp files removed.
  Status CleanOrphans(const std::string& keep, int* removed);

 private:
  CacheDir(Env* env, std::string root, std::unique_ptr<Directory> own)
      : env_(env), root_(std::move(root)), own_(std::move(own)) {}
  Env* env_;
  std::string root_;
  std::unique_ptr<Directory> own_;
};

}  // namespace dspipe::cache
