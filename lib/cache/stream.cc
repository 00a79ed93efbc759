// SPDX-License-Identifier: Apache-2.0
// OpenMode::stream: a remote (s3://, http(s)://) sharded dataset read shard by shard through
// the cache, each shard an entry fetched ahead of the reader along its known order and released,
// furthest next use first, when room is needed (docs/STORAGE.md "Streaming").
#include "cache/stream.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <limits>
#include <map>
#include <mutex>
#include <set>
#include <string_view>
#include <thread>

#include "cache/acquire.h"
#include "cache/budget.h"
#include "cache/cache_dir.h"
#include "cache/entries.h"
#include "core/checksum.h"
#include "core/files.h"
#include "dspipe/fetch.h"
#include "dspipe/format.h"
#include "dspipe/log.h"
#include "format/manifest.h"

namespace dspipe::cache {
namespace {

constexpr size_t kNever = std::numeric_limits<size_t>::max();

struct ShardSpec {
  format::ShardRange range;
  SourceListing listing;  // its files, fetched one by one (fetch_files)
  std::string entry;      // its entry's name in the cache dir
  uint64_t charge = 0;    // what it counts against the limit: its files + EntryOverhead
};

// A run of consecutive positions of the order that read one shard.
struct UseRun {
  size_t shard = 0;
  uint64_t end = 0;  // one past its last position
};

class StreamImpl final : public ShardStream {
 public:
  StreamImpl(std::string url, CacheOptions options, DatasetOpenOptions open_options,
             std::vector<ShardSpec> shards, std::unique_ptr<CacheDir> cd, uint64_t limit, int ahead)
      : url_(std::move(url)),
        options_(std::move(options)),
        open_options_(std::move(open_options)),
        shards_(std::move(shards)),
        cd_(std::move(cd)),
        limit_(limit),
        ahead_(ahead),
        owner_(::getpid()),
        slots_(shards_.size()) {
    open_options_.lazy_shards = false;
    open_options_.resolve_shard = nullptr;
    room_.held = [this] {
      std::lock_guard<std::mutex> lock(mu_);
      return stats_.held_bytes + releasing_;
    };
    room_.limit = limit_;
    for (const ShardSpec& s : shards_) {
      room_.entry_overhead = std::max(room_.entry_overhead, s.charge - s.listing.bytes);
    }
    for (const ShardSpec& s : shards_) begins_.push_back(s.range.begin);
    for (int i = 0; i < ahead_; ++i) threads_.emplace_back([this] { FetchLoop(); });
  }

  ~StreamImpl() override {
    if (::getpid() != owner_) {  // a forked child: the threads are the parent's
      for (std::thread& t : threads_) t.detach();
      return;
    }
    cancel_.Request();
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    for (std::thread& t : threads_) t.join();
    // The shards' datasets close before their leases go; the entries stay for the next run.
    for (Slot& s : slots_) s.ds.reset();
  }

  const format::ShardRange& range(size_t i) const { return shards_[i].range; }

  // The shard that holds dataset index `index`.
  size_t ShardOf(uint64_t index) const {
    const auto it = std::upper_bound(begins_.begin(), begins_.end(), index);
    return static_cast<size_t>(it - begins_.begin()) - 1;
  }

  // Blocks until shard i is cached (fetching it first when it is not), then holds it against
  // eviction until Unpin(i). The fetch's error when it fails (the next Pin tries again).
  Status Pin(size_t i, const Dataset** out) {
    if (Forked()) {
      return Status::Unsupported("the streamed dataset " + RedactUrl(url_) +
                                 " was opened in process " + std::to_string(owner_) +
                                 " and used after fork(); open it after forking");
    }
    std::unique_lock<std::mutex> lock(mu_);
    Slot& s = slots_[i];
    if (s.state == Slot::kCached) {
      ++stats_.hits;
      ++s.pins;
      *out = s.ds.get();
      return Status::OK();
    }
    const auto t0 = std::chrono::steady_clock::now();
    // The fetch this read waits for: the one in progress, else a new one (also after a failed
    // fetch ahead: it is tried again, now for this read).
    const uint64_t target = s.attempts + 1;
    s.wanted = std::max(s.wanted, target);
    ++s.waiters;
    cv_.notify_all();
    cv_.wait(lock, [&] { return stop_ || s.state == Slot::kCached || s.attempts >= target; });
    --s.waiters;
    ++stats_.waits;
    stats_.wait_seconds +=
        std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (s.state != Slot::kCached) {
      if (stop_) return CancelledError("streaming " + RedactUrl(url_));
      return s.error;  // that fetch's failure (the next read of the shard tries again)
    }
    ++s.pins;
    *out = s.ds.get();
    return Status::OK();
  }

