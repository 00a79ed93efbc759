// SPDX-License-Identifier: Apache-2.0
// Faults around the output: existing outputs, resume after a failure or kill -9, disk full,
// and a map that must grow past its initial size.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>

#include "convert/builder.h"
#include "convert/test_support.h"
#include "format/lmdb_env.h"
#include "format/manifest.h"

namespace dspipe::testing {
namespace {

uint64_t CommittedRecords(const std::string& path) {
  std::unique_ptr<format::LmdbEnv> env;
  uint64_t n = 0;
  EXPECT_TRUE(format::LmdbEnv::OpenReadOnly(path, 8, false, &env).ok());
  if (env) {
    EXPECT_TRUE(env->RecordCount(&n).ok());
  }
  return n;
}

void ExpectInterrupted(const std::string& path) {
  std::unique_ptr<Dataset> ds;
  Status s = Dataset::Open(path, {}, &ds);
  EXPECT_EQ(s.code(), Status::Code::kCorruption) << s.ToString();
  EXPECT_TRUE(Contains(s.message(), "interrupted")) << s.ToString();
  EXPECT_TRUE(Contains(s.message(), "BuildOptions::resume")) << s.ToString();
}

class OutputTest : public ::testing::Test {
 protected:
  void SetUp() override { Synth(src_, 12, 64, 48); }
  TempDir tmp_;
  std::string src_ = tmp_ / "src";
};

TEST_F(OutputTest, ExistingOutputIsNeverSilentlyReplaced) {
  const std::string out = tmp_ / "out.lmdb";
  BuildResult r;
  ASSERT_TRUE(BuildDataset(Options(src_, out), &r).ok());
  const std::string before = ReadAll(out + "/data.mdb");
  const auto mtime = fs::last_write_time(out + "/data.mdb");
  BuildOptions again = Options(src_, out);
  again.gray = true;
  Status s = BuildDataset(again, &r);
  EXPECT_EQ(s.code(), Status::Code::kAlreadyExists) << s.ToString();
  EXPECT_TRUE(Contains(s.message(), out)) << s.ToString();
  EXPECT_TRUE(Contains(s.message(), "BuildOptions::resume")) << s.ToString();
  EXPECT_TRUE(Contains(s.message(), "BuildOptions::overwrite")) << s.ToString();
  EXPECT_TRUE(ReadAll(out + "/data.mdb") == before) << "the original was modified";
  EXPECT_EQ(fs::last_write_time(out + "/data.mdb"), mtime);
  std::unique_ptr<Dataset> ds;
  ASSERT_TRUE(Dataset::Open(out, {}, &ds).ok());
  EXPECT_EQ(ds->info().channels, 3);
  ds.reset();
  // --overwrite replaces it.
  again.overwrite = true;
  s = BuildDataset(again, &r);
  ASSERT_TRUE(s.ok()) << s.ToString();
  ASSERT_TRUE(Dataset::Open(out, {}, &ds).ok());
  EXPECT_EQ(ds->info().channels, 1);
  EXPECT_EQ(ds->size(), 12u);
}

TEST_F(OutputTest, OverwriteRefusesWhatIsNotADataset) {
  const std::string out = tmp_ / "precious";
  WriteAll(out + "/thesis.txt", "years of work");
  BuildOptions o = Options(src_, out);
  o.overwrite = true;
  BuildResult r;
  Status s = BuildDataset(o, &r);
  EXPECT_EQ(s.code(), Status::Code::kAlreadyExists) << s.ToString();
  EXPECT_TRUE(Contains(s.message(), "not a dspipe dataset")) << s.ToString();
  EXPECT_EQ(ReadAll(out + "/thesis.txt"), "years of work");
  WriteAll(tmp_ / "afile", "x");  // a regular file in the way
  o.output = tmp_ / "afile";
  EXPECT_EQ(BuildDataset(o, &r).code(), Status::Code::kAlreadyExists);
  EXPECT_EQ(ReadAll(tmp_ / "afile"), "x");
  o.resume = true;  // --resume with --overwrite is a usage error
  EXPECT_EQ(BuildDataset(o, &r).code(), Status::Code::kInvalidArgument);
  // An existing empty directory is fine to build into.
  fs::create_directories(tmp_ / "empty");
  ASSERT_TRUE(BuildDataset(Options(src_, tmp_ / "empty"), &r).ok());
  EXPECT_EQ(r.records, 12u);
}

// Issue 39 item 3: --overwrite deleted a whole web project folder because it held a
// manifest.json. It now refuses a directory whose manifest is not a dspipe manifest, and
// removes from a dataset only the files a build writes.
TEST_F(OutputTest, OverwriteRefusesAFolderWhoseManifestIsNotDspipes) {
  const std::string out = tmp_ / "webapp";
  WriteAll(out + "/manifest.json", R"({"name": "my app", "icons": []})");
  WriteAll(out + "/important.txt", "keep me");
  WriteAll(out + "/src/index.js", "console.log(1)");
  WriteAll(out + "/data.mdb", "not an LMDB either");
  for (int shard_index : {-1, 0}) {
    BuildOptions o = Options(src_, out);
    o.overwrite = true;
    o.shard_index = shard_index;
    if (shard_index >= 0) o.shards = 2;
    BuildResult r;
    const Status s = BuildDataset(o, &r);
    EXPECT_EQ(s.code(), Status::Code::kAlreadyExists) << s.ToString();
    EXPECT_TRUE(Contains(s.message(), "not a dspipe manifest")) << s.ToString();
    EXPECT_TRUE(Contains(s.message(), out)) << s.ToString();
    EXPECT_EQ(ReadAll(out + "/manifest.json"), R"({"name": "my app", "icons": []})");
    EXPECT_EQ(ReadAll(out + "/important.txt"), "keep me");
    EXPECT_EQ(ReadAll(out + "/src/index.js"), "console.log(1)");
    EXPECT_EQ(ReadAll(out + "/data.mdb"), "not an LMDB either");
  }
}

TEST_F(OutputTest, OverwriteRemovesOnlyWhatABuildWrote) {
  for (int shards : {1, 3}) {
    const std::string out = tmp_ / ("out" + std::to_string(shards));
    BuildOptions o = Options(src_, out);
    o.shards = shards;
    BuildResult r;
    ASSERT_TRUE(BuildDataset(o, &r).ok());
    // What the user put beside the dataset, and a link to a file outside it.
    WriteAll(out + "/NOTES.md", "how this was made");
    WriteAll(out + "/extra/labels.csv", "a,1");
    WriteAll(tmp_ / "outside.txt", "outside");
    fs::create_symlink(tmp_ / "outside.txt", out + "/link.txt");
    if (shards > 1) WriteAll(out + "/" + format::ShardDirName(1) + "/mine.txt", "in a shard");
    o.gray = true;
    o.overwrite = true;
    const Status s = BuildDataset(o, &r);
    ASSERT_TRUE(s.ok()) << s.ToString();
    std::unique_ptr<Dataset> ds;
    ASSERT_TRUE(Dataset::Open(out, {}, &ds).ok());
    EXPECT_EQ(ds->info().channels, 1);
    EXPECT_EQ(ds->size(), 12u);
    EXPECT_EQ(ReadAll(out + "/NOTES.md"), "how this was made");
    EXPECT_EQ(ReadAll(out + "/extra/labels.csv"), "a,1");
    EXPECT_TRUE(fs::is_symlink(out + "/link.txt"));
    EXPECT_EQ(ReadAll(tmp_ / "outside.txt"), "outside");
    if (shards > 1) {
      EXPECT_EQ(ReadAll(out + "/" + format::ShardDirName(1) + "/mine.txt"), "in a shard");
    }
  }
}

// Issue 39 item 2: an s3:// output was staged in /tmp/dspipe-build-<hash of the URL>; an
// existing directory was accepted whoever owned it (another user pre-created it 0777, read the
// dataset and replaced data.mdb before the push). Staging is private now.
class StagingTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const char* old = std::getenv("TMPDIR");
    old_tmpdir_ = old ? old : "";
    had_tmpdir_ = old != nullptr;
    ::setenv("TMPDIR", tmp_.path().c_str(), 1);
  }
  void TearDown() override {
    if (had_tmpdir_) {
      ::setenv("TMPDIR", old_tmpdir_.c_str(), 1);
    } else {
      ::unsetenv("TMPDIR");
    }
  }
  static uint32_t Mode(const std::string& p) {
    struct stat st {};
    EXPECT_EQ(::lstat(p.c_str(), &st), 0) << p;
    return st.st_mode & 07777;
  }
  TempDir tmp_;
  std::string old_tmpdir_;
  bool had_tmpdir_ = false;
  const std::string url_ = "s3://bkt/private/";
  const std::string own_ = "dspipe-" + std::to_string(::geteuid());
};

