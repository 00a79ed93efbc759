// SPDX-License-Identifier: Apache-2.0
// RunProfile / RunFolderProfile: one measured run of the real loader.
#include <fmt/format.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <thread>

#include "cache/cached_dataset.h"
#include "core/files.h"
#include "dspipe/cache.h"
#include "dspipe/loader.h"
#include "format/residency.h"
#include "loader/loader_dataset.h"
#include "profile/profile.h"
#include "profile/sources.h"
#if DSPIPE_PROFILE_HAVE_DEVICE
#include "dspipe/device_loader.h"
#include "dspipe/fetch.h"
#endif

namespace dspipe::profile {
namespace {

// The consumer's side of either loader: one batch held at a time, as a training loop does.
class Consumer {
 public:
  virtual ~Consumer() = default;
  // Takes the next batch (releasing the previous one); *size = 0 at the end of an epoch.
  virtual Status Next(int* size) = 0;
  virtual Loader& loader() = 0;
  virtual LoaderShape shape() = 0;
  // Releases the held batch (GPU path: records its h2d / normalize times).
  virtual Status Finish() = 0;
};

class CpuConsumer : public Consumer {
 public:
  explicit CpuConsumer(std::unique_ptr<Loader> loader) : loader_(std::move(loader)) {}
  Status Next(int* size) override {
    DSPIPE_RETURN_IF_ERROR(loader_->Next(&batch_));
    *size = batch_ ? batch_.size() : 0;
    return Status::OK();
  }
  Loader& loader() override { return *loader_; }
  LoaderShape shape() override { return loader_->loader_shape(); }
  Status Finish() override {
    batch_.Reset();
    return Status::OK();
  }

 private:
  std::unique_ptr<Loader> loader_;
  Batch batch_;
};

#if DSPIPE_PROFILE_HAVE_DEVICE
class DeviceConsumer : public Consumer {
 public:
  explicit DeviceConsumer(std::unique_ptr<DeviceLoader> loader) : loader_(std::move(loader)) {}
  Status Next(int* size) override {
    DSPIPE_RETURN_IF_ERROR(loader_->Next(&batch_));
    *size = batch_ ? batch_.size() : 0;
    // A training step cannot start before its inputs are on the device.
    return batch_ ? batch_.WaitReady() : Status::OK();
  }
  Loader& loader() override { return loader_->loader(); }
  LoaderShape shape() override { return loader_->loader_shape(); }
  Status Finish() override { return batch_.Release(); }

