// SPDX-License-Identifier: Apache-2.0
// http(s):// dataset paths through the RAM-disk cache, against a real HTTP server on 127.0.0.1
// (tests/fetch/server.py) serving datasets built by `dsconvert build` (child processes). Every
// wait is on a real condition: a line from the server, a process exit.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>

#include "cache/populate.h"
#include "dspipe/cache.h"
#include "dspipe/device_loader.h"
#include "dspipe/loader.h"
#include "dspipe/log.h"
#include "fetch/http_server.h"
#include "fetch/test_files.h"
#include "loader/loader_dataset.h"
#include "profile/profile.h"

namespace dspipe::testing {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

class CacheUrlTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/dspipe-cacheurl-XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
    root_ = dir_ + "/cache";
    ASSERT_EQ(BuildServedDataset(dir_ + "/src", Srv("ds")), "");
    server_ = std::make_unique<HttpServer>(dir_ + "/srv");
  }
  void TearDown() override {
    server_.reset();
    std::error_code ec;
    fs::remove_all(dir_, ec);
  }
  std::string Srv(const std::string& name) const { return dir_ + "/srv/" + name; }
  // Paths of the files the served manifest lists, as the server logs them.
  std::vector<std::string> ListedPaths() const {
    std::vector<std::string> v;
    const json manifest = json::parse(ReadAll(Srv("ds") + "/manifest.json"));
    for (const json& f : manifest.at("files")) {
      v.push_back("/files/ds/" + f.at("path").get<std::string>());
    }
    return v;
  }
  // The cache's own directory below the root: everything the cache makes is in there.
  std::string Own() const { return root_ + "/dspipe-cache-v1"; }
  // Names in it (entries, their .lock/.lease/.used files, temp dirs).
  std::vector<std::string> RootNames() const {
    std::vector<std::string> v;
    std::error_code ec;
    for (const auto& e : fs::directory_iterator(Own(), ec)) v.push_back(e.path().filename());
    return v;
  }
  std::vector<std::string> Entries() const {  // complete entries: directories without .tmp
    std::vector<std::string> v;
    for (const std::string& n : RootNames()) {
      if (fs::is_directory(Own() + "/" + n) && !n.ends_with(".tmp")) v.push_back(n);
    }
    return v;
  }
  std::map<std::string, int> PerPath() {
    std::map<std::string, int> m;
    for (const json& q : server_->Requests()) ++m[q["path"].get<std::string>()];
    return m;
  }

  std::string dir_, root_;
  std::unique_ptr<HttpServer> server_;
};

TEST_F(CacheUrlTest, AUrlOpensThroughTheCacheLikeTheLocalDatasetAndReusesTheEntry) {
  LoaderOptions o;
  o.cache = root_;
  const std::string url = server_->Url("ds/");
  const std::string local = LoadAll(Srv("ds"), LoaderOptions());
  ASSERT_FALSE(local.empty());
  // First open: the manifest (listing), then FetchDataset (the manifest again, every file).
  EXPECT_TRUE(LoadAll(url, o) == local) << "batches differ";
  std::map<std::string, int> per_path = PerPath();
  for (const std::string& p : ListedPaths()) EXPECT_EQ(per_path[p], 1) << p;
  EXPECT_EQ(per_path["/files/ds/manifest.json"], 2);
  EXPECT_EQ(per_path.size(), ListedPaths().size() + 1);
  ASSERT_EQ(Entries().size(), 1u);
  EXPECT_TRUE(Entries()[0].starts_with("ds-")) << Entries()[0];
  // Second open: the entry is found; only manifest.json is asked for (its identity).
  std::shared_ptr<const Dataset> ds;
  CacheResult r;
  Status s = loader::OpenLoaderDataset(url, o, &ds, &r);
  ASSERT_TRUE(s.ok()) << s.ToString();
  EXPECT_TRUE(r.cached);
  EXPECT_FALSE(r.copied);
  EXPECT_EQ(r.entry, Own() + "/" + Entries()[0]);
  ds.reset();
  EXPECT_TRUE(LoadAll(url, o) == local);
  per_path = PerPath();
  EXPECT_EQ(per_path.size(), 1u);
  EXPECT_EQ(per_path["/files/ds/manifest.json"], 2) << "one per open, nothing else";
  // The Loader's default cache ("off") takes a URL as "auto" (here DSPIPE_CACHE_DIR = root_):
  // the same entry, no data fetched.
  ASSERT_EQ(::setenv("DSPIPE_CACHE_DIR", root_.c_str(), 1), 0);
  EXPECT_TRUE(LoadAll(url, LoaderOptions()) == local);
  ASSERT_EQ(::unsetenv("DSPIPE_CACHE_DIR"), 0);
  per_path = PerPath();
  EXPECT_EQ(per_path.size(), 1u);
  EXPECT_EQ(Entries().size(), 1u);
}

