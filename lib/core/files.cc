// SPDX-License-Identifier: Apache-2.0
#include "core/files.h"

#include <fcntl.h>
#include <unistd.h>

#include <cstdio>

#include "dspipe/env.h"

namespace dspipe::core {

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

Status CheckPrivateDir(Directory* dir) {
  FileInfo info;
  DSPIPE_RETURN_IF_ERROR(dir->StatSelf(&info));
  if (info.kind != FileKind::kDirectory) {
    return Status::Unsupported(dir->path() + ": not a directory");
  }
  const uid_t me = ::geteuid();
  if (info.uid != me) {
    return Status::Unsupported(dir->path() + ": owned by uid " + std::to_string(info.uid) +
                               ", not us (uid " + std::to_string(me) + ")");
  }
  if ((info.mode & 022) != 0) {
    char mode[16];
    std::snprintf(mode, sizeof mode, "%04o", info.mode);
    return Status::Unsupported(dir->path() + ": mode " + mode +
                               ": group/world-writable (others could plant names in it)");
  }
  return Status::OK();
}

Status OpenDirPath(Directory* dir, const std::string& rel, bool create,
                   std::unique_ptr<Directory>* out) {
  if (rel.empty()) return Status::InvalidArgument(dir->path() + ": empty relative path");
  std::unique_ptr<Directory> cur;
  size_t from = 0;
  for (;;) {
    const size_t slash = rel.find('/', from);
    const std::string part = rel.substr(from, slash == std::string::npos ? rel.npos : slash - from);
    std::unique_ptr<Directory> next;
    DSPIPE_RETURN_IF_ERROR((cur ? cur.get() : dir)->OpenDir(part, create, 0755, &next));
    cur = std::move(next);
    if (slash == std::string::npos) break;
    from = slash + 1;
  }
  *out = std::move(cur);
  return Status::OK();
}

bool DropFileCache(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return false;
  ::fdatasync(fd);
  const bool dropped = ::posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED) == 0;
  ::close(fd);
  return dropped;
}

std::string StripTrailingSlashes(std::string path) {
  while (path.size() > 1 && path.back() == '/') path.pop_back();
  return path;
}

}  // namespace dspipe::core
