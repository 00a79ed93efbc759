// Listing a local dataset and copying it into a cache temp dir (see populate.h).
#include "cache/populate.h"

#include <fcntl.h>
#include <openssl/evp.h>
#include <sys/sendfile.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <mutex>

#include "dspipe/fetch.h"
#include "format/manifest.h"

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

std::mutex& HookMu() {
  static std::mutex mu;
  return mu;
}
CopyHook& Hook() {
  static CopyHook hook;
  return hook;
}

void RunHook(size_t files_done, const CancelToken* cancel) {
  CopyHook hook;
  {
    std::lock_guard<std::mutex> lock(HookMu());
    hook = Hook();
  }
  if (hook) hook(files_done, cancel);
}

thread_local std::string last_method = "read/write";

std::function<void(const FetchProgress&)>& FetchHook() {
  static std::function<void(const FetchProgress&)> hook;
  return hook;
}

Status CheckCancel(const CancelToken* cancel, const std::string& from) {
  if (cancel != nullptr && cancel->requested()) return CancelledError("copying " + from);
  return Status::OK();
}

// Closes an fd at scope exit.
class Fd {
 public:
  explicit Fd(int fd) : fd_(fd) {}
  ~Fd() {
    if (fd_ >= 0) ::close(fd_);
  }
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  int get() const { return fd_; }
  int release() {
    const int fd = fd_;
    fd_ = -1;
    return fd;
  }

 private:
  int fd_;
};

bool KernelCopyRefused(int err) {
  return err == EXDEV || err == ENOSYS || err == EINVAL || err == EOPNOTSUPP;
}

// The default Env's copy: the bytes move inside the kernel, `kCopyChunk` at a time (so a cancel
// is seen within one chunk). copy_file_range first (same filesystem: maybe no copy at all),
// sendfile when it refuses (ext4 -> tmpfs is EXDEV since Linux 5.19); *refused when both refuse
// before the first byte (the caller copies through the Env instead). The space was reserved by
// the caller; this opens the file again for writing, writes from offset 0 and fdatasyncs it.
Status KernelCopy(const std::string& from, const std::string& to, uint64_t size,
                  const CancelToken* cancel, bool* refused) {
  *refused = false;
  Fd in(::open(from.c_str(), O_RDONLY | O_CLOEXEC));
  if (in.get() < 0) return Status::IOErrorErrno("open", from, errno);
  Fd out(::open(to.c_str(), O_WRONLY | O_CLOEXEC));
  if (out.get() < 0) return Status::IOErrorErrno("open", to, errno);
  bool use_sendfile = false;
  uint64_t off = 0;
  while (off < size) {
    DSPIPE_RETURN_IF_ERROR(CheckCancel(cancel, from));
    const size_t want = static_cast<size_t>(std::min<uint64_t>(kCopyChunk, size - off));
    ssize_t n;
    if (!use_sendfile) {
      auto in_off = static_cast<off_t>(off), out_off = static_cast<off_t>(off);
      n = ::copy_file_range(in.get(), &in_off, out.get(), &out_off, want, 0);
      if (n < 0 && KernelCopyRefused(errno)) {
        use_sendfile = true;
        if (::lseek(out.get(), static_cast<off_t>(off), SEEK_SET) < 0) {
          return Status::IOErrorErrno("lseek", to, errno);
        }
        continue;
      }
    } else {
      auto in_off = static_cast<off_t>(off);
      n = ::sendfile(out.get(), in.get(), &in_off, want);
      if (n < 0 && off == 0 && KernelCopyRefused(errno)) {
        *refused = true;
        return Status::OK();
      }
    }
    if (n < 0) {
      if (errno == EINTR) continue;
      return Status::IOErrorErrno(use_sendfile ? "sendfile" : "copy_file_range",
                                  from + " -> " + to, errno);
    }
    if (n == 0) {
      return Status::Corruption("copying " + from + " to the cache: it ended at " +
                                std::to_string(off) + " bytes, " + std::to_string(size) +
                                " were listed (the source changed)");
    }
    off += static_cast<uint64_t>(n);
  }
  last_method = use_sendfile ? "sendfile" : "copy_file_range";
  if (::fdatasync(out.get()) != 0) return Status::IOErrorErrno("fsync", to, errno);
  if (::close(out.release()) != 0) return Status::IOErrorErrno("close", to, errno);
  return Status::OK();
}

