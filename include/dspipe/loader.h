// SPDX-License-Identifier: Apache-2.0
// dspipe::Loader: batches of decoded, augmented samples from a dataset, produced by a bounded
// oneTBB worker pool ahead of the consumer. See docs/LOADER.md for the full rules.
//
//   std::unique_ptr<Loader> loader;
//   DSPIPE_RETURN_IF_ERROR(Loader::Open("train.lmdb", options, &loader));
//   for (uint64_t epoch = 0; epoch < 10; ++epoch) {
//     loader->set_epoch(epoch);
//     Batch batch;
//     while (true) {
//       DSPIPE_RETURN_IF_ERROR(loader->Next(&batch));
//       if (!batch) break;  // end of this epoch
//       Train(batch);
//     }
//   }
//
// Determinism: the samples of every batch, their order and their augmentation depend only on
// (options, seed, epoch, dataset) - never on the thread count or timing - so 1, 2 or 4 threads
// give byte-identical batches, and state()/Restore() resume mid-epoch exactly.
//
// Memory: at most `prefetch` batches are in flight plus the ones the consumer holds; batch
// buffers come from a pool and are reused (see batch.h). Nothing grows with the dataset size
// or the number of epochs except the epoch order (8 bytes per sample of this rank; the default
// kGlobal order also builds the whole dataset's permutation at each epoch start, see sampler.h).
//
// Thread-safety: the consumer's calls (Next, set_epoch, BeginPass, Restore, state, epoch and
// the batch counts) may come from any thread and are serialized: two threads calling Next get
// distinct batches, each once, and state() is the position after the last batch handed out
// (never one torn mid-Next). stats() and pool_buffers() may be called from any thread.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "dspipe/augment.h"
#include "dspipe/batch.h"
#include "dspipe/cache.h"
#include "dspipe/cpus.h"
#include "dspipe/dataset.h"
#include "dspipe/normalize.h"
#include "dspipe/sampler.h"
#include "dspipe/stats.h"
#include "dspipe/status.h"
#include "dspipe/transforms.h"

