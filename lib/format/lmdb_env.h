// SPDX-License-Identifier: Apache-2.0
// Thin RAII layer over LMDB with errors that name the environment. Internal.
//
// Readers: MDB_RDONLY | MDB_NOTLS (no thread-local reader slots: any thread may run a read
// transaction) | MDB_NORDAHEAD by default. Writers: one thread, transactions buffered in memory
// and replayed after growing the map when LMDB reports MDB_MAP_FULL, so users never pick a map
// size.
#pragma once

#include <lmdb.h>
#include <sys/types.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "dspipe/status.h"

namespace dspipe::format {

Status LmdbError(std::string_view op, const std::string& path, int rc);

// An LMDB transaction that aborts itself when it goes out of scope: begin it into `txn`; after
// mdb_txn_commit (which frees it either way) set `txn` to nullptr.
struct LmdbTxn {
  MDB_txn* txn = nullptr;
  LmdbTxn() = default;
  LmdbTxn(const LmdbTxn&) = delete;
  LmdbTxn& operator=(const LmdbTxn&) = delete;
  ~LmdbTxn() {
    if (txn) mdb_txn_abort(txn);
  }
};

class LmdbEnv {
 public:
  ~LmdbEnv();
  LmdbEnv(const LmdbEnv&) = delete;
  LmdbEnv& operator=(const LmdbEnv&) = delete;

  // Opens an existing environment directory read-only. has_dspipe_dbs() tells whether it holds
  // dspipe's named databases (else it is a plain LMDB: records in the main database).
  static Status OpenReadOnly(const std::string& path, unsigned max_readers, bool readahead,
                             std::unique_ptr<LmdbEnv>* out);
  // Both opens refuse (kInternal) an environment this process already has open for writing, and
  // (kCorruption) a data file shorter than the pages its meta page says are in use.
  // Opens or creates an environment directory for writing dspipe's named databases.
  static Status OpenForWrite(const std::string& path, std::unique_ptr<LmdbEnv>* out);

  MDB_env* env() const { return env_; }
  MDB_dbi records() const { return records_; }  // main dbi for plain LMDBs
  MDB_dbi meta() const { return meta_; }
  bool has_dspipe_dbs() const { return dspipe_dbs_; }
  const std::string& path() const { return path_; }
  // Fails (kUnsupported) when called in a process other than the one that opened the env.
  Status CheckPid() const;

  // One-shot read of a meta key. *found false when absent.
  Status GetMeta(std::string_view key, std::string* value, bool* found) const;
  // Calls fn(key, value) for each meta key starting with `prefix`, in key order; views valid
  // during the call. An error from fn stops the scan and is returned.
  Status ScanMeta(
      std::string_view prefix,
      const std::function<Status(std::string_view key, std::string_view value)>& fn) const;
  // Number of entries in the records database.
  Status RecordCount(uint64_t* count) const;
  // Largest record key (big-endian index) + 1, or 0 when empty.
  Status NextIndex(uint64_t* next) const;
  // Flushes the data file to disk (we write with MDB_NOSYNC and sync at checkpoints).
  Status Sync() const;
  // Starts writing dirty pages of the data file to disk without waiting (sync_file_range), so a
  // later Sync() has little left to do. Best effort.
  void StartWriteback() const;

  // Buffered write transaction. Put/PutMeta buffer; Commit writes them all in one LMDB
  // transaction, growing the map and retrying on MDB_MAP_FULL. Single-threaded.
  class Writer {
   public:
    explicit Writer(LmdbEnv* env) : env_(env) {}
    void PutRecord(std::string key, std::string value);
    void PutMeta(std::string key, std::string value);
    void DeleteMeta(std::string key);
    size_t pending_bytes() const { return bytes_; }
    size_t pending_records() const { return records_; }
    Status Commit();

   private:
    struct Op {
      bool meta;
      bool del;
      std::string key, value;
    };
    Status TryCommit(int* rc_out);
    LmdbEnv* env_;
    std::vector<Op> ops_;
    size_t bytes_ = 0;
    size_t records_ = 0;
  };

 private:
  LmdbEnv() = default;
  MDB_env* env_ = nullptr;
  MDB_dbi records_ = 0;
  MDB_dbi meta_ = 0;
  bool dspipe_dbs_ = false;
  pid_t pid_ = 0;
  uint64_t map_size_ = 0;
  std::string path_;
  bool registered_ = false;  // in the process's set of writers (OpenForWrite)
  dev_t dev_ = 0;
  ino_t ino_ = 0;
};

}  // namespace dspipe::format
