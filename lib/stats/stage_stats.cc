// SPDX-License-Identifier: Apache-2.0
// StageStats: lock-free counters and a log-bucketed histogram per stage.
#include <algorithm>
#include <bit>
#include <chrono>
#include <cmath>
#include <map>

#include "dspipe/stats.h"
#include "stats/trace_buffer.h"

namespace dspipe {
namespace {

constexpr int kSub = 1 << StageStats::kSubBits;  // 32 sub-buckets per power of two
constexpr int kTopBit = 40;                      // values >= 2^41 go to the last bucket

int BucketIndex(uint64_t v) {
  if (v < static_cast<uint64_t>(kSub)) return static_cast<int>(v);
  const int p = 63 - std::countl_zero(v);
  if (p > kTopBit) return StageStats::kBuckets - 1;
  const int shift = p - StageStats::kSubBits;
  return ((shift + 1) << StageStats::kSubBits) + static_cast<int>(v >> shift) - kSub;
}

// The value a bucket stands for: exact below 32, else the middle of [low, low + width).
double BucketValue(int i) {
  if (i < kSub) return i;
  const int shift = (i >> StageStats::kSubBits) - 1;
  const uint64_t width = uint64_t{1} << shift;
  const uint64_t low = static_cast<uint64_t>(kSub + (i & (kSub - 1))) << shift;
  return static_cast<double>(low) + static_cast<double>(width - 1) / 2.0;
}

constexpr double kNsPerMs = 1e6;

std::atomic<uint64_t> g_next_serial{1};
std::atomic<int> g_next_tid{1};

std::mutex& NamesMutex() {
  static std::mutex mu;
  return mu;
}
std::map<int, std::string>& Names() {
  static std::map<int, std::string> names;
  return names;
}

}  // namespace

const char* DecodePathName(DecodePath path) {
  switch (path) {
    case DecodePath::kFull:
      return "full";
    case DecodePath::kRoi:
      return "roi";
    case DecodePath::kScaled:
      return "scaled";
    case DecodePath::kRoiScaled:
      return "roi+scaled";
    case DecodePath::kProgressive:
      return "progressive";
    case DecodePath::kFused:
      return "fused";
    case DecodePath::kRaw:
      return "raw";
    case DecodePath::kCount:
      break;
  }
  return "none";
}

const char* StageName(Stage stage) {
  switch (stage) {
    case Stage::kRead:
      return "read";
    case Stage::kDecode:
      return "decode";
    case Stage::kTransform:
      return "transform";
    case Stage::kCollate:
      return "collate";
    case Stage::kH2D:
      return "h2d";
    case Stage::kNormalize:
      return "normalize";
    case Stage::kWait:
      return "wait";
    case Stage::kSegment:
      return "segment";
    case Stage::kCount:
      break;
  }
  return "none";
}

uint64_t NowNs() {
  return static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(
                                   std::chrono::steady_clock::now().time_since_epoch())
                                   .count());
}

int CurrentThreadId() {
  thread_local const int tid = g_next_tid.fetch_add(1, std::memory_order_relaxed);
  return tid;
}

void SetThreadName(std::string_view name) {
  const int tid = CurrentThreadId();
  std::lock_guard<std::mutex> lock(NamesMutex());
  Names()[tid] = std::string(name);
}

std::string stats::ThreadNameOf(int tid) {
  std::lock_guard<std::mutex> lock(NamesMutex());
  auto it = Names().find(tid);
  return it != Names().end() ? it->second : "thread-" + std::to_string(tid);
}

StageStats::StageStats()
    : start_ns_(NowNs()),
      origin_ns_(start_ns_.load(std::memory_order_relaxed)),
      serial_(g_next_serial.fetch_add(1, std::memory_order_relaxed)) {}

StageStats::~StageStats() = default;

void StageStats::RecordInto(Counters& c, uint64_t ns) noexcept {
  c.count.fetch_add(1, std::memory_order_relaxed);
  c.total_ns.fetch_add(ns, std::memory_order_relaxed);
  c.buckets[static_cast<size_t>(BucketIndex(ns))].fetch_add(1, std::memory_order_relaxed);
  uint64_t cur = c.min_ns.load(std::memory_order_relaxed);
  while (ns < cur && !c.min_ns.compare_exchange_weak(cur, ns, std::memory_order_relaxed)) {
  }
  cur = c.max_ns.load(std::memory_order_relaxed);
  while (ns > cur && !c.max_ns.compare_exchange_weak(cur, ns, std::memory_order_relaxed)) {
  }
}

void StageStats::Record(Stage stage, uint64_t ns) noexcept {
  RecordInto(counters_[static_cast<size_t>(stage)], ns);
}

