// SPDX-License-Identifier: Apache-2.0
#include "profile/sources.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <mutex>

#include "cache/cached_dataset.h"
#include "codec/image.h"
#include "convert/sources.h"
#include "convert/sources_archive.h"
#include "core/files.h"

namespace dspipe::profile {

namespace fs = std::filesystem;

Status CountingDataset::Read(uint64_t index,
                             const std::function<Status(const RecordView&)>& fn) const {
  return inner_->Read(index, [&](const RecordView& rec) {
    counters_->records.fetch_add(1, std::memory_order_relaxed);
    counters_->bytes.fetch_add(kRecordHeaderSize + rec.image.size() + rec.mask.size(),
                               std::memory_order_relaxed);
    return fn(rec);
  });
}

namespace {

// The inner dataset's background copy seen through the counting wrapper: the same state, result
// and wait; cached() is a CountingDataset over the copy (made once, so the Loader and the
// report see one object). Thread-safe.
class CountingCacheCopy final : public cache::CacheCopy {
 public:
  CountingCacheCopy(std::shared_ptr<cache::CacheCopy> inner, std::shared_ptr<ReadCounters> counters)
      : inner_(std::move(inner)), counters_(std::move(counters)) {}
  State state() const override { return inner_->state(); }
  std::shared_ptr<const Dataset> cached() const override {
    std::lock_guard<std::mutex> lock(mu_);
    if (!cached_) {
      std::shared_ptr<const Dataset> copy = inner_->cached();
      if (copy) cached_ = std::make_shared<CountingDataset>(std::move(copy), counters_);
    }
    return cached_;
  }
  CacheResult result() const override { return inner_->result(); }
  State Wait() const override { return inner_->Wait(); }

