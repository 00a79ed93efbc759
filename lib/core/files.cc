#include "core/files.h"

#include <fcntl.h>
#include <unistd.h>

#include "dspipe/env.h"

namespace dspipe {

Status ReadFile(const std::string& path, std::string* out) {
  return Env::Default()->ReadFile(path, out);
}

Status FsyncDir(const std::string& dir) { return Env::Default()->SyncDir(dir); }

Status WriteFileAtomic(const std::string& path, std::string_view data) {
  return Env::Default()->WriteFileAtomic(path, data);
}

Status FileSize(const std::string& path, uint64_t* size) {
  return Env::Default()->FileSize(path, size);
}

bool DropFileCache(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return false;
  ::fdatasync(fd);
  const bool dropped = ::posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED) == 0;
  ::close(fd);
  return dropped;
}

}  // namespace dspipe
