// SPDX-License-Identifier: Apache-2.0
// dspipe::FetchDataset and `dsconvert fetch URL/ DEST` against a real HTTP server on 127.0.0.1
// (tests/fetch/server.py) serving datasets that `dsconvert build` wrote, and the per-file
// sizes/sha256 that `dsconvert verify` checks. Every wait is on a real condition: a line from
// the server, a byte on a pipe, a process exit.
#include "dspipe/dataset.h"

#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <sstream>

#include "dspipe/fetch.h"
#include "dspipe/loader.h"
#include "fetch/http_server.h"
#include "fetch/test_files.h"

namespace dspipe::testing {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

class FetchDatasetTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/dspipe-fetchds-XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
    // Built by the CLI (a child process): this process stays single-threaded until it forks.
    ASSERT_EQ(BuildServedDataset(dir_ + "/src", Srv("ds")), "");
    std::string out;
    ASSERT_EQ(RunDsconvert({"build", dir_ + "/src", Srv("lone"), "--threads", "1", "-q"}, &out), 0)
        << out;
    server_ = std::make_unique<HttpServer>(dir_ + "/srv");
    opts_.backoff_base_s = 0.01;
    opts_.backoff_max_s = 0.05;
  }
  void TearDown() override {
    server_.reset();
    std::error_code ec;
    fs::remove_all(dir_, ec);
  }
  std::string Srv(const std::string& name) const { return dir_ + "/srv/" + name; }
  std::string Dest(const std::string& name = "ds") const { return dir_ + "/out/" + name; }
  // The files the served manifest lists: path -> size.
  std::map<std::string, uint64_t> Listed(const std::string& name) const {
    std::map<std::string, uint64_t> m;
    const json manifest = json::parse(ReadAll(Srv(name) + "/manifest.json"));
    for (const json& f : manifest.at("files")) {
      m[f.at("path").get<std::string>()] = f.at("size").get<uint64_t>();
    }
    return m;
  }
  // Every listed file (and manifest.json) of dest equals the served one; nothing half-done.
  void ExpectSameFiles(const std::string& name, const std::string& dest) {
    EXPECT_TRUE(ReadAll(dest + "/manifest.json") == ReadAll(Srv(name) + "/manifest.json"));
    for (const auto& [path, size] : Listed(name)) {
      EXPECT_EQ(fs::file_size(dest + "/" + path), size) << path;
      EXPECT_TRUE(ReadAll(dest + "/" + path) == ReadAll(Srv(name) + "/" + path)) << path;
    }
    EXPECT_FALSE(fs::exists(dest + ".part"));
  }

  std::string dir_;
  std::unique_ptr<HttpServer> server_;
  FetchOptions opts_;
};

// FetchDataset in a child process; writes one byte to signal_fd the first time `when` holds.
// Exits 0 when the fetch succeeded.
pid_t FetchDatasetInChild(const std::string& url, const std::string& dest, FetchOptions o,
                          int signal_fd, std::function<bool(const FetchProgress&)> when) {
  const pid_t pid = ::fork();
  if (pid != 0) return pid;
  o.progress = SignalOnceWhen(signal_fd, std::move(when));
  ::_exit(FetchDataset(url, dest, o).ok() ? 0 : 1);
}

