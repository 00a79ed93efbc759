// SPDX-License-Identifier: Apache-2.0
// dsconvert build under injected I/O faults (tests/faults/fault_shim.c, LD_PRELOAD): each fault
// gives exit 1 and a clear message naming the file, never an output that opens as complete,
// and a `--resume` without the fault finishes it identical to a clean build. Every test also
// checks the shim's log, so a fault that never fired fails the test instead of passing it.
#include <gtest/gtest.h>
#include <spawn.h>
#include <sys/wait.h>

#include <cerrno>
#include <map>

#include "convert/test_support.h"

namespace dspipe::testing {
namespace {

using Env = std::map<std::string, std::string>;

// Runs dsconvert with args, the fault shim preloaded and `fault` added to the environment.
RunResult RunWithFault(const std::vector<std::string>& args, const Env& fault,
                       const std::string& log_path) {
  std::string asan = "verify_asan_link_order=0";  // the shim comes before a shared libasan
  if (const char* inherited = std::getenv("ASAN_OPTIONS")) {
    asan = std::string(inherited) + ":" + asan;
  }
  std::vector<std::string> env = {"ASAN_OPTIONS=" + asan,
                                  std::string("LD_PRELOAD=") + FAULT_SHIM_PATH};
  for (const auto& [k, v] : fault) env.push_back(k + "=" + v);
  const pid_t pid =
      Spawn(args, log_path, env, {"ASAN_OPTIONS=", "LD_PRELOAD=", "DSPIPE_FAULT_"});
  return Wait(pid, log_path);
}

class FaultTest : public ::testing::Test {
 protected:
  static constexpr int kSamples = 16;
  void SetUp() override {
    Synth(src_, kSamples, 48, 32);
    BuildOptions o = Options(src_, tmp_ / "clean");
    o.store = StoreMode::kRaw;
    o.threads = 1;
    BuildResult r;
    const Status s = BuildDataset(o, &r);
    ASSERT_TRUE(s.ok()) << s.ToString();
    clean_ = Crcs(o.output);
    ASSERT_EQ(clean_.size(), static_cast<size_t>(kSamples));
  }

  // A build of src_ into out: raw records, one commit per record, so faults land mid-build.
  std::vector<std::string> Args(const std::string& out, bool resume = false) const {
    std::vector<std::string> a = {"build",    src_,        out,  "--store", "raw", "--threads",
                                  "1",        "--commit-mb", "0.000001", "-q"};
    if (resume) a.push_back("--resume");
    return a;
  }

  // The fault fired (the shim logged it) and the run failed with a one-line, clear error.
  void ExpectFailedClearly(const RunResult& r, const std::string& fault_log,
                           const std::vector<std::string>& must_name) {
    EXPECT_FALSE(ReadAll(fault_log).empty()) << "the fault never fired";
    EXPECT_EQ(r.exit_code, 1) << r.output;
    EXPECT_EQ(r.signal, 0) << r.output;
    for (const std::string& s : must_name) EXPECT_TRUE(Contains(r.output, s)) << r.output;
    EXPECT_FALSE(Contains(r.output, "terminate")) << r.output;
  }

  // Not complete-looking, then `--resume` without the fault gives the clean build's records.
  void ExpectResumable(const std::string& out) {
    std::unique_ptr<Dataset> ds;
    const Status open = Dataset::Open(out, {}, &ds);
    EXPECT_FALSE(open.ok()) << out << " looks complete after a failed build";
    ds.reset();
    const RunResult r = RunTool(Args(out, /*resume=*/true), tmp_.path());
    ASSERT_EQ(r.exit_code, 0) << "resume: " << r.output;
    EXPECT_EQ(Crcs(out), clean_) << "the resumed build differs from a clean one";
  }

