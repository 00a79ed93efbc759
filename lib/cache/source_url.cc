// SPDX-License-Identifier: Apache-2.0
// A served dataset (http(s):// URL) as a cache source: its listing from manifest.json, and its
// copy made with FetchDataset (see populate.h).
#include <stdlib.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <mutex>

#include "cache/entries.h"
#include "cache/populate.h"
#include "core/checksum.h"
#include "core/files.h"
#include "format/manifest.h"

namespace dspipe::cache {
namespace {

namespace fs = std::filesystem;

// A private temp dir (mkdtemp: ours alone), removed with everything in it at scope exit.
class TempDir {
 public:
  Status Make() {
    std::error_code ec;
    std::string tmpl = (fs::temp_directory_path(ec) / "dspipe-cache-manifest-XXXXXX").string();
    if (ec) tmpl = "/tmp/dspipe-cache-manifest-XXXXXX";
    if (::mkdtemp(tmpl.data()) == nullptr) return Status::IOErrorErrno("mkdtemp", tmpl, errno);
    path_ = tmpl;
    return Status::OK();
  }
  ~TempDir() {
    std::error_code ec;
    if (!path_.empty()) fs::remove_all(path_, ec);
  }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

std::mutex& HookMu() {
  static std::mutex mu;
  return mu;
}
std::function<void(const FetchProgress&)>& FetchHook() {
  static std::function<void(const FetchProgress&)> hook;
  return hook;
}

}  // namespace

std::string UrlBaseName(const std::string& url) {
  std::string u = core::StripTrailingSlashes(url);
  const size_t q = u.find_first_of("?#");
  if (q != std::string::npos) u = core::StripTrailingSlashes(u.substr(0, q));
  const size_t slash = u.rfind('/');
  const std::string last = slash == std::string::npos ? u : u.substr(slash + 1);
  // "http://host" alone has no path: the host names it.
  return last.find(':') != std::string::npos && slash != std::string::npos && slash > 0 &&
                 u[slash - 1] == '/'
             ? last.substr(0, last.find(':'))
             : last;
}

void SetFetchProgressHookForTest(std::function<void(const FetchProgress&)> hook) {
  std::lock_guard<std::mutex> lock(HookMu());
  FetchHook() = std::move(hook);
}

Status ListUrlSource(const std::string& url, Env* env, SourceListing* out) {
  *out = SourceListing();
  out->url = url;
  // The key ignores the query (a signature or token, which changes when re-signed: the same
  // entry), and holds no secret.
  out->source = core::StripTrailingSlashes(UrlIdentity(url));
  out->is_dir = true;
  const std::string manifest_url = UrlAppendPath(url, format::kTopManifestFile);
  const std::string shown_manifest = RedactUrl(manifest_url);
  TempDir tmp;
  DSPIPE_RETURN_IF_ERROR(tmp.Make());
  const std::string local = tmp.path() + "/" + format::kTopManifestFile;
  FetchOptions fo;
  fo.lock = false;  // a private temp dir
  fo.env = env;
  Status s = Fetch(manifest_url, local, fo);
  if (!s.ok()) {
    return s.WithContext("cache: listing the dataset at " + RedactUrl(url) +
                         " (its manifest.json)");
  }
  DSPIPE_RETURN_IF_ERROR(env->ReadFile(local, &out->manifest));
  std::vector<format::ShardRange> ranges;
  DSPIPE_RETURN_IF_ERROR(format::ParseManifest(out->manifest, shown_manifest, &out->info, &ranges));
  std::vector<format::ManifestFile> files;
  bool present = false;
  // Sizes are checked there: each below 2^63 and their sum too (never a sum that wraps).
  DSPIPE_RETURN_IF_ERROR(
      format::ParseManifestFiles(out->manifest, shown_manifest, &files, &present));
  if (!present) {
    return Status::Unsupported(
        shown_manifest +
        ": the manifest has no \"files\" list (each file's size and sha256), so the dataset "
        "cannot be fetched into the cache; rebuild it with this dspipe's `dsconvert build`");
  }
  out->manifest_sha256 = core::Sha256Hex(out->manifest);
  // manifest.json is part of the copy too (FetchDataset keeps it beside the files).
  SourceFile m;
  m.rel = format::kTopManifestFile;
  m.size = out->manifest.size();
  out->bytes = m.size;
  out->files.push_back(std::move(m));
  for (const format::ManifestFile& f : files) {
    SourceFile sf;
    sf.rel = f.path;
    sf.size = f.size;
    if (out->bytes + f.size < out->bytes) {
      return Status::Corruption(shown_manifest + ": the sizes of its files overflow");
    }
    out->bytes += f.size;
    out->files.push_back(std::move(sf));
    // Parent dirs, parents first (for the listing's completeness; FetchDataset makes them).
    for (fs::path d = fs::path(f.path).parent_path(); !d.empty(); d = d.parent_path()) {
      out->dirs.push_back(d.string());
    }
  }
  std::sort(out->dirs.begin(), out->dirs.end());
  out->dirs.erase(std::unique(out->dirs.begin(), out->dirs.end()), out->dirs.end());
  std::sort(out->files.begin(), out->files.end(),
            [](const SourceFile& a, const SourceFile& b) { return a.rel < b.rel; });
  return Status::OK();
}

Status PopulateFromUrl(const SourceListing& listing, Directory* tmp, const std::string& base,
                       Env* env, const CancelToken* cancel, std::vector<EntryFile>* files) {
  // FetchDataset (verified against the manifest, resumable) into tmp/base: it writes only
  // there and in tmp/base.part/, inside the entry's temp dir.
  FetchOptions fo;
  fo.lock = false;  // the caller holds the entry's lock
  fo.env = env;
  {
    std::lock_guard<std::mutex> lock(HookMu());
    fo.progress = FetchHook();
  }
  if (cancel != nullptr) fo.cancelled = [cancel] { return cancel->requested(); };
  if (listing.fetch_files) {
    // One shard of a served dataset: its files as the dataset's manifest lists them, each
    // verified (size + sha256) by Fetch; dirs first, all inside tmp/base.
    const std::string root = tmp->path() + "/" + base;
    std::error_code ec;
    fs::create_directory(root, ec);
    if (ec) return Status::IOErrorErrno("mkdir", root, ec.value());
    for (const std::string& d : listing.dirs) {
      fs::create_directory(root + "/" + d, ec);
      if (ec) return Status::IOErrorErrno("mkdir", root + "/" + d, ec.value());
    }
    for (const SourceFile& f : listing.files) {
      FetchOptions one = fo;
      one.sha256 = f.sha256;
      one.size = static_cast<int64_t>(f.size);
      DSPIPE_RETURN_IF_ERROR(Fetch(UrlAppendPath(listing.url, f.rel), root + "/" + f.rel, one));
    }
    *files = ExpectedFiles(listing, base);
    for (EntryFile& f : *files) DSPIPE_RETURN_IF_ERROR(ReadBack(tmp, &f));
    return Status::OK();
  }
  DSPIPE_RETURN_IF_ERROR(FetchDataset(listing.url, tmp->path() + "/" + base, fo));
  std::unique_ptr<Directory> copy;
  DSPIPE_RETURN_IF_ERROR(tmp->OpenDir(base, false, 0, &copy));
  std::string fetched;
  DSPIPE_RETURN_IF_ERROR(copy->ReadFile(format::kTopManifestFile, &fetched));
  if (fetched != listing.manifest) {
    return Status::Corruption("cache: the dataset at " + RedactUrl(listing.url) +
                              " changed on the server while it was fetched (its manifest.json "
                              "differs from the one listed); not cached, open it again");
  }
  *files = ExpectedFiles(listing, base);
  for (EntryFile& f : *files) DSPIPE_RETURN_IF_ERROR(ReadBack(tmp, &f));
  return Status::OK();
}

}  // namespace dspipe::cache