TEST_F(FetchDatasetTest, AFetchedDatasetLoadsLikeTheLocalOne) {
  for (const std::string name : {"ds", "lone"}) {
    SCOPED_TRACE(name);
    uint64_t total = 0;
    for (const auto& [path, size] : Listed(name)) total += size;
    std::vector<FetchProgress> seen;
    opts_.progress = [&](const FetchProgress& p) {
      if (p.phase == FetchProgress::Phase::kTransfer) seen.push_back(p);
    };
    FetchResult r;
    // With and without the trailing '/'.
    const std::string url = server_->Url(name + (name == "ds" ? "/" : ""));
    Status s = FetchDataset(url, Dest(name), opts_, &r);
    ASSERT_TRUE(s.ok()) << s.ToString();
    ExpectSameFiles(name, Dest(name));
    EXPECT_EQ(r.bytes, total);
    EXPECT_FALSE(r.already_present);
    EXPECT_TRUE(LoadAll(Dest(name)) == LoadAll(Srv(name))) << "batches differ";
    // One request per file plus the manifest, none ranged.
    auto reqs = server_->Requests();
    EXPECT_EQ(reqs.size(), Listed(name).size() + 1);
    for (const json& q : reqs) EXPECT_TRUE(q["range"].is_null()) << q.dump();
    // One aggregate transfer: bytes never go back, the total is the dataset's.
    ASSERT_FALSE(seen.empty());
    for (size_t i = 0; i < seen.size(); ++i) {
      EXPECT_EQ(seen[i].total, total);
      if (i > 0) {
        EXPECT_GE(seen[i].bytes, seen[i - 1].bytes);
      }
    }
    EXPECT_EQ(seen.back().bytes, total);
    // Again: already there, no request.
    ASSERT_TRUE(FetchDataset(url, Dest(name), opts_, &r).ok());
    EXPECT_TRUE(r.already_present);
    EXPECT_TRUE(server_->Requests().empty());
  }
  // A destination that is not a complete dataset is never taken for one, nor replaced.
  fs::create_directories(Dest("junk"));
  WriteAll(Dest("junk") + "/manifest.json", ReadAll(Srv("ds") + "/manifest.json"));
  Status s = FetchDataset(server_->Url("ds/"), Dest("junk"), opts_);
  EXPECT_EQ(s.code(), Status::Code::kAlreadyExists) << s.ToString();
  EXPECT_TRUE(Contains(s.message(), "shard-00000.lmdb/data.mdb")) << s.ToString();
  // sha256 and size are per file: from the manifest, never from the caller.
  opts_.sha256 = std::string(64, 'a');
  EXPECT_EQ(FetchDataset(server_->Url("ds/"), Dest("x"), opts_).code(),
            Status::Code::kInvalidArgument);
}

TEST_F(FetchDatasetTest, ACorruptedFileIsRefetchedOnceThenFailsNamingIt) {
  const std::string bad = "/files/ds/shard-00001.lmdb/data.mdb";
  server_->Set(bad, "corrupt=1");  // the first answer has one byte flipped
  FetchResult r;
  Status s = FetchDataset(server_->Url("ds/"), Dest(), opts_, &r);
  ASSERT_TRUE(s.ok()) << s.ToString();
  EXPECT_EQ(r.refetches, 1);
  ExpectSameFiles("ds", Dest());
  fs::remove_all(Dest());
  (void)server_->Requests();
  server_->Set(bad, "corrupt=1000");  // every answer is corrupt
  s = FetchDataset(server_->Url("ds/"), Dest(), opts_, &r);
  EXPECT_EQ(s.code(), Status::Code::kCorruption) << s.ToString();
  EXPECT_TRUE(Contains(s.message(), "shard-00001.lmdb/data.mdb")) << s.ToString();
  EXPECT_TRUE(Contains(s.message(), "sha256")) << s.ToString();
  EXPECT_TRUE(Contains(s.message(), "twice")) << s.ToString();
  EXPECT_FALSE(fs::exists(Dest())) << "an incomplete dataset never gets the final name";
  // The good file stays for the next call, which fetches only what is missing.
  EXPECT_TRUE(fs::exists(Dest() + ".part/shard-00000.lmdb/data.mdb"));
  int fetched_bad = 0;
  for (const json& q : server_->Requests()) fetched_bad += q["path"] == bad;
  EXPECT_EQ(fetched_bad, 2) << "one fetch and one refetch";
  server_->Set(bad, "");
  ASSERT_TRUE(FetchDataset(server_->Url("ds/"), Dest(), opts_, &r).ok());
  ExpectSameFiles("ds", Dest());
  auto reqs = server_->Requests();
  ASSERT_EQ(reqs.size(), 2u) << "the manifest and the missing file";
  EXPECT_EQ(reqs[1]["path"], bad);
}

