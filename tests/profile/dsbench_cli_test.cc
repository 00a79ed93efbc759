// SPDX-License-Identifier: Apache-2.0
// The dsbench binary, run as a child process on the small synth dataset.
#include <gtest/gtest.h>
#include <lmdb.h>
#include <sys/wait.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <opencv2/core.hpp>
#include <opencv2/imgcodecs.hpp>
#include <sstream>

#include "dspipe/format.h"
#include "test_dataset.h"

namespace dspipe::profile {
namespace {

using testing::SmallDataset;

// Runs dsbench with args (stdout + stderr to dir/out.txt); returns the exit code.
int Dsbench(const std::string& args, std::string* output = nullptr) {
  const std::string out = SmallDataset().dir + "/out.txt";
  // Under TSan the child needs the test's suppressions (harmless otherwise).
  const std::string cmd = "TSAN_OPTIONS=suppressions=" DSPIPE_SOURCE_DIR
                          "/tests/profile/tsan.supp " DSBENCH_PATH " " +
                          args + " > " + out + " 2>&1";
  const int rc = std::system(cmd.c_str());
  if (output) {
    std::ifstream in(out);
    std::stringstream ss;
    ss << in.rdbuf();
    *output = ss.str();
  }
  return WIFEXITED(rc) ? WEXITSTATUS(rc) : -1;
}

// Garbles bytes 40..80 of record `index`'s payload in the dspipe LMDB at dir (its header stays
// valid; the PNG no longer decodes, nor passes the CRC check).
void GarbleRecord(const std::string& dir, uint64_t index) {
  MDB_env* env = nullptr;
  ASSERT_EQ(mdb_env_create(&env), 0);
  mdb_env_set_maxdbs(env, 8);
  ASSERT_EQ(mdb_env_open(env, dir.c_str(), 0, 0644), 0) << dir;
  MDB_txn* txn = nullptr;
  MDB_dbi dbi = 0;
  ASSERT_EQ(mdb_txn_begin(env, nullptr, 0, &txn), 0);
  ASSERT_EQ(mdb_dbi_open(txn, kRecordsDb, 0, &dbi), 0);
  uint8_t kb[kKeySize];
  EncodeKey(index, kb);
  MDB_val k{kKeySize, kb}, v;
  ASSERT_EQ(mdb_get(txn, dbi, &k, &v), 0);
  std::string value(static_cast<const char*>(v.mv_data), v.mv_size);
  ASSERT_GT(value.size(), kRecordHeaderSize + 80);
  for (size_t i = kRecordHeaderSize + 40; i < kRecordHeaderSize + 80; ++i) value[i] ^= 0x5A;
  v = MDB_val{value.size(), value.data()};
  ASSERT_EQ(mdb_put(txn, dbi, &k, &v, 0), 0);
  ASSERT_EQ(mdb_txn_commit(txn), 0);
  mdb_env_close(env);
}

nlohmann::json ReadJson(const std::string& path) {
  std::ifstream in(path);
  EXPECT_TRUE(in.good()) << path;
  return nlohmann::json::parse(in);
}

TEST(DsbenchCli, ProfilesAnLmdbAndWritesEveryOutput) {
  const auto& d = SmallDataset();
  const std::string json = d.dir + "/cli.json", csv = d.dir + "/cli.csv",
                    html = d.dir + "/cli.html", trace = d.dir + "/cli.trace.json";
  std::string out;
  ASSERT_EQ(Dsbench(d.lmdb +
                        " --batch 8 --threads 2 --prefetch 2 --batches 6 --warmup 1 "
                        "--compute-ms 1 --hflip 0.5 --json " +
                        json + " --csv " + csv + " --report " + html + " --trace " + trace,
                    &out),
            0)
      << out;
  EXPECT_NE(out.find("throughput:"), std::string::npos) << out;
  EXPECT_NE(out.find("verdict:"), std::string::npos) << out;
  const nlohmann::json j = ReadJson(json);
  EXPECT_EQ(j.at("tool"), "dsbench");
  EXPECT_GT(j.at("throughput").at("images_per_s").get<double>(), 0);
  EXPECT_EQ(j["throughput"]["batches"], 6);
  EXPECT_EQ(j["config"]["compute_ms"], 1.0);
  EXPECT_EQ(j["config"]["hflip"], 0.5);
  std::ifstream c(csv);
  std::string header;
  std::getline(c, header);
  EXPECT_EQ(header.rfind("source,stage,count,", 0), 0u);
  EXPECT_TRUE(ReadJson(trace).contains("traceEvents"));
  std::ifstream h(html);
  std::stringstream ss;
  ss << h.rdbuf();
  EXPECT_NE(ss.str().find("<svg"), std::string::npos);
}

TEST(DsbenchCli, CompareFolderWithLmdb) {
  const auto& d = SmallDataset();
  const std::string json = d.dir + "/compare.json";
  std::string out;
  ASSERT_EQ(Dsbench(d.folder + " --compare " + d.lmdb +
                        " --threads 2 --batches 3 --warmup 1 -q --json " + json,
                    &out),
            0)
      << out;
  EXPECT_TRUE(out.empty()) << out;  // -q
  const nlohmann::json j = ReadJson(json);
  EXPECT_EQ(j["source"], "lmdb");
  EXPECT_EQ(j["dataset"]["path"], d.lmdb);
  EXPECT_EQ(j["compare"]["folder"]["dataset"]["path"], d.folder);
  EXPECT_EQ(j["compare"]["folder"]["throughput"]["images"], 24);
  EXPECT_GT(j["compare"]["speedup"].get<double>(), 0);
}

TEST(DsbenchCli, SweepTwoByTwo) {
  const auto& d = SmallDataset();
  const std::string json = d.dir + "/sweep.json", csv = d.dir + "/sweep.csv";
  std::string out;
  ASSERT_EQ(Dsbench(d.lmdb + " --sweep 'threads=1,2 batch=4,8' --batches 2 --warmup 1 --json " +
                        json + " --csv " + csv,
                    &out),
            0)
      << out;
  EXPECT_NE(out.find("<- best"), std::string::npos) << out;
  const nlohmann::json j = ReadJson(json);
  ASSERT_EQ(j.at("sweep").size(), 4u);
  EXPECT_EQ(j["sweep"][0]["config"]["batch"], 4);
  EXPECT_EQ(j["sweep"][3]["config"]["batch"], 8);
  EXPECT_EQ(j["sweep"][3]["config"]["threads"], 2);
  const int best = j.at("best").at("index");
  // The top-level result is the best configuration's.
  EXPECT_EQ(j["throughput"]["images_per_s"], j["sweep"][best]["throughput"]["images_per_s"]);
  std::ifstream c(csv);
  int lines = 0;
  for (std::string l; std::getline(c, l);) ++lines;
  EXPECT_EQ(lines, 5);
}

// --cache DIR on a dataset not cached yet, 2 epochs, --cache-wait: epoch 0 in place, epoch 1
// from the copy, in the console, the JSON and the epochs CSV.
TEST(DsbenchCli, CacheWaitReadsTheSecondEpochFromTheCopy) {
  const auto& d = SmallDataset();
  const std::string cache = d.dir + "/ramcache", json = d.dir + "/rc.json",
                    csv = d.dir + "/rc-epochs.csv";
  std::filesystem::remove_all(cache);  // a fresh cache: the copy is made during this run
  std::string out;
  ASSERT_EQ(
      Dsbench(d.lmdb + " --batch 8 --threads 2 --epochs 2 --warmup 0 --sample-ms 0 " + "--cache " +
                  cache + " --cache-wait --json " + json + " --epochs-csv " + csv,
              &out),
      0)
      << out;
  EXPECT_NE(out.find("epochs (ram cache: copy "), std::string::npos) << out;
  EXPECT_NE(out.find("    1  cache "), std::string::npos) << out;
  const nlohmann::json j = ReadJson(json);
  EXPECT_EQ(j["ram_cache"]["cache_from_epoch"], 1);
  EXPECT_EQ(j["epochs"][0]["records_in_place"], 24);
  EXPECT_EQ(j["epochs"][1]["records_cache"], 24);
  std::ifstream c(csv);
  std::string header, row0, row1;
  std::getline(c, header);
  std::getline(c, row0);
  std::getline(c, row1);
  EXPECT_EQ(header.rfind("epoch,source,batches,images,", 0), 0u) << header;
  EXPECT_EQ(row0.rfind("0,in place,3,24,", 0), 0u) << row0;
  EXPECT_EQ(row1.rfind("1,cache,3,24,", 0), 0u) << row1;
  std::filesystem::remove_all(cache);
}

// --no-cache-overlap: the copy is made before the run, and epoch 0 already reads it. The old
// spelling, --cache-no-overlap, does the same and says to write the new one.
TEST(DsbenchCli, NoCacheOverlapCopiesFirstAndItsOldNameSaysSo) {
  const auto& d = SmallDataset();
  for (const std::string flag : {"--no-cache-overlap", "--cache-no-overlap"}) {
    const std::string cache = d.dir + "/ramcache-first", json = d.dir + "/first.json";
    std::filesystem::remove_all(cache);
    std::string out;
    ASSERT_EQ(Dsbench(d.lmdb + " --batch 8 --threads 2 --epochs 1 --warmup 0 --sample-ms 0 " +
                          "--cache " + cache + " " + flag + " --json " + json,
                      &out),
              0)
        << out;
    const nlohmann::json j = ReadJson(json);
    EXPECT_EQ(j["epochs"][0]["records_cache"], 24) << flag;  // epoch 0 read the copy
    EXPECT_EQ(j["epochs"][0]["records_in_place"], 0) << flag;
    const bool warned =
        out.find("--cache-no-overlap is deprecated: write --no-cache-overlap") != std::string::npos;
    EXPECT_EQ(warned, flag == "--cache-no-overlap") << out;
    std::filesystem::remove_all(cache);
  }
}

// 3 ranks of a 3-shard copy of the dataset (8 samples a shard), one whole epoch each: with
// order shards every rank reads one shard, with blocks a third of the epoch; either way the
// ranks' images add up to the dataset (24 divides evenly: no padding, nothing dropped).
TEST(DsbenchCli, EachRankMeasuresItsShareOfTheEpoch) {
  const auto& d = SmallDataset();
  const std::string& sharded = testing::ShardedDataset();
  for (const std::string order : {"shards", "blocks"}) {
    uint64_t total = 0;
    for (int rank = 0; rank < 3; ++rank) {
      const std::string json = d.dir + "/rank" + std::to_string(rank) + ".json";
      const std::string csv = d.dir + "/rank" + std::to_string(rank) + ".csv";
      std::string out;
      ASSERT_EQ(Dsbench(sharded + " --order " + order + " --block-size 4 --rank " +
                            std::to_string(rank) + " --world-size 3 --epochs 1 --warmup 0 " +
                            "--batch 4 --threads 1 --sample-ms 0 --json " + json + " --csv " + csv,
                        &out),
                0)
          << out;
      EXPECT_NE(out.find("order " + order), std::string::npos) << out;
      EXPECT_NE(out.find("rank " + std::to_string(rank) + " of 3"), std::string::npos) << out;
      const nlohmann::json j = ReadJson(json);
      EXPECT_EQ(j["config"]["order"], order);
      EXPECT_EQ(j["config"]["rank"], rank);
      EXPECT_EQ(j["config"]["world_size"], 3);
      ASSERT_EQ(j["epochs"].size(), 1u) << j.dump();
      const uint64_t images = j["throughput"]["images"].get<uint64_t>();
      EXPECT_EQ(j["epochs"][0]["images"].get<uint64_t>(), images);
      EXPECT_EQ(images, 8u) << order << " rank " << rank;
      total += images;
      std::ifstream c(csv);
      std::string header, row;
      std::getline(c, header);
      std::getline(c, row);
      EXPECT_TRUE(header.ends_with(",order,rank,world_size")) << header;
      EXPECT_TRUE(row.ends_with("," + order + "," + std::to_string(rank) + ",3")) << row;
    }
    EXPECT_EQ(total, 24u) << order;
  }
}

TEST(DsbenchCli, UsageErrorsAndFailures) {
  const auto& d = SmallDataset();
  std::string out;
  EXPECT_EQ(Dsbench(d.lmdb + " --sweep 'cores=1'", &out), 2);
  EXPECT_NE(out.find("unknown key 'cores'"), std::string::npos) << out;
  EXPECT_EQ(Dsbench(d.lmdb + " --batches 3 --epochs 1", &out), 2) << out;
  EXPECT_EQ(Dsbench(d.lmdb + " --device tpu", &out), 2) << out;
  EXPECT_EQ(Dsbench(d.lmdb + " --sweep threads=1 --trace x.json", &out), 2) << out;
  EXPECT_EQ(Dsbench(d.lmdb + " --rank 3 --world-size 3", &out), 2) << out;
  EXPECT_NE(out.find("--rank 3: must be less than --world-size 3"), std::string::npos) << out;
  EXPECT_EQ(Dsbench(d.lmdb + " --order rows", &out), 2) << out;
  EXPECT_NE(out.find("--order"), std::string::npos) << out;
  EXPECT_EQ(Dsbench(d.folder + " --compare " + d.lmdb + " --world-size 2", &out), 2) << out;
  // A lone LMDB is one shard: the sampler refuses 3 ranks of order shards, naming the flags.
  EXPECT_EQ(Dsbench(d.lmdb + " --order shards --world-size 3 -q", &out), 1) << out;
  EXPECT_NE(out.find("--order shards over 1 shard(s), --world-size 3"), std::string::npos) << out;
  EXPECT_EQ(Dsbench(d.dir + "/nope.lmdb -q", &out), 1);
  EXPECT_NE(out.find("nope.lmdb"), std::string::npos) << out;
}

// The library's messages name the options as dsbench flags; each flag they name exists, and
// does what the message says. A corrupt record fails the run with a message naming
// --max-corrupt 10, and with it the run skips the record and finishes the epoch.
TEST(DsbenchCli, ACorruptRecordNamesMaxCorruptWhichSkipsIt) {
  const auto& d = SmallDataset();
  const std::string db = d.dir + "/corrupt.lmdb", json = d.dir + "/corrupt.json";
  std::filesystem::remove_all(db);
  std::filesystem::copy(d.lmdb, db, std::filesystem::copy_options::recursive);
  GarbleRecord(db, 5);
  const std::string run = db + " --epochs 1 --warmup 0 --batch 4 --threads 1 --sample-ms 0 -q";
  std::string out;
  EXPECT_EQ(Dsbench(run, &out), 1) << out;
  EXPECT_NE(out.find("set --max-corrupt 10"), std::string::npos) << out;
  ASSERT_EQ(Dsbench(run + " --max-corrupt 10 --json " + json, &out), 0) << out;
  EXPECT_EQ(ReadJson(json)["throughput"]["images"], 23) << out;  // 24 less the corrupt one
  // --verify-crc reads the same records (the garbled one fails its CRC check first).
  EXPECT_EQ(Dsbench(run + " --verify-crc", &out), 1) << out;
  EXPECT_NE(out.find("set --max-corrupt 10"), std::string::npos) << out;
  ASSERT_EQ(Dsbench(run + " --verify-crc --max-corrupt 1 --max-readers 64 --os-readahead", &out), 0)
      << out;
  EXPECT_EQ(Dsbench(run + " --max-corrupt -1", &out), 2) << out;
}

// --remainder and --drop-last: 24 samples over 5 ranks, rank 4's share of one epoch.
TEST(DsbenchCli, RemainderAndDropLastCutTheRanksShare) {
  const auto& d = SmallDataset();
  const std::string json = d.dir + "/remainder.json";
  const auto images = [&](const std::string& flags) {
    std::string out;
    EXPECT_EQ(Dsbench(d.lmdb + " --world-size 5 --rank 4 --epochs 1 --warmup 0 --batch 2 " +
                          "--threads 1 --sample-ms 0 -q --json " + json + flags,
                      &out),
              0)
        << flags << ": " << out;
    return ReadJson(json)["throughput"]["images"].get<int>();
  };
  EXPECT_EQ(images(""), 5);  // pad: ceil(24 / 5)
  EXPECT_EQ(images(" --remainder pad"), 5);
  EXPECT_EQ(images(" --remainder drop"), 4);    // 24 / 5
  EXPECT_EQ(images(" --remainder uneven"), 4);  // ranks 0..3 get the 4 left over
  EXPECT_EQ(images(" --drop-last"), 4);         // 5 = 2 + 2 + 1: the 1 is dropped
  // More ranks than samples: the sampler's message names the flag as dsbench spells it.
  std::string out;
  EXPECT_EQ(Dsbench(d.lmdb + " --world-size 30 --rank 29 --remainder drop -q", &out), 1) << out;
  EXPECT_NE(out.find("nothing with --remainder drop"), std::string::npos) << out;
  EXPECT_EQ(Dsbench(d.lmdb + " --remainder even", &out), 2) << out;
}

// A dataset whose manifest gives a channel a std of 0 (channel 1 holds 100 everywhere): the
// run fails with a message naming --mean-std identity, which then runs it.
TEST(DsbenchCli, AStdOfZeroNamesMeanStdIdentityWhichRunsIt) {
  const auto& d = SmallDataset();
  const std::string src = d.dir + "/flat", db = d.dir + "/flat.lmdb";
  std::filesystem::create_directories(src + "/images");
  cv::RNG rng(7);
  for (int i = 0; i < 4; ++i) {
    cv::Mat img(16, 16, CV_8UC3);
    rng.fill(img, cv::RNG::UNIFORM, 0, 256);
    for (int y = 0; y < img.rows; ++y) {
      for (int x = 0; x < img.cols; ++x) img.at<cv::Vec3b>(y, x)[1] = 100;
    }
    ASSERT_TRUE(cv::imwrite(src + "/images/00000" + std::to_string(i) + ".png", img));
  }
  ASSERT_EQ(std::system(("TSAN_OPTIONS=report_bugs=0 " DSCONVERT_PATH " build " + src + " " + db +
                         " --threads 1 --no-sync -q > /dev/null")
                            .c_str()),
            0);
  const std::string run = db + " --batches 2 --warmup 0 --batch 2 --threads 1 --sample-ms 0 -q";
  std::string out;
  EXPECT_EQ(Dsbench(run, &out), 1) << out;
  EXPECT_NE(out.find("a std of 0"), std::string::npos) << out;
  EXPECT_NE(out.find("pass --mean-std identity"), std::string::npos) << out;
  EXPECT_EQ(Dsbench(run + " --mean-std identity", &out), 0) << out;
  EXPECT_EQ(Dsbench(run + " --mean-std dataset", &out), 1) << out;
  // identity is no normalization: with a mean and std of its own, a contradiction.
  EXPECT_EQ(Dsbench(run + " --mean-std identity --mean 1 --std 1", &out), 1) << out;
  EXPECT_NE(out.find("--mean-std identity"), std::string::npos) << out;
  EXPECT_EQ(Dsbench(run + " --mean-std manifest", &out), 2) << out;
}

}  // namespace
}  // namespace dspipe::profile

