// SPDX-License-Identifier: Apache-2.0
// Fetch and the S3 client against hostile servers on 127.0.0.1 (tests/fetch/server.py, started
// and stopped by each test): an endpoint that redirects every request to a second server, which
// records every header it gets (issue 39 item 1); an endpoint with user:password@ and a session
// token whose failures are grepped for the secrets (item 12a); a fake S3 whose listings never end
// (item 10). Every wait is on a real condition: a line from a server, a call's return.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <functional>
#include <string>
#include <vector>

#include "dspipe/fetch.h"
#include "dspipe/log.h"
#include "dspipe/push.h"
#include "fetch/http_server.h"
#include "fetch/s3.h"
#include "fetch/s3_server.h"
#include "fetch/test_files.h"

namespace dspipe::testing {
namespace {

namespace fs = std::filesystem;

constexpr const char* kToken = "SESSION-TOKEN-c0ffee-SECRET";
constexpr const char* kPassword = "ENDPOINT-PASSWORD-SECRET";

class HostileTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/dspipe-hostile-XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
    fs::create_directories(dir_ + "/srv");
    opts_.retries = 1;
    opts_.backoff_base_s = 0.01;
    opts_.backoff_max_s = 0.02;
  }
  void TearDown() override {
    std::error_code ec;
    fs::remove_all(dir_, ec);
  }

  // Every request `server` received, with the token anywhere in it (a header, the query).
  static std::vector<std::string> Leaks(HttpServer* server, const std::string& secret) {
    std::vector<std::string> leaks;
    for (const nlohmann::json& r : server->Requests()) {
      if (r.dump().find(secret) != std::string::npos) leaks.push_back(r.dump());
    }
    return leaks;
  }

  std::string dir_;
  FetchOptions opts_;
};

// ---- item 1: the session token never follows a redirect

class RedirectTest : public HostileTest {
 protected:
  void SetUp() override {
    HostileTest::SetUp();
    target_ = std::make_unique<HttpServer>(dir_ + "/srv");
    redirect_ = std::make_unique<HttpServer>("--redirect", std::to_string(target_->port()));
    env_ = std::make_unique<S3Env>("http://127.0.0.1:" + std::to_string(redirect_->port()));
    env_->Set("AWS_SESSION_TOKEN", kToken);
  }
  void TearDown() override {
    env_.reset();
    redirect_.reset();
    target_.reset();
    HostileTest::TearDown();
  }
  // The error of one signed operation: it names the redirect's target and the fix; the endpoint
  // got the request (with its token: it is the endpoint), the second server nothing at all.
  void ExpectRefused(const Status& s) {
    ASSERT_FALSE(s.ok());
    const std::string target = "http://127.0.0.1:" + std::to_string(target_->port());
    EXPECT_NE(s.message().find("redirected to " + target), std::string::npos) << s.ToString();
    EXPECT_NE(s.message().find("AWS_ENDPOINT_URL_S3"), std::string::npos) << s.ToString();
    EXPECT_EQ(s.message().find(kToken), std::string::npos) << s.ToString();
    EXPECT_FALSE(redirect_->Requests().empty());
    const std::vector<nlohmann::json> got = target_->Requests();
    EXPECT_TRUE(got.empty()) << "the second server got " << got.size() << " request(s), first "
                             << got.front().dump();
  }

  std::unique_ptr<HttpServer> target_, redirect_;
  std::unique_ptr<S3Env> env_;
};

TEST_F(RedirectTest, FetchOfAnS3UrlFollowsNoRedirect) {
  ExpectRefused(Fetch("s3://bkt/obj.bin", dir_ + "/out/obj.bin", opts_));
  EXPECT_FALSE(fs::exists(dir_ + "/out/obj.bin"));
}

TEST_F(RedirectTest, DatasetFetchOfAnS3UrlFollowsNoRedirect) {
  ExpectRefused(FetchDataset("s3://bkt/ds/", dir_ + "/ds", opts_));
}

TEST_F(RedirectTest, EveryS3ClientRequestFollowsNoRedirect) {
  std::unique_ptr<fetch::s3::Client> c;
  ASSERT_TRUE(fetch::s3::Client::Make(opts_, &c).ok());
  fetch::s3::ObjectInfo info;
  ExpectRefused(c->Head("s3://bkt/k", &info));
  std::string body;
  ExpectRefused(c->Get("s3://bkt/k", &body));
  ExpectRefused(c->GetRange("s3://bkt/k", 0, 10, "", &body));
  std::vector<fetch::s3::ObjectInfo> list;
  ExpectRefused(c->List("s3://bkt/p/", &list));
  ExpectRefused(c->Put("s3://bkt/k", "bytes"));
  ExpectRefused(c->Delete("s3://bkt/k"));
  std::vector<std::string> uploads;
  ExpectRefused(c->ListUploads("s3://bkt/k", &uploads));
}