TEST_F(FetchDatasetTest, SigkillMidDatasetThenTheNextCallResumes) {
  const auto listed = Listed("ds");
  const uint64_t first = listed.at("shard-00000.lmdb/data.mdb");
  const uint64_t second = listed.at("shard-00001.lmdb/data.mdb");
  const uint64_t half = second / 2;
  server_->Set("/files/ds/shard-00001.lmdb/data.mdb", "pause=" + std::to_string(half));
  int fds[2];
  ASSERT_EQ(::pipe(fds), 0);
  // The child reports once the first file and half the second are on disk (the server then
  // holds the rest back), and is killed there.
  const pid_t pid =
      FetchDatasetInChild(server_->Url("ds/"), Dest(), opts_, fds[1], [&](const FetchProgress& p) {
        return p.phase == FetchProgress::Phase::kTransfer && p.bytes >= first + half;
      });
  ASSERT_GT(pid, 0);
  char c = 0;
  ASSERT_EQ(::read(fds[0], &c, 1), 1);
  ::kill(pid, SIGKILL);
  int st = 0;
  ASSERT_EQ(::waitpid(pid, &st, 0), pid);
  ASSERT_TRUE(WIFSIGNALED(st));
  server_->Command("release");
  EXPECT_FALSE(fs::exists(Dest()));
  EXPECT_EQ(fs::file_size(Dest() + ".part/shard-00000.lmdb/data.mdb"), first);
  EXPECT_EQ(fs::file_size(Dest() + ".part/shard-00001.lmdb/data.mdb.part"), half);
  (void)server_->Requests();
  FetchResult r;
  Status s = FetchDataset(server_->Url("ds/"), Dest(), opts_, &r);
  ASSERT_TRUE(s.ok()) << s.ToString();
  ExpectSameFiles("ds", Dest());
  EXPECT_EQ(r.resumed_from, first + half);
  auto reqs = server_->Requests();
  ASSERT_EQ(reqs.size(), 2u) << "the manifest, then the rest of the second file";
  EXPECT_EQ(reqs[0]["path"], "/files/ds/manifest.json");
  EXPECT_EQ(reqs[1]["path"], "/files/ds/shard-00001.lmdb/data.mdb");
  EXPECT_EQ(reqs[1]["range"], "bytes=" + std::to_string(half) + "-");
  EXPECT_TRUE(LoadAll(Dest()) == LoadAll(Srv("ds")));
  ::close(fds[0]);
  ::close(fds[1]);
}

TEST_F(FetchDatasetTest, AChangedManifestStartsOver) {
  // An interrupted fetch left the first file of an older version of the dataset.
  const auto listed = Listed("ds");
  server_->Set("/files/ds/shard-00001.lmdb/data.mdb", "fail=1&code=404");
  Status s = FetchDataset(server_->Url("ds/"), Dest(), opts_);
  ASSERT_EQ(s.code(), Status::Code::kNotFound) << s.ToString();
  ASSERT_TRUE(fs::exists(Dest() + ".part/shard-00000.lmdb/data.mdb"));
  // A file of the user's put there meanwhile is not the fetch's: never removed.
  WriteAll(Dest() + ".part/notes.txt", "the user's");
  // The dataset is rebuilt on the server (other images): its manifest changes.
  ASSERT_EQ(BuildServedDataset(dir_ + "/src2", Srv("ds"), "5"), "");
  (void)server_->Requests();
  FetchResult r;
  s = FetchDataset(server_->Url("ds/"), Dest(), opts_, &r);
  ASSERT_TRUE(s.ok()) << s.ToString();
  ExpectSameFiles("ds", Dest());
  EXPECT_EQ(r.resumed_from, 0u) << "nothing of the old version is kept";
  EXPECT_EQ(server_->Requests().size(), 3u);
  EXPECT_EQ(ReadAll(Dest() + "/notes.txt"), "the user's");
  EXPECT_FALSE(fs::exists(Dest() + ".lock")) << "the lock file is removed by its holder";
}