 private:
  const std::shared_ptr<cache::CacheCopy> inner_;
  const std::shared_ptr<ReadCounters> counters_;
  mutable std::mutex mu_;
  mutable std::shared_ptr<const Dataset> cached_;  // guarded by mu_
};

// The per-shard cache seen through the counting wrapper: the same requests and state; each
// dataset Reopen makes (some shards read from their entries) is a CountingDataset counting into
// `cache`. Thread-safe.
class CountingShardCache final : public cache::ShardCache,
                                 public std::enable_shared_from_this<CountingShardCache> {
 public:
  CountingShardCache(std::shared_ptr<cache::ShardCache> inner,
                     std::shared_ptr<ReadCounters> counters)
      : inner_(std::move(inner)), counters_(std::move(counters)) {}
  void Want(const std::vector<uint64_t>& shards) override { inner_->Want(shards); }
  void Wait() const override { inner_->Wait(); }
  size_t cached_count() const override { return inner_->cached_count(); }
  Status Reopen(std::shared_ptr<const Dataset>* out) const override {
    std::shared_ptr<const Dataset> ds;
    DSPIPE_RETURN_IF_ERROR(inner_->Reopen(&ds));
    // The reopened dataset carries the inner cache (it owns it); the wrapper carries this one,
    // so the Loader keeps reopening through the counters.
    cache::CacheState state;
    state.shards = std::const_pointer_cast<CountingShardCache>(shared_from_this());
    *out = std::make_shared<cache::CachedDataset>(
        std::make_shared<CountingDataset>(std::move(ds), counters_), std::move(state));
    return Status::OK();
  }
  std::string Describe() const override { return inner_->Describe(); }

 private:
  const std::shared_ptr<cache::ShardCache> inner_;
  const std::shared_ptr<ReadCounters> counters_;
};

}  // namespace

std::shared_ptr<const Dataset> CountReads(std::shared_ptr<const Dataset> inner,
                                          std::shared_ptr<ReadCounters> in_place,
                                          std::shared_ptr<ReadCounters> cache) {
  const cache::CacheState inner_state = cache::CacheStateOf(*inner);
  if (inner_state.stream) {
    // Streamed: every read comes from a shard's cache entry. The wrapper carries the stream, so
    // the Loader tells it the order.
    cache::CacheState state;
    state.stream = inner_state.stream;
    return std::make_shared<cache::CachedDataset>(
        std::make_shared<CountingDataset>(std::move(inner), std::move(cache)), std::move(state));
  }
  if (inner_state.shards) {
    // The per-shard cache: the first epoch reads in place (shards are copied meanwhile), the
    // datasets reopened at epoch boundaries count into `cache` (their cached shards read from
    // the entries, any others still in place).
    cache::CacheState state;
    state.shards = std::make_shared<CountingShardCache>(inner_state.shards, std::move(cache));
    return std::make_shared<cache::CachedDataset>(
        std::make_shared<CountingDataset>(std::move(inner), std::move(in_place)), std::move(state));
  }
  std::shared_ptr<cache::CacheCopy> copy = inner_state.copy;
  auto counting = std::make_shared<CountingDataset>(std::move(inner), std::move(in_place));
  if (!copy) return counting;
  // The wrapper carries an adapter of the copy, as OpenDatasetCached's dataset carries the copy.
  cache::CacheState state;
  state.copy = std::make_shared<CountingCacheCopy>(std::move(copy), std::move(cache));
  return std::make_shared<cache::CachedDataset>(std::move(counting), std::move(state));
}

namespace {

std::span<const uint8_t> Bytes(const std::string& s) {
  return {reinterpret_cast<const uint8_t*>(s.data()), s.size()};
}

}  // namespace

Status FolderDataset::Open(const std::string& src, std::unique_ptr<FolderDataset>* out) {
  if (convert::IsLmdbSource(src)) {
    return Status::InvalidArgument(src + ": an LMDB; --compare takes the image folder first");
  }
  if (convert::IsArchiveSource(src)) {
    return Status::InvalidArgument(src + ": an archive; --compare takes an extracted image folder");
  }
  convert::SourceList list;
  DSPIPE_RETURN_IF_ERROR(convert::ScanSources(src, PlainLmdbOptions{}, &list));
  auto ds = std::unique_ptr<FolderDataset>(new FolderDataset());
  for (const convert::SourceItem& it : list.items) {
    if (!it.error.empty()) {
      ++ds->skipped_;
      continue;
    }
    ds->items_.push_back({it.image, it.mask, it.label});
  }
  if (ds->items_.empty()) return Status::BadInput(src + ": no usable image/mask pairs");
  // The first image decides the channels; its size, as the first record does for a plain LMDB,
  // the batch size unless one is given (the size is left unknown here, so the loader refuses an
  // image of another size by name instead of resizing it to the first one's).
  std::string bytes;
  DSPIPE_RETURN_IF_ERROR(core::ReadFile(ds->items_[0].image, &bytes));
  codec::ImageProbe probe;
  Status s = codec::Probe(Bytes(bytes), &probe);
  if (!s.ok()) return s.WithContext(ds->items_[0].image);
  // Decoding would keep the high byte of a deeper image: never silently.
  DSPIPE_RETURN_IF_ERROR(codec::CheckLoaderDepth(probe).WithContext(ds->items_[0].image));
  DatasetInfo& info = ds->info_;
  info.kind = DatasetKind::kPlain;
  info.path = src;
  info.count = ds->items_.size();
  info.store = "encoded";
  info.channels = (probe.channels <= 2) ? 1 : 3;
  info.height = info.width = 0;  // unknown: the files are not all probed at open
  info.has_masks = list.has_masks;
  info.has_labels = list.has_labels;
  info.class_names = list.class_names;
  *out = std::move(ds);
  return Status::OK();
}

Status FolderDataset::Read(uint64_t index,
                           const std::function<Status(const RecordView&)>& fn) const {
  if (index >= items_.size()) {
    return Status::NotFound("sample " + std::to_string(index) + " of " + info_.path + " (" +
                            std::to_string(items_.size()) + " samples)");
  }
  const Item& item = items_[index];
  // Per-thread buffers: grow to the largest file and are reused.
  thread_local std::string image, mask;
  DSPIPE_RETURN_IF_ERROR(core::ReadFile(item.image, &image));
  if (!item.mask.empty()) DSPIPE_RETURN_IF_ERROR(core::ReadFile(item.mask, &mask));
  codec::ImageProbe probe;
  Status s = codec::Probe(Bytes(image), &probe);
  if (!s.ok()) return Status::BadInput(item.image + ": " + s.message());
  RecordView rec;
  rec.header.image_codec = probe.codec;
  rec.header.channels = static_cast<uint8_t>(info_.channels);
  rec.header.height = static_cast<uint32_t>(probe.height);
  rec.header.width = static_cast<uint32_t>(probe.width);
  rec.header.label = item.label;
  rec.image = Bytes(image);
  rec.header.image_size = static_cast<uint32_t>(image.size());
  if (!item.mask.empty()) {
    rec.mask = Bytes(mask);
    rec.header.mask_codec = codec::SniffCodec(rec.mask);
    rec.header.mask_size = static_cast<uint32_t>(mask.size());
  }
  return fn(rec);
}

namespace {

void AdviseFile(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return;
  (void)::posix_fadvise(fd, 0, 0, POSIX_FADV_WILLNEED);
  ::close(fd);
}

}  // namespace

void FolderDataset::WillNeed(std::span<const uint64_t> indices) const {
  for (uint64_t index : indices) {
    if (index >= items_.size()) continue;
    AdviseFile(items_[index].image);
    if (!items_[index].mask.empty()) AdviseFile(items_[index].mask);
  }
}

std::string FolderDataset::KeyName(uint64_t index) const {
  return index < items_.size() ? items_[index].image : "sample " + std::to_string(index);
}

std::vector<std::string> FolderDataset::Files() const {
  std::vector<std::string> files;
  for (const Item& it : items_) {
    files.push_back(it.image);
    if (!it.mask.empty()) files.push_back(it.mask);
  }
  return files;
}

std::vector<std::string> DatasetFiles(const std::string& path) {
  std::vector<std::string> files;
  std::error_code ec;
  if (fs::is_regular_file(path, ec)) return {path};
  for (fs::recursive_directory_iterator it(path, ec), end; !ec && it != end; it.increment(ec)) {
    if (it->path().filename() == "data.mdb" && it->is_regular_file(ec)) {
      files.push_back(it->path().string());
    }
  }
  std::sort(files.begin(), files.end());
  return files;
}

}  // namespace dspipe::profile
