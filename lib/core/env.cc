// SPDX-License-Identifier: Apache-2.0
// The POSIX Env and the helpers every Env shares (its Directory: env_dir.cc; its locks and the
// atfork registry: env_locks.cc).
#include "dspipe/env.h"

#include <dirent.h>
#include <fcntl.h>
#include <linux/falloc.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <filesystem>
#include <system_error>

#include "core/env_internal.h"

namespace dspipe {
namespace {

class PosixRandomAccessFile final : public RandomAccessFile {
 public:
  PosixRandomAccessFile(std::string path, int fd) : path_(std::move(path)), fd_(fd) {}
  ~PosixRandomAccessFile() override { ::close(fd_); }
  Status Read(uint64_t offset, size_t n, char* scratch, size_t* got) const override {
    for (;;) {
      ssize_t r = ::pread(fd_, scratch, n, static_cast<off_t>(offset));
      if (r >= 0) {
        *got = static_cast<size_t>(r);
        return Status::OK();
      }
      if (errno != EINTR) return Status::IOErrorErrno("read", path_, errno);
    }
  }
  const std::string& path() const override { return path_; }

 private:
  std::string path_;
  int fd_;
};

class PosixWritableFile final : public WritableFile {
 public:
  PosixWritableFile(std::string path, int fd, uint64_t size)
      : path_(std::move(path)), fd_(fd), size_(size) {}
  ~PosixWritableFile() override {
    if (fd_ >= 0) ::close(fd_);
  }
  Status Append(std::string_view data) override {
    while (!data.empty()) {
      ssize_t w = ::pwrite(fd_, data.data(), data.size(), static_cast<off_t>(size_));
      if (w < 0) {
        if (errno == EINTR) continue;
        return Status::IOErrorErrno("write", path_, errno);
      }
      size_ += static_cast<uint64_t>(w);
      data.remove_prefix(static_cast<size_t>(w));
    }
    return Status::OK();
  }
  Status Allocate(uint64_t offset, uint64_t len) override {
    if (len == 0) return Status::OK();
    // Check free space first: on ext4 a fallocate that cannot be satisfied may take what is
    // free before failing, filling the disk for everyone else on it meanwhile.
    struct stat st;
    if (::fstat(fd_, &st) != 0) return Status::IOErrorErrno("stat", path_, errno);
    const uint64_t have = static_cast<uint64_t>(st.st_blocks) * 512;
    const uint64_t need = offset + len > have ? offset + len - have : 0;
    struct statvfs vs;
    if (::fstatvfs(fd_, &vs) != 0) return Status::IOErrorErrno("statvfs", path_, errno);
    if (static_cast<uint64_t>(vs.f_bavail) * vs.f_frsize < need)
      return Status::IOErrorErrno("fallocate", path_, ENOSPC);
    // fallocate(2), not posix_fallocate: glibc's emulation writes a byte per block where the
    // filesystem lacks fallocate, which is slow. KEEP_SIZE: appends still start at size().
    // Without fallocate, the check above is what we have.
    int rc = 0;
    while ((rc = ::fallocate(fd_, FALLOC_FL_KEEP_SIZE, static_cast<off_t>(offset),
                             static_cast<off_t>(len))) != 0 &&
           errno == EINTR) {
    }
    if (rc == 0 || errno == EOPNOTSUPP) return Status::OK();
    return Status::IOErrorErrno("fallocate", path_, errno);
  }
  Status Truncate(uint64_t size) override {
    if (::ftruncate(fd_, static_cast<off_t>(size)) != 0)
      return Status::IOErrorErrno("truncate", path_, errno);
    size_ = size;
    writeback_from_ = std::min(writeback_from_, size);
    return Status::OK();
  }
  Status Sync() override {
    if (::fdatasync(fd_) != 0) return Status::IOErrorErrno("fsync", path_, errno);
    return Status::OK();
  }
  int native_fd() const override { return fd_; }
  void StartWriteback() override {
    if (size_ <= writeback_from_) return;
    // Only the range appended since the last call: the earlier one is already under way.
    ::sync_file_range(fd_, static_cast<off_t>(writeback_from_),
                      static_cast<off_t>(size_ - writeback_from_), SYNC_FILE_RANGE_WRITE);
    writeback_from_ = size_;
  }
  Status Close() override {
    if (fd_ < 0) return Status::OK();
    const int rc = ::close(fd_);
    fd_ = -1;
    if (rc != 0) return Status::IOErrorErrno("close", path_, errno);
    return Status::OK();
  }
  uint64_t size() const override { return size_; }
  const std::string& path() const override { return path_; }

