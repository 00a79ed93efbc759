// SPDX-License-Identifier: Apache-2.0
// dspipe/stats.h: per-stage timing, percentiles, the bottleneck verdict and the Chrome trace.
//
// A loader owns one StageStats and records every stage of every sample and batch into it; it is
// always on. Recording is lock-free (relaxed atomics into a fixed log-bucketed histogram), costs
// tens of nanoseconds, and uses a fixed amount of memory however long the run is. Optional
// tracing additionally keeps up to N spans per thread for a Chrome / Perfetto timeline.
//
// Thread safety: every StageStats method may be called from any thread at any time, including
// Record/RecordSpan concurrently with Summary/Reset/WriteChromeTrace. A Summary taken while
// other threads record is a consistent-enough snapshot (each counter is read atomically, not the
// set of them together). Diagnose/FormatTable are pure functions.
//
// Stage vocabulary, verdict rules and JSON field names: docs/STATS.md.
#pragma once

#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

#include "dspipe/status.h"

namespace dspipe {

// The fixed stage vocabulary. read/decode/transform are per-sample worker time; collate, h2d and
// normalize are per batch; wait is how long the consumer blocked in Next() for a batch.
// Values index arrays; kCount is the number of stages, not a stage.
enum class Stage : int {
  kRead = 0,       // fetch one record's bytes (LMDB get + copy, or the file read)
  kDecode = 1,     // bytes -> pixels (PNG/JPEG decode, or zstd inflate of a raw record)
  kTransform = 2,  // per-sample CPU transforms (LoaderOptions::transform: crop, resize, flip)
  kCollate = 3,    // copy the samples of one batch into the batch buffer
  kH2D = 4,        // host -> device copy of one batch
  kNormalize = 5,  // one batch's uint8 -> float normalize (CPU or GPU, see LoaderShape::gpu)
  kWait = 6,       // consumer blocked in Next() until a batch was ready
  kCount = 7,
  // Not a stage of the vocabulary above (no kNumStages array holds it): the rows that break
  // transform down by pipeline segment (StageStats::SetTransformRows); per sample.
  kSegment = 8,
};
inline constexpr int kNumStages = static_cast<int>(Stage::kCount);

// "read", "decode", "transform", "collate", "h2d", "normalize", "wait"; "segment" for
// kSegment; "none" for kCount.
const char* StageName(Stage stage);

// How one sample's image was decoded (docs/DECODE.md): the decode router's choice, counted per
// sample by StageStats::RecordDecodePath. Values index arrays; kCount is not a path.
enum class DecodePath : int {
  kFull = 0,         // the whole image at full size (PNG, other formats, JPEG with nothing to save)
  kRoi = 1,          // JPEG: only the MCUs covering the crop; 8-bit PNG: the crop (PngRegionDecode)
  kScaled = 2,       // JPEG: the whole image at a DCT scale (1/8, 1/4, 1/2)
  kRoiScaled = 3,    // JPEG: the crop's MCUs at a DCT scale
  kProgressive = 4,  // JPEG, progressive: a crop was wanted; decoded whole (maybe scaled), cropped
  kFused = 5,        // PNG fast path with flip (and normalize) fused into the decode
  kRaw = 6,          // raw / raw+zstd record: no image decode
  kCount = 7,
};
inline constexpr int kNumDecodePaths = static_cast<int>(DecodePath::kCount);
// "full", "roi", "scaled", "roi+scaled", "progressive", "fused", "raw"; "none" for kCount.
const char* DecodePathName(DecodePath path);

// Samples decoded on one path and their decode time (the decode stage's spans of those samples).
struct DecodePathSummary {
  DecodePath path = DecodePath::kCount;
  uint64_t count = 0;
  double total_ms = 0;
  double mean_ms = 0;
};

// Monotonic clock (std::chrono::steady_clock) in nanoseconds since an arbitrary epoch.
uint64_t NowNs();

// A small process-wide integer id for the calling OS thread (1, 2, 3... in order of first use;
// never reused). Used as the trace's tid.
int CurrentThreadId();
// Names the calling thread in every trace written afterwards ("worker-3", "consumer").
// Process-wide; the last name set wins. Threads without a name appear as "thread-<id>".
void SetThreadName(std::string_view name);

// One stage's numbers. Percentiles come from the histogram: within ~1.6% of the exact
// nearest-rank value (half a bucket), exact below 32 ns; clamped to [min, max].
struct StageSummary {
  Stage stage = Stage::kCount;
  // kSegment rows: which segment of the pipeline (0-based) and its label, e.g.
  // "geometric: RandomCrop > HorizontalFlip" (TransformPipeline::segment_labels()).
  int row = -1;
  std::string label;
  uint64_t count = 0;    // number of records
  double total_ms = 0;   // sum of all durations
  double mean_ms = 0;    // total_ms / count
  double stddev_ms = 0;  // population standard deviation (from the histogram)
  double min_ms = 0;     // exact
  double p50_ms = 0;     // median
  double p95_ms = 0;
  double p99_ms = 0;
  double max_ms = 0;  // exact
  // kSegment rows: samples whose segment ran fused into another stage's pass (the normalize
  // pass, or the PNG decode with its flips and row ops), so their time is in that stage; count
  // and the times above are the other samples'.
  uint64_t folded = 0;
};

class StageStats {
 public:
  // Histogram layout: values below 32 ns get one bucket each; above, every power of two is split
  // into 32 linear sub-buckets (relative width 1.6%..3.1%) up to 2^41 ns (~37 min); larger
  // values land in the last bucket (max_ms stays exact).
  static constexpr int kSubBits = 5;
  static constexpr int kBuckets = (41 - kSubBits + 1) << kSubBits;  // 1184