  void Unpin(size_t i) {
    if (Forked()) return;  // Pin refused it there
    bool wake = false;
    {
      std::lock_guard<std::mutex> lock(mu_);
      wake = --slots_[i].pins == 0;
    }
    if (wake) cv_.notify_all();
  }

  // In a forked child, SetOrder, Advance, stats and Describe touch nothing of the parent's: mu_
  // may have been held by one of its threads at the fork (the child would wait forever), and the
  // fetch threads are not there.
  void SetOrder(const std::vector<uint64_t>& current, const std::vector<uint64_t>& next) override {
    if (Forked()) return;
    std::vector<UseRun> runs;
    uint64_t pos = 0;
    for (const std::vector<uint64_t>* order : {&current, &next}) {
      for (uint64_t index : *order) {
        ++pos;
        if (index >= info_count()) continue;
        const size_t shard = ShardOf(index);
        if (!runs.empty() && runs.back().shard == shard) {
          runs.back().end = pos;
        } else {
          runs.push_back(UseRun{shard, pos});
        }
      }
    }
    {
      std::lock_guard<std::mutex> lock(mu_);
      runs_ = std::move(runs);
      cursor_ = 0;
    }
    cv_.notify_all();
  }

  void Advance(uint64_t position) override {
    if (Forked()) return;
    bool moved = false;
    {
      std::lock_guard<std::mutex> lock(mu_);
      while (cursor_ < runs_.size() && runs_[cursor_].end <= position) {
        ++cursor_;
        moved = true;
      }
    }
    if (moved) cv_.notify_all();
  }

  StreamStats stats() const override {
    if (Forked()) return StreamStats();  // this process streamed nothing
    std::lock_guard<std::mutex> lock(mu_);
    return stats_;
  }

  std::string Describe() const override {
    if (Forked()) {
      return "streaming: opened in process " + std::to_string(owner_) +
             ", unusable after fork() (open the dataset after forking)";
    }
    std::lock_guard<std::mutex> lock(mu_);
    size_t cached = 0;
    for (const Slot& s : slots_) cached += s.state == Slot::kCached ? 1 : 0;
    return "streaming: " + std::to_string(cached) + " of " + std::to_string(slots_.size()) +
           " shards cached (" + FormatBytes(stats_.held_bytes) + " of the " + FormatBytes(limit_) +
           " limit), " + std::to_string(stats_.fetches) + " fetched (" +
           FormatBytes(stats_.fetched_bytes) + "), " + std::to_string(ahead_) + " ahead";
  }

  uint64_t info_count() const { return shards_.empty() ? 0 : shards_.back().range.end; }

 private:
  bool Forked() const { return ::getpid() != owner_; }

  struct Slot {
    enum State { kAbsent, kFetching, kCached } state = kAbsent;
    std::shared_ptr<const Dataset> ds;  // kCached: the shard opened from its entry
    std::unique_ptr<CacheLease> lease;  // kCached: the entry's lease
    int pins = 0;                       // reads in progress on ds
    int waiters = 0;                    // reads waiting for the shard
    uint64_t attempts = 0;              // fetches finished (either way)
    uint64_t wanted = 0;                // a read waits for fetch number `wanted` to finish
    Status error;                       // the last fetch's failure (OK after a success)
  };

  // For each shard, the first run at or after the cursor that reads it (kNever: none in the
  // order known). Guarded by mu_.
  std::vector<size_t> NextUseLocked() const {
    std::vector<size_t> next(slots_.size(), kNever);
    size_t left = slots_.size();
    for (size_t r = cursor_; r < runs_.size() && left > 0; ++r) {
      if (next[runs_[r].shard] == kNever) {
        next[runs_[r].shard] = r;
        --left;
      }
    }
    return next;
  }

  // What the directory may hold now: the shards cached, being fetched and being deleted, less
  // the picks whose fetch has not begun (each first deletes what it evicted). Guarded by mu_.
  void NotePeakLocked() {
    stats_.peak_held_bytes =
        std::max(stats_.peak_held_bytes, stats_.held_bytes + releasing_ - unstarted_);
  }

