// SPDX-License-Identifier: Apache-2.0
// S3 requests and s3:// downloads against a real SeaweedFS on 127.0.0.1 (s3_server.h), with
// tests/fetch/server.py as a proxy in front of it for the faults SeaweedFS does not make (a cut
// connection, 503 SlowDown with Retry-After, 403 ExpiredToken, a pause to change an object
// mid-download). Every wait is on a real condition: a line from the proxy, weed's answer.
#include "fetch/s3_server.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <map>
#include <random>

#include "dspipe/fetch.h"
#include "dspipe/push.h"
#include "fetch/http_server.h"
#include "fetch/s3.h"
#include "fetch/test_files.h"

namespace dspipe::testing {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

std::string RandomBytes(size_t n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::string s(n, '\0');
  for (char& c : s) c = static_cast<char>(rng());
  return s;
}

class S3ServerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    DSPIPE_REQUIRE_WEED();
    weed_ = std::make_unique<SeaweedServer>();
    ASSERT_EQ(weed_->Raw("PUT", "/bkt"), 200);
    char tmpl[] = "/tmp/dspipe-s3srv-XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
  }
  void TearDown() override {
    env_.reset();
    proxy_.reset();
    weed_.reset();
    std::error_code ec;
    if (!dir_.empty()) fs::remove_all(dir_, ec);
  }
  // The process's AWS_* variables aimed at weed, or at the proxy in front of it.
  void Direct() { env_ = std::make_unique<S3Env>(weed_->Endpoint()); }
  void ThroughProxy() {
    proxy_ = std::make_unique<HttpServer>("--proxy", std::to_string(weed_->port()));
    env_ = std::make_unique<S3Env>("http://127.0.0.1:" + std::to_string(proxy_->port()));
  }
  // A client straight to weed (for setting up objects behind the proxy's back).
  fetch::s3::Client DirectClient() const {
    fetch::s3::Config c;
    c.access_key = kAccessKey;
    c.secret_key = kSecretKey;
    c.region = "us-east-1";
    c.endpoint = weed_->Endpoint();
    c.credentials_source = "the test";
    return fetch::s3::Client(c, FetchOptions());
  }
  std::vector<json> Reqs(const std::string& method, const std::string& path) {
    std::vector<json> v;
    for (const json& r : proxy_->Requests()) {
      if (r["method"] == method && r["path"] == path) v.push_back(r);
    }
    return v;
  }

  std::unique_ptr<SeaweedServer> weed_;
  std::unique_ptr<HttpServer> proxy_;
  std::unique_ptr<S3Env> env_;
  std::string dir_;
};

