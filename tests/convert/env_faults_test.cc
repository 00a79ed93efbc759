// SPDX-License-Identifier: Apache-2.0
// dsconvert build through the Env (BuildOptions::env): a FaultEnv injects a read error into a
// source file, a full disk, a torn write and a failing fsync into the files the build writes.
// Each build stops with an error naming the file, leaves nothing that looks complete, and a
// --resume with a healthy Env finishes it with the records of a clean build.
#include <gtest/gtest.h>

#include "core/fault_env.h"
#include "convert/test_support.h"
#include "dspipe/env.h"

namespace dspipe::testing {
namespace {

// No temp file of an atomic write left behind in dir.
void ExpectNoTempFiles(const std::string& dir) {
  for (const std::string& f : ListDir(dir)) {
    EXPECT_FALSE(Contains(fs::path(f).filename().string(), ".tmp.")) << f;
  }
}

class EnvBuildTest : public ::testing::Test {
 protected:
  void SetUp() override { Synth(src_, 8, 32, 24); }

  // The records of a clean build with the default Env, for comparison.
  std::vector<uint32_t> CleanCrcs(int shards = 1) {
    BuildOptions o = Options(src_, tmp_ / ("clean" + std::to_string(shards)));
    o.shards = shards;
    BuildResult r;
    Status s = BuildDataset(o, &r);
    EXPECT_TRUE(s.ok()) << s.ToString();
    return Crcs(o.output);
  }

  // --resume with the default Env; returns its result.
  BuildResult Resume(BuildOptions o) {
    o.env = nullptr;
    o.resume = true;
    BuildResult r;
    Status s = BuildDataset(o, &r);
    EXPECT_TRUE(s.ok()) << s.ToString();
    return r;
  }

