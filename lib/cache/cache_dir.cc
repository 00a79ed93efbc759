// SPDX-License-Identifier: Apache-2.0
// The cache's own directory: opening and checking it, the names in it, and removing what dead
// processes left there (see cache_dir.h).
#include "cache/cache_dir.h"

#include <unistd.h>

#include <filesystem>
#include <map>
#include <set>

#include "cache/test_hooks.h"
#include "core/files.h"
#include "dspipe/log.h"

namespace dspipe::cache {
namespace {

bool IsHex16(const std::string& s, size_t from) {
  if (s.size() != from + 16) return false;
  for (size_t i = from; i < s.size(); ++i) {
    const char c = s[i];
    if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) return false;
  }
  return true;
}

bool EndsWith(const std::string& s, const std::string& suffix) {
  return s.size() > suffix.size() &&
         s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

}  // namespace

std::string PerUserRoot() { return "/dev/shm/dspipe-cache-" + std::to_string(::geteuid()); }

bool IsEntryName(const std::string& name) {
  if (name.size() < 18 || name[name.size() - 17] != '-' || !IsHex16(name, name.size() - 16)) {
    return false;
  }
  const size_t base = name.size() - 17;
  if (base < 1 || base > 64 || name[0] == '.') return false;
  for (size_t i = 0; i < base; ++i) {
    const char c = name[i];
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                    c == '-' || c == '_' || c == '.';
    if (!ok) return false;
  }
  return true;
}

ParsedName ParseName(const std::string& name) {
  ParsedName p;
  std::string target;
  if (IsAtomicTempName(name, &target) && EndsWith(target, ".used") &&
      IsEntryName(target.substr(0, target.size() - 5))) {
    p.kind = NameKind::kUseTemp;
    p.entry = target.substr(0, target.size() - 5);
    return p;
  }
  if (IsEntryName(name)) {
    p.kind = NameKind::kEntry;
    p.entry = name;
    return p;
  }
  static const std::pair<const char*, NameKind> kSuffixes[] = {{".tmp", NameKind::kTemp},
                                                               {".lock", NameKind::kLock},
                                                               {".lease", NameKind::kLease},
                                                               {".used", NameKind::kUse}};
  for (const auto& [suffix, kind] : kSuffixes) {
    const std::string s = suffix;
    if (EndsWith(name, s) && IsEntryName(name.substr(0, name.size() - s.size()))) {
      p.kind = kind;
      p.entry = name.substr(0, name.size() - s.size());
      return p;
    }
  }
  return p;
}

Status CacheDir::Open(const std::string& root, Env* env, std::unique_ptr<CacheDir>* out,
                      std::string* untrusted) {
  out->reset();
  untrusted->clear();
  namespace fs = std::filesystem;
  std::unique_ptr<Directory> rootdir;
  if (fs::path(root).filename() == fs::path(PerUserRoot()).filename()) {
    // Ours alone: made 0700, and refused when someone else made it (or made it writable).
    const fs::path p(root);
    std::unique_ptr<Directory> parent;
    DSPIPE_RETURN_IF_ERROR(env->OpenDirectory(p.parent_path().string(), &parent));
    FileInfo info;
    DSPIPE_RETURN_IF_ERROR(parent->Stat(p.filename().string(), &info));
    if (info.kind != FileKind::kMissing && info.kind != FileKind::kDirectory) {
      *untrusted = root + " is not a directory (a link or a file; not followed)";
      return Status::OK();
    }
    DSPIPE_RETURN_IF_ERROR(parent->OpenDir(p.filename().string(), true, 0700, &rootdir));
    if (Status s = core::CheckPrivateDir(rootdir.get()); !s.ok()) {
      *untrusted = s.message();
      return Status::OK();
    }
  } else {
    DSPIPE_RETURN_IF_ERROR(env->CreateDirs(root));
    DSPIPE_RETURN_IF_ERROR(env->OpenDirectory(root, &rootdir));
  }
  FileInfo info;
  DSPIPE_RETURN_IF_ERROR(rootdir->Stat(kOwnDirName, &info));
  if (info.kind != FileKind::kMissing && info.kind != FileKind::kDirectory) {
    *untrusted = rootdir->path() + "/" + kOwnDirName +
                 " is not a directory (a link or a file; not followed)";
    return Status::OK();
  }
  std::unique_ptr<Directory> own;
  DSPIPE_RETURN_IF_ERROR(rootdir->OpenDir(kOwnDirName, true, 0700, &own));
  if (Status s = core::CheckPrivateDir(own.get()); !s.ok()) {
    *untrusted = s.message();
    return Status::OK();
  }
  DSPIPE_RETURN_IF_ERROR(own->Stat(kMarkerName, &info));
  if (info.kind == FileKind::kMissing) {
    // A directory we just made, or one another process is marking now (its temp file is the
    // only name in it, or the marker is there by the time we list); anything else in it was not
    // made by us.
    std::vector<std::string> names;
    DSPIPE_RETURN_IF_ERROR(own->List(&names));
    std::string target;
    bool marked = false;
    for (const std::string& n : names) {
      if (n == kMarkerName) marked = true;
    }
    for (const std::string& n : names) {
      if (marked) break;
      if (IsAtomicTempName(n, &target) && target == kMarkerName) continue;
      *untrusted = own->path() + " holds names (" + n + ", ...) but no " + kMarkerName +
                   ": not made by dspipe, not used";
      return Status::OK();
    }
    if (marked) {
      DSPIPE_RETURN_IF_ERROR(own->Stat(kMarkerName, &info));
    } else {
      DSPIPE_RETURN_IF_ERROR(own->WriteFileAtomic(kMarkerName, kMarkerText));
      info.kind = FileKind::kRegular;
    }
  }
  std::string text;
  Status s = info.kind == FileKind::kRegular ? own->ReadFile(kMarkerName, &text)
                                             : Status::Corruption("not a regular file");
  if (!s.ok() || text != kMarkerText) {
    *untrusted = own->path() + "/" + kMarkerName + " is not dspipe's cache marker" +
                 (s.ok() ? std::string() : " (" + s.ToString() + ")") + ": not used";
    return Status::OK();
  }
  out->reset(new CacheDir(env, root, std::move(own)));
  return Status::OK();
}

Status CacheDir::CleanOrphans(const std::string& keep, int* removed) {
  if (removed) *removed = 0;
  std::vector<std::string> names;
  DSPIPE_RETURN_IF_ERROR(own_->List(&names));
  std::map<std::string, std::set<NameKind>> by_entry;
  for (const std::string& n : names) {
    const ParsedName p = ParseName(n);
    if (p.kind == NameKind::kNotOurs) continue;
    by_entry[p.entry].insert(p.kind);
    if (p.kind != NameKind::kTemp && p.kind != NameKind::kUseTemp) continue;
    if (p.kind == NameKind::kTemp && p.entry == keep) continue;
    // E.tmp/ is made and E.used written only under E.lock: when it can be taken, the process
    // that made them is dead (whatever PID namespace it ran in).
    std::unique_ptr<FileLock> lock;
    if (!own_->Lock(p.entry + ".lock", true, false, &lock).ok()) continue;
    DSPIPE_RETURN_IF_ERROR(p.kind == NameKind::kTemp ? own_->RemoveTree(n) : own_->Remove(n));
    if (p.kind == NameKind::kTemp) by_entry[p.entry].erase(NameKind::kTemp);
    if (removed) ++*removed;
    Log(LogLevel::kInfo,
        "dspipe cache: removed " + PathOf(n) +
            (p.kind == NameKind::kTemp ? " (a copy whose process died before it finished)"
                                       : " (a use record whose process died while writing it)"));
    RunStepHook(Step::kOrphanRemoved, p.entry);
  }
  // Lock, lease and use files of entries that are gone (evicted, or never made).
  for (const auto& [entry, kinds] : by_entry) {
    if (kinds.count(NameKind::kEntry) || kinds.count(NameKind::kTemp)) continue;
    if (!kinds.count(NameKind::kUse) && !kinds.count(NameKind::kLease) &&
        !kinds.count(NameKind::kLock)) {
      continue;
    }
    std::unique_ptr<FileLock> lock, lease;
    if (!own_->Lock(entry + ".lock", true, false, &lock).ok()) continue;
    if (!own_->Lock(entry + ".lease", true, false, &lease).ok()) continue;
    FileInfo info;
    DSPIPE_RETURN_IF_ERROR(own_->Stat(entry, &info));
    if (info.kind != FileKind::kMissing) continue;  // made meanwhile
    DSPIPE_RETURN_IF_ERROR(own_->Stat(entry + ".tmp", &info));
    if (info.kind != FileKind::kMissing) continue;
    // Removed while held: a process waiting for one of them takes the new file at the name.
    DSPIPE_RETURN_IF_ERROR(own_->Remove(entry + ".used"));
    DSPIPE_RETURN_IF_ERROR(own_->Remove(entry + ".lease"));
    DSPIPE_RETURN_IF_ERROR(own_->Remove(entry + ".lock"));
  }
  return Status::OK();
}

}  // namespace dspipe::cache