TEST_F(S3ServerTest, HeadGetRangeListPutAndDeleteAgainstSeaweedFs) {
  ThroughProxy();
  std::unique_ptr<fetch::s3::Client> c;
  ASSERT_OK(fetch::s3::Client::Make(FetchOptions(), &c));
  const std::string big = RandomBytes(300000, 1);
  ASSERT_OK(c->Put("s3://bkt/ds/big.bin", big));
  fetch::s3::ObjectInfo info;
  ASSERT_OK(c->Head("s3://bkt/ds/big.bin", &info));
  EXPECT_EQ(info.size, big.size());
  EXPECT_EQ(info.etag, "\"" + fetch::s3::Md5Hex(big) + "\"");
  std::string got;
  ASSERT_OK(c->Get("s3://bkt/ds/big.bin", &got));
  EXPECT_TRUE(got == big);
  ASSERT_OK(c->GetRange("s3://bkt/ds/big.bin", 1000, 5000, info.etag, &got));
  EXPECT_TRUE(got == big.substr(1000, 5000));
  ASSERT_OK(c->GetRange("s3://bkt/ds/big.bin", big.size() - 7, 7, "", &got));
  EXPECT_TRUE(got == big.substr(big.size() - 7));
  // The ranged GET asked for exactly those bytes, with If-Match.
  std::vector<json> gets = Reqs("GET", "/bkt/ds/big.bin");
  ASSERT_EQ(gets.size(), 3u);
  EXPECT_EQ(gets[1]["range"], "bytes=1000-5999");
  EXPECT_EQ(gets[1]["if_match"], info.etag);
  EXPECT_TRUE(gets[2]["if_match"].is_null());

  // Keys that need encoding round-trip; listing pages through continuation tokens.
  const std::vector<std::string> keys = {"ds/a b+c.txt", "ds/big.bin", "ds/d/e", "ds/f~g", "ds/z"};
  for (const std::string& k : keys) {
    if (k != "ds/big.bin") {
      ASSERT_OK(c->Put("s3://bkt/" + k, "x" + k));
    }
  }
  ASSERT_OK(c->Put("s3://bkt/other", "not listed"));
  ASSERT_OK(c->Get("s3://bkt/ds/a b+c.txt", &got));
  EXPECT_EQ(got, "xds/a b+c.txt");
  proxy_->Requests();  // drop what came before
  std::vector<fetch::s3::ObjectInfo> listed;
  ASSERT_OK(c->List("s3://bkt/ds/", &listed, 2));
  std::vector<std::string> names;
  for (const fetch::s3::ObjectInfo& o : listed) names.push_back(o.key);
  EXPECT_EQ(names, keys);
  EXPECT_EQ(listed[1].size, big.size());
  EXPECT_EQ(listed[1].etag, info.etag);
  std::vector<json> lists = Reqs("GET", "/bkt");
  ASSERT_EQ(lists.size(), 3u);  // 5 keys, 2 a page
  EXPECT_EQ(lists[0]["query"], "list-type=2&max-keys=2&prefix=ds%2F");
  EXPECT_NE(lists[1]["query"].get<std::string>().find("continuation-token="), std::string::npos);

  // Absent things: NotFound naming them.
  Status s = c->Head("s3://bkt/ds/nope", &info);
  EXPECT_EQ(s.code(), Status::Code::kNotFound) << s.ToString();
  EXPECT_NE(s.message().find("s3://bkt/ds/nope"), std::string::npos);
  s = c->Get("s3://nobucket/x", &got);
  EXPECT_EQ(s.code(), Status::Code::kNotFound) << s.ToString();
  EXPECT_NE(s.message().find("NoSuchBucket"), std::string::npos) << s.ToString();
  ASSERT_OK(c->Delete("s3://bkt/ds/z"));
  EXPECT_EQ(c->Head("s3://bkt/ds/z", &info).code(), Status::Code::kNotFound);
  EXPECT_TRUE(c->Delete("s3://bkt/ds/z").ok());  // already gone is fine
}