// Item 6: a manifest whose file sizes overflow (each below 2^64, their sum wrapping to a small
// number) is refused before any file is requested; nothing is left.
TEST_F(FetchDatasetTest, AManifestWhoseSizesOverflowIsRefusedBeforeAnyFileIsRequested) {
  fs::copy(Srv("ds"), Srv("huge"), fs::copy_options::recursive);
  json m = json::parse(ReadAll(Srv("huge") + "/manifest.json"));
  ASSERT_GE(m["files"].size(), 2u);
  m["files"][0]["size"] = uint64_t{1} << 63;
  m["files"][1]["size"] = uint64_t{1} << 63;  // the sum wraps to 0
  WriteAll(Srv("huge") + "/manifest.json", m.dump(2));
  (void)server_->Requests();
  Status s = FetchDataset(server_->Url("huge/"), Dest("huge"), opts_);
  EXPECT_EQ(s.code(), Status::Code::kCorruption) << s.ToString();
  EXPECT_TRUE(Contains(s.message(), server_->Url("huge/manifest.json"))) << s.ToString();
  EXPECT_TRUE(Contains(s.message(), "overflow")) << s.ToString();
  EXPECT_EQ(server_->Requests().size(), 1u) << "only the manifest";
  EXPECT_FALSE(fs::exists(Dest("huge")));
  EXPECT_FALSE(fs::exists(Dest("huge") + ".part"));
}

TEST_F(FetchDatasetTest, TwoProcessesMakeOneDownload) {
  server_->Set("/files/ds/shard-00000.lmdb/data.mdb", "pause=1000");
  int fds[2];
  ASSERT_EQ(::pipe(fds), 0);
  auto never = [](const FetchProgress&) { return false; };
  const pid_t a = FetchDatasetInChild(server_->Url("ds/"), Dest(), opts_, fds[1], never);
  ASSERT_GT(a, 0);
  server_->WaitPaused();  // a is mid-download and holds the lock
  const pid_t b = FetchDatasetInChild(
      server_->Url("ds/"), Dest(), opts_, fds[1],
      [](const FetchProgress& p) { return p.phase == FetchProgress::Phase::kWaitingForLock; });
  ASSERT_GT(b, 0);
  char c = 0;
  ASSERT_EQ(::read(fds[0], &c, 1), 1);  // b waits for a's lock
  server_->Command("release");
  int st = 0;
  ASSERT_EQ(::waitpid(a, &st, 0), a);
  EXPECT_TRUE(WIFEXITED(st) && WEXITSTATUS(st) == 0);
  ASSERT_EQ(::waitpid(b, &st, 0), b);
  EXPECT_TRUE(WIFEXITED(st) && WEXITSTATUS(st) == 0);
  std::map<std::string, int> per_path;
  for (const json& q : server_->Requests()) ++per_path[q["path"].get<std::string>()];
  EXPECT_EQ(per_path.size(), Listed("ds").size() + 1);
  for (const auto& [path, n] : per_path) EXPECT_EQ(n, 1) << path << ": one download";
  ExpectSameFiles("ds", Dest());
  ::close(fds[0]);
  ::close(fds[1]);
}