TEST_F(CacheUrlTest, DeviceLoaderOpensAUrlThroughTheCache) {
  LoaderOptions o;
  o.cache = root_;
  o.batch_size = 4;
  o.threads = 2;
  DeviceOptions d;
  d.device = DeviceOptions::kCpu;
  std::unique_ptr<DeviceLoader> loader;
  Status s = DeviceLoader::Open(server_->Url("ds/"), o, d, &loader);
  ASSERT_TRUE(s.ok()) << s.ToString();
  int samples = 0;
  for (;;) {
    TensorBatch b;
    ASSERT_TRUE(loader->Next(&b).ok());
    if (!b) break;
    samples += b.size();
  }
  EXPECT_EQ(samples, 30);
  ASSERT_EQ(Entries().size(), 1u) << "read from the cached copy";
  std::map<std::string, int> per_path = PerPath();
  for (const std::string& p : ListedPaths()) EXPECT_EQ(per_path[p], 1) << p;
}

TEST_F(CacheUrlTest, ARebuiltRemoteDatasetGetsANewEntry) {
  CacheOptions co;
  co.mode = root_;
  CacheResult r;
  std::unique_ptr<CacheLease> lease;
  ASSERT_TRUE(AcquireCache(server_->Url("ds"), co, &r, &lease).ok());
  ASSERT_TRUE(r.copied);
  const std::string first = r.entry;
  lease.reset();
  ASSERT_EQ(BuildServedDataset(dir_ + "/src2", Srv("ds"), "5"), "");
  Status s = AcquireCache(server_->Url("ds"), co, &r, &lease);
  ASSERT_TRUE(s.ok()) << s.ToString();
  EXPECT_TRUE(r.copied);
  EXPECT_NE(r.entry, first);
  EXPECT_TRUE(ReadAll(r.path + "/manifest.json") == ReadAll(Srv("ds") + "/manifest.json"));
}

TEST_F(CacheUrlTest, AUrlThatCannotBeCachedIsAClearErrorBeforeAnyDataIsFetched) {
  LoaderOptions o;
  o.cache = root_;
  o.cache_limit = 1000;  // far below the dataset
  const std::string url = server_->Url("ds/");
  std::unique_ptr<Loader> loader;
  Status s = Loader::Open(url, o, &loader);
  EXPECT_EQ(s.code(), Status::Code::kUnsupported) << s.ToString();
  EXPECT_TRUE(Contains(s.message(), url)) << s.ToString();
  EXPECT_TRUE(Contains(s.message(), "cache_limit")) << s.ToString();
  EXPECT_TRUE(Contains(s.message(), "cannot be read in place")) << s.ToString();
  EXPECT_TRUE(Contains(s.message(), "dsconvert fetch " + url + " DIR")) << s.ToString();
  std::map<std::string, int> per_path = PerPath();
  EXPECT_EQ(per_path.size(), 1u) << "only the manifest; no data.mdb";
  EXPECT_EQ(per_path["/files/ds/manifest.json"], 1);
  EXPECT_TRUE(Entries().empty());
  // AcquireCache says the same (the reason: over the budget of a dir that has no room).
  CacheOptions co;
  co.mode = root_;
  co.margin = ~0ull >> 1;  // no budget at all
  CacheResult r;
  std::unique_ptr<CacheLease> lease;
  s = AcquireCache(url, co, &r, &lease);
  EXPECT_EQ(s.code(), Status::Code::kUnsupported) << s.ToString();
  EXPECT_TRUE(Contains(s.message(), "budget")) << s.ToString();
  EXPECT_FALSE(lease);
  per_path = PerPath();
  EXPECT_EQ(per_path.size(), 1u);
  EXPECT_TRUE(Entries().empty());
  // A URL that serves no dataset names the manifest it looked for.
  s = Loader::Open(server_->Url("nothing/"), o, &loader);
  EXPECT_EQ(s.code(), Status::Code::kNotFound) << s.ToString();
  EXPECT_TRUE(Contains(s.message(), server_->Url("nothing/manifest.json"))) << s.ToString();
}

