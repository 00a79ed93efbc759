// SPDX-License-Identifier: Apache-2.0
// dsbench's library: run the real loader over a dataset (or over a folder of image/mask files,
// through the very same loader stages), measure throughput and per-stage latency, diagnose the
// bottleneck, sweep configurations, and write the results as text, JSON, CSV and HTML.
// The CLI in tools/dsbench only parses flags and calls these. Internal to dspipe (not installed).
//
// What a run measures (see docs/DSBENCH.md):
//   warm-up: `warmup` batches are taken and discarded (pools fill, page cache and decoder warm);
//   then the stage stats are reset and `batches` batches (or `epochs` whole epochs) are taken.
//   After each batch the consumer simulates a training step of `compute_ms` by sleeping (a GPU
//   step leaves the CPU free, so a sleep and not a spin is the faithful model). seconds is the
//   wall time of the measured part, compute included: images_per_s is what training would get.
//
// Thread-safety: every function may be called from any thread; runs do not share state, but two
// runs at once share the CPUs and measure each other.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "dspipe/augment.h"
#include "dspipe/dataset.h"
#include "dspipe/device_loader.h"
#include "dspipe/loader.h"
#include "dspipe/sampler.h"
#include "dspipe/stats.h"
#include "dspipe/status.h"
#include "dspipe/timeline.h"
#include "dspipe/transforms.h"