TEST_F(FetchDatasetTest, AManifestWithoutTheFileListIsAClearError) {
  // A dataset built before the list existed: the same files, a manifest without "files".
  fs::copy(Srv("ds"), Srv("old"), fs::copy_options::recursive);
  json m = json::parse(ReadAll(Srv("old") + "/manifest.json"));
  m.erase("files");
  WriteAll(Srv("old") + "/manifest.json", m.dump(2));
  Status s = FetchDataset(server_->Url("old/"), Dest("old"), opts_);
  EXPECT_EQ(s.code(), Status::Code::kUnsupported) << s.ToString();
  EXPECT_TRUE(Contains(s.message(), server_->Url("old/manifest.json"))) << s.ToString();
  EXPECT_TRUE(Contains(s.message(), "\"files\"")) << s.ToString();
  EXPECT_FALSE(fs::exists(Dest("old")));
  EXPECT_FALSE(fs::exists(Dest("old") + ".part"));
  // A list that lacks a file the dataset needs: named, nothing fetched.
  m = json::parse(ReadAll(Srv("ds") + "/manifest.json"));
  m["files"].erase(1);
  WriteAll(Srv("old") + "/manifest.json", m.dump(2));
  (void)server_->Requests();
  s = FetchDataset(server_->Url("old/"), Dest("old"), opts_);
  EXPECT_EQ(s.code(), Status::Code::kCorruption) << s.ToString();
  EXPECT_TRUE(Contains(s.message(), "lacks shard-00001.lmdb/data.mdb")) << s.ToString();
  EXPECT_EQ(server_->Requests().size(), 1u) << "only the manifest";
  EXPECT_FALSE(fs::exists(Dest("old") + ".part"));
  m.erase("files");
  WriteAll(Srv("old") + "/manifest.json", m.dump(2));
  // It still opens and verifies locally.
  std::unique_ptr<Dataset> ds;
  EXPECT_TRUE(Dataset::Open(Srv("old"), DatasetOpenOptions{}, &ds).ok());
  std::string out;
  EXPECT_EQ(RunDsconvert({"verify", Srv("old")}, &out), 0) << out;
  EXPECT_TRUE(Contains(out, "no per-file list")) << out;
  // No dataset at all: NotFound naming the manifest's URL.
  s = FetchDataset(server_->Url("nothing/"), Dest("nothing"), opts_);
  EXPECT_EQ(s.code(), Status::Code::kNotFound) << s.ToString();
  EXPECT_TRUE(Contains(s.message(), server_->Url("nothing/manifest.json"))) << s.ToString();
  EXPECT_FALSE(fs::exists(Dest("nothing") + ".part"));
  // A dataset directory given as a path (a Drive mount) is fetched the same way.
  FetchResult r;
  s = FetchDataset(Srv("ds"), Dest("local"), opts_, &r);
  ASSERT_TRUE(s.ok()) << s.ToString();
  ExpectSameFiles("ds", Dest("local"));
}

TEST_F(FetchDatasetTest, VerifyChecksEveryListedFilesSizeAndSha256) {
  std::string out;
  EXPECT_EQ(RunDsconvert({"verify", Srv("ds")}, &out), 0) << out;
  EXPECT_TRUE(Contains(out, "2 files (size + sha256), 0 bad")) << out;
  out.clear();
  EXPECT_EQ(RunDsconvert({"verify", Srv("lone")}, &out), 0) << out;
  EXPECT_TRUE(Contains(out, "1 files (size + sha256), 0 bad")) << out;
  // A file whose bytes are not the ones listed (the manifest's hash edited here, so that the
  // records themselves stay intact and only the file check can see it).
  const std::string path = Srv("ds") + "/manifest.json";
  const std::string good = ReadAll(path);
  json m = json::parse(good);
  m["files"][1]["sha256"] = std::string(64, '0');
  WriteAll(path, m.dump(2));
  out.clear();
  EXPECT_EQ(RunDsconvert({"verify", Srv("ds")}, &out), 3) << out;
  EXPECT_TRUE(Contains(out, "BAD file shard-00001.lmdb/data.mdb: sha256")) << out;
  out.clear();
  EXPECT_EQ(RunDsconvert({"verify", Srv("ds"), "--no-sha256"}, &out), 0) << out;
  EXPECT_TRUE(Contains(out, "2 files (size), 0 bad")) << out;
  m = json::parse(good);
  m["files"][0]["size"] = m["files"][0]["size"].get<uint64_t>() + 1;
  WriteAll(path, m.dump(2));
  out.clear();
  EXPECT_EQ(RunDsconvert({"verify", Srv("ds"), "--no-sha256"}, &out), 3) << out;
  EXPECT_TRUE(Contains(out, "BAD file shard-00000.lmdb/data.mdb: size")) << out;
}

TEST_F(FetchDatasetTest, AResumeOfAFinishedBuildWritesAMissingFileList) {
  // One shard killed after its final commit, before manifest.json: it is complete (meta says
  // so), and `build --resume` adds the list instead of leaving a dataset that cannot be fetched.
  const std::string path = Srv("lone") + "/manifest.json";
  const std::string want = ReadAll(path);
  fs::remove(path);
  std::string out;
  EXPECT_EQ(RunDsconvert({"build", dir_ + "/src", Srv("lone"), "--threads", "1", "--resume"}, &out),
            0)
      << out;
  EXPECT_TRUE(Contains(out, "already complete")) << out;
  ASSERT_TRUE(fs::exists(path));
  EXPECT_EQ(ReadAll(path), want);
}