void StageStats::TraceSpan(Stage stage, uint64_t start_ns, uint64_t dur, uint64_t id) noexcept {
  if (!trace_enabled_.load(std::memory_order_acquire)) return;
  TraceBuffer* buffer = nullptr;
  try {
    buffer = BufferForThisThread();
  } catch (...) {  // out of memory for the buffer: lose the event, never the run
    return;
  }
  buffer->Append(stats::TraceEvent{start_ns, dur, id, stage});
}

void StageStats::RecordSpan(Stage stage, uint64_t start_ns, uint64_t end_ns, uint64_t id) noexcept {
  const uint64_t dur = end_ns > start_ns ? end_ns - start_ns : 0;
  Record(stage, dur);
  TraceSpan(stage, start_ns, dur, id);
}

void StageStats::SetTransformRows(const std::vector<std::string>& labels) {
  std::lock_guard<std::mutex> lock(trace_mu_);
  if (transform_count_.load(std::memory_order_relaxed) > 0 || labels.empty()) return;
  transform_rows_ = std::make_unique<std::array<Counters, kMaxTransformRows>>();
  transform_labels_ = labels;
  const int n = std::min(static_cast<int>(labels.size()), kMaxTransformRows);
  if (static_cast<int>(labels.size()) > kMaxTransformRows) {
    for (size_t i = kMaxTransformRows; i < labels.size(); ++i) {
      transform_labels_[kMaxTransformRows - 1] += "; " + labels[i];
    }
    transform_labels_.resize(kMaxTransformRows);
  }
  transform_count_.store(n, std::memory_order_release);
}

void StageStats::RecordTransform(int row, uint64_t start_ns, uint64_t end_ns,
                                 uint64_t id) noexcept {
  const int n = transform_count_.load(std::memory_order_acquire);
  if (n == 0 || row < 0) return;
  const uint64_t dur = end_ns > start_ns ? end_ns - start_ns : 0;
  RecordInto((*transform_rows_)[static_cast<size_t>(std::min(row, n - 1))], dur);
  TraceSpan(Stage::kSegment, start_ns, dur, id);
}

void StageStats::CountFoldedTransform(int row) noexcept {
  const int n = transform_count_.load(std::memory_order_acquire);
  if (n == 0 || row < 0) return;
  (*transform_rows_)[static_cast<size_t>(std::min(row, n - 1))].folded.fetch_add(
      1, std::memory_order_relaxed);
}

StageSummary StageStats::TransformSummary(int row) const {
  const int n = transform_count_.load(std::memory_order_acquire);
  if (row < 0 || row >= n) {
    StageSummary empty;
    empty.stage = Stage::kSegment;
    empty.row = row;
    return empty;
  }
  StageSummary s = SummaryOf((*transform_rows_)[static_cast<size_t>(row)], Stage::kSegment);
  s.row = row;
  s.label = transform_labels_[static_cast<size_t>(row)];
  return s;
}

StageStats::TraceBuffer* StageStats::BufferForThisThread() {
  // One-entry cache: a thread nearly always records into one StageStats. Keyed by serial_, not
  // the address, so a new object at a dead one's address never hits a stale entry.
  struct Cache {
    uint64_t serial = 0;
    TraceBuffer* buffer = nullptr;
  };
  thread_local Cache t_cache;
  if (t_cache.serial == serial_) return t_cache.buffer;
  const int tid = CurrentThreadId();
  std::lock_guard<std::mutex> lock(trace_mu_);
  TraceBuffer* found = nullptr;
  for (const auto& b : trace_buffers_) {
    if (b->tid == tid) found = b.get();
  }
  if (found == nullptr) {
    trace_buffers_.push_back(std::make_unique<TraceBuffer>(tid, trace_capacity_));
    found = trace_buffers_.back().get();
  }
  t_cache = Cache{serial_, found};
  return found;
}

StageSummary StageStats::Summary(Stage stage) const {
  if (stage == Stage::kSegment || stage == Stage::kCount) {
    StageSummary empty;
    empty.stage = stage;
    return empty;
  }
  return SummaryOf(counters_[static_cast<size_t>(stage)], stage);
}

