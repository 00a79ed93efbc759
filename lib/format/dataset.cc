// SPDX-License-Identifier: Apache-2.0
#include "dspipe/dataset.h"

#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <filesystem>
#include <mutex>
#include <nlohmann/json.hpp>

#include "core/files.h"
#include "format/lmdb_env.h"
#include "format/manifest.h"
#include "format/plain_lmdb.h"
#include "format/residency.h"

namespace dspipe {
namespace {

namespace fs = std::filesystem;

// Runs fn on the value under `key` inside a short read-only transaction.
Status ReadValue(const format::LmdbEnv& env, MDB_val key, const std::string& key_name,
                 const std::function<Status(std::span<const uint8_t>)>& fn) {
  DSPIPE_RETURN_IF_ERROR(env.CheckPid());
  format::LmdbTxn t;
  int rc = mdb_txn_begin(env.env(), nullptr, MDB_RDONLY, &t.txn);
  if (rc != 0) return format::LmdbError("mdb_txn_begin", env.path(), rc);
  MDB_val v;
  rc = mdb_get(t.txn, env.records(), &key, &v);
  if (rc == MDB_NOTFOUND) return Status::NotFound("key " + key_name + " not in " + env.path());
  if (rc != 0) return format::LmdbError("read key " + key_name + " of", env.path(), rc);
  // The record's I/O belongs to `read`: without this, with MDB_NORDAHEAD, its pages would fault
  // in 4 KiB at a time while the decoder touches them (format/residency.h).
  format::FaultIn(v.mv_data, v.mv_size);
  return fn({static_cast<const uint8_t*>(v.mv_data), v.mv_size});
}

// Read-ahead of the values under `keys` in one read-only transaction: WILLNEED on each value's
// range. The mapping stays valid after the transaction ends (read-only env, pages of a
// committed snapshot); a page freed and reused by a later writer only wastes the hint.
void AdviseValues(const format::LmdbEnv& env, std::span<const MDB_val> keys) {
  if (keys.empty() || !env.CheckPid().ok()) return;
  format::LmdbTxn t;
  if (mdb_txn_begin(env.env(), nullptr, MDB_RDONLY, &t.txn) != 0) return;
  for (MDB_val key : keys) {
    MDB_val v;
    if (mdb_get(t.txn, env.records(), &key, &v) == 0) format::AdviseWillNeed(v.mv_data, v.mv_size);
  }
}

class DspipeDataset final : public Dataset {
 public:
  // One shard file. `env` is set before the Dataset is shared (eager open) or exactly once by
  // Open() under `once` (lazy open); either way readers see it after `once`.
  struct Shard {
    std::string path, name;       // the LMDB, and its name in messages
    uint64_t begin = 0, end = 0;  // indices this dataset exposes
    uint64_t key_begin = 0;       // key stored for index `begin`
    mutable std::once_flag once;
    mutable std::unique_ptr<format::LmdbEnv> env;
    mutable Status open_status;
  };
  DspipeDataset(DatasetInfo info, std::vector<std::unique_ptr<Shard>> shards,
                DatasetOpenOptions options)
      : info_(std::move(info)),
        shards_(std::move(shards)),
        options_(std::move(options)),
        pid_(::getpid()) {}

  // Opens the shard's LMDB and checks its record count against the manifest.
  // `from` is where the bytes are: the shard's own path, or its copy in the cache.
  static Status OpenShard(const DatasetOpenOptions& options, const Shard* sh,
                          const std::string& from) {
    DSPIPE_RETURN_IF_ERROR(
        format::LmdbEnv::OpenReadOnly(from, options.max_readers, options.os_readahead, &sh->env));
    uint64_t n = 0;
    DSPIPE_RETURN_IF_ERROR(sh->env->RecordCount(&n));
    if (n != sh->end - sh->begin) {
      sh->env.reset();
      return Status::Corruption(from + ": holds " + std::to_string(n) + " records, " +
                                format::kTopManifestFile + " says " +
                                std::to_string(sh->end - sh->begin));
    }
    return Status::OK();
  }