TEST_F(FetchDatasetTest, DsconvertFetchOfADatasetUrl) {
  std::string out;
  // A URL ending in '/' is a dataset; --dataset says so without it.
  EXPECT_EQ(RunDsconvert({"fetch", server_->Url("ds/"), Dest(), "-q"}, &out), 0) << out;
  EXPECT_TRUE(Contains(out, "fetched dataset")) << out;
  ExpectSameFiles("ds", Dest());
  out.clear();
  EXPECT_EQ(RunDsconvert({"fetch", server_->Url("lone"), Dest("lone"), "--dataset", "-q"}, &out), 0)
      << out;
  ExpectSameFiles("lone", Dest("lone"));
  out.clear();
  EXPECT_EQ(RunDsconvert(
                {"fetch", server_->Url("ds/"), Dest("y"), "--sha256", std::string(64, 'a')}, &out),
            1)
      << out;
  EXPECT_TRUE(Contains(out, "per file")) << out;
}

// A dataset URL with a query: every file is asked for with the same query (a token for the
// directory). A pre-signed URL (a signature per object) cannot fetch the other files: the error
// says so, names the file, and never shows the query.
TEST_F(FetchDatasetTest, ATokenUrlFetchesEveryFileWithItsQueryAndAPresignedOneSaysWhyItCannot) {
  server_->Auth("/files/ds/", "token", "DSTOKEN77");
  // The CLI: a URL whose path ends in '/' is a dataset, whatever its query; no DEST_DIR: named
  // after the URL's path ("ds") in the current directory; no secret printed.
  std::string out;
  fs::create_directories(fs::path(Dest()).parent_path());
  int rc = RunDsconvert({"fetch", server_->Url("ds/", "token=DSTOKEN77")}, &out,
                        fs::path(Dest()).parent_path().string());
  ASSERT_EQ(rc, 0) << out;
  EXPECT_FALSE(Contains(out, "DSTOKEN77")) << out;
  EXPECT_TRUE(Contains(out, server_->Url("ds/", "..."))) << out;
  ExpectSameFiles("ds", Dest());
  const auto reqs = server_->Requests();
  EXPECT_EQ(reqs.size(), Listed("ds").size() + 1) << "the manifest + each file once";
  for (const json& q : reqs) EXPECT_EQ(q["query"], "token=DSTOKEN77") << q.dump();
  // Pre-signed: the signature is valid for manifest.json only (S3 signs one object).
  server_->Auth("/files/ds/", "X-Amz-Signature", "SIG-OF-ANOTHER-OBJECT");
  server_->Auth("/files/ds/manifest.json", "X-Amz-Signature", "SIGMANIFEST");
  FetchResult r;
  Status s =
      FetchDataset(server_->Url("ds/", "X-Amz-Signature=SIGMANIFEST"), Dest("signed"), opts_, &r);
  EXPECT_EQ(s.code(), Status::Code::kIOError) << s.ToString();
  EXPECT_TRUE(Contains(s.message(), "pre-signed URL")) << s.ToString();
  EXPECT_TRUE(Contains(s.message(), "cannot fetch a multi-file dataset")) << s.ToString();
  EXPECT_TRUE(Contains(s.message(), "file " + Listed("ds").begin()->first)) << s.ToString();
  EXPECT_TRUE(Contains(s.message(), "HTTP 403")) << s.ToString();
  EXPECT_FALSE(Contains(s.ToString(), "SIGMANIFEST")) << s.ToString();
  EXPECT_FALSE(fs::exists(Dest("signed")));
  // The sidecar of the file that was refused holds no secret either.
  for (const auto& e : fs::recursive_directory_iterator(Dest("signed") + ".part")) {
    if (e.is_regular_file()) {
      EXPECT_FALSE(Contains(ReadAll(e.path()), "SIGMANIFEST")) << e.path();
    }
  }
}

}  // namespace
}  // namespace dspipe::testing