namespace dspipe::profile {

struct ProfileOptions {
  // Loader shape. batch_size >= 1 (default 8); threads 0 (default) = the CPUs this process may
  // use; prefetch >= 1 batches in flight (default 2).
  int batch_size = 8;
  int threads = 0;
  int prefetch = 2;
  // Read-ahead window in samples (LoaderOptions::readahead): -1 (default) = prefetch x batch,
  // 0 = off. The folder source reads ahead the same way (POSIX_FADV_WILLNEED on its files).
  int readahead = -1;
  // Measured batches (default 100; wraps over epochs when the dataset is smaller). epochs > 0
  // measures that many whole epochs instead (long for big datasets, exact for small ones).
  uint64_t batches = 100;
  int epochs = 0;
  // Batches taken before measuring, >= 0. Default 2: enough to fill the prefetch queue and the
  // batch pool; more for a warm page cache on big datasets.
  int warmup = 2;
  // "cpu": dspipe::Loader, normalizing on its workers when `normalize`. "cuda": DeviceLoader on
  // CUDA device 0 (h2d + GPU normalize); Unsupported with the reason when it is not built or no
  // device is usable.
  std::string device = "cpu";
  // Simulated training step per batch in milliseconds (0 = none, default: pure loader speed).
  double compute_ms = 0;
  // CPU float32 NCHW normalization on the workers (device "cpu"). Default true: what a training
  // loop needs. Datasets without mean/std (plain LMDBs, folders) use `mean`/`std`, else 0 / 1.
  bool normalize = true;
  std::vector<double> mean;
  std::vector<double> std;
  // Where the mean/std come from when `mean`/`std` are empty (LoaderOptions::mean_std): kAuto
  // (default: the dataset's statistics; mean 0, std 1 for a dataset without them), kDataset or
  // kIdentity (mean 0, std 1, e.g. for a dataset whose manifest gives a channel a std of 0).
  MeanStdSource mean_std = MeanStdSource::kAuto;
  // Corrupt records skipped per epoch (LoaderOptions::max_corrupt). Default 0: the run fails at
  // the first, naming it.
  int max_corrupt = 0;
  // Dataset open options (DatasetOpenOptions): check each record's CRC on every read (default
  // false), LMDB reader slots (default 512), OS readahead on the map (default false).
  bool verify_crc = false;
  unsigned max_readers = 512;
  bool os_readahead = false;
  // Device "cuda" only (DeviceOptions; device "cpu" ignores them): the batches' image and mask
  // element types (default float32, int64) and device batch slots (default 2; max_slots, the
  // most batches held at once, 0 = no limit).
  ImageDtype dtype = ImageDtype::kFloat32;
  MaskDtype mask_dtype = MaskDtype::kInt64;
  int slots = 2;
  int max_slots = 0;
  // How a plain LMDB's keys pair into samples (masks, labels); see dspipe/dataset.h.
  PlainLmdbOptions plain;
  // Per-sample augmentation (default none): flips, random resized crop, image interpolation.
  AugmentOptions augment;
  // Output size and channels (LoaderOptions::height / width / channels): 0 (default) = the
  // dataset's. A dataset of varying sizes needs a size here (each sample is then resized to it,
  // cropped first with augment's crop) or a `transform` ending in a fixed size.
  int height = 0;
  int width = 0;
  int channels = 0;
  // A transform pipeline (dspipe/transforms.h, `dsbench --transform FILE.json`) instead of
  // `augment`; nullptr (default) = augment's. Its Normalize gives the mean/std.
  std::shared_ptr<const TransformPipeline> transform;
  // Shuffled order with this seed (default true, 0).
  bool shuffle = true;
  uint64_t seed = 0;
  // The rank whose loading is measured (SamplerOptions order / block_size / world_size /
  // rank, docs/SCALE.md): the loader reads only this rank's share of each epoch, so
  // `epochs` measures this rank's epochs. Defaults: order kGlobal, block_size 4096, one rank
  // (rank 0 of world_size 1). Order kShards opens the dataset lazily and, with ram_cache, caches
  // per shard, as Loader::Open does (OpenLoaderDataset). 0 <= rank < world_size.
  SampleOrder order = SampleOrder::kGlobal;
  uint64_t block_size = 4096;
  int rank = 0;
  int world_size = 1;
  // When world_size does not divide the epoch (SamplerOptions::remainder): kPad (default),
  // kDrop or kUneven. drop_last drops a rank's last batch of an epoch when it is short
  // (LoaderOptions::drop_last; default false).
  RemainderRule remainder = RemainderRule::kPad;
  bool drop_last = false;
  // Evict the dataset's files from the page cache (posix_fadvise DONTNEED) before the run, to
  // measure cold I/O. Whether it worked is reported in ProfileResult::cache.
  bool drop_cache = false;
  // RAM-disk cache (dspipe/cache.h, LoaderOptions::cache): "off" (default), "auto" or a
  // directory. A dataset already in the cache is read from it. One not there yet is read in
  // place while the copy is made on a background thread, as Loader::Open does: the loader
  // switches to the copy at the first epoch boundary after it committed (ProfileResult::epochs
  // says where each epoch read from), and a run that ends before the copy does waits for it:
  // ProfileResult::ram_cache.copy_seconds and copy_wait_seconds. With drop_cache the source's
  // page cache is dropped first, so a copy reads it cold. Not for folders (--compare).
  std::string ram_cache = "off";
  // With a background copy (above): at the end of the first measured epoch, wait for the copy
  // to commit or fail (the wait is copy_wait_seconds, outside `seconds` and the epoch's time),
  // so that epoch 0 reads in place and the later epochs read the copy. Default false: the
  // loader switches whenever the copy is ready, as in training.
  bool cache_wait = false;
  uint64_t cache_limit = 0;  // LoaderOptions::cache_limit; 0 = only the budget
  // LoaderOptions::cache_overlap; false: the copy is made before the loader starts (its time
  // is copy_seconds, outside the measured batches) and the run reads the copy.
  bool cache_overlap = true;
  // LoaderOptions::stream_ahead: a remote sharded dataset in order shards/blocks is streamed,
  // this many shards fetched ahead.
  int stream_ahead = 2;
  // Write a Chrome trace of the whole run (warm-up included) here; "" = none. At most
  // trace_events_per_thread spans per thread are kept (32 bytes each).
  std::string trace_path;
  size_t trace_events_per_thread = size_t{1} << 16;
  // Resource timeline over the measured part (ResourceTimeline): a sample every sample_ms
  // milliseconds (default 500); 0 = none. Goes to the JSON, the HTML chart, the Chrome trace
  // (counter tracks) and ReportTimelineCsv.
  int sample_ms = 500;
};

struct DatasetSummary {
  std::string path;
  std::string kind;   // "dspipe" | "sharded" | "plain" | "folder"
  std::string store;  // "encoded" | "raw" | "plain"
  uint64_t count = 0;
  int height = 0;  // batch sample size (after the loader resolved it)
  int width = 0;
  int channels = 0;
  bool has_masks = false;
  // The samples' types (dspipe/format.h SampleTypeName): "uint8" unless the dataset is typed.
  std::string sample_type = "uint8";
  std::string mask_type = "uint8";
  uint64_t bytes = 0;  // on disk: LMDB data files, or the folder's image and mask files
};

struct CacheDrop {
  bool requested = false;
  uint64_t files = 0;    // files found to drop
  uint64_t dropped = 0;  // files whose pages were dropped
  std::string note;      // what happened, e.g. "could not drop 1 of 2 files: .../data.mdb"
};

// What the RAM-disk cache did for this run (ProfileOptions::ram_cache).
struct RamCacheResult {
  std::string mode = "off";
  bool cached = false;      // the loader read a copy in the cache
  bool copied = false;      // this run made the copy
  double copy_seconds = 0;  // time to make it (0 when it was there)
  // The copy ran in the background during the measured batches (read in place meanwhile).
  bool overlapped = false;
  // How long the run waited for it: after its batches, or at the end of the first epoch with
  // ProfileOptions::cache_wait. Outside `seconds`.
  double copy_wait_seconds = 0;
  // overlapped: the first measured epoch (ProfileResult::epochs index) read from the copy, or
  // -1 when the loader stayed in place for the whole run.
  int cache_from_epoch = -1;
  std::string path;         // what the loader read (last: the copy once it switched)
  std::string note;         // CacheResult::Describe(): "cached at ..." / "in place: why"
};

// One epoch of the measured part (with `batches`, the first one, after the warm-up, and the last
// one may be partial).
struct EpochResult {
  uint64_t batches = 0;
  uint64_t images = 0;
  double seconds = 0;  // its wall time (compute included, a cache_wait excluded)
  double images_per_s = 0;
  // Records and stored bytes read during it, from the dataset in place and from the RAM-disk
  // cache's copy (overlapped runs switch between them at an epoch boundary).
  uint64_t records_in_place = 0, bytes_in_place = 0;
  uint64_t records_cache = 0, bytes_cache = 0;
  // Where it read from: "in place", "cache" (the copy: after the switch, or for the whole run
  // when the entry was there at open), "in place + cache" (a partial last epoch only),
  // "stream" (a remote dataset streamed through the cache: docs/STORAGE.md) or "none"
  // (nothing read).
  std::string source;
  // Streamed: what the stream did during the epoch (ShardStream::stats): shards fetched and
  // their bytes (the network), shard reads that found their shard cached and reads that waited
  // for a fetch, and the time those reads waited (summed over the loader's threads).
  bool streamed = false;
  uint64_t net_fetches = 0, net_bytes = 0, shard_hits = 0, shard_waits = 0;
  double net_wait_seconds = 0;
};

struct ProfileResult {
  std::string source;  // "lmdb" (any dspipe Dataset) | "folder"
  DatasetSummary dataset;
  ProfileOptions config;  // as run: threads resolved, normalize as actually done
  LoaderShape shape;
  CacheDrop cache;
  RamCacheResult ram_cache;
  uint64_t batches = 0;  // measured batches
  uint64_t images = 0;   // samples in them
  double seconds = 0;    // wall time of the measured batches (compute included)
  double images_per_s = 0;
  double mb_per_s = 0;          // stored bytes read per second (record / file bytes, 1e6 B)
  double decoded_mb_per_s = 0;  // uint8 pixels delivered per second (images + masks, 1e6 B)
  std::vector<StageSummary> stages;
  std::vector<EpochResult> epochs;  // in order; the measured part's epochs
  Verdict verdict;
  std::vector<std::string> notes;  // things the reader should know (fallbacks, cache, ...)
  std::vector<ResourceSample> timeline;  // empty when sample_ms = 0
  bool timeline_gpu = false;             // NVML answered: GPU fields are present
};

// Runs the loader over the dataset at `path` (any path Dataset::Open accepts).
Status RunProfile(const std::string& path, const ProfileOptions& options, ProfileResult* out);
// Runs the same loader stages over a folder with images/ (+ masks/, paired by stem): each
// sample's read is a file read plus a header probe, then the loader's own decode, augment,
// collate and normalize. Also accepts what `dsconvert build` accepts as SRC (CSV, ImageFolder).
Status RunFolderProfile(const std::string& src, const ProfileOptions& options, ProfileResult* out);

// --sweep "threads=1,2 prefetch=1,2,4 batch=8,16": keys threads | prefetch | batch, each a comma
// list of positive integers; missing keys keep the base value. Whitespace separates keys.
struct SweepSpec {
  std::vector<int> threads;
  std::vector<int> prefetch;
  std::vector<int> batch;
};
Status ParseSweep(std::string_view text, SweepSpec* out);

struct SweepResult {
  std::vector<ProfileResult> runs;  // batch-major, then threads, then prefetch
  int best = -1;                    // index of the highest images_per_s
};
// Runs every combination over `path` (no trace). Stops at the first failing run.
Status RunSweep(const std::string& path, const ProfileOptions& base, const SweepSpec& spec,
                SweepResult* out);

// Everything one dsbench invocation measured. `run` is the main result: the LMDB run, or the
// sweep's best configuration.
struct Report {
  ProfileResult run;
  std::optional<SweepResult> sweep;
  std::optional<ProfileResult> folder;  // --compare: the folder run beside `run`
};

// The stable --json document (docs/DSBENCH.md).
nlohmann::json ReportJson(const Report& report);
// CSV: one row per stage ("source,stage,..."), or per sweep configuration after a sweep.
std::string ReportCsv(const Report& report);
// --timeline-csv: one row per timeline sample of the main run (header row first; GPU columns
// empty when absent).
std::string ReportTimelineCsv(const Report& report);
// --epochs-csv: one row per measured epoch of the main run (header row first):
// epoch,source,batches,images,seconds,images_per_s,records_in_place,bytes_in_place,
// records_cache,bytes_cache.
std::string ReportEpochsCsv(const Report& report);
// One self-contained HTML page (inline CSS and SVG; no scripts, no external references).
std::string ReportHtml(const Report& report);
// The console report: config, throughput, stage table, verdict and suggestions, and the sweep or
// comparison table.
std::string ReportText(const Report& report);

}  // namespace dspipe::profile