  // A shard released under mu_, its files deleted after mu_ is released (ReleaseEvicted).
  struct Evicted {
    size_t shard = 0;
    std::shared_ptr<const Dataset> ds;
    std::unique_ptr<CacheLease> lease;
  };

  // The shard to fetch now, with room made for it (releasing into *evicted the cached shards
  // whose next use is furthest away, to be deleted by ReleaseEvicted without mu_), or kNever. A
  // read waiting for a shard comes first; then the next shards of the order, the one being read and
  // ahead_ more. A shard fetched ahead never evicts one used before it. Guarded by mu_.
  size_t PickLocked(std::vector<Evicted>* evicted) {
    const std::vector<size_t> next = NextUseLocked();
    size_t pick = kNever;
    bool urgent = false;
    for (size_t i = 0; i < slots_.size() && pick == kNever; ++i) {
      if (slots_[i].state == Slot::kAbsent && slots_[i].wanted > slots_[i].attempts) {
        pick = i;
        urgent = true;
      }
    }
    if (pick == kNever) {
      size_t distinct = 0;
      std::vector<bool> seen(slots_.size(), false);
      for (size_t r = cursor_; r < runs_.size() && distinct <= static_cast<size_t>(ahead_); ++r) {
        const size_t i = runs_[r].shard;
        if (seen[i]) continue;
        seen[i] = true;
        ++distinct;
        if (slots_[i].state == Slot::kAbsent && slots_[i].error.ok()) {
          pick = i;
          break;
        }
      }
    }
    if (pick == kNever) return kNever;
    // The shards this pick evicts are deleted by this thread before its fetch begins, so their
    // bytes are room for it; until deleted they count (releasing_) for every other pick.
    const uint64_t need = shards_[pick].charge;
    uint64_t freed = 0;
    while (stats_.held_bytes + releasing_ + need > limit_ + freed) {
      size_t victim = kNever;
      for (size_t i = 0; i < slots_.size(); ++i) {
        const Slot& s = slots_[i];
        if (s.state != Slot::kCached || s.pins > 0 || s.waiters > 0) continue;
        if (!urgent && next[i] <= next[pick]) continue;  // needed before the pick
        if (victim == kNever || next[i] > next[victim] || (next[i] == next[victim] && i > victim)) {
          victim = i;
        }
      }
      if (victim == kNever) return kNever;  // wait: a read unpins, or the reader moves on
      freed += shards_[victim].charge;
      EvictLocked(victim, evicted);
    }
    Slot& s = slots_[pick];
    s.state = Slot::kFetching;
    stats_.held_bytes += need;
    unstarted_ += need;
    NotePeakLocked();
    return pick;
  }

  // Releases shard i: absent from here, its dataset and lease moved to *evicted. Guarded by mu_.
  void EvictLocked(size_t i, std::vector<Evicted>* evicted) {
    Slot& s = slots_[i];
    evicted->push_back(Evicted{i, std::move(s.ds), std::move(s.lease)});
    s.state = Slot::kAbsent;
    stats_.held_bytes -= shards_[i].charge;
    releasing_ += shards_[i].charge;
    ++stats_.evictions;
  }

  // Without mu_ (the readers and the other fetch threads go on meanwhile, and a fork cannot find
  // it held by a deletion): closes each released shard, drops its lease and takes its entry out
  // of the cache unless another process reads it. A fetch of the same shard meanwhile waits for
  // the entry's lock, as another process's would.
  void ReleaseEvicted(std::vector<Evicted>* evicted) {
    for (Evicted& e : *evicted) {
      e.ds.reset();
      e.lease.reset();
      bool gone = false;
      std::lock_guard<std::mutex> evicting(evict_mu_);
      Status st = TryEvict(*cd_, shards_[e.shard].entry, "streaming: furthest next use", &gone);
      if (!st.ok()) {
        Log(LogLevel::kWarn, "dspipe stream: " + RedactUrl(url_) + ": releasing " +
                                 shards_[e.shard].range.name + ": " + st.ToString());
      }
      {
        std::lock_guard<std::mutex> lock(mu_);
        releasing_ -= shards_[e.shard].charge;
        NotePeakLocked();
      }
      cv_.notify_all();
    }
    evicted->clear();
  }