Status CopyFile(const std::string& from, uint64_t size, std::unique_ptr<WritableFile>* out,
                Env* env, std::string* buf, const CancelToken* cancel) {
  if (env == Env::Default()) {
    bool refused = false;
    DSPIPE_RETURN_IF_ERROR(KernelCopy(from, (*out)->path(), size, cancel, &refused));
    if (!refused) return (*out)->Close();
  }
  last_method = "read/write";
  if (buf->empty()) buf->assign(kCopyChunk, '\0');
  std::unique_ptr<RandomAccessFile> in;
  DSPIPE_RETURN_IF_ERROR(env->NewRandomAccessFile(from, &in));
  std::unique_ptr<WritableFile>& w = *out;
  uint64_t off = 0;
  while (off < size) {
    DSPIPE_RETURN_IF_ERROR(CheckCancel(cancel, from));
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

std::string Sha256Hex(const std::string& data) {
  unsigned char md[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  EVP_Digest(data.data(), data.size(), md, &len, EVP_sha256(), nullptr);
  std::string hex(2 * len, '0');
  for (unsigned int i = 0; i < len; ++i) std::snprintf(&hex[2 * i], 3, "%02x", md[i]);
  return hex;
}

std::string StripSlashes(std::string s) {
  while (!s.empty() && s.back() == '/') s.pop_back();
  return s;
}

// The last path component of a URL (the host when it has no path).
std::string UrlBaseName(const std::string& url) {
  std::string u = StripSlashes(url);
  const size_t q = u.find_first_of("?#");
  if (q != std::string::npos) u = StripSlashes(u.substr(0, q));
  const size_t slash = u.rfind('/');
  const std::string last = slash == std::string::npos ? u : u.substr(slash + 1);
  // "http://host" alone has no path: the host names it.
  return last.find(':') != std::string::npos && slash != std::string::npos && slash > 0 &&
                 u[slash - 1] == '/'
             ? last.substr(0, last.find(':'))
             : last;
}

// A temp dir (removed with everything in it when this goes out of scope).
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

}  // namespace

Status CancelledError(const std::string& what) {
  return Status::Aborted("cache: " + what + ": cancelled (the loader that wanted the copy is gone)");
}

bool IsCancelled(const Status& s) {
  return s.code() == Status::Code::kAborted && s.ToString().find(": cancelled (") != std::string::npos;
}

void SetCopyHookForTest(CopyHook hook) {
  std::lock_guard<std::mutex> lock(HookMu());
  Hook() = std::move(hook);
}

std::string LastCopyMethod() { return last_method; }

void SetFetchProgressHookForTest(std::function<void(const FetchProgress&)> hook) {
  std::lock_guard<std::mutex> lock(HookMu());
  FetchHook() = std::move(hook);
}

bool IsUrl(const std::string& source) {
  auto starts = [&source](std::string_view p) {
    if (source.size() < p.size()) return false;
    for (size_t i = 0; i < p.size(); ++i) {
      const char c = source[i];
      if ((c >= 'A' && c <= 'Z' ? static_cast<char>(c - 'A' + 'a') : c) != p[i]) return false;
    }
    return true;
  };
  return starts("http://") || starts("https://") || starts("s3://");  // s3: lib/fetch/s3.h
}

Status ListUrlSource(const std::string& url, Env* env, SourceListing* out) {
  *out = SourceListing();
  out->url = url;
  // The key ignores the query (a signature or token, which changes when re-signed: the same
  // entry), and holds no secret.
  out->source = StripSlashes(UrlIdentity(url));
  out->is_dir = true;
  const std::string manifest_url = UrlAppendPath(url, kTopManifestFile);
  const std::string shown_manifest = RedactUrl(manifest_url);
  TempDir tmp;
  DSPIPE_RETURN_IF_ERROR(tmp.Make());
  const std::string local = tmp.path() + "/" + kTopManifestFile;
  FetchOptions fo;
  fo.lock = false;  // a private temp dir
  fo.env = env;
  Status s = Fetch(manifest_url, local, fo);
  if (!s.ok()) {
    return s.WithContext("cache: listing the dataset at " + RedactUrl(url) +
                         " (its manifest.json)");
  }
  DSPIPE_RETURN_IF_ERROR(env->ReadFile(local, &out->manifest));
  std::vector<ShardRange> ranges;
  DSPIPE_RETURN_IF_ERROR(ParseManifest(out->manifest, shown_manifest, &out->info, &ranges));
  std::vector<ManifestFile> files;
  bool present = false;
  DSPIPE_RETURN_IF_ERROR(ParseManifestFiles(out->manifest, shown_manifest, &files, &present));
  if (!present) {
    return Status::Unsupported(
        shown_manifest +
        ": the manifest has no \"files\" list (each file's size and sha256), so the dataset "
        "cannot be fetched into the cache; rebuild it with this dspipe's `dsconvert build`");
  }
  out->manifest_sha256 = Sha256Hex(out->manifest);
  // manifest.json is part of the copy too (FetchDataset keeps it beside the files).
  SourceFile m;
  m.rel = kTopManifestFile;
  m.size = out->manifest.size();
  out->bytes = m.size;
  out->files.push_back(std::move(m));
  for (const ManifestFile& f : files) {
    SourceFile sf;
    sf.rel = f.path;
    sf.size = f.size;
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

std::string SideRel(const SourceListing& side) {
  std::string base = fs::path(side.source).filename().string();
  if (base.empty() || base == "." || base == "..") base = "masks.lmdb";
  return "masks/" + base;
}

std::string EntryName(const SourceListing& listing) {
  std::string id;
  if (!listing.url.empty()) {
    // The URL + the served manifest: a dataset rebuilt on the server gets a new entry.
    id = "dspipe-cache-url-v1\n" + listing.source + "\n" + listing.manifest_sha256 + "\n";
  } else {
    id = "dspipe-cache-v1\n" + listing.source + "\n";
    for (const SourceFile& f : listing.files) {
      id += f.rel + "\t" + std::to_string(f.size) + "\t" + std::to_string(f.mtime_ns) + "\n";
    }
    // Sides (a plain LMDB's masks LMDB): none keeps the names entries had before sides existed.
    for (const SourceListing& side : listing.sides) {
      id += "side\t" + SideRel(side) + "\t" + side.source + "\n";
      for (const SourceFile& f : side.files) {
        id += f.rel + "\t" + std::to_string(f.size) + "\t" + std::to_string(f.mtime_ns) + "\n";
      }
    }
  }
  const std::string hex = Sha256Hex(id).substr(0, 16);
  std::string base = listing.url.empty() ? fs::path(listing.source).filename().string()
                                         : UrlBaseName(listing.source);
  for (char& c : base) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                    c == '-' || c == '_' || c == '.';
    if (!ok) c = '_';
  }
  if (base.size() > 64) base.resize(64);
  if (base.empty() || base[0] == '.') base = "dataset" + base;
  return base + "-" + hex;
}

Status PopulateFromSource(const SourceListing& listing, const std::string& dest, Env* env,
                          const CancelToken* cancel) {
  if (!listing.url.empty()) {
    // A served dataset: FetchDataset (verified against the manifest, resumable) into dest.
    FetchOptions fo;
    fo.lock = false;  // the caller holds the entry's lock; dest is inside its temp dir
    fo.env = env;
    {
      std::lock_guard<std::mutex> lock(HookMu());
      fo.progress = FetchHook();
    }
    DSPIPE_RETURN_IF_ERROR(FetchDataset(listing.url, dest, fo));
    std::string fetched;
    DSPIPE_RETURN_IF_ERROR(env->ReadFile(dest + "/" + kTopManifestFile, &fetched));
    if (fetched != listing.manifest) {
      return Status::Corruption("cache: the dataset at " + RedactUrl(listing.url) +
                                " changed on the server while it was fetched (its manifest.json "
                                "differs from the one listed); not cached, open it again");
    }
    return Status::OK();
  }
  // The source at `dest`, each side (a plain LMDB's masks LMDB) beside it at SideRel: one plan,
  // so that every file of every part is reserved before any byte is copied.
  struct Part {
    const SourceListing* listing;
    std::string dest;
  };
  std::vector<Part> parts{{&listing, dest}};
  const std::string parent = fs::path(dest).parent_path().string();
  for (const SourceListing& side : listing.sides) {
    parts.push_back({&side, parent + "/" + SideRel(side)});
  }
  for (size_t p = 0; p < parts.size(); ++p) {
    const Part& part = parts[p];
    if (p > 0) DSPIPE_RETURN_IF_ERROR(env->CreateDirs(fs::path(part.dest).parent_path().string()));
    if (part.listing->is_dir) DSPIPE_RETURN_IF_ERROR(env->CreateDirs(part.dest));
    for (const std::string& d : part.listing->dirs) {
      DSPIPE_RETURN_IF_ERROR(env->CreateDirs(part.dest + "/" + d));
    }
  }
  // 1. Reserve every file's space before copying a byte.
  struct Copy {
    std::string from, to;
    uint64_t size = 0;
    int64_t mtime_ns = 0;
    std::unique_ptr<WritableFile> out;
  };
  std::vector<Copy> copies;
  for (const Part& part : parts) {
    for (const SourceFile& f : part.listing->files) {
      Copy c;
      c.from = Join(part.listing->source, f.rel);
      c.to = Join(part.dest, f.rel);
      c.size = f.size;
      c.mtime_ns = f.mtime_ns;
      DSPIPE_RETURN_IF_ERROR(env->NewWritableFile(c.to, /*truncate=*/true, &c.out));
      Status s = c.out->Allocate(0, f.size);
      if (!s.ok()) {
        return s.WithContext("cache: reserving " + std::to_string(f.size) + " bytes for " + c.from);
      }
      copies.push_back(std::move(c));
    }
  }
  // 2. Copy, file by file, each fsynced.
  std::string buf;  // read/write path only (allocated on first use)
  for (size_t i = 0; i < copies.size(); ++i) {
    Copy& c = copies[i];
    DSPIPE_RETURN_IF_ERROR(CopyFile(c.from, c.size, &c.out, env, &buf, cancel));
    c.out.reset();
    MaybeStopForTest();
    RunHook(i + 1, cancel);
    DSPIPE_RETURN_IF_ERROR(CheckCancel(cancel, c.from));
  }
  // 3. Verify: each copy has the listed size, and the source is what was listed (a dataset
  //    rewritten during the copy must not be cached as a mix of old and new bytes).
  for (const Copy& c : copies) {
    uint64_t got = 0;
    DSPIPE_RETURN_IF_ERROR(env->FileSize(c.to, &got));
    if (got != c.size) {
      return Status::Corruption("cache: copy of " + c.from + " has " + std::to_string(got) +
                                " bytes, expected " + std::to_string(c.size));
    }
    uint64_t size = 0;
    int64_t mtime = 0;
    DSPIPE_RETURN_IF_ERROR(StatFile(c.from, &size, &mtime));
    if (size != c.size || mtime != c.mtime_ns) {
      return Status::Corruption("cache: " + c.from + " changed while it was copied; not cached");
    }
  }
  // 4. Directories durable (files were fsynced as they were written).
  for (size_t p = 0; p < parts.size(); ++p) {
    const Part& part = parts[p];
    if (part.listing->is_dir) {
      for (auto it = part.listing->dirs.rbegin(); it != part.listing->dirs.rend(); ++it) {
        DSPIPE_RETURN_IF_ERROR(env->SyncDir(part.dest + "/" + *it));
      }
      DSPIPE_RETURN_IF_ERROR(env->SyncDir(part.dest));
    }
    if (p > 0) DSPIPE_RETURN_IF_ERROR(env->SyncDir(fs::path(part.dest).parent_path().string()));
  }
  return Status::OK();
}

}  // namespace dspipe::cache