TEST_F(StagingTest, TheDefaultIsAPrivateDirectoryOfThisUser) {
  std::string staging;
  ASSERT_TRUE(convert::PrepareStaging(Env::Default(), url_, "", &staging).ok());
  EXPECT_EQ(fs::path(staging).parent_path(), fs::path(tmp_ / own_));
  EXPECT_TRUE(fs::is_directory(staging));
  EXPECT_EQ(Mode(staging), 0700u);
  EXPECT_EQ(Mode(tmp_ / own_), 0700u);
  std::string again;  // a rerun (resume) finds the same directory
  ASSERT_TRUE(convert::PrepareStaging(Env::Default(), url_, "", &again).ok());
  EXPECT_EQ(again, staging);
  std::string other;
  ASSERT_TRUE(convert::PrepareStaging(Env::Default(), "s3://bkt/other/", "", &other).ok());
  EXPECT_NE(other, staging);
}

TEST_F(StagingTest, AParentOpenToOthersOrALinkIsRefused) {
  const std::string parent = tmp_ / own_;
  fs::create_directories(parent);
  ::chmod(parent.c_str(), 0777);  // pre-created by someone, open to all
  std::string staging;
  Status s = convert::PrepareStaging(Env::Default(), url_, "", &staging);
  EXPECT_EQ(s.code(), Status::Code::kAlreadyExists) << s.ToString();
  EXPECT_TRUE(Contains(s.message(), parent + " has mode 0777")) << s.ToString();
  EXPECT_TRUE(Contains(s.message(), "BuildOptions::staging")) << s.ToString();
  EXPECT_TRUE(fs::is_empty(parent)) << "nothing was made in it";
  fs::remove(parent);
  fs::create_directories(tmp_ / "elsewhere");
  fs::create_directory_symlink(tmp_ / "elsewhere", parent);
  s = convert::PrepareStaging(Env::Default(), url_, "", &staging);
  EXPECT_EQ(s.code(), Status::Code::kAlreadyExists) << s.ToString();
  EXPECT_TRUE(Contains(s.message(), "symlink")) << s.ToString();
  EXPECT_TRUE(fs::is_empty(tmp_ / "elsewhere"));
}

