// SPDX-License-Identifier: Apache-2.0
// Fetch: DEST.part + sidecar, Range/If-Range resume, transient-only retries, verify, rename.
// The HTTP transfer is libcurl's; the local copy reads through the Env; both share the
// .part/sidecar/verify/rename path and the retry policy.
// This file owns the entry point: the checks of the arguments, DEST.lock, the rounds (transfer,
// verify, one refetch after a corrupt transfer) and the durable rename; and Sha256File. The
// HTTP transfer is http_download.cc, the local copy local_copy.cc, DEST.part and its sidecar
// part.cc, the retry policy retry.cc and internal.h.
#include "dspipe/fetch.h"

#include <algorithm>
#include <cctype>
#include <filesystem>
#include <memory>
#include <string>

#include "fetch/part.h"

namespace dspipe::fetch {
namespace {

Status FetchUnlocked(const std::string& url, const std::string& dest, const FetchOptions& o,
                     Env* env, FetchResult* res, bool existed_before_lock);

// existed_before_lock: DEST was there before DEST.lock was taken (not made by its last holder).
Status FetchLocked(const std::string& url, const std::string& dest, const FetchOptions& o, Env* env,
                   FetchResult* res, bool existed_before_lock) {
  Status s = FetchUnlocked(url, dest, o, env, res, existed_before_lock);
  if (!s.ok() && s.code() != Status::Code::kAlreadyExists) {
    RemoveEmptyPart(env, dest + ".part", dest + ".part.json");
  }
  return s;
}

Status FetchUnlocked(const std::string& url, const std::string& dest, const FetchOptions& o,
                     Env* env, FetchResult* res, bool existed_before_lock) {
  const UrlScheme scheme = ClassifyUrl(url);
  const bool http =
      scheme == UrlScheme::kHttp || scheme == UrlScheme::kHttps || scheme == UrlScheme::kS3;
  if (scheme == UrlScheme::kOther) {
    return Status::InvalidArgument(RedactUrl(url) +
                                   ": not a URL dspipe fetches (http://, https://, s3://, file:// "
                                   "or a path)");
  }
  std::string src = url;
  if (scheme == UrlScheme::kFile) src = url.substr(7);
  if (env->FileExists(dest) && (!o.sha256.empty() || !existed_before_lock)) {
    // Its sha256 says whether it is this file; without one, only a DEST that appeared while we
    // waited for DEST.lock is taken (the holder, a dspipe fetch of it, made it). Any other DEST
    // is not known to be url's file (a size, even the server's, does not tell two files apart):
    // it is fetched again into DEST.part, which replaces it only once complete and verified.
    Status s = Verify(env, dest, dest, o.size, o.sha256, res);
    if (!s.ok())
      return Status::AlreadyExists(dest + " exists and does not match: " + s.message() +
                                   "; remove it to fetch again");
    res->already_present = true;
    return Status::OK();
  }
  const std::string part = dest + ".part", sidecar = dest + ".part.json";
  DSPIPE_RETURN_IF_ERROR(CheckPartIsOurs(env, dest, part, sidecar));
  for (int round = 0;; ++round) {
    uint64_t local_size = 0;
    HashThread hash(/*enabled=*/!o.sha256.empty());
    DSPIPE_RETURN_IF_ERROR(
        http ? DownloadHttp(url, part, sidecar, o, env, res, round == 0, &hash)
             : CopyLocal(src, part, sidecar, o, env, res, round == 0, &local_size, &hash));
    if (o.progress) {
      FetchProgress p;
      p.phase = FetchProgress::Phase::kVerifying;
      o.progress(p);
    }
    Sidecar sc;
    int64_t want_size = o.size;
    if (want_size < 0 && LoadSidecar(env, sidecar, &sc)) want_size = sc.length;
    Status v = Verify(env, part, RedactUrl(url), want_size, o.sha256, res, &hash);
    if (v.ok()) break;
    if (v.code() != Status::Code::kCorruption) return v;
    DSPIPE_RETURN_IF_ERROR(env->RemoveFile(part));
    DSPIPE_RETURN_IF_ERROR(env->RemoveFile(sidecar));
    if (round == 1) return v.WithContext("verification failed twice (deleted " + part + ")");
    ++res->refetches;
  }
  {  // durable before it gets the final name
    std::unique_ptr<WritableFile> f;
    DSPIPE_RETURN_IF_ERROR(env->NewWritableFile(part, /*truncate=*/false, &f));
    DSPIPE_RETURN_IF_ERROR(f->Sync());
    DSPIPE_RETURN_IF_ERROR(f->Close());
  }
  DSPIPE_RETURN_IF_ERROR(env->RenameFile(part, dest));
  DSPIPE_RETURN_IF_ERROR(env->SyncDir(std::filesystem::path(dest).parent_path().string()));
  return env->RemoveFile(sidecar);
}

}  // namespace

void ReleaseFetchLock(Env* env, const std::string& lock_path, std::unique_ptr<FileLock>* lock) {
  if (!*lock) return;
  // Removed while held (a waiter then takes the lock on the file next at that name); only an
  // empty regular file, as every lock file dspipe makes is: anything else there is not ours.
  FileKind kind = FileKind::kMissing;
  uint64_t size = 0;
  if (env->GetFileKind(lock_path, &kind).ok() && kind == FileKind::kRegular &&
      env->FileSize(lock_path, &size).ok() && size == 0) {
    (void)env->RemoveFile(lock_path);  // best effort: a lock file left behind harms nothing
  }
  lock->reset();
}

Status LockForFetch(Env* env, const std::string& lock_path, const FetchOptions& o,
                    std::unique_ptr<FileLock>* lock) {
  Status s = env->LockFile(lock_path, /*wait=*/false, lock);
  if (s.code() != Status::Code::kAborted) return s;
  if (o.progress) {
    FetchProgress p;
    p.phase = FetchProgress::Phase::kWaitingForLock;
    o.progress(p);
  }
  if (!o.cancelled) return env->LockFile(lock_path, /*wait=*/true, lock);
  // Cancellable: a blocking flock cannot be interrupted, so poll it.
  for (;;) {
    if (!SleepUnlessCancelled(o, 0.1)) {
      return Status::Cancelled("cancelled while waiting for " + lock_path);
    }
    s = env->LockFile(lock_path, /*wait=*/false, lock);
    if (s.code() != Status::Code::kAborted) return s;
  }
}

}  // namespace dspipe::fetch