 private:
  std::unique_ptr<DeviceLoader> loader_;
  TensorBatch batch_;
};

// The DeviceLoader's options from ProfileOptions (dtype, mask_dtype, slots, max_slots).
DeviceOptions DeviceOptionsFor(const ProfileOptions& o) {
  DeviceOptions d;
  d.dtype = o.dtype;
  d.mask_dtype = o.mask_dtype;
  d.slots = o.slots;
  d.max_slots = o.max_slots;
  return d;
}
#endif

// The rank's order (ProfileOptions order / block_size / rank / world_size, shuffle, seed).
SamplerOptions SamplerFor(const ProfileOptions& o) {
  SamplerOptions so;
  so.shuffle = o.shuffle;
  so.seed = o.seed;
  so.order = o.order;
  so.block_size = o.block_size;
  so.world_size = o.world_size;
  so.rank = o.rank;
  so.remainder = o.remainder;
  return so;
}

Status MakeConsumer(std::shared_ptr<const Dataset> ds, const ProfileOptions& o,
                    ProfileResult* result, std::unique_ptr<Consumer>* out) {
  LoaderOptions lo;
  lo.batch_size = o.batch_size;
  lo.threads = o.threads;
  lo.prefetch = o.prefetch;
  lo.readahead = o.readahead;
  lo.sampler = SamplerFor(o);
  lo.augment = o.augment;
  lo.height = o.height;
  lo.width = o.width;
  lo.channels = o.channels;
  lo.transform = o.transform;
  // The per-shard cache's copies are made before each epoch reads (cache_overlap false), as
  // with Loader::Open.
  lo.cache_overlap = o.cache_overlap;
  lo.drop_last = o.drop_last;
  lo.mean_std = o.mean_std;
  lo.max_corrupt = o.max_corrupt;
  std::vector<double> mean = o.mean, std = o.std;
  const bool normalizes = o.device == "cuda" || o.normalize;
  const bool pipeline_normalizes = o.transform && o.transform->has_normalize();
  // kDataset and kIdentity are the loader's to resolve (or to refuse, naming the flag).
  if (normalizes && mean.empty() && !ds->info().has_stats && !pipeline_normalizes &&
      o.mean_std == MeanStdSource::kAuto) {
    mean = {0.0};
    std = {1.0};
    result->notes.push_back(ds->info().path +
                            " has no mean/std: normalizing with mean 0, std 1 (same cost)");
  }
  lo.mean = mean;
  lo.std = std;
  if (o.device == "cpu") {
    lo.normalize = o.normalize ? NormalizeMode::kCpuFloat32 : NormalizeMode::kNone;
    std::unique_ptr<Loader> loader;
    DSPIPE_RETURN_IF_ERROR(Loader::Create(std::move(ds), lo, &loader));
    *out = std::make_unique<CpuConsumer>(std::move(loader));
    return Status::OK();
  }
  if (o.device != "cuda") {
    return Status::InvalidArgument("device '" + o.device + "': expected cpu or cuda");
  }
#if DSPIPE_PROFILE_HAVE_DEVICE
  DeviceOptions d = DeviceOptionsFor(o);
  d.device = 0;  // a real device or an Unsupported error saying why; never a silent fallback
  std::unique_ptr<DeviceLoader> loader;
  Status s = DeviceLoader::Create(std::move(ds), lo, d, &loader);
  if (!s.ok()) return s.WithContext("--device cuda");
  *out = std::make_unique<DeviceConsumer>(std::move(loader));
  return Status::OK();
#else
  return Status::Unsupported(
      "--device cuda: this dsbench was built without the device stage (dspipe::device); "
      "use --device cpu");
#endif
}

void DropCache(const std::vector<std::string>& files, CacheDrop* cache) {
  cache->requested = true;
  cache->files = files.size();
  std::string failed;
  for (const std::string& f : files) {
    // posix_fadvise succeeds even where the filesystem ignores it: check what stayed cached
    // (-1 = cannot tell, trust the call).
    if (core::DropFileCache(f) && format::ResidentFraction(f) <= 0.05) {
      ++cache->dropped;
    } else if (failed.empty()) {
      failed = f;
    }
  }
  if (files.empty()) {
    cache->note = "could not drop the page cache: no data files found";
  } else if (cache->dropped == cache->files) {
    cache->note = "dropped the page cache of " + std::to_string(cache->files) + " file(s)";
  } else {
    cache->note = "could not drop the page cache of " +
                  std::to_string(cache->files - cache->dropped) + " of " +
                  std::to_string(cache->files) + " file(s) (first: " + failed +
                  "); the run may be partly warm";
  }
}

void Compute(double ms) {
  if (ms > 0) std::this_thread::sleep_for(std::chrono::duration<double, std::milli>(ms));
}

uint64_t TotalSize(const std::vector<std::string>& files) {
  uint64_t total = 0;
  for (const std::string& f : files) {
    uint64_t size = 0;
    if (core::FileSize(f, &size).ok()) total += size;
  }
  return total;
}

// Appends the timeline as Chrome trace counter tracks ("ph":"C") to the trace at `path`.
Status AddTraceCounters(const std::string& path, const std::vector<ResourceSample>& samples,
                        uint64_t timeline_start_ns, uint64_t origin_ns) {
  std::string text;
  DSPIPE_RETURN_IF_ERROR(core::ReadFile(path, &text));
  nlohmann::json trace = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (!trace.is_object() || !trace.contains("traceEvents")) {
    return Status::Internal(path + ": not the trace just written");
  }
  const auto pid = static_cast<int>(::getpid());
  for (const ResourceSample& s : samples) {
    const double ts_us =
        (static_cast<double>(timeline_start_ns) + s.t_s * 1e9 - static_cast<double>(origin_ns)) /
        1e3;
    auto counter = [&](const char* name, nlohmann::json args) {
      trace["traceEvents"].push_back(
          {{"ph", "C"}, {"name", name}, {"ts", ts_us}, {"pid", pid}, {"args", std::move(args)}});
    };
    counter("cpu %", {{"user", s.cpu_user_pct}, {"system", s.cpu_system_pct}});
    counter("rss MB", {{"rss", static_cast<double>(s.rss_bytes) / 1e6}});
    counter("storage read MB", {{"read", static_cast<double>(s.read_bytes) / 1e6}});
    counter("major faults", {{"major_faults", s.major_faults}});
    counter("images/s", {{"images_per_s", s.images_per_s}});
    counter("wait ms", {{"wait", s.wait_ms}});
    if (s.gpu_util_pct) counter("gpu %", {{"util", *s.gpu_util_pct}});
    if (s.gpu_mem_used_mb) counter("gpu memory MB", {{"used", *s.gpu_mem_used_mb}});
  }
  Status w = core::WriteFileAtomic(path, trace.dump());
  return w.ok() ? w : w.WithContext("adding the timeline to the trace");
}

// What a run reads through: the counting wrapper (the loader's dataset), its counters in place
// and in the cache's copy, and the background copy into the cache (null when none).
struct Counted {
  std::shared_ptr<const Dataset> dataset;
  std::shared_ptr<ReadCounters> in_place = std::make_shared<ReadCounters>();
  std::shared_ptr<ReadCounters> cache = std::make_shared<ReadCounters>();
  std::shared_ptr<cache::CacheCopy> copy;
  std::shared_ptr<cache::ShardStream> stream;  // a remote dataset streamed through the cache
  uint64_t records() const {
    return in_place->records.load(std::memory_order_relaxed) +
           cache->records.load(std::memory_order_relaxed);
  }
  uint64_t bytes() const {
    return in_place->bytes.load(std::memory_order_relaxed) +
           cache->bytes.load(std::memory_order_relaxed);
  }
};

// The counters and the clock at the start of an epoch.
struct EpochMark {
  uint64_t ns = 0, records_in_place = 0, bytes_in_place = 0, records_cache = 0, bytes_cache = 0;
  uint64_t batches = 0, images = 0;  // delivered so far in this epoch
  cache::StreamStats stream;         // the stream's counters (when streamed)
};

EpochMark MarkEpoch(const Counted& src, uint64_t ns) {
  EpochMark m;
  m.ns = ns;
  m.records_in_place = src.in_place->records.load(std::memory_order_relaxed);
  m.bytes_in_place = src.in_place->bytes.load(std::memory_order_relaxed);
  m.records_cache = src.cache->records.load(std::memory_order_relaxed);
  m.bytes_cache = src.cache->bytes.load(std::memory_order_relaxed);
  if (src.stream) m.stream = src.stream->stats();
  return m;
}

EpochResult CloseEpoch(const Counted& src, const EpochMark& m, uint64_t ns) {
  const EpochMark now = MarkEpoch(src, ns);
  EpochResult e;
  e.batches = m.batches;
  e.images = m.images;
  e.seconds = static_cast<double>(ns - m.ns) * 1e-9;
  e.images_per_s = e.seconds > 0 ? static_cast<double>(e.images) / e.seconds : 0;
  e.records_in_place = now.records_in_place - m.records_in_place;
  e.bytes_in_place = now.bytes_in_place - m.bytes_in_place;
  e.records_cache = now.records_cache - m.records_cache;
  e.bytes_cache = now.bytes_cache - m.bytes_cache;
  e.source = e.records_cache == 0      ? (e.records_in_place == 0 ? "none" : "in place")
             : e.records_in_place == 0 ? "cache"
                                       : "in place + cache";
  if (src.stream) {
    e.streamed = true;
    e.source = "stream";
    e.net_fetches = now.stream.fetches - m.stream.fetches;
    e.net_bytes = now.stream.fetched_bytes - m.stream.fetched_bytes;
    e.shard_hits = now.stream.hits - m.stream.hits;
    e.shard_waits = now.stream.waits - m.stream.waits;
    e.net_wait_seconds = now.stream.wait_seconds - m.stream.wait_seconds;
  }
  return e;
}

// A streamed run whose reads spent a fifth or more of the loader's thread time waiting for
// shards from the server is network-bound, whatever the stages say (the waits happen inside
// the read stage): the verdict says so and what helps.
void NetworkVerdict(const ProfileResult& r, int threads, Verdict* v) {
  double wait = 0;
  uint64_t bytes = 0, fetches = 0;
  for (const EpochResult& e : r.epochs) {
    wait += e.net_wait_seconds;
    bytes += e.net_bytes;
    fetches += e.net_fetches;
  }
  const double thread_s = r.seconds * std::max(threads, 1);
  if (thread_s <= 0 || wait < 0.2 * thread_s) return;
  v->bound = "network";
  v->headline = fmt::format(
      "network-bound: reads waited {:.2f} s for shards from the server ({:.0f}% of the loader "
      "threads' {:.2f} s; {} shards, {:.1f} MB fetched)",
      wait, 100.0 * wait / thread_s, thread_s, fetches, static_cast<double>(bytes) / 1e6);
  v->suggestions.insert(
      v->suggestions.begin(),
      {"fetch more shards at once: raise stream_ahead (--stream-ahead; the cache must hold it "
       "+ 1 shards)",
       "a cache_limit (--cache-limit) that holds the dataset: later epochs read the cache, no "
       "network", "run nearer the bucket (same region), or `dsconvert fetch` it to local disk "
       "once"});
}

// The measured loop shared by both sources. *copy_wait_s: time spent in ProfileOptions::
// cache_wait (outside r->seconds).
Status Measure(const Counted& src, const ProfileOptions& o, ProfileResult* r, double* copy_wait_s) {
  *copy_wait_s = 0;
  const std::shared_ptr<const Dataset>& ds = src.dataset;
  if (o.batch_size < 1 || o.prefetch < 1 || o.threads < 0 || o.warmup < 0 || o.epochs < 0 ||
      o.compute_ms < 0 || (o.epochs == 0 && o.batches == 0)) {
    return Status::InvalidArgument(
        "profile: need batch >= 1, prefetch >= 1, threads >= 0, warmup >= 0, compute_ms >= 0 "
        "and batches > 0 or epochs > 0");
  }
  if (o.world_size < 1 || o.rank < 0 || o.rank >= o.world_size) {
    return Status::InvalidArgument("profile: --rank " + std::to_string(o.rank) +
                                   " of --world-size " + std::to_string(o.world_size) +
                                   ": need world size >= 1 and 0 <= rank < world size");
  }
  if (o.order == SampleOrder::kBlocks && o.block_size < 1) {
    return Status::InvalidArgument("profile: --block-size must be >= 1");
  }
  std::unique_ptr<Consumer> consumer;
  Status made = MakeConsumer(ds, o, r, &consumer);
  if (!made.ok() && o.order == SampleOrder::kShards) {
    return made.WithContext(std::string("--order shards over ") +
                            std::to_string(ds->info().shard_sizes.size()) +
                            " shard(s), --world-size " + std::to_string(o.world_size));
  }
  DSPIPE_RETURN_IF_ERROR(made);
  Loader& loader = consumer->loader();
  if (loader.batches_per_epoch() == 0) {
    return Status::InvalidArgument("profile: " + ds->info().path + " gives no batches");
  }
  StageStats& stats = loader.stats();
  if (!o.trace_path.empty()) stats.EnableTrace(o.trace_events_per_thread);
  SetThreadName("consumer");

  int size = 0;
  for (int i = 0; i < o.warmup;) {
    DSPIPE_RETURN_IF_ERROR(consumer->Next(&size));
    if (size == 0) continue;  // end of an epoch; the loader moves on by itself
    Compute(o.compute_ms);
    ++i;
  }
  stats.Reset();
  const uint64_t records0 = src.records(), bytes0 = src.bytes();
  std::atomic<uint64_t> images_done{0};
  std::unique_ptr<ResourceTimeline> timeline;
  if (o.sample_ms > 0) {
    TimelineOptions to;
    to.sample_ms = o.sample_ms;
    timeline = std::make_unique<ResourceTimeline>(to, [&](uint64_t* images, uint64_t* wait_ns) {
      *images = images_done.load(std::memory_order_relaxed);
      *wait_ns = static_cast<uint64_t>(stats.Summary(Stage::kWait).total_ms * 1e6);
    });
  }
  const uint64_t start = NowNs();
  if (o.epochs > 0 && o.warmup > 0) loader.set_epoch(loader.epoch() + 1);  // whole epochs only
  uint64_t paused_ns = 0;  // in cache_wait, not measured
  EpochMark epoch = MarkEpoch(src, NowNs());
  int epochs_ended = 0;
  while (o.epochs > 0 ? epochs_ended < o.epochs : r->batches < o.batches) {
    DSPIPE_RETURN_IF_ERROR(consumer->Next(&size));
    if (size == 0) {  // the end of an epoch: nothing is in flight, the loader moved on
      r->epochs.push_back(CloseEpoch(src, epoch, NowNs()));
      ++epochs_ended;
      const bool more = o.epochs == 0 || epochs_ended < o.epochs;
      if (o.cache_wait && epochs_ended == 1 && more && src.copy &&
          src.copy->state() == cache::CacheCopy::State::kCopying) {
        // Wait for the copy, then start the new epoch again (nothing of it read yet): it
        // reads the copy once committed.
        const uint64_t t0 = NowNs();
        (void)src.copy->Wait();
        loader.set_epoch(loader.epoch());
        paused_ns += NowNs() - t0;
      }
      epoch = MarkEpoch(src, NowNs());
      continue;
    }
    Compute(o.compute_ms);
    ++r->batches;
    r->images += static_cast<uint64_t>(size);
    ++epoch.batches;
    epoch.images += static_cast<uint64_t>(size);
    images_done.store(r->images, std::memory_order_relaxed);
  }
  const uint64_t end = NowNs();
  if (epoch.batches > 0) r->epochs.push_back(CloseEpoch(src, epoch, end));  // partial (batches)
  *copy_wait_s = static_cast<double>(paused_ns) * 1e-9;
  if (timeline) {
    timeline->Stop();
    r->timeline = timeline->samples();
    r->timeline_gpu = timeline->gpu_available();
  }
  DSPIPE_RETURN_IF_ERROR(consumer->Finish());

  r->seconds = static_cast<double>(end - start - paused_ns) * 1e-9;
  const double secs = r->seconds > 0 ? r->seconds : 1e-9;
  r->images_per_s = static_cast<double>(r->images) / secs;
  // Stored bytes: the mean record size over the reads of the measured part (prefetch makes the
  // exact set of records read inside the window fuzzy) times the images delivered.
  const uint64_t records = src.records() - records0, bytes = src.bytes() - bytes0;
  const double per_record = records > 0 ? static_cast<double>(bytes) / records : 0;
  r->mb_per_s = per_record * static_cast<double>(r->images) / secs / 1e6;
  const BatchShape& bs = loader.shape();
  r->decoded_mb_per_s = static_cast<double>(bs.image_bytes() + bs.mask_bytes()) *
                        static_cast<double>(r->images) / secs / 1e6;

  r->config = o;
  r->config.threads = loader.options().threads;
  r->config.normalize = o.device == "cuda" || o.normalize;
  r->shape = consumer->shape();
  r->stages = stats.Summaries();
  r->verdict = Diagnose(r->stages, r->shape, o.compute_ms);
  if (src.stream) NetworkVerdict(*r, loader.options().threads, &r->verdict);
  // How the images were decoded (decode router, docs/DECODE.md), one snapshot for both notes.
  const std::vector<DecodePathSummary> paths = stats.DecodePaths();
  // Samples on the loader's fused PNG path (loader/sample.h) are flipped and normalized
  // inside their decode and record no transform span: say so, or transform and normalize read as
  // free (docs/STATS.md). Counted from the decode paths each sample records with its decode
  // span, not from decode minus transform spans: a prefetch worker between its decode and its
  // transform when the stats are read would count as fused.
  uint64_t decoded = 0, fused = 0;
  for (const DecodePathSummary& p : paths) {
    decoded += p.count;
    if (p.path == DecodePath::kFused) fused = p.count;
  }
  if (fused > 0) {
    const bool cpu_normalize = o.device != "cuda" && o.normalize;
    r->notes.push_back(std::to_string(fused) + " of " + std::to_string(decoded) +
                       " samples took the fused PNG path: their decode time includes their " +
                       (cpu_normalize ? "flip and float32 normalize" : "flip") + "; transform" +
                       (cpu_normalize ? " and normalize cover" : " covers") +
                       " only the other samples");
  }

  // One line when any sample took a JPEG region / scaled path, e.g. "decode paths: full 40
  // (2.1 ms), roi 812 (0.91 ms), ...".
  bool special = false;
  for (const DecodePathSummary& p : paths) {
    special |= p.path == DecodePath::kRoi || p.path == DecodePath::kScaled ||
               p.path == DecodePath::kRoiScaled || p.path == DecodePath::kProgressive;
  }
  if (special) {
    std::string line = "decode paths:";
    for (const DecodePathSummary& p : paths) {
      line += fmt::format(" {} {} ({:.3f} ms),", DecodePathName(p.path), p.count, p.mean_ms);
    }
    line.pop_back();
    r->notes.push_back(line + " - samples per path and their mean decode time");
  }

  const DatasetInfo& info = ds->info();
  r->dataset.path = RedactUrl(info.path);
  r->dataset.store = info.store;
  r->dataset.count = info.count;
  r->dataset.height = bs.height;
  r->dataset.width = bs.width;
  r->dataset.channels = bs.channels;
  r->dataset.sample_type = SampleTypeName(bs.image_type);
  r->dataset.mask_type = SampleTypeName(bs.mask_type);
  r->dataset.has_masks = bs.masks;
  if (!o.trace_path.empty()) {
    DSPIPE_RETURN_IF_ERROR(stats.WriteChromeTrace(o.trace_path));
    if (timeline) {
      DSPIPE_RETURN_IF_ERROR(
          AddTraceCounters(o.trace_path, r->timeline, timeline->start_ns(), stats.origin_ns()));
    }
    if (stats.dropped_trace_events() > 0) {
      r->notes.push_back("trace: " + std::to_string(stats.dropped_trace_events()) +
                         " events dropped (per-thread limit " +
                         std::to_string(o.trace_events_per_thread) + ")");
    }
  }
  return Status::OK();
}

const char* KindName(DatasetKind k) {
  switch (k) {
    case DatasetKind::kDspipe:
      return "dspipe";
    case DatasetKind::kSharded:
      return "sharded";
    case DatasetKind::kPlain:
      return "plain";
  }
  return "plain";
}

}  // namespace

Status RunProfile(const std::string& path, const ProfileOptions& options, ProfileResult* out) {
  *out = ProfileResult{};
  out->source = "lmdb";
  const std::vector<std::string> files = DatasetFiles(path);
  if (options.drop_cache) DropCache(files, &out->cache);
  // Opened as Loader::Open would (through the RAM-disk cache when asked), then handed to
  // Loader::Create by MakeConsumer.
  LoaderOptions lo;
  lo.batch_size = options.batch_size;
  lo.prefetch = options.prefetch;
  lo.normalize = options.normalize ? NormalizeMode::kCpuFloat32 : NormalizeMode::kNone;
  lo.height = options.height;
  lo.width = options.width;
  lo.channels = options.channels;
  lo.dataset.plain = options.plain;
  lo.dataset.verify_crc = options.verify_crc;
  lo.dataset.max_readers = options.max_readers;
  lo.dataset.os_readahead = options.os_readahead;
  // Order kShards: lazy shards, and the per-shard cache (OpenLoaderDataset sets both).
  lo.sampler = SamplerFor(options);
  lo.cache = options.ram_cache;
  lo.cache_limit = options.cache_limit;
  lo.cache_overlap = options.cache_overlap;
  lo.stream_ahead = options.stream_ahead;
  std::shared_ptr<const Dataset> ds;
  CacheResult cr;
  DSPIPE_RETURN_IF_ERROR(loader::OpenLoaderDataset(path, lo, &ds, &cr));
  out->ram_cache.mode = options.ram_cache;
  out->ram_cache.cached = cr.cached;
  out->ram_cache.copied = cr.copied;
  out->ram_cache.copy_seconds = cr.copy_seconds;
  out->ram_cache.path = cr.path;
  out->ram_cache.note = cr.Describe();
  const std::string kind = KindName(ds->info().kind);
  // A background copy (the dataset was not in the cache yet): the batches read in place while
  // it runs, and from the copy from the first epoch boundary after it committed (the counting
  // wrapper forwards the copy to the loader, and counts the copy's reads too).
  Counted src;
  src.copy = cache::CacheStateOf(*ds).copy;
  src.stream = cache::CacheStateOf(*ds).stream;
  src.dataset = CountReads(std::move(ds), cr.cached ? src.cache : src.in_place, src.cache);
  double copy_wait_s = 0;
  Status s = Measure(src, options, out, &copy_wait_s);
  if (!s.ok())
    return s.WithContext("dsbench " + RedactUrl(path));  // a token URL's query is a secret
  if (src.copy) {
    // A copy still running when the batches end: wait, so that the next run finds the entry.
    const auto t0 = std::chrono::steady_clock::now();
    (void)src.copy->Wait();
    copy_wait_s += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    cr = src.copy->result();
    RamCacheResult& rc = out->ram_cache;
    rc.overlapped = true;
    rc.copy_wait_seconds = copy_wait_s;
    for (size_t i = 0; i < out->epochs.size() && rc.cache_from_epoch < 0; ++i) {
      if (out->epochs[i].records_cache > 0) rc.cache_from_epoch = static_cast<int>(i);
    }
    rc.cached = rc.cache_from_epoch >= 0;  // this run's loader read the copy
    rc.copied = cr.copied;
    rc.copy_seconds = cr.copy_seconds;
    rc.path = rc.cached ? cr.path : path;
    if (!cr.cached) {
      rc.note = cr.Describe();
    } else if (rc.cached) {
      rc.note = cr.Describe() + ", in the background; this run read in place, then the copy " +
                "from epoch " + std::to_string(rc.cache_from_epoch);
    } else {
      rc.note = cr.Describe() + ", in the background; this run read in place";
    }
  }
  if (options.ram_cache != "off") out->notes.push_back("ram cache: " + out->ram_cache.note);
  out->dataset.kind = kind;
  out->dataset.bytes = TotalSize(files);
  return Status::OK();
}

Status RunFolderProfile(const std::string& src, const ProfileOptions& options, ProfileResult* out) {
  *out = ProfileResult{};
  out->source = "folder";
  std::unique_ptr<FolderDataset> folder;
  DSPIPE_RETURN_IF_ERROR(FolderDataset::Open(src, &folder));
  const std::vector<std::string> files = folder->Files();
  if (options.drop_cache) DropCache(files, &out->cache);
  if (folder->skipped() > 0) {
    out->notes.push_back(std::to_string(folder->skipped()) +
                         " source item(s) left out (the scan rejected them; see dsconvert build)");
  }
  Counted counted;
  counted.dataset = std::make_shared<CountingDataset>(
      std::shared_ptr<const Dataset>(std::move(folder)), counted.in_place);
  double copy_wait_s = 0;
  Status s = Measure(counted, options, out, &copy_wait_s);
  if (!s.ok()) return s.WithContext("dsbench " + src);
  out->dataset.kind = "folder";
  out->dataset.bytes = TotalSize(files);
  return Status::OK();
}

}  // namespace dspipe::profile
