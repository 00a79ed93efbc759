// SPDX-License-Identifier: Apache-2.0
#include "format/lmdb_env.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <mutex>
#include <set>
#include <utility>

#include "dspipe/format.h"

namespace dspipe::format {
namespace {

constexpr uint64_t kInitialMapSize = uint64_t{64} << 20;  // grows on demand

// Environments this process has open for writing, by (device, inode) of the path. LMDB forbids
// opening one environment twice in a process (closing the second drops the first's locks), so
// any second open of a writer's environment is refused instead of silently breaking locking.
std::mutex g_writers_mu;
std::set<std::pair<dev_t, ino_t>> g_writers;

// A data file shorter than the pages its meta page says are in use would fault (SIGBUS) on the
// first access to a missing page: refuse it at open with a message instead. Call right after
// mdb_env_open, before any transaction touches a page beyond the two meta pages.
Status CheckFileCoversMap(MDB_env* env, const std::string& path, bool subdir) {
  MDB_envinfo info;
  MDB_stat st;
  int rc = mdb_env_info(env, &info);
  if (rc == 0) rc = mdb_env_stat(env, &st);
  if (rc != 0) return LmdbError("read meta page of", path, rc);
  const std::string data = subdir ? path + "/data.mdb" : path;
  struct stat fst;
  if (::stat(data.c_str(), &fst) != 0) return Status::IOErrorErrno("stat", data, errno);
  const uint64_t need = (static_cast<uint64_t>(info.me_last_pgno) + 1) * st.ms_psize;
  if (static_cast<uint64_t>(fst.st_size) < need) {
    return Status::Corruption(data + ": file is truncated: " + std::to_string(fst.st_size) +
                              " bytes, but its meta page says " + std::to_string(need) +
                              " bytes (" + std::to_string(info.me_last_pgno + 1) +
                              " pages) are in use");
  }
  return Status::OK();
}

}  // namespace

Status LmdbError(std::string_view op, const std::string& path, int rc) {
  std::string m(op);
  m += " ";
  m += path;
  m += ": ";
  m += mdb_strerror(rc);
  if (rc == ENOSPC || rc == EIO || rc == EACCES || rc == ENOENT || rc == EFBIG || rc == EROFS ||
      rc == EDQUOT) {
    return Status::IOError(m);
  }
  if (rc == MDB_CORRUPTED || rc == MDB_PAGE_NOTFOUND || rc == MDB_INVALID ||
      rc == MDB_VERSION_MISMATCH) {
    return Status::Corruption(m);
  }
  return Status::IOError(m);
}

LmdbEnv::~LmdbEnv() {
  if (env_ != nullptr) mdb_env_close(env_);
  if (registered_) {
    std::lock_guard<std::mutex> lock(g_writers_mu);
    g_writers.erase({dev_, ino_});
  }
}

namespace {
Status RefuseIfOpenForWrite(const struct stat& st, const std::string& path) {
  std::lock_guard<std::mutex> lock(g_writers_mu);
  if (g_writers.count({st.st_dev, st.st_ino}) != 0) {
    return Status::Internal("LMDB " + path +
                            " is already open for writing in this process; LMDB forbids "
                            "opening an environment twice in one process");
  }
  return Status::OK();
}
}  // namespace

Status LmdbEnv::OpenReadOnly(const std::string& path, unsigned max_readers, bool readahead,
                             std::unique_ptr<LmdbEnv>* out) {
  std::unique_ptr<LmdbEnv> e(new LmdbEnv());
  e->path_ = path;
  e->pid_ = ::getpid();
  struct stat st;
  if (::stat(path.c_str(), &st) != 0) return Status::IOErrorErrno("open", path, errno);
  DSPIPE_RETURN_IF_ERROR(RefuseIfOpenForWrite(st, path));
  int rc = mdb_env_create(&e->env_);
  if (rc != 0) return LmdbError("mdb_env_create", path, rc);
  mdb_env_set_maxdbs(e->env_, 4);
  mdb_env_set_maxreaders(e->env_, max_readers);
  unsigned flags = MDB_RDONLY | MDB_NOTLS;
  if (!readahead) flags |= MDB_NORDAHEAD;
  if (!S_ISDIR(st.st_mode)) flags |= MDB_NOSUBDIR;
  rc = mdb_env_open(e->env_, path.c_str(), flags, 0644);
  if (rc != 0) return LmdbError("open LMDB", path, rc);
  DSPIPE_RETURN_IF_ERROR(CheckFileCoversMap(e->env_, path, S_ISDIR(st.st_mode)));
  LmdbTxn t;
  rc = mdb_txn_begin(e->env_, nullptr, MDB_RDONLY, &t.txn);
  if (rc != 0) return LmdbError("mdb_txn_begin", path, rc);
  rc = mdb_dbi_open(t.txn, kRecordsDb, 0, &e->records_);
  if (rc == 0) {
    rc = mdb_dbi_open(t.txn, kMetaDb, 0, &e->meta_);
    if (rc != 0) return LmdbError("open meta database", path, rc);
    e->dspipe_dbs_ = true;
  } else if (rc == MDB_NOTFOUND || rc == MDB_INCOMPATIBLE) {
    rc = mdb_dbi_open(t.txn, nullptr, 0, &e->records_);
    if (rc != 0) return LmdbError("open main database", path, rc);
  } else {
    return LmdbError("open records database", path, rc);
  }
  // Named dbi handles opened in a read-only txn stay valid after commit.
  rc = mdb_txn_commit(t.txn);
  t.txn = nullptr;
  if (rc != 0) return LmdbError("mdb_txn_commit", path, rc);
  *out = std::move(e);
  return Status::OK();
}

Status LmdbEnv::OpenForWrite(const std::string& path, std::unique_ptr<LmdbEnv>* out) {
  std::unique_ptr<LmdbEnv> e(new LmdbEnv());
  e->path_ = path;
  e->pid_ = ::getpid();
  std::error_code ec;
  std::filesystem::create_directories(path, ec);
  if (ec) return Status::IOError("create " + path + ": " + ec.message());
  struct stat dir_st;
  if (::stat(path.c_str(), &dir_st) != 0) return Status::IOErrorErrno("open", path, errno);
  {
    std::lock_guard<std::mutex> lock(g_writers_mu);
    if (!g_writers.insert({dir_st.st_dev, dir_st.st_ino}).second) {
      return Status::Internal("LMDB " + path +
                              " is already open for writing in this process; LMDB forbids "
                              "opening an environment twice in one process");
    }
    e->registered_ = true;
    e->dev_ = dir_st.st_dev;
    e->ino_ = dir_st.st_ino;
  }
  int rc = mdb_env_create(&e->env_);
  if (rc != 0) return LmdbError("mdb_env_create", path, rc);
  mdb_env_set_maxdbs(e->env_, 4);
  // An existing file keeps its size: start from the larger of it and the initial size.
  uint64_t existing = 0;
  struct stat st;
  if (::stat((path + "/data.mdb").c_str(), &st) == 0) existing = static_cast<uint64_t>(st.st_size);
  e->map_size_ = std::max(kInitialMapSize, existing + existing / 2);
  mdb_env_set_mapsize(e->env_, e->map_size_);
  rc = mdb_env_open(e->env_, path.c_str(), MDB_NOSYNC, 0644);
  if (rc != 0) {
    const Status s = LmdbError("open LMDB for writing", path, rc);
    if (existing == 0) {
      // Creating the environment failed (e.g. its first meta pages were written short or not
      // at all): remove what it left, which no later open or --resume could read
      // (MDB_INVALID). Found with tests/faults (short first write).
      mdb_env_close(e->env_);
      e->env_ = nullptr;
      std::error_code rm;
      std::filesystem::remove(path + "/data.mdb", rm);
      std::filesystem::remove(path + "/lock.mdb", rm);
      std::filesystem::remove(path, rm);  // only when empty
    }
    return s;
  }
  DSPIPE_RETURN_IF_ERROR(CheckFileCoversMap(e->env_, path, /*subdir=*/true));
  LmdbTxn t;
  rc = mdb_txn_begin(e->env_, nullptr, 0, &t.txn);
  if (rc != 0) return LmdbError("mdb_txn_begin", path, rc);
  rc = mdb_dbi_open(t.txn, kRecordsDb, MDB_CREATE, &e->records_);
  if (rc != 0) return LmdbError("create records database", path, rc);
  rc = mdb_dbi_open(t.txn, kMetaDb, MDB_CREATE, &e->meta_);
  if (rc != 0) return LmdbError("create meta database", path, rc);
  rc = mdb_txn_commit(t.txn);
  t.txn = nullptr;
  if (rc != 0) return LmdbError("mdb_txn_commit", path, rc);
  e->dspipe_dbs_ = true;
  *out = std::move(e);
  return Status::OK();
}

Status LmdbEnv::CheckPid() const {
  if (::getpid() != pid_) {
    return Status::Unsupported("LMDB " + path_ + " was opened in process " + std::to_string(pid_) +
                               " and used after fork() in process " + std::to_string(::getpid()) +
                               "; open datasets after forking (e.g. in worker_init_fn)");
  }
  return Status::OK();
}

Status LmdbEnv::GetMeta(std::string_view key, std::string* value, bool* found) const {
  *found = false;
  if (!dspipe_dbs_) return Status::OK();
  LmdbTxn t;
  int rc = mdb_txn_begin(env_, nullptr, MDB_RDONLY, &t.txn);
  if (rc != 0) return LmdbError("mdb_txn_begin", path_, rc);
  MDB_val k{key.size(), const_cast<char*>(key.data())};
  MDB_val v;
  rc = mdb_get(t.txn, meta_, &k, &v);
  if (rc == MDB_NOTFOUND) return Status::OK();
  if (rc != 0) return LmdbError("read meta key '" + std::string(key) + "' of", path_, rc);
  value->assign(static_cast<const char*>(v.mv_data), v.mv_size);
  *found = true;
  return Status::OK();
}

Status LmdbEnv::ScanMeta(
    std::string_view prefix,
    const std::function<Status(std::string_view key, std::string_view value)>& fn) const {
  if (!dspipe_dbs_) return Status::OK();
  DSPIPE_RETURN_IF_ERROR(CheckPid());
  LmdbTxn t;
  int rc = mdb_txn_begin(env_, nullptr, MDB_RDONLY, &t.txn);
  if (rc != 0) return LmdbError("mdb_txn_begin", path_, rc);
  MDB_cursor* cur = nullptr;
  rc = mdb_cursor_open(t.txn, meta_, &cur);
  if (rc != 0) return LmdbError("mdb_cursor_open", path_, rc);
  std::unique_ptr<MDB_cursor, void (*)(MDB_cursor*)> close(cur, mdb_cursor_close);
  MDB_val k{prefix.size(), const_cast<char*>(prefix.data())}, v;
  for (rc = mdb_cursor_get(cur, &k, &v, prefix.empty() ? MDB_FIRST : MDB_SET_RANGE); rc == 0;
       rc = mdb_cursor_get(cur, &k, &v, MDB_NEXT)) {
    const std::string_view key(static_cast<const char*>(k.mv_data), k.mv_size);
    if (key.substr(0, prefix.size()) != prefix) return Status::OK();
    DSPIPE_RETURN_IF_ERROR(
        fn(key, std::string_view(static_cast<const char*>(v.mv_data), v.mv_size)));
  }
  if (rc != MDB_NOTFOUND)
    return LmdbError("read meta keys '" + std::string(prefix) + "' of", path_, rc);
  return Status::OK();
}

Status LmdbEnv::RecordCount(uint64_t* count) const {
  LmdbTxn t;
  int rc = mdb_txn_begin(env_, nullptr, MDB_RDONLY, &t.txn);
  if (rc != 0) return LmdbError("mdb_txn_begin", path_, rc);
  MDB_stat st;
  rc = mdb_stat(t.txn, records_, &st);
  if (rc != 0) return LmdbError("mdb_stat", path_, rc);
  *count = st.ms_entries;
  return Status::OK();
}

Status LmdbEnv::NextIndex(uint64_t* next) const {
  *next = 0;
  LmdbTxn t;
  int rc = mdb_txn_begin(env_, nullptr, MDB_RDONLY, &t.txn);
  if (rc != 0) return LmdbError("mdb_txn_begin", path_, rc);
  MDB_cursor* cur = nullptr;
  rc = mdb_cursor_open(t.txn, records_, &cur);
  if (rc != 0) return LmdbError("mdb_cursor_open", path_, rc);
  MDB_val k, v;
  rc = mdb_cursor_get(cur, &k, &v, MDB_LAST);
  mdb_cursor_close(cur);
  if (rc == MDB_NOTFOUND) return Status::OK();
  if (rc != 0) return LmdbError("read last key of", path_, rc);
  if (k.mv_size != kKeySize) return Status::Corruption("bad record key size in " + path_);
  *next = DecodeKey(static_cast<const uint8_t*>(k.mv_data)) + 1;
  return Status::OK();
}

Status LmdbEnv::Sync() const {
  int rc = mdb_env_sync(env_, 1);
  if (rc != 0) return LmdbError("sync", path_, rc);
  return Status::OK();
}

void LmdbEnv::StartWriteback() const {
  mdb_filehandle_t fd;
  if (mdb_env_get_fd(env_, &fd) == 0) ::sync_file_range(fd, 0, 0, SYNC_FILE_RANGE_WRITE);
}

void LmdbEnv::Writer::PutRecord(std::string key, std::string value) {
  bytes_ += key.size() + value.size();
  ++records_;
  ops_.push_back({false, false, std::move(key), std::move(value)});
}

void LmdbEnv::Writer::PutMeta(std::string key, std::string value) {
  bytes_ += key.size() + value.size();
  ops_.push_back({true, false, std::move(key), std::move(value)});
}

void LmdbEnv::Writer::DeleteMeta(std::string key) {
  ops_.push_back({true, true, std::move(key), {}});
}

Status LmdbEnv::Writer::TryCommit(int* rc_out) {
  LmdbTxn t;
  int rc = mdb_txn_begin(env_->env_, nullptr, 0, &t.txn);
  if (rc != 0) {
    *rc_out = rc;
    return LmdbError("mdb_txn_begin (write)", env_->path_, rc);
  }
  for (Op& op : ops_) {
    MDB_val k{op.key.size(), op.key.data()};
    MDB_val v{op.value.size(), op.value.data()};
    const MDB_dbi dbi = op.meta ? env_->meta_ : env_->records_;
    if (op.del) {
      rc = mdb_del(t.txn, dbi, &k, nullptr);
      if (rc == MDB_NOTFOUND) rc = 0;
    } else {
      rc = mdb_put(t.txn, dbi, &k, &v, op.meta ? 0 : MDB_APPEND);
    }
    if (rc != 0) {
      *rc_out = rc;
      return LmdbError(op.meta ? "write meta to" : "write record to", env_->path_, rc);
    }
  }
  rc = mdb_txn_commit(t.txn);
  t.txn = nullptr;
  *rc_out = rc;
  // LMDB reports a short write (a full disk, a file size limit) as EIO.
  if (rc == EIO || rc == ENOSPC) {
    const Status s = LmdbError("commit to", env_->path_, rc);
    return Status(s.code(), s.message() + " (disk full?)");
  }
  if (rc != 0) return LmdbError("commit to", env_->path_, rc);
  return Status::OK();
}

Status LmdbEnv::Writer::Commit() {
  if (ops_.empty()) return Status::OK();
  for (;;) {
    int rc = 0;
    Status s = TryCommit(&rc);
    if (s.ok()) break;
    if (rc != MDB_MAP_FULL) return s;
    // Grow: at least double, and at least enough for this batch with B-tree overhead.
    const uint64_t grown = std::max(env_->map_size_ * 2, env_->map_size_ + 2 * bytes_);
    rc = mdb_env_set_mapsize(env_->env_, grown);
    if (rc != 0) return LmdbError("grow map of", env_->path_, rc);
    env_->map_size_ = grown;
  }
  ops_.clear();
  bytes_ = 0;
  records_ = 0;
  return Status::OK();
}

}  // namespace dspipe::format