namespace dspipe {

Status Sha256File(const std::string& path, std::string* hex, Env* env) {
  if (env == nullptr) env = Env::Default();
  std::unique_ptr<RandomAccessFile> f;
  DSPIPE_RETURN_IF_ERROR(env->NewRandomAccessFile(path, &f));
  core::Sha256 h;
  std::string buf(core::kCopyChunk, '\0');
  uint64_t off = 0;
  for (;;) {
    size_t got = 0;
    DSPIPE_RETURN_IF_ERROR(f->Read(off, buf.size(), buf.data(), &got));
    if (got == 0) break;
    h.Update(buf.data(), got);
    off += got;
  }
  *hex = h.HexDigest();
  return Status::OK();
}

Status Fetch(const std::string& url, const std::string& dest, const FetchOptions& options,
             FetchResult* result) {
  FetchResult local;
  FetchResult* res = result ? result : &local;
  *res = FetchResult{};
  Env* env = options.env ? options.env : Env::Default();
  if (url.empty() || dest.empty()) return Status::InvalidArgument("fetch: empty URL or DEST");
  if (!options.sha256.empty() && !core::IsHex64(options.sha256))
    return Status::InvalidArgument("fetch: --sha256 must be 64 hex digits, got '" + options.sha256 +
                                   "'");
  if (options.retries < 0) return Status::InvalidArgument("fetch: retries must be >= 0");
  const std::string ctx = "fetch " + RedactUrl(url) + " -> " + dest;
  const std::string parent = std::filesystem::path(dest).parent_path().string();
  if (!parent.empty()) DSPIPE_RETURN_IF_ERROR(env->CreateDirs(parent).WithContext(ctx));
  const bool existed = env->FileExists(dest);
  std::unique_ptr<FileLock> lock;
  if (options.lock) {
    DSPIPE_RETURN_IF_ERROR(
        fetch::LockForFetch(env, dest + ".lock", options, &lock).WithContext(ctx));
  }
  Status s = fetch::FetchLocked(url, dest, options, env, res, existed).WithContext(ctx);
  fetch::ReleaseFetchLock(env, dest + ".lock", &lock);
  return s;
}

}  // namespace dspipe
