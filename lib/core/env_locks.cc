// SPDX-License-Identifier: Apache-2.0
// The POSIX FileLock (flock) and the atfork registry that releases exclusive locks in a child
// made by fork(): the child gets copies of its parent's descriptors, and an flock lives as long
// as any copy, so a forked worker would otherwise hold a lock its parent released (blocking
// every other process that waits for it) until the worker exits.
#include <fcntl.h>
#include <pthread.h>
#include <sys/file.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <mutex>
#include <random>
#include <set>

#include "core/env_internal.h"

namespace dspipe::core {
namespace {

class PosixFileLock;

// Every live exclusive lock of this process. The handlers run around fork(): prepare takes the
// mutex (no lock is created or destroyed while the address space is copied), the parent lets
// it go, the child closes every registered descriptor (marking it closed, so the lock's
// destructor there does not close a number the child reuses) and lets it go.
struct Registry {
  std::mutex mu;
  std::set<PosixFileLock*> locks;  // guarded by mu
};

Registry& TheRegistry() {
  static Registry* r = new Registry();  // never destroyed: locks may outlive static destructors
  return *r;
}

class PosixFileLock final : public FileLock {
 public:
  PosixFileLock(std::string path, int fd, bool registered)
      : path_(std::move(path)), fd_(fd), registered_(registered) {
    if (registered_) {
      Registry& r = TheRegistry();
      std::lock_guard<std::mutex> lock(r.mu);
      r.locks.insert(this);
    }
  }
  ~PosixFileLock() override {
    int fd = fd_;
    if (registered_) {
      Registry& r = TheRegistry();
      std::lock_guard<std::mutex> lock(r.mu);
      r.locks.erase(this);
      fd = fd_;  // -1 when a fork's child handler closed it here
    }
    if (fd >= 0) ::close(fd);  // closing the last descriptor releases the flock
  }
  const std::string& path() const override { return path_; }

  // In a forked child, with the registry's mutex held.
  void CloseInChild() {
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
  }

 private:
  std::string path_;
  int fd_;  // guarded by the registry's mutex when registered_
  const bool registered_;
};

void Prepare() { TheRegistry().mu.lock(); }
void Parent() { TheRegistry().mu.unlock(); }
void Child() {
  Registry& r = TheRegistry();
  for (PosixFileLock* l : r.locks) l->CloseInChild();
  r.locks.clear();
  r.mu.unlock();
}

void InstallAtforkOnce() {
  static std::once_flag once;
  std::call_once(once, [] { ::pthread_atfork(Prepare, Parent, Child); });
}

}  // namespace

Status LockAt(int dirfd, const std::string& name, const std::string& shown, bool exclusive,
              bool wait, std::unique_ptr<FileLock>* out) {
  InstallAtforkOnce();
  const int op = exclusive ? LOCK_EX : LOCK_SH;
  for (;;) {
    const int fd = ::openat(dirfd, name.c_str(), O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0644);
    if (fd < 0) {
      if (errno == ELOOP)
        return Status::IOError("open " + shown + ": a symbolic link (not followed)");
      return Status::IOErrorErrno("open", shown, errno);
    }
    for (;;) {
      if (::flock(fd, op | (wait ? 0 : LOCK_NB)) == 0) break;
      const int err = errno;
      if (err == EINTR) continue;
      ::close(fd);
      if (err == EWOULDBLOCK) return Status::Aborted(shown + ": held by another process");
      return Status::IOErrorErrno("flock", shown, err);
    }
    // The holder before us may have removed the file (it removes its lock file when done):
    // then this lock is on a file nobody else will open, and the name is taken again.
    struct stat mine, now;
    if (::fstat(fd, &mine) != 0) {
      const int err = errno;
      ::close(fd);
      return Status::IOErrorErrno("stat", shown, err);
    }
    if (::fstatat(dirfd, name.c_str(), &now, AT_SYMLINK_NOFOLLOW) == 0 &&
        now.st_dev == mine.st_dev && now.st_ino == mine.st_ino) {
      *out = std::make_unique<PosixFileLock>(shown, fd, exclusive);
      return Status::OK();
    }
    ::close(fd);
  }
}

std::string RandomHex16() {
  // getrandom(2) on every call: a generator's state would be copied into a forked child, which
  // would then draw its parent's names.
  uint64_t v = 0;
  if (::getrandom(&v, sizeof v, 0) != static_cast<ssize_t>(sizeof v)) {
    std::random_device rd;
    v = (static_cast<uint64_t>(rd()) << 32) ^ rd();
  }
  static const char* kHex = "0123456789abcdef";
  std::string out(16, '0');
  for (int i = 0; i < 16; ++i) out[i] = kHex[(v >> (60 - 4 * i)) & 15];
  return out;
}

}  // namespace dspipe::core