namespace dspipe {

enum class NormalizeMode {
  kNone,        // only uint8 NHWC images (e.g. the GPU normalizes)
  kCpuFloat32,  // also float32 NCHW (x - mean) / std in Batch::normalized(), on the workers
};

// Where the mean/std come from when LoaderOptions::mean/std are empty (docs/LOADER.md, the
// options table; docs/TRANSFORMS.md, Normalize).
enum class MeanStdSource {
  // The transform pipeline's Normalize when it has one; else, with a transform pipeline, mean 0
  // and std 1 (albumentations' meaning: a pipeline without Normalize gives 0..255 values);
  // without one, the dataset manifest's statistics.
  kAuto,
  // The dataset manifest's statistics, also under a transform pipeline without Normalize (its
  // Normalize, when it has one, still gives them).
  kDataset,
  // None: mean 0, std 1 (pixel values 0..255 as floats), unless the pipeline has a Normalize
  // (it is applied). mean/std given with it are an error.
  kIdentity,
};

// Every field is listed in dspipe/option_fields.h (a static_assert says when one is not), which
// the Python binding and the resume identity walk.
struct LoaderOptions {
  // Samples per batch, >= 1. Default 8. Larger batches amortize per-batch costs; the memory of
  // (prefetch + 1) batches is held.
  int batch_size = 8;
  // Worker threads decoding in parallel; 0 (default) = the CPUs this process may run on
  // (sched_getaffinity, so taskset / cgroup cpusets are honoured).
  int threads = 0;
  // Batches produced ahead of the consumer, >= 1. Default 2. More smooths out slow samples at
  // the cost of one batch buffer each; it cannot raise the sustained rate.
  int prefetch = 2;
  // Read-ahead window in samples: as batches are submitted, the loader asks the dataset to start
  // loading the records of the next `readahead` positions of the epoch's order beyond them
  // (Dataset::WillNeed), so cold records are on their way before a worker reads them. It never
  // advises more than this many samples past the last submitted one, nor across an epoch's end.
  // -1 (default) = prefetch * batch_size; 0 = off. Costs page cache, not process memory.
  int readahead = -1;
  // Order and sharding across ranks: shuffle (default true), seed (0), world_size (1),
  // rank (0), remainder rule (kPad), order (kGlobal), block_size (4096). See sampler.h for
  // the rules. Order kShards opens the dataset with DatasetOpenOptions::lazy_shards (Open), so
  // a rank maps only the shards it reads; samples_per_epoch() / batches_per_epoch() then
  // describe the current epoch (they vary with kShards + kUneven).
  SamplerOptions sampler;
  // Drop this rank's last batch of an epoch when it has fewer than batch_size samples.
  // Default false: the last batch is smaller.
  bool drop_last = false;
  // Output size in pixels; 0 (default) = the dataset's. Samples of another size are resized.
  // 0 on a dataset whose sizes vary (the manifest fixes none) is refused by Create unless the
  // pipeline fixes the size; on a plain LMDB (sizes unknown) record 0 sizes the batches and a
  // record of another size is an InvalidArgument naming it (never resized to record 0's).
  // With a `transform`: 0 = the size the pipeline ends in; a pipeline whose output size is not
  // fixed gets a final Resize to this size (or the dataset's, or record 0's for plain LMDBs);
  // a size that differs from the one the pipeline fixes is an error.
  int height = 0;
  int width = 0;
  // Image channels: 0 (default) = the dataset's; 1 or 3 converts (gray <-> RGB) while decoding.
  int channels = 0;
  // Random flips / crops, applied identically to image and mask. Default: none. Sugar for the
  // pipeline [RandomResizedCrop, HorizontalFlip, VerticalFlip] (augment.h); one code path.
  AugmentOptions augment;
  // An albumentations 2.0.8 pipeline (dspipe/transforms.h, docs/TRANSFORMS.md) the workers
  // apply to image and mask; nullptr (default) = the one `augment` stands for (set one of the
  // two). Checked by Create before the first batch: records whose sizes vary need a pipeline
  // that ends in a fixed size (or height/width); CropNonEmptyMaskIfExists needs masks; the
  // pipeline's Normalize supplies mean/std (pixel units) when `mean`/`std` are empty (both set:
  // an error) - the normalize itself is this loader's `normalize` (or the DeviceLoader's).
  std::shared_ptr<const TransformPipeline> transform;
  // Leave horizontal flips to the consumer: pixels are not flipped, Batch::hflip() says which
  // samples to mirror (e.g. GpuNormalizer's per-sample mirror flags, which flip for free).
  // Default false.
  bool defer_hflip = false;
  // Normalization. Default kNone.
  NormalizeMode normalize = NormalizeMode::kNone;
  // Per-channel mean / std in pixel units [0, 255]; empty (default) = the dataset manifest's
  // statistics. Required when the dataset has none (plain LMDBs) and normalize != kNone.
  std::vector<double> mean;
  std::vector<double> std;
  // Where mean/std come from when both are empty. Default kAuto (see MeanStdSource).
  MeanStdSource mean_std = MeanStdSource::kAuto;
  // Corrupt records (bad header, CRC, payload that does not decode) tolerated per epoch. 0
  // (default): Next fails with an error naming the key and the reason. N > 0: such samples are
  // skipped (their batch comes out smaller, order otherwise unchanged) and counted in
  // corrupt_skipped() and listed, with their keys, in corrupt_records(); the (N+1)-th in one
  // epoch fails like N = 0. An epoch whose records were all skipped ends with kAborted (not
  // silently empty): a setting every sample fails is a configuration error.
  int max_corrupt = 0;
  // Where batch buffers come from; nullptr (default) = DefaultBatchAllocator() (aligned
  // malloc). The CUDA path passes a pinned-memory allocator.
  std::shared_ptr<BatchAllocator> allocator;
  // Dataset open options for Loader::Open (verify_crc default false, os_readahead false).
  DatasetOpenOptions dataset;
  // RAM-disk cache for Loader::Open / DeviceLoader::Open (dspipe/cache.h, docs/CACHE.md):
  // "off" (default: read the dataset where it is), "auto" (copy it into this user's
  // /dev/shm/dspipe-cache-<uid> when /dev/shm is a tmpfs) or a directory to copy it into. The
  // copy is made once per machine (other processes share it) when it fits the budget: free
  // space and, on a tmpfs, MemAvailable less this loader's batch buffers (an estimate:
  // prefetch + 2 batches), less a 512 MiB margin. Otherwise the dataset is read in place.
  // Either way one line says which and why. A dataset not in the cache yet is read in place at
  // once while the copy is made (or another process makes it) on a background thread; the
  // loader reads the copy from the first epoch boundary after it has committed (reading_from()
  // says which); a failed copy leaves it in place, never fails the loader. Loader::Create (an
  // already open dataset) ignores it. An http(s):// dataset URL as the path is always fetched
  // into the cache ("off" counts as "auto" for it); one that cannot be cached is an error (see
  // OpenDatasetCached). With sampler.order kShards
  // over a local sharded dataset, one entry per shard, and only the shards this rank reads
  // (this epoch's and the next's) are copied (docs/CACHE.md "Order shards").
  std::string cache = "off";
  // Capacity of the cache directory in bytes; least recently used entries that no live process
  // reads are evicted to make room. 0 (default) = only the budget limits it.
  uint64_t cache_limit = 0;
  // true (default): a dataset not in the cache yet is read in place while the copy is made in
  // the background (above). false: the copy is made (or waited for) before Open returns, and
  // every epoch reads it (order kShards: each epoch's shards are copied before it reads).
  bool cache_overlap = true;
  // A remote (s3://, http(s)://) sharded dataset read in order kShards or kBlocks is streamed
  // through the cache shard by shard (docs/STORAGE.md "Streaming"): this many shards are
  // fetched at once ahead of the reader (>= 1). Default 2. The cache (cache_limit, else its
  // budget) must hold stream_ahead + 1 of the largest shard: a smaller one is an error at Open
  // naming the minimum.
  int stream_ahead = 2;
};

// One corrupt record a loader met: which one and why.
struct CorruptRecord {
  uint64_t index = 0;  // dataset index
  std::string key;     // its key, as Dataset::KeyName shows it
  uint64_t epoch = 0;  // the epoch it was first met in
  std::string reason;  // the error (kCorruption / kBadInput), naming the key and the cause
  // The source file the build made it from (the dataset's per-record source table, as
  // dsconvert's rejected.tsv names files); "" for plain LMDBs and older datasets.
  std::string source;
};

// The corrupt records a loader met so far, all epochs (see LoaderOptions::max_corrupt).
struct CorruptReport {
  static constexpr size_t kMaxListed = 64;
  // Corrupt records met, counting a record again in each epoch it is met: corrupt_skipped().
  uint64_t count = 0;
  // The first kMaxListed distinct records met, in the order they were met.
  std::vector<CorruptRecord> records;
  // True when a record beyond those was met too: the list is not all of them.
  bool truncated = false;
};

// Where a rank is in its stream of batches. Save it with a checkpoint; Restore it into a loader
// made with the same options and the same data to continue with exactly the batches an
// uninterrupted run would have produced. A state taken at any point is valid: mid-epoch, after
// an epoch's last batch (position = the epoch's samples: the rest of that epoch is empty), or
// between epochs (the next epoch, position 0).
//
// Identity: what the state is valid for. The data is identified by its content (the sha256 of
// the manifest and the record count; for a plain LMDB, of its first and last records and keys),
// never by its path, so a state resumes on a moved copy, on the RAM-disk cache's copy and on the
// dataset fetched from a URL. The options that decide the batch stream (the fields marked
// kInState in dspipe/option_fields.h: batch size, ranks, order, remainder, drop_last, size,
// augmentation, the transform pipeline as its JSON) are kept as name=value pairs. Restore
// refuses a state whose identity differs, naming every difference. A state without identity
// (dataset_sha256 empty: made by hand) is not checked.
struct LoaderState {
  uint64_t seed = 0;           // the sampler / augmentation seed
  uint64_t epoch = 0;          // current epoch
  uint64_t position = 0;       // samples of this rank's epoch order already handed out
  std::string dataset_sha256;  // content identity (64 hex digits); "" = not checked
  uint64_t dataset_count = 0;  // records in the dataset
  std::string dataset_path;    // where it was read; informative only (messages), never checked
  // ("sampler.rank", "1"), ... in option_fields.h order; empty = not checked.
  std::vector<std::pair<std::string, std::string>> options;