  const DatasetInfo& info() const override { return info_; }
  std::string KeyName(uint64_t index) const override {
    const Shard* s = Find(index);
    if (s != nullptr) return dspipe::KeyName(index - s->begin + s->key_begin);
    return dspipe::KeyName(index);
  }

  void WillNeed(std::span<const uint64_t> indices) const override {
    // Consecutive indices of one shard share a transaction.
    std::vector<uint8_t> kbuf(indices.size() * kKeySize);
    std::vector<MDB_val> keys;
    keys.reserve(indices.size());
    const Shard* shard = nullptr;
    const format::LmdbEnv* env = nullptr;
    size_t n = 0;
    for (uint64_t index : indices) {
      const Shard* it = Find(index);
      if (it == nullptr) continue;
      if (shard != it) {
        if (env != nullptr) AdviseValues(*env, keys);
        keys.clear();
        shard = it;
        if (!ShardEnv(*it, &env).ok()) env = nullptr;  // best effort: the Read reports it
      }
      if (env == nullptr) continue;
      uint8_t* kb = kbuf.data() + n++ * kKeySize;
      EncodeKey(index - it->begin + it->key_begin, kb);
      keys.push_back(MDB_val{kKeySize, kb});
    }
    if (env != nullptr) AdviseValues(*env, keys);
  }

  Status Read(uint64_t index, const std::function<Status(const RecordView&)>& fn) const override {
    if (index >= info_.count) {
      return Status::InvalidArgument("index " + std::to_string(index) + " out of range (" +
                                     std::to_string(info_.count) + " records in " + info_.path +
                                     ")");
    }
    const Shard* it = Find(index);
    if (it == nullptr) return Status::Internal("no shard holds index " + std::to_string(index));
    const format::LmdbEnv* env = nullptr;
    DSPIPE_RETURN_IF_ERROR(ShardEnv(*it, &env));
    uint8_t kb[kKeySize];
    const uint64_t key = index - it->begin + it->key_begin;
    EncodeKey(key, kb);
    const std::string name = dspipe::KeyName(key);
    return ReadValue(*env, MDB_val{kKeySize, kb}, name,
                     [&](std::span<const uint8_t> value) -> Status {
                       RecordView view;
                       Status s = DecodeRecord(value, options_.verify_crc, &view);
                       if (!s.ok()) return s.WithContext("key " + name + " in " + env->path());
                       return fn(view);
                     });
  }

  Status ReadRecordTableEntry(std::string_view table, uint64_t index, std::string* value,
                              bool* found) const override {
    value->clear();
    *found = false;
    const Shard* sh = Find(index);
    if (sh == nullptr) return Status::OK();
    const format::LmdbEnv* env = nullptr;
    DSPIPE_RETURN_IF_ERROR(ShardEnv(*sh, &env));
    return env->GetMeta(
        std::string(table) + "/" + dspipe::KeyName(index - sh->begin + sh->key_begin), value,
        found);
  }

  Status ReadRecordTable(
      std::string_view table,
      const std::function<Status(uint64_t index, std::string_view value)>& fn) const override {
    const std::string prefix = std::string(table) + "/";
    for (const auto& sh : shards_) {
      const format::LmdbEnv* env = nullptr;
      DSPIPE_RETURN_IF_ERROR(ShardEnv(*sh, &env));
      DSPIPE_RETURN_IF_ERROR(
          env->ScanMeta(prefix, [&](std::string_view key, std::string_view value) -> Status {
            const std::string_view hex = key.substr(prefix.size());
            uint64_t k = 0;
            bool ok = hex.size() == 2 * kKeySize;
            for (char c : hex) {
              const int d = c >= '0' && c <= '9'   ? c - '0'
                            : c >= 'a' && c <= 'f' ? c - 'a' + 10
                                                   : -1;
              ok = ok && d >= 0;
              k = (k << 4) | static_cast<uint64_t>(d < 0 ? 0 : d);
            }
            if (!ok || k < sh->key_begin || k - sh->key_begin >= sh->end - sh->begin) {
              return Status::Corruption(
                  env->path() + ": meta key '" + std::string(key) +
                  "' names no record of this shard (keys " + dspipe::KeyName(sh->key_begin) + ".." +
                  dspipe::KeyName(sh->key_begin + sh->end - sh->begin) + ", end excluded)");
            }
            return fn(k - sh->key_begin + sh->begin, value);
          }));
    }
    return Status::OK();
  }