TEST_F(StagingTest, ADirectoryOwnedByAnotherUserIsRefused) {
  if (::geteuid() != 0) GTEST_SKIP() << "making a directory another user owns needs root";
  const std::string parent = tmp_ / own_;
  fs::create_directories(parent);
  ::chmod(parent.c_str(), 0700);
  ASSERT_EQ(::chown(parent.c_str(), 65534, 65534), 0);
  std::string staging;
  Status s = convert::PrepareStaging(Env::Default(), url_, "", &staging);
  EXPECT_EQ(s.code(), Status::Code::kAlreadyExists) << s.ToString();
  EXPECT_TRUE(Contains(s.message(), "owned by uid 65534")) << s.ToString();
  // A staging directory the user names is checked the same way (a resume finds another's).
  ::chown(parent.c_str(), 0, 0);
  const std::string given = tmp_ / "given";
  fs::create_directories(given);
  ASSERT_EQ(::chown(given.c_str(), 65534, 65534), 0);
  s = convert::PrepareStaging(Env::Default(), url_, given, &staging);
  EXPECT_EQ(s.code(), Status::Code::kAlreadyExists) << s.ToString();
  EXPECT_TRUE(Contains(s.message(), given + " is owned by uid 65534")) << s.ToString();
  // One of the user's own, missing: made 0700.
  ASSERT_TRUE(convert::PrepareStaging(Env::Default(), url_, tmp_ / "mine/stage", &staging).ok());
  EXPECT_EQ(staging, tmp_ / "mine/stage");
  EXPECT_EQ(Mode(staging), 0700u);
}

