// SPDX-License-Identifier: Apache-2.0
// LD_PRELOAD fault injector for the dsconvert fault tests (tests/faults/faults_test.cc).
// Interposes write, pwrite, writev, pwritev, fsync, fdatasync, read and pread. A call is
// "matching" when its descriptor's path (/proc/self/fd/N) contains DSPIPE_FAULT_PATH and its
// kind is DSPIPE_FAULT_OP (write: write/pwrite/writev/pwritev; read: read/pread; fsync:
// fsync/fdatasync). Matching calls are counted across threads; from the DSPIPE_FAULT_NTH-th on
// (1-based; every one after it too, like a full disk, unless DSPIPE_FAULT_ONCE=1) the call:
//   DSPIPE_FAULT_MODE=error  fails with -1 and errno DSPIPE_FAULT_ERRNO (a number, default EIO);
//   DSPIPE_FAULT_MODE=short  (writes only) writes half the bytes, at least 1, and returns that.
// Each injected fault appends "<op> <path>\n" to DSPIPE_FAULT_LOG, so a test can prove its
// fault fired. Without DSPIPE_FAULT_OP the shim passes every call through.
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/uio.h>
#include <unistd.h>

enum Kind { kWrite, kRead, kFsync };

static atomic_long g_count;
static atomic_int g_fired_once;

static void* Next(const char* name) {
  void* f = dlsym(RTLD_NEXT, name);
  if (f == NULL) abort();
  return f;
}