  StageStats();
  ~StageStats();
  StageStats(const StageStats&) = delete;
  StageStats& operator=(const StageStats&) = delete;

  // Records one duration. Lock-free; ~4 relaxed atomic RMWs. stage must be < kCount.
  void Record(Stage stage, uint64_t ns) noexcept;
  // Records end_ns - start_ns (0 if end < start) and, when tracing is on, a trace span on the
  // calling thread's buffer. id is the sample index (per-sample stages) or batch number.
  void RecordSpan(Stage stage, uint64_t start_ns, uint64_t end_ns, uint64_t id = 0) noexcept;

  StageSummary Summary(Stage stage) const;
  // Summaries of the stages with count > 0, in Stage order, with the segment rows that have
  // a count (or folded samples) right after transform (they break transform down; Diagnose does
  // not count them).
  std::vector<StageSummary> Summaries() const;

  // The transform rows: one per pipeline segment, labelled (at most kMaxTransformRows; later
  // segments share the last row). Call before recording (the loader does, at creation); a
  // second call is ignored.
  static constexpr int kMaxTransformRows = 16;
  void SetTransformRows(const std::vector<std::string>& labels);
  // Records one segment's time for one sample (and a "transform" trace span). Lock-free; a
  // no-op before SetTransformRows.
  void RecordTransform(int row, uint64_t start_ns, uint64_t end_ns, uint64_t id = 0) noexcept;
  // Counts one sample whose segment `row` ran fused into another stage's pass (timed there):
  // StageSummary::folded. Lock-free; a no-op before SetTransformRows.
  void CountFoldedTransform(int row) noexcept;
  StageSummary TransformSummary(int row) const;
  // Counts one sample's image decode on `path`, taking decode_ns (lock-free, 2 relaxed adds).
  // The decode span itself is recorded separately (RecordSpan(kDecode, ...)).
  void RecordDecodePath(DecodePath path, uint64_t decode_ns) noexcept;
  // The paths with count > 0, in DecodePath order. Reset() zeroes them too.
  std::vector<DecodePathSummary> DecodePaths() const;
  // Zeroes all counters and restarts the elapsed clock (e.g. after a warm-up). Safe while other
  // threads record; a record racing with Reset may land on either side of it. Does NOT clear
  // trace events: the trace keeps the whole run, warm-up included.
  void Reset();
  // Wall-clock nanoseconds since construction or the last Reset.
  uint64_t ElapsedNs() const;

  // Turns tracing on: from now on RecordSpan also stores an event, at most max_events_per_thread
  // per thread (32 bytes each, allocated on a thread's first span); later ones are counted as
  // dropped. The first call sets the limit; later calls are ignored. Off by default.
  void EnableTrace(size_t max_events_per_thread);
  bool trace_enabled() const { return trace_enabled_.load(std::memory_order_acquire); }
  // Events dropped because a thread's buffer was full.
  uint64_t dropped_trace_events() const;
  // Writes Chrome Trace Event JSON ("X" complete events, ts/dur in microseconds since this
  // object's construction, name = stage, args.id; "M" thread_name metadata per thread) for
  // chrome://tracing or ui.perfetto.dev. Writes path.tmp then renames it over path. Works with
  // tracing off (an empty timeline). Errors name the path.
  Status WriteChromeTrace(const std::string& path) const;
  // NowNs() at construction: the trace's time zero.
  uint64_t origin_ns() const { return origin_ns_; }