TEST_F(RedirectTest, PushFollowsNoRedirect) {
  fs::create_directories(dir_ + "/ds");
  WriteAll(dir_ + "/ds/manifest.json",
           R"({"format":"dspipe","files":[{"path":"a.bin","size":1,"sha256":")"
           R"(ca978112ca1bbdcafac231b39a23dc4da786eff8147c4e72b9807785afee48bb"}]})");
  WriteAll(dir_ + "/ds/a.bin", "a");
  PushOptions po;
  po.fetch = opts_;
  ExpectRefused(PushDataset(dir_ + "/ds", "s3://bkt/ds/", po));
}

// An unsigned download still follows a redirect (to the second server, which serves the file).
TEST_F(RedirectTest, PlainHttpStillFollowsRedirects) {
  WriteAll(dir_ + "/srv/f.bin", "plain bytes");
  const std::string url = "http://127.0.0.1:" + std::to_string(redirect_->port()) + "/files/f.bin";
  Status s = Fetch(url, dir_ + "/out/f.bin", opts_);
  ASSERT_TRUE(s.ok()) << s.ToString();
  EXPECT_EQ(ReadAll(dir_ + "/out/f.bin"), "plain bytes");
}

// ---- item 12a: the endpoint's userinfo, the session token and a signed query in no message

// Sends fd 2 (the log's stderr) to a file while it lives; Text() is what was written.
class CaptureStderr {
 public:
  explicit CaptureStderr(const std::string& path) : path_(path) {
    std::fflush(stderr);
    saved_ = ::dup(2);
    const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    ::dup2(fd, 2);
    ::close(fd);
  }
  ~CaptureStderr() { Restore(); }
  std::string Text() {
    Restore();
    return ReadAll(path_);
  }

 private:
  void Restore() {
    if (saved_ < 0) return;
    std::fflush(stderr);
    ::dup2(saved_, 2);
    ::close(saved_);
    saved_ = -1;
  }
  std::string path_;
  int saved_ = -1;
};