// Issue 39 item 9: a key is sent as given. '#', '?', '%' and spaces are legal key characters
// (the '#' and '?' were refused): each object lands at exactly its key. "." and ".." segments are
// not removed (libcurl removed them, then signed and wrote another key: `push
// s3://bkt/k/x/../victim/` wrote to k/victim/): the request carries them, and the object is at
// exactly that key or (SeaweedFS: 400 InvalidRequest) refused; never at another key.
TEST_F(S3ServerTest, KeysWithDotSegmentsHashAndQuestionMarkAreExactlyThoseKeys) {
  ThroughProxy();
  std::unique_ptr<fetch::s3::Client> c;
  ASSERT_OK(fetch::s3::Client::Make(FetchOptions(), &c));
  const std::vector<std::string> keys = {"k/h#sh", "k/pct%41 sp", "k/q?x=1&y"};  // S3's order
  for (const std::string& k : keys) ASSERT_OK(c->Put("s3://bkt/" + k, "body of " + k));
  const std::vector<std::string> dotted = {"k/./dot", "k/x/../victim"};
  std::vector<std::string> stored = keys;
  for (const std::string& k : dotted) {
    const Status ps = c->Put("s3://bkt/" + k, "body of " + k);
    if (ps.ok()) {
      stored.push_back(k);
    } else {  // refused by the server, naming the key as given
      EXPECT_NE(ps.message().find("s3://bkt/" + k + ": HTTP 400"), std::string::npos)
          << ps.ToString();
    }
  }
  std::sort(stored.begin(), stored.end());
  std::vector<fetch::s3::ObjectInfo> listed;
  ASSERT_OK(c->List("s3://bkt/k/", &listed));
  std::vector<std::string> names;
  for (const fetch::s3::ObjectInfo& o : listed) names.push_back(o.key);
  EXPECT_EQ(names, stored);
  fetch::s3::ObjectInfo info;
  EXPECT_EQ(c->Head("s3://bkt/k/victim", &info).code(), Status::Code::kNotFound);
  EXPECT_EQ(c->Head("s3://bkt/k/dot", &info).code(), Status::Code::kNotFound);
  for (const std::string& k : stored) {
    std::string got;
    ASSERT_OK(c->Get("s3://bkt/" + k, &got));
    EXPECT_EQ(got, "body of " + k);
    const std::string dest = dir_ + "/out/" + std::to_string(names.size()) + k.substr(2, 1);
    ASSERT_OK(Fetch("s3://bkt/" + k, dest, FetchOptions()));
    EXPECT_EQ(ReadAll(dest), "body of " + k);
  }
  // The request paths: dot segments kept, '#', '?', '%' and ' ' percent-encoded.
  std::vector<std::string> paths;
  for (const json& r : proxy_->Requests()) {
    if (r["method"] == "PUT") paths.push_back(r["path"]);
  }
  EXPECT_EQ(paths, (std::vector<std::string>{"/bkt/k/h%23sh", "/bkt/k/pct%2541%20sp",
                                             "/bkt/k/q%3Fx%3D1%26y", "/bkt/k/./dot",
                                             "/bkt/k/x/../victim"}));

  // A dataset pushed to a prefix with a ".." segment: at exactly that prefix, or refused;
  // nothing under p/victim/.
  fs::create_directories(dir_ + "/ds");
  WriteAll(dir_ + "/ds/manifest.json",
           R"({"format":"dspipe","files":[{"path":"a.bin","size":1,"sha256":")"
           R"(ca978112ca1bbdcafac231b39a23dc4da786eff8147c4e72b9807785afee48bb"}]})");
  WriteAll(dir_ + "/ds/a.bin", "a");
  const Status push = PushDataset(dir_ + "/ds", "s3://bkt/p/x/../victim/", PushOptions());
  ASSERT_OK(c->List("s3://bkt/p/", &listed));
  names.clear();
  for (const fetch::s3::ObjectInfo& o : listed) names.push_back(o.key);
  if (push.ok()) {
    EXPECT_EQ(names,
              (std::vector<std::string>{"p/x/../victim/a.bin", "p/x/../victim/manifest.json"}));
  } else {
    EXPECT_NE(push.message().find("s3://bkt/p/x/../victim/manifest.json: HTTP 400"),
              std::string::npos)
        << push.ToString();
    EXPECT_TRUE(names.empty()) << names.front();
  }
}

TEST_F(S3ServerTest, VirtualHostStyleReachesTheBucketByItsHostName) {
  // libcurl resolves *.localhost to 127.0.0.1; weed runs with -s3.domainName=localhost.
  env_ = std::make_unique<S3Env>("http://localhost:" + std::to_string(weed_->port()));
  env_->Set("DSPIPE_S3_ADDRESSING_STYLE", "virtual");
  std::unique_ptr<fetch::s3::Client> c;
  ASSERT_OK(fetch::s3::Client::Make(FetchOptions(), &c));
  EXPECT_EQ(fetch::s3::HttpUrl(c->config(), {"bkt", "v/obj"}),
            "http://bkt.localhost:" + std::to_string(weed_->port()) + "/v/obj");
  ASSERT_OK(c->Put("s3://bkt/v/obj", "virtual"));
  // Seen path-style straight at weed: the same object.
  std::string got;
  ASSERT_OK(DirectClient().Get("s3://bkt/v/obj", &got));
  EXPECT_EQ(got, "virtual");
  const std::string dest = dir_ + "/obj";
  FetchResult r;
  ASSERT_OK(Fetch("s3://bkt/v/obj", dest, FetchOptions(), &r));
  EXPECT_EQ(ReadAll(dest), "virtual");
}

