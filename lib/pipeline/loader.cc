#include "dspipe/loader.h"

#include <oneapi/tbb/global_control.h>
#include <oneapi/tbb/info.h>
#include <oneapi/tbb/task_arena.h>
#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <charconv>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <mutex>
#include <set>
#include <string>
#include <utility>

#include "codec/image.h"
#include "core/checksum.h"
#include "dspipe/cuda.h"
#include "dspipe/option_fields.h"
#include "pipeline/batch_pool.h"
#include "pipeline/sample.h"

namespace dspipe {

int UsableCpus() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof(set), &set) == 0) return std::max(1, CPU_COUNT(&set));
  return 1;
}

namespace {

using internal::BatchBuffer;
using internal::BatchPool;

// oneTBB starts cores - 1 worker threads unless a global_control allows more, and with several
// global_controls alive the smallest max_allowed_parallelism wins. So all loaders of a process
// share one control set to the largest value any of them needs (threads + 1 for the caller).
class ParallelismLease {
 public:
  explicit ParallelismLease(size_t want) : want_(want) {
    std::lock_guard<std::mutex> lock(Mu());
    Wants().insert(want_);
    Update();
  }
  ~ParallelismLease() {
    if (abandoned_) return;
    std::lock_guard<std::mutex> lock(Mu());
    Wants().erase(Wants().find(want_));
    Update();
  }
  ParallelismLease(const ParallelismLease&) = delete;
  ParallelismLease& operator=(const ParallelismLease&) = delete;
  // After fork: the registry may be mid-update in another (lost) thread; leave it alone.
  void Abandon() { abandoned_ = true; }

 private:
  static std::mutex& Mu() {
    static std::mutex mu;
    return mu;
  }
  static std::multiset<size_t>& Wants() {
    static std::multiset<size_t> wants;
    return wants;
  }
  static std::unique_ptr<tbb::global_control>& Control() {
    static std::unique_ptr<tbb::global_control> control;
    return control;
  }
  static void Update() {  // REQUIRES: Mu() held
    const size_t want = Wants().empty() ? 0 : *Wants().rbegin();
    auto& control = Control();
    const size_t have =
        control ? tbb::global_control::active_value(tbb::global_control::max_allowed_parallelism)
                : 0;
    if (control && have == want) return;
    control.reset();  // first: a second live control would cap the new one at the old value
    // Below the default (the CPUs of the affinity mask) no control is needed, and one would
    // cap the rest of the process's oneTBB work.
    if (want > static_cast<size_t>(tbb::info::default_concurrency())) {
      control =
          std::make_unique<tbb::global_control>(tbb::global_control::max_allowed_parallelism, want);
    }
  }