  TempDir tmp_;
  std::string src_ = tmp_ / "src";
  core::FaultEnv env_;
};

TEST_F(EnvBuildTest, ReadErrorInASourceFileNamesItAndResumeCompletes) {
  const std::vector<uint32_t> clean = CleanCrcs();
  const std::vector<std::string> images = ListDir(src_ + "/images");
  ASSERT_EQ(images.size(), 8u);
  BuildOptions o = Options(src_, tmp_ / "out");
  o.env = &env_;
  o.threads = 1;  // reads in plan order: image 0, mask 0, image 1, mask 1, image 2 ...
  env_.FailReadWithEio(5);
  BuildResult r;
  Status s = BuildDataset(o, &r);
  ASSERT_EQ(s.code(), Status::Code::kIOError) << s.ToString();
  EXPECT_GE(env_.reads(), 5) << "the source files were not read through the Env";
  // The sample whose file failed (image 2 with one thread; whichever it is, the samples before
  // it are committed, so the resume starts there: the output stage runs in plan order).
  const std::vector<std::string> masks = ListDir(src_ + "/masks");
  uint64_t failed = images.size();
  for (size_t i = 0; i < images.size(); ++i) {
    if (Contains(s.message(), images[i] + ":") || Contains(s.message(), masks[i] + ":")) failed = i;
  }
  ASSERT_LT(failed, images.size()) << "no source file named: " << s.ToString();
  EXPECT_TRUE(Contains(s.message(), "Input/output error")) << s.ToString();
  EXPECT_TRUE(Contains(s.message(), "BuildOptions::resume")) << s.ToString();
  EXPECT_FALSE(fs::exists(o.output + "/manifest.json"));
  std::unique_ptr<Dataset> ds;
  s = Dataset::Open(o.output, {}, &ds);
  EXPECT_EQ(s.code(), Status::Code::kCorruption) << s.ToString();
  EXPECT_TRUE(Contains(s.message(), "interrupted")) << s.ToString();

  const BuildResult resumed = Resume(o);
  EXPECT_EQ(resumed.resumed_from, failed);  // the samples before the failing one were kept
  EXPECT_EQ(Crcs(o.output), clean);
  EXPECT_TRUE(fs::exists(o.output + "/manifest.json"));
}

TEST_F(EnvBuildTest, ReadErrorInACsvSourceNamesItAndCreatesNothing) {
  std::string csv = "image,mask\n";
  for (const std::string& img : ListDir(src_ + "/images")) {
    const std::string stem = fs::path(img).stem().string();
    csv += "images/" + stem + ".png,masks/" + stem + ".png\n";
  }
  WriteAll(src_ + "/list.csv", csv);
  BuildOptions o = Options(src_ + "/list.csv", tmp_ / "out");
  o.env = &env_;
  env_.FailReadWithEio(1);
  BuildResult r;
  Status s = BuildDataset(o, &r);
  ASSERT_EQ(s.code(), Status::Code::kIOError) << s.ToString();
  EXPECT_TRUE(Contains(s.message(), src_ + "/list.csv")) << s.ToString();
  EXPECT_FALSE(fs::exists(o.output)) << "a source that cannot be read left an output behind";
  // The next read succeeds (a flaky mount): the same Env builds it, every file read through it.
  const int before = env_.reads();
  s = BuildDataset(o, &r);
  ASSERT_TRUE(s.ok()) << s.ToString();
  // The CSV, 8 image/mask pairs, then data.mdb hashed for manifest.json.
  EXPECT_GT(env_.reads() - before, 1 + 2 * 8);
  EXPECT_EQ(r.records, 8u);
}

TEST_F(EnvBuildTest, DiskFullAtTheManifestLeavesNoManifestAndResumeWritesIt) {
  const std::vector<uint32_t> clean = CleanCrcs();
  BuildOptions o = Options(src_, tmp_ / "out");
  o.env = &env_;
  env_.FailWriteWithEnospc(1);  // the build's only write through the Env: manifest.json
  BuildResult r;
  Status s = BuildDataset(o, &r);
  ASSERT_EQ(s.code(), Status::Code::kIOError) << s.ToString();
  EXPECT_TRUE(Contains(s.message(), o.output + "/manifest.json")) << s.ToString();
  EXPECT_TRUE(Contains(s.message(), "No space left on device")) << s.ToString();
  EXPECT_EQ(env_.writes(), 1);
  EXPECT_FALSE(fs::exists(o.output + "/manifest.json"));
  ExpectNoTempFiles(o.output);

  const BuildResult resumed = Resume(o);
  EXPECT_TRUE(resumed.already_complete);
  ASSERT_TRUE(fs::exists(o.output + "/manifest.json"));
  VerifyResult vr;
  ASSERT_TRUE(VerifyDataset(o.output, {}, &vr).ok());
  EXPECT_TRUE(vr.files_listed);
  EXPECT_EQ(vr.files, 1u);
  EXPECT_EQ(vr.bad_files, 0u);
  EXPECT_EQ(vr.bad, 0u);
  EXPECT_EQ(Crcs(o.output), clean);
}

TEST_F(EnvBuildTest, FailingFsyncOfTheManifestLeavesAnUnfinishedDataset) {
  const std::vector<uint32_t> clean = CleanCrcs(2);
  BuildOptions o = Options(src_, tmp_ / "out");
  o.shards = 2;  // manifest.json is what makes a sharded dataset complete
  o.env = &env_;
  env_.FailSync(true);
  BuildResult r;
  Status s = BuildDataset(o, &r);
  ASSERT_EQ(s.code(), Status::Code::kIOError) << s.ToString();
  EXPECT_TRUE(Contains(s.message(), "fsync")) << s.ToString();
  EXPECT_TRUE(Contains(s.message(), "manifest.json")) << s.ToString();
  EXPECT_FALSE(fs::exists(o.output + "/manifest.json"));
  ExpectNoTempFiles(o.output);
  std::unique_ptr<Dataset> ds;
  s = Dataset::Open(o.output, {}, &ds);
  EXPECT_EQ(s.code(), Status::Code::kCorruption) << s.ToString();
  EXPECT_TRUE(Contains(s.message(), "interrupted")) << s.ToString();

  env_.FailSync(false);
  const BuildResult resumed = Resume(o);
  EXPECT_EQ(resumed.records, 8u);
  EXPECT_EQ(Crcs(o.output), clean);
}

TEST_F(EnvBuildTest, TornWriteOfTheReportStopsBeforeTheManifest) {
  // One undecodable image, skipped: the build writes rejected.tsv, then manifest.json.
  const std::vector<std::string> images = ListDir(src_ + "/images");
  WriteAll(images[3], "not an image");
  BuildOptions o = Options(src_, tmp_ / "out");
  o.on_error = OnError::kSkip;
  o.env = &env_;
  env_.ShortWrite(1);
  BuildResult r;
  Status s = BuildDataset(o, &r);
  ASSERT_EQ(s.code(), Status::Code::kIOError) << s.ToString();
  EXPECT_TRUE(Contains(s.message(), o.output + "/rejected.tsv")) << s.ToString();
  EXPECT_FALSE(fs::exists(o.output + "/rejected.tsv"));
  EXPECT_FALSE(fs::exists(o.output + "/manifest.json"));
  ExpectNoTempFiles(o.output);
  std::unique_ptr<Dataset> ds;
  s = Dataset::Open(o.output, {}, &ds);  // the report comes before the LMDB is sealed
  EXPECT_EQ(s.code(), Status::Code::kCorruption) << s.ToString();

  // --resume finds every sample done (the rejection is in the cursor) and writes both files.
  const BuildResult resumed = Resume(o);
  EXPECT_EQ(resumed.records, 7u);
  EXPECT_EQ(resumed.skipped, 1u);
  EXPECT_TRUE(Contains(ReadAll(o.output + "/rejected.tsv"), images[3]));
  EXPECT_TRUE(fs::exists(o.output + "/manifest.json"));
  EXPECT_EQ(Crcs(o.output).size(), 7u);
}

}  // namespace
}  // namespace dspipe::testing
