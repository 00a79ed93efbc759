// SPDX-License-Identifier: Apache-2.0
// dspipe::Env: the one seam between dspipe and the file system.
//
// Everything that reads, writes, renames, locks or sizes files (the fetcher, the cache, the
// file helpers under dsconvert) goes through an Env, so tests can swap in a test Env that
// injects faults and prove that disk full, torn writes, read errors and failing fsyncs give a
// clear error and never a result that looks complete and is not.
//
// The safe file primitives live here too, one set for the cache and fetch (docs/HARDENING.md,
// "Nothing of the user's is ever lost"):
// - A file is created for writing without following a symlink at its name (O_NOFOLLOW): a
//   planted link makes the open fail, never redirects our write. Atomic writes go through a
//   temp name with 64 random bits, created exclusively (O_EXCL).
// - A Directory (Env::OpenDirectory) is a directory held by descriptor: every name given to it
//   is one path component resolved with openat(2) and friends, never following a symlink, so
//   what is written, renamed or removed through it stays inside it.
// - Locks: an exclusive lock is released in a child made by fork() (an atfork handler closes
//   its descriptor there: a forked worker never holds the lock its parent takes or releases);
//   a shared lock (a lease) is inherited. A lock whose file was removed while it was waited
//   for is taken again on the file now at that name, so a holder may remove its lock file.
//
// Env::Default() is the POSIX implementation; it is thread-safe and lives forever. Every error
// is a Status naming the path and errno's text ("IOError: write /x/y.part: No space left on
// device"; ENOENT, wherever met, is NotFound). Files are not thread-safe: one thread at a time.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "dspipe/status.h"