TEST_F(OutputTest, ResumeAfterAFailureFinishesLikeACleanBuild) {
  const std::string bad = src_ + "/images/000007.png";
  const std::string good_bytes = ReadAll(bad);
  WriteAll(bad, good_bytes.substr(0, 100));
  for (int shards : {1, 3}) {
    const std::string out = tmp_ / ("out" + std::to_string(shards));
    BuildOptions o = Options(src_, out);
    o.shards = shards;
    o.store = StoreMode::kRaw;
    o.commit_bytes = 1;  // a commit per record
    BuildResult r;
    WriteAll(bad, good_bytes.substr(0, 100));
    ASSERT_FALSE(BuildDataset(o, &r).ok());
    ExpectInterrupted(out);
    // Without --resume a partial output is not replaced either.
    EXPECT_EQ(BuildDataset(o, &r).code(), Status::Code::kAlreadyExists);
    // Different options: refused, naming the difference.
    BuildOptions other = o;
    other.resume = true;
    other.zstd_level = 9;
    Status s = BuildDataset(other, &r);
    EXPECT_EQ(s.code(), Status::Code::kInvalidArgument) << s.ToString();
    EXPECT_TRUE(Contains(s.message(), "options differ")) << s.ToString();
    // Fixed input + --resume: complete, identical to a clean build.
    WriteAll(bad, good_bytes);
    o.resume = true;
    s = BuildDataset(o, &r);
    ASSERT_TRUE(s.ok()) << s.ToString();
    EXPECT_EQ(r.records, 12u);
    EXPECT_EQ(r.resumed_from, 7u) << shards << " shards";
    BuildOptions clean = Options(src_, tmp_ / ("clean" + std::to_string(shards)));
    clean.shards = shards;
    clean.store = StoreMode::kRaw;
    ASSERT_TRUE(BuildDataset(clean, &r).ok());
    EXPECT_EQ(Crcs(out), Crcs(clean.output));
    std::unique_ptr<Dataset> ds, ref;
    ASSERT_TRUE(Dataset::Open(out, {}, &ds).ok());
    ASSERT_TRUE(Dataset::Open(clean.output, {}, &ref).ok());
    EXPECT_EQ(ds->info().mean, ref->info().mean) << "stats must survive the interruption";
    EXPECT_EQ(ds->info().num_classes, ref->info().num_classes);
    // --resume on a finished dataset: nothing to do.
    s = BuildDataset(o, &r);
    ASSERT_TRUE(s.ok()) << s.ToString();
    EXPECT_TRUE(r.already_complete);
    EXPECT_EQ(r.records, 12u);
  }
}

TEST_F(OutputTest, ResumeOnAFinishedOutputStillChecksTheOptions) {
  for (int shards : {1, 3}) {
    const std::string out = tmp_ / ("done" + std::to_string(shards));
    BuildOptions o = Options(src_, out);
    o.shards = shards;
    BuildResult r;
    ASSERT_TRUE(BuildDataset(o, &r).ok());
    o.resume = true;
    ASSERT_TRUE(BuildDataset(o, &r).ok());
    EXPECT_TRUE(r.already_complete);
    // Each content option that differs is refused and named, finished output or not.
    const std::string other_src = tmp_ / "other";
    fs::create_directories(other_src);
    struct Change {
      const char* field;
      void (*apply)(BuildOptions*, const std::string&);
    };
    const Change changes[] = {
        {"gray", [](BuildOptions* b, const std::string&) { b->gray = true; }},
        {"store", [](BuildOptions* b, const std::string&) { b->store = StoreMode::kRaw; }},
        {"resize",
         [](BuildOptions* b, const std::string&) { b->resize_width = b->resize_height = 16; }},
        {"source", [](BuildOptions* b, const std::string& src) { b->source = src; }},
    };
    for (const Change& c : changes) {
      BuildOptions other = o;
      c.apply(&other, other_src);
      Status s = BuildDataset(other, &r);
      EXPECT_EQ(s.code(), Status::Code::kInvalidArgument) << c.field << ": " << s.ToString();
      EXPECT_TRUE(Contains(s.message(), "options differ")) << s.ToString();
      EXPECT_TRUE(Contains(s.message(), std::string(c.field) + " was")) << s.ToString();
      EXPECT_FALSE(r.already_complete) << c.field;
    }
  }
}

// Writes a meta key of an (interrupted) output directly, as a hand edit or corruption would.
void PutMeta(const std::string& path, const std::string& key, const std::string& value) {
  std::unique_ptr<format::LmdbEnv> env;
  ASSERT_TRUE(format::LmdbEnv::OpenForWrite(path, &env).ok());
  format::LmdbEnv::Writer w(env.get());
  w.PutMeta(key, value);
  ASSERT_TRUE(w.Commit().ok());
}

