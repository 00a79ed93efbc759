// SPDX-License-Identifier: Apache-2.0
// s3:// datasets end to end against a real SeaweedFS (s3_server.h) with server.py --proxy in
// front of it (to count and order the requests): `dsconvert push` (multipart, checked, resumed
// after a kill, manifest last, a re-push uploads nothing), then the pushed dataset everywhere an
// http(s):// dataset URL works (FetchDataset, Loader and DeviceLoader through the cache, dsbench,
// `dsconvert fetch/verify/info`). Datasets are built by the dsconvert CLI (child processes).
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>

#include "dspipe/convert.h"
#include "dspipe/device_loader.h"
#include "dspipe/push.h"
#include "fetch/s3.h"
#include "fetch/s3_fixture.h"
#include "fetch/test_files.h"
#include "profile/profile.h"

namespace dspipe::testing {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

constexpr uint64_t kPart = uint64_t{5} << 20;  // S3's minimum part

// 24 synthetic 512x512 samples, 2 shards of raw, uncompressed pixels: each data.mdb is about
// 12 MiB, so it goes up in 3 parts of 5 MiB. Returns "" or the failing command's output.
std::string BuildBig(const std::string& src, const std::string& out, const std::string& seed) {
  std::string log;
  if (RunDsconvert(
          {"synth", src, "--count", "24", "--size", "512x512", "--seed", seed, "--threads", "1"},
          &log) != 0) {
    return "synth: " + log;
  }
  if (RunDsconvert({"build", src, out, "--shards", "2", "--store", "raw", "--compression", "none",
                    "--threads", "1", "-q"},
                   &log) != 0) {
    return "build: " + log;
  }
  return "";
}

class S3DatasetTest : public SeaweedProxyTest {
 protected:
  void SetUp() override {
    SeaweedProxyTest::SetUp();
    if (!Ready()) return;
    env_->Set("DSPIPE_CACHE_DIR", dir_ + "/cache");  // the CLI's "auto" cache
  }
  PushOptions Small() const {
    PushOptions o;
    o.part_size = kPart;
    return o;
  }
  std::vector<json> Writes() {  // PUT, POST and DELETE requests since the last call
    std::vector<json> v;
    for (const json& r : proxy_->Requests()) {
      if (r["method"] != "GET" && r["method"] != "HEAD") v.push_back(r);
    }
    return v;
  }
};

TEST_F(S3DatasetTest, APushedDatasetReadsEverywhereLikeTheLocalOneAndARePushUploadsNothing) {
  const std::string ds = dir_ + "/ds";
  ASSERT_EQ(BuildBig(dir_ + "/src", ds, "7"), "");
  PushResult r;
  ASSERT_OK(PushDataset(ds, "s3://bkt/train", Small(), &r));  // the '/' is added
  EXPECT_EQ(r.files, 2u);  // the manifest's list: the two shards' data.mdb
  EXPECT_EQ(r.files_uploaded, r.files);
  EXPECT_FALSE(r.already_present);
  // Each data.mdb (> 5 MiB) went as a multipart upload of 5 MiB parts; manifest.json was last.
  const std::vector<json> writes = Writes();
  ASSERT_FALSE(writes.empty());
  EXPECT_EQ(writes.back()["method"], "PUT");
  EXPECT_EQ(writes.back()["path"], "/bkt/train/manifest.json");
  int parts = 0, creates = 0;
  for (const json& w : writes) {
    const std::string q = w["query"];
    if (w["method"] == "PUT" && q.find("partNumber=") != std::string::npos) ++parts;
    if (w["method"] == "POST" && q == "uploads=") ++creates;
  }
  EXPECT_EQ(creates, 2);
  EXPECT_GE(parts, 6);
  EXPECT_EQ(static_cast<uint64_t>(parts), r.parts_uploaded);

  // The objects, listed.
  std::unique_ptr<fetch::s3::Client> c;
  ASSERT_OK(fetch::s3::Client::Make(FetchOptions(), &c));
  std::vector<fetch::s3::ObjectInfo> objs;
  ASSERT_OK(c->List("s3://bkt/train/", &objs));
  EXPECT_EQ(objs.size(), r.files + 1);

  // Read back: FetchDataset, the Loader and the DeviceLoader through the cache, dsbench.
  const std::string local = LoadAll(ds);
  ASSERT_FALSE(local.empty());
  ASSERT_OK(FetchDataset("s3://bkt/train/", dir_ + "/fetched", FetchOptions()));
  EXPECT_TRUE(LoadAll(dir_ + "/fetched") == local);
  LoaderOptions lo;
  lo.cache = dir_ + "/lcache";
  EXPECT_TRUE(LoadAll("s3://bkt/train/", lo) == local);
  {
    DeviceOptions d;
    d.device = DeviceOptions::kCpu;
    LoaderOptions o = lo;
    o.batch_size = 5;
    std::unique_ptr<DeviceLoader> dl;
    ASSERT_OK(DeviceLoader::Open("s3://bkt/train/", o, d, &dl));
    int samples = 0;
    for (;;) {
      TensorBatch b;
      ASSERT_OK(dl->Next(&b));
      if (!b) break;
      samples += b.size();
    }
    EXPECT_EQ(samples, 24);
  }
  {
    profile::ProfileOptions po;
    po.batches = 2;
    po.warmup = 0;
    po.ram_cache = dir_ + "/lcache";
    profile::ProfileResult pr;
    ASSERT_OK(profile::RunProfile("s3://bkt/train/", po, &pr));
    EXPECT_TRUE(pr.ram_cache.cached) << pr.ram_cache.note;
  }
  // A cache that cannot take it: today's clear Unsupported error naming the URL.
  LoaderOptions tiny = lo;
  tiny.cache_limit = 1000;
  std::unique_ptr<Loader> loader;
  Status s = Loader::Open("s3://bkt/train/", tiny, &loader);
  EXPECT_EQ(s.code(), Status::Code::kUnsupported) << s.ToString();
  EXPECT_TRUE(Contains(s.message(), "s3://bkt/train/")) << s.ToString();
  // The CLI: verify and info read the cache's copy; fetch takes s3:// like https://.
  std::string out;
  EXPECT_EQ(RunDsconvert({"verify", "s3://bkt/train/"}, &out), 0) << out;
  EXPECT_TRUE(Contains(out, "s3://bkt/train/: 24 records, 0 bad; 2 files (size + sha256), 0 bad"))
      << out;
  out.clear();
  EXPECT_EQ(RunDsconvert({"info", "s3://bkt/train/"}, &out), 0) << out;
  EXPECT_TRUE(Contains(out, "records:     24")) << out;
  EXPECT_TRUE(Contains(out, "source:      s3://bkt/train/")) << out;
  out.clear();
  EXPECT_EQ(
      RunDsconvert({"fetch", "s3://bkt/train/shard-00001.lmdb/data.mdb", dir_ + "/one.mdb", "-q"},
                   &out),
      0)
      << out;
  EXPECT_TRUE(ReadAll(dir_ + "/one.mdb") == ReadAll(ds + "/shard-00001.lmdb/data.mdb"));

  // A re-push checks every file and uploads nothing.
  proxy_->Requests();
  PushResult again;
  ASSERT_OK(PushDataset(ds, "s3://bkt/train/", Small(), &again));
  EXPECT_TRUE(again.already_present);
  EXPECT_EQ(again.files_in_place, again.files);
  EXPECT_EQ(again.bytes_uploaded, 0u);
  EXPECT_TRUE(Writes().empty());
  out.clear();
  EXPECT_EQ(RunDsconvert({"push", ds, "s3://bkt/train/", "--part-mb", "5", "-q"}, &out), 0) << out;
  EXPECT_TRUE(Contains(out, "is already at s3://bkt/train/ (2 files checked); nothing to do"))
      << out;
  out.clear();
  EXPECT_EQ(RunDsconvert({"push", ds, "https://host/x/", "-q"}, &out), 1) << out;
  EXPECT_TRUE(Contains(out, "the destination must be an s3://bucket/prefix/ URL")) << out;
  EXPECT_FALSE(Contains(out, kSecretKey));
}

// A push killed mid-way (SIGKILL after its first part was uploaded) over an older dataset at the
// same prefix: a reader then finds no dataset (the old manifest went first, the new one is not
// there yet), never a mix; the next push continues the multipart upload from the server's
// ListParts and ends with the new dataset.
TEST_F(S3DatasetTest, AKilledPushIsResumedAndAReaderNeverSeesHalfADataset) {
  const std::string a = dir_ + "/a", b = dir_ + "/b";
  ASSERT_EQ(BuildBig(dir_ + "/srca", a, "1"), "");
  ASSERT_EQ(BuildBig(dir_ + "/srcb", b, "2"), "");
  ASSERT_OK(PushDataset(a, "s3://bkt/ds/", Small()));
  int p[2];
  ASSERT_EQ(::pipe(p), 0);
  const pid_t pid = ::fork();
  if (pid == 0) {
    ::close(p[0]);
    PushOptions o = Small();
    o.overwrite = true;  // another dataset is there
    o.progress = [fd = p[1], sent = false](uint64_t done, uint64_t) mutable {
      if (sent || done < kPart) return;
      sent = true;
      const char x = 'x';
      if (::write(fd, &x, 1) != 1) ::_exit(3);
      ::pause();  // killed here, between two parts
    };
    (void)PushDataset(b, "s3://bkt/ds/", o);
    ::_exit(4);
  }
  ::close(p[1]);
  char x = 0;
  ASSERT_EQ(::read(p[0], &x, 1), 1);
  ::close(p[0]);
  // Mid-push: no manifest, so no dataset to fetch (NotFound naming it), and no old one.
  const Status half = FetchDataset("s3://bkt/ds/", dir_ + "/half", FetchOptions());
  EXPECT_EQ(half.code(), Status::Code::kNotFound) << half.ToString();
  EXPECT_TRUE(Contains(half.message(), "s3://bkt/ds/manifest.json")) << half.ToString();
  ::kill(pid, SIGKILL);
  int st = 0;
  ::waitpid(pid, &st, 0);
  ASSERT_TRUE(WIFSIGNALED(st));

  proxy_->Requests();
  // The old dataset's files are still there (the new ones are not complete): overwrite again.
  PushResult r;
  PushOptions again = Small();
  ASSERT_EQ(PushDataset(b, "s3://bkt/ds/", again, &r).code(), Status::Code::kAlreadyExists);
  EXPECT_TRUE(Writes().empty());
  again.overwrite = true;
  ASSERT_OK(PushDataset(b, "s3://bkt/ds/", again, &r));
  EXPECT_GE(r.parts_resumed, 1u);   // the part the killed push uploaded was kept
  for (const json& w : Writes()) {  // and not sent again
    EXPECT_FALSE(w["path"] == "/bkt/ds/shard-00000.lmdb/data.mdb" &&
                 Contains(w["query"].get<std::string>(), "partNumber=1&"))
        << w.dump();
  }
  ASSERT_OK(FetchDataset("s3://bkt/ds/", dir_ + "/got", FetchOptions()));
  EXPECT_TRUE(LoadAll(dir_ + "/got") == LoadAll(b));
  EXPECT_FALSE(LoadAll(b) == LoadAll(a));
}

TEST_F(S3DatasetTest, ALocalFileThatDoesNotMatchItsManifestIsNeverMadeVisible) {
  const std::string ds = dir_ + "/ds";
  ASSERT_EQ(BuildBig(dir_ + "/src", ds, "3"), "");
  {  // one byte of the second shard's last part changes after the build
    const std::string f = ds + "/shard-00001.lmdb/data.mdb";
    std::string bytes = ReadAll(f);
    bytes[bytes.size() - 100] ^= 0x5a;
    WriteAll(f, bytes);
  }
  const Status s = PushDataset(ds, "s3://bkt/bad/", Small());
  EXPECT_EQ(s.code(), Status::Code::kCorruption) << s.ToString();
  EXPECT_TRUE(Contains(s.message(), "shard-00001.lmdb/data.mdb: sha256")) << s.ToString();
  std::unique_ptr<fetch::s3::Client> c;
  ASSERT_OK(fetch::s3::Client::Make(FetchOptions(), &c));
  fetch::s3::ObjectInfo info;
  EXPECT_EQ(c->Head("s3://bkt/bad/manifest.json", &info).code(), Status::Code::kNotFound);
  EXPECT_EQ(c->Head("s3://bkt/bad/shard-00001.lmdb/data.mdb", &info).code(),
            Status::Code::kNotFound);
  std::vector<std::string> uploads;
  ASSERT_OK(c->ListUploads("s3://bkt/bad/shard-00001.lmdb/data.mdb", &uploads));
  EXPECT_TRUE(uploads.empty());  // aborted, not left to be completed
}

// dsconvert build SRC s3://... (BuildOptions::output a URL): built in the staging directory
// exactly as a local build, pushed (manifest.json last), staging removed; a rerun builds again
// and uploads nothing. The options that cannot apply are refused before anything is written,
// and a push that fails leaves the finished staging build, which a rerun with resume pushes.
TEST_F(S3DatasetTest, ABuildToAnS3UrlPushesTheDatasetAndRemovesItsStagingCopy) {
  const std::string src = dir_ + "/src", local = dir_ + "/local", staging = dir_ + "/staging";
  std::string out;
  ASSERT_EQ(RunDsconvert(
                {"synth", src, "--count", "10", "--size", "64x48", "--seed", "5", "--threads", "1"},
                &out),
            0)
      << out;
  ASSERT_EQ(RunDsconvert({"build", src, local, "--shards", "2", "--threads", "1", "-q"}, &out), 0)
      << out;
  proxy_->Requests();
  out.clear();
  ASSERT_EQ(RunDsconvert({"build", src, "s3://bkt/built/", "--shards", "2", "--threads", "1",
                          "--staging", staging, "-q"},
                         &out),
            0)
      << out;
  EXPECT_TRUE(Contains(out, "built " + staging + ": 10 records from 10 sources")) << out;
  EXPECT_TRUE(Contains(out, "pushed " + staging + " -> s3://bkt/built/: 2 files")) << out;
  EXPECT_TRUE(Contains(out, staging + ": removed")) << out;
  EXPECT_FALSE(fs::exists(staging));
  const std::vector<json> writes = Writes();
  ASSERT_FALSE(writes.empty());
  EXPECT_EQ(writes.back()["path"], "/bkt/built/manifest.json");
  LoaderOptions lo;
  lo.cache = dir_ + "/lcache";
  const std::string want = LoadAll(local);
  ASSERT_FALSE(want.empty());
  EXPECT_TRUE(LoadAll("s3://bkt/built/", lo) == want);

  // Again: built again in staging, nothing uploaded (every file checked), staging removed.
  out.clear();
  ASSERT_EQ(RunDsconvert({"build", src, "s3://bkt/built/", "--shards", "2", "--threads", "1",
                          "--staging", staging, "-q"},
                         &out),
            0)
      << out;
  EXPECT_TRUE(Contains(out, "is already at s3://bkt/built/ (2 files checked); nothing pushed"))
      << out;
  EXPECT_TRUE(Writes().empty());
  EXPECT_FALSE(fs::exists(staging));

  // Refused before anything is written: one shard alone, a staging dir for a local output, an
  // http(s):// output.
  BuildOptions o;
  o.source = src;
  o.output = "s3://bkt/one/";
  o.shards = 2;
  o.shard_index = 0;
  o.staging = staging;
  o.threads = 1;
  BuildResult r;
  Status st = BuildDataset(o, &r);
  EXPECT_EQ(st.code(), Status::Code::kInvalidArgument) << st.ToString();
  EXPECT_TRUE(Contains(st.message(), "PushDataset")) << st.ToString();
  o.shard_index = -1;
  o.output = dir_ + "/elsewhere";
  st = BuildDataset(o, &r);
  EXPECT_EQ(st.code(), Status::Code::kInvalidArgument) << st.ToString();
  EXPECT_TRUE(Contains(st.message(), "BuildOptions::staging")) << st.ToString();
  o.staging.clear();
  o.output = "https://host/x/";
  st = BuildDataset(o, &r);
  EXPECT_EQ(st.code(), Status::Code::kInvalidArgument) << st.ToString();
  EXPECT_FALSE(fs::exists(staging));
  EXPECT_FALSE(fs::exists(dir_ + "/elsewhere"));
  EXPECT_TRUE(Writes().empty());

  // A push that fails (the server refuses its first read of the manifest: 403, not retried)
  // leaves the finished build in staging; a rerun with resume finds it built and pushes it.
  proxy_->Set("/bkt/later/manifest.json", "fail=1&code=403&s3code=AccessDenied");
  o.output = "s3://bkt/later/";
  o.staging = staging;
  st = BuildDataset(o, &r);
  EXPECT_FALSE(st.ok());
  EXPECT_TRUE(Contains(st.message(), "pushing " + staging)) << st.ToString();
  EXPECT_TRUE(Contains(st.message(), "manifest.json")) << st.ToString();
  EXPECT_TRUE(fs::exists(staging + "/manifest.json"));
  o.resume = true;
  ASSERT_OK(BuildDataset(o, &r));
  EXPECT_TRUE(r.already_complete);
  EXPECT_TRUE(r.pushed);
  EXPECT_EQ(r.push.files_uploaded, 2u);
  EXPECT_FALSE(fs::exists(staging));
  EXPECT_TRUE(LoadAll("s3://bkt/later/", lo) == want);

  // With skipped sources, the pushed staging keeps only the rejected-files report.
  {
    const std::string bad_src = dir_ + "/badsrc", kept = dir_ + "/kept";
    fs::copy(src, bad_src, fs::copy_options::recursive);
    WriteAll(bad_src + "/images/000003.png", "not a png");
    BuildOptions b = o;
    b.source = bad_src;
    b.output = "s3://bkt/skipped/";
    b.staging = kept;
    b.resume = false;
    b.on_error = OnError::kSkip;
    ASSERT_OK(BuildDataset(b, &r));
    EXPECT_TRUE(r.pushed);
    EXPECT_EQ(r.skipped, 1u);
    EXPECT_EQ(r.report_path, kept + "/rejected.tsv");
    std::vector<std::string> left;
    for (const auto& e : fs::directory_iterator(kept)) left.push_back(e.path().filename());
    EXPECT_EQ(left, std::vector<std::string>{"rejected.tsv"});
    EXPECT_TRUE(Contains(ReadAll(r.report_path), "000003.png"));
  }

  // A staging directory that exists already (here: someone's files) is refused as a local
  // output is, naming it; --overwrite does not delete what the build did not write either.
  ASSERT_TRUE(fs::create_directories(staging));
  WriteAll(staging + "/notes.txt", "mine");
  o.output = "s3://bkt/third/";
  o.resume = false;
  st = BuildDataset(o, &r);
  EXPECT_EQ(st.code(), Status::Code::kAlreadyExists) << st.ToString();
  EXPECT_TRUE(Contains(st.message(), "building s3://bkt/third/ in " + staging)) << st.ToString();
  o.overwrite = true;
  st = BuildDataset(o, &r);
  EXPECT_FALSE(st.ok()) << "overwrote a directory that is not a dataset";
  EXPECT_EQ(ReadAll(staging + "/notes.txt"), "mine") << st.ToString();
}

// Issue 39 item 4: push deleted a foreign PREFIX/manifest.json ("holds another dataset's
// manifest: deleting it first") and overwrote a foreign PREFIX/data.mdb, with no flag. A prefix
// holding anything but this dataset (or what a killed push of it left) is refused now, with
// nothing changed; overwrite replaces only the dataset's names and leaves other objects.
TEST_F(S3DatasetTest, APushOverWhatIsNotThisDatasetIsRefusedAndOverwriteReplacesOnlyItsNames) {
  const std::string src = dir_ + "/src", ds = dir_ + "/ds", other = dir_ + "/other";
  std::string out;
  ASSERT_EQ(RunDsconvert({"synth", src, "--count", "6", "--size", "32x24", "--seed", "7"}, &out), 0)
      << out;
  ASSERT_EQ(RunDsconvert({"build", src, ds, "--threads", "1", "-q"}, &out), 0) << out;
  ASSERT_EQ(RunDsconvert({"build", src, other, "--gray", "--threads", "1", "-q"}, &out), 0) << out;
  std::unique_ptr<fetch::s3::Client> c;
  ASSERT_OK(fetch::s3::Client::Make(FetchOptions(), &c));
  const std::string web = R"({"name": "my app", "icons": []})";
  ASSERT_OK(c->Put("s3://bkt/web/manifest.json", web));
  ASSERT_OK(c->Put("s3://bkt/web/important.txt", "keep me"));
  ASSERT_OK(c->Put("s3://bkt/raw/data.mdb", "someone else's bytes"));
  ASSERT_OK(PushDataset(other, "s3://bkt/theirs/", PushOptions()));
  struct Case {
    std::string prefix, says;
  };
  for (const Case& k :
       {Case{"s3://bkt/web/", "holds a manifest.json that is not a dspipe manifest"},
        Case{"s3://bkt/raw/",
             "holds 1 object that is not this dataset's (first: "
             "s3://bkt/raw/data.mdb)"},
        Case{"s3://bkt/theirs/", "holds another dspipe dataset"}}) {
    SCOPED_TRACE(k.prefix);
    proxy_->Requests();
    const Status s = PushDataset(ds, k.prefix, PushOptions());
    EXPECT_EQ(s.code(), Status::Code::kAlreadyExists) << s.ToString();
    EXPECT_TRUE(Contains(s.message(), k.says)) << s.ToString();
    EXPECT_TRUE(Contains(s.message(), "nothing was changed")) << s.ToString();
    EXPECT_TRUE(Contains(s.message(), "PushOptions::overwrite")) << s.ToString();
    EXPECT_TRUE(Writes().empty()) << Writes().front().dump();
  }
  std::string got;
  ASSERT_OK(c->Get("s3://bkt/web/manifest.json", &got));
  EXPECT_EQ(got, web);
  ASSERT_OK(c->Get("s3://bkt/raw/data.mdb", &got));
  EXPECT_EQ(got, "someone else's bytes");
  // The CLI names the flag.
  out.clear();
  EXPECT_NE(RunDsconvert({"push", ds, "s3://bkt/web/", "-q"}, &out), 0);
  EXPECT_TRUE(Contains(out, "pass --overwrite")) << out;

  // overwrite: the dataset's names are replaced, the other object stays.
  PushOptions o;
  o.overwrite = true;
  ASSERT_OK(PushDataset(ds, "s3://bkt/web/", o));
  ASSERT_OK(c->Get("s3://bkt/web/important.txt", &got));
  EXPECT_EQ(got, "keep me");
  LoaderOptions lo;
  lo.cache = dir_ + "/lcache";
  EXPECT_TRUE(LoadAll("s3://bkt/web/", lo) == LoadAll(ds));
  // A re-push of the same dataset needs no flag: it is already there.
  PushResult r;
  ASSERT_OK(PushDataset(ds, "s3://bkt/web/", PushOptions(), &r));
  EXPECT_TRUE(r.already_present);
}

}  // namespace
}  // namespace dspipe::testing
