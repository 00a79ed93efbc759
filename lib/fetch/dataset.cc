// SPDX-License-Identifier: Apache-2.0
// FetchDataset: manifest.json first, then every file it lists through Fetch, into
// DEST.part/ beside DEST, renamed into place when complete; DEST.lock makes one download (and
// is removed by its holder). In DEST.part/ only what a manifest lists is ever removed.
#include <filesystem>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "core/files.h"
#include "dspipe/fetch.h"
#include "fetch/internal.h"
#include "format/manifest.h"

namespace dspipe {
namespace {

namespace fs = std::filesystem;

constexpr const char* kNewManifest = "manifest.json.new";

// The error for a file of a dataset whose URL has a query, refused with 401/403: the query is
// appended to every file's URL, which a token for the directory allows and a pre-signed URL
// (S3/GCS: the signature covers one object) does not.
Status SignedDatasetError(const Status& s, const std::string& shown_url, const std::string& file) {
  return Status::IOError(
      "file " + file + " of dataset " + shown_url +
      ": access denied. The dataset URL's query is appended to each of its files' URLs (a token "
      "valid for the whole directory works); a pre-signed URL (S3/GCS: its signature covers one "
      "object) cannot fetch a multi-file dataset, only one file, such as an archive "
      "(`dsconvert fetch URL FILE`, then `dsconvert build FILE OUT`); the signature may also "
      "have expired. " +
      s.message());
}

// True when a fetch of a dataset's file was refused in a way SignedDatasetError explains.
bool SignedRefusal(const std::string& url, const FetchResult& r) {
  return UrlHasQuery(url) && (r.http_status == 401 || r.http_status == 403);
}

// dest_dir is complete when its manifest.json lists files that are all there with their sizes
// (their sha256 was checked when they were fetched; `dsconvert verify` rechecks it).
Status CheckComplete(Env* env, const std::string& dir, uint64_t* bytes) {
  const std::string manifest = dir + "/" + format::kTopManifestFile;
  if (!env->FileExists(manifest)) return Status::Corruption(manifest + " is missing");
  std::string text;
  DSPIPE_RETURN_IF_ERROR(env->ReadFile(manifest, &text));
  std::vector<format::ManifestFile> files;
  bool present = false;
  DSPIPE_RETURN_IF_ERROR(format::ParseManifestFiles(text, manifest, &files, &present));
  if (!present) return Status::Corruption(manifest + " has no \"files\" list");
  *bytes = 0;
  for (const format::ManifestFile& f : files) {
    uint64_t size = 0;
    const std::string path = dir + "/" + f.path;
    if (!env->FileExists(path)) return Status::Corruption(path + " is missing");
    DSPIPE_RETURN_IF_ERROR(env->FileSize(path, &size));
    if (size != f.size) {
      return Status::Corruption(path + ": size " + std::to_string(size) + ", manifest says " +
                                std::to_string(f.size));
    }
    *bytes += size;
  }
  return Status::OK();
}

Status FetchDatasetLocked(const std::string& url, const std::string& dest,
                          const FetchOptions& options, Env* env, FetchResult* res) {
  if (env->FileExists(dest)) {
    uint64_t bytes = 0;
    Status s = CheckComplete(env, dest, &bytes);
    if (!s.ok()) {
      return Status::AlreadyExists(dest + " exists and is not a complete dataset: " + s.message() +
                                   "; remove it to fetch again");
    }
    res->bytes = bytes;
    res->already_present = true;
    return Status::OK();
  }
  const std::string tmp = dest + ".part";
  const bool fresh_tmp = !env->FileExists(tmp);
  DSPIPE_RETURN_IF_ERROR(env->CreateDirs(tmp));
  const std::string fresh = tmp + "/" + kNewManifest;
  // A manifest that cannot be used leaves nothing behind that this call created: its own
  // files, then the directory when it made it and nothing else is in it.
  auto drop_tmp = [&](Status s) {
    for (const std::string& f : {fresh, fresh + ".part", fresh + ".part.json"}) {
      (void)env->RemoveFile(f);  // best effort: the error is what matters
    }
    std::vector<std::string> left;
    if (fresh_tmp && env->ListDir(tmp, &left).ok() && left.empty()) (void)env->RemoveTree(tmp);
    return s;
  };

  // The manifest, fetched anew on every call (it is small): a resumed download continues only
  // when the server still serves the same one.
  const std::string shown = RedactUrl(url);  // the query may be a secret: never in a message
  const std::string manifest_url = UrlAppendPath(url, format::kTopManifestFile);
  const std::string shown_manifest = RedactUrl(manifest_url);
  for (const std::string& stale : {fresh, fresh + ".part", fresh + ".part.json"}) {
    DSPIPE_RETURN_IF_ERROR(env->RemoveFile(stale));
  }
  FetchOptions mo = options;
  mo.lock = false;  // DEST.lock is held
  mo.progress = nullptr;
  FetchResult mr;
  Status s = Fetch(manifest_url, fresh, mo, &mr);
  if (s.code() == Status::Code::kNotFound) {
    return drop_tmp(Status::NotFound(shown_manifest + ": no manifest.json there (is " + shown +
                                     " a dspipe dataset directory?): " + s.message()));
  }
  if (!s.ok() && SignedRefusal(url, mr)) {
    return drop_tmp(SignedDatasetError(s, shown, format::kTopManifestFile));
  }
  if (!s.ok()) return drop_tmp(s);
  res->attempts += mr.attempts;
  res->downloaded += mr.downloaded;
  std::string text;
  DSPIPE_RETURN_IF_ERROR(env->ReadFile(fresh, &text));
  DatasetInfo info;
  std::vector<format::ShardRange> ranges;
  std::vector<format::ManifestFile> files;
  bool present = false;
  s = format::ParseManifest(text, shown_manifest, &info, &ranges);
  if (s.ok()) s = format::ParseManifestFiles(text, shown_manifest, &files, &present);
  if (s.ok() && !present) {
    s = Status::Unsupported(
        shown_manifest +
        ": the manifest has no \"files\" list (each file's size and sha256), so its files cannot "
        "be fetched and verified; it was written by a dspipe before the list existed: rebuild "
        "the dataset with this dspipe's `dsconvert build`");
  }
  std::set<std::string_view> paths;  // n log n: the list may be long
  for (const format::ManifestFile& f : files) paths.insert(f.path);
  for (size_t i = 0; s.ok() && i < ranges.size(); ++i) {
    // Every LMDB the manifest names must be in the list, or the copy would not open.
    const std::string need =
        ranges[i].name.empty() ? std::string("data.mdb") : ranges[i].name + "/data.mdb";
    if (paths.count(need) == 0) {
      s = Status::Corruption(shown_manifest + ": the \"files\" list lacks " + need +
                             ", which the dataset needs");
    }
  }
  if (!s.ok()) return drop_tmp(s);
  const std::string kept = tmp + "/" + format::kTopManifestFile;
  if (env->FileExists(kept)) {
    std::string old;
    DSPIPE_RETURN_IF_ERROR(env->ReadFile(kept, &old));
    if (old != text) {
      // The dataset changed on the server since the interrupted call: the files fetched for the
      // old manifest go, and only those (what the old manifest lists, their .part and sidecar):
      // we remove only what we made.
      std::vector<format::ManifestFile> old_files;
      bool old_present = false;
      if (!format::ParseManifestFiles(old, kept, &old_files, &old_present).ok() || !old_present) {
        return Status::Corruption(kept +
                                  " (kept from an interrupted fetch) cannot be read, so "
                                  "the files fetched for it cannot be told apart; remove " +
                                  tmp + " to fetch again");
      }
      for (const format::ManifestFile& f : old_files) {
        for (const std::string& p : {tmp + "/" + f.path, tmp + "/" + f.path + ".part",
                                     tmp + "/" + f.path + ".part.json"}) {
          DSPIPE_RETURN_IF_ERROR(env->RemoveFile(p));
        }
      }
      DSPIPE_RETURN_IF_ERROR(env->RemoveFile(kept));
    }
  }
  DSPIPE_RETURN_IF_ERROR(env->RenameFile(fresh, kept));

  uint64_t total = 0;  // ParseManifestFiles refused sizes whose sum overflows
  for (const format::ManifestFile& f : files) total += f.size;
  uint64_t done = 0;
  for (const format::ManifestFile& f : files) {
    FetchOptions fo = options;
    fo.sha256 = f.sha256;
    fo.size = static_cast<int64_t>(f.size);
    fo.lock = false;
    if (options.progress) {
      fo.progress = [&options, done, total](const FetchProgress& p) {
        FetchProgress agg = p;
        agg.bytes = done + p.bytes;
        agg.start_bytes = done + p.start_bytes;
        agg.total = total;
        options.progress(agg);
      };
    }
    const std::string path = tmp + "/" + f.path;
    DSPIPE_RETURN_IF_ERROR(env->CreateDirs(fs::path(path).parent_path().string()));
    FetchResult fr;
    s = Fetch(UrlAppendPath(url, f.path), path, fo, &fr);
    if (!s.ok() && SignedRefusal(url, fr)) return SignedDatasetError(s, shown, f.path);
    DSPIPE_RETURN_IF_ERROR(s.WithContext("file " + f.path + " of dataset " + shown));
    res->resumed_from += fr.already_present ? f.size : fr.resumed_from;
    res->downloaded += fr.downloaded;
    res->attempts += fr.attempts;
    res->refetches += fr.refetches;
    done += f.size;
  }
  res->bytes = total;
  // Every file was synced by Fetch; the directory gets its final name in one rename.
  DSPIPE_RETURN_IF_ERROR(env->SyncDir(tmp));
  DSPIPE_RETURN_IF_ERROR(env->RenameFile(tmp, dest));
  const std::string parent = fs::path(dest).parent_path().string();
  return env->SyncDir(parent.empty() ? "." : parent);
}

}  // namespace

Status FetchDataset(const std::string& url, const std::string& dest_dir,
                    const FetchOptions& options, FetchResult* result) {
  FetchResult local;
  FetchResult* res = result ? result : &local;
  *res = FetchResult{};
  Env* env = options.env ? options.env : Env::Default();
  if (url.empty() || dest_dir.empty()) {
    return Status::InvalidArgument("fetch dataset: empty URL or destination");
  }
  if (!options.sha256.empty() || options.size >= 0) {
    return Status::InvalidArgument(
        "fetch dataset " + RedactUrl(url) +
        ": sha256 and size are per file and come from the dataset's manifest; leave them unset");
  }
  const std::string dest = core::StripTrailingSlashes(dest_dir);
  const std::string ctx = "fetch dataset " + RedactUrl(url) + " -> " + dest;
  const std::string parent = fs::path(dest).parent_path().string();
  if (!parent.empty()) DSPIPE_RETURN_IF_ERROR(env->CreateDirs(parent).WithContext(ctx));
  std::unique_ptr<FileLock> lock;
  if (options.lock) {
    DSPIPE_RETURN_IF_ERROR(
        fetch::LockForFetch(env, dest + ".lock", options, &lock).WithContext(ctx));
  }
  Status s = FetchDatasetLocked(url, dest, options, env, res).WithContext(ctx);
  fetch::ReleaseFetchLock(env, dest + ".lock", &lock);
  return s;
}

}  // namespace dspipe
