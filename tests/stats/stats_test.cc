// SPDX-License-Identifier: Apache-2.0
// StageStats: counts, exact totals, histogram percentiles, concurrency, Reset, timers.
#include "dspipe/stats.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <random>
#include <thread>
#include <vector>

namespace dspipe {
namespace {

constexpr double kBucketTolerance = 0.016;  // half the widest bucket (1/32) relative

// Exact nearest-rank percentile of ns values, in ms.
double ExactMs(std::vector<uint64_t> v, double q) {
  std::sort(v.begin(), v.end());
  size_t rank = static_cast<size_t>(std::ceil(q * static_cast<double>(v.size())));
  rank = std::max<size_t>(rank, 1);
  return static_cast<double>(v[rank - 1]) / 1e6;
}

void ExpectPercentiles(const std::vector<uint64_t>& values) {
  StageStats stats;
  for (uint64_t v : values) stats.Record(Stage::kDecode, v);
  const StageSummary s = stats.Summary(Stage::kDecode);
  ASSERT_EQ(s.count, values.size());
  for (auto [q, got] : {std::pair{0.50, s.p50_ms}, {0.95, s.p95_ms}, {0.99, s.p99_ms}}) {
    const double want = ExactMs(values, q);
    EXPECT_NEAR(got, want, want * kBucketTolerance) << "q=" << q;
  }
  uint64_t total = 0;
  for (uint64_t v : values) total += v;
  EXPECT_DOUBLE_EQ(s.total_ms, static_cast<double>(total) / 1e6);
  EXPECT_DOUBLE_EQ(s.mean_ms, s.total_ms / static_cast<double>(values.size()));
  EXPECT_DOUBLE_EQ(s.min_ms,
                   static_cast<double>(*std::min_element(values.begin(), values.end())) / 1e6);
  EXPECT_DOUBLE_EQ(s.max_ms,
                   static_cast<double>(*std::max_element(values.begin(), values.end())) / 1e6);
}

TEST(StageStatsTest, StageNames) {
  const char* want[] = {"read", "decode", "transform", "collate", "h2d", "normalize", "wait"};
  for (int i = 0; i < kNumStages; ++i) EXPECT_STREQ(StageName(static_cast<Stage>(i)), want[i]);
  EXPECT_STREQ(StageName(Stage::kCount), "none");
}

TEST(StageStatsTest, UniformPercentilesWithinBucketWidth) {
  std::mt19937_64 rng(1);
  std::uniform_int_distribution<uint64_t> d(100'000, 20'000'000);  // 0.1 .. 20 ms
  std::vector<uint64_t> v(50'000);
  for (auto& x : v) x = d(rng);
  ExpectPercentiles(v);
}

TEST(StageStatsTest, BimodalPercentilesWithinBucketWidth) {
  // 90% fast reads near 0.2 ms, 10% slow ones near 50 ms: p50 in the first mode, p95/p99 in
  // the second. A histogram that smeared modes together would fail here.
  std::mt19937_64 rng(2);
  std::normal_distribution<double> fast(200'000, 20'000), slow(50'000'000, 5'000'000);
  std::vector<uint64_t> v;
  for (int i = 0; i < 9000; ++i) v.push_back(static_cast<uint64_t>(std::max(1000.0, fast(rng))));
  for (int i = 0; i < 1000; ++i) v.push_back(static_cast<uint64_t>(std::max(1000.0, slow(rng))));
  std::shuffle(v.begin(), v.end(), rng);
  ExpectPercentiles(v);
  StageStats stats;
  for (uint64_t x : v) stats.Record(Stage::kRead, x);
  EXPECT_LT(stats.Summary(Stage::kRead).p50_ms, 0.3);
  EXPECT_GT(stats.Summary(Stage::kRead).p95_ms, 30.0);
}

TEST(StageStatsTest, LogUniformAcrossFullRange) {
  std::mt19937_64 rng(3);
  std::uniform_real_distribution<double> e(2.0, 11.0);  // 100 ns .. 100 s
  std::vector<uint64_t> v(20'000);
  for (auto& x : v) x = static_cast<uint64_t>(std::pow(10.0, e(rng)));
  ExpectPercentiles(v);
}

TEST(StageStatsTest, SmallValuesAreExactAndHugeOnesClampToMax) {
  StageStats stats;
  for (uint64_t v : {5, 5, 7}) stats.Record(Stage::kWait, v);
  StageSummary s = stats.Summary(Stage::kWait);
  EXPECT_DOUBLE_EQ(s.p50_ms, 5e-6);
  EXPECT_DOUBLE_EQ(s.p99_ms, 7e-6);

  const uint64_t hour = 3600ull * 1'000'000'000ull;  // beyond the last bucket
  stats.Record(Stage::kH2D, hour);
  s = stats.Summary(Stage::kH2D);
  EXPECT_DOUBLE_EQ(s.max_ms, 3.6e6);
  EXPECT_DOUBLE_EQ(s.p99_ms, 3.6e6);
}

TEST(StageStatsTest, StddevFromHistogram) {
  StageStats stats;
  for (int i = 0; i < 500; ++i) {
    stats.Record(Stage::kTransform, 1'000'000);
    stats.Record(Stage::kTransform, 3'000'000);
  }
  const StageSummary s = stats.Summary(Stage::kTransform);
  EXPECT_DOUBLE_EQ(s.mean_ms, 2.0);
  EXPECT_NEAR(s.stddev_ms, 1.0, 1.0 * kBucketTolerance * 2);
}

TEST(StageStatsTest, SummariesListOnlyRecordedStagesInOrder) {
  StageStats stats;
  stats.Record(Stage::kWait, 10);
  stats.Record(Stage::kRead, 10);
  const auto all = stats.Summaries();
  ASSERT_EQ(all.size(), 2u);
  EXPECT_EQ(all[0].stage, Stage::kRead);
  EXPECT_EQ(all[1].stage, Stage::kWait);
  EXPECT_EQ(stats.Summary(Stage::kDecode).count, 0u);
  EXPECT_EQ(stats.Summary(Stage::kDecode).max_ms, 0.0);
}

// A transform row whose samples all ran folded into normalize is listed with its folded count
// (it would otherwise vanish or look rare); Reset zeroes it; the table and JSON say it.
TEST(StageStatsTest, FoldedTransformSamplesAreCountedBesideTheRow) {
  StageStats stats;
  stats.SetTransformRows({"geometric: Resize", "lut: RandomGamma"});
  stats.RecordTransform(0, 0, 1000000);
  stats.CountFoldedTransform(1);
  stats.CountFoldedTransform(1);
  stats.RecordTransform(1, 0, 2000000);
  std::vector<StageSummary> all = stats.Summaries();
  ASSERT_EQ(all.size(), 2u);
  EXPECT_EQ(all[0].folded, 0u);
  EXPECT_EQ(all[1].count, 1u);
  EXPECT_EQ(all[1].folded, 2u);
  EXPECT_DOUBLE_EQ(all[1].mean_ms, 2.0);  // the timed sample only
  const std::string table = FormatTable(all, 1);
  EXPECT_NE(table.find("lut: RandomGamma (+2 of 3 samples fused into another stage, timed there)"),
            std::string::npos)
      << table;
  EXPECT_EQ(table.find("Resize (+"), std::string::npos) << table;
  stats.Reset();
  stats.CountFoldedTransform(1);
  all = stats.Summaries();
  ASSERT_EQ(all.size(), 1u);  // a row with only folded samples is still listed
  EXPECT_EQ(all[0].row, 1);
  EXPECT_EQ(all[0].count, 0u);
  EXPECT_EQ(all[0].folded, 1u);
}

TEST(StageStatsTest, ConcurrentRecordsAreExact) {
  StageStats stats;
  constexpr int kThreads = 4, kPerThread = 100'000;
  std::atomic<bool> done{false};
  std::thread reader([&] {  // summaries while recording must be safe (TSan) and sane
    while (!done.load()) {
      const StageSummary s = stats.Summary(Stage::kDecode);
      EXPECT_LE(s.count, static_cast<uint64_t>(kThreads) * kPerThread);
    }
  });
  std::vector<std::thread> workers;
  for (int t = 0; t < kThreads; ++t) {
    workers.emplace_back([&stats, t] {
      for (int i = 0; i < kPerThread; ++i) {
        stats.Record(Stage::kDecode, static_cast<uint64_t>((i % 1000) + 1) * 100 + t);
      }
    });
  }
  for (auto& w : workers) w.join();
  done = true;
  reader.join();
  const StageSummary s = stats.Summary(Stage::kDecode);
  EXPECT_EQ(s.count, static_cast<uint64_t>(kThreads) * kPerThread);
  // Per thread: 100 rounds of sum_{k=1..1000} 100k + t per record.
  uint64_t total = 0;
  for (uint64_t t = 0; t < kThreads; ++t) total += 100ull * (100ull * 500'500ull) + t * kPerThread;
  EXPECT_DOUBLE_EQ(s.total_ms, static_cast<double>(total) / 1e6);
  EXPECT_DOUBLE_EQ(s.min_ms, 100e-6);
  EXPECT_DOUBLE_EQ(s.max_ms, 100'003e-6);
  EXPECT_NEAR(s.p50_ms, 0.05, 0.05 * kBucketTolerance * 1.1);
}

TEST(StageStatsTest, ResetZeroesCountersAndRestartsClock) {
  StageStats stats;
  stats.Record(Stage::kRead, 1000);
  stats.Record(Stage::kCollate, 2000);
  // No wall-clock bound (a busy machine can pause this thread anywhere): the clock after Reset
  // is bounded by time this test measured itself, which starts after 20 ms of the stats' life.
  std::this_thread::sleep_for(std::chrono::milliseconds(20));  // sleeps at least that long
  EXPECT_GE(stats.ElapsedNs(), 20'000'000u);
  const auto before_reset = std::chrono::steady_clock::now();
  stats.Reset();
  const uint64_t after = stats.ElapsedNs();
  const auto since = static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(
                                               std::chrono::steady_clock::now() - before_reset)
                                               .count());
  EXPECT_LE(after, since) << "Reset did not restart the clock";
  EXPECT_TRUE(stats.Summaries().empty());
  stats.Record(Stage::kRead, 5000);
  stats.Record(Stage::kCollate, 500);
  StageSummary s = stats.Summary(Stage::kRead);
  EXPECT_EQ(s.count, 1u);
  EXPECT_DOUBLE_EQ(s.total_ms, 5000e-6);
  EXPECT_DOUBLE_EQ(s.min_ms, 5000e-6);  // min was reset, not stuck at the old 1000 ns
  EXPECT_DOUBLE_EQ(s.p50_ms, 5000e-6);
  s = stats.Summary(Stage::kCollate);
  EXPECT_DOUBLE_EQ(s.max_ms, 500e-6);  // max was reset, not stuck at the old 2000 ns
  EXPECT_DOUBLE_EQ(s.p99_ms, 500e-6);
}

TEST(StageStatsTest, ScopedTimerRecordsItsScope) {
  StageStats stats;
  const auto outer_start = std::chrono::steady_clock::now();
  {
    ScopedStageTimer timer(&stats, Stage::kTransform, 7);
    std::this_thread::sleep_for(std::chrono::milliseconds(3));  // sleeps at least that long
  }
  const double outer_ms = std::chrono::duration<double, std::milli>(
                              std::chrono::steady_clock::now() - outer_start)
                              .count();
  { ScopedStageTimer no_op(nullptr, Stage::kTransform); }
  const StageSummary s = stats.Summary(Stage::kTransform);
  EXPECT_EQ(s.count, 1u);
  EXPECT_GE(s.total_ms, 3.0);
  // Bounded by the time measured around the scope, not a wall-clock guess.
  EXPECT_LE(s.total_ms, outer_ms * (1 + kBucketTolerance));
}

TEST(StageStatsTest, SpanWithEndBeforeStartCountsZero) {
  StageStats stats;
  stats.RecordSpan(Stage::kH2D, 2000, 1000);
  EXPECT_EQ(stats.Summary(Stage::kH2D).count, 1u);
  EXPECT_EQ(stats.Summary(Stage::kH2D).total_ms, 0.0);
}

TEST(StageStatsTest, ThreadIdsAreSmallAndDistinct) {
  const int mine = CurrentThreadId();
  EXPECT_EQ(CurrentThreadId(), mine);
  int other = 0;
  std::thread([&] { other = CurrentThreadId(); }).join();
  EXPECT_GT(mine, 0);
  EXPECT_NE(other, mine);
}

// Not an assertion: prints the hot-path cost so regressions are visible in the test log.
TEST(StageStatsTest, PrintsNsPerRecord) {
  StageStats stats;
  constexpr int kN = 2'000'000;
  for (int threads : {1, 2}) {
    const uint64_t t0 = NowNs();
    std::vector<std::thread> ws;
    for (int t = 0; t < threads; ++t) {
      ws.emplace_back([&stats] {
        for (int i = 0; i < kN; ++i) stats.Record(Stage::kRead, static_cast<uint64_t>(i) * 37);
      });
    }
    for (auto& w : ws) w.join();
    const double ns = static_cast<double>(NowNs() - t0) / kN;
    std::printf("[ stats    ] Record: %.1f ns/record with %d thread(s)\n", ns, threads);
  }
  const uint64_t t0 = NowNs();
  for (int i = 0; i < kN; ++i) ScopedStageTimer timer(&stats, Stage::kDecode);
  std::printf("[ stats    ] ScopedStageTimer: %.1f ns/record\n",
              static_cast<double>(NowNs() - t0) / kN);
  EXPECT_EQ(stats.Summary(Stage::kRead).count, 3u * kN);
}

}  // namespace
}  // namespace dspipe