TEST_F(OutputTest, CorruptStoredBuildStateIsAnErrorNotAnAbort) {
  const std::string bad = src_ + "/images/000007.png";
  WriteAll(bad, ReadAll(bad).substr(0, 100));
  const struct {
    const char* key;
    const char* value;
  } cases[] = {
      {kBuildStateKey, "{not json"},          {kBuildStateKey, "[1, 2]"},
      {kBuildStateKey, R"({"plan": []})"},  // no "options"
      {"cursor", R"({"next_pos": "seven"})"}, {"cursor", "{}"},
  };
  int n = 0;
  for (const auto& c : cases) {
    const std::string out = tmp_ / ("out" + std::to_string(n++));
    BuildOptions o = Options(src_, out);
    o.commit_bytes = 1;
    BuildResult r;
    ASSERT_FALSE(BuildDataset(o, &r).ok());
    PutMeta(out, c.key, c.value);
    o.resume = true;
    Status s = BuildDataset(o, &r);
    EXPECT_EQ(s.code(), Status::Code::kCorruption)
        << c.key << "=" << c.value << ": " << s.ToString();
    EXPECT_TRUE(Contains(s.message(), out)) << s.ToString();
    EXPECT_TRUE(Contains(s.message(), c.key)) << s.ToString();
  }
  // And through the binary: exit 1 with one message, never terminate().
  RunResult run = RunTool({"build", src_, tmp_ / "out0", "--resume", "-q"}, tmp_.path());
  EXPECT_EQ(run.exit_code, 1) << run.output;
  EXPECT_TRUE(Contains(run.output, "Corruption")) << run.output;
}

TEST(Kill, Kill9ThenResumeGivesEverySampleOnce) {
  TempDir tmp;
  const std::string src = tmp / "src", out = tmp / "out.lmdb", ref = tmp / "ref.lmdb";
  Synth(src, 300, 128, 128);
  const std::vector<std::string> args = {"build",       src, out,         "--store", "raw",
                                         "--commit-mb", "1", "--threads", "1",       "-q"};
  // The binary stops itself (SIGSTOP) right after its first record commit is durable; kill -9
  // it there. No polling: the stop is the condition.
  const pid_t pid = SpawnStopping(args, tmp / "kill.log");
  if (!WaitStopped(pid)) {
    FAIL() << "dsconvert ended before its first commit: " << ReadAll(tmp / "kill.log");
  }
  ::kill(pid, SIGKILL);
  RunResult killed = Wait(pid, tmp / "kill.log");
  ASSERT_EQ(killed.signal, SIGKILL) << killed.output;
  const uint64_t committed = CommittedRecords(out);
  EXPECT_GT(committed, 0u);
  EXPECT_LT(committed, 300u);
  ExpectInterrupted(out);
  // Not replaced without --resume; different options refused.
  RunResult again = RunTool(args, tmp.path());
  EXPECT_EQ(again.exit_code, 1) << again.output;
  EXPECT_TRUE(Contains(again.output, "already exists")) << again.output;
  BuildOptions other = Options(src, out);
  other.store = StoreMode::kEncoded;
  other.resume = true;
  BuildResult r;
  Status s = BuildDataset(other, &r);
  EXPECT_EQ(s.code(), Status::Code::kInvalidArgument) << s.ToString();
  EXPECT_EQ(CommittedRecords(out), committed);
  // The same command with --resume.
  std::vector<std::string> resume = args;
  resume.push_back("--resume");
  RunResult done = RunTool(resume, tmp.path());
  ASSERT_EQ(done.exit_code, 0) << done.output;
  EXPECT_TRUE(Contains(done.output, "(resumed at ")) << done.output;
  EXPECT_TRUE(Contains(done.output, "300 records")) << done.output;
  // Every sample exactly once, same content as an uninterrupted build.
  BuildOptions clean = Options(src, ref);
  clean.store = StoreMode::kRaw;
  ASSERT_TRUE(BuildDataset(clean, &r).ok());
  const std::vector<uint32_t> got = Crcs(out), want = Crcs(ref);
  ASSERT_EQ(got.size(), 300u);
  EXPECT_EQ(got, want);
  std::vector<uint32_t> uniq = got;
  std::sort(uniq.begin(), uniq.end());
  EXPECT_EQ(std::unique(uniq.begin(), uniq.end()), uniq.end()) << "a sample appears twice";
  RunResult verify = RunTool({"verify", out}, tmp.path());
  EXPECT_EQ(verify.exit_code, 0) << verify.output;
  EXPECT_TRUE(Contains(verify.output, "300 records, 0 bad")) << verify.output;
}