StageSummary StageStats::SummaryOf(const Counters& c, Stage stage) {
  StageSummary s;
  s.stage = stage;
  s.count = c.count.load(std::memory_order_relaxed);
  s.folded = c.folded.load(std::memory_order_relaxed);
  if (s.count == 0) return s;
  const uint64_t total = c.total_ns.load(std::memory_order_relaxed);
  const uint64_t min_ns = c.min_ns.load(std::memory_order_relaxed);
  const uint64_t max_ns = c.max_ns.load(std::memory_order_relaxed);
  s.total_ms = static_cast<double>(total) / kNsPerMs;
  s.mean_ms = s.total_ms / static_cast<double>(s.count);
  s.min_ms = min_ns == UINT64_MAX ? 0 : static_cast<double>(min_ns) / kNsPerMs;
  s.max_ms = static_cast<double>(max_ns) / kNsPerMs;

  // One pass over a snapshot of the histogram: count, moments, then nearest-rank percentiles.
  std::array<uint64_t, kBuckets> snap;
  uint64_t n = 0;
  double sum = 0, sum_sq = 0;
  for (int i = 0; i < kBuckets; ++i) {
    snap[static_cast<size_t>(i)] =
        c.buckets[static_cast<size_t>(i)].load(std::memory_order_relaxed);
    const double k = static_cast<double>(snap[static_cast<size_t>(i)]);
    n += snap[static_cast<size_t>(i)];
    sum += k * BucketValue(i);
    sum_sq += k * BucketValue(i) * BucketValue(i);
  }
  if (n == 0) return s;
  const double mean = sum / static_cast<double>(n);
  s.stddev_ms = std::sqrt(std::max(0.0, sum_sq / static_cast<double>(n) - mean * mean)) / kNsPerMs;
  auto percentile = [&](double q) {
    const uint64_t rank =
        std::max<uint64_t>(1, static_cast<uint64_t>(std::ceil(q * static_cast<double>(n))));
    uint64_t seen = 0;
    int i = 0;
    for (; i < kBuckets; ++i) {
      seen += snap[static_cast<size_t>(i)];
      if (seen >= rank) break;
    }
    const double v = std::clamp(BucketValue(std::min(i, kBuckets - 1)), static_cast<double>(min_ns),
                                static_cast<double>(max_ns));
    return v / kNsPerMs;
  };
  s.p50_ms = percentile(0.50);
  s.p95_ms = percentile(0.95);
  s.p99_ms = percentile(0.99);
  return s;
}

std::vector<StageSummary> StageStats::Summaries() const {
  std::vector<StageSummary> out;
  for (int i = 0; i < kNumStages; ++i) {
    StageSummary s = Summary(static_cast<Stage>(i));
    if (s.count > 0) out.push_back(s);
    if (static_cast<Stage>(i) != Stage::kTransform) continue;
    const int rows = transform_count_.load(std::memory_order_acquire);
    for (int r = 0; r < rows; ++r) {
      StageSummary t = TransformSummary(r);
      if (t.count > 0 || t.folded > 0) out.push_back(t);
    }
  }
  return out;
}

void StageStats::RecordDecodePath(DecodePath path, uint64_t decode_ns) noexcept {
  const int i = static_cast<int>(path);
  if (i < 0 || i >= kNumDecodePaths) return;
  paths_[static_cast<size_t>(i)].count.fetch_add(1, std::memory_order_relaxed);
  paths_[static_cast<size_t>(i)].total_ns.fetch_add(decode_ns, std::memory_order_relaxed);
}

std::vector<DecodePathSummary> StageStats::DecodePaths() const {
  std::vector<DecodePathSummary> out;
  for (int i = 0; i < kNumDecodePaths; ++i) {
    DecodePathSummary s;
    s.path = static_cast<DecodePath>(i);
    s.count = paths_[static_cast<size_t>(i)].count.load(std::memory_order_relaxed);
    if (s.count == 0) continue;
    s.total_ms = static_cast<double>(
                     paths_[static_cast<size_t>(i)].total_ns.load(std::memory_order_relaxed)) /
                 kNsPerMs;
    s.mean_ms = s.total_ms / static_cast<double>(s.count);
    out.push_back(s);
  }
  return out;
}

void StageStats::ResetCounters(Counters& c) {
  c.count.store(0, std::memory_order_relaxed);
  c.total_ns.store(0, std::memory_order_relaxed);
  c.min_ns.store(UINT64_MAX, std::memory_order_relaxed);
  c.max_ns.store(0, std::memory_order_relaxed);
  c.folded.store(0, std::memory_order_relaxed);
  for (auto& b : c.buckets) b.store(0, std::memory_order_relaxed);
}

void StageStats::Reset() {
  for (PathCounters& p : paths_) {
    p.count.store(0, std::memory_order_relaxed);
    p.total_ns.store(0, std::memory_order_relaxed);
  }
  for (Counters& c : counters_) ResetCounters(c);
  const int rows = transform_count_.load(std::memory_order_acquire);
  for (int r = 0; r < rows; ++r) ResetCounters((*transform_rows_)[static_cast<size_t>(r)]);
  start_ns_.store(NowNs(), std::memory_order_relaxed);
}

uint64_t StageStats::ElapsedNs() const {
  const uint64_t now = NowNs();
  const uint64_t start = start_ns_.load(std::memory_order_relaxed);
  return now > start ? now - start : 0;
}

}  // namespace dspipe
