// SPDX-License-Identifier: Apache-2.0
// Plain LMDBs (plain_lmdb.h; plain_keys.h maps the files): the dataset over a layout found at
// open — reads of an image (and its mask, from the same or a second LMDB) by index, read-ahead
// — and OpenPlainLmdb.
#include "format/plain_lmdb.h"

#include <string_view>
#include <utility>
#include <vector>

#include "dspipe/log.h"
#include "format/plain_keys.h"
#include "format/residency.h"

namespace dspipe::format {
namespace {

using plain::Escape;
using plain::KeyPattern;
using plain::Quote;

class PlainDatasetImpl final : public PlainLmdbDataset {
 public:
  using Layout = plain::Layout;

  PlainDatasetImpl(DatasetInfo info, std::unique_ptr<LmdbEnv> env,
                   std::unique_ptr<LmdbEnv> mask_env, Layout layout)
      : info_(std::move(info)),
        env_(std::move(env)),
        mask_env_(std::move(mask_env)),
        l_(std::move(layout)) {}

  const DatasetInfo& info() const override { return info_; }
  std::string KeyName(uint64_t index) const override {
    if (index >= l_.count) return "#" + std::to_string(index);
    return Escape(RawImageKey(index));  // unquoted: "5", as the user wrote it
  }
  std::string ImageKey(uint64_t index) const override { return KeyName(index); }
  std::string MaskKey(uint64_t index) const override {
    if (!l_.has_masks || index >= l_.count) return "";
    return Escape(l_.mask.Make(Id(index)));
  }
  const std::string& mask_path() const override {
    return mask_env_ ? mask_env_->path() : env_->path();
  }
  bool dense() const override { return l_.dense; }

  // Read-ahead: WILLNEED on the values (images and masks) of `indices`, one read-only
  // transaction per environment. Best effort: a missing key only wastes the hint.
  void WillNeed(std::span<const uint64_t> indices) const override {
    if (indices.empty() || !env_->CheckPid().ok()) return;
    Advise(*env_, indices, l_.image);
    if (l_.has_masks) Advise(mask_env_ ? *mask_env_ : *env_, indices, l_.mask);
  }

  Status Read(uint64_t index, const std::function<Status(const RecordView&)>& fn) const override {
    if (index >= l_.count) {
      return Status::InvalidArgument("index " + std::to_string(index) + " out of range (" +
                                     std::to_string(l_.count) + " records in " + info_.path + ")");
    }
    DSPIPE_RETURN_IF_ERROR(env_->CheckPid());
    const std::string id = Id(index);
    const std::string key = l_.image.Make(id);
    LmdbTxn t;
    int rc = mdb_txn_begin(env_->env(), nullptr, MDB_RDONLY, &t.txn);
    if (rc != 0) return LmdbError("mdb_txn_begin", env_->path(), rc);
    MDB_val k{key.size(), const_cast<char*>(key.data())}, v;
    rc = mdb_get(t.txn, env_->records(), &k, &v);
    if (rc == MDB_NOTFOUND) {
      return Status::Corruption("key " + Quote(key) + " not in " + env_->path() +
                                (l_.dense
                                     ? " (its keys looked like 0.." + std::to_string(l_.count - 1) +
                                           " at open; scan_keys lists them all)"
                                     : ""));
    }
    if (rc != 0) return LmdbError("read key " + Quote(key) + " of", env_->path(), rc);
    if (v.mv_size == 0) {
      return Status::Corruption("key " + Quote(key) + " in " + env_->path() + ": empty value");
    }
    format::FaultIn(v.mv_data, v.mv_size);  // the I/O belongs to `read` (format/residency.h)
    RecordView view;
    view.image = {static_cast<const uint8_t*>(v.mv_data), v.mv_size};
    view.header.image_codec = SniffCodec(view.image);
    view.header.channels = static_cast<uint8_t>(info_.channels);
    view.header.image_size = static_cast<uint32_t>(v.mv_size);
    if (!l_.labels.empty()) view.header.label = l_.labels[index];
    LmdbTxn mt;
    if (l_.has_masks) {
      const std::string mkey = l_.mask.Make(id);
      if (!l_.no_mask.empty() && l_.no_mask[index]) {
        return Status::Corruption("key " + Quote(key) + " in " + env_->path() + " has no mask " +
                                  Quote(mkey) + " in " + mask_path());
      }
      MDB_txn* txn = t.txn;
      if (mask_env_) {
        DSPIPE_RETURN_IF_ERROR(mask_env_->CheckPid());
        rc = mdb_txn_begin(mask_env_->env(), nullptr, MDB_RDONLY, &mt.txn);
        if (rc != 0) return LmdbError("mdb_txn_begin", mask_env_->path(), rc);
        txn = mt.txn;
      }
      const MDB_dbi dbi = mask_env_ ? mask_env_->records() : env_->records();
      MDB_val mk{mkey.size(), const_cast<char*>(mkey.data())}, mv;
      rc = mdb_get(txn, dbi, &mk, &mv);
      if (rc == MDB_NOTFOUND) {
        return Status::Corruption("mask key " + Quote(mkey) + " (of image key " + Quote(key) +
                                  ") not in " + mask_path());
      }
      if (rc != 0) return LmdbError("read key " + Quote(mkey) + " of", mask_path(), rc);
      if (mv.mv_size == 0) {
        return Status::Corruption("mask key " + Quote(mkey) + " in " + mask_path() +
                                  ": empty value");
      }
      format::FaultIn(mv.mv_data, mv.mv_size);
      view.mask = {static_cast<const uint8_t*>(mv.mv_data), mv.mv_size};
      view.header.mask_codec = SniffCodec(view.mask);
      view.header.mask_size = static_cast<uint32_t>(mv.mv_size);
    }
    return fn(view);
  }