 private:
  std::string path_;
  int fd_;
  uint64_t size_;
  uint64_t writeback_from_ = 0;  // StartWriteback: bytes before this were handed to the disk
};

class PosixEnv final : public Env {
 public:
  Status NewRandomAccessFile(const std::string& path,
                             std::unique_ptr<RandomAccessFile>* out) override {
    int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) return OpenError(path, errno);
    struct stat st;
    if (::fstat(fd, &st) != 0) {
      const int err = errno;
      ::close(fd);
      return Status::IOErrorErrno("stat", path, err);
    }
    if (!S_ISREG(st.st_mode)) {
      ::close(fd);
      return Status::BadInput(path + ": not a regular file");
    }
    *out = std::make_unique<PosixRandomAccessFile>(path, fd);
    return Status::OK();
  }

  Status NewWritableFile(const std::string& path, bool truncate,
                         std::unique_ptr<WritableFile>* out) override {
    int fd = ::open(path.c_str(),
                    O_WRONLY | O_CREAT | O_CLOEXEC | O_NOFOLLOW | (truncate ? O_TRUNC : 0), 0644);
    if (fd < 0) {
      if (errno == ELOOP) {
        return Status::IOError("open " + path + ": a symbolic link (not followed)");
      }
      return OpenError(path, errno);
    }
    struct stat st;
    if (::fstat(fd, &st) != 0) {
      const int err = errno;
      ::close(fd);
      return Status::IOErrorErrno("stat", path, err);
    }
    *out = std::make_unique<PosixWritableFile>(path, fd, static_cast<uint64_t>(st.st_size));
    return Status::OK();
  }

  Status ListDir(const std::string& dir, std::vector<std::string>* names) override {
    names->clear();
    DIR* d = ::opendir(dir.c_str());
    if (d == nullptr) return OpenError(dir, errno);
    return core::ReadNamesAndClose(d, dir, names);
  }

  Status FileSize(const std::string& path, uint64_t* size) override {
    struct stat st;
    if (::stat(path.c_str(), &st) != 0) {
      if (errno == ENOENT) return Status::NotFound(path + ": no such file");
      return Status::IOErrorErrno("stat", path, errno);
    }
    *size = static_cast<uint64_t>(st.st_size);
    return Status::OK();
  }

  bool FileExists(const std::string& path) override { return ::access(path.c_str(), F_OK) == 0; }

  Status GetFileKind(const std::string& path, FileKind* kind) override {
    struct stat st;
    if (::stat(path.c_str(), &st) != 0) {
      if (errno == ENOENT || errno == ENOTDIR) {
        *kind = FileKind::kMissing;
        return Status::OK();
      }
      return Status::IOErrorErrno("stat", path, errno);
    }
    *kind = S_ISREG(st.st_mode)   ? FileKind::kRegular
            : S_ISDIR(st.st_mode) ? FileKind::kDirectory
                                  : FileKind::kOther;
    return Status::OK();
  }

  Status RenameFile(const std::string& from, const std::string& to) override {
    if (::rename(from.c_str(), to.c_str()) != 0)
      return Status::IOErrorErrno("rename", from + " -> " + to, errno);
    return Status::OK();
  }

  Status RemoveFile(const std::string& path) override {
    if (::unlink(path.c_str()) != 0 && errno != ENOENT)
      return Status::IOErrorErrno("unlink", path, errno);
    return Status::OK();
  }

  Status CreateDirs(const std::string& dir) override {
    std::error_code ec;
    std::filesystem::create_directories(dir, ec);
    if (ec) return Status::IOErrorErrno("mkdir", dir, ec.value());
    return Status::OK();
  }

  Status SyncDir(const std::string& dir) override {
    const std::string d = dir.empty() ? "." : dir;
    int fd = ::open(d.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0) return Status::IOErrorErrno("open", d, errno);
    const int rc = ::fsync(fd);
    const int err = errno;
    ::close(fd);
    if (rc != 0) return Status::IOErrorErrno("fsync", d, err);
    return Status::OK();
  }