  // A position without identity (not checked by Restore), e.g. one kept by hand.
  static LoaderState At(uint64_t seed, uint64_t epoch, uint64_t position) {
    LoaderState s;
    s.seed = seed;
    s.epoch = epoch;
    s.position = position;
    return s;
  }
};

class Loader {
 public:
  // Opens the dataset at `path` (Dataset::Open with options.dataset) and creates a loader.
  static Status Open(const std::string& path, const LoaderOptions& options,
                     std::unique_ptr<Loader>* out);
  // Creates a loader over an open dataset (shared: several loaders may read one dataset).
  // Errors: InvalidArgument naming the bad option.
  static Status Create(std::shared_ptr<const Dataset> dataset, const LoaderOptions& options,
                       std::unique_ptr<Loader>* out);
  virtual ~Loader() = default;

  // The next batch of the current epoch into *out (whatever *out held is released first, so
  // reusing one Batch keeps the pool at prefetch + 1 buffers). At the end of the epoch *out is
  // left empty and OK is returned once; the loader then moves on to the next epoch.
  // Errors name the dataset key and the reason; the failing batch is skipped (the position
  // moves past it), so the caller may stop or continue. A batch buffer the allocator cannot
  // provide (kAborted) skips nothing: calling again retries. When that happens while refilling
  // the pipeline after a batch was handed out, the next call returns it.
  virtual Status Next(Batch* out) = 0;