  const size_t want_;
  bool abandoned_ = false;
};

// ---- resume identity (LoaderState) --------------------------------------------------------

// What identifies the data, whatever path it is read at: the manifest's sha256; for a plain
// LMDB (no manifest) the sha256 of its count, pairing, first and last keys and their records.
// Never fails: a record that does not read counts by its key and the error's code (the loader
// reports the error itself when it reaches the record).
std::string ContentSha256(const Dataset& ds) {
  const DatasetInfo& info = ds.info();
  if (!info.manifest_json.empty()) return Sha256Hex(info.manifest_json);
  std::string id = "plain LMDB\n" + std::to_string(info.count) + "\n" + info.pairing + "\n";
  for (const uint64_t i : {uint64_t{0}, info.count - 1}) {
    if (info.count == 0) break;
    id += ds.KeyName(i) + "\n";
    const Status s = ds.Read(i, [&id](const RecordView& r) {
      id += Sha256Hex({reinterpret_cast<const char*>(r.image.data()), r.image.size()}) + "\n";
      id += Sha256Hex({reinterpret_cast<const char*>(r.mask.data()), r.mask.size()}) + "\n";
      return Status::OK();
    });
    if (!s.ok()) id += std::string("unreadable: ") + Status::CodeName(s.code()) + "\n";
  }
  return Sha256Hex(id);
}

template <class T>
std::string FormatOption(const T& v) {
  if constexpr (std::is_same_v<T, bool>) {
    return v ? "true" : "false";
  } else if constexpr (std::is_floating_point_v<T>) {
    char buf[64];
    const auto r = std::to_chars(buf, buf + sizeof(buf), v);  // shortest round trip
    return std::string(buf, r.ptr);
  } else if constexpr (std::is_arithmetic_v<T>) {
    return std::to_string(v);
  } else if constexpr (NamedEnum<T>) {
    return std::string(EnumName(v));
  } else if constexpr (std::is_same_v<T, std::shared_ptr<const TransformPipeline>>) {
    return v ? v->ToJson() : "";  // the pipeline as A.to_dict JSON; "" = augment's

  } else if constexpr (std::is_constructible_v<std::string, const T&>) {
    return std::string(v);
  } else {
    return "?";  // not a kInState kind (callbacks, pointers, lists): never called for those
  }
}

// "state has A, this loader B"; values longer than a line (a transform pipeline's JSON) are
// shown from just before where they first differ.
std::string ValueDiff(const std::string& theirs, const std::string& ours) {
  constexpr size_t kShort = 60, kContext = 20, kShown = 40;
  if (theirs.size() <= kShort && ours.size() <= kShort) {
    return "state has " + theirs + ", this loader " + ours;
  }
  size_t at = 0;
  while (at < theirs.size() && at < ours.size() && theirs[at] == ours[at]) ++at;
  const size_t from = at > kContext ? at - kContext : 0;
  auto part = [from](const std::string& v) {
    if (v.empty()) return std::string("\"\" (none)");
    return std::string(from > 0 ? "..." : "") + v.substr(from, kShown) +
           (v.size() > from + kShown ? "..." : "");
  };
  return "state has " + part(theirs) + ", this loader " + part(ours) + " (" +
         std::to_string(theirs.size()) + " and " + std::to_string(ours.size()) +
         " chars, first difference at char " + std::to_string(at) + ")";
}

// One option of the identity: its key in LoaderState::options, the marker naming it in
// messages, its value.
struct StateOption {
  std::string key, marker, value;
};

// The kInState fields of s (nested structs flattened as "sampler.shard_id").
template <class S>
void StateOptions(const S& s, const std::string& prefix, std::vector<StateOption>* out) {
  ForEachOptionField<S>([&](const auto& f) {
    using T = typename std::remove_cvref_t<decltype(f)>::Type;
    if ((f.flags & kInState) == 0) return;
    const std::string key = prefix + std::string(f.name);
    if constexpr (ListedOptions<T>) {
      StateOptions(s.*(f.member), key + ".", out);
    } else {
      out->push_back({key, Opt(std::string(OptionFields<S>::kName) + "::" + std::string(f.name)),
                      FormatOption(s.*(f.member))});
    }
  });
}

// One batch being produced: its samples are loaded by worker tasks into `buffer`; the last
// task to finish compacts out skipped samples and marks it ready.
struct Job {
  uint64_t seed = 0, epoch = 0, number = 0;
  std::vector<uint64_t> indices;  // dataset indices, batch order
  BatchBuffer* buffer = nullptr;
  std::vector<Status> status;          // per slot; written by that slot's task only
  std::atomic<bool> published{false};  // release/acquire edge from the submitter to the tasks
  std::atomic<int> remaining{0};
  std::atomic<uint64_t> normalize_ns{0};
  // Set by the finishing task; read by the consumer after `ready` (under the loader mutex).
  int size = 0;
  bool ready = false;
};

class LoaderImpl final : public Loader {
 public:
  LoaderImpl(std::shared_ptr<const Dataset> dataset, LoaderOptions options, BatchShape shape,
             Sampler sampler, NormalizeParams norm, std::string content_sha256,
             std::shared_ptr<const TransformPipeline> pipeline)
      : content_sha256_(std::move(content_sha256)),
        dataset_(std::move(dataset)),
        options_(std::move(options)),
        shape_(shape),
        sampler_(std::move(sampler)),
        seed_(options_.sampler.seed),
        pool_(BatchPool::Create(shape_, options_.allocator)),
        // oneTBB starts cores - 1 workers by default; make sure ours exist (see the lease).
        parallelism_(static_cast<size_t>(options_.threads) + 1),
        // No slot reserved for an application thread: the consumer never joins the arena.
        arena_(std::make_unique<tbb::task_arena>(options_.threads, 0)),
        pid_(::getpid()),
        origin_(dataset_),
        cache_copy_(CacheCopyOf(dataset_)),
        shard_cache_(ShardCacheOf(dataset_)) {
    ctx_.dataset = dataset_.get();
    ctx_.options = &options_;
    ctx_.shape = shape_;
    ctx_.normalize = norm;
    ctx_.stats = &stats_;
    ctx_.pipeline = std::move(pipeline);
    stats_.SetTransformRows(ctx_.pipeline->segment_labels());
    epoch_end_ = EpochEnd(0);
    StateOptions(options_, "", &state_options_);
    WantShards();
  }

  ~LoaderImpl() override {
    Drain();
    if (Forked()) {  // the TBB threads did not survive fork: leave their state alone
      (void)arena_.release();
      parallelism_.Abandon();
    }
  }

