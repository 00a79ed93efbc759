// SPDX-License-Identifier: Apache-2.0
// AcquireCache and OpenDatasetCached: deciding, making or finding the entry for a source (see
// dspipe/cache.h for the rules, acquire.h for the pieces).
#include "cache/acquire.h"

#include <cstdio>
#include <cstdlib>
#include <filesystem>

#include "cache/budget.h"
#include "cache/cache_dir.h"
#include "cache/entries.h"
#include "cache/test_hooks.h"
#include "core/files.h"
#include "dspipe/fetch.h"
#include "dspipe/log.h"
#include "format/manifest.h"

namespace dspipe {
namespace cache {
namespace {

class Lease final : public CacheLease {
 public:
  explicit Lease(std::unique_ptr<FileLock> lock) : lock_(std::move(lock)) {}

 private:
  std::unique_ptr<FileLock> lock_;
};

void LogDecision(const std::string& source, const CacheResult& r) {
  Log(LogLevel::kInfo, "dspipe cache: " + RedactUrl(source) + ": " + r.Describe());
}

bool IsTmpfsPath(const std::string& path) {
  std::unique_ptr<Directory> d;
  return Env::Default()->OpenDirectory(path, &d).ok() && d->OnTmpfs();
}

// Takes E.lock: at once, or after waiting for the process holding it (blocking, or polling a
// background copy's cancel token). existing_only: Aborted at once when held.
Status LockEntry(CacheDir& cd, const std::string& source, const std::string& name,
                 const AcquireArgs& args, std::unique_ptr<FileLock>* lock) {
  Directory& d = cd.dir();
  Status s = d.Lock(name + ".lock", true, false, lock);
  if (s.code() != Status::Code::kAborted || args.existing_only) return s;
  Log(LogLevel::kInfo, "dspipe cache: " + RedactUrl(source) +
                           ": waiting for the process that holds " + cd.PathOf(name) +
                           ".lock (copying it, most likely)");
  if (args.cancel == nullptr) return d.Lock(name + ".lock", true, true, lock);
  // A background copy: a blocking flock could not be cancelled, so it polls (the first epoch
  // goes on in place meanwhile; 50 ms is nothing against a copy).
  while ((s = d.Lock(name + ".lock", true, false, lock)).code() == Status::Code::kAborted) {
    if (args.cancel->WaitFor(std::chrono::milliseconds(50))) {
      return CancelledError("waiting for " + cd.PathOf(name) + ".lock");
    }
  }
  return s;
}

// A URL's temp dir left by a kill mid-fetch, whose fetch did not finish (only FetchDataset's
// BASE.part/ there): resumed, not removed.
bool ResumablePartial(CacheDir& cd, const std::string& name, const std::string& base) {
  std::unique_ptr<Directory> tmp;
  FileInfo info;
  if (!cd.dir().OpenDir(name + ".tmp", false, 0, &tmp).ok()) return false;
  return tmp->Stat(base, &info).ok() && info.kind == FileKind::kMissing;
}

// Copies the source into E.tmp/ (reserved by the caller) and commits it as E/: completion
// record last, then E.used, then the rename.
Status MakeEntry(CacheDir& cd, const SourceListing& listing, const std::string& name,
                 const std::string& base, Env* env, const CancelToken* cancel) {
  Directory& d = cd.dir();
  std::unique_ptr<Directory> tmp;
  DSPIPE_RETURN_IF_ERROR(d.OpenDir(name + ".tmp", false, 0, &tmp));
  std::vector<EntryFile> files;
  DSPIPE_RETURN_IF_ERROR(PopulateFromSource(listing, tmp.get(), base, name, env, cancel, &files));
  // With a masks LMDB (CacheOptions::masks, listing.sides) it lands in the same temp dir
  // (tmp/masks/...): one entry, committed by the one rename below, so the images never exist
  // cached without their masks.
  DSPIPE_RETURN_IF_ERROR(WriteCompletionRecord(tmp.get(), name, listing, files));
  DSPIPE_RETURN_IF_ERROR(tmp->Sync());
  RunStepHook(Step::kRecorded, name);
  // The commit, under the budget lock: another process's room check sees this copy as a
  // reservation (E.tmp/) or as an entry (E/ + E.used), never as neither. The use record goes
  // first: an entry without one would be invisible to eviction.
  std::unique_ptr<FileLock> budget;
  DSPIPE_RETURN_IF_ERROR(LockBudget(cd, &budget));
  DSPIPE_RETURN_IF_ERROR(WriteUse(cd, name, listing.bytes));
  RunStepHook(Step::kUseRecorded, name);
  DSPIPE_RETURN_IF_ERROR(d.Rename(name + ".tmp", name));
  DSPIPE_RETURN_IF_ERROR(d.Sync());
  budget.reset();
  RunStepHook(Step::kCommitted, name);
  return Status::OK();
}

}  // namespace

std::string OwnDirPath(const std::string& root) { return root + "/" + kOwnDirName; }

Status ListLocalSource(const std::string& source, const CacheOptions& options, SourceListing* out) {
  DSPIPE_RETURN_IF_ERROR(ListSource(source, out));
  if (!options.masks.empty()) {
    SourceListing side;
    Status s = ListSource(options.masks, &side);
    if (!s.ok()) return s.WithContext("cache: the masks LMDB of " + source);
    if (!side.not_cacheable.empty() && out->not_cacheable.empty()) {
      out->not_cacheable = side.not_cacheable + " (its masks LMDB)";
    }
    out->bytes += side.bytes;
    out->sides.push_back(std::move(side));
  }
  return Status::OK();
}

Status AcquireImpl(const std::string& source, const CacheOptions& options, const AcquireArgs& args,
                   CacheResult* result, std::unique_ptr<CacheLease>* lease) {
  *result = CacheResult();
  result->path = source;
  lease->reset();
  Env* env = options.env ? options.env : Env::Default();
  const bool url = IsRemoteUrl(source);
  // A URL cannot be read in place: "off" (the default) means "auto" for it.
  const std::string mode =
      url && (options.mode == "off" || options.mode.empty()) ? "auto" : options.mode;
  // A URL not cached is the caller's error (it carries the reason): no "in place" line for it;
  // nor for a look at existing entries only (the background copy decides and says so).
  const auto in_place = [&](std::string reason) {
    result->reason = std::move(reason);
    if (!url && !args.existing_only) LogDecision(source, *result);
    return Status::OK();
  };
  const std::string root = CacheRoot(mode, &result->reason);
  if (root.empty()) {
    if (mode != "off" && !mode.empty() && !args.existing_only) LogDecision(source, *result);
    return Status::OK();
  }
  SourceListing listing;
  if (args.prelisted != nullptr) {
    listing = *args.prelisted;
  } else if (url) {
    DSPIPE_RETURN_IF_ERROR(ListUrlSource(source, env, &listing));
  } else {
    DSPIPE_RETURN_IF_ERROR(ListLocalSource(source, options, &listing));
  }
  result->bytes = listing.bytes;
  if (!listing.not_cacheable.empty()) return in_place(listing.not_cacheable);
  if (options.cache_limit > 0 && listing.bytes > options.cache_limit) {
    return in_place(
        std::string(listing.sides.empty() ? "the dataset" : "the dataset with its masks LMDB") +
        " (" + FormatBytes(listing.bytes) + ") is larger than cache_limit (" +
        FormatBytes(options.cache_limit) + ")");
  }
  std::unique_ptr<CacheDir> cd;
  std::string untrusted;
  Status s = CacheDir::Open(root, env, &cd, &untrusted);
  if (!s.ok()) {
    // "auto" picked the directory, not the user: one this user cannot make or write means "in
    // place", not a failed open. A directory named by the user fails.
    if (mode == "auto") {
      return in_place("the cache dir " + root + " is not usable (" + s.ToString() + ")");
    }
    return s.WithContext("cache: making the cache dir " + root);
  }
  if (!untrusted.empty()) return in_place("the cache dir is not used: " + untrusted);
  const std::string name = EntryName(listing);
  const std::string base = CopyBase(listing);
  // A URL's temp dir left by a kill mid-fetch is resumed, not removed (FetchDataset keeps the
  // finished files and the FILE.part, and resumes with a Range request); another entry's is
  // removed as an orphan.
  if (!args.existing_only) DSPIPE_RETURN_IF_ERROR(cd->CleanOrphans(url ? name : "", nullptr));

  std::unique_ptr<FileLock> lock;
  s = LockEntry(*cd, source, name, args, &lock);
  if (args.existing_only && s.code() == Status::Code::kAborted) return Status::OK();
  DSPIPE_RETURN_IF_ERROR(s);
  RunStepHook(Step::kLocked, name, 0, args.cancel);

  Directory& d = cd->dir();
  FileInfo info;
  DSPIPE_RETURN_IF_ERROR(d.Stat(name, &info));
  bool present = info.kind == FileKind::kDirectory;
  if (present) {
    // Trusted only when committed by our own rename: its completion record, written last, lists
    // exactly what the source holds.
    const Status v = VerifyEntry(d, name, ExpectedFiles(listing, base), /*checksums=*/false);
    if (!v.ok()) {
      if (args.existing_only) return Status::OK();
      bool evicted = false;
      DSPIPE_RETURN_IF_ERROR(
          EvictHeld(*cd, name, "not a complete entry: " + v.message(), &evicted));
      if (!evicted) {
        return in_place("the entry " + cd->PathOf(name) + " is not complete (" + v.message() +
                        ") and a live process holds it");
      }
      present = false;
    }
  }
  if (!present) {
    if (args.existing_only) return Status::OK();
    Room room;
    DSPIPE_RETURN_IF_ERROR(ReserveRoom(*cd, name, listing.bytes, options,
                                       url && ResumablePartial(*cd, name, base), &room,
                                       args.stream));
    result->budget = room.budget;
    result->evicted = room.evicted;
    if (!room.fits) {
      (void)d.RemoveTree(name + ".tmp");  // a URL's partial, if any: it will not fit either
      return in_place(room.why);
    }
    RunStepHook(Step::kReserved, name, 0, args.cancel);
    const auto t0 = std::chrono::steady_clock::now();
    s = MakeEntry(*cd, listing, name, base, env, args.cancel);
    if (!s.ok()) {
      // Best effort; an orphan left here is cleaned at the next start. A URL's partial fetch
      // is kept for the next open of the same URL to resume (any other open removes it).
      if (!url || !ResumablePartial(*cd, name, base)) (void)d.RemoveTree(name + ".tmp");
      (void)d.Remove(name + ".used");
      return s.WithContext("cache: copying " + RedactUrl(source) + " into " + cd->path());
    }
    result->copied = true;
    result->copy_seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  }
  std::unique_ptr<FileLock> held;
  DSPIPE_RETURN_IF_ERROR(d.Lock(name + ".lease", false, true, &held));
  DSPIPE_RETURN_IF_ERROR(WriteUse(*cd, name, listing.bytes));
  RunStepHook(Step::kLeased, name, 0, args.cancel);
  lock.reset();  // the lease now keeps the entry; others may open it
  result->cached = true;
  result->entry = cd->PathOf(name);
  result->path = result->entry + "/" + base;
  if (!listing.sides.empty()) result->masks_path = result->entry + "/" + SideRel(listing.sides[0]);
  result->reason.clear();
  *lease = std::make_unique<Lease>(std::move(held));
  LogDecision(source, *result);
  return Status::OK();
}

Status UrlNotCachedError(const std::string& url, const CacheResult& r) {
  const std::string shown = RedactUrl(url);  // the query may be a secret
  return Status::Unsupported(
      "cache: the dataset at " + shown + " cannot be cached (" + r.reason +
      "), and a URL cannot be read in place: fetch it once with `dsconvert fetch " + shown +
      " DIR`" + (UrlHasQuery(url) ? " (with your URL's query for '...')" : "") +
      " and open DIR, or make room (raise " + Opt("LoaderOptions::cache_limit") +
      ", free RAM, or point " + Opt("LoaderOptions::cache") +
      " / DSPIPE_CACHE_DIR at a directory with space)");
}

Status OpenCopy(const std::string& source, const CacheResult& r,
                const DatasetOpenOptions& open_options, std::unique_ptr<CacheLease> lease,
                std::shared_ptr<const Dataset>* out) {
  std::unique_ptr<Dataset> copy;
  DatasetOpenOptions o = open_options;
  if (!r.masks_path.empty()) o.plain.masks = r.masks_path;  // the masks from the same entry
  Status s = Dataset::Open(r.path, o, &copy);
  if (!s.ok()) return s.WithContext("cache: opening the copy of " + RedactUrl(source));
  std::shared_ptr<CacheLease> held(std::move(lease));
  *out = std::shared_ptr<const Dataset>(copy.release(), [held](const Dataset* d) { delete d; });
  return Status::OK();
}

}  // namespace cache

std::string CacheResult::Describe() const {
  if (!cached) return "in place: " + reason;
  if (!copied) return "cached at " + entry + " (already there)";
  char buf[64];
  std::snprintf(buf, sizeof buf, " in %.2f s)", copy_seconds);
  return "cached at " + entry + " (copied " + cache::FormatBytes(bytes) + buf;
}

std::string CacheRoot(const std::string& mode, std::string* why) {
  std::string ignored;
  std::string& w = why ? *why : ignored;
  if (mode == "off" || mode.empty()) {
    w = "cache off";
    return "";
  }
  if (mode == "auto") {
    // DSPIPE_CACHE_DIR names the directory "auto" uses (a machine's own RAM disk, or a test's).
    if (const char* dir = std::getenv("DSPIPE_CACHE_DIR"); dir != nullptr && *dir != '\0') {
      return dir;
    }
    if (!cache::IsTmpfsPath("/dev/shm")) {
      w = "cache auto: /dev/shm is not a tmpfs";
      return "";
    }
    return cache::PerUserRoot();
  }
  return mode;
}

Status CleanCacheOrphans(const std::string& root, Env* env, int* removed) {
  if (removed) *removed = 0;
  if (env == nullptr) env = Env::Default();
  FileKind kind = FileKind::kMissing;
  DSPIPE_RETURN_IF_ERROR(env->GetFileKind(cache::OwnDirPath(root), &kind));
  if (kind == FileKind::kMissing) return Status::OK();  // no cache there: nothing of ours
  std::unique_ptr<cache::CacheDir> cd;
  std::string untrusted;
  DSPIPE_RETURN_IF_ERROR(cache::CacheDir::Open(root, env, &cd, &untrusted));
  if (!untrusted.empty()) return Status::OK();  // not ours: nothing is removed there
  return cd->CleanOrphans("", removed);
}

Status AcquireCache(const std::string& source, const CacheOptions& options, CacheResult* result,
                    std::unique_ptr<CacheLease>* lease) {
  DSPIPE_RETURN_IF_ERROR(cache::AcquireImpl(source, options, cache::AcquireArgs(), result, lease));
  if (IsRemoteUrl(source) && !result->cached) return cache::UrlNotCachedError(source, *result);
  return Status::OK();
}

}  // namespace dspipe