  // Fetches (or finds) shard i's entry and opens it.
  Status Fetch(size_t i, std::shared_ptr<const Dataset>* ds, std::unique_ptr<CacheLease>* lease,
               CacheResult* r) {
    const ShardSpec& spec = shards_[i];
    AcquireArgs args;
    args.prelisted = &spec.listing;
    args.cancel = &cancel_;
    args.stream = &room_;
    DSPIPE_RETURN_IF_ERROR(AcquireImpl(spec.listing.url, options_, args, r, lease));
    if (!r->cached) return UrlNotCachedError(spec.listing.url, *r);
    std::unique_ptr<Dataset> opened;
    Status s = Dataset::Open(r->path, open_options_, &opened);
    if (!s.ok()) return s.WithContext("streaming: opening the fetched shard " + spec.range.name);
    if (opened->size() != spec.range.end - spec.range.begin) {
      return Status::Corruption("streaming: shard " + spec.range.name + " of " + RedactUrl(url_) +
                                " holds " + std::to_string(opened->size()) +
                                " records, the dataset's manifest says " +
                                std::to_string(spec.range.end - spec.range.begin));
    }
    *ds = std::move(opened);
    return Status::OK();
  }

  // Normal priority (unlike the local background copy): the reader waits on these fetches, and
  // they mostly wait on the network.
  void FetchLoop() {
    std::unique_lock<std::mutex> lock(mu_);
    std::vector<Evicted> evicted;
    for (;;) {
      size_t i = kNever;
      cv_.wait(lock, [&] { return stop_ || (i = PickLocked(&evicted)) != kNever; });
      if (stop_) {
        if (i != kNever) {
          slots_[i].state = Slot::kAbsent;
          stats_.held_bytes -= shards_[i].charge;
          unstarted_ -= shards_[i].charge;
        }
        lock.unlock();
        ReleaseEvicted(&evicted);
        return;
      }
      lock.unlock();
      ReleaseEvicted(&evicted);  // before the fetch writes a byte
      lock.lock();
      unstarted_ -= shards_[i].charge;
      NotePeakLocked();
      lock.unlock();
      std::shared_ptr<const Dataset> ds;
      std::unique_ptr<CacheLease> lease;
      CacheResult r;
      Status s = Fetch(i, &ds, &lease, &r);
      if (!s.ok() && !IsCancelled(s)) {
        s = s.WithContext("streaming shard " + shards_[i].range.name + " of " + RedactUrl(url_));
      }
      lock.lock();
      Slot& slot = slots_[i];
      ++slot.attempts;
      if (s.ok()) {
        slot.ds = std::move(ds);
        slot.lease = std::move(lease);
        slot.state = Slot::kCached;
        slot.error = Status::OK();
        if (r.copied) {
          ++stats_.fetches;
          stats_.fetched_bytes += r.bytes;
        } else {
          ++stats_.found;
        }
      } else {
        slot.state = Slot::kAbsent;
        slot.error = s;
        stats_.held_bytes -= shards_[i].charge;
      }
      const bool warn = !s.ok() && !IsCancelled(s) && slot.waiters == 0;
      cv_.notify_all();
      if (warn) {  // without mu_: a log sink may take its time
        lock.unlock();
        Log(LogLevel::kWarn, "dspipe stream: " + s.ToString() + " (tried again when read)");
        lock.lock();
      }
    }
  }

  const std::string url_;
  const CacheOptions options_;
  DatasetOpenOptions open_options_;
  const std::vector<ShardSpec> shards_;
  std::vector<uint64_t> begins_;
  std::mutex evict_mu_;                 // one eviction at a time through cd_ (never under mu_)
  const std::unique_ptr<CacheDir> cd_;  // guarded by evict_mu_
  const uint64_t limit_;
  const int ahead_;
  const pid_t owner_;
  CancelToken cancel_;

  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::vector<Slot> slots_;   // guarded by mu_
  std::vector<UseRun> runs_;  // guarded by mu_
  size_t cursor_ = 0;         // guarded by mu_: the first run not read to its end
  bool stop_ = false;         // guarded by mu_
  StreamStats stats_;         // guarded by mu_; held_bytes: cached + being fetched, charged
  uint64_t releasing_ = 0;    // guarded by mu_: evicted shards' charges until their files go
  uint64_t unstarted_ = 0;    // guarded by mu_: picked shards' charges until their fetch begins
  StreamRoom room_;           // the room check of this stream's fetches (budget.h)
  std::vector<std::thread> threads_;
};

// The dataset a stream reads: every Read pins its record's shard (waiting for its fetch).
class StreamingDataset final : public Dataset {
 public:
  StreamingDataset(DatasetInfo info, std::shared_ptr<StreamImpl> stream)
      : info_(std::move(info)), stream_(std::move(stream)) {}