  Status Next(Batch* out) override {
    out->Reset();
    if (Forked()) {
      return Status::Unsupported(
          "loader over " + dataset_->info().path + " was created in process " +
          std::to_string(pid_) + " and used in forked child " + std::to_string(::getpid()) +
          ": worker threads do not survive fork; create loaders after forking");
    }
    while (true) {
      if (order_epoch_ != epoch_ || order_.empty()) {
        order_ = sampler_.EpochOrder(epoch_);
        order_epoch_ = epoch_;
      }
      if (deliver_pos_ >= epoch_end_) {  // end of epoch: signal it once, move on
        Drain();
        SetEpochLocked(epoch_ + 1);
        return Status::OK();
      }
      DSPIPE_RETURN_IF_ERROR(TopUp());
      std::unique_ptr<Job> job = WaitFront();
      deliver_pos_ += job->indices.size();
      taken_ = true;  // the position moved: set_epoch of this epoch restarts it
      Status s = Collect(*job);
      BatchBuffer* buffer = job->buffer;
      const int size = job->size;
      const uint64_t epoch = job->epoch, number = job->number;
      spare_jobs_.push_back(std::move(job));
      if (!s.ok() || size == 0) {
        pool_->Release(buffer);
        if (!s.ok()) return s;
        continue;  // every sample of this batch was skipped
      }
      *out = pool_->Wrap(buffer, size, epoch, number);
      // Refill the pipeline. A failure (allocator out of memory) resurfaces from the TopUp at
      // the start of the next call, so this batch is still handed out.
      (void)TopUp();
      return Status::OK();
    }
  }

  void set_epoch(uint64_t epoch) override {
    if (epoch == epoch_ && !taken_) return ContinuePending();
    Drain();
    SetEpochLocked(epoch);
  }
  uint64_t epoch() const override { return epoch_; }
  void BeginPass() override {
    if (!taken_) return ContinuePending();
    Drain();
    SetEpochLocked(epoch_ + 1);
  }
  uint64_t batches_per_epoch() const override {
    const auto b = static_cast<uint64_t>(options_.batch_size);
    return (epoch_end_ + b - 1) / b;
  }
  uint64_t samples_per_epoch() const override { return sampler_.SamplesInEpoch(epoch_); }
  uint64_t batches_left() const override {
    const auto b = static_cast<uint64_t>(options_.batch_size);
    return (epoch_end_ - std::min(deliver_pos_, epoch_end_) + b - 1) / b;
  }

  LoaderState state() const override {
    LoaderState s;
    s.seed = seed_;
    s.epoch = epoch_;
    s.position = deliver_pos_;
    s.dataset_sha256 = content_sha256_;
    s.dataset_count = origin_->info().count;
    s.dataset_path = origin_->info().path;
    for (const StateOption& o : state_options_) s.options.emplace_back(o.key, o.value);
    return s;
  }
  Status Restore(const LoaderState& state) override {
    DSPIPE_RETURN_IF_ERROR(CheckIdentity(state));
    Sampler sampler = sampler_;
    if (seed_ != state.seed) {
      SamplerOptions so = sampler_.options();
      so.seed = state.seed;
      DSPIPE_RETURN_IF_ERROR(Sampler::Create(sampler_.shard_sizes(), so, &sampler));
    }
    const uint64_t n = sampler.SamplesInEpoch(state.epoch);
    const auto b = static_cast<uint64_t>(options_.batch_size);
    const uint64_t end = options_.drop_last ? n / b * b : n;
    if (state.position > end) {
      return Status::InvalidArgument("loader: state position " + std::to_string(state.position) +
                                     " is beyond the " + std::to_string(end) +
                                     " samples of epoch " + std::to_string(state.epoch) +
                                     " of this rank");
    }
    Drain();
    if (seed_ != state.seed) {
      sampler_ = std::move(sampler);
      options_.sampler.seed = state.seed;
      seed_ = state.seed;
      order_.clear();
    }
    SetEpochLocked(state.epoch);
    deliver_pos_ = submit_pos_ = advised_pos_ = state.position;
    return Status::OK();
  }

  // OK when `state` was taken on the same data (by content) with the same stream options; else
  // InvalidArgument naming every difference. Options the state does not list (a state from a
  // version without them) are not checked.
  Status CheckIdentity(const LoaderState& state) const {
    if (state.dataset_sha256.empty()) return Status::OK();
    const DatasetInfo& info = origin_->info();
    if (state.dataset_sha256 != content_sha256_ || state.dataset_count != info.count) {
      return Status::InvalidArgument(
          "loader: the state is from another dataset: state has " +
          std::to_string(state.dataset_count) + " records, content sha256 " +
          state.dataset_sha256.substr(0, 16) + "... (read at " + state.dataset_path +
          "); this loader " + std::to_string(info.count) + " records, " +
          content_sha256_.substr(0, 16) + "... (" + info.path + ")");
    }
    std::string diffs;
    for (const auto& [key, value] : state.options) {
      const auto it = std::find_if(state_options_.begin(), state_options_.end(),
                                   [&key](const StateOption& o) { return o.key == key; });
      if (it == state_options_.end()) {
        diffs += (diffs.empty() ? "" : "; ") + key + ": state has " + value +
                 ", this loader has no such option";
      } else if (it->value != value) {
        diffs += (diffs.empty() ? "" : "; ") + it->marker + ": " + ValueDiff(value, it->value);
      }
    }
    if (diffs.empty()) return Status::OK();
    return Status::InvalidArgument("loader: the state is from a different loader: " + diffs);
  }

