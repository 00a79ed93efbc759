// SPDX-License-Identifier: Apache-2.0
// Copying a local dataset into an entry's temp dir, through the temp dir's descriptor, and the
// dispatch to a URL source's fetch (see populate.h, PopulateFromSource).
#include <fcntl.h>
#include <sys/sendfile.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <map>
#include <memory>

#include "cache/entries.h"
#include "cache/populate.h"
#include "cache/test_hooks.h"
#include "core/files.h"

namespace dspipe::cache {

// source_url.cc
Status PopulateFromUrl(const SourceListing& listing, Directory* tmp, const std::string& base,
                       Env* env, const CancelToken* cancel, std::vector<EntryFile>* files);

namespace {

thread_local std::string last_method = "read/write";

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

 private:
  int fd_;
};

bool KernelCopyRefused(int err) {
  return err == EXDEV || err == ENOSYS || err == EINVAL || err == EOPNOTSUPP;
}

Status SourceChanged(const std::string& from, uint64_t off, uint64_t size) {
  return Status::Corruption("copying " + from + " to the cache: it ended at " +
                            std::to_string(off) + " bytes, " + std::to_string(size) +
                            " were listed (the source changed)");
}

// Opens a source file for reading only (O_RDONLY; O_NONBLOCK so that a FIFO put there since the
// listing cannot block us; it must still be a regular file).
Status OpenSource(const std::string& from, int* fd) {
  *fd = ::open(from.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (*fd < 0) return Status::IOErrorErrno("open", from, errno);
  struct stat st;
  if (::fstat(*fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(*fd);
    *fd = -1;
    return Status::Corruption("cache: " + from + " is no longer a regular file; not cached");
  }
  return Status::OK();
}

// The default Env's copy into the open descriptor `out`: the bytes move inside the kernel,
// `kCopyChunk` at a time (so a cancel is seen within one chunk). copy_file_range first (same
// filesystem: maybe no copy at all), sendfile when it refuses (ext4 -> tmpfs is EXDEV since
// Linux 5.19); *refused when both refuse before the first byte (the caller copies through the
// Env instead). The space was reserved by the caller.
Status KernelCopy(const std::string& from, int out, const std::string& to, uint64_t size,
                  const CancelToken* cancel, bool* refused) {
  *refused = false;
  int in_fd = -1;
  DSPIPE_RETURN_IF_ERROR(OpenSource(from, &in_fd));
  Fd in(in_fd);
  bool use_sendfile = false;
  uint64_t off = 0;
  while (off < size) {
    DSPIPE_RETURN_IF_ERROR(CheckCancel(cancel, from));
    const size_t want = static_cast<size_t>(std::min<uint64_t>(core::kCopyChunk, size - off));
    ssize_t n;
    if (!use_sendfile) {
      auto in_off = static_cast<off_t>(off), out_off = static_cast<off_t>(off);
      n = ::copy_file_range(in.get(), &in_off, out, &out_off, want, 0);
      if (n < 0 && KernelCopyRefused(errno)) {
        use_sendfile = true;
        if (::lseek(out, static_cast<off_t>(off), SEEK_SET) < 0) {
          return Status::IOErrorErrno("lseek", to, errno);
        }
        continue;
      }
    } else {
      auto in_off = static_cast<off_t>(off);
      n = ::sendfile(out, in.get(), &in_off, want);
      if (n < 0 && off == 0 && KernelCopyRefused(errno)) {
        *refused = true;
        return Status::OK();
      }
    }
    if (n < 0) {
      if (errno == EINTR) continue;
      return Status::IOErrorErrno(use_sendfile ? "sendfile" : "copy_file_range", from + " -> " + to,
                                  errno);
    }
    if (n == 0) return SourceChanged(from, off, size);
    off += static_cast<uint64_t>(n);
  }
  last_method = use_sendfile ? "sendfile" : "copy_file_range";
  if (::fdatasync(out) != 0) return Status::IOErrorErrno("fsync", to, errno);
  return Status::OK();
}

Status CopyFile(const std::string& from, uint64_t size, WritableFile* w, Env* env, std::string* buf,
                const CancelToken* cancel) {
  if (env == Env::Default() && w->native_fd() >= 0) {
    bool refused = false;
    DSPIPE_RETURN_IF_ERROR(KernelCopy(from, w->native_fd(), w->path(), size, cancel, &refused));
    if (!refused) return w->Close();
  }
  last_method = "read/write";
  if (buf->empty()) buf->assign(core::kCopyChunk, '\0');
  std::unique_ptr<RandomAccessFile> in;
  DSPIPE_RETURN_IF_ERROR(env->NewRandomAccessFile(from, &in));
  uint64_t off = 0;
  while (off < size) {
    DSPIPE_RETURN_IF_ERROR(CheckCancel(cancel, from));
    size_t got = 0;
    const size_t want = static_cast<size_t>(std::min<uint64_t>(core::kCopyChunk, size - off));
    DSPIPE_RETURN_IF_ERROR(in->Read(off, want, buf->data(), &got));
    if (got == 0) return SourceChanged(from, off, size);
    DSPIPE_RETURN_IF_ERROR(w->Append(std::string_view(buf->data(), got)));
    off += got;
  }
  DSPIPE_RETURN_IF_ERROR(w->Sync());
  return w->Close();
}

Status StatSource(const std::string& path, uint64_t* size, int64_t* mtime_ns) {
  struct stat st;
  if (::stat(path.c_str(), &st) != 0) return Status::IOErrorErrno("stat", path, errno);
  *size = static_cast<uint64_t>(st.st_size);
  *mtime_ns = static_cast<int64_t>(st.st_mtim.tv_sec) * 1000000000 + st.st_mtim.tv_nsec;
  return Status::OK();
}

std::string Parent(const std::string& rel) {
  const size_t slash = rel.rfind('/');
  return slash == std::string::npos ? "" : rel.substr(0, slash);
}
std::string Leaf(const std::string& rel) {
  const size_t slash = rel.rfind('/');
  return slash == std::string::npos ? rel : rel.substr(slash + 1);
}

// One listing's destination: `at` (its path in the entry: "<base>" or "masks/<name>") below
// `holder`; for a directory source every directory of it, open, by its rel ("" = its top).
struct Part {
  const SourceListing* listing = nullptr;
  Directory* holder = nullptr;  // where `name` is
  std::string name, at;
  std::map<std::string, std::unique_ptr<Directory>> dirs;
};

Status MakeDirs(Part* p) {
  if (!p->listing->is_dir) return Status::OK();
  DSPIPE_RETURN_IF_ERROR(p->holder->OpenDir(p->name, true, 0755, &p->dirs[""]));
  for (const std::string& d : p->listing->dirs) {  // parents first
    auto parent = p->dirs.find(Parent(d));
    if (parent == p->dirs.end())
      return Status::Internal("cache: " + d + " listed before its parent");
    std::unique_ptr<Directory> sub;
    DSPIPE_RETURN_IF_ERROR(parent->second->OpenDir(Leaf(d), true, 0755, &sub));
    p->dirs[d] = std::move(sub);
  }
  return Status::OK();
}

struct Copy {
  std::string from;  // the source file (read only)
  Directory* dir;    // where the copy is made
  std::string name;  // its name there
  EntryFile file;    // its path in the entry, size
  int64_t mtime_ns = 0;
  std::unique_ptr<WritableFile> out;
};

}  // namespace

Status CancelledError(const std::string& what) {
  return Status::Cancelled("cache: " + what +
                           ": cancelled (the loader that wanted the copy is gone)");
}

bool IsCancelled(const Status& s) { return s.code() == Status::Code::kCancelled; }

std::string LastCopyMethod() { return last_method; }

Status PopulateFromSource(const SourceListing& listing, Directory* tmp, const std::string& base,
                          const std::string& entry, Env* env, const CancelToken* cancel,
                          std::vector<EntryFile>* files) {
  files->clear();
  if (!listing.url.empty()) return PopulateFromUrl(listing, tmp, base, env, cancel, files);
  // The source at tmp/base, each side (a plain LMDB's masks LMDB) at tmp/masks/<name>: one
  // plan, so that every file of every part is reserved before any byte is copied.
  std::vector<Part> parts(1);
  parts[0].listing = &listing;
  parts[0].holder = tmp;
  parts[0].name = parts[0].at = base;
  std::unique_ptr<Directory> masks;
  if (!listing.sides.empty()) {
    DSPIPE_RETURN_IF_ERROR(tmp->OpenDir("masks", true, 0755, &masks));
    for (const SourceListing& side : listing.sides) {
      Part p;
      p.listing = &side;
      p.holder = masks.get();
      p.at = SideRel(side);
      p.name = Leaf(p.at);
      parts.push_back(std::move(p));
    }
  }
  for (Part& p : parts) DSPIPE_RETURN_IF_ERROR(MakeDirs(&p));
  // 1. Reserve every file's space before copying a byte.
  std::vector<Copy> copies;
  for (Part& p : parts) {
    for (const SourceFile& f : p.listing->files) {
      Copy c;
      c.from = f.rel.empty() ? p.listing->source : p.listing->source + "/" + f.rel;
      if (p.listing->is_dir) {
        c.dir = p.dirs.at(Parent(f.rel)).get();
        c.name = Leaf(f.rel);
      } else {
        c.dir = p.holder;
        c.name = p.name;
      }
      c.file.path = f.rel.empty() ? p.at : p.at + "/" + f.rel;
      c.file.size = f.size;
      c.mtime_ns = f.mtime_ns;
      DSPIPE_RETURN_IF_ERROR(c.dir->NewFile(c.name, &c.out));
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
    DSPIPE_RETURN_IF_ERROR(CopyFile(c.from, c.file.size, c.out.get(), env, &buf, cancel));
    c.out.reset();
    RunStepHook(Step::kFileCopied, entry, i + 1, cancel);
    DSPIPE_RETURN_IF_ERROR(CheckCancel(cancel, c.from));
  }
  // 3. Verify: each copy has the listed size (read back: its crc32 for the completion record),
  //    and the source is what was listed (a dataset rewritten during the copy must not be cached
  //    as a mix of old and new bytes).
  for (Copy& c : copies) {
    DSPIPE_RETURN_IF_ERROR(ReadBack(tmp, &c.file));
    uint64_t size = 0;
    int64_t mtime = 0;
    DSPIPE_RETURN_IF_ERROR(StatSource(c.from, &size, &mtime));
    if (size != c.file.size || mtime != c.mtime_ns) {
      return Status::Corruption("cache: " + c.from + " changed while it was copied; not cached");
    }
    files->push_back(c.file);
  }
  std::sort(files->begin(), files->end(),
            [](const EntryFile& a, const EntryFile& b) { return a.path < b.path; });
  // 4. Directories durable (files were fsynced as they were written), deepest first.
  for (Part& p : parts) {
    for (auto it = p.dirs.rbegin(); it != p.dirs.rend(); ++it) {
      DSPIPE_RETURN_IF_ERROR(it->second->Sync());
    }
  }
  if (masks) DSPIPE_RETURN_IF_ERROR(masks->Sync());
  return Status::OK();
}

}  // namespace dspipe::cache
