// SPDX-License-Identifier: Apache-2.0
// Issue 19, item 7: --resume checks what the build read from its source. A source changed since
// the build started (a file added, removed, rewritten; an archive replaced) is refused, naming
// the first file that differs, whether the output is finished (it would be reported complete
// as the old dataset) or interrupted (it would be finished from a mix of old and new).
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/stat.h>

#include <filesystem>
#include <string>

#include "test_support.h"

namespace dspipe::testing {
namespace {

namespace fs = std::filesystem;

// The files of dir/images, sorted.
std::vector<std::string> Images(const std::string& src) { return ListDir(src + "/images"); }

Status Resume(const std::string& src, const std::string& out, BuildResult* r) {
  BuildOptions o = Options(src, out);
  o.resume = true;
  return BuildDataset(o, r);
}

// Sets path's mtime (ns since the epoch).
void SetMtime(const std::string& path, int64_t ns) {
  const struct timespec ts[2] = {{0, UTIME_OMIT}, {ns / 1000000000, ns % 1000000000}};
  ASSERT_EQ(::utimensat(AT_FDCWD, path.c_str(), ts, 0), 0) << path;
}

int64_t Mtime(const std::string& path) {
  struct stat st;
  EXPECT_EQ(::stat(path.c_str(), &st), 0) << path;
  return static_cast<int64_t>(st.st_mtim.tv_sec) * 1000000000 + st.st_mtim.tv_nsec;
}

TEST(Resume, AFinishedBuildRefusesAChangedSourceNamingTheFirstFileThatDiffers) {
  TempDir tmp;
  const std::string src = tmp / "src", out = tmp / "out";
  Synth(src, 12, 32, 24);
  BuildResult r;
  ASSERT_TRUE(BuildDataset(Options(src, out), &r).ok());
  ASSERT_EQ(r.records, 12u);
  Status s = Resume(src, out, &r);
  ASSERT_TRUE(s.ok()) << s.ToString();
  EXPECT_TRUE(r.already_complete);

  // A sample added to the source (dspipe.ray.convert returned the old dataset for it).
  const std::vector<std::string> images = Images(src);
  const std::string first = fs::path(images[0]).filename().string();
  fs::copy_file(images[0], src + "/images/zz-added" + fs::path(first).extension().string());
  fs::copy_file(src + "/masks/" + fs::path(first).stem().string() + ".png",
                src + "/masks/zz-added.png");
  s = Resume(src, out, &r);
  EXPECT_EQ(s.code(), Status::Code::kInvalidArgument) << s.ToString();
  EXPECT_TRUE(Contains(s.message(), "the source changed since the build of " + out))
      << s.ToString();
  EXPECT_TRUE(Contains(s.message(), "images/zz-added")) << s.ToString();
  EXPECT_TRUE(Contains(s.message(), " is new")) << s.ToString();
  // The option to set, as an option marker (each front end names it: --overwrite, overwrite=True).
  EXPECT_TRUE(Contains(s.message(), "rerun with BuildOptions::overwrite = true")) << s.ToString();
  fs::remove(src + "/images/zz-added" + fs::path(first).extension().string());
  fs::remove(src + "/masks/zz-added.png");
  ASSERT_TRUE(Resume(src, out, &r).ok());

  // A file rewritten (other bytes), and one touched (the same bytes, another mtime).
  const std::string victim = images[3];
  const std::string bytes = ReadAll(victim);
  const int64_t mtime = Mtime(victim);
  WriteAll(victim, bytes + "trailing bytes");
  s = Resume(src, out, &r);
  EXPECT_EQ(s.code(), Status::Code::kInvalidArgument) << s.ToString();
  EXPECT_TRUE(Contains(s.message(), "images/" + fs::path(victim).filename().string() + ": " +
                                        std::to_string(bytes.size()) + " bytes, now " +
                                        std::to_string(bytes.size() + 14)))
      << s.ToString();
  WriteAll(victim, bytes);
  s = Resume(src, out, &r);
  EXPECT_TRUE(Contains(s.message(), "modified since")) << s.ToString();
  SetMtime(victim, mtime);
  // A mask removed.
  const std::string mask = ListDir(src + "/masks")[5];
  const std::string mask_bytes = ReadAll(mask);
  fs::remove(mask);
  s = Resume(src, out, &r);
  EXPECT_TRUE(Contains(s.message(), "masks/" + fs::path(mask).filename().string() + " is gone"))
      << s.ToString();
  WriteAll(mask, mask_bytes);
  s = Resume(src, out, &r);
  EXPECT_TRUE(Contains(s.message(), "modified since")) << s.ToString();
  SetMtime(mask, Mtime(images[0]));  // any mtime but the old one is a change: restore it
}

// What dspipe.ray.convert runs again for every shard: build(shard_index=i, resume=True) on a
// finished shard. A sample added to SRC since is refused (it used to report the shard complete,
// and the assembled dataset was the old one).
TEST(Resume, AShardBuiltAloneRefusesAChangedSource) {
  TempDir tmp;
  const std::string src = tmp / "src", out = tmp / "out";
  Synth(src, 12, 32, 24);
  BuildOptions o = Options(src, out);
  o.shards = 3;
  o.shard_index = 1;
  BuildResult r;
  ASSERT_TRUE(BuildDataset(o, &r).ok());
  o.resume = true;
  Status s = BuildDataset(o, &r);
  ASSERT_TRUE(s.ok()) << s.ToString();
  EXPECT_TRUE(r.already_complete);
  const std::string image = Images(src)[0];
  fs::copy_file(image, src + "/images/zz-added" + fs::path(image).extension().string());
  s = BuildDataset(o, &r);
  EXPECT_EQ(s.code(), Status::Code::kInvalidArgument) << s.ToString();
  EXPECT_TRUE(Contains(s.message(), "images/zz-added")) << s.ToString();
}

TEST(Resume, AnInterruptedBuildRefusesAChangedSourceAndResumesAnUnchangedOne) {
  TempDir tmp;
  const std::string src = tmp / "src", out = tmp / "out";
  Synth(src, 200, 64, 64);
  const std::vector<std::string> args = {"build",       src, out,         "--store", "raw",
                                         "--commit-mb", "1", "--threads", "1",       "-q"};
  // Killed right after its first durable commit (it stops itself there).
  const pid_t pid = SpawnStopping(args, tmp / "kill.log");
  ASSERT_TRUE(WaitStopped(pid)) << ReadAll(tmp / "kill.log");
  ::kill(pid, SIGKILL);
  ASSERT_EQ(Wait(pid, tmp / "kill.log").signal, SIGKILL);
  // An image already built into a committed record, rewritten meanwhile (the same name): the
  // output would hold its old bytes as if they were the source's.
  const std::string victim = Images(src).front();
  const std::string bytes = ReadAll(victim);
  const int64_t mtime = Mtime(victim);
  WriteAll(victim, bytes + "x");
  std::vector<std::string> resume = args;
  resume.push_back("--resume");
  RunResult refused = RunTool(resume, tmp.path());
  EXPECT_EQ(refused.exit_code, 1) << refused.output;
  EXPECT_TRUE(Contains(refused.output, "the source changed since the build of " + out))
      << refused.output;
  EXPECT_TRUE(Contains(refused.output, "rerun with --overwrite")) << refused.output;
  EXPECT_TRUE(Contains(refused.output, "images/" + fs::path(victim).filename().string()))
      << refused.output;
  EXPECT_TRUE(Contains(refused.output, "sample 0 was already built from it")) << refused.output;
  // Put back as it was, and the last image (not built yet) rewritten instead, as "fix the input
  // and rerun with --resume" asks: the build resumes and finishes with the new bytes.
  WriteAll(victim, bytes);
  SetMtime(victim, mtime);
  const std::string last = Images(src).back();
  const std::string last_bytes = ReadAll(last);
  WriteAll(last, last_bytes);  // the same bytes, another mtime: a change the build has not read
  RunResult done = RunTool(resume, tmp.path());
  ASSERT_EQ(done.exit_code, 0) << done.output;
  EXPECT_TRUE(Contains(done.output, "(resumed at ")) << done.output;
  EXPECT_TRUE(Contains(done.output, "200 records")) << done.output;
  // The stamps were brought up to date: --resume on the finished output finds it unchanged.
  RunResult again = RunTool(resume, tmp.path());
  EXPECT_EQ(again.exit_code, 0) << again.output;
}

TEST(Resume, AReplacedArchiveIsRefusedByItsMemberListOrItsMtime) {
  TempDir tmp;
  const std::string src = tmp / "src", out = tmp / "out", tar = tmp / "data.tar";
  Synth(src, 12, 32, 24);
  auto make_tar = [&](const std::string& dir) {
    const std::string cmd = "tar -cf " + tar + " -C " + dir + " images masks";
    ASSERT_EQ(std::system(cmd.c_str()), 0) << cmd;
  };
  make_tar(src);
  BuildResult r;
  Status s = BuildDataset(Options(tar, out), &r);
  ASSERT_TRUE(s.ok()) << s.ToString();
  ASSERT_TRUE(Resume(tar, out, &r).ok());
  // The same archive size, a member renamed (an image paired with another name).
  const std::string src2 = tmp / "src2";
  fs::copy(src, src2, fs::copy_options::recursive);
  const std::string a = Images(src2)[0];
  fs::rename(a, fs::path(a).parent_path() / ("X" + fs::path(a).filename().string().substr(1)));
  const uint64_t size = fs::file_size(tar);
  make_tar(src2);
  ASSERT_EQ(fs::file_size(tar), size) << "the test wants an archive of the same size";
  s = Resume(tar, out, &r);
  EXPECT_EQ(s.code(), Status::Code::kInvalidArgument) << s.ToString();
  EXPECT_TRUE(Contains(s.message(), tar + ": its member list changed")) << s.ToString();
  // The original members again, written anew: another mtime.
  make_tar(src);
  s = Resume(tar, out, &r);
  EXPECT_TRUE(Contains(s.message(), tar + ": modified since")) << s.ToString();
}

}  // namespace
}  // namespace dspipe::testing