  const BatchShape& shape() const override { return shape_; }
  const LoaderOptions& options() const override { return options_; }
  const Dataset& dataset() const override { return *dataset_; }
  std::string reading_from() const override {
    const std::string& path = dataset_->info().path;
    if (shard_cache_) return path + " (" + shard_cache_->Describe() + ")";
    if (!cache_copy_) return path;
    if (switched_) return path + " (cache, since epoch " + std::to_string(cache_epoch_) + ")";
    switch (cache_copy_->state()) {
      case CacheCopy::State::kCopying:
        return path + " (in place, copying into the cache)";
      case CacheCopy::State::kCached:
        return path + " (in place, the cache's copy is ready: used from the next epoch)";
      case CacheCopy::State::kInPlace:
        break;
    }
    return path + " (in place: " + cache_copy_->result().reason + ")";
  }
  void WaitForCacheCopy() const override {
    if (cache_copy_) (void)cache_copy_->Wait();
    if (shard_cache_) shard_cache_->Wait();
  }
  StageStats& stats() override { return stats_; }
  LoaderShape loader_shape() const override {
    LoaderShape s;
    s.batch_size = options_.batch_size;
    s.threads = options_.threads;
    s.prefetch = options_.prefetch;
    s.store = dataset_->info().store.empty() ? "encoded" : dataset_->info().store;
    s.gpu = false;
    s.cuda_usable = CudaAvailable();
    s.cpu_cores = UsableCpus();
    return s;
  }
  uint64_t corrupt_skipped() const override { return corrupt_total_.load(); }
  CorruptReport corrupt_records() const override {
    std::lock_guard<std::mutex> lock(corrupt_mu_);
    CorruptReport r = corrupt_report_;
    r.count = corrupt_total_.load();
    return r;
  }
  size_t pool_buffers() const override { return pool_->allocated(); }

 private:
  // Positions of epoch `epoch` handed out (after drop_last). The same every epoch except with
  // order kShards + kUneven (a rank's shards change with the epoch).
  uint64_t EpochEnd(uint64_t epoch) const {
    const uint64_t n = sampler_.SamplesInEpoch(epoch);
    const auto b = static_cast<uint64_t>(options_.batch_size);
    return options_.drop_last ? n / b * b : n;
  }

  // The pending position (nothing taken since it was set) continues, at an epoch boundary's
  // cost: nothing in flight, so the background cache copy may be switched to.
  void ContinuePending() {
    const uint64_t position = deliver_pos_;
    Drain();
    SetEpochLocked(epoch_);
    deliver_pos_ = submit_pos_ = advised_pos_ = position;
  }

  // REQUIRES: no job in flight (after Drain): every place that starts an epoch.
  void SetEpochLocked(uint64_t epoch) {
    epoch_end_ = EpochEnd(epoch);
    epoch_ = epoch;
    taken_ = false;
    deliver_pos_ = submit_pos_ = advised_pos_ = 0;
    corrupt_in_epoch_ = 0;
    SwitchToCacheIfReady();
  }

  // An epoch boundary with nothing in flight: when the background copy into the cache has
  // committed, the new epoch's tasks read the copy. It holds the same records (verified
  // against the same listing), so the batches are byte-identical; the in-place dataset stays
  // open (origin_) for dataset() references taken before.
  void SwitchToCacheIfReady() {
    SwitchShardsIfReady();
    if (!cache_copy_ || switched_ || cache_copy_->state() != CacheCopy::State::kCached) return;
    std::shared_ptr<const Dataset> copy = cache_copy_->cached();
    if (!copy || copy->size() != dataset_->size()) return;
    dataset_ = std::move(copy);
    ctx_.dataset = dataset_.get();
    switched_ = true;
    cache_epoch_ = epoch_;
  }

  // Order kShards with the per-shard cache: asks for this epoch's shards and the next epoch's
  // (copied in that order in the background; those already cached are leased at once).
  void WantShards() {
    if (!shard_cache_) return;
    shard_cache_->Want(sampler_.EpochShards(epoch_));
    shard_cache_->Want(sampler_.EpochShards(epoch_ + 1));
    // cache_overlap = false: the copies are made before the epoch reads, as without shards.
    if (!options_.cache_overlap) shard_cache_->Wait();
  }