TEST_F(CacheUrlTest, KillMidFetchLeavesNoEntryAndTheNextOpenResumes) {
  // The child fetches the first shard and half the second (the server holds the rest back),
  // reports once those bytes are in the entry's temp dir, and is killed there.
  const json manifest = json::parse(ReadAll(Srv("ds") + "/manifest.json"));
  std::map<std::string, uint64_t> sizes;
  for (const json& f : manifest.at("files")) sizes[f.at("path")] = f.at("size").get<uint64_t>();
  const uint64_t first = sizes.at("shard-00000.lmdb/data.mdb");
  const uint64_t half = sizes.at("shard-00001.lmdb/data.mdb") / 2;
  server_->Set("/files/ds/shard-00001.lmdb/data.mdb", "pause=" + std::to_string(half));
  CacheOptions co;
  co.mode = root_;
  const std::string url = server_->Url("ds/");
  int fds[2];
  ASSERT_EQ(::pipe(fds), 0);
  const pid_t pid = ::fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    bool signalled = false;
    cache::SetFetchProgressHookForTest([&](const FetchProgress& p) {
      if (signalled || p.phase != FetchProgress::Phase::kTransfer || p.bytes < first + half) {
        return;
      }
      signalled = true;
      const char c = 'x';
      if (::write(fds[1], &c, 1) != 1) ::_exit(3);
    });
    CacheResult r;
    std::unique_ptr<CacheLease> lease;
    ::_exit(AcquireCache(url, co, &r, &lease).ok() ? 0 : 1);
  }
  char c = 0;
  ASSERT_EQ(::read(fds[0], &c, 1), 1);  // mid-body of the second shard, holding the lock
  ::close(fds[0]);
  ::close(fds[1]);
  ::kill(pid, SIGKILL);
  int st = 0;
  ASSERT_EQ(::waitpid(pid, &st, 0), pid);
  ASSERT_TRUE(WIFSIGNALED(st));
  server_->Command("release");
  EXPECT_TRUE(Entries().empty()) << "no entry after a kill";
  bool tmp_left = false;
  for (const std::string& n : RootNames()) tmp_left = tmp_left || n.ends_with(".tmp");
  EXPECT_TRUE(tmp_left) << "the killed fetch's temp dir is what is left";
  server_->Set("/files/ds/shard-00001.lmdb/data.mdb", "");
  const std::vector<json> before = server_->Requests();
  LoaderOptions o;
  o.cache = root_;
  EXPECT_TRUE(LoadAll(url, o) == LoadAll(Srv("ds"), LoaderOptions()));
  ASSERT_EQ(Entries().size(), 1u);
  for (const std::string& n : RootNames()) EXPECT_FALSE(n.ends_with(".tmp")) << n;
  // The next open resumed the killed fetch: the interrupted shard with a Range request from
  // where it stopped, and no file finished before the kill requested again.
  std::set<std::string> done_before;
  for (const json& q : before) {
    const std::string p = q["path"].get<std::string>();
    if (p != "/files/ds/shard-00001.lmdb/data.mdb" && p != "/files/ds/manifest.json") {
      done_before.insert(p);
    }
  }
  bool resumed = false;
  for (const json& q : server_->Requests()) {
    const std::string p = q["path"].get<std::string>();
    EXPECT_EQ(done_before.count(p), 0u) << p << " fetched again";
    if (p == "/files/ds/shard-00001.lmdb/data.mdb") {
      EXPECT_EQ(q["range"], "bytes=" + std::to_string(half) + "-") << q.dump();
      resumed = true;
    }
  }
  EXPECT_TRUE(resumed) << "the interrupted shard was not requested again";
}