namespace dspipe {

// A file opened for reading at any offset (pread). Read() is safe to call from several threads.
class RandomAccessFile {
 public:
  virtual ~RandomAccessFile() = default;
  // Reads up to n bytes at offset into scratch; *got is 0 at end of file. Retries EINTR.
  virtual Status Read(uint64_t offset, size_t n, char* scratch, size_t* got) const = 0;
  virtual const std::string& path() const = 0;
};

// A file opened for appending. Append() writes all of data or fails (a short write from the OS
// is continued; a failure names the file). Nothing is durable before Sync().
class WritableFile {
 public:
  virtual ~WritableFile() = default;
  virtual Status Append(std::string_view data) = 0;
  // Reserves [offset, offset+len) on disk (fallocate), so a full disk fails here and not at a
  // later write or, for an mmap reader on tmpfs, as SIGBUS. Free space is checked first (an
  // immediate ENOSPC); filesystems without fallocate get only that check. The file's size does
  // not change (FALLOC_FL_KEEP_SIZE).
  virtual Status Allocate(uint64_t offset, uint64_t len) = 0;
  // Cuts the file to size bytes; later appends continue at size.
  virtual Status Truncate(uint64_t size) = 0;
  virtual Status Sync() = 0;  // fdatasync
  // Starts writing the bytes appended so far to disk without waiting for it
  // (sync_file_range(SYNC_FILE_RANGE_WRITE)), so that the Sync() before a rename waits for little
  // more than the last bytes instead of the whole file. A hint: no error, nothing made durable
  // (Sync() still is what does). Default: nothing (PosixEnv starts the writeback).
  virtual void StartWriteback() {}
  // The OS descriptor, for an in-kernel copy into the file (copy_file_range, sendfile); -1 for
  // an Env that must see every write (a test Env: the default).
  virtual int native_fd() const { return -1; }
  virtual Status Close() = 0;         // idempotent; the destructor closes without reporting
  virtual uint64_t size() const = 0;  // bytes in the file (offset of the next append)
  virtual const std::string& path() const = 0;
};

// An advisory lock (flock; exclusive, or shared from LockFileShared) on a lock file, held until
// destruction. Locks are per open file description: two Envs or processes exclude each other;
// the lock vanishes with the process, so a killed holder never leaves a stale lock. After
// fork(), an exclusive lock is not held by the child (see the top of this file).
class FileLock {
 public:
  virtual ~FileLock() = default;
  virtual const std::string& path() const = 0;
};

// What a path is, following symlinks (Env::GetFileKind), or a name in a Directory, not
// following them (Directory::Stat).
enum class FileKind {
  kMissing,    // nothing there (also a dangling symlink, for GetFileKind)
  kRegular,    // a regular file
  kDirectory,  // a directory
  kOther,      // a device, FIFO, socket ...
  kSymlink,    // a symbolic link (Directory::Stat only: it does not follow links)
};

// What a name in a Directory is (Directory::Stat: the name itself, a symlink not followed), or
// the directory itself (Directory::StatSelf).
struct FileInfo {
  FileKind kind = FileKind::kMissing;
  uint64_t size = 0;       // bytes (st_size)
  uint64_t allocated = 0;  // bytes of storage it holds (st_blocks * 512): reserved space counts
  int64_t mtime_ns = 0;
  uint32_t uid = 0;   // the owner
  uint32_t mode = 0;  // permission bits (st_mode & 07777)
  uint64_t device = 0, inode = 0;
};

// A directory held open by its descriptor (Env::OpenDirectory). Every `name` is ONE path
// component: empty, ".", ".." or a name with a '/' is InvalidArgument, so no computed path can
// leave the directory. Names are resolved under this directory's descriptor (openat and
// friends) and a symlink at a name is never followed: NewFile, OpenFile, OpenDir and Lock on a
// symlink fail, Remove and RemoveTree remove the link itself. Renaming or replacing the
// directory's own path meanwhile changes nothing: the descriptor is what is used. Errors name
// path()/name. Not thread-safe (one thread at a time); the files it returns are independent.
class Directory {
 public:
  virtual ~Directory() = default;
  // The path it was opened by (for messages only).
  virtual const std::string& path() const = 0;
  virtual Status StatSelf(FileInfo* info) = 0;
  // kMissing (and OK) when nothing is at name.
  virtual Status Stat(const std::string& name, FileInfo* info) = 0;
  // Names in the directory (no "." / ".."), unsorted.
  virtual Status List(std::vector<std::string>* names) = 0;
  // The subdirectory `name`; with create, made first (mkdirat, `mode`) when nothing is there.
  virtual Status OpenDir(const std::string& name, bool create, uint32_t mode,
                         std::unique_ptr<Directory>* out) = 0;
  // Creates the file `name` for writing (O_CREAT | O_EXCL | O_NOFOLLOW, mode 0644):
  // AlreadyExists when anything (a file, a link) is there: it is never truncated or followed.
  virtual Status NewFile(const std::string& name, std::unique_ptr<WritableFile>* out) = 0;
  // Opens the regular file `name` for reading (O_RDONLY | O_NOFOLLOW).
  virtual Status OpenFile(const std::string& name, std::unique_ptr<RandomAccessFile>* out) = 0;
  // renameat(2) within this directory (atomic; replaces `to` when it is a file or an empty
  // directory). Call Sync() to make it durable.
  virtual Status Rename(const std::string& from, const std::string& to) = 0;
  // Removes the file or link `name` (not what a link points to). OK when nothing is there.
  virtual Status Remove(const std::string& name) = 0;
  // Removes `name` and, for a directory, everything under it, through descriptors and without
  // following any symlink (a link inside is removed, not its target). OK when nothing is there.
  virtual Status RemoveTree(const std::string& name) = 0;
  // fsync() of the directory: renames and creations in it become durable.
  virtual Status Sync() = 0;
  // Bytes available to an unprivileged writer on its filesystem (fstatvfs f_bavail).
  virtual Status FreeSpace(uint64_t* bytes) = 0;
  // True when its filesystem is a tmpfs or ramfs (its pages are RAM).
  virtual bool OnTmpfs() = 0;
  // A lock on the file `name` (created when missing, mode 0644; a symlink there is refused),
  // exclusive or shared, as Env::LockFile / Env::LockFileShared (wait=false: Aborted at once
  // when held).
  virtual Status Lock(const std::string& name, bool exclusive, bool wait,
                      std::unique_ptr<FileLock>* out) = 0;