  // An epoch boundary with nothing in flight: a shard opened in place stays in place for the
  // dataset that opened it, so when more shards are cached than when dataset_ was opened, the
  // new epoch reads a dataset opened again (lazily: each shard from its entry when there).
  void SwitchShardsIfReady() {
    if (!shard_cache_) return;
    WantShards();
    const size_t n = shard_cache_->cached_count();
    if (n == shards_cached_at_open_) return;
    std::shared_ptr<const Dataset> ds;
    if (!shard_cache_->Reopen(&ds).ok() || ds->size() != dataset_->size()) return;
    // Kept, as origin_ is: a dataset() reference taken before stays valid. At most one per
    // shard (a reopen needs one more cached shard).
    if (dataset_ != origin_) retired_.push_back(std::move(dataset_));
    dataset_ = std::move(ds);
    ctx_.dataset = dataset_.get();
    shards_cached_at_open_ = n;
  }

  // Submits batches until `prefetch` are in flight or the epoch's samples are all submitted.
  Status TopUp() {
    const auto b = static_cast<uint64_t>(options_.batch_size);
    while (jobs_.size() < static_cast<size_t>(options_.prefetch) && submit_pos_ < epoch_end_) {
      std::unique_ptr<Job> job = TakeJob();
      Status acquired = pool_->Acquire(&job->buffer);
      if (!acquired.ok()) {
        spare_jobs_.push_back(std::move(job));
        return acquired;
      }
      const uint64_t end = std::min(epoch_end_, submit_pos_ + b);
      job->seed = seed_;
      job->epoch = epoch_;
      job->number = submit_pos_ / b;
      job->indices.assign(order_.begin() + static_cast<ptrdiff_t>(submit_pos_),
                          order_.begin() + static_cast<ptrdiff_t>(end));
      job->status.assign(job->indices.size(), Status());
      const int n = static_cast<int>(job->indices.size());
      job->remaining.store(n, std::memory_order_relaxed);
      submit_pos_ = end;
      Job* raw = job.get();
      {
        std::lock_guard<std::mutex> lock(mu_);
        jobs_.push_back(std::move(job));
      }
      raw->published.store(true, std::memory_order_release);
      for (int i = 0; i < n; ++i) {
        arena_->enqueue([this, raw, i] { RunSample(raw, i); });
      }
    }
    ReadAhead();
    return Status::OK();
  }

  // Advises the positions (submit_pos_, submit_pos_ + readahead] of this epoch's order that were
  // not advised yet: at most `readahead` samples beyond the last submitted one.
  void ReadAhead() {
    const uint64_t window = options_.readahead < 0 ? static_cast<uint64_t>(options_.prefetch) *
                                                         static_cast<uint64_t>(options_.batch_size)
                                                   : static_cast<uint64_t>(options_.readahead);
    const uint64_t from = std::max(advised_pos_, submit_pos_);
    const uint64_t to = std::min(epoch_end_, submit_pos_ + window);
    if (window == 0 || to <= from) return;
    dataset_->WillNeed(std::span<const uint64_t>(order_.data() + from, to - from));
    advised_pos_ = to;
  }

  // A recycled Job (no allocation per batch in steady state), reset for reuse.
  std::unique_ptr<Job> TakeJob() {
    if (spare_jobs_.empty()) return std::make_unique<Job>();
    std::unique_ptr<Job> job = std::move(spare_jobs_.back());
    spare_jobs_.pop_back();
    job->buffer = nullptr;
    job->published.store(false, std::memory_order_relaxed);
    job->normalize_ns.store(0, std::memory_order_relaxed);
    job->size = 0;
    job->ready = false;
    return job;
  }

  void RunSample(Job* job, int i) {
    (void)job->published.load(std::memory_order_acquire);
    BatchBuffer& buf = *job->buffer;
    const auto slot_index = static_cast<size_t>(i);
    pipeline::SampleSlot slot;
    slot.image = buf.images + slot_index * shape_.image_bytes();
    slot.mask = buf.masks ? buf.masks + slot_index * shape_.mask_bytes() : nullptr;
    slot.normalized =
        buf.normalized ? buf.normalized + slot_index * shape_.normalized_floats() : nullptr;
    slot.label = buf.labels + i;
    slot.hflip = buf.hflip + i;
    buf.indices[i] = job->indices[slot_index];
    uint64_t norm_ns = 0;
    try {
      job->status[slot_index] = pipeline::LoadSample(ctx_, job->seed, job->epoch,
                                                     job->indices[slot_index], slot, &norm_ns);
    } catch (const std::exception& e) {  // OpenCV throws cv::Exception; never let it escape
      job->status[slot_index] = Status::Internal(
          "loading key " + dataset_->KeyName(job->indices[slot_index]) + ": " + e.what());
    }
    Status& status = job->status[slot_index];
    if (!status.ok() && status.key().empty()) {  // front ends expose it (CorruptRecord.key)
      status = status.WithKey(dataset_->KeyName(job->indices[slot_index]));
    }
    job->normalize_ns.fetch_add(norm_ns, std::memory_order_relaxed);
    if (job->remaining.fetch_sub(1, std::memory_order_acq_rel) == 1) Finish(job);
  }