TEST_F(HostileTest, NoSecretInAnyMessageOrLogLine) {
  // A fake S3 (the proxy answers from its rules, never reaching an upstream) at an endpoint
  // with user:password@, with a session token; each object fails in its own way.
  HttpServer s3("--proxy", "1");
  const std::string port = std::to_string(s3.port());
  S3Env env("http://dspipe:" + std::string(kPassword) + "@127.0.0.1:" + port);
  env.Set("AWS_SESSION_TOKEN", kToken);
  const std::vector<std::pair<std::string, std::string>> faults = {
      {"nobucket", "code=404&s3code=NoSuchBucket"},
      {"moved", "code=301&s3code=PermanentRedirect"},
      {"denied", "code=403&s3code=AccessDenied"},
      {"expired", "code=400&s3code=ExpiredToken"},
      {"badsig", "code=403&s3code=SignatureDoesNotMatch"},
      {"region", "code=400&s3code=AuthorizationHeaderMalformed"},
      {"slow", "code=503"}};
  for (const auto& [name, q] : faults) {
    s3.Set("/bkt/" + name, "fail=1000&" + q + "&method=*");
  }
  s3.Set("/bkt", "fail=1000&code=404&s3code=NoSuchBucket");
  s3.Set("/bkt/ds/manifest.json", "fail=1000&code=404&s3code=NoSuchBucket");
  WriteAll(dir_ + "/srv/f.bin", "bytes");
  HttpServer files(dir_ + "/srv");
  files.Auth("/files/", "X-Amz-Signature", "right");

  std::vector<std::string> messages;
  auto note = [&messages](const Status& s) {
    EXPECT_FALSE(s.ok());
    messages.push_back(s.ToString());
  };
  const LogLevel level = GetLogLevel();
  SetLogLevel(LogLevel::kDebug);
  CaptureStderr err(dir_ + "/stderr.txt");
  std::unique_ptr<fetch::s3::Client> c;
  ASSERT_TRUE(fetch::s3::Client::Make(opts_, &c).ok());
  for (const auto& [name, q] : faults) {
    const std::string url = "s3://bkt/" + name;
    note(Fetch(url, dir_ + "/out/" + name, opts_));
    fetch::s3::ObjectInfo info;
    note(c->Head(url, &info));
    std::string body;
    note(c->Get(url, &body));
    note(c->GetRange(url, 0, 4, "\"e\"", &body));
    note(c->Put(url, "bytes"));
  }
  std::vector<fetch::s3::ObjectInfo> list;
  note(c->List("s3://bkt/p/", &list));
  note(FetchDataset("s3://bkt/ds/", dir_ + "/ds", opts_));
  // An endpoint nobody listens on, and one that is not http(s).
  {
    S3Env down("http://dspipe:" + std::string(kPassword) + "@127.0.0.1:1");
    down.Set("AWS_SESSION_TOKEN", kToken);
    note(Fetch("s3://bkt/x", dir_ + "/out/x", opts_));
    std::unique_ptr<fetch::s3::Client> d;
    ASSERT_TRUE(fetch::s3::Client::Make(opts_, &d).ok());
    note(d->Delete("s3://bkt/x"));
  }
  {
    S3Env bad("ftp://dspipe:" + std::string(kPassword) + "@127.0.0.1:1");
    std::unique_ptr<fetch::s3::Client> d;
    note(fetch::s3::Client::Make(opts_, &d));
  }
  // A pre-signed https-style URL with userinfo, refused and missing.
  const std::string signed_query = "X-Amz-Credential=AKID%2Fscope&X-Amz-Signature=wrong" +
                                   std::string("&X-Amz-Security-Token=") + kToken;
  const std::string base = "http://dspipe:" + std::string(kPassword) +
                           "@127.0.0.1:" + std::to_string(files.port()) + "/files/";
  note(Fetch(base + "f.bin?" + signed_query, dir_ + "/out/f.bin", opts_));
  note(Fetch(base + "none.bin?" + signed_query, dir_ + "/out/none.bin", opts_));
  note(FetchDataset(base + "ds/?" + signed_query, dir_ + "/ds2", opts_));
  const std::string log = err.Text();
  SetLogLevel(level);

  ASSERT_EQ(messages.size(), faults.size() * 5 + 8);
  for (const std::string& m : messages) {
    EXPECT_EQ(m.find(kPassword), std::string::npos) << m;
    EXPECT_EQ(m.find(kToken), std::string::npos) << m;
    EXPECT_EQ(m.find("X-Amz-Signature=wrong"), std::string::npos) << m;
    EXPECT_EQ(m.find("AKID%2Fscope"), std::string::npos) << m;
  }
  // The endpoint is still named, without its secret.
  bool named = false;
  for (const std::string& m : messages) named |= m.find("127.0.0.1:" + port) != std::string::npos;
  EXPECT_TRUE(named);
  EXPECT_EQ(log.find(kPassword), std::string::npos) << log;
  EXPECT_EQ(log.find(kToken), std::string::npos) << log;
  EXPECT_EQ(log.find("X-Amz-Signature=wrong"), std::string::npos) << log;
}

// ---- item 10: every listing loop stops when the server repeats its marker

// A fake S3 whose pages name m0, m1, m0, ... (parts 1, 2, 1, ...): each listing stops with an
// error naming the repeated marker. The cancelled callback only ends a loop that would not stop
// (the old code's), so that the test fails instead of hanging.
TEST_F(HostileTest, ListingsStopWhenTheServerRepeatsItsMarker) {
  HttpServer s3("--s3loop");
  S3Env env("http://127.0.0.1:" + std::to_string(s3.port()));
  int polls = 0;
  opts_.cancelled = [&polls] { return ++polls > 20000; };
  std::unique_ptr<fetch::s3::Client> c;
  ASSERT_TRUE(fetch::s3::Client::Make(opts_, &c).ok());
  auto expect = [&](const Status& s, const std::string& marker) {
    ASSERT_FALSE(s.ok());
    EXPECT_EQ(s.code(), Status::Code::kIOError) << s.ToString();
    EXPECT_NE(s.message().find("marker '" + marker + "' again"), std::string::npos) << s.ToString();
    EXPECT_LE(s3.Requests().size(), 3u);  // pages m0, m1, then m0 again: stopped there
  };
  std::vector<fetch::s3::ObjectInfo> objects;
  expect(c->List("s3://bkt/p/", &objects), "m0");
  std::vector<std::string> uploads;
  expect(c->ListUploads("s3://bkt/k", &uploads), "m0' / 'm0");
  std::vector<fetch::s3::PartInfo> parts;
  expect(c->ListParts("s3://bkt/k", "u1", &parts), "1");
}

}  // namespace
}  // namespace dspipe::testing