TEST(DiskFull, ClearIOErrorAndNoCompleteLookingOutput) {
  TempDir tmp;
  const std::string src = tmp / "src", out = tmp / "out.lmdb", log = tmp / "full.log";
  Synth(src, 60, 128, 128);
  const pid_t pid = ::fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    // The child: files may not grow past 1 MiB (writes fail with EFBIG, like a full disk).
    const int fd = ::open(log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    ::dup2(fd, 1);
    ::dup2(fd, 2);
    ::signal(SIGXFSZ, SIG_IGN);  // stays ignored across exec
    struct rlimit lim = {1u << 20, 1u << 20};
    ::setrlimit(RLIMIT_FSIZE, &lim);
    const std::string bin = Dsconvert();
    ::execl(bin.c_str(), bin.c_str(), "build", src.c_str(), out.c_str(), "--store", "raw",
            "--commit-mb", "1", "-q", static_cast<char*>(nullptr));
    ::_exit(127);
  }
  RunResult r = Wait(pid, log);
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_TRUE(Contains(r.output, "IOError")) << r.output;
  EXPECT_TRUE(Contains(r.output, out)) << r.output;
  // LMDB reports a short write as EIO, a failed one as EFBIG / ENOSPC.
  EXPECT_TRUE(Contains(r.output, "File too large") || Contains(r.output, "No space left") ||
              Contains(r.output, "Input/output error"))
      << r.output;
  EXPECT_EQ(std::count(r.output.begin(), r.output.end(), '\n'), 1) << "one line: " << r.output;
  EXPECT_FALSE(Contains(r.output, "IOError: IOError")) << "the reason is repeated: " << r.output;
  std::unique_ptr<Dataset> ds;
  Status s = Dataset::Open(out, {}, &ds);
  EXPECT_FALSE(s.ok()) << "a build that ran out of space looks complete";
  if (!s.ok()) ExpectInterrupted(out);
}

TEST(MapGrowth, BuildLargerThanTheInitialMap) {
  TempDir tmp;
  // 130 copies (hard links) of one incompressible 512x512 RGB PNG: ~100 MiB of records,
  // committed in 64 MiB transactions: the 64 MiB initial map must grow.
  cv::Mat noise(512, 512, CV_8UC3);
  cv::randu(noise, 0, 256);
  const std::string first = tmp / "src/images/000.png";
  WriteAll(first, Encode(noise, ".png", {cv::IMWRITE_PNG_COMPRESSION, 0}));
  for (int i = 1; i < 130; ++i) {
    char name[32];
    std::snprintf(name, sizeof name, "/src/images/%03d.png", i);
    fs::create_hard_link(first, tmp.path() + name);
  }
  BuildOptions o = Options(tmp / "src", tmp / "out.lmdb");
  BuildResult r;
  Status s = BuildDataset(o, &r);
  ASSERT_TRUE(s.ok()) << s.ToString();
  EXPECT_EQ(r.records, 130u);
  EXPECT_GT(fs::file_size(o.output + "/data.mdb"), uint64_t{96} << 20);
  std::unique_ptr<Dataset> ds;
  ASSERT_TRUE(Dataset::Open(o.output, {}, &ds).ok());
  ASSERT_EQ(ds->size(), 130u);
  for (uint64_t i : {uint64_t{0}, uint64_t{129}}) {
    Rec rec;
    ASSERT_TRUE(ds->Read(i, [&](const RecordView& v) {
                    rec.header = v.header;
                    rec.image.assign(v.image.begin(), v.image.end());
                    return Status::OK();
                  }).ok());
    EXPECT_EQ(CountDiff(DecodedImage(rec), noise), 0) << i;
  }
  VerifyResult vr;
  ASSERT_TRUE(VerifyDataset(o.output, {}, &vr).ok());
  EXPECT_EQ(vr.records, 130u);
  EXPECT_EQ(vr.bad, 0u);
}

}  // namespace
}  // namespace dspipe::testing