  // Runs on the worker that completed a job's last sample: compacts skipped samples out.
  void Finish(Job* job) {
    const uint64_t t0 = NowNs();
    BatchBuffer& b = *job->buffer;
    int size = 0;
    for (size_t i = 0; i < job->status.size(); ++i) {
      if (!job->status[i].ok()) continue;
      const auto to = static_cast<size_t>(size++);
      if (to == i) continue;
      std::memmove(b.images + to * shape_.image_bytes(), b.images + i * shape_.image_bytes(),
                   shape_.image_bytes());
      if (b.masks) {
        std::memmove(b.masks + to * shape_.mask_bytes(), b.masks + i * shape_.mask_bytes(),
                     shape_.mask_bytes());
      }
      if (b.normalized) {
        std::memmove(b.normalized + to * shape_.normalized_floats(),
                     b.normalized + i * shape_.normalized_floats(),
                     shape_.normalized_floats() * sizeof(float));
      }
      b.labels[to] = b.labels[i];
      b.indices[to] = b.indices[i];
      b.hflip[to] = b.hflip[i];
    }
    if (shape_.normalized) stats_.Record(Stage::kNormalize, job->normalize_ns.load());
    stats_.RecordSpan(Stage::kCollate, t0, NowNs(), job->number);
    std::lock_guard<std::mutex> lock(mu_);
    job->size = size;
    job->ready = true;
    cv_.notify_all();
  }

  std::unique_ptr<Job> WaitFront() {
    ScopedStageTimer wait(&stats_, Stage::kWait, jobs_.front()->number);
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait(lock, [&] { return jobs_.front()->ready; });
    std::unique_ptr<Job> job = std::move(jobs_.front());
    jobs_.pop_front();
    return job;
  }

  // The consumer's view of a finished job: skipped records counted, errors returned.
  Status Collect(const Job& job) {
    const Status* first_corrupt = nullptr;
    for (size_t i = 0; i < job.status.size(); ++i) {
      const Status& s = job.status[i];
      if (s.ok()) continue;
      if (!pipeline::IsCorruptRecord(s)) return s;
      ListCorrupt(job.indices[i], job.epoch, s);
      corrupt_total_.fetch_add(1);
      if (++corrupt_in_epoch_ > static_cast<uint64_t>(options_.max_corrupt) && !first_corrupt) {
        first_corrupt = &s;
      }
    }
    if (first_corrupt == nullptr) return Status::OK();
    if (options_.max_corrupt == 0) return *first_corrupt;
    return first_corrupt->WithContext(
        "more than max_corrupt=" + std::to_string(options_.max_corrupt) +
        " corrupt records in epoch " + std::to_string(job.epoch));
  }

  // Adds a corrupt record to corrupt_records(), unless listed already or the list is full.
  void ListCorrupt(uint64_t index, uint64_t epoch, const Status& s) {
    std::lock_guard<std::mutex> lock(corrupt_mu_);
    std::vector<CorruptRecord>& listed = corrupt_report_.records;
    for (const CorruptRecord& r : listed) {
      if (r.index == index) return;
    }
    if (listed.size() >= CorruptReport::kMaxListed) {
      corrupt_report_.truncated = true;
      return;
    }
    listed.push_back({index, dataset_->KeyName(index), epoch, s.ToString()});
  }

  bool Forked() const { return ::getpid() != pid_; }

  // Waits for every job in flight and returns their buffers to the pool.
  void Drain() {
    if (Forked()) {
      // No worker survived fork, none will finish these jobs, and a lock may have been held at
      // the fork: drop the jobs without locking. The pool still frees every buffer it made.
      jobs_.clear();
      return;
    }
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait(lock, [&] {
      return std::all_of(jobs_.begin(), jobs_.end(), [](const auto& j) { return j->ready; });
    });
    for (auto& j : jobs_) {
      pool_->Release(j->buffer);
      spare_jobs_.push_back(std::move(j));
    }
    jobs_.clear();
  }

  const std::string content_sha256_;        // the data's identity (LoaderState::dataset_sha256)
  std::vector<StateOption> state_options_;  // the options' part of it (kInState fields)
  std::shared_ptr<const Dataset> dataset_;  // read by new tasks; changes only between epochs
  LoaderOptions options_;
  const BatchShape shape_;
  Sampler sampler_;
  uint64_t seed_;
  StageStats stats_;
  pipeline::SampleContext ctx_;
  std::shared_ptr<BatchPool> pool_;
  ParallelismLease parallelism_;
  std::unique_ptr<tbb::task_arena> arena_;
  const pid_t pid_;
  // The dataset as opened (in place when a background cache copy is attached) and that copy.
  const std::shared_ptr<const Dataset> origin_;
  const std::shared_ptr<CacheCopy> cache_copy_;
  bool switched_ = false;    // dataset_ is the cache's copy (consumer thread)
  uint64_t cache_epoch_ = 0;  // the first epoch read from it
  // Order kShards: the per-shard cache (CacheOptions::per_shard), and how many shards it had
  // cached when dataset_ was opened (consumer thread).
  const std::shared_ptr<ShardCache> shard_cache_;
  size_t shards_cached_at_open_ = 0;
  std::vector<std::shared_ptr<const Dataset>> retired_;  // datasets reopened before dataset_