  const DatasetInfo& info() const override { return info_; }

  Status Read(uint64_t index, const std::function<Status(const RecordView&)>& fn) const override {
    if (index >= info_.count) {
      return Status::InvalidArgument("index " + std::to_string(index) + " out of range (" +
                                     std::to_string(info_.count) + " records in " + info_.path +
                                     ")");
    }
    const size_t shard = stream_->ShardOf(index);
    const Dataset* ds = nullptr;
    DSPIPE_RETURN_IF_ERROR(stream_->Pin(shard, &ds).WithContext("key " + KeyName(index)));
    Status s = ds->Read(index - stream_->range(shard).begin, fn);
    stream_->Unpin(shard);
    return s;
  }

  Status ReadRecordTableEntry(std::string_view table, uint64_t index, std::string* value,
                              bool* found) const override {
    value->clear();
    *found = false;
    if (index >= info_.count) return Status::OK();
    const size_t shard = stream_->ShardOf(index);
    const Dataset* ds = nullptr;
    DSPIPE_RETURN_IF_ERROR(stream_->Pin(shard, &ds).WithContext("key " + KeyName(index)));
    Status s = ds->ReadRecordTableEntry(table, index - stream_->range(shard).begin, value, found);
    stream_->Unpin(shard);
    return s;
  }

  std::string KeyName(uint64_t index) const override {
    if (index >= info_.count) return dspipe::KeyName(index);
    const format::ShardRange& r = stream_->range(stream_->ShardOf(index));
    return dspipe::KeyName(index - r.begin + r.key_begin);
  }