TEST_F(S3ServerTest, AWrongSecretOrAReadOnlyKeyIsAClearErrorNamingTheObjectNeverTheSecret) {
  ASSERT_OK(DirectClient().Put("s3://bkt/ds/data.mdb", RandomBytes(1000, 2)));
  env_ = std::make_unique<S3Env>(weed_->Endpoint(), kAccessKey, "wrong-SECRET-9f");
  FetchOptions o;
  o.retries = 3;
  FetchResult r;
  Status s = Fetch("s3://bkt/ds/data.mdb", dir_ + "/data.mdb", o, &r);
  EXPECT_EQ(s.code(), Status::Code::kIOError) << s.ToString();
  EXPECT_EQ(r.attempts, 1);  // not transient: never retried
  EXPECT_NE(s.message().find("s3://bkt/ds/data.mdb: HTTP 403 SignatureDoesNotMatch"),
            std::string::npos)
      << s.ToString();
  EXPECT_NE(s.message().find("the secret key does not match access key " + std::string(kAccessKey)),
            std::string::npos)
      << s.ToString();
  EXPECT_EQ(s.ToString().find("wrong-SECRET-9f"), std::string::npos);
  EXPECT_FALSE(fs::exists(dir_ + "/data.mdb"));
  // The reader identity may read but not write.
  env_.reset();
  env_ = std::make_unique<S3Env>(weed_->Endpoint(), kOtherKey, kOtherSecret);
  ASSERT_OK(Fetch("s3://bkt/ds/data.mdb", dir_ + "/data.mdb", FetchOptions()));
  std::unique_ptr<fetch::s3::Client> c;
  ASSERT_OK(fetch::s3::Client::Make(FetchOptions(), &c));
  s = c->Put("s3://bkt/ds/new", "x");
  EXPECT_NE(s.message().find("s3://bkt/ds/new: HTTP 403 AccessDenied"), std::string::npos)
      << s.ToString();
  EXPECT_EQ(s.ToString().find(kOtherSecret), std::string::npos);
}

TEST_F(S3ServerTest, ACutConnectionResumesWithARangedGetIfMatchTheETag) {
  const std::string data = RandomBytes(3 << 20, 3);
  ASSERT_OK(DirectClient().Put("s3://bkt/ds/data.mdb", data));
  ThroughProxy();
  proxy_->Set("/bkt/ds/data.mdb", "cut=1000000");
  FetchOptions o;
  o.backoff_base_s = 0.01;
  o.sha256 = "";
  FetchResult r;
  const std::string dest = dir_ + "/data.mdb";
  Status s = Fetch("s3://bkt/ds/data.mdb", dest, o, &r);
  ASSERT_TRUE(s.ok()) << s.ToString();
  EXPECT_TRUE(ReadAll(dest) == data);
  EXPECT_EQ(r.attempts, 2);
  const std::vector<json> gets = Reqs("GET", "/bkt/ds/data.mdb");
  ASSERT_EQ(gets.size(), 2u);
  EXPECT_TRUE(gets[0]["range"].is_null());
  EXPECT_EQ(gets[1]["range"], "bytes=1000000-");
  EXPECT_EQ(gets[1]["if_match"], "\"" + fetch::s3::Md5Hex(data) + "\"");
}

