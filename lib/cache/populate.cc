// Listing a local dataset and copying it into a cache temp dir (see populate.h).
#include "cache/populate.h"

#include <openssl/evp.h>
#include <sys/stat.h>

#include <algorithm>
#include <atomic>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <memory>

namespace dspipe::cache {
namespace {

namespace fs = std::filesystem;

constexpr size_t kCopyChunk = 4 << 20;

bool IsLmdbLockFile(const std::string& name) {
  return name == "lock.mdb" || (name.size() > 5 && name.ends_with("-lock"));
}

Status StatFile(const std::string& path, uint64_t* size, int64_t* mtime_ns) {
  struct stat st;
  if (::stat(path.c_str(), &st) != 0) return Status::IOErrorErrno("stat", path, errno);
  *size = static_cast<uint64_t>(st.st_size);
  *mtime_ns = static_cast<int64_t>(st.st_mtim.tv_sec) * 1000000000 + st.st_mtim.tv_nsec;
  return Status::OK();
}

std::string Join(const std::string& a, const std::string& rel) {
  return rel.empty() ? a : a + "/" + rel;
}

// Test hook: with DSPIPE_TEST_CACHE_STOP_AFTER_FILES=N in the environment, the process stops
// itself (SIGSTOP) right after the N-th file of a copy is complete, while it holds the entry's
// lock and the temp dir is half full. A test waits for the stop (waitpid WUNTRACED) and kills
// the process or lets another one race it there: a known point instead of a guessed one.
void MaybeStopForTest() {
  static const long stop_after = [] {
    const char* v = std::getenv("DSPIPE_TEST_CACHE_STOP_AFTER_FILES");
    return v ? std::strtol(v, nullptr, 10) : 0L;
  }();
  static std::atomic<long> files{0};
  if (stop_after > 0 && files.fetch_add(1) + 1 == stop_after) ::raise(SIGSTOP);
}

Status CopyFile(const std::string& from, uint64_t size,
                std::unique_ptr<WritableFile>* out, Env* env, std::string* buf) {
  std::unique_ptr<RandomAccessFile> in;
  DSPIPE_RETURN_IF_ERROR(env->NewRandomAccessFile(from, &in));
  std::unique_ptr<WritableFile>& w = *out;
  uint64_t off = 0;
  while (off < size) {
    size_t got = 0;
    const size_t want = static_cast<size_t>(std::min<uint64_t>(kCopyChunk, size - off));
    DSPIPE_RETURN_IF_ERROR(in->Read(off, want, buf->data(), &got));
    if (got == 0) {
      return Status::Corruption("copying " + from + " to the cache: it ended at " +
                                std::to_string(off) + " bytes, " + std::to_string(size) +
                                " were listed (the source changed)");
    }
    DSPIPE_RETURN_IF_ERROR(w->Append(std::string_view(buf->data(), got)));
    off += got;
  }
  DSPIPE_RETURN_IF_ERROR(w->Sync());
  DSPIPE_RETURN_IF_ERROR(w->Close());
  return Status::OK();
}

}  // namespace

Status ListSource(const std::string& source, SourceListing* out) {
  *out = SourceListing();
  std::error_code ec;
  const fs::path canon = fs::canonical(source, ec);
  if (ec) return Status::NotFound("cache: dataset " + source + ": " + ec.message());
  out->source = canon.string();
  const fs::file_status st = fs::status(canon, ec);
  if (ec) return Status::IOError("cache: stat " + source + ": " + ec.message());
  if (fs::is_regular_file(st)) {
    SourceFile f;
    DSPIPE_RETURN_IF_ERROR(StatFile(out->source, &f.size, &f.mtime_ns));
    out->bytes = f.size;
    out->files.push_back(std::move(f));
    return Status::OK();
  }
  if (!fs::is_directory(st)) {
    return Status::InvalidArgument("cache: " + source + " is neither a file nor a directory");
  }
  out->is_dir = true;
  fs::recursive_directory_iterator it(canon, ec), end;
  if (ec) return Status::IOError("cache: listing " + source + ": " + ec.message());
  for (; it != end; it.increment(ec)) {
    if (ec) break;
    const fs::path rel = fs::relative(it->path(), canon, ec);
    if (ec) break;
    if (it->is_directory(ec)) {
      out->dirs.push_back(rel.string());
    } else if (it->is_regular_file(ec)) {
      if (IsLmdbLockFile(it->path().filename().string())) continue;
      SourceFile f;
      f.rel = rel.string();
      DSPIPE_RETURN_IF_ERROR(StatFile(it->path().string(), &f.size, &f.mtime_ns));
      out->bytes += f.size;
      out->files.push_back(std::move(f));
    } else {
      return Status::InvalidArgument("cache: " + it->path().string() +
                                     ": not a regular file or directory (cannot be cached)");
    }
  }
  if (ec) return Status::IOError("cache: listing " + source + ": " + ec.message());
  std::sort(out->dirs.begin(), out->dirs.end());  // a parent sorts before its children
  std::sort(out->files.begin(), out->files.end(),
            [](const SourceFile& a, const SourceFile& b) { return a.rel < b.rel; });
  return Status::OK();
}

std::string EntryName(const SourceListing& listing) {
  std::string id = "dspipe-cache-v1\n" + listing.source + "\n";
  for (const SourceFile& f : listing.files) {
    id += f.rel + "\t" + std::to_string(f.size) + "\t" + std::to_string(f.mtime_ns) + "\n";
  }
  unsigned char md[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  EVP_Digest(id.data(), id.size(), md, &len, EVP_sha256(), nullptr);
  char hex[17];
  for (int i = 0; i < 8; ++i) std::snprintf(hex + 2 * i, 3, "%02x", md[i]);
  std::string base = fs::path(listing.source).filename().string();
  for (char& c : base) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                    c == '-' || c == '_' || c == '.';
    if (!ok) c = '_';
  }
  if (base.size() > 64) base.resize(64);
  if (base.empty() || base[0] == '.') base = "dataset" + base;
  return base + "-" + hex;
}

Status PopulateFromSource(const SourceListing& listing, const std::string& dest, Env* env) {
  // Local sources only; an http(s):// source branches here (FetchDataset into dest).
  if (listing.is_dir) DSPIPE_RETURN_IF_ERROR(env->CreateDirs(dest));
  for (const std::string& d : listing.dirs) DSPIPE_RETURN_IF_ERROR(env->CreateDirs(dest + "/" + d));
  // 1. Reserve every file's space before copying a byte.
  std::vector<std::unique_ptr<WritableFile>> outs(listing.files.size());
  for (size_t i = 0; i < listing.files.size(); ++i) {
    const SourceFile& f = listing.files[i];
    DSPIPE_RETURN_IF_ERROR(env->NewWritableFile(Join(dest, f.rel), /*truncate=*/true, &outs[i]));
    Status s = outs[i]->Allocate(0, f.size);
    if (!s.ok()) {
      return s.WithContext("cache: reserving " + std::to_string(f.size) + " bytes for " +
                           Join(listing.source, f.rel));
    }
  }
  // 2. Copy, file by file, each fsynced.
  std::string buf(kCopyChunk, '\0');
  for (size_t i = 0; i < listing.files.size(); ++i) {
    const SourceFile& f = listing.files[i];
    const std::string from = Join(listing.source, f.rel);
    DSPIPE_RETURN_IF_ERROR(CopyFile(from, f.size, &outs[i], env, &buf));
    outs[i].reset();
    MaybeStopForTest();
  }
  // 3. Verify: each copy has the listed size, and the source is what was listed (a dataset
  //    rewritten during the copy must not be cached as a mix of old and new bytes).
  for (const SourceFile& f : listing.files) {
    uint64_t got = 0;
    DSPIPE_RETURN_IF_ERROR(env->FileSize(Join(dest, f.rel), &got));
    if (got != f.size) {
      return Status::Corruption("cache: copy of " + Join(listing.source, f.rel) + " has " +
                                std::to_string(got) + " bytes, expected " +
                                std::to_string(f.size));
    }
    uint64_t size = 0;
    int64_t mtime = 0;
    DSPIPE_RETURN_IF_ERROR(StatFile(Join(listing.source, f.rel), &size, &mtime));
    if (size != f.size || mtime != f.mtime_ns) {
      return Status::Corruption("cache: " + Join(listing.source, f.rel) +
                                " changed while it was copied; not cached");
    }
  }
  // 4. Directories durable (files were fsynced as they were written).
  if (listing.is_dir) {
    for (auto it = listing.dirs.rbegin(); it != listing.dirs.rend(); ++it) {
      DSPIPE_RETURN_IF_ERROR(env->SyncDir(dest + "/" + *it));
    }
    DSPIPE_RETURN_IF_ERROR(env->SyncDir(dest));
  }
  return Status::OK();
}

}  // namespace dspipe::cache