// Returns 1 and fills path when this call should fail or be shortened.
static int ShouldFault(enum Kind kind, int fd, char* path, size_t path_size) {
  const char* op = getenv("DSPIPE_FAULT_OP");
  if (op == NULL) return 0;
  static const char* const kNames[] = {"write", "read", "fsync"};
  if (strcmp(op, kNames[kind]) != 0) return 0;
  char link[64];
  snprintf(link, sizeof link, "/proc/self/fd/%d", fd);
  const ssize_t n = readlink(link, path, path_size - 1);
  if (n <= 0) return 0;
  path[n] = '\0';
  const char* want = getenv("DSPIPE_FAULT_PATH");
  if (want != NULL && strstr(path, want) == NULL) return 0;
  const char* nth_s = getenv("DSPIPE_FAULT_NTH");
  const long nth = nth_s != NULL ? atol(nth_s) : 1;
  const long count = atomic_fetch_add(&g_count, 1) + 1;
  if (count < nth) return 0;
  const char* once = getenv("DSPIPE_FAULT_ONCE");
  if (once != NULL && strcmp(once, "1") == 0 && atomic_exchange(&g_fired_once, 1) != 0) return 0;
  const char* log = getenv("DSPIPE_FAULT_LOG");
  if (log != NULL) {
    int (*real_open)(const char*, int, ...) = Next("open");
    ssize_t (*real_write)(int, const void*, size_t) = Next("write");
    const int lfd = real_open(log, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    if (lfd >= 0) {
      char line[4200];
      const int len = snprintf(line, sizeof line, "%s %s\n", op, path);
      if (len > 0) (void)!real_write(lfd, line, (size_t)len);
      close(lfd);
    }
  }
  return 1;
}

static int Short(void) {
  const char* mode = getenv("DSPIPE_FAULT_MODE");
  return mode != NULL && strcmp(mode, "short") == 0;
}

static int FaultErrno(void) {
  const char* e = getenv("DSPIPE_FAULT_ERRNO");
  return e != NULL ? atoi(e) : EIO;
}

static size_t Half(size_t n) { return n > 1 ? n / 2 : n; }

ssize_t write(int fd, const void* buf, size_t count) {
  static ssize_t (*real)(int, const void*, size_t);
  if (real == NULL) real = Next("write");
  char path[4096];
  if (count > 0 && ShouldFault(kWrite, fd, path, sizeof path)) {
    if (Short()) return real(fd, buf, Half(count));
    errno = FaultErrno();
    return -1;
  }
  return real(fd, buf, count);
}

ssize_t pwrite(int fd, const void* buf, size_t count, off_t off) {
  static ssize_t (*real)(int, const void*, size_t, off_t);
  if (real == NULL) real = Next("pwrite");
  char path[4096];
  if (count > 0 && ShouldFault(kWrite, fd, path, sizeof path)) {
    if (Short()) return real(fd, buf, Half(count), off);
    errno = FaultErrno();
    return -1;
  }
  return real(fd, buf, count, off);
}

ssize_t pwrite64(int fd, const void* buf, size_t count, off_t off) {
  return pwrite(fd, buf, count, off);
}

static size_t IovBytes(const struct iovec* iov, int n) {
  size_t t = 0;
  for (int i = 0; i < n; ++i) t += iov[i].iov_len;
  return t;
}

// Short vectored writes write a prefix of the first buffer (all that is needed to be short).
ssize_t writev(int fd, const struct iovec* iov, int iovcnt) {
  static ssize_t (*real)(int, const struct iovec*, int);
  if (real == NULL) real = Next("writev");
  char path[4096];
  if (IovBytes(iov, iovcnt) > 0 && ShouldFault(kWrite, fd, path, sizeof path)) {
    if (Short()) {
      ssize_t (*real_write)(int, const void*, size_t) = Next("write");
      int i = 0;
      while (iov[i].iov_len == 0) ++i;
      return real_write(fd, iov[i].iov_base, Half(iov[i].iov_len));
    }
    errno = FaultErrno();
    return -1;
  }
  return real(fd, iov, iovcnt);
}

ssize_t pwritev(int fd, const struct iovec* iov, int iovcnt, off_t off) {
  static ssize_t (*real)(int, const struct iovec*, int, off_t);
  if (real == NULL) real = Next("pwritev");
  char path[4096];
  if (IovBytes(iov, iovcnt) > 0 && ShouldFault(kWrite, fd, path, sizeof path)) {
    if (Short()) {
      ssize_t (*real_pwrite)(int, const void*, size_t, off_t) = Next("pwrite");
      int i = 0;
      while (iov[i].iov_len == 0) ++i;
      return real_pwrite(fd, iov[i].iov_base, Half(iov[i].iov_len), off);
    }
    errno = FaultErrno();
    return -1;
  }
  return real(fd, iov, iovcnt, off);
}

ssize_t pwritev64(int fd, const struct iovec* iov, int iovcnt, off_t off) {
  return pwritev(fd, iov, iovcnt, off);
}

int fsync(int fd) {
  static int (*real)(int);
  if (real == NULL) real = Next("fsync");
  char path[4096];
  if (ShouldFault(kFsync, fd, path, sizeof path)) {
    errno = FaultErrno();
    return -1;
  }
  return real(fd);
}

int fdatasync(int fd) {
  static int (*real)(int);
  if (real == NULL) real = Next("fdatasync");
  char path[4096];
  if (ShouldFault(kFsync, fd, path, sizeof path)) {
    errno = FaultErrno();
    return -1;
  }
  return real(fd);
}

ssize_t read(int fd, void* buf, size_t count) {
  static ssize_t (*real)(int, void*, size_t);
  if (real == NULL) real = Next("read");
  char path[4096];
  if (count > 0 && ShouldFault(kRead, fd, path, sizeof path)) {
    errno = FaultErrno();
    return -1;
  }
  return real(fd, buf, count);
}

ssize_t pread(int fd, void* buf, size_t count, off_t off) {
  static ssize_t (*real)(int, void*, size_t, off_t);
  if (real == NULL) real = Next("pread");
  char path[4096];
  if (count > 0 && ShouldFault(kRead, fd, path, sizeof path)) {
    errno = FaultErrno();
    return -1;
  }
  return real(fd, buf, count, off);
}

ssize_t pread64(int fd, void* buf, size_t count, off_t off) { return pread(fd, buf, count, off); }