  // Consumer-side state (single consumer thread).
  uint64_t epoch_ = 0;
  uint64_t epoch_end_ = 0;  // positions per epoch after drop_last
  uint64_t deliver_pos_ = 0, submit_pos_ = 0;
  // A batch was taken (or skipped by an error) since the position was set: set_epoch of this
  // epoch restarts it, and BeginPass starts the next one. false after SetEpochLocked.
  bool taken_ = false;
  uint64_t advised_pos_ = 0;  // positions before this were passed to Dataset::WillNeed
  uint64_t order_epoch_ = 0;
  std::vector<uint64_t> order_;
  uint64_t corrupt_in_epoch_ = 0;
  std::atomic<uint64_t> corrupt_total_{0};
  mutable std::mutex corrupt_mu_;  // guards corrupt_report_ (read from any thread)
  CorruptReport corrupt_report_;   // count filled in by corrupt_records()

  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<std::unique_ptr<Job>> spare_jobs_;  // consumer thread only
  std::deque<std::unique_ptr<Job>> jobs_;  // guarded by mu_ (the consumer also reads the front)
};

}  // namespace
}  // namespace dspipe

namespace dspipe {
namespace {

// The size of record 0, for datasets whose manifest does not fix one (plain LMDBs).
Status ProbeFirstRecord(const Dataset& ds, int* height, int* width) {
  return ds.Read(0, [&](const RecordView& rec) -> Status {
    if (rec.header.height > 0 && rec.header.width > 0) {
      *height = static_cast<int>(rec.header.height);
      *width = static_cast<int>(rec.header.width);
      return Status::OK();
    }
    codec::ImageProbe probe;
    Status s = codec::Probe(rec.image, &probe);
    if (!s.ok()) {
      return s.WithContext("loader: sizing the batches from key " + ds.KeyName(0) + " in " +
                           ds.info().path);
    }
    *height = probe.height;
    *width = probe.width;
    return Status::OK();
  });
}

Status Invalid(const std::string& what) { return Status::InvalidArgument("loader: " + what); }

}  // namespace

Status ResolveNormalization(const DatasetInfo& info, int channels, std::vector<double>* mean,
                            std::vector<double>* std, NormalizeParams* params) {
  if (mean->empty() != std->empty()) {
    return Status::InvalidArgument("set both " + Opt("LoaderOptions::mean") + " and " +
                                   Opt("LoaderOptions::std") + ", or neither");
  }
  if (mean->empty()) {
    if (!info.has_stats) {
      return Status::InvalidArgument("normalize needs mean/std, and " + info.path +
                                     " has no statistics in its manifest: set " +
                                     Opt("LoaderOptions::mean") + " and " +
                                     Opt("LoaderOptions::std"));
    }
    *mean = info.mean;
    *std = info.std;
  }
  const auto c = static_cast<size_t>(channels);
  if (mean->size() == 1) mean->assign(c, (*mean)[0]);
  if (std->size() == 1) std->assign(c, (*std)[0]);
  if (mean->size() != c || std->size() != c) {
    return Status::InvalidArgument(Opt("LoaderOptions::mean") + "/" + Opt("LoaderOptions::std") +
                                   " have " + std::to_string(mean->size()) + "/" +
                                   std::to_string(std->size()) + " values for " +
                                   std::to_string(channels) + " channels");
  }
  params->channels = channels;
  for (size_t k = 0; k < c; ++k) {
    params->mean[k] = static_cast<float>((*mean)[k]);
    params->std[k] = static_cast<float>((*std)[k]);
  }
  return ValidateNormalizeParams(*params);
}

Status Loader::Create(std::shared_ptr<const Dataset> dataset, const LoaderOptions& options,
                      std::unique_ptr<Loader>* out) {
  if (!dataset) return Invalid("no dataset");
  LoaderOptions o = options;
  if (o.batch_size < 1) return Invalid(Opt("LoaderOptions::batch_size") + " must be >= 1");
  if (o.prefetch < 1) return Invalid(Opt("LoaderOptions::prefetch") + " must be >= 1");
  if (o.readahead < -1) {
    return Invalid(Opt("LoaderOptions::readahead") +
                   " must be >= 0 (samples), or -1 = prefetch x batch");
  }
  if (o.threads < 0)
    return Invalid(Opt("LoaderOptions::threads") + " must be >= 0 (0 = usable CPUs)");
  if (o.max_corrupt < 0) return Invalid(Opt("LoaderOptions::max_corrupt") + " must be >= 0");
  if (o.height < 0 || o.width < 0 || (o.height == 0) != (o.width == 0)) {
    return Invalid(Opt("LoaderOptions::height") + " and " + Opt("LoaderOptions::width") +
                   " must both be 0 (dataset size) or both > 0");
  }
  if (o.channels != 0 && o.channels != 1 && o.channels != 3) {
    return Invalid(Opt("LoaderOptions::channels") + " must be 0 (dataset's), 1 or 3");
  }
  DSPIPE_RETURN_IF_ERROR(o.augment.Validate());
  if (o.defer_hflip && o.normalize != NormalizeMode::kNone) {
    return Invalid("defer_hflip is for consumers that normalize themselves (normalize = kNone)");
  }
  if (o.threads == 0) o.threads = UsableCpus();

  const DatasetInfo& info = dataset->info();
  BatchShape shape;
  shape.batch_size = o.batch_size;
  shape.channels = o.channels != 0 ? o.channels : (info.channels == 1 ? 1 : 3);
  shape.masks = info.has_masks;
  shape.normalized = o.normalize == NormalizeMode::kCpuFloat32;
  // The pipeline (the transform, or augment's) and the batch size it gives (sample.h).
  std::shared_ptr<const TransformPipeline> pipeline;
  DSPIPE_RETURN_IF_ERROR(pipeline::ResolvePipeline(o, info, ProbeFirstRecord, *dataset, &o.height,
                                                   &o.width, &pipeline));
  if (pipeline->has_normalize()) {  // A.Normalize maps onto the normalize stage
    if (!o.mean.empty() || !o.std.empty()) {
      return Invalid("the transform pipeline's Normalize sets mean/std: leave " +
                     Opt("LoaderOptions::mean") + " and " + Opt("LoaderOptions::std") + " empty");
    }
    o.mean = pipeline->normalize_mean();
    o.std = pipeline->normalize_std();
  }
  o.channels = shape.channels;
  shape.height = o.height;
  shape.width = o.width;

  NormalizeParams norm;
  if (shape.normalized) {
    DSPIPE_RETURN_IF_ERROR(ResolveNormalization(info, shape.channels, &o.mean, &o.std, &norm)
                               .WithContext("loader"));
  }

  Sampler sampler;
  Status s = Sampler::Create(info.shard_sizes.empty() ? std::vector<uint64_t>{info.count}
                                                     : info.shard_sizes,
                             o.sampler, &sampler);
  if (!s.ok()) return s.WithContext("loader over " + info.path);
  std::string content = ContentSha256(*dataset);
  *out = std::make_unique<LoaderImpl>(std::move(dataset), std::move(o), shape, std::move(sampler),
                                      norm, std::move(content), std::move(pipeline));
  return Status::OK();
}

Status OpenLoaderDataset(const std::string& path, const LoaderOptions& options,
                         std::shared_ptr<const Dataset>* out, CacheResult* cache) {
  CacheOptions co;
  co.mode = options.cache;
  co.cache_limit = options.cache_limit;
  co.overlap = options.cache_overlap;  // the first epoch reads in place while it is made
  // The batch buffers this loader will hold: prefetch in flight, one with the consumer, one
  // being filled (the device path's slots are of the same order). Sizes the dataset does not
  // fix (varying sizes, no resize) are taken as 1024 x 1024: an estimate, on the safe side.
  const auto pipeline_bytes = [&options](const DatasetInfo& info) -> uint64_t {
    uint64_t h = static_cast<uint64_t>(options.height > 0 ? options.height : info.height);
    uint64_t w = static_cast<uint64_t>(options.width > 0 ? options.width : info.width);
    if (h == 0 || w == 0) h = w = 1024;
    const uint64_t c = static_cast<uint64_t>(options.channels > 0 ? options.channels : 3);
    uint64_t per_sample = h * w * c + (info.has_masks ? h * w : 0);
    if (options.normalize == NormalizeMode::kCpuFloat32) per_sample += h * w * c * 4;
    const uint64_t batches = static_cast<uint64_t>(std::max(options.prefetch, 1)) + 2;
    return batches * static_cast<uint64_t>(std::max(options.batch_size, 1)) * per_sample;
  };
  DatasetOpenOptions open_options = options.dataset;
  // A rank of order kShards reads only its shards: open each when first read (docs/SCALE.md).
  if (options.sampler.order == SampleOrder::kShards) {
    open_options.lazy_shards = true;
    co.per_shard = true;  // and caches only the shards it asks for (docs/CACHE.md)
  }
  return OpenDatasetCached(path, open_options, co, pipeline_bytes, out, cache);
}

Status Loader::Open(const std::string& path, const LoaderOptions& options,
                    std::unique_ptr<Loader>* out) {
  std::shared_ptr<const Dataset> ds;
  DSPIPE_RETURN_IF_ERROR(OpenLoaderDataset(path, options, &ds));
  return Create(std::move(ds), options, out);
}

}  // namespace dspipe