 private:
  std::string Id(uint64_t index) const { return l_.Id(index); }
  void Advise(const LmdbEnv& env, std::span<const uint64_t> indices,
              const KeyPattern& pattern) const {
    if (!env.CheckPid().ok()) return;
    LmdbTxn t;
    if (mdb_txn_begin(env.env(), nullptr, MDB_RDONLY, &t.txn) != 0) return;
    for (uint64_t index : indices) {
      if (index >= l_.count) continue;
      const std::string key = pattern.Make(Id(index));
      MDB_val k{key.size(), const_cast<char*>(key.data())}, v;
      if (mdb_get(t.txn, env.records(), &k, &v) == 0) format::AdviseWillNeed(v.mv_data, v.mv_size);
    }
  }
  std::string RawImageKey(uint64_t index) const { return l_.image.Make(Id(index)); }

  DatasetInfo info_;
  std::unique_ptr<LmdbEnv> env_, mask_env_;
  Layout l_;
};

}  // namespace

Status OpenPlainLmdb(const std::string& path, std::unique_ptr<LmdbEnv> env,
                     const DatasetOpenOptions& options, std::unique_ptr<PlainLmdbDataset>* out) {
  const PlainLmdbOptions& o = options.plain;
  std::unique_ptr<LmdbEnv> mask_env;
  if (!o.masks.empty()) {
    DSPIPE_RETURN_IF_ERROR(
        LmdbEnv::OpenReadOnly(o.masks, options.max_readers, options.os_readahead, &mask_env));
    if (mask_env->has_dspipe_dbs()) {
      return Status::BadInput(o.masks + ": a dspipe dataset, not a plain LMDB of masks");
    }
  }
  plain::Layout layout;
  DatasetInfo info;
  DSPIPE_RETURN_IF_ERROR(
      plain::FindLayout(path, *env, mask_env.get(), o, &layout, &info.pairing, &info.warnings));
  if (!info.pairing.empty()) Log(LogLevel::kInfo, info.pairing);
  for (const std::string& w : info.warnings) Log(LogLevel::kWarn, w);
  info.kind = DatasetKind::kPlain;
  info.path = path;
  info.count = layout.count;
  info.store = "plain";
  info.channels = 3;
  info.has_masks = layout.has_masks;
  info.has_labels = !layout.labels.empty();
  *out = std::make_unique<PlainDatasetImpl>(std::move(info), std::move(env), std::move(mask_env),
                                            std::move(layout));
  return Status::OK();
}

Status OpenPlainLmdb(const std::string& path, const DatasetOpenOptions& options,
                     std::unique_ptr<PlainLmdbDataset>* out) {
  std::unique_ptr<LmdbEnv> env;
  DSPIPE_RETURN_IF_ERROR(
      LmdbEnv::OpenReadOnly(path, options.max_readers, options.os_readahead, &env));
  if (env->has_dspipe_dbs()) {
    return Status::BadInput(path + ": already a dspipe dataset, not a plain LMDB");
  }
  return OpenPlainLmdb(path, std::move(env), options, out);
}

}  // namespace dspipe::format
