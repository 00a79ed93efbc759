// SPDX-License-Identifier: Apache-2.0
// The POSIX Directory (a directory held by descriptor, names resolved with openat and friends,
// symlinks never followed) and the helpers every Directory shares.
#include <dirent.h>
#include <fcntl.h>
#include <linux/magic.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/vfs.h>
#include <unistd.h>

#include <cerrno>

#include "core/env_internal.h"

namespace dspipe {
namespace core {

// Defined in env.cc: the POSIX files over an open descriptor.
std::unique_ptr<RandomAccessFile> NewPosixRandomAccessFile(std::string path, int fd);
std::unique_ptr<WritableFile> NewPosixWritableFile(std::string path, int fd, uint64_t size);

namespace {

// One path component: not empty, ".", ".." or holding a '/' (or a NUL).
Status CheckName(const std::string& dir, const std::string& name) {
  if (name.empty() || name == "." || name == ".." ||
      name.find_first_of(std::string("/\0", 2)) != std::string::npos) {
    return Status::InvalidArgument(dir + ": '" + name +
                                   "' is not a single file name (refused: it could leave the "
                                   "directory)");
  }
  return Status::OK();
}

// An open(2) failure; a symlink refused by O_NOFOLLOW is said so (ELOOP reads as a loop).
Status OpenError(const char* op, const std::string& shown, int err) {
  if (err == ELOOP)
    return Status::IOError(std::string(op) + " " + shown + ": a symbolic link (not followed)");
  return OpenErrno(op, shown, err);
}

void Fill(const struct stat& st, FileInfo* info) {
  info->kind = S_ISREG(st.st_mode)   ? FileKind::kRegular
               : S_ISDIR(st.st_mode) ? FileKind::kDirectory
               : S_ISLNK(st.st_mode) ? FileKind::kSymlink
                                     : FileKind::kOther;
  info->size = static_cast<uint64_t>(st.st_size);
  info->allocated = static_cast<uint64_t>(st.st_blocks) * 512;
  info->mtime_ns = static_cast<int64_t>(st.st_mtim.tv_sec) * 1000000000 + st.st_mtim.tv_nsec;
  info->uid = st.st_uid;
  info->mode = st.st_mode & 07777;
  info->device = st.st_dev;
  info->inode = st.st_ino;
}

// Lists the directory open at fd (a fresh open description, so the caller's offset is not
// shared) into *names.
Status ListFd(int fd, const std::string& shown, std::vector<std::string>* names) {
  names->clear();
  const int own = ::openat(fd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (own < 0) return Status::IOErrorErrno("open", shown, errno);
  DIR* d = ::fdopendir(own);
  if (d == nullptr) {
    const int err = errno;
    ::close(own);
    return Status::IOErrorErrno("opendir", shown, err);
  }
  return core::ReadNamesAndClose(d, shown, names);
}

// Removes name under dirfd (a directory's contents first), never following a link.
Status RemoveAt(int dirfd, const std::string& name, const std::string& shown) {
  struct stat st;
  if (::fstatat(dirfd, name.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0) {
    if (errno == ENOENT) return Status::OK();
    return Status::IOErrorErrno("stat", shown, errno);
  }
  if (!S_ISDIR(st.st_mode)) {
    if (::unlinkat(dirfd, name.c_str(), 0) != 0 && errno != ENOENT)
      return Status::IOErrorErrno("unlink", shown, errno);
    return Status::OK();
  }
  const int fd = ::openat(dirfd, name.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0) {
    if (errno == ENOENT) return Status::OK();
    return Status::IOErrorErrno("open", shown, errno);
  }
  std::vector<std::string> names;
  Status s = ListFd(fd, shown, &names);
  for (size_t i = 0; s.ok() && i < names.size(); ++i) {
    s = RemoveAt(fd, names[i], shown + "/" + names[i]);
  }
  ::close(fd);
  if (!s.ok()) return s;
  if (::unlinkat(dirfd, name.c_str(), AT_REMOVEDIR) != 0 && errno != ENOENT)
    return Status::IOErrorErrno("rmdir", shown, errno);
  return Status::OK();
}

class PosixDirectory final : public Directory {
 public:
  PosixDirectory(int fd, std::string path) : fd_(fd), path_(std::move(path)) {}
  ~PosixDirectory() override { ::close(fd_); }
  const std::string& path() const override { return path_; }

  Status StatSelf(FileInfo* info) override {
    struct stat st;
    if (::fstat(fd_, &st) != 0) return Status::IOErrorErrno("stat", path_, errno);
    Fill(st, info);
    return Status::OK();
  }
  Status Stat(const std::string& name, FileInfo* info) override {
    DSPIPE_RETURN_IF_ERROR(CheckName(path_, name));
    *info = FileInfo();
    struct stat st;
    if (::fstatat(fd_, name.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0) {
      if (errno == ENOENT) return Status::OK();
      return Status::IOErrorErrno("stat", Shown(name), errno);
    }
    Fill(st, info);
    return Status::OK();
  }
  Status List(std::vector<std::string>* names) override { return ListFd(fd_, path_, names); }
  Status OpenDir(const std::string& name, bool create, uint32_t mode,
                 std::unique_ptr<Directory>* out) override {
    DSPIPE_RETURN_IF_ERROR(CheckName(path_, name));
    if (create && ::mkdirat(fd_, name.c_str(), static_cast<mode_t>(mode)) != 0 && errno != EEXIST) {
      return Status::IOErrorErrno("mkdir", Shown(name), errno);
    }
    const int fd = ::openat(fd_, name.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0) {
      const int err = errno;
      if (err == ENOENT) return Status::NotFound(Shown(name) + ": no such directory");
      struct stat st;
      if ((err == ENOTDIR || err == ELOOP) &&
          ::fstatat(fd_, name.c_str(), &st, AT_SYMLINK_NOFOLLOW) == 0 && S_ISLNK(st.st_mode)) {
        return OpenError("open", Shown(name), ELOOP);  // O_DIRECTORY says ENOTDIR for a link
      }
      return OpenError("open", Shown(name), err);
    }
    *out = NewPosixDirectory(fd, Shown(name));
    return Status::OK();
  }
  Status NewFile(const std::string& name, std::unique_ptr<WritableFile>* out) override {
    DSPIPE_RETURN_IF_ERROR(CheckName(path_, name));
    const int fd =
        ::openat(fd_, name.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
    if (fd < 0) {
      if (errno == EEXIST) {
        return Status::AlreadyExists(Shown(name) + ": already exists (not overwritten)");
      }
      return OpenError("create", Shown(name), errno);
    }
    *out = NewPosixWritableFile(Shown(name), fd, 0);
    return Status::OK();
  }
  Status OpenFile(const std::string& name, std::unique_ptr<RandomAccessFile>* out) override {
    DSPIPE_RETURN_IF_ERROR(CheckName(path_, name));
    const int fd = ::openat(fd_, name.c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK);
    if (fd < 0) return OpenError("open", Shown(name), errno);
    struct stat st;
    if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
      ::close(fd);
      return Status::BadInput(Shown(name) + ": not a regular file");
    }
    *out = NewPosixRandomAccessFile(Shown(name), fd);
    return Status::OK();
  }
  Status Rename(const std::string& from, const std::string& to) override {
    DSPIPE_RETURN_IF_ERROR(CheckName(path_, from));
    DSPIPE_RETURN_IF_ERROR(CheckName(path_, to));
    if (::renameat(fd_, from.c_str(), fd_, to.c_str()) != 0)
      return Status::IOErrorErrno("rename", Shown(from) + " -> " + to, errno);
    return Status::OK();
  }
  Status Remove(const std::string& name) override {
    DSPIPE_RETURN_IF_ERROR(CheckName(path_, name));
    if (::unlinkat(fd_, name.c_str(), 0) != 0 && errno != ENOENT)
      return Status::IOErrorErrno("unlink", Shown(name), errno);
    return Status::OK();
  }
  Status RemoveTree(const std::string& name) override {
    DSPIPE_RETURN_IF_ERROR(CheckName(path_, name));
    return RemoveAt(fd_, name, Shown(name));
  }
  Status Sync() override {
    if (::fsync(fd_) != 0) return Status::IOErrorErrno("fsync", path_, errno);
    return Status::OK();
  }
  Status FreeSpace(uint64_t* bytes) override {
    struct statvfs vs;
    if (::fstatvfs(fd_, &vs) != 0) return Status::IOErrorErrno("statvfs", path_, errno);
    *bytes = static_cast<uint64_t>(vs.f_bavail) * vs.f_frsize;
    return Status::OK();
  }
  bool OnTmpfs() override {
    struct statfs st;
    if (::fstatfs(fd_, &st) != 0) return false;
    return st.f_type == TMPFS_MAGIC || st.f_type == RAMFS_MAGIC;
  }
  Status Lock(const std::string& name, bool exclusive, bool wait,
              std::unique_ptr<FileLock>* out) override {
    DSPIPE_RETURN_IF_ERROR(CheckName(path_, name));
    return LockAt(fd_, name, Shown(name), exclusive, wait, out);
  }

 private:
  std::string Shown(const std::string& name) const { return path_ + "/" + name; }
  const int fd_;
  const std::string path_;
};

}  // namespace

Status OpenErrno(const char* op, const std::string& shown, int err) {
  const Status s = Status::IOErrorErrno(op, shown, err);
  return err == ENOENT ? Status::NotFound(s.message()) : s;
}

Status ReadNamesAndClose(DIR* d, const std::string& shown, std::vector<std::string>* names) {
  errno = 0;
  while (struct dirent* e = ::readdir(d)) {
    std::string_view n = e->d_name;
    if (n != "." && n != "..") names->emplace_back(n);
  }
  const int err = errno;
  ::closedir(d);
  if (err != 0) return Status::IOErrorErrno("readdir", shown, err);
  return Status::OK();
}

std::unique_ptr<Directory> NewPosixDirectory(int fd, std::string path) {
  return std::make_unique<PosixDirectory>(fd, std::move(path));
}

}  // namespace core

Status Directory::ReadFile(const std::string& name, std::string* out) {
  std::unique_ptr<RandomAccessFile> f;
  DSPIPE_RETURN_IF_ERROR(OpenFile(name, &f));
  out->clear();
  std::string buf(64 << 10, '\0');
  for (uint64_t off = 0;;) {
    size_t got = 0;
    DSPIPE_RETURN_IF_ERROR(f->Read(off, buf.size(), buf.data(), &got));
    if (got == 0) break;
    out->append(buf.data(), got);
    off += got;
  }
  return Status::OK();
}

Status Directory::WriteFileAtomic(const std::string& name, std::string_view data) {
  const std::string tmp = name + ".tmp-" + core::RandomHex16();
  Status s;
  {
    std::unique_ptr<WritableFile> f;
    s = NewFile(tmp, &f);
    if (!s.ok()) return s;
    s = f->Append(data);
    if (s.ok()) s = f->Sync();
    if (s.ok()) s = f->Close();
  }
  if (s.ok()) s = Rename(tmp, name);
  if (!s.ok()) {
    (void)Remove(tmp);  // best effort: the write already failed
    return s;
  }
  return Sync();
}

bool IsAtomicTempName(const std::string& name, std::string* target) {
  constexpr size_t kSuffix = 5 + 16;  // ".tmp-" + 16 hex
  if (name.size() <= kSuffix || name.compare(name.size() - kSuffix, 5, ".tmp-") != 0) {
    return false;
  }
  for (size_t i = name.size() - 16; i < name.size(); ++i) {
    const char c = name[i];
    if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) return false;
  }
  if (target) *target = name.substr(0, name.size() - kSuffix);
  return true;
}

}  // namespace dspipe