  TempDir tmp_;
  std::string src_ = tmp_ / "src";
  std::vector<uint32_t> clean_;
};

TEST_F(FaultTest, NoSpaceAtTheNthWriteFailsClearlyAndResumes) {
  for (int nth : {1, 2, 3, 5, 9, 17}) {
    SCOPED_TRACE("ENOSPC from write " + std::to_string(nth));
    const std::string out = tmp_ / ("enospc" + std::to_string(nth));
    const std::string flog = tmp_ / ("enospc" + std::to_string(nth) + ".faults");
    const RunResult r = RunWithFault(
        Args(out), {{"DSPIPE_FAULT_OP", "write"}, {"DSPIPE_FAULT_PATH", out + "/data.mdb"},
                    {"DSPIPE_FAULT_NTH", std::to_string(nth)},
                    {"DSPIPE_FAULT_ERRNO", std::to_string(ENOSPC)}, {"DSPIPE_FAULT_LOG", flog}},
        tmp_ / "run.log");
    ExpectFailedClearly(r, flog, {out, "No space left on device"});
    ExpectResumable(out);
  }
}

TEST_F(FaultTest, ShortWritesToTheDataFileFailClearlyAndResume) {
  for (int nth : {1, 4, 10}) {
    SCOPED_TRACE("short writes from write " + std::to_string(nth));
    const std::string out = tmp_ / ("short" + std::to_string(nth));
    const std::string flog = tmp_ / ("short" + std::to_string(nth) + ".faults");
    const RunResult r = RunWithFault(
        Args(out), {{"DSPIPE_FAULT_OP", "write"}, {"DSPIPE_FAULT_PATH", out + "/data.mdb"},
                    {"DSPIPE_FAULT_NTH", std::to_string(nth)}, {"DSPIPE_FAULT_MODE", "short"},
                    {"DSPIPE_FAULT_LOG", flog}},
        tmp_ / "run.log");
    // LMDB reports a short write of a page as EIO, of the first meta pages as ENOSPC.
    ExpectFailedClearly(r, flog, {out});
    EXPECT_TRUE(Contains(r.output, "Input/output error") ||
                Contains(r.output, "No space left on device"))
        << r.output;
    ExpectResumable(out);
  }
}

TEST_F(FaultTest, ShortWritesOfTheManifestAreCompleted) {
  // manifest.json of a sharded build goes through WriteFileAtomic's write loop: every write
  // short must still give a whole manifest.
  const std::string out = tmp_ / "sharded";
  const std::string flog = tmp_ / "sharded.faults";
  std::vector<std::string> args = Args(out);
  args.insert(args.end(), {"--shards", "2"});
  const RunResult r = RunWithFault(
      args, {{"DSPIPE_FAULT_OP", "write"}, {"DSPIPE_FAULT_PATH", "/manifest.json"},
             {"DSPIPE_FAULT_MODE", "short"}, {"DSPIPE_FAULT_LOG", flog}},
      tmp_ / "run.log");
  EXPECT_FALSE(ReadAll(flog).empty()) << "no short write happened";
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(Crcs(out), clean_);
}

TEST_F(FaultTest, ReadErrorOnASourceFileNamesItAndResumes) {
  const std::string out = tmp_ / "eio";
  const std::string flog = tmp_ / "eio.faults";
  const RunResult r = RunWithFault(
      Args(out), {{"DSPIPE_FAULT_OP", "read"}, {"DSPIPE_FAULT_PATH", "/images/000005."},
                  {"DSPIPE_FAULT_ERRNO", std::to_string(EIO)}, {"DSPIPE_FAULT_LOG", flog}},
      tmp_ / "run.log");
  ExpectFailedClearly(r, flog, {"000005.", "Input/output error"});
  ExpectResumable(out);
}

TEST_F(FaultTest, ReadErrorStopsTheBuildEvenWhenSkippingBadFiles) {
  // --on-error skip is for bad files; an I/O error is not one and must not drop a sample from
  // a dataset that then looks complete.
  const std::string out = tmp_ / "eio-skip";
  const std::string flog = tmp_ / "eio-skip.faults";
  std::vector<std::string> args = Args(out);
  args.insert(args.end(), {"--on-error", "skip"});
  const RunResult r = RunWithFault(
      args, {{"DSPIPE_FAULT_OP", "read"}, {"DSPIPE_FAULT_PATH", "/images/000005."},
             {"DSPIPE_FAULT_ERRNO", std::to_string(EIO)}, {"DSPIPE_FAULT_LOG", flog}},
      tmp_ / "run.log");
  ExpectFailedClearly(r, flog, {"000005.", "Input/output error", "--resume"});
  EXPECT_FALSE(fs::exists(out + "/rejected.tsv")) << "the unreadable file was skipped";
  std::unique_ptr<Dataset> ds;
  EXPECT_FALSE(Dataset::Open(out, {}, &ds).ok());
  args.push_back("--resume");
  const RunResult again = RunTool(args, tmp_.path());
  ASSERT_EQ(again.exit_code, 0) << again.output;
  EXPECT_EQ(Crcs(out), clean_);
}

TEST_F(FaultTest, FailingFsyncOfTheDataFileLeavesNoManifestAndResumes) {
  const std::string out = tmp_ / "fsync";
  const std::string flog = tmp_ / "fsync.faults";
  const RunResult r = RunWithFault(
      Args(out), {{"DSPIPE_FAULT_OP", "fsync"}, {"DSPIPE_FAULT_PATH", out + "/data.mdb"},
                  {"DSPIPE_FAULT_ERRNO", std::to_string(EIO)}, {"DSPIPE_FAULT_LOG", flog}},
      tmp_ / "run.log");
  ExpectFailedClearly(r, flog, {out, "Input/output error"});
  ExpectResumable(out);
}

TEST_F(FaultTest, FailingFsyncOfTheShardedManifestLeavesNoManifestAndResumes) {
  const std::string out = tmp_ / "fsync-sharded";
  const std::string flog = tmp_ / "fsync-sharded.faults";
  std::vector<std::string> args = Args(out);
  args.insert(args.end(), {"--shards", "2"});
  const RunResult r = RunWithFault(
      args, {{"DSPIPE_FAULT_OP", "fsync"}, {"DSPIPE_FAULT_PATH", "/manifest.json"},
             {"DSPIPE_FAULT_ERRNO", std::to_string(EIO)}, {"DSPIPE_FAULT_LOG", flog}},
      tmp_ / "run.log");
  ExpectFailedClearly(r, flog, {"manifest.json", "Input/output error"});
  EXPECT_FALSE(fs::exists(out + "/manifest.json")) << "a manifest after a failed fsync";
  std::unique_ptr<Dataset> ds;
  EXPECT_FALSE(Dataset::Open(out, {}, &ds).ok());
  args.push_back("--resume");
  const RunResult again = RunTool(args, tmp_.path());
  ASSERT_EQ(again.exit_code, 0) << again.output;
  EXPECT_EQ(Crcs(out), clean_);
}

}  // namespace
}  // namespace dspipe::testing