// A dataset URL with a token: the cache entry's key ignores the query (a re-signed URL finds the
// same entry), and the token is in no log line, error or file under the cache root.
TEST_F(CacheUrlTest, ATokenUrlIsCachedUnderAKeyWithoutTheQueryAndTheTokenIsNeverShown) {
  server_->Auth("/files/ds/", "token", "CACHETOKEN1");
  const LogLevel level = GetLogLevel();
  SetLogLevel(LogLevel::kInfo);  // the cache's decision lines are info
  ::testing::internal::CaptureStderr();
  LoaderOptions o;
  o.cache = root_;
  const std::string loaded = LoadAll(server_->Url("ds/", "token=CACHETOKEN1"), o);
  CacheOptions co;
  co.mode = root_;
  CacheResult r;
  std::unique_ptr<CacheLease> lease;
  server_->Auth("/files/ds/", "token", "CACHETOKEN2");  // re-signed; the old token expires
  const Status again = AcquireCache(server_->Url("ds/", "token=CACHETOKEN2"), co, &r, &lease);
  lease.reset();
  std::unique_ptr<Loader> loader;
  const Status expired = Loader::Open(server_->Url("ds/", "token=CACHETOKEN1"), o, &loader);
  const std::string log = ::testing::internal::GetCapturedStderr();
  SetLogLevel(level);
  EXPECT_TRUE(loaded == LoadAll(Srv("ds"), LoaderOptions())) << "batches differ";
  ASSERT_EQ(Entries().size(), 1u);
  ASSERT_TRUE(again.ok()) << again.ToString();
  EXPECT_TRUE(r.cached);
  EXPECT_FALSE(r.copied) << "a re-signed URL finds the entry";
  EXPECT_EQ(r.entry, Own() + "/" + Entries()[0]);
  EXPECT_EQ(expired.code(), Status::Code::kIOError) << expired.ToString();
  EXPECT_TRUE(Contains(expired.message(), "may have expired")) << expired.ToString();
  EXPECT_TRUE(Contains(log, "dspipe cache: " + server_->Url("ds/", "..."))) << log;
  for (const std::string& secret : {std::string("CACHETOKEN1"), std::string("CACHETOKEN2")}) {
    EXPECT_FALSE(Contains(log, secret)) << log;
    EXPECT_FALSE(Contains(again.ToString() + expired.ToString(), secret)) << expired.ToString();
    for (const auto& e : fs::recursive_directory_iterator(root_)) {
      if (e.is_regular_file()) {
        EXPECT_FALSE(Contains(ReadAll(e.path()), secret)) << e.path();
      }
    }
  }
  // Data files: the first open's manifest (listing + fetch) and files, then one manifest per
  // open; each file's request carried the token.
  std::map<std::string, int> per_path;
  for (const json& q : server_->Requests()) {
    const std::string p = q["path"].get<std::string>();
    ++per_path[p];
    EXPECT_TRUE(Contains(q["query"].get<std::string>(), "token=CACHETOKEN")) << q.dump();
  }
  for (const std::string& p : ListedPaths()) EXPECT_EQ(per_path[p], 1) << p;
  EXPECT_EQ(per_path["/files/ds/manifest.json"], 4);
}

// dsbench over a token URL: the report and the error of a failed measured run (prefetch 0 is
// refused once the dataset is open) show the URL with its query redacted.
TEST_F(CacheUrlTest, DsbenchOfATokenUrlNeverShowsTheToken) {
  using profile::ProfileOptions, profile::ProfileResult, profile::RunProfile;
  server_->Auth("/files/ds/", "token", "BENCHTOKEN");
  const std::string url = server_->Url("ds/", "token=BENCHTOKEN");
  ProfileOptions po;
  po.batches = 2;
  po.warmup = 0;
  po.ram_cache = root_;
  ProfileResult r;
  const Status ok = RunProfile(url, po, &r);
  ASSERT_TRUE(ok.ok()) << ok.ToString();
  po.prefetch = 0;
  ProfileResult bad;
  const Status s = RunProfile(url, po, &bad);
  EXPECT_EQ(s.code(), Status::Code::kInvalidArgument) << s.ToString();
  EXPECT_TRUE(Contains(s.ToString(), "dsbench " + server_->Url("ds/", "..."))) << s.ToString();
  for (const std::string& shown :
       std::vector<std::string>{s.ToString(), r.dataset.path, r.ram_cache.path, r.ram_cache.note}) {
    EXPECT_FALSE(Contains(shown, "BENCHTOKEN")) << shown;
  }
}

}  // namespace
}  // namespace dspipe::testing