namespace dspipe::profile {
namespace {

TEST(DsbenchCli, ResourceTimelineGoesToJsonCsvTraceAndReport) {
  const auto& d = testing::SmallDataset();
  const std::string json = d.dir + "/tl.json", csv = d.dir + "/tl.csv",
                    trace = d.dir + "/tl.trace.json", html = d.dir + "/tl.html";
  std::string out;
  ASSERT_EQ(Dsbench(d.lmdb + " --batches 6 --warmup 1 --threads 2 --sample-ms 1 --json " + json +
                        " --timeline-csv " + csv + " --trace " + trace + " --report " + html,
                    &out),
            0)
      << out;
  EXPECT_NE(out.find("resources: CPU"), std::string::npos) << out;
  const nlohmann::json j = ReadJson(json);
  const nlohmann::json& tl = j.at("timeline");
  EXPECT_EQ(tl.at("sample_ms"), 1);
  const nlohmann::json& samples = tl.at("samples");
  ASSERT_GE(samples.size(), 2u);
  uint64_t images = 0;
  for (size_t i = 0; i < samples.size(); ++i) {
    EXPECT_GT(samples[i].at("rss_bytes").get<uint64_t>(), 0u);
    if (i > 0) {
      EXPECT_GT(samples[i].at("t_s").get<double>(), samples[i - 1].at("t_s").get<double>());
    }
    images += samples[i].at("images").get<uint64_t>();
    if (!tl.at("gpu").get<bool>()) {
      EXPECT_FALSE(samples[i].contains("gpu_util_pct")) << "absent, not zero, without a GPU";
      EXPECT_FALSE(samples[i].contains("gpu_mem_used_mb"));
    }
  }
  EXPECT_EQ(images, j["throughput"]["images"].get<uint64_t>());
  std::ifstream c(csv);
  std::string line;
  size_t rows = 0;
  std::getline(c, line);
  EXPECT_EQ(line.rfind("t_s,cpu_user_pct,cpu_system_pct,rss_bytes,read_bytes,", 0), 0u) << line;
  while (std::getline(c, line)) ++rows;
  EXPECT_EQ(rows, samples.size());
  const nlohmann::json t = ReadJson(trace);
  size_t counters = 0;
  for (const auto& e : t.at("traceEvents")) counters += e.value("ph", "") == "C";
  EXPECT_GE(counters, 6 * samples.size()) << "six counter tracks per sample";
  std::ifstream h(html);
  std::stringstream hs;
  hs << h.rdbuf();
  EXPECT_NE(hs.str().find("Resource timeline"), std::string::npos);
}

// --transform FILE.json: the pipeline runs (its config in the JSON), the stage table, JSON and
// CSV get a transform row per segment; a bad file or --hflip with it is refused.
TEST(DsbenchCli, TransformPipelineFromAFile) {
  const auto& d = SmallDataset();
  const std::string spec = d.dir + "/aug.json", json = d.dir + "/aug.out.json",
                    csv = d.dir + "/aug.csv";
  std::ofstream(spec) << R"({"__version__": "2.0.8", "transform": {"__class_fullname__": "Compose",
      "transforms": [{"__class_fullname__": "RandomCrop", "height": 24, "width": 24, "p": 1},
                     {"__class_fullname__": "HorizontalFlip", "p": 0.5},
                     {"__class_fullname__": "GaussianBlur", "p": 1}]}})";
  std::string out;
  ASSERT_EQ(Dsbench(d.lmdb +
                        " --batch 4 --threads 2 --batches 4 --warmup 1 --no-normalize "
                        "--transform " +
                        spec + " --json " + json + " --csv " + csv,
                    &out),
            0)
      << out;
  EXPECT_NE(out.find(" transform1"), std::string::npos) << out;
  EXPECT_NE(out.find("geometric: RandomCrop > HorizontalFlip"), std::string::npos) << out;
  EXPECT_NE(out.find(" transform2"), std::string::npos) << out;
  const nlohmann::json j = ReadJson(json);
  EXPECT_EQ(j["dataset"]["height"], 24) << "the batches are the pipeline's size";
  EXPECT_EQ(j["config"]["transform"]["transforms"][0]["__class_fullname__"], "RandomCrop");
  int stage = 0, rows = 0;  // the transform stage, and its two segment rows under it
  for (const auto& s : j["stages"]) {
    stage += s["stage"] == "transform";
    rows += s["stage"] == "segment";
  }
  EXPECT_EQ(stage, 1);
  EXPECT_EQ(rows, 2);
  std::ifstream c(csv);
  std::stringstream cs;
  cs << c.rdbuf();
  EXPECT_NE(cs.str().find(",transform2,"), std::string::npos) << cs.str();
  // Refused: a transform dspipe does not implement (naming it and the file), and --hflip too.
  std::ofstream(spec) << R"([{"__class_fullname__": "ZoomBlur"}])";
  EXPECT_EQ(Dsbench(d.lmdb + " --transform " + spec, &out), 1);
  EXPECT_NE(out.find("ZoomBlur"), std::string::npos) << out;
  EXPECT_NE(out.find(spec), std::string::npos) << out;
  EXPECT_EQ(Dsbench(d.lmdb + " --hflip 0.5 --transform " + spec, &out), 2) << out;
  // So are the python branch's crop and interpolation flags (augment's, not the pipeline's).
  EXPECT_EQ(Dsbench(d.lmdb + " --crop-scale 0.5,1 --transform " + spec, &out), 2) << out;
  EXPECT_NE(out.find("--crop-scale"), std::string::npos) << out;
  EXPECT_EQ(Dsbench(d.lmdb + " --interpolation area --transform " + spec, &out), 2) << out;
  EXPECT_EQ(Dsbench(d.lmdb + " --transform " + d.dir + "/no-such.json", &out), 1);
  EXPECT_NE(out.find("no-such.json"), std::string::npos) << out;
}

}  // namespace
}  // namespace dspipe::profile

