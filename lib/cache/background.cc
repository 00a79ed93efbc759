// SPDX-License-Identifier: Apache-2.0
// The copies made while the dataset is read in place: OpenMode::overlap (BackgroundCopy)
// and OpenMode::per_shard (ShardCacheImpl), and OpenDatasetCached, which picks between
// them (see dspipe/cache.h).
//
// Fork safety: a child made by fork() has none of these threads. Every object remembers the
// process that made it; in any other process (a forked DataLoader worker) it never waits for
// its thread, never touches a mutex the thread may have held at the fork, and reads in place:
// state() is kInPlace, Wait() returns at once, Want() asks for nothing, a shard not resolved
// to an entry before the fork is read in place, and the destructor leaks what the thread owns
// instead of joining a thread that does not exist there. (The exclusive locks the thread held
// are closed in the child by core's atfork handler.)
#include <pthread.h>
#include <sched.h>
#include <sys/resource.h>
#include <unistd.h>

#include <condition_variable>
#include <cstdlib>
#include <deque>
#include <map>
#include <mutex>
#include <set>
#include <thread>

#include "cache/acquire.h"
#include "cache/cached_dataset.h"
#include "cache/stream.h"
#include "core/files.h"
#include "dspipe/fetch.h"
#include "dspipe/log.h"
#include "format/manifest.h"

namespace dspipe {
namespace {

// Below the decode workers: the background copy takes what they leave. nice +10 (per thread on
// Linux) by default; DSPIPE_CACHE_COPY_SCHED=normal|idle (SCHED_IDLE) is for the bench
// (bench/cache/cache_bench.sh --sched) to compare. Lowering one's own priority needs no
// privilege, and a refusal changes nothing.
void LowerCopyPriority() {
  const char* v = std::getenv("DSPIPE_CACHE_COPY_SCHED");
  const std::string how = v ? v : "nice";
  if (how == "normal") return;
  if (how == "idle") {
    sched_param p{};
    p.sched_priority = 0;
    (void)::pthread_setschedparam(::pthread_self(), SCHED_IDLE, &p);
    return;
  }
  (void)::setpriority(PRIO_PROCESS, static_cast<id_t>(::gettid()), 10);
}

constexpr const char* kForkedReason =
    "a process forked from the one copying does not share its copy (it reads in place)";

// OpenMode::overlap: AcquireImpl + opening the copy, on a thread of its own.
class BackgroundCopy final : public cache::CacheCopy {
 public:
  BackgroundCopy(std::string source, CacheOptions options, cache::SourceListing listing,
                 DatasetOpenOptions open_options)
      : source_(std::move(source)),
        options_(std::move(options)),
        listing_(std::move(listing)),
        open_options_(std::move(open_options)),
        owner_(::getpid()),
        st_(std::make_unique<Shared>()) {
    st_->result.path = source_;
    st_->result.bytes = listing_.bytes;
    st_->result.reason = "copying into the cache in the background";
  }
  void Start() {
    st_->thread = std::thread([this] { Run(); });
  }
  ~BackgroundCopy() override {
    if (Forked()) {
      (void)st_.release();  // the thread, its mutex and condition are the parent's: leaked
      return;
    }
    st_->cancel.Request();
    if (st_->thread.joinable()) st_->thread.join();
  }

  State state() const override {
    if (Forked()) return State::kInPlace;
    std::lock_guard<std::mutex> lock(st_->mu);
    return st_->state;
  }
  std::shared_ptr<const Dataset> cached() const override {
    if (Forked()) return nullptr;
    std::lock_guard<std::mutex> lock(st_->mu);
    return st_->cached;
  }
  CacheResult result() const override {
    if (Forked()) return ForkedResult();
    std::lock_guard<std::mutex> lock(st_->mu);
    return st_->result;
  }
  State Wait() const override {
    if (Forked()) return State::kInPlace;
    std::unique_lock<std::mutex> lock(st_->mu);
    st_->cv.wait(lock, [this] { return st_->state != State::kCopying; });
    return st_->state;
  }

 private:
  // What the copying thread shares with the callers (all of it leaked in a forked child).
  struct Shared {
    cache::CancelToken cancel;
    std::mutex mu;
    std::condition_variable cv;
    State state = State::kCopying;          // guarded by mu
    CacheResult result;                     // guarded by mu
    std::shared_ptr<const Dataset> cached;  // guarded by mu
    std::thread thread;
  };

  bool Forked() const { return ::getpid() != owner_; }
  CacheResult ForkedResult() const {
    CacheResult r;
    r.path = source_;
    r.bytes = listing_.bytes;
    r.reason = kForkedReason;
    return r;
  }