  // ---- helpers built on the primitives above (one behaviour for every Directory)
  // Reads the whole file `name` into *out.
  Status ReadFile(const std::string& name, std::string* out);
  // Writes data to `name` atomically: a temp file "<name>.tmp-<16 random hex>" made with
  // NewFile, fsynced, renamed over `name`, the directory fsynced. `name` is the old file or the
  // complete new one; the temp file is removed on failure (a kill leaves it: see
  // IsAtomicTempName).
  Status WriteFileAtomic(const std::string& name, std::string_view data);
};

// True when `name` is a temp file WriteFileAtomic made for `target`
// ("<target>.tmp-<16 hex>"); *target (optional) gets it.
bool IsAtomicTempName(const std::string& name, std::string* target = nullptr);

class Env {
 public:
  virtual ~Env() = default;
  // The POSIX Env. Never null, never deleted.
  static Env* Default();

  virtual Status NewRandomAccessFile(const std::string& path,
                                     std::unique_ptr<RandomAccessFile>* out) = 0;
  // Opens path for writing, creating it (mode 0644). truncate=false keeps existing bytes and
  // appends after them (resume); truncate=true starts from an empty file. A symlink at path is
  // not followed: the open fails (ELOOP) instead of writing where the link points.
  virtual Status NewWritableFile(const std::string& path, bool truncate,
                                 std::unique_ptr<WritableFile>* out) = 0;

  // Names in dir (no "." / ".."), unsorted.
  virtual Status ListDir(const std::string& dir, std::vector<std::string>* names) = 0;
  // Size of a regular file; NotFound when it does not exist.
  virtual Status FileSize(const std::string& path, uint64_t* size) = 0;
  virtual bool FileExists(const std::string& path) = 0;
  // What path is (stat(2), following symlinks); kMissing (and OK) when it does not exist, an
  // IOError naming it for any other failure. Directory walks (dsconvert's folder sources) use it
  // to tell files from folders. Default: Unsupported (PosixEnv implements it).
  virtual Status GetFileKind(const std::string& path, FileKind* kind);
  // Atomic within one filesystem (rename(2)). Call SyncDir on the parent to make it durable.
  virtual Status RenameFile(const std::string& from, const std::string& to) = 0;
  // OK when path did not exist.
  virtual Status RemoveFile(const std::string& path) = 0;
  // mkdir -p.
  virtual Status CreateDirs(const std::string& dir) = 0;
  // fsync() a directory so renames and creations in it are durable ("" = ".").
  virtual Status SyncDir(const std::string& dir) = 0;
  // Bytes available to an unprivileged writer on path's filesystem (statvfs f_bavail).
  virtual Status FreeSpace(const std::string& path, uint64_t* bytes) = 0;
  // Takes an exclusive lock on lock_path (created if needed). wait=false: returns
  // Status::Aborted("... held by another process") at once when someone holds it.
  virtual Status LockFile(const std::string& lock_path, bool wait,
                          std::unique_ptr<FileLock>* out) = 0;
  // Takes a shared lock on lock_path (created if needed): any number of shared holders at once,
  // none while an exclusive LockFile holder has it (and LockFile(wait=false) fails while shared
  // holders exist). wait=false: Aborted at once when an exclusive holder has it. The cache's
  // leases. Default: Unsupported (PosixEnv implements it).
  virtual Status LockFileShared(const std::string& lock_path, bool wait,
                                std::unique_ptr<FileLock>* out);
  // Removes path and, for a directory, everything under it (rm -rf). OK when path did not
  // exist. Default: Unsupported (PosixEnv implements it).
  virtual Status RemoveTree(const std::string& path);
  // Opens the directory at path (symlinks in path are followed: it is the caller's path) as a
  // Directory; see there. Default: Unsupported (PosixEnv implements it).
  virtual Status OpenDirectory(const std::string& path, std::unique_ptr<Directory>* out);

  // ---- helpers built on the primitives above (not virtual: one behaviour for every Env)
  // Reads a whole file into *out (resized).
  Status ReadFile(const std::string& path, std::string* out);
  // Directory::WriteFileAtomic in path's directory: the file at `path` is either the old one or
  // the complete new one, never a torn one; the temp file ("<path>.tmp-<16 random hex>", made
  // exclusively, never through a planted link) is removed on failure.
  Status WriteFileAtomic(const std::string& path, std::string_view data);
};

}  // namespace dspipe