  // Starts epoch `epoch` from its beginning (drops batches already prefetched) - except when
  // the loader is in `epoch` already and no batch has been taken since its position was set
  // (a Restore, or the epoch just began): then it continues from there. So the usual loop
  //   for (e = restored.epoch; e < E; ++e) { set_epoch(e); while (Next(&b), b) ... }
  // continues a restored state's epoch instead of replaying it.
  virtual void set_epoch(uint64_t epoch) = 0;
  virtual uint64_t epoch() const = 0;
  // Begins a pass for a consumer that iterates epoch by epoch (Python's iter(loader), a
  // DataLoader epoch): when no batch has been taken since the position was set (a new loader,
  // set_epoch, Restore, or the previous epoch ran to its end), the pass continues from there;
  // otherwise the current epoch was left part-way and the pass starts the next one.
  virtual void BeginPass() = 0;
  // Batches per epoch for this rank, and samples per epoch (after sharding, before skips), of
  // the current epoch (the same for every epoch except with order kShards + kUneven).
  virtual uint64_t batches_per_epoch() const = 0;
  virtual uint64_t samples_per_epoch() const = 0;
  // Batches this rank has left in the current epoch: batches_per_epoch() at its start, fewer as
  // batches are taken, what a restored position leaves. (A batch whose samples were all skipped
  // as corrupt still counts.)
  virtual uint64_t batches_left() const = 0;
  // Batches the next pass makes (BeginPass, then Next to the epoch's end): batches_left() when
  // the position is pending (nothing taken since it was set), else the next epoch's
  // batches_per_epoch() - a pass that follows a partial one starts the next epoch. Python's
  // len(loader) and so torch's DataLoader length.
  virtual uint64_t batches_in_next_pass() const = 0;

  // Where the loader is, with its identity (LoaderState). Valid at any point.
  virtual LoaderState state() const = 0;
  // Continues from `state` (its seed replaces options.sampler.seed). InvalidArgument when the
  // identity differs (every difference named) or position exceeds the epoch.
  virtual Status Restore(const LoaderState& state) = 0;

  // The shape of every batch and the resolved options (threads, size, mean/std filled in).
  virtual const BatchShape& shape() const = 0;
  virtual const LoaderOptions& options() const = 0;
  // The dataset records are read from now. With a background cache copy (LoaderOptions::cache)
  // it is the in-place dataset until the copy has committed, then the copy from the next epoch
  // boundary on: a reference taken before stays valid as long as the loader lives.
  virtual const Dataset& dataset() const = 0;
  // Where records are read from, one line: "PATH" (no cache, or opened from it), "PATH (in
  // place, copying into the cache)", "PATH (in place, the cache's copy is ready: used from the
  // next epoch)", "PATH (cache, since epoch N)" or "PATH (in place: REASON)" (the cache did not
  // take it or the copy failed). Consumer thread, like dataset().
  virtual std::string reading_from() const = 0;
  // Per-stage timing of this loader (read, decode, transform, collate, normalize, wait), with a
  // row per pipeline segment under transform (docs/STATS.md).
  virtual StageStats& stats() = 0;
  // The shape to pass to Diagnose(stats(), shape, compute_ms).
  virtual LoaderShape loader_shape() const = 0;
  // Corrupt records skipped so far (all epochs).
  virtual uint64_t corrupt_skipped() const = 0;
  // Which records those were (bounded: CorruptReport::kMaxListed keys, then just counted).
  virtual CorruptReport corrupt_records() const = 0;
  // Batch buffers allocated now: prefetch + 1 in steady state when batches are released; more
  // while the consumer holds batches, back to at most prefetch + 2 as they are released.
  virtual size_t pool_buffers() const = 0;
  // What Create found suspicious but not wrong enough to refuse, one line each, each also
  // logged once (warn level) when the loader was created: mean/std that look like 0..1 units
  // on 0..255 pixels. Empty when nothing was.
  virtual const std::vector<std::string>& warnings() const = 0;
};

}  // namespace dspipe