TEST_F(S3ServerTest, SlowDownIsRetriedAfterRetryAfterAndExpiredTokenIsOneAttemptNamingTheObject) {
  const std::string data = RandomBytes(100000, 4);
  ASSERT_OK(DirectClient().Put("s3://bkt/ds/a", data));
  ASSERT_OK(DirectClient().Put("s3://bkt/ds/b", data));
  ASSERT_OK(DirectClient().Put("s3://bkt/ds/c", data));
  ThroughProxy();
  proxy_->Set("/bkt/ds/a", "fail=2&code=503&retry_after=1");
  FetchResult r;
  Status s = Fetch("s3://bkt/ds/a", dir_ + "/a", FetchOptions(), &r);
  ASSERT_TRUE(s.ok()) << s.ToString();
  EXPECT_TRUE(ReadAll(dir_ + "/a") == data);
  EXPECT_EQ(r.attempts, 3);
  EXPECT_EQ(r.retry_waits_s, (std::vector<double>{1.0, 1.0}));  // Retry-After, not the jitter
  // The small requests retry the same way.
  proxy_->Set("/bkt/ds/b", "method=HEAD&fail=1&code=503&retry_after=0");
  std::unique_ptr<fetch::s3::Client> c;
  ASSERT_OK(fetch::s3::Client::Make(FetchOptions(), &c));
  fetch::s3::ObjectInfo info;
  ASSERT_OK(c->Head("s3://bkt/ds/b", &info));
  EXPECT_EQ(info.size, data.size());
  EXPECT_EQ(Reqs("HEAD", "/bkt/ds/b").size(), 2u);
  // A SlowDown that never ends: the budget runs out, naming the object and the code (a GET:
  // a HEAD answer has no body to carry it).
  proxy_->Set("/bkt/ds/b", "fail=100&code=503&retry_after=0");
  FetchOptions two;
  two.retries = 2;
  ASSERT_OK(fetch::s3::Client::Make(two, &c));
  std::string got;
  s = c->Get("s3://bkt/ds/b", &got);
  EXPECT_NE(s.message().find("GET s3://bkt/ds/b: gave up after 3 attempts"), std::string::npos)
      << s.ToString();
  EXPECT_NE(s.message().find("HTTP 503 SlowDown"), std::string::npos) << s.ToString();

  // Temporary credentials (weed has no STS: the proxy answers for it).
  env_->Set("AWS_SESSION_TOKEN", "session-TOKEN-41");
  proxy_->Set("/bkt/ds/c", "fail=1&code=403");  // ExpiredToken
  proxy_->Requests();
  r = FetchResult();
  s = Fetch("s3://bkt/ds/c", dir_ + "/c", FetchOptions(), &r);
  EXPECT_EQ(s.code(), Status::Code::kIOError);
  EXPECT_EQ(r.attempts, 1);
  EXPECT_NE(s.message().find("s3://bkt/ds/c: HTTP 403 ExpiredToken"), std::string::npos)
      << s.ToString();
  EXPECT_NE(s.message().find("the credentials have expired"), std::string::npos);
  EXPECT_EQ(s.ToString().find("session-TOKEN-41"), std::string::npos);
  EXPECT_EQ(s.ToString().find(kSecretKey), std::string::npos);
  EXPECT_FALSE(fs::exists(dir_ + "/c"));
  const std::vector<json> gets = Reqs("GET", "/bkt/ds/c");
  ASSERT_EQ(gets.size(), 1u);
  EXPECT_EQ(gets[0]["token"], true);  // the token went as x-amz-security-token
}

TEST_F(S3ServerTest, AnObjectChangedMidDownloadIsFetchedAgainWholeNeverMixed) {
  const std::string v1 = RandomBytes(2 << 20, 5), v2 = RandomBytes(2 << 20, 6);
  ASSERT_OK(DirectClient().Put("s3://bkt/ds/data.mdb", v1));
  ThroughProxy();
  proxy_->Set("/bkt/ds/data.mdb", "pause=1500000");
  const std::string dest = dir_ + "/data.mdb";
  FetchResult r;
  Status s;
  std::thread t([&] {
    FetchOptions o;
    o.backoff_base_s = 0.01;
    s = Fetch("s3://bkt/ds/data.mdb", dest, o, &r);
  });
  proxy_->WaitPaused();
  // The object changes (same size) while 1.5 MB of v1 are on their way, then the connection is
  // cut: the resume must not append v2's tail to v1's head.
  ASSERT_OK(DirectClient().Put("s3://bkt/ds/data.mdb", v2));
  proxy_->Command("cut");
  t.join();
  ASSERT_TRUE(s.ok()) << s.ToString();
  EXPECT_TRUE(ReadAll(dest) == v2);
  const std::vector<json> gets = Reqs("GET", "/bkt/ds/data.mdb");
  ASSERT_EQ(gets.size(), 3u);
  EXPECT_EQ(gets[1]["if_match"], "\"" + fetch::s3::Md5Hex(v1) + "\"");  // answered 412
  EXPECT_TRUE(gets[2]["range"].is_null());                       // then the whole of v2
  // A ranged read of the old version is refused, not served from the new one.
  std::unique_ptr<fetch::s3::Client> c;
  ASSERT_OK(fetch::s3::Client::Make(FetchOptions(), &c));
  std::string got;
  s = c->GetRange("s3://bkt/ds/data.mdb", 0, 100, "\"" + fetch::s3::Md5Hex(v1) + "\"", &got);
  EXPECT_EQ(s.code(), Status::Code::kCorruption) << s.ToString();
  EXPECT_NE(s.message().find("changed on the server"), std::string::npos) << s.ToString();
  EXPECT_TRUE(got.empty());
}

}  // namespace
}  // namespace dspipe::testing
