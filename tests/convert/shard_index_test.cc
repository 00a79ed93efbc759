// SPDX-License-Identifier: Apache-2.0
// One shard at a time (BuildOptions::shard_index, `dsconvert build --shard-index`) and
// AssembleDataset (`dsconvert assemble`): the N shard builds joined equal one --shards N build.
#include <gtest/gtest.h>
#include <signal.h>

#include <filesystem>
#include <nlohmann/json.hpp>

#include "convert/test_support.h"
#include "format/manifest.h"

namespace dspipe::testing {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

constexpr int kShards = 4;

class ShardIndexTest : public ::testing::Test {
 protected:
  void SetUp() override { Synth(src_, 42, 40, 32, 4); }
  BuildOptions Opts(const std::string& out, int shard_index = -1) const {
    BuildOptions o = Options(src_, out);
    o.shards = kShards;
    o.shard_index = shard_index;
    o.shuffle = true;
    o.seed = 11;
    o.store = StoreMode::kRaw;  // stats from every image: the mean/std check covers all
    return o;
  }
  void BuildOne(const std::string& out, int i, OnError on_error = OnError::kFail) {
    BuildOptions o = Opts(out, i);
    o.on_error = on_error;
    BuildResult r;
    Status s = BuildDataset(o, &r);
    ASSERT_TRUE(s.ok()) << "shard " << i << ": " << s.ToString();
  }
  // The manifest without its "files" list: the shards hold the same records, but LMDB files are
  // not byte-identical across builds (page layout, the one-shard build state), so their sha256
  // differ. The list itself is checked by verify in the first test.
  static json Manifest(const std::string& dir) {
    json m = json::parse(ReadAll(dir + "/manifest.json"));
    m.erase("files");
    return m;
  }
  TempDir tmp_;
  std::string src_ = tmp_ / "src";
};

TEST_F(ShardIndexTest, ShardsBuiltAloneAndAssembledEqualOneShardedBuild) {
  BuildResult r;
  ASSERT_TRUE(BuildDataset(Opts(tmp_ / "whole"), &r).ok());
  const std::string parts = tmp_ / "parts";
  for (int i : {3, 1, 0, 2}) BuildOne(parts, i);  // any order, any process
  // --resume on a finished shard (a retried Ray task) is "already complete", before and after
  // the dataset is assembled; it writes no manifest.json of its own into the dataset dir.
  {
    BuildOptions o = Opts(parts, 1);
    o.resume = true;
    BuildResult rr;
    Status rs = BuildDataset(o, &rr);
    ASSERT_TRUE(rs.ok()) << rs.ToString();
    EXPECT_TRUE(rr.already_complete);
    EXPECT_FALSE(fs::exists(parts + "/manifest.json"));
  }
  AssembleResult a;
  Status s = AssembleDataset(parts, &a);
  ASSERT_TRUE(s.ok()) << s.ToString();
  EXPECT_EQ(a.records, 42u);
  EXPECT_EQ(a.shards, kShards);
  // The whole manifest is equal: counts, shard ranges, bytes, codecs, classes, and mean/std
  // to the last bit (sums of integer pixel values, exact in any order).
  EXPECT_EQ(Manifest(parts), Manifest(tmp_ / "whole"));
  ExpectSameRecords(parts, tmp_ / "whole");
  // Each shard holds the same records as the same shard of the whole build.
  for (int i = 0; i < kShards; ++i) {
    ExpectSameRecords(parts + "/" + format::ShardDirName(i),
                      tmp_ / ("whole/" + format::ShardDirName(i)));
  }
  VerifyResult v;
  ASSERT_TRUE(VerifyDataset(parts, {}, &v).ok());
  EXPECT_EQ(v.records, 42u);
  EXPECT_EQ(v.bad, 0u);
  // The joined manifest lists every shard's data.mdb with size + sha256 (what FetchDataset
  // needs), and verify checked them.
  EXPECT_TRUE(v.files_listed);
  EXPECT_EQ(v.files, static_cast<uint64_t>(kShards));
  EXPECT_EQ(v.bad_files, 0u);
  // Again: nothing to do.
  ASSERT_TRUE(AssembleDataset(parts, &a).ok());
  EXPECT_TRUE(a.already_complete);
}

TEST_F(ShardIndexTest, MissingOrUnfinishedShardIsNamedByAssembleVerifyAndInfo) {
  const std::string parts = tmp_ / "parts";
  BuildOne(parts, 0);
  BuildOne(parts, 2);
  // Shard 3 killed mid-way: it stops itself after its first durable commit (1 record each).
  const pid_t pid =
      SpawnStopping({"build", src_, parts, "--shards", "4", "--shard-index", "3", "--shuffle",
                     "--seed", "11", "--store", "raw", "--commit-mb", "0", "--threads", "1", "-q"},
                    tmp_ / "kill.log");
  ASSERT_TRUE(WaitStopped(pid)) << ReadAll(tmp_ / "kill.log");
  ::kill(pid, SIGKILL);
  ASSERT_EQ(Wait(pid, tmp_ / "kill.log").signal, SIGKILL);

  AssembleResult a;
  Status s = AssembleDataset(parts, &a);
  EXPECT_EQ(s.code(), Status::Code::kCorruption) << s.ToString();
  EXPECT_TRUE(Contains(s.message(), "2 of 4 shards not finished")) << s.ToString();
  EXPECT_TRUE(Contains(s.message(), "shard-00001.lmdb is missing")) << s.ToString();
  EXPECT_TRUE(Contains(s.message(), "shard-00003.lmdb is incomplete (1 records committed"))
      << s.ToString();
  EXPECT_FALSE(fs::exists(parts + "/manifest.json"));
  VerifyResult v;
  s = VerifyDataset(parts, {}, &v);
  EXPECT_TRUE(Contains(s.message(), "shard-00001.lmdb is missing")) << s.ToString();
  std::string text;
  s = DescribeDataset(parts, &text);
  EXPECT_TRUE(Contains(s.message(), "shard-00003.lmdb is incomplete")) << s.ToString();
  RunResult cli = RunTool({"assemble", parts}, tmp_.path());
  EXPECT_EQ(cli.exit_code, 1) << cli.output;
  EXPECT_TRUE(Contains(cli.output, "shard-00001.lmdb is missing")) << cli.output;
  std::unique_ptr<Dataset> ds;
  EXPECT_FALSE(Dataset::Open(parts, {}, &ds).ok());

  // Without --resume the unfinished shard is not replaced; with it, it is finished.
  BuildOptions o = Opts(parts, 3);
  BuildResult r;
  EXPECT_EQ(BuildDataset(o, &r).code(), Status::Code::kAlreadyExists);
  o.resume = true;
  s = BuildDataset(o, &r);
  ASSERT_TRUE(s.ok()) << s.ToString();
  EXPECT_EQ(r.resumed_from, 32u);  // shard 3 begins at 42*3/4 = 31; one record committed
  BuildOne(parts, 1);
  s = AssembleDataset(parts, &a);
  ASSERT_TRUE(s.ok()) << s.ToString();
  s = DescribeDataset(parts, &text);
  EXPECT_TRUE(s.ok()) << s.ToString();
  ASSERT_TRUE(BuildDataset(Opts(tmp_ / "whole"), &r).ok());
  EXPECT_EQ(Manifest(parts), Manifest(tmp_ / "whole"));  // every sample exactly once
  ExpectSameRecords(parts, tmp_ / "whole");
}

TEST_F(ShardIndexTest, RejectedSamplesShiftLaterShardsKeysThroughKeyBegin) {
  // A truncated image lands in some shard; with --on-error skip that shard has one record
  // less. Built alone, later shards keep their plan positions as keys; assemble records the
  // offset (key_begin) and the dataset reads the same records as the whole build.
  const std::string img = src_ + "/images/000005.png";
  const std::string b = ReadAll(img);
  WriteAll(img, b.substr(0, b.size() / 2));
  BuildOptions whole = Opts(tmp_ / "whole");
  whole.on_error = OnError::kSkip;
  BuildResult r;
  ASSERT_TRUE(BuildDataset(whole, &r).ok());
  ASSERT_EQ(r.skipped, 1u);
  const std::string parts = tmp_ / "parts";
  for (int i = 0; i < kShards; ++i) BuildOne(parts, i, OnError::kSkip);
  AssembleResult a;
  Status s = AssembleDataset(parts, &a);
  ASSERT_TRUE(s.ok()) << s.ToString();
  EXPECT_EQ(a.records, 41u);
  EXPECT_EQ(a.skipped, 1u);
  EXPECT_TRUE(Contains(ReadAll(parts + "/rejected.tsv"), "000005.png"));
  ExpectSameRecords(parts, tmp_ / "whole");
  json m = Manifest(parts), w = Manifest(tmp_ / "whole");
  int shifted = 0;
  for (json& sh : m["shards"]) shifted += sh.contains("key_begin") ? 1 : 0;
  for (json& sh : m["shards"]) sh.erase("key_begin");
  EXPECT_EQ(m, w);
  // Shards after the one holding the bad file are shifted (unless it was in the last one).
  EXPECT_GT(shifted, 0);  // seed 11 puts 000005 before the last shard (keeps the test honest)
  EXPECT_LE(shifted, kShards - 1);
  VerifyResult v;
  ASSERT_TRUE(VerifyDataset(parts, {}, &v).ok());
  EXPECT_EQ(v.bad, 0u);
}

TEST_F(ShardIndexTest, OtherOptionsOrSourceListAreRefusedNamingTheShard) {
  const std::string parts = tmp_ / "parts";
  for (int i = 0; i < 3; ++i) BuildOne(parts, i);
  BuildOptions o = Opts(parts, 3);
  o.seed = 12;  // another shuffle: another plan
  BuildResult r;
  ASSERT_TRUE(BuildDataset(o, &r).ok());
  AssembleResult a;
  Status s = AssembleDataset(parts, &a);
  EXPECT_EQ(s.code(), Status::Code::kInvalidArgument) << s.ToString();
  EXPECT_TRUE(Contains(s.message(), "shard-00003.lmdb was built with other options"))
      << s.ToString();
  EXPECT_TRUE(Contains(s.message(), "seed was 11, now 12")) << s.ToString();
  // Same options, another source list (a sample added after shards 0-2 were built).
  fs::copy_file(src_ + "/images/000000.png", src_ + "/images/000099.png");
  fs::copy_file(src_ + "/masks/000000.png", src_ + "/masks/000099.png");
  o.seed = 11;
  o.overwrite = true;
  ASSERT_TRUE(BuildDataset(o, &r).ok());
  s = AssembleDataset(parts, &a);
  EXPECT_EQ(s.code(), Status::Code::kInvalidArgument) << s.ToString();
  EXPECT_TRUE(Contains(s.message(), "shard-00003.lmdb was built from another source list"))
      << s.ToString();
  EXPECT_FALSE(fs::exists(parts + "/manifest.json"));
}

TEST_F(ShardIndexTest, RebuildingAShardDropsTheJoinedManifest) {
  const std::string parts = tmp_ / "parts";
  for (int i = 0; i < kShards; ++i) BuildOne(parts, i);
  AssembleResult a;
  ASSERT_TRUE(AssembleDataset(parts, &a).ok());
  BuildOptions o = Opts(parts, 2);
  o.overwrite = true;
  BuildResult r;
  ASSERT_TRUE(BuildDataset(o, &r).ok());
  EXPECT_FALSE(fs::exists(parts + "/manifest.json"));  // unreadable until assembled again
  std::string text;
  Status s = DescribeDataset(parts, &text);
  EXPECT_TRUE(Contains(s.message(), "finished but not joined: run `dsconvert assemble"))
      << s.ToString();
  ASSERT_TRUE(AssembleDataset(parts, &a).ok());
  EXPECT_TRUE(DescribeDataset(parts, &text).ok());
}

TEST_F(ShardIndexTest, BadShardIndexIsRefused) {
  BuildResult r;
  for (int bad : {4, -2}) {
    Status s = BuildDataset(Opts(tmp_ / "x", bad), &r);
    EXPECT_EQ(s.code(), Status::Code::kInvalidArgument) << s.ToString();
    EXPECT_TRUE(Contains(s.message(), "BuildOptions::shard_index must be 0..3")) << s.ToString();
  }
  BuildOptions o = Opts(tmp_ / "x", 0);
  o.shards = 1;
  EXPECT_EQ(BuildDataset(o, &r).code(), Status::Code::kInvalidArgument);
  AssembleResult a;
  EXPECT_EQ(AssembleDataset(src_, &a).code(), Status::Code::kNotFound);
  // A whole --shards build is not joined by assemble (it joins itself).
  ASSERT_TRUE(BuildDataset(Opts(tmp_ / "whole"), &r).ok());
  Status s = AssembleDataset(tmp_ / "whole", &a);
  EXPECT_EQ(s.code(), Status::Code::kNotFound) << s.ToString();
}

}  // namespace
}  // namespace dspipe::testing