 private:
  struct alignas(64) Counters {
    std::atomic<uint64_t> count{0};
    std::atomic<uint64_t> total_ns{0};
    std::atomic<uint64_t> min_ns{UINT64_MAX};
    std::atomic<uint64_t> max_ns{0};
    std::atomic<uint64_t> folded{0};  // transform rows only: CountFoldedTransform
    std::array<std::atomic<uint64_t>, kBuckets> buckets{};
  };
  struct TraceBuffer;
  TraceBuffer* BufferForThisThread();
  static void RecordInto(Counters& c, uint64_t ns) noexcept;
  static StageSummary SummaryOf(const Counters& c, Stage stage);
  static void ResetCounters(Counters& c);
  void TraceSpan(Stage stage, uint64_t start_ns, uint64_t dur, uint64_t id) noexcept;

  std::array<Counters, kNumStages> counters_;
  // Transform rows: written once by SetTransformRows (under trace_mu_) before the pointer is
  // published (release); readers acquire it.
  std::unique_ptr<std::array<Counters, kMaxTransformRows>> transform_rows_;
  std::vector<std::string> transform_labels_;
  std::atomic<int> transform_count_{0};
  struct PathCounters {
    std::atomic<uint64_t> count{0};
    std::atomic<uint64_t> total_ns{0};
  };
  std::array<PathCounters, kNumDecodePaths> paths_;
  std::atomic<uint64_t> start_ns_;
  const uint64_t origin_ns_;  // trace time zero
  const uint64_t serial_;     // unique per object: keys the per-thread buffer cache

  std::atomic<bool> trace_enabled_{false};
  size_t trace_capacity_ = 0;  // written once under trace_mu_ before trace_enabled_ (release)
  mutable std::mutex trace_mu_;
  std::vector<std::unique_ptr<TraceBuffer>> trace_buffers_;  // guarded by trace_mu_
};

// RAII: records the time from construction to destruction as one span of `stage`.
// A null stats pointer makes it a no-op. Not copyable; use on one thread.
class ScopedStageTimer {
 public:
  ScopedStageTimer(StageStats* stats, Stage stage, uint64_t id = 0)
      : stats_(stats), stage_(stage), id_(id), start_ns_(stats ? NowNs() : 0) {}
  ~ScopedStageTimer() {
    if (stats_) stats_->RecordSpan(stage_, start_ns_, NowNs(), id_);
  }
  ScopedStageTimer(const ScopedStageTimer&) = delete;
  ScopedStageTimer& operator=(const ScopedStageTimer&) = delete;

 private:
  StageStats* stats_;
  Stage stage_;
  uint64_t id_;
  uint64_t start_ns_;
};

// What the loader looked like while the stats were taken; the verdict depends on it.
struct LoaderShape {
  int batch_size = 1;             // samples per batch (>= 1)
  int threads = 1;                // worker threads running read/decode/transform/collate (>= 1)
  int prefetch = 2;               // batches queued ahead of the consumer
  std::string store = "encoded";  // record kind: "encoded" | "raw" (zstd pixels) | "plain"
  bool gpu = false;               // true: normalize runs on the GPU (consumer side), after h2d
  // A CUDA device is usable in this process (the GPU path could run). With gpu and this false
  // (a CPU-only run) the verdict never mentions a GPU.
  bool cuda_usable = false;
  int cpu_cores = 0;  // cores available to the loader; 0 = hardware_concurrency()
};

// The bottleneck verdict. See docs/STATS.md for the rules.
struct Verdict {
  // "io" | "decode" | "transform" | "collate" | "h2d" | "normalize" | "consumer" | "unknown"
  std::string bound;
  // The loader stage with the largest share of loader time per batch. When bound == "consumer"
  // it is what would limit the loader next; kCount when nothing was recorded.
  Stage limiting_stage = Stage::kCount;
  double share = 0;                      // limiting_stage's share of loader time per batch (0..1)
  double loader_ms_per_batch = 0;        // parallel stages / threads + serial stages, per batch
  double wait_ms_per_batch = -1;         // consumer's mean wait per batch; -1 when not recorded
  double compute_ms = 0;                 // as given: the consumer's work per batch (0 = unknown)
  bool starved = false;                  // compute_ms > 0 and loader_ms_per_batch > compute_ms
  std::string headline;                  // e.g. "I/O-bound: read is 48% of loader time ..."
  std::vector<std::string> suggestions;  // concrete next steps, most useful first
};

Verdict Diagnose(const std::vector<StageSummary>& summaries, const LoaderShape& shape,
                 double compute_ms);
Verdict Diagnose(const StageStats& stats, const LoaderShape& shape, double compute_ms);

// Fixed-width table: stage, count, mean, p50, p95, p99, max (ms), ms/batch, share of loader
// time. batch_size converts per-sample stages to ms/batch.
std::string FormatTable(const std::vector<StageSummary>& summaries, int batch_size);

}  // namespace dspipe