 private:
  const Shard* Find(uint64_t index) const {
    if (index >= info_.count) return nullptr;
    auto it =
        std::upper_bound(shards_.begin(), shards_.end(), index,
                         [](uint64_t i, const std::unique_ptr<Shard>& s) { return i < s->end; });
    if (it == shards_.end() || index < (*it)->begin) return nullptr;
    return it->get();
  }

  // The shard's environment, opened on first use when lazy (once; a failure sticks).
  Status ShardEnv(const Shard& sh, const format::LmdbEnv** env) const {
    std::call_once(sh.once, [&] {
      if (sh.env != nullptr) return;  // opened eagerly
      // Like every env's CheckPid: a Dataset opened before fork() is not used after it, even
      // for a shard it has not mapped yet.
      Status s =
          ::getpid() == pid_
              ? OpenShard(options_, &sh,
                          options_.resolve_shard ? options_.resolve_shard(sh.path) : sh.path)
              : Status::Unsupported("dataset " + info_.path + " was opened in process " +
                                    std::to_string(pid_) + " and used after fork() in process " +
                                    std::to_string(::getpid()) +
                                    "; open datasets after forking (e.g. in "
                                    "worker_init_fn)");
      if (!s.ok()) {
        s = s.WithContext("shard " + sh.name + " (records " + std::to_string(sh.begin) + ".." +
                          std::to_string(sh.end - 1) + ") of " + info_.path);
      }
      sh.open_status = std::move(s);
    });
    if (!sh.open_status.ok()) return sh.open_status;
    *env = sh.env.get();
    return Status::OK();
  }