  Status FreeSpace(const std::string& path, uint64_t* bytes) override {
    struct statvfs vs;
    if (::statvfs(path.c_str(), &vs) != 0) return Status::IOErrorErrno("statvfs", path, errno);
    *bytes = static_cast<uint64_t>(vs.f_bavail) * vs.f_frsize;
    return Status::OK();
  }

  Status LockFile(const std::string& lock_path, bool wait,
                  std::unique_ptr<FileLock>* out) override {
    return core::LockAt(AT_FDCWD, lock_path, lock_path, /*exclusive=*/true, wait, out);
  }

  Status LockFileShared(const std::string& lock_path, bool wait,
                        std::unique_ptr<FileLock>* out) override {
    return core::LockAt(AT_FDCWD, lock_path, lock_path, /*exclusive=*/false, wait, out);
  }

  Status OpenDirectory(const std::string& path, std::unique_ptr<Directory>* out) override {
    const std::string p = path.empty() ? "." : path;
    const int fd = ::open(p.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0) {
      if (errno == ENOENT) return Status::NotFound(p + ": no such directory");
      return Status::IOErrorErrno("open", p, errno);
    }
    *out = core::NewPosixDirectory(fd, p);
    return Status::OK();
  }

  Status RemoveTree(const std::string& path) override {
    std::error_code ec;
    std::filesystem::remove_all(path, ec);
    if (ec) return Status::IOError("remove " + path + ": " + ec.message());
    return Status::OK();
  }

 private:
  // NotFound for a missing file or directory (ENOENT), as FileSize and OpenDirectory; IOError
  // for every other open failure.
  static Status OpenError(const std::string& path, int err) {
    return core::OpenErrno("open", path, err);
  }
};

}  // namespace

Env* Env::Default() {
  static PosixEnv* env = new PosixEnv();  // never destroyed: usable from static destructors
  return env;
}

Status Env::LockFileShared(const std::string& lock_path, bool wait,
                           std::unique_ptr<FileLock>* out) {
  (void)wait;
  (void)out;
  return Status::Unsupported("shared lock " + lock_path + ": not supported by this Env");
}

Status Env::GetFileKind(const std::string& path, FileKind* kind) {
  (void)kind;
  return Status::Unsupported("stat " + path + ": not supported by this Env");
}

Status Env::RemoveTree(const std::string& path) {
  return Status::Unsupported("remove " + path + ": not supported by this Env");
}

Status Env::OpenDirectory(const std::string& path, std::unique_ptr<Directory>* out) {
  (void)out;
  return Status::Unsupported("open directory " + path + ": not supported by this Env");
}

namespace core {

std::unique_ptr<RandomAccessFile> NewPosixRandomAccessFile(std::string path, int fd) {
  return std::make_unique<PosixRandomAccessFile>(std::move(path), fd);
}

std::unique_ptr<WritableFile> NewPosixWritableFile(std::string path, int fd, uint64_t size) {
  return std::make_unique<PosixWritableFile>(std::move(path), fd, size);
}

}  // namespace core

Status Env::ReadFile(const std::string& path, std::string* out) {
  std::unique_ptr<RandomAccessFile> f;
  DSPIPE_RETURN_IF_ERROR(NewRandomAccessFile(path, &f));
  uint64_t size = 0;
  DSPIPE_RETURN_IF_ERROR(FileSize(path, &size));
  out->resize(static_cast<size_t>(size));
  size_t done = 0;
  while (done < out->size()) {
    size_t got = 0;
    DSPIPE_RETURN_IF_ERROR(f->Read(done, out->size() - done, out->data() + done, &got));
    if (got == 0) break;  // the file shrank while reading
    done += got;
  }
  out->resize(done);
  return Status::OK();
}

Status Env::WriteFileAtomic(const std::string& path, std::string_view data) {
  const std::filesystem::path p(path);
  std::unique_ptr<Directory> dir;
  DSPIPE_RETURN_IF_ERROR(OpenDirectory(p.parent_path().string(), &dir));
  return dir->WriteFileAtomic(p.filename().string(), data);
}

}  // namespace dspipe
