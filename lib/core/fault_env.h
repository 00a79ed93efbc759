// SPDX-License-Identifier: Apache-2.0
// FaultEnv: an Env that injects the faults tests ask for (ENOSPC, torn writes, read errors,
// failing fsyncs, a full filesystem). Internal: for dspipe's own tests and benches, not part of
// the installed API (include/dspipe/env.h is the Env seam it wraps).
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "dspipe/env.h"
#include "dspipe/status.h"

namespace dspipe::core {

// An Env that forwards to a base Env and injects faults on command, for tests. Counters are
// 1-based and count calls through this Env only; each fault fires once (set it again to repeat)
// unless stated. Thread-safe.
class FaultEnv : public Env {
 public:
  explicit FaultEnv(Env* base = Env::Default()) : base_(base) {}

  // The Nth Append from now fails with ENOSPC and writes nothing.
  void FailWriteWithEnospc(int nth) { enospc_at_.store(count_writes_.load() + nth); }
  // The Nth Append from now writes only the first half of its data, then fails with EIO (a torn
  // write, as when a device dies mid-write).
  void ShortWrite(int nth) { short_at_.store(count_writes_.load() + nth); }
  // The Nth Read from now fails with EIO; later reads succeed (a flaky FUSE mount such as Drive).
  void FailReadWithEio(int nth) { eio_read_at_.store(count_reads_.load() + nth); }
  // Every Sync (file or directory) fails with EIO while on.
  void FailSync(bool on) { fail_sync_.store(on); }
  // FreeSpace reports this many bytes (UINT64_MAX = ask the base Env); Allocate of more fails.
  void SetFreeSpace(uint64_t bytes) { free_space_.store(bytes); }
  // Allocate of more than this many bytes fails with ENOSPC while FreeSpace still reports the
  // base's: as when another process fills the filesystem after the free space was checked.
  // UINT64_MAX (default) = no such limit.
  void SetAllocateLimit(uint64_t bytes) { allocate_limit_.store(bytes); }

  int writes() const { return count_writes_.load(); }
  int reads() const { return count_reads_.load(); }

  Status NewRandomAccessFile(const std::string& path,
                             std::unique_ptr<RandomAccessFile>* out) override;
  Status NewWritableFile(const std::string& path, bool truncate,
                         std::unique_ptr<WritableFile>* out) override;
  Status ListDir(const std::string& dir, std::vector<std::string>* names) override {
    return base_->ListDir(dir, names);
  }
  Status FileSize(const std::string& path, uint64_t* size) override {
    return base_->FileSize(path, size);
  }
  bool FileExists(const std::string& path) override { return base_->FileExists(path); }
  Status GetFileKind(const std::string& path, FileKind* kind) override {
    return base_->GetFileKind(path, kind);
  }
  Status RenameFile(const std::string& from, const std::string& to) override {
    return base_->RenameFile(from, to);
  }
  Status RemoveFile(const std::string& path) override { return base_->RemoveFile(path); }
  Status CreateDirs(const std::string& dir) override { return base_->CreateDirs(dir); }
  Status SyncDir(const std::string& dir) override;
  Status FreeSpace(const std::string& path, uint64_t* bytes) override;
  Status LockFile(const std::string& lock_path, bool wait,
                  std::unique_ptr<FileLock>* out) override {
    return base_->LockFile(lock_path, wait, out);
  }
  Status LockFileShared(const std::string& lock_path, bool wait,
                        std::unique_ptr<FileLock>* out) override {
    return base_->LockFileShared(lock_path, wait, out);
  }
  Status RemoveTree(const std::string& path) override { return base_->RemoveTree(path); }
  // The base Env's Directory, its files and subdirectories seeing this Env's faults (writes,
  // reads, syncs, free space) as the path-based calls do.
  Status OpenDirectory(const std::string& path, std::unique_ptr<Directory>* out) override;

 private:
  friend class FaultWritableFile;
  friend class FaultRandomAccessFile;
  friend class FaultDirectory;
  Env* base_;
  std::atomic<int> count_writes_{0}, count_reads_{0};
  std::atomic<int> enospc_at_{0}, short_at_{0}, eio_read_at_{0};
  std::atomic<bool> fail_sync_{false};
  std::atomic<uint64_t> free_space_{UINT64_MAX};
  std::atomic<uint64_t> allocate_limit_{UINT64_MAX};
};

}  // namespace dspipe::core