  DatasetInfo info_;
  std::vector<std::unique_ptr<Shard>> shards_;
  DatasetOpenOptions options_;
  pid_t pid_;
};

// What makes `path` look like a source folder a build reads (an images/ folder, image files,
// class folders of images, a CSV file), or empty: the open error then says to convert it
// first instead of "neither an LMDB nor a sharded dataset" (issue 40, item 13).
bool IsImageFileName(const fs::path& p) {
  std::string ext = p.extension().string();
  std::transform(ext.begin(), ext.end(), ext.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  static constexpr std::string_view kExts[] = {".png", ".jpg", ".jpeg", ".bmp", ".tif", ".tiff",
                                               ".webp", ".pgm", ".ppm", ".pnm", ".pbm"};
  return std::find(std::begin(kExts), std::end(kExts), ext) != std::end(kExts);
}

bool HoldsImageFiles(const fs::path& dir, int budget) {
  std::error_code ec;
  fs::directory_iterator it(dir, ec), end;
  for (; !ec && it != end && budget-- > 0; it.increment(ec)) {
    if (it->is_regular_file(ec) && IsImageFileName(it->path())) return true;
  }
  return false;
}

std::string SourceFolderKind(const std::string& path) {
  std::error_code ec;
  if (fs::is_directory(fs::path(path) / "images", ec)) return "it holds an images/ folder";
  if (HoldsImageFiles(path, 4096)) return "it holds image files";
  bool csv = false;
  int dirs = 0;
  fs::directory_iterator it(path, ec), end;
  for (; !ec && it != end && dirs < 64; it.increment(ec)) {
    if (it->is_directory(ec)) {
      ++dirs;
      if (HoldsImageFiles(it->path(), 256)) return "it holds class folders of images";
    } else if (it->path().extension() == ".csv") {
      csv = true;
    }
  }
  return csv ? "it holds a CSV file" : "";
}

}  // namespace

Status Dataset::Open(const std::string& path, const DatasetOpenOptions& options,
                     std::unique_ptr<Dataset>* out) {
  std::error_code ec;
  if (!fs::exists(path, ec)) return Status::NotFound(path + ": no such dataset");
  const std::string top_manifest = path + "/" + format::kTopManifestFile;
  if (fs::is_directory(path, ec) && !fs::exists(path + "/data.mdb", ec)) {
    // Sharded dataset: manifest.json names the shards.
    if (!fs::exists(top_manifest, ec)) {
      if (fs::exists(path + "/" + format::ShardDirName(0), ec)) {
        return Status::Corruption(path + ": interrupted sharded build (no " +
                                  format::kTopManifestFile + "); rerun the build with " +
                                  Opt("BuildOptions::resume", "true"));
      }
      const std::string source = SourceFolderKind(path);
      if (!source.empty()) {
        return Status::InvalidArgument(
            path + ": this is a source folder (" + source +
            "), not a dataset: convert it first with dspipe.build(\"" + path +
            "\", OUT) in Python or `dsconvert build " + path + " OUT`, then open OUT");
      }
      return Status::NotFound(path + ": neither an LMDB (data.mdb) nor a sharded dataset (" +
                              format::kTopManifestFile + ")");
    }
    std::string text;
    DSPIPE_RETURN_IF_ERROR(core::ReadFile(top_manifest, &text));
    DatasetInfo info;
    std::vector<format::ShardRange> ranges;
    DSPIPE_RETURN_IF_ERROR(format::ParseManifest(text, top_manifest, &info, &ranges));
    info.kind = DatasetKind::kSharded;
    info.path = path;
    std::vector<std::unique_ptr<DspipeDataset::Shard>> shards;
    for (const format::ShardRange& r : ranges) {
      auto sh = std::make_unique<DspipeDataset::Shard>();
      sh->path = path + "/" + r.name;
      sh->name = r.name;
      sh->begin = r.begin;
      sh->end = r.end;
      sh->key_begin = r.key_begin;
      if (!options.lazy_shards) {
        DSPIPE_RETURN_IF_ERROR(DspipeDataset::OpenShard(options, sh.get(), sh->path));
      }
      info.shard_sizes.push_back(r.end - r.begin);
      shards.push_back(std::move(sh));
    }
    *out = std::make_unique<DspipeDataset>(std::move(info), std::move(shards), options);
    return Status::OK();
  }

  std::unique_ptr<format::LmdbEnv> env;
  DSPIPE_RETURN_IF_ERROR(
      format::LmdbEnv::OpenReadOnly(path, options.max_readers, options.os_readahead, &env));
  if (!env->has_dspipe_dbs()) {
    std::unique_ptr<format::PlainLmdbDataset> plain;
    DSPIPE_RETURN_IF_ERROR(format::OpenPlainLmdb(path, std::move(env), options, &plain));
    *out = std::move(plain);
    return Status::OK();
  }

  std::string text;
  bool found = false;
  DSPIPE_RETURN_IF_ERROR(env->GetMeta(kManifestKey, &text, &found));
  if (!found) {
    uint64_t n = 0;
    DSPIPE_RETURN_IF_ERROR(env->RecordCount(&n));
    return Status::Corruption(path + ": interrupted build (" + std::to_string(n) +
                              " records written, no manifest); rerun the build with " +
                              Opt("BuildOptions::resume", "true") + " to finish it");
  }
  DatasetInfo info;
  std::vector<format::ShardRange> ranges;
  DSPIPE_RETURN_IF_ERROR(format::ParseManifest(text, path + " (manifest)", &info, &ranges));
  info.kind = DatasetKind::kDspipe;
  info.path = path;
  uint64_t n = 0;
  DSPIPE_RETURN_IF_ERROR(env->RecordCount(&n));
  if (n != info.count) {
    return Status::Corruption(path + ": holds " + std::to_string(n) + " records, manifest says " +
                              std::to_string(info.count));
  }
  // A lone LMDB; when it is one shard of a sharded set, its keys start at the shard's range.
  std::vector<std::unique_ptr<DspipeDataset::Shard>> shards;
  auto sh = std::make_unique<DspipeDataset::Shard>();
  sh->path = sh->name = path;
  sh->env = std::move(env);
  sh->begin = 0;
  sh->end = info.count;
  sh->key_begin = ranges.empty() ? 0 : ranges[0].begin;
  shards.push_back(std::move(sh));
  info.shard_sizes = {info.count};
  *out = std::make_unique<DspipeDataset>(std::move(info), std::move(shards), options);
  return Status::OK();
}

}  // namespace dspipe