namespace dspipe::profile {
namespace {

// The loader options Python has, as flags (issue 20): the JSON config says what ran, the batch
// shape follows --size / --channels, and a bad value is a usage error naming the flag.
TEST(DsbenchCli, CropSizeInterpolationChannelsMeanStd) {
  const auto& d = SmallDataset();
  const std::string json = d.dir + "/loader-options.json";
  std::string out;
  ASSERT_EQ(Dsbench(d.lmdb +
                        " --batches 2 --warmup 0 --threads 2 --sample-ms 0 -q --size 16x24"
                        " --crop-scale 0.25,0.5 --crop-ratio 0.5,2 --interpolation area"
                        " --channels 1 --mean 100 --std 50 --json " +
                        json,
                    &out),
            0)
      << out;
  const nlohmann::json j = ReadJson(json);
  EXPECT_EQ(j["config"]["size"], nlohmann::json({16, 24}));
  EXPECT_EQ(j["config"]["crop_scale"], nlohmann::json({0.25, 0.5}));
  EXPECT_EQ(j["config"]["crop_ratio"], nlohmann::json({0.5, 2.0}));
  EXPECT_EQ(j["config"]["interpolation"], "area");
  EXPECT_EQ(j["config"]["mean"], nlohmann::json({100.0}));
  EXPECT_EQ(j["dataset"]["height"], 16);
  EXPECT_EQ(j["dataset"]["width"], 24);
  EXPECT_EQ(j["dataset"]["channels"], 1);
  EXPECT_EQ(Dsbench(d.lmdb + " --crop-scale 0.5,0.25", &out), 2) << out;
  EXPECT_NE(out.find("the crop's area range --crop-scale is (0.5, 0.25): need 0 < min <= max <= 1"), std::string::npos) << out;
  EXPECT_EQ(Dsbench(d.lmdb + " --size 16", &out), 2) << out;
  EXPECT_NE(out.find("--size 16: expected HxW"), std::string::npos) << out;
  EXPECT_EQ(Dsbench(d.lmdb + " --interpolation bicubic", &out), 2) << out;
  EXPECT_EQ(Dsbench(d.lmdb + " --channels 2", &out), 2) << out;
  // A library error names the flag, not the C++ field: --mean with the wrong count.
  EXPECT_EQ(Dsbench(d.lmdb + " --batches 1 --warmup 0 -q --mean 1,2 --std 1,2", &out), 1) << out;
  EXPECT_NE(out.find("--mean/--std have 2/2 values for 3 channels"), std::string::npos) << out;
  EXPECT_EQ(out.find("LoaderOptions::"), std::string::npos) << out;
  // Validation geometry: shorter side to N, then the centred --size window.
  ASSERT_EQ(Dsbench(d.lmdb +
                        " --batches 1 --warmup 0 --threads 2 --sample-ms 0 -q --size 16x24"
                        " --resize-shorter 20 --json " +
                        json,
                    &out),
            0)
      << out;
  const nlohmann::json v = ReadJson(json);
  EXPECT_EQ(v["config"]["resize_shorter"], 20);
  EXPECT_EQ(v["dataset"]["height"], 16);
  EXPECT_EQ(v["dataset"]["width"], 24);
  EXPECT_EQ(Dsbench(d.lmdb + " --size 16x24 --resize-shorter 20 --crop-scale 0.5,1", &out), 2)
      << out;
  EXPECT_NE(out.find("--resize-shorter"), std::string::npos) << out;
  EXPECT_EQ(out.find("AugmentOptions::"), std::string::npos) << out;
  EXPECT_EQ(Dsbench(d.lmdb + " --resize-shorter -1", &out), 2) << out;
}

}  // namespace
}  // namespace dspipe::profile