 private:
  const DatasetInfo info_;
  const std::shared_ptr<StreamImpl> stream_;
};

}  // namespace

bool IsShardedManifest(const SourceListing& listing) {
  DatasetInfo info;
  std::vector<format::ShardRange> ranges;
  return format::ParseManifest(listing.manifest, "manifest.json", &info, &ranges).ok() &&
         !ranges.empty() && !ranges[0].name.empty();
}

Status OpenStream(const SourceListing& listing, const DatasetOpenOptions& open_options,
                  const CacheOptions& cache_options, int ahead, std::shared_ptr<const Dataset>* out,
                  CacheResult* result) {
  const std::string& url = listing.url;
  const std::string shown = RedactUrl(url);
  const std::string shown_manifest = RedactUrl(UrlAppendPath(url, format::kTopManifestFile));
  if (ahead < 1) {
    return Status::InvalidArgument("streaming " + shown + ": shards ahead must be >= 1, got " +
                                   std::to_string(ahead));
  }
  DatasetInfo info;
  std::vector<format::ShardRange> ranges;
  DSPIPE_RETURN_IF_ERROR(format::ParseManifest(listing.manifest, shown_manifest, &info, &ranges));
  std::vector<format::ManifestFile> files;
  bool present = false;
  DSPIPE_RETURN_IF_ERROR(
      format::ParseManifestFiles(listing.manifest, shown_manifest, &files, &present));

  // The cache: "off" means "auto" for a URL, as for a whole fetch.
  CacheOptions co = cache_options;
  if (co.mode == "off" || co.mode.empty()) co.mode = "auto";
  std::string why;
  const std::string root = CacheRoot(co.mode, &why);
  CacheResult none;
  none.reason = why;
  if (root.empty()) return UrlNotCachedError(url, none);
  Env* env = co.env ? co.env : Env::Default();
  std::unique_ptr<CacheDir> cd;
  std::string untrusted;
  DSPIPE_RETURN_IF_ERROR(CacheDir::Open(root, env, &cd, &untrusted)
                             .WithContext("cache: making the cache dir " + root));
  if (!untrusted.empty()) {
    none.reason = "the cache dir is not used: " + untrusted;
    return UrlNotCachedError(url, none);
  }

  // Each shard: its files from the dataset's manifest, one entry of the cache.
  // The files by shard in one pass (the list and the shards may both be long): a file
  // "NAME/rest" belongs to shard NAME.
  std::map<std::string_view, std::vector<const format::ManifestFile*>> by_shard;
  for (const format::ShardRange& range : ranges) by_shard[range.name];
  for (const format::ManifestFile& f : files) {
    const size_t slash = f.path.find('/');
    if (slash == std::string::npos) continue;
    const auto it = by_shard.find(std::string_view(f.path).substr(0, slash));
    if (it != by_shard.end()) it->second.push_back(&f);
  }
  std::vector<ShardSpec> shards;
  uint64_t largest = 0, total = 0;
  for (const format::ShardRange& range : ranges) {
    ShardSpec spec;
    spec.range = range;
    SourceListing& l = spec.listing;
    l.url = UrlAppendPath(url, range.name);
    l.source = core::StripTrailingSlashes(UrlIdentity(l.url));
    l.manifest_sha256 = listing.manifest_sha256;  // a rebuilt dataset's shards: new entries
    l.fetch_files = true;
    l.is_dir = true;
    l.info = info;
    for (const format::ManifestFile* f : by_shard[range.name]) {
      SourceFile sf;
      sf.rel = f->path.substr(range.name.size() + 1);
      sf.size = f->size;
      sf.sha256 = f->sha256;
      l.bytes += f->size;
      for (std::string d = sf.rel; d.find('/') != std::string::npos;) {
        d = d.substr(0, d.rfind('/'));
        l.dirs.push_back(d);
      }
      l.files.push_back(std::move(sf));
    }
    if (l.files.empty()) {
      return Status::Corruption(shown_manifest + ": the manifest lists no file of shard " +
                                range.name + ", so it cannot be streamed; rebuild the dataset");
    }
    std::sort(l.dirs.begin(), l.dirs.end());
    l.dirs.erase(std::unique(l.dirs.begin(), l.dirs.end()), l.dirs.end());
    std::sort(l.files.begin(), l.files.end(),
              [](const SourceFile& a, const SourceFile& b) { return a.rel < b.rel; });
    spec.entry = EntryName(l);
    spec.charge = l.bytes + EntryOverhead(l, spec.entry, open_options.max_readers);
    largest = std::max(largest, spec.charge);
    total += spec.charge;
    shards.push_back(std::move(spec));
  }

  // The bound on the shards held at once: cache_limit, else what the budget leaves (plus what
  // this dataset's shards already hold), and never more than the dataset.
  uint64_t limit = co.cache_limit;
  std::string limit_what = "cache_limit (" + FormatBytes(limit) + ")";
  if (limit == 0) {
    Budget budget;
    DSPIPE_RETURN_IF_ERROR(ComputeBudget(*cd, co, &budget));
    std::vector<EntryUse> entries;
    DSPIPE_RETURN_IF_ERROR(ListEntries(*cd, "", &entries));
    std::set<std::string_view> names;
    for (const ShardSpec& s : shards) names.insert(s.entry);
    uint64_t ours = 0;
    for (const EntryUse& e : entries) ours += names.count(e.name) != 0 ? e.bytes : 0;
    limit = budget.bytes + ours;
    limit_what = "the cache's budget (" + FormatBytes(limit) + ": " + budget.text + ")";
  }
  const uint64_t minimum = static_cast<uint64_t>(ahead + 1) * largest;
  if (limit < std::min(minimum, total)) {
    return Status::InvalidArgument(
        "streaming " + shown + ": the cache must hold " + std::to_string(ahead) +
        (ahead == 1 ? " shard" : " shards") + " fetched ahead plus the one being read, at least " +
        FormatBytes(minimum) + " (the largest shard is " + FormatBytes(largest) +
        " with its LMDB lock file and records), but " + limit_what + " is less: raise " +
        Opt("LoaderOptions::cache_limit") + " to at least " + std::to_string(minimum) +
        " bytes, or free room in the cache");
  }
  limit = std::min(limit, total);

  info.kind = DatasetKind::kSharded;
  info.path = shown;
  info.shard_sizes.clear();
  for (const format::ShardRange& r : ranges) info.shard_sizes.push_back(r.end - r.begin);
  const size_t n = shards.size();
  auto stream = std::make_shared<StreamImpl>(url, co, open_options, std::move(shards),
                                             std::move(cd), limit, ahead);
  CacheState state;
  state.stream = stream;
  *out = std::make_shared<CachedDataset>(std::make_shared<StreamingDataset>(info, stream),
                                         std::move(state));
  if (result) {
    *result = CacheResult();
    result->path = shown;
    result->bytes = total;
    result->reason = "streamed shard by shard (" + std::to_string(n) + " shards, at most " +
                     FormatBytes(limit) + " cached at once, " + std::to_string(ahead) + " ahead)";
  }
  Log(LogLevel::kInfo, "dspipe cache: " + shown + ": " +
                           (result ? result->reason : std::string("streamed shard by shard")));
  return Status::OK();
}

}  // namespace dspipe::cache
