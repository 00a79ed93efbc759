// SPDX-License-Identifier: Apache-2.0
// The writers: --json schema, CSV, self-contained HTML, console text, and the verdict plumbing
// from synthetic stage timings to every output.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <sstream>

#include "profile/profile.h"
#include "test_dataset.h"

namespace dspipe::profile {
namespace {

using nlohmann::json;

StageSummary Stat(Stage stage, uint64_t count, double mean_ms) {
  StageSummary s;
  s.stage = stage;
  s.count = count;
  s.mean_ms = s.p50_ms = s.min_ms = mean_ms;
  s.p95_ms = s.p99_ms = s.max_ms = mean_ms * 1.5;
  s.total_ms = mean_ms * static_cast<double>(count);
  return s;
}

// A hand-made result: 100 batches of 8, per-sample read/decode/augment as given, 2 threads.
ProfileResult Synthetic(double read, double decode, double augment, double wait,
                        double compute_ms) {
  ProfileResult r;
  r.source = "lmdb";
  r.dataset.path = "/data/<train>.lmdb";
  r.dataset.kind = "dspipe";
  r.dataset.store = "encoded";
  r.dataset.count = 800;
  r.config.threads = 2;
  r.config.compute_ms = compute_ms;
  r.batches = 100;
  r.images = 800;
  r.seconds = 2;
  r.images_per_s = 400;
  r.mb_per_s = 12.5;
  r.stages = {Stat(Stage::kRead, 800, read), Stat(Stage::kDecode, 800, decode),
              Stat(Stage::kTransform, 800, augment), Stat(Stage::kCollate, 100, 0.01),
              Stat(Stage::kWait, 100, wait)};
  r.shape.batch_size = 8;
  r.shape.threads = 2;
  r.shape.cpu_cores = 2;
  r.verdict = Diagnose(r.stages, r.shape, compute_ms);
  return r;
}

std::vector<std::string> Lines(const std::string& text) {
  std::vector<std::string> lines;
  std::istringstream in(text);
  for (std::string l; std::getline(in, l);) lines.push_back(l);
  return lines;
}

size_t Fields(const std::string& line) {
  return static_cast<size_t>(std::count(line.begin(), line.end(), ',')) + 1;
}

void ExpectSelfContained(const std::string& html) {
  EXPECT_EQ(html.rfind("<!DOCTYPE html>", 0), 0u);
  EXPECT_NE(html.find("<svg"), std::string::npos);
  EXPECT_NE(html.find("</html>"), std::string::npos);
  for (const char* bad : {"http://", "https://", "<script", "<link", " src=", "url(", "@import"}) {
    EXPECT_EQ(html.find(bad), std::string::npos) << bad;
  }
}

TEST(ReportJson, SchemaFieldsHaveTheDocumentedTypes) {
  ProfileOptions o;
  o.threads = 2;
  o.batches = 4;
  o.warmup = 1;
  Report report;
  ASSERT_TRUE(RunProfile(testing::SmallDataset().lmdb, o, &report.run).ok());
  // Round-trip through text, as CI reads it.
  const json j = json::parse(ReportJson(report).dump());
  EXPECT_EQ(j.at("tool"), "dsbench");
  ASSERT_TRUE(j.at("version").is_number_integer());
  EXPECT_EQ(j.at("version"), 1);
  const json& d = j.at("dataset");
  EXPECT_TRUE(d.at("path").is_string());
  EXPECT_TRUE(d.at("kind").is_string());
  EXPECT_TRUE(d.at("store").is_string());
  for (const char* k : {"count", "height", "width", "channels", "bytes"}) {
    EXPECT_TRUE(d.at(k).is_number_integer()) << k;
  }
  EXPECT_TRUE(d.at("has_masks").is_boolean());
  EXPECT_EQ(d.at("sample_type"), "uint8");
  EXPECT_EQ(d.at("mask_type"), "uint8");
  const json& c = j.at("config");
  for (const char* k : {"batch", "threads", "prefetch", "batches", "epochs", "warmup", "seed"}) {
    EXPECT_TRUE(c.at(k).is_number_integer()) << k;
  }
  EXPECT_EQ(c.at("threads"), 2);
  EXPECT_EQ(c.at("device"), "cpu");
  for (const char* k : {"compute_ms", "hflip", "vflip"}) EXPECT_TRUE(c.at(k).is_number()) << k;
  for (const char* k : {"normalize", "shuffle", "drop_cache"}) {
    EXPECT_TRUE(c.at(k).is_boolean()) << k;
  }
  const json& t = j.at("throughput");
  for (const char* k : {"images_per_s", "mb_per_s", "decoded_mb_per_s", "seconds"}) {
    EXPECT_TRUE(t.at(k).is_number()) << k;
    EXPECT_GT(t.at(k).get<double>(), 0) << k;
  }
  EXPECT_EQ(t.at("batches"), 4);
  EXPECT_EQ(t.at("images"), 32);
  const json& cache = j.at("cache");
  EXPECT_TRUE(cache.at("requested").is_boolean());
  EXPECT_TRUE(cache.at("note").is_string());
  ASSERT_TRUE(j.at("stages").is_array());
  ASSERT_FALSE(j.at("stages").empty());
  for (const json& s : j.at("stages")) {
    EXPECT_TRUE(s.at("stage").is_string());
    EXPECT_TRUE(s.at("count").is_number_integer());
    for (const char* k :
         {"total_ms", "mean_ms", "p50_ms", "p95_ms", "p99_ms", "max_ms", "ms_per_batch", "share"}) {
      EXPECT_TRUE(s.at(k).is_number()) << k;
    }
  }
  const json& v = j.at("verdict");
  for (const char* k : {"bound", "limiting_stage", "headline"}) EXPECT_TRUE(v.at(k).is_string());
  EXPECT_TRUE(v.at("starved").is_boolean());
  EXPECT_TRUE(v.at("share").is_number());
  EXPECT_TRUE(v.at("suggestions").is_array());
  EXPECT_TRUE(j.at("notes").is_array());
  EXPECT_FALSE(j.contains("sweep"));
  EXPECT_FALSE(j.contains("compare"));
}

TEST(ReportJson, SweepAndCompareSections) {
  Report report;
  report.run = Synthetic(0.1, 2.0, 0.1, 1.0, 0);
  SweepResult sweep;
  for (int t : {1, 2}) {
    ProfileResult r = Synthetic(0.1, 2.0, 0.1, 1.0, 0);
    r.config.threads = t;
    r.images_per_s = 100.0 * t;
    sweep.runs.push_back(r);
  }
  sweep.best = 1;
  report.sweep = sweep;
  json j = ReportJson(report);
  ASSERT_EQ(j.at("sweep").size(), 2u);
  EXPECT_EQ(j["sweep"][0]["config"]["threads"], 1);
  EXPECT_EQ(j["sweep"][1]["throughput"]["images_per_s"], 200.0);
  EXPECT_TRUE(j["sweep"][0]["verdict"]["bound"].is_string());
  EXPECT_EQ(j.at("best").at("index"), 1);
  EXPECT_EQ(j["best"]["config"]["threads"], 2);

  report.sweep.reset();
  ProfileResult folder = Synthetic(1.0, 2.0, 0.1, 3.0, 0);
  folder.source = "folder";
  folder.images_per_s = 100;
  report.folder = folder;
  j = ReportJson(report);
  EXPECT_FALSE(j.contains("sweep"));
  EXPECT_EQ(j["compare"]["folder"]["source"], "folder");
  EXPECT_EQ(j["compare"]["folder"]["throughput"]["images_per_s"], 100.0);
  EXPECT_EQ(j["compare"]["lmdb"]["throughput"]["images_per_s"], 400.0);
  EXPECT_DOUBLE_EQ(j["compare"]["speedup"].get<double>(), 4.0);
}

TEST(ReportCsv, OneRowPerStageOrPerConfiguration) {
  Report report;
  report.run = Synthetic(0.1, 2.0, 0.1, 1.0, 0);
  std::vector<std::string> lines = Lines(ReportCsv(report));
  ASSERT_EQ(lines.size(), 1 + report.run.stages.size());
  EXPECT_EQ(lines[0],
            "source,stage,count,total_ms,mean_ms,p50_ms,p95_ms,p99_ms,max_ms,ms_per_batch,share,"
            "order,rank,world_size");
  EXPECT_EQ(lines[1].rfind("lmdb,read,800,80,0.1,", 0), 0u) << lines[1];
  EXPECT_EQ(lines[2].rfind("lmdb,decode,800,1600,2,", 0), 0u) << lines[2];
  EXPECT_EQ(lines[5].rfind("lmdb,wait,100,", 0), 0u) << lines[5];
  for (const std::string& l : lines) EXPECT_EQ(Fields(l), 14u) << l;
  // The rank measured closes every row (default: one rank, order global).
  EXPECT_TRUE(lines[1].ends_with(",global,0,1")) << lines[1];
  // decode: ms/batch = 2 ms x 8 samples; share = 1600 / (80 + 1600 + 80 + 1).
  EXPECT_NE(lines[2].find(",16,0.908575"), std::string::npos) << lines[2];

  ProfileResult folder = report.run;
  folder.source = "folder";
  report.folder = folder;
  lines = Lines(ReportCsv(report));
  ASSERT_EQ(lines.size(), 1 + 2 * report.run.stages.size());
  EXPECT_EQ(lines.back().rfind("folder,wait,", 0), 0u);

  report.folder.reset();
  SweepResult sweep;
  sweep.runs = {report.run, report.run};
  sweep.runs[1].config.prefetch = 4;
  sweep.best = 1;
  report.sweep = sweep;
  lines = Lines(ReportCsv(report));
  ASSERT_EQ(lines.size(), 3u);
  EXPECT_EQ(lines[0],
            "batch,threads,prefetch,images_per_s,mb_per_s,seconds,batches,bound,limiting_stage,"
            "share,starved,best");
  EXPECT_EQ(lines[1].rfind("8,2,2,400,12.5,2,100,decode,decode,", 0), 0u) << lines[1];
  EXPECT_EQ(lines[1].substr(lines[1].size() - 4), ",0,0") << lines[1];
  for (const std::string& l : lines) EXPECT_EQ(Fields(l), 12u) << l;
  EXPECT_EQ(lines[2].rfind("8,2,4,", 0), 0u);
  EXPECT_EQ(lines[2].substr(lines[2].size() - 2), ",1");
}

TEST(ReportHtml, SelfContainedWithStagesVerdictAndCharts) {
  Report report;
  report.run = Synthetic(0.1, 2.0, 0.1, 1.0, 0);
  std::string html = ReportHtml(report);
  ExpectSelfContained(html);
  for (const char* stage : {"read", "decode", "transform", "collate", "wait"}) {
    EXPECT_NE(html.find(std::string(">") + stage + "<"), std::string::npos) << stage;
  }
  EXPECT_NE(html.find("/data/&lt;train&gt;.lmdb"), std::string::npos);  // escaped
  EXPECT_EQ(html.find("<train>"), std::string::npos);
  EXPECT_NE(html.find("Decode-bound"), std::string::npos);
  EXPECT_EQ(html.find("Sweep"), std::string::npos);
  EXPECT_NE(html.find("order global, rank 0 of 1"), std::string::npos);
  EXPECT_EQ(html.find("Epochs ("), std::string::npos);  // no RAM-disk cache: no epochs table

  SweepResult sweep;
  sweep.runs = {report.run, report.run};
  sweep.runs[1].config.prefetch = 4;
  sweep.runs[1].images_per_s = 500;
  sweep.best = 1;
  report.sweep = sweep;
  html = ReportHtml(report);
  ExpectSelfContained(html);
  EXPECT_NE(html.find("Sweep"), std::string::npos);
  EXPECT_NE(html.find("class=\"best\""), std::string::npos);
  EXPECT_NE(html.find(">b8 t2</text>"), std::string::npos);
  EXPECT_NE(html.find(">k4</text>"), std::string::npos);        // the second column's label
  EXPECT_NE(html.find(">500</text>"), std::string::npos);       // its bar's value
  EXPECT_NE(html.find("fill=\"#43a047\""), std::string::npos);  // the best bar highlighted

  report.sweep.reset();
  report.folder = Synthetic(1.0, 2.0, 0.1, 1.0, 0);
  report.folder->source = "folder";
  html = ReportHtml(report);
  ExpectSelfContained(html);
  EXPECT_NE(html.find("Folder vs LMDB"), std::string::npos);
}

// With the RAM-disk cache, the page says per epoch where it read from, as the console does.
TEST(ReportHtml, EpochsSayWhereTheyReadFrom) {
  Report report;
  report.run = Synthetic(0.1, 2.0, 0.1, 1.0, 0);
  report.run.config.order = SampleOrder::kShards;
  report.run.config.rank = 2;
  report.run.config.world_size = 3;
  report.run.ram_cache.mode = "auto";
  report.run.ram_cache.overlapped = true;
  report.run.ram_cache.copy_seconds = 0.25;
  report.run.ram_cache.copy_wait_seconds = 0.125;
  EpochResult in_place, cached;
  in_place.source = "in place";
  in_place.images = 24;
  in_place.records_in_place = 24;
  in_place.bytes_in_place = 2000000;
  cached.source = "cache";
  cached.images = 24;
  cached.records_cache = 24;
  cached.bytes_cache = 2000000;
  report.run.epochs = {in_place, cached};
  const std::string html = ReportHtml(report);
  ExpectSelfContained(html);
  EXPECT_NE(html.find("order shards, rank 2 of 3"), std::string::npos);
  EXPECT_NE(html.find("Epochs (ram cache: copy 0.250 s, in the background; waited 0.125 s)"),
            std::string::npos);
  EXPECT_NE(html.find("<tr><td>0</td><td>in place</td>"), std::string::npos) << html;
  EXPECT_NE(html.find("<tr><td>1</td><td>cache</td>"), std::string::npos) << html;
  EXPECT_NE(html.find("<td>24</td><td>0</td><td>2.0</td>"), std::string::npos) << html;
  EXPECT_NE(html.find("<td>0</td><td>24</td><td>2.0</td>"), std::string::npos) << html;
}

// Synthetic timings -> Diagnose -> every writer carries the same verdict.
TEST(VerdictPlumbing, SyntheticTimingsReachEveryOutput) {
  struct Case {
    double read, decode, augment, wait, compute;
    const char* bound;
    const char* headline;
    bool starved;
  } cases[] = {
      {3.0, 0.5, 0.1, 2.0, 0, "io", "I/O-bound", false},
      {0.1, 3.0, 0.1, 2.0, 0, "decode", "Decode-bound", false},
      {0.1, 0.5, 3.0, 2.0, 0, "transform", "Transform-bound", false},
      {0.1, 0.5, 0.1, 0.001, 50, "consumer", "Consumer-bound", false},
      {0.1, 3.0, 0.1, 5.0, 2, "decode", "starved", true},
  };
  for (const Case& c : cases) {
    Report report;
    report.run = Synthetic(c.read, c.decode, c.augment, c.wait, c.compute);
    SCOPED_TRACE(c.bound);
    EXPECT_EQ(report.run.verdict.bound, c.bound) << report.run.verdict.headline;
    EXPECT_EQ(report.run.verdict.starved, c.starved);
    const json j = ReportJson(report);
    EXPECT_EQ(j["verdict"]["bound"], c.bound);
    EXPECT_EQ(j["verdict"]["starved"], c.starved);
    EXPECT_EQ(j["verdict"]["compute_ms"], c.compute);
    EXPECT_EQ(j["verdict"]["suggestions"].size(), report.run.verdict.suggestions.size());
    const std::string text = ReportText(report);
    EXPECT_NE(text.find(c.headline), std::string::npos) << text;
    EXPECT_NE(text.find("verdict: " + report.run.verdict.headline), std::string::npos);
    for (const std::string& s : report.run.verdict.suggestions) {
      EXPECT_NE(text.find("  - " + s), std::string::npos) << s;
    }
    EXPECT_NE(ReportHtml(report).find(c.headline), std::string::npos);
  }
}

TEST(ReportText, TableThroughputAndComparison) {
  Report report;
  report.run = Synthetic(0.1, 2.0, 0.1, 1.0, 0);
  report.folder = Synthetic(1.0, 2.0, 0.1, 1.0, 0);
  report.folder->source = "folder";
  report.folder->images_per_s = 160;
  const std::string text = ReportText(report);
  EXPECT_NE(text.find("throughput: 400.0 images/s, 12.5 MB/s stored"), std::string::npos);
  EXPECT_NE(text.find("p95 ms"), std::string::npos);  // FormatTable's header
  EXPECT_NE(text.find("compare: LMDB 400.0 images/s vs folder 160.0 images/s: 2.50x"),
            std::string::npos)
      << text;
}

}  // namespace
}  // namespace dspipe::profile
