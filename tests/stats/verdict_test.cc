// SPDX-License-Identifier: Apache-2.0
// Diagnose, FormatTable and ToJson on synthetic timings.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "dspipe/stats.h"
#include "stats/json.h"

namespace dspipe {
namespace {

StageSummary S(Stage stage, uint64_t count, double mean_ms) {
  StageSummary s;
  s.stage = stage;
  s.count = count;
  s.mean_ms = s.p50_ms = s.p95_ms = s.p99_ms = s.max_ms = s.min_ms = mean_ms;
  s.total_ms = mean_ms * static_cast<double>(count);
  return s;
}

// 100 batches of 8 samples; per-sample means for read/decode/augment, per-batch for the rest.
std::vector<StageSummary> Timings(double read, double decode, double augment, double wait_ms,
                                  double collate = 0.5) {
  std::vector<StageSummary> v = {S(Stage::kRead, 800, read), S(Stage::kDecode, 800, decode),
                                 S(Stage::kTransform, 800, augment),
                                 S(Stage::kCollate, 100, collate)};
  if (wait_ms >= 0) v.push_back(S(Stage::kWait, 100, wait_ms));
  return v;
}

LoaderShape Shape(int threads = 2, int cores = 4, std::string store = "encoded", bool gpu = false) {
  LoaderShape s;
  s.batch_size = 8;
  s.threads = threads;
  s.prefetch = 2;
  s.store = std::move(store);
  s.gpu = gpu;
  s.cuda_usable = true;  // a machine with a GPU (CpuOnlyRunNeverNamesAGpu: without one)
  s.cpu_cores = cores;
  return s;
}

bool Has(const Verdict& v, const std::string& needle) {
  for (const auto& s : v.suggestions) {
    if (s.find(needle) != std::string::npos) return true;
  }
  return false;
}

std::string All(const Verdict& v) {
  std::string out = v.headline;
  for (const auto& s : v.suggestions) out += "\n  " + s;
  return out;
}

TEST(VerdictTest, IoBound) {
  // Per batch: read 8*5/2 = 20, decode 4, augment 2, collate 0.25 -> 26.25 ms.
  const Verdict v = Diagnose(Timings(5, 1, 0.5, 20), Shape(), 10);
  EXPECT_EQ(v.bound, "io") << All(v);
  EXPECT_EQ(v.limiting_stage, Stage::kRead);
  EXPECT_DOUBLE_EQ(v.loader_ms_per_batch, 26.25);
  EXPECT_NEAR(v.share, 20 / 26.25, 1e-12);
  EXPECT_EQ(v.headline.rfind("I/O-bound: read is 76% of loader time", 0), 0u) << v.headline;
  EXPECT_TRUE(v.starved);
  EXPECT_NE(v.headline.find("GPU starved"), std::string::npos);
  EXPECT_TRUE(Has(v, "tmpfs")) << All(v);
  EXPECT_TRUE(Has(v, "prefetch")) << All(v);
  EXPECT_FALSE(Has(v, "--store raw")) << All(v);  // decode is small: raw records would not help
}

TEST(VerdictTest, IoBoundWithLargeDecodeSuggestsRawOnlyForEncoded) {
  const Verdict v = Diagnose(Timings(3, 2.5, 0.1, 20), Shape(), 0);
  EXPECT_EQ(v.bound, "io") << All(v);
  EXPECT_TRUE(Has(v, "--store raw")) << All(v);
  EXPECT_FALSE(Diagnose(Timings(3, 2.5, 0.1, 20), Shape(2, 4, "raw"), 0).bound.empty());
  EXPECT_FALSE(Has(Diagnose(Timings(3, 2.5, 0.1, 20), Shape(2, 4, "raw"), 0), "--store raw"));
}

TEST(VerdictTest, IoSpikesSuggestDeeperPrefetchWithNumbers) {
  auto t = Timings(5, 1, 0.5, 20);
  t[0].p50_ms = 1;
  t[0].p99_ms = 40;
  const Verdict v = Diagnose(t, Shape(), 0);
  EXPECT_TRUE(Has(v, "read p99 40.000 ms vs p50 1.000 ms")) << All(v);
}

TEST(VerdictTest, DecodeBound) {
  Verdict v = Diagnose(Timings(0.2, 4, 0.5, 15), Shape(2, 4), 0);
  EXPECT_EQ(v.bound, "decode") << All(v);
  EXPECT_EQ(v.limiting_stage, Stage::kDecode);
  EXPECT_EQ(v.headline.rfind("Decode-bound: decode is", 0), 0u) << v.headline;
  EXPECT_TRUE(Has(v, "Raise threads from 2 to 4")) << All(v);
  EXPECT_TRUE(Has(v, "dsconvert build --store raw")) << All(v);
  EXPECT_FALSE(v.starved);  // compute unknown

  v = Diagnose(Timings(0.2, 4, 0.5, 15), Shape(4, 4), 0);  // all cores already used
  EXPECT_FALSE(Has(v, "Raise threads")) << All(v);
  EXPECT_TRUE(Has(v, "more vCPUs")) << All(v);

  v = Diagnose(Timings(0.2, 4, 0.5, 15), Shape(2, 4, "raw"), 0);
  EXPECT_TRUE(Has(v, "`dsconvert build --store raw --compression none`")) << All(v);
}

TEST(VerdictTest, TransformBound) {
  Verdict v = Diagnose(Timings(0.2, 0.5, 3, 15), Shape(), 0);
  EXPECT_EQ(v.bound, "transform") << All(v);
  EXPECT_EQ(v.limiting_stage, Stage::kTransform);
  EXPECT_EQ(v.headline.rfind("Transform-bound: transform is", 0), 0u) << v.headline;
  EXPECT_TRUE(Has(v, "Normalize on the GPU")) << All(v);
  EXPECT_TRUE(Has(v, "fewer or cheaper augmentations")) << All(v);
  v = Diagnose(Timings(0.2, 0.5, 3, 15), Shape(2, 4, "encoded", /*gpu=*/true), 0);
  EXPECT_FALSE(Has(v, "Normalize on the GPU")) << All(v);  // it already is
}

TEST(VerdictTest, ConsumerBoundWhenWaitIsNearZero) {
  // Loader needs 26.25 ms per batch, the step 50 ms; Next() returns almost at once.
  const Verdict v = Diagnose(Timings(5, 1, 0.5, 0.01), Shape(), 50);
  EXPECT_EQ(v.bound, "consumer") << All(v);
  EXPECT_EQ(v.headline.rfind("Consumer-bound", 0), 0u) << v.headline;
  EXPECT_EQ(v.limiting_stage, Stage::kRead);  // what would limit the loader next
  EXPECT_FALSE(v.starved);
  EXPECT_DOUBLE_EQ(v.wait_ms_per_batch, 0.01);
  EXPECT_TRUE(Has(v, "training step is the limit")) << All(v);
  EXPECT_FALSE(Has(v, "tmpfs")) << All(v);
}

TEST(VerdictTest, ConsumerBoundWithoutWaitFromComputeEstimate) {
  EXPECT_EQ(Diagnose(Timings(5, 1, 0.5, -1), Shape(), 100).bound, "consumer");
  EXPECT_EQ(Diagnose(Timings(5, 1, 0.5, -1), Shape(), 10).bound, "io");
  EXPECT_EQ(Diagnose(Timings(5, 1, 0.5, -1), Shape(), 0).bound, "io");  // compute unknown
}

TEST(VerdictTest, StarvedVersusFed) {
  // Starved: compute 10 ms < loader 26.25 ms; the consumer waits ~16 ms per batch.
  Verdict v = Diagnose(Timings(5, 1, 0.5, 16.25), Shape(), 10);
  EXPECT_TRUE(v.starved);
  EXPECT_NE(v.headline.find("GPU starved: loader 26.25 ms/batch > compute 10.00 ms"),
            std::string::npos)
      << v.headline;
  EXPECT_TRUE(Has(v, "The GPU waits for data")) << All(v);
  // Fed on average (loader 26.25 <= compute 30) but the consumer still waits 5 ms per batch
  // (bursty reads): not consumer-bound, not starved.
  v = Diagnose(Timings(5, 1, 0.5, 5), Shape(), 30);
  EXPECT_FALSE(v.starved);
  EXPECT_EQ(v.bound, "io");
  EXPECT_NE(v.headline.find("fed: loader 26.25 ms/batch <= compute 30.00 ms"), std::string::npos)
      << v.headline;
  EXPECT_FALSE(Has(v, "The GPU waits for data")) << All(v);
}

TEST(VerdictTest, SerialStagesAreNotDividedByThreads) {
  auto t = Timings(0.1, 0.1, 0.1, 30, 0.1);  // per batch: 3 * 0.8/4 + 0.1/4 = 0.625
  t.push_back(S(Stage::kH2D, 100, 20));
  t.push_back(S(Stage::kNormalize, 100, 2));
  Verdict v = Diagnose(t, Shape(4, 4, "encoded", /*gpu=*/true), 0);
  EXPECT_EQ(v.bound, "h2d") << All(v);
  EXPECT_DOUBLE_EQ(v.loader_ms_per_batch, 0.625 + 20 + 2);
  EXPECT_TRUE(Has(v, "pinned")) << All(v);
  v = Diagnose(t, Shape(4, 4, "encoded", /*gpu=*/false), 0);  // CPU normalize: on the workers
  EXPECT_DOUBLE_EQ(v.loader_ms_per_batch, 0.625 + 20 + 0.5);
  EXPECT_TRUE(Has(v, "normalize on the GPU")) << All(v);
}

TEST(VerdictTest, BatchesInferredFromSamplesWithoutPerBatchStages) {
  // 80 samples of 5 ms at batch 8 -> 10 batches, 40 ms each, over 2 threads -> 20 ms.
  const Verdict v = Diagnose({S(Stage::kRead, 80, 5)}, Shape(), 0);
  EXPECT_DOUBLE_EQ(v.loader_ms_per_batch, 20.0);
  EXPECT_DOUBLE_EQ(v.share, 1.0);
}

TEST(VerdictTest, NothingRecorded) {
  const Verdict v = Diagnose(std::vector<StageSummary>{}, Shape(), 10);
  EXPECT_EQ(v.bound, "unknown");
  EXPECT_EQ(v.limiting_stage, Stage::kCount);
  EXPECT_FALSE(v.starved);
}

TEST(VerdictTest, StatsOverloadMatchesSummaries) {
  StageStats stats;
  for (int i = 0; i < 80; ++i) stats.Record(Stage::kDecode, 3'000'000);
  for (int i = 0; i < 80; ++i) stats.Record(Stage::kRead, 100'000);
  for (int i = 0; i < 10; ++i) stats.Record(Stage::kCollate, 200'000);
  const Verdict a = Diagnose(stats, Shape(), 5);
  const Verdict b = Diagnose(stats.Summaries(), Shape(), 5);
  EXPECT_EQ(a.bound, "decode");
  EXPECT_EQ(a.headline, b.headline);
  EXPECT_DOUBLE_EQ(a.loader_ms_per_batch, (8 * 3.0 + 8 * 0.1 + 0.2) / 2);
}

TEST(ReportTest, TableHasColumnsPerBatchAndShare) {
  const std::string table = FormatTable(Timings(5, 1, 0.5, 20), 8);
  EXPECT_NE(table.find("stage"), std::string::npos);
  for (const char* col : {"count", "mean ms", "p50 ms", "p95 ms", "p99 ms", "ms/batch", "share"}) {
    EXPECT_NE(table.find(col), std::string::npos) << col;
  }
  // busy = 4000 + 800 + 400 + 50 = 5250 ms; read = 76.2%, read ms/batch = 40.
  EXPECT_NE(table.find("76.2%"), std::string::npos) << table;
  EXPECT_NE(table.find("40.000"), std::string::npos) << table;
  size_t lines = 0;
  for (char c : table) lines += c == '\n';
  EXPECT_EQ(lines, 6u);  // header + 5 stages
  const size_t wait = table.find("wait");
  ASSERT_NE(wait, std::string::npos);
  EXPECT_EQ(table.substr(table.find('\n', wait) - 1, 1), "-");
}

TEST(ReportTest, JsonFieldNames) {
  const auto summaries = Timings(5, 1, 0.5, 20);
  const nlohmann::json js = stats::ToJson(summaries);
  ASSERT_TRUE(js.is_array());
  ASSERT_EQ(js.size(), 5u);
  EXPECT_EQ(js[0].at("stage"), "read");
  EXPECT_EQ(js[0].at("count"), 800);
  for (const char* k :
       {"total_ms", "mean_ms", "stddev_ms", "min_ms", "p50_ms", "p95_ms", "p99_ms", "max_ms"}) {
    EXPECT_TRUE(js[0].contains(k)) << k;
  }
  EXPECT_DOUBLE_EQ(js[0].at("total_ms").get<double>(), 4000.0);

  const Verdict v = Diagnose(summaries, Shape(), 10);
  const nlohmann::json jv = stats::ToJson(v);
  EXPECT_EQ(jv.at("bound"), "io");
  EXPECT_EQ(jv.at("limiting_stage"), "read");
  EXPECT_EQ(jv.at("starved"), true);
  EXPECT_DOUBLE_EQ(jv.at("loader_ms_per_batch").get<double>(), 26.25);
  EXPECT_DOUBLE_EQ(jv.at("compute_ms").get<double>(), 10.0);
  EXPECT_DOUBLE_EQ(jv.at("wait_ms_per_batch").get<double>(), 20.0);
  EXPECT_EQ(jv.at("headline"), v.headline);
  EXPECT_EQ(jv.at("suggestions").size(), v.suggestions.size());
  EXPECT_NEAR(jv.at("share").get<double>(), v.share, 1e-12);
}

}  // namespace
}  // namespace dspipe

namespace dspipe {
namespace {

// A CPU-only run (no GPU path, no usable CUDA device): whatever the bound, starved or not, the
// verdict never mentions a GPU (issue 20: "GPU starved" on a machine without one).
TEST(VerdictTest, CpuOnlyRunNeverNamesAGpu) {
  LoaderShape cpu = Shape(2, 4, "encoded", /*gpu=*/false);
  cpu.cuda_usable = false;
  std::vector<std::vector<StageSummary>> runs = {
      Timings(5, 1, 0.5, 16.25),        // io-bound, starved below
      Timings(0.2, 5, 0.5, 16),         // decode-bound
      Timings(0.2, 0.5, 5, 16),         // transform-bound
      Timings(0.1, 0.1, 0.1, 30, 50),   // collate-bound
      Timings(0.1, 0.1, 0.1, 30, 0.1),  // normalize-bound (CPU), below
  };
  runs.back().push_back(S(Stage::kNormalize, 100, 40));
  for (const auto& t : runs) {
    for (double compute : {0.0, 1.0, 10.0, 1000.0}) {
      const Verdict v = Diagnose(t, cpu, compute);
      EXPECT_EQ(v.headline.find("GPU"), std::string::npos) << v.headline;
      for (const std::string& s : v.suggestions) {
        EXPECT_EQ(s.find("GPU"), std::string::npos) << s;
        EXPECT_EQ(s.find("--device cuda"), std::string::npos) << s;
      }
    }
  }
  const Verdict starved = Diagnose(runs[0], cpu, 10);
  EXPECT_TRUE(starved.starved);
  EXPECT_NE(starved.headline.find("; starved: loader 26.25 ms/batch > compute 10.00 ms"),
            std::string::npos)
      << starved.headline;
  EXPECT_TRUE(Has(starved, "The training step waits for data")) << All(starved);
}

}  // namespace
}  // namespace dspipe