  void Run() {
    LowerCopyPriority();
    CacheResult r;
    std::unique_ptr<CacheLease> lease;
    std::shared_ptr<const Dataset> ds;
    cache::AcquireArgs args;
    args.prelisted = &listing_;
    args.cancel = &st_->cancel;
    Status s = cache::AcquireImpl(source_, options_, args, &r, &lease);
    if (s.ok() && r.cached) s = cache::OpenCopy(source_, r, open_options_, std::move(lease), &ds);
    if (!s.ok()) {
      const bool cancelled = cache::IsCancelled(s);
      r = CacheResult();
      r.path = source_;
      r.bytes = listing_.bytes;
      r.reason = cancelled ? "the copy was cancelled" : "the copy failed: " + s.ToString();
      // The loader goes on in place; this line is all the cache says about it.
      if (!cancelled) {
        Log(LogLevel::kWarn, "dspipe cache: " + RedactUrl(source_) + ": in place: " + r.reason);
      }
    }
    {
      std::lock_guard<std::mutex> lock(st_->mu);
      st_->result = std::move(r);
      st_->cached = std::move(ds);
      st_->state = st_->cached ? State::kCached : State::kInPlace;
    }
    st_->cv.notify_all();
  }

  const std::string source_;
  const CacheOptions options_;
  const cache::SourceListing listing_;
  const DatasetOpenOptions open_options_;
  const pid_t owner_;
  std::unique_ptr<Shared> st_;
};

// OpenMode::per_shard: one entry per shard directory, made on demand on one thread.
class ShardCacheImpl final : public cache::ShardCache,
                             public std::enable_shared_from_this<ShardCacheImpl> {
 public:
  // `resolved`: shard path -> its entry's copy, read by the datasets' resolve_shard.
  struct Map {
    std::mutex mu;
    std::map<std::string, std::string> copies;
  };

  ShardCacheImpl(std::string source, CacheOptions options, DatasetOpenOptions open_options,
                 std::vector<std::string> shard_paths)
      : source_(std::move(source)),
        options_(std::move(options)),
        open_options_(std::move(open_options)),
        shard_paths_(std::move(shard_paths)),
        owner_(::getpid()),
        map_(std::make_shared<Map>()),
        st_(std::make_unique<Shared>()) {
    open_options_.lazy_shards = true;
    open_options_.resolve_shard = [map = map_, owner = owner_](const std::string& path) {
      if (::getpid() != owner) return path;  // a forked child: in place (see the top)
      std::lock_guard<std::mutex> lock(map->mu);
      auto it = map->copies.find(path);
      return it == map->copies.end() ? path : it->second;
    };
  }
  ~ShardCacheImpl() override {
    if (Forked()) {
      (void)st_.release();  // the thread, its mutex and condition are the parent's: leaked
      return;
    }
    st_->cancel.Request();
    {
      std::lock_guard<std::mutex> lock(st_->mu);
      st_->stop = true;
    }
    st_->cv.notify_all();
    if (st_->thread.joinable()) st_->thread.join();
  }

  const DatasetOpenOptions& open_options() const { return open_options_; }

  void Want(const std::vector<uint64_t>& shards) override {
    if (Forked()) return;
    for (uint64_t i : shards) {
      if (i >= shard_paths_.size()) continue;
      {
        std::lock_guard<std::mutex> lock(st_->mu);
        if (!st_->asked.insert(i).second) continue;
      }
      // An entry that is there and complete now is taken at once (so the shard's first read
      // opens it), without waiting for any lock and never copying on this (the training)
      // thread: anything else goes to the background thread.
      cache::SourceListing listing;
      if (cache::ListSource(shard_paths_[i], &listing).ok() && Take(i, &listing, true)) continue;
      std::lock_guard<std::mutex> lock(st_->mu);
      st_->queue.push_back(i);
      if (!st_->thread.joinable()) st_->thread = std::thread([this] { Run(); });
    }
    st_->cv.notify_all();
  }
  void Wait() const override {
    if (Forked()) return;
    std::unique_lock<std::mutex> lock(st_->mu);
    st_->cv.wait(lock, [this] { return st_->queue.empty() && !st_->busy; });
  }
  size_t cached_count() const override {
    if (Forked()) return 0;
    std::lock_guard<std::mutex> lock(st_->mu);
    return st_->leases.size();
  }
  Status Reopen(std::shared_ptr<const Dataset>* out) const override;
  std::string Describe() const override {
    if (Forked()) return kForkedReason;
    std::lock_guard<std::mutex> lock(st_->mu);
    return std::to_string(st_->leases.size()) + " of " + std::to_string(shard_paths_.size()) +
           " shards cached (" + std::to_string(st_->asked.size()) + " asked for)";
  }

 private:
  struct Shared {
    cache::CancelToken cancel;
    mutable std::mutex mu;
    std::condition_variable cv;
    std::set<uint64_t> asked;                         // guarded by mu
    std::deque<uint64_t> queue;                       // guarded by mu
    bool busy = false, stop = false;                  // guarded by mu
    std::vector<std::unique_ptr<CacheLease>> leases;  // guarded by mu
    std::thread thread;
  };

  bool Forked() const { return ::getpid() != owner_; }

  // Acquires shard i's entry (copying it when missing, unless existing_only) and records it;
  // errors are logged. True when the shard is cached now.
  bool Take(uint64_t i, const cache::SourceListing* listing, bool existing_only) {
    const std::string& path = shard_paths_[i];
    CacheResult r;
    std::unique_ptr<CacheLease> lease;
    cache::AcquireArgs args;
    args.prelisted = listing;
    args.cancel = &st_->cancel;
    args.existing_only = existing_only;
    Status s = cache::AcquireImpl(path, options_, args, &r, &lease);
    if (!s.ok()) {
      if (!cache::IsCancelled(s) && !existing_only) {
        Log(LogLevel::kWarn,
            "dspipe cache: " + path + ": in place: the copy failed: " + s.ToString());
      }
      return false;
    }
    if (!r.cached) return false;  // AcquireImpl logged why (or, existing_only, nothing to say)
    {
      std::lock_guard<std::mutex> lock(map_->mu);
      map_->copies[path] = r.path;
    }
    std::lock_guard<std::mutex> lock(st_->mu);
    st_->leases.push_back(std::move(lease));
    return true;
  }

  void Run() {
    LowerCopyPriority();
    std::unique_lock<std::mutex> lock(st_->mu);
    for (;;) {
      st_->cv.wait(lock, [this] { return st_->stop || !st_->queue.empty(); });
      if (st_->stop) return;
      const uint64_t i = st_->queue.front();
      st_->queue.pop_front();
      st_->busy = true;
      lock.unlock();
      Take(i, nullptr, false);
      lock.lock();
      st_->busy = false;
      st_->cv.notify_all();
    }
  }

  const std::string source_;
  const CacheOptions options_;
  DatasetOpenOptions open_options_;
  const std::vector<std::string> shard_paths_;
  const pid_t owner_;
  const std::shared_ptr<Map> map_;
  std::unique_ptr<Shared> st_;
};

Status ShardCacheImpl::Reopen(std::shared_ptr<const Dataset>* out) const {
  std::unique_ptr<Dataset> ds;
  DSPIPE_RETURN_IF_ERROR(Dataset::Open(source_, open_options_, &ds));
  // A dataset reading through the ShardCache owns it (the Loader finds it: CacheStateOf).
  cache::CacheState state;
  state.shards = std::const_pointer_cast<ShardCacheImpl>(shared_from_this());
  *out = std::make_shared<cache::CachedDataset>(std::shared_ptr<const Dataset>(std::move(ds)),
                                                std::move(state));
  return Status::OK();
}

}  // namespace

Status OpenDatasetCached(const std::string& path, const DatasetOpenOptions& open_options,
                         CacheOptions cache_options,
                         const std::function<uint64_t(const DatasetInfo&)>& pipeline_bytes,
                         std::shared_ptr<const Dataset>* out, CacheResult* result) {
  return cache::OpenDatasetCached(path, open_options, std::move(cache_options), cache::OpenMode{},
                                  pipeline_bytes, out, result);
}

namespace cache {

Status OpenDatasetCached(const std::string& path, const DatasetOpenOptions& open_options,
                         CacheOptions cache_options, const OpenMode& mode,
                         const std::function<uint64_t(const DatasetInfo&)>& pipeline_bytes,
                         std::shared_ptr<const Dataset>* out, CacheResult* result) {
  if (IsRemoteUrl(path)) {
    // Nothing to open in place: the served manifest sizes the pipeline, the copy is opened.
    Env* env = cache_options.env ? cache_options.env : Env::Default();
    cache::SourceListing listing;
    DSPIPE_RETURN_IF_ERROR(cache::ListUrlSource(path, env, &listing));
    if (pipeline_bytes) cache_options.reserved_ram += pipeline_bytes(listing.info);
    const bool sharded = cache::IsShardedManifest(listing);
    if (mode.stream && sharded) {
      return cache::OpenStream(listing, open_options, cache_options, mode.stream_ahead, out,
                               result);
    }
    CacheResult r;
    std::unique_ptr<CacheLease> lease;
    cache::AcquireArgs args;
    args.prelisted = &listing;
    DSPIPE_RETURN_IF_ERROR(cache::AcquireImpl(path, cache_options, args, &r, &lease));
    if (!r.cached) {
      Status e = cache::UrlNotCachedError(path, r);
      if (!sharded) return e;
      // The global order reads any record at any time, so it needs the whole dataset here.
      return Status::Unsupported(
          e.message() + "; or read it with " + Opt("SamplerOptions::order") +
          " \"shards\" or \"blocks\" (block_size = the shard size), which stream its shards "
          "through the cache a few at a time (docs/STORAGE.md \"Streaming\"): the global order "
          "reads any "
          "record at any time, so it needs the whole dataset cached");
    }
    DSPIPE_RETURN_IF_ERROR(cache::OpenCopy(path, r, open_options, std::move(lease), out));
    if (result) *result = std::move(r);
    return Status::OK();
  }
  std::unique_ptr<Dataset> ds;
  DSPIPE_RETURN_IF_ERROR(Dataset::Open(path, open_options, &ds));
  CacheResult r;
  if (cache_options.mode == "off") {
    r.path = path;
    r.reason = "cache off";
    *out = std::shared_ptr<const Dataset>(std::move(ds));
    if (result) *result = std::move(r);
    return Status::OK();
  }
  if (pipeline_bytes) cache_options.reserved_ram += pipeline_bytes(ds->info());
  // A plain LMDB's masks LMDB is cached with it, in the same entry.
  cache_options.masks = ds->info().kind == DatasetKind::kPlain ? open_options.plain.masks : "";
  if (mode.per_shard && open_options.lazy_shards && ds->info().kind == DatasetKind::kSharded &&
      !CacheRoot(cache_options.mode).empty()) {
    // One entry per shard, asked for by the reader (ShardCache::Want); nothing copied yet.
    std::string text;
    DatasetInfo info;
    std::vector<format::ShardRange> ranges;
    const std::string manifest = path + "/" + format::kTopManifestFile;
    DSPIPE_RETURN_IF_ERROR(core::ReadFile(manifest, &text));
    DSPIPE_RETURN_IF_ERROR(format::ParseManifest(text, manifest, &info, &ranges));
    std::vector<std::string> shard_paths;
    for (const format::ShardRange& range : ranges) shard_paths.push_back(path + "/" + range.name);
    auto sc =
        std::make_shared<ShardCacheImpl>(path, cache_options, open_options, std::move(shard_paths));
    DSPIPE_RETURN_IF_ERROR(sc->Reopen(out));
    r.path = path;
    r.reason = "one cache entry per shard, made as the shards are asked for";
    if (result) *result = std::move(r);
    return Status::OK();
  }
  cache::SourceListing listing;
  bool listed = false;
  const std::string root = CacheRoot(cache_options.mode);
  if (mode.overlap && !root.empty()) {
    DSPIPE_RETURN_IF_ERROR(cache::ListLocalSource(path, cache_options, &listing));
    listed = true;
    Env* env = cache_options.env ? cache_options.env : Env::Default();
    const bool over_limit =
        cache_options.cache_limit > 0 && listing.bytes > cache_options.cache_limit;
    // A hint only (the copy's thread decides under the entry's lock): an entry that is there is
    // opened now, below, as without overlap.
    const bool present = env->FileExists(cache::OwnDirPath(root) + "/" + cache::EntryName(listing));
    if (listing.not_cacheable.empty() && !over_limit && !present) {
      // Not in the cache yet: read in place now, copy meanwhile (decided and logged there).
      auto copy =
          std::make_shared<BackgroundCopy>(path, cache_options, std::move(listing), open_options);
      r = copy->result();
      copy->Start();
      // The in-place dataset carries the copy (the Loader finds it: CacheStateOf).
      cache::CacheState state;
      state.copy = std::move(copy);
      *out = std::make_shared<cache::CachedDataset>(std::shared_ptr<const Dataset>(std::move(ds)),
                                                    std::move(state));
      if (result) *result = std::move(r);
      return Status::OK();
    }
  }
  std::unique_ptr<CacheLease> lease;
  cache::AcquireArgs args;
  args.prelisted = listed ? &listing : nullptr;
  DSPIPE_RETURN_IF_ERROR(cache::AcquireImpl(path, cache_options, args, &r, &lease));
  if (r.cached) {
    DSPIPE_RETURN_IF_ERROR(cache::OpenCopy(path, r, open_options, std::move(lease), out));
  } else {
    *out = std::shared_ptr<const Dataset>(std::move(ds));
  }
  if (result) *result = std::move(r);
  return Status::OK();
}

}  // namespace cache
}  // namespace dspipe
