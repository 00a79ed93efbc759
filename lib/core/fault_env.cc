// SPDX-License-Identifier: Apache-2.0
// FaultEnv: forwards to a base Env and injects the faults tests ask for.
#include <cerrno>

#include "core/fault_env.h"

namespace dspipe::core {

class FaultRandomAccessFile final : public RandomAccessFile {
 public:
  FaultRandomAccessFile(FaultEnv* env, std::unique_ptr<RandomAccessFile> base)
      : env_(env), base_(std::move(base)) {}
  Status Read(uint64_t offset, size_t n, char* scratch, size_t* got) const override {
    const int nth = ++env_->count_reads_;
    if (nth == env_->eio_read_at_.load()) return Status::IOErrorErrno("read", path(), EIO);
    return base_->Read(offset, n, scratch, got);
  }
  const std::string& path() const override { return base_->path(); }

 private:
  FaultEnv* env_;
  std::unique_ptr<RandomAccessFile> base_;
};

class FaultWritableFile final : public WritableFile {
 public:
  FaultWritableFile(FaultEnv* env, std::unique_ptr<WritableFile> base)
      : env_(env), base_(std::move(base)) {}
  Status Append(std::string_view data) override {
    const int nth = ++env_->count_writes_;
    if (nth == env_->enospc_at_.load()) return Status::IOErrorErrno("write", path(), ENOSPC);
    if (nth == env_->short_at_.load()) {
      DSPIPE_RETURN_IF_ERROR(base_->Append(data.substr(0, data.size() / 2)));
      return Status::IOErrorErrno("write", path(), EIO);
    }
    return base_->Append(data);
  }
  Status Allocate(uint64_t offset, uint64_t len) override {
    const uint64_t free_space = env_->free_space_.load();
    const uint64_t limit = env_->allocate_limit_.load();
    if ((free_space != UINT64_MAX && len > free_space) || (limit != UINT64_MAX && len > limit))
      return Status::IOErrorErrno("fallocate", path(), ENOSPC);
    return base_->Allocate(offset, len);
  }
  Status Truncate(uint64_t size) override { return base_->Truncate(size); }
  Status Sync() override {
    if (env_->fail_sync_.load()) return Status::IOErrorErrno("fsync", path(), EIO);
    return base_->Sync();
  }
  void StartWriteback() override { base_->StartWriteback(); }
  Status Close() override { return base_->Close(); }
  uint64_t size() const override { return base_->size(); }
  const std::string& path() const override { return base_->path(); }

 private:
  FaultEnv* env_;
  std::unique_ptr<WritableFile> base_;
};

// A Directory of the base Env whose files, subdirectories, syncs and free space see the
// FaultEnv's faults.
class FaultDirectory final : public Directory {
 public:
  FaultDirectory(FaultEnv* env, std::unique_ptr<Directory> base)
      : env_(env), base_(std::move(base)) {}
  const std::string& path() const override { return base_->path(); }
  Status StatSelf(FileInfo* info) override { return base_->StatSelf(info); }
  Status Stat(const std::string& name, FileInfo* info) override { return base_->Stat(name, info); }
  Status List(std::vector<std::string>* names) override { return base_->List(names); }
  Status OpenDir(const std::string& name, bool create, uint32_t mode,
                 std::unique_ptr<Directory>* out) override {
    std::unique_ptr<Directory> d;
    DSPIPE_RETURN_IF_ERROR(base_->OpenDir(name, create, mode, &d));
    *out = std::make_unique<FaultDirectory>(env_, std::move(d));
    return Status::OK();
  }
  Status NewFile(const std::string& name, std::unique_ptr<WritableFile>* out) override {
    std::unique_ptr<WritableFile> f;
    DSPIPE_RETURN_IF_ERROR(base_->NewFile(name, &f));
    *out = std::make_unique<FaultWritableFile>(env_, std::move(f));
    return Status::OK();
  }
  Status OpenFile(const std::string& name, std::unique_ptr<RandomAccessFile>* out) override {
    std::unique_ptr<RandomAccessFile> f;
    DSPIPE_RETURN_IF_ERROR(base_->OpenFile(name, &f));
    *out = std::make_unique<FaultRandomAccessFile>(env_, std::move(f));
    return Status::OK();
  }
  Status Rename(const std::string& from, const std::string& to) override {
    return base_->Rename(from, to);
  }
  Status Remove(const std::string& name) override { return base_->Remove(name); }
  Status RemoveTree(const std::string& name) override { return base_->RemoveTree(name); }
  Status Sync() override {
    if (env_->fail_sync_.load()) return Status::IOErrorErrno("fsync", path(), EIO);
    return base_->Sync();
  }
  Status FreeSpace(uint64_t* bytes) override {
    const uint64_t v = env_->free_space_.load();
    if (v != UINT64_MAX) {
      *bytes = v;
      return Status::OK();
    }
    return base_->FreeSpace(bytes);
  }
  bool OnTmpfs() override { return base_->OnTmpfs(); }
  Status Lock(const std::string& name, bool exclusive, bool wait,
              std::unique_ptr<FileLock>* out) override {
    return base_->Lock(name, exclusive, wait, out);
  }

 private:
  FaultEnv* env_;
  std::unique_ptr<Directory> base_;
};

Status FaultEnv::OpenDirectory(const std::string& path, std::unique_ptr<Directory>* out) {
  std::unique_ptr<Directory> d;
  DSPIPE_RETURN_IF_ERROR(base_->OpenDirectory(path, &d));
  *out = std::make_unique<FaultDirectory>(this, std::move(d));
  return Status::OK();
}

Status FaultEnv::NewRandomAccessFile(const std::string& path,
                                     std::unique_ptr<RandomAccessFile>* out) {
  std::unique_ptr<RandomAccessFile> f;
  DSPIPE_RETURN_IF_ERROR(base_->NewRandomAccessFile(path, &f));
  *out = std::make_unique<FaultRandomAccessFile>(this, std::move(f));
  return Status::OK();
}

Status FaultEnv::NewWritableFile(const std::string& path, bool truncate,
                                 std::unique_ptr<WritableFile>* out) {
  std::unique_ptr<WritableFile> f;
  DSPIPE_RETURN_IF_ERROR(base_->NewWritableFile(path, truncate, &f));
  *out = std::make_unique<FaultWritableFile>(this, std::move(f));
  return Status::OK();
}

Status FaultEnv::SyncDir(const std::string& dir) {
  if (fail_sync_.load()) return Status::IOErrorErrno("fsync", dir.empty() ? "." : dir, EIO);
  return base_->SyncDir(dir);
}

Status FaultEnv::FreeSpace(const std::string& path, uint64_t* bytes) {
  const uint64_t v = free_space_.load();
  if (v != UINT64_MAX) {
    *bytes = v;
    return Status::OK();
  }
  return base_->FreeSpace(path, bytes);
}

}  // namespace dspipe::core
