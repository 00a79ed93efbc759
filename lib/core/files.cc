#include "core/files.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <filesystem>

namespace dspipe {
namespace {

struct Fd {
  int fd = -1;
  ~Fd() {
    if (fd >= 0) ::close(fd);
  }
};

}  // namespace

Status ReadFile(const std::string& path, std::string* out) {
  Fd f;
  f.fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (f.fd < 0) return Status::IOErrorErrno("open", path, errno);
  struct stat st;
  if (::fstat(f.fd, &st) != 0) return Status::IOErrorErrno("stat", path, errno);
  if (!S_ISREG(st.st_mode)) return Status::BadInput(path + ": not a regular file");
  out->resize(static_cast<size_t>(st.st_size));
  size_t done = 0;
  while (done < out->size()) {
    ssize_t r = ::pread(f.fd, out->data() + done, out->size() - done, static_cast<off_t>(done));
    if (r < 0) {
      if (errno == EINTR) continue;
      return Status::IOErrorErrno("read", path, errno);
    }
    if (r == 0) break;  // file shrank while reading
    done += static_cast<size_t>(r);
  }
  out->resize(done);
  return Status::OK();
}

Status FsyncDir(const std::string& dir) {
  Fd f;
  f.fd = ::open(dir.empty() ? "." : dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (f.fd < 0) return Status::IOErrorErrno("open", dir, errno);
  if (::fsync(f.fd) != 0) return Status::IOErrorErrno("fsync", dir, errno);
  return Status::OK();
}

Status WriteFileAtomic(const std::string& path, std::string_view data) {
  const std::string tmp = path + ".tmp." + std::to_string(::getpid());
  {
    Fd f;
    f.fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (f.fd < 0) return Status::IOErrorErrno("open", tmp, errno);
    size_t done = 0;
    while (done < data.size()) {
      ssize_t w = ::write(f.fd, data.data() + done, data.size() - done);
      if (w < 0) {
        if (errno == EINTR) continue;
        const int err = errno;
        ::unlink(tmp.c_str());
        return Status::IOErrorErrno("write", tmp, err);
      }
      done += static_cast<size_t>(w);
    }
    if (::fsync(f.fd) != 0) {
      const int err = errno;
      ::unlink(tmp.c_str());
      return Status::IOErrorErrno("fsync", tmp, err);
    }
  }
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    const int err = errno;
    ::unlink(tmp.c_str());
    return Status::IOErrorErrno("rename", tmp, err);
  }
  return FsyncDir(std::filesystem::path(path).parent_path().string());
}

Status FileSize(const std::string& path, uint64_t* size) {
  struct stat st;
  if (::stat(path.c_str(), &st) != 0) return Status::IOErrorErrno("stat", path, errno);
  *size = static_cast<uint64_t>(st.st_size);
  return Status::OK();
}

bool DropFileCache(const std::string& path) {
  Fd f;
  f.fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (f.fd < 0) return false;
  ::fdatasync(f.fd);
  return ::posix_fadvise(f.fd, 0, 0, POSIX_FADV_DONTNEED) == 0;
}

}  // namespace dspipe
