// SPDX-License-Identifier: Apache-2.0
// Chrome trace: valid JSON, one tid per thread, thread names, bounded buffers, errors.
#include <gtest/gtest.h>
#include <unistd.h>

#include <atomic>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "dspipe/stats.h"

namespace dspipe {
namespace {

namespace fs = std::filesystem;

class TraceTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("dspipe_trace_" + std::to_string(::getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  static nlohmann::json Load(const fs::path& p) {
    std::ifstream in(p);
    return nlohmann::json::parse(in);  // throws (fails the test) on invalid JSON
  }
  static std::vector<nlohmann::json> Complete(const nlohmann::json& trace) {
    std::vector<nlohmann::json> out;
    for (const auto& e : trace.at("traceEvents")) {
      if (e.at("ph") == "X") out.push_back(e);
    }
    return out;
  }

  fs::path dir_;
};

TEST_F(TraceTest, EventsThreadsAndNames) {
  StageStats stats;
  stats.EnableTrace(1000);
  constexpr int kWorkers = 3, kSamples = 50;
  std::vector<std::thread> threads;
  std::vector<int> worker_tids(kWorkers);
  for (int w = 0; w < kWorkers; ++w) {
    threads.emplace_back([&, w] {
      SetThreadName("worker-" + std::to_string(w));
      worker_tids[static_cast<size_t>(w)] = CurrentThreadId();
      for (int i = 0; i < kSamples; ++i) {
        const uint64_t id = static_cast<uint64_t>(w * 1000 + i);
        const uint64_t t0 = NowNs();
        stats.RecordSpan(Stage::kRead, t0, t0 + 1500, id);  // 1.5 us
        stats.RecordSpan(Stage::kDecode, t0 + 1500, t0 + 4000, id);
      }
    });
  }
  int consumer_tid = 0;
  threads.emplace_back([&] {
    SetThreadName("consumer");
    consumer_tid = CurrentThreadId();
    for (int b = 0; b < 10; ++b) ScopedStageTimer t(&stats, Stage::kWait, b);
  });
  for (auto& t : threads) t.join();

  const fs::path path = dir_ / "trace.json";
  ASSERT_TRUE(stats.WriteChromeTrace(path.string()).ok());
  const nlohmann::json trace = Load(path);
  const auto events = Complete(trace);
  ASSERT_EQ(events.size(), static_cast<size_t>(kWorkers * kSamples * 2 + 10));

  std::map<int, std::set<std::string>> stages_by_tid;
  std::map<int, std::set<uint64_t>> ids_by_tid;
  for (const auto& e : events) {
    const int tid = e.at("tid").get<int>();
    const std::string name = e.at("name");
    stages_by_tid[tid].insert(name);
    ids_by_tid[tid].insert(e.at("args").at("id").get<uint64_t>());
    EXPECT_EQ(e.at("pid").get<int>(), static_cast<int>(::getpid()));
    EXPECT_GE(e.at("ts").get<double>(), 0.0);
    if (name == "read") {
      EXPECT_DOUBLE_EQ(e.at("dur").get<double>(), 1.5);
    } else if (name == "decode") {
      EXPECT_DOUBLE_EQ(e.at("dur").get<double>(), 2.5);
    }
  }
  ASSERT_EQ(stages_by_tid.size(), static_cast<size_t>(kWorkers + 1));  // one tid per thread
  for (int w = 0; w < kWorkers; ++w) {
    const int tid = worker_tids[static_cast<size_t>(w)];
    EXPECT_EQ(stages_by_tid[tid], (std::set<std::string>{"read", "decode"}));
    EXPECT_EQ(ids_by_tid[tid].size(), static_cast<size_t>(kSamples));
    EXPECT_EQ(*ids_by_tid[tid].begin(), static_cast<uint64_t>(w * 1000));
  }
  EXPECT_EQ(stages_by_tid[consumer_tid], (std::set<std::string>{"wait"}));

  std::map<int, std::string> names;
  for (const auto& e : trace.at("traceEvents")) {
    if (e.at("ph") == "M" && e.at("name") == "thread_name") {
      names[e.at("tid").get<int>()] = e.at("args").at("name");
    }
  }
  EXPECT_EQ(names[consumer_tid], "consumer");
  for (int w = 0; w < kWorkers; ++w) {
    EXPECT_EQ(names[worker_tids[static_cast<size_t>(w)]], "worker-" + std::to_string(w));
  }
  EXPECT_EQ(trace.at("otherData").at("dropped_events").get<int>(), 0);
  EXPECT_FALSE(fs::exists(path.string() + ".tmp." + std::to_string(::getpid())));
}

TEST_F(TraceTest, BufferIsBoundedAndStatsStayExact) {
  StageStats stats;
  stats.EnableTrace(5);
  for (int i = 0; i < 20; ++i) stats.RecordSpan(Stage::kCollate, 100, 200, i);
  EXPECT_EQ(stats.dropped_trace_events(), 15u);
  EXPECT_EQ(stats.Summary(Stage::kCollate).count, 20u);
  const fs::path path = dir_ / "t.json";
  ASSERT_TRUE(stats.WriteChromeTrace(path.string()).ok());
  const nlohmann::json trace = Load(path);
  EXPECT_EQ(Complete(trace).size(), 5u);
  EXPECT_EQ(trace.at("otherData").at("dropped_events").get<int>(), 15);
}

TEST_F(TraceTest, DisabledTraceWritesAnEmptyTimeline) {
  StageStats stats;
  stats.RecordSpan(Stage::kRead, 0, 10, 1);
  EXPECT_FALSE(stats.trace_enabled());
  const fs::path path = dir_ / "empty.json";
  ASSERT_TRUE(stats.WriteChromeTrace(path.string()).ok());
  EXPECT_TRUE(Complete(Load(path)).empty());
}

TEST_F(TraceTest, TwoStatsOnOneThreadKeepTheirOwnEvents) {
  StageStats a, b;
  a.EnableTrace(100);
  b.EnableTrace(100);
  for (int i = 0; i < 6; ++i) {  // interleaved: the per-thread buffer cache must not mix them
    a.RecordSpan(Stage::kRead, 0, 10, 100 + i);
    b.RecordSpan(Stage::kH2D, 0, 10, 200 + i);
  }
  const fs::path pa = dir_ / "a.json", pb = dir_ / "b.json";
  ASSERT_TRUE(a.WriteChromeTrace(pa.string()).ok());
  ASSERT_TRUE(b.WriteChromeTrace(pb.string()).ok());
  const auto ea = Complete(Load(pa)), eb = Complete(Load(pb));
  ASSERT_EQ(ea.size(), 6u);
  ASSERT_EQ(eb.size(), 6u);
  for (const auto& e : ea) EXPECT_EQ(e.at("name"), "read");
  for (const auto& e : eb) EXPECT_EQ(e.at("name"), "h2d");
}

TEST_F(TraceTest, WriteAndResetWhileThreadsRecord) {
  // Summary/Reset/WriteChromeTrace race with recording threads in a real loader; under TSan
  // this test proves they are data-race free, and each snapshot must still parse.
  StageStats stats;
  stats.EnableTrace(100'000);
  std::atomic<bool> stop{false};
  std::vector<std::thread> workers;
  for (int w = 0; w < 2; ++w) {
    workers.emplace_back([&, w] {
      for (uint64_t i = 0; !stop.load(std::memory_order_relaxed); ++i) {
        stats.RecordSpan(w == 0 ? Stage::kRead : Stage::kDecode, NowNs(), NowNs() + 100, i);
      }
    });
  }
  size_t last = 0;
  for (int round = 0; round < 3; ++round) {
    const fs::path path = dir_ / ("live" + std::to_string(round) + ".json");
    ASSERT_TRUE(stats.WriteChromeTrace(path.string()).ok());
    const size_t n = Complete(Load(path)).size();
    EXPECT_GE(n, last);  // the trace only grows: Reset does not clear it
    EXPECT_LE(n, 200'000u);
    last = n;
    stats.Reset();
    (void)stats.Summaries();
  }
  stop = true;
  for (auto& w : workers) w.join();
}

TEST_F(TraceTest, UnwritablePathErrorNamesThePath) {
  StageStats stats;
  const std::string missing = (dir_ / "no-such-dir" / "trace.json").string();
  Status s = stats.WriteChromeTrace(missing);
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.code(), Status::Code::kIOError);
  EXPECT_NE(s.message().find(missing), std::string::npos) << s.ToString();

  // The target is a directory: the tmp file is written, the rename fails, nothing is left over.
  const fs::path target = dir_ / "is-a-dir";
  fs::create_directories(target / "child");
  s = stats.WriteChromeTrace(target.string());
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find(target.string()), std::string::npos) << s.ToString();
  size_t files = 0;
  for ([[maybe_unused]] const auto& e : fs::directory_iterator(dir_)) ++files;
  EXPECT_EQ(files, 1u);  // only is-a-dir
}

}  // namespace
}  // namespace dspipe
