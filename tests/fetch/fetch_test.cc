// SPDX-License-Identifier: Apache-2.0
// dspipe::Fetch against a real HTTP server on 127.0.0.1 that misbehaves on command
// (tests/fetch/server.py), local copies through a FaultEnv, and the dsconvert fetch CLI.
// Every wait is on a real condition: a line from the server, a byte on a pipe, a process exit.
#include "dspipe/fetch.h"

#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>

#include "core/fault_env.h"
#include "core/files.h"
#include "fetch/http_server.h"
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

std::string Sha(const std::string& path) {
  std::string hex;
  EXPECT_TRUE(Sha256File(path, &hex).ok());
  return hex;
}

class FetchTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/dspipe-fetch-XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
    fs::create_directories(dir_ + "/srv");
    content_ = RandomBytes(600000, 7);
    WriteAll(dir_ + "/srv/f.bin", content_);
    big_ = RandomBytes(3 << 20, 11);  // more than the 1 MiB the fetcher buffers per write
    WriteAll(dir_ + "/srv/big.bin", big_);
    sha_ = Sha(dir_ + "/srv/f.bin");
    server_ = std::make_unique<HttpServer>(dir_ + "/srv");
    opts_.backoff_base_s = 0.01;  // keep retries quick; the policy itself is the same
    opts_.backoff_max_s = 0.05;
  }
  void TearDown() override {
    server_.reset();
    std::error_code ec;
    fs::remove_all(dir_, ec);
  }
  std::string Dest() const { return dir_ + "/out/f.bin"; }
  // DEST holds exactly the served file and nothing is left half-done beside it.
  void ExpectComplete(const std::string& want) {
    EXPECT_TRUE(ReadAll(Dest()) == want) << "DEST differs from the served file";
    EXPECT_FALSE(fs::exists(Dest() + ".part"));
    EXPECT_FALSE(fs::exists(Dest() + ".part.json"));
  }

  std::string dir_, content_, sha_, big_;
  std::unique_ptr<HttpServer> server_;
  FetchOptions opts_;
};

// Issue 39 item 12d: without --sha256 an existing DEST is never taken as "already present":
// a different file (here shorter) at DEST is fetched again and replaced, in one request.
TEST_F(FetchTest, WithoutSha256AnExistingDestIsFetchedAgainNotTakenAsPresent) {
  fs::create_directories(dir_ + "/out");
  WriteAll(Dest(), "an older, different file");
  FetchResult r;
  Status s = Fetch(server_->Url("f.bin"), Dest(), opts_, &r);
  ASSERT_TRUE(s.ok()) << s.ToString();
  EXPECT_FALSE(r.already_present);
  ExpectComplete(content_);
  EXPECT_EQ(server_->Requests().size(), 1u);
  // The same size, other bytes: the size alone proves nothing either.
  std::string other = content_;
  other[12345] ^= 1;
  WriteAll(Dest(), other);
  opts_.size = static_cast<int64_t>(content_.size());
  ASSERT_TRUE(Fetch(server_->Url("f.bin"), Dest(), opts_, &r).ok());
  EXPECT_FALSE(r.already_present);
  ExpectComplete(content_);
  EXPECT_EQ(server_->Requests().size(), 1u);
}

TEST_F(FetchTest, DownloadsVerifiesAndRenames) {
  opts_.sha256 = sha_;
  FetchResult r;
  Status s = Fetch(server_->Url("f.bin"), Dest(), opts_, &r);
  ASSERT_TRUE(s.ok()) << s.ToString();
  ExpectComplete(content_);
  EXPECT_EQ(r.bytes, content_.size());
  EXPECT_EQ(r.sha256, sha_);
  EXPECT_EQ(r.attempts, 1);
  auto reqs = server_->Requests();
  ASSERT_EQ(reqs.size(), 1u);
  EXPECT_TRUE(reqs[0]["range"].is_null());
  EXPECT_TRUE(reqs[0]["accept_encoding"].is_null()) << "no content-encoding is ever requested";
  // A second call finds DEST in place (and verifies it) without a request.
  ASSERT_TRUE(Fetch(server_->Url("f.bin"), Dest(), opts_, &r).ok());
  EXPECT_TRUE(r.already_present);
  EXPECT_TRUE(server_->Requests().empty());
  // An existing DEST that does not match is never replaced silently.
  opts_.sha256 = std::string(64, '0');
  s = Fetch(server_->Url("f.bin"), Dest(), opts_, &r);
  EXPECT_EQ(s.code(), Status::Code::kAlreadyExists) << s.ToString();
  EXPECT_TRUE(Contains(s.message(), Dest())) << s.ToString();
  EXPECT_TRUE(ReadAll(Dest()) == content_);
}

TEST_F(FetchTest, CutConnectionResumesWithRangeAndIfRange) {
  FetchResult r;
  Status s = Fetch(server_->Url("f.bin", "cut=200000"), Dest(), opts_, &r);
  ASSERT_TRUE(s.ok()) << s.ToString();
  ExpectComplete(content_);
  EXPECT_EQ(r.attempts, 2);
  EXPECT_EQ(r.downloaded, content_.size()) << "200000 + the rest, nothing twice";
  auto reqs = server_->Requests();
  ASSERT_EQ(reqs.size(), 2u);
  EXPECT_EQ(reqs[1]["range"], "bytes=200000-");
  EXPECT_TRUE(reqs[1]["if_range"].is_string() && reqs[1]["if_range"].get<std::string>()[0] == '"')
      << "a strong ETag: " << reqs[1].dump();
}

TEST_F(FetchTest, FailedRunLeavesPartAndSidecarAndTheNextRunResumes) {
  opts_.retries = 0;
  FetchResult r;
  Status s = Fetch(server_->Url("f.bin", "cut=250000"), Dest(), opts_, &r);
  EXPECT_EQ(s.code(), Status::Code::kIOError) << s.ToString();
  EXPECT_TRUE(Contains(s.message(), "run again to resume")) << s.ToString();
  EXPECT_FALSE(fs::exists(Dest())) << "DEST never exists unverified";
  EXPECT_EQ(fs::file_size(Dest() + ".part"), 250000u);
  const json side = json::parse(ReadAll(Dest() + ".part.json"));
  EXPECT_EQ(side["url"], server_->Url("f.bin", "...")) << "the query is never on disk";
  EXPECT_EQ(side["length"], content_.size());
  EXPECT_FALSE(side["validator"].get<std::string>().empty());
  s = Fetch(server_->Url("f.bin", "cut=250000"), Dest(), opts_, &r);
  ASSERT_TRUE(s.ok()) << s.ToString();
  ExpectComplete(content_);
  EXPECT_EQ(r.resumed_from, 250000u);
  EXPECT_EQ(r.downloaded, content_.size() - 250000);
}

TEST_F(FetchTest, A200ToARangeRequestStartsOver) {
  FetchResult r;
  ASSERT_TRUE(Fetch(server_->Url("f.bin", "cut=100000&norange=1"), Dest(), opts_, &r).ok());
  ExpectComplete(content_);
  EXPECT_EQ(r.downloaded, 100000 + content_.size());
  auto reqs = server_->Requests();
  ASSERT_EQ(reqs.size(), 2u);
  EXPECT_EQ(reqs[1]["range"], "bytes=100000-");
}

TEST_F(FetchTest, A206WithTheWrongRangeStartsOver) {
  FetchResult r;
  Status s = Fetch(server_->Url("f.bin", "cut=100000&badrange=1"), Dest(), opts_, &r);
  ASSERT_TRUE(s.ok()) << s.ToString();
  ExpectComplete(content_);
  auto reqs = server_->Requests();
  ASSERT_EQ(reqs.size(), 3u) << "cut, wrong 206 (dropped), full 200";
  EXPECT_EQ(reqs[1]["range"], "bytes=100000-");
  EXPECT_TRUE(reqs[2]["range"].is_null());
}

TEST_F(FetchTest, ContentEncodingOnAResumedTransferStartsOver) {
  FetchResult r;
  Status s = Fetch(server_->Url("f.bin", "cut=100000&encoding=gzip"), Dest(), opts_, &r);
  ASSERT_TRUE(s.ok()) << s.ToString();
  ExpectComplete(content_);
  auto reqs = server_->Requests();
  ASSERT_EQ(reqs.size(), 3u);
  EXPECT_TRUE(reqs[2]["range"].is_null());
}

TEST_F(FetchTest, A416IsCompleteOnlyWhenTheLengthMatches) {
  // A .part that already holds everything (a run killed between the last byte and the rename).
  for (bool wrong : {false, true}) {
    SCOPED_TRACE(wrong ? "wrong length" : "right length");
    const std::string url = server_->Url("f.bin", wrong ? "wrong416=1" : "");
    fs::create_directories(dir_ + "/out");
    WriteAll(Dest() + ".part", content_);
    const json side = {
        {"url", url}, {"validator", "\"" + sha_.substr(0, 16) + "\""}, {"length", content_.size()}};
    WriteAll(Dest() + ".part.json", side.dump());
    FetchResult r;
    Status s = Fetch(url, Dest(), opts_, &r);
    ASSERT_TRUE(s.ok()) << s.ToString();
    ExpectComplete(content_);
    auto reqs = server_->Requests();
    ASSERT_GE(reqs.size(), 1u);
    EXPECT_EQ(reqs[0]["range"], "bytes=600000-");
    EXPECT_EQ(reqs.size(), wrong ? 2u : 1u);
    EXPECT_EQ(r.downloaded, wrong ? content_.size() : 0u);
    fs::remove(Dest());
  }
}

TEST_F(FetchTest, AnETagChangeBetweenAttemptsStartsOverWithTheNewFile) {
  opts_.retries = 0;
  FetchResult r;
  EXPECT_FALSE(Fetch(server_->Url("f.bin", "cut=300000"), Dest(), opts_, &r).ok());
  ASSERT_EQ(fs::file_size(Dest() + ".part"), 300000u);
  const std::string v2 = RandomBytes(500000, 8);
  WriteAll(dir_ + "/srv/f.bin", v2);  // the file changes on the server
  Status s = Fetch(server_->Url("f.bin", "cut=300000"), Dest(), opts_, &r);
  ASSERT_TRUE(s.ok()) << s.ToString();
  ExpectComplete(v2);
  auto reqs = server_->Requests();
  ASSERT_EQ(reqs.size(), 2u);
  EXPECT_EQ(reqs[1]["range"], "bytes=300000-") << "asked to resume, If-Range said no";
  EXPECT_EQ(r.downloaded, v2.size());
}

TEST_F(FetchTest, NoValidatorMeansNoResume) {
  opts_.retries = 0;
  FetchResult r;
  EXPECT_FALSE(Fetch(server_->Url("f.bin", "cut=300000&validator=weak"), Dest(), opts_, &r).ok());
  ASSERT_TRUE(Fetch(server_->Url("f.bin", "cut=300000&validator=weak"), Dest(), opts_, &r).ok());
  ExpectComplete(content_);
  auto reqs = server_->Requests();
  ASSERT_EQ(reqs.size(), 2u);
  EXPECT_TRUE(reqs[1]["range"].is_null()) << "a weak ETag cannot guard a byte range";
  // Last-Modified alone is a validator.
  fs::remove(Dest());
  EXPECT_FALSE(Fetch(server_->Url("f.bin", "cut=300000&validator=lm"), Dest(), opts_, &r).ok());
  ASSERT_TRUE(Fetch(server_->Url("f.bin", "cut=300000&validator=lm"), Dest(), opts_, &r).ok());
  reqs = server_->Requests();
  ASSERT_EQ(reqs.size(), 2u);
  EXPECT_EQ(reqs[1]["range"], "bytes=300000-");
  EXPECT_TRUE(Contains(reqs[1]["if_range"].get<std::string>(), "GMT"));
}

TEST_F(FetchTest, TransientErrorsAreRetriedWithRetryAfterAndErrorBodiesNeverLand) {
  FetchResult r;
  Status s = Fetch(server_->Url("f.bin", "fail=2&code=503&retry_after=1"), Dest(), opts_, &r);
  ASSERT_TRUE(s.ok()) << s.ToString();
  ExpectComplete(content_);
  EXPECT_EQ(r.attempts, 3);
  EXPECT_EQ(r.retry_waits_s, (std::vector<double>{1.0, 1.0})) << "Retry-After honoured";
  for (int code : {408, 429, 500}) {
    fs::remove(Dest());
    s = Fetch(server_->Url("f.bin", "fail=1&code=" + std::to_string(code)), Dest(), opts_, &r);
    ASSERT_TRUE(s.ok()) << code << ": " << s.ToString();
    EXPECT_EQ(r.attempts, 2) << code;
    ASSERT_EQ(r.retry_waits_s.size(), 1u);
    EXPECT_LE(r.retry_waits_s[0], opts_.backoff_base_s) << "full jitter in [0, base]";
    ExpectComplete(content_);
  }
  server_->Requests();
  // The budget: retries in a row without progress, then a clear error.
  fs::remove(Dest());
  opts_.retries = 2;
  s = Fetch(server_->Url("f.bin", "fail=100&code=502"), Dest(), opts_, &r);
  EXPECT_EQ(s.code(), Status::Code::kIOError) << s.ToString();
  EXPECT_TRUE(Contains(s.message(), "HTTP 502")) << s.ToString();
  EXPECT_TRUE(Contains(s.message(), "gave up after 3 attempts")) << s.ToString();
  EXPECT_EQ(server_->Requests().size(), 3u);
  EXPECT_FALSE(fs::exists(Dest()));
  EXPECT_TRUE(!fs::exists(Dest() + ".part") || fs::file_size(Dest() + ".part") == 0)
      << "the error page is not in DEST.part";
}

TEST_F(FetchTest, TheRetryBudgetResetsWhenAnAttemptMadeProgress) {
  // The first 4 requests are each cut after 100000 bytes: 5 attempts in all. With a budget of
  // one retry that finishes only because every cut attempt made progress.
  opts_.retries = 1;
  FetchResult r;
  Status s = Fetch(server_->Url("f.bin", "cut=100000&cuts=4"), Dest(), opts_, &r);
  ASSERT_TRUE(s.ok()) << s.ToString();
  ExpectComplete(content_);
  EXPECT_EQ(r.attempts, 5);
  EXPECT_EQ(r.downloaded, content_.size());
  // Without progress the same budget ends after two attempts.
  fs::remove(Dest());
  s = Fetch(server_->Url("f.bin", "fail=4&code=503"), Dest(), opts_, &r);
  EXPECT_EQ(s.code(), Status::Code::kIOError) << s.ToString();
  EXPECT_EQ(r.attempts, 2);
}

TEST_F(FetchTest, PermanentErrorsAreNotRetried) {
  FetchResult r;
  Status s = Fetch(server_->Url("missing.bin"), dir_ + "/out/m.bin", opts_, &r);
  EXPECT_EQ(s.code(), Status::Code::kNotFound) << s.ToString();
  EXPECT_TRUE(Contains(s.message(), server_->Url("missing.bin"))) << s.ToString();
  EXPECT_TRUE(Contains(s.message(), "404")) << s.ToString();
  s = Fetch(server_->Url("f.bin", "fail=1&code=403"), Dest(), opts_, &r);
  EXPECT_EQ(s.code(), Status::Code::kIOError) << s.ToString();
  EXPECT_TRUE(Contains(s.message(), "HTTP 403")) << s.ToString();
  EXPECT_EQ(server_->Requests().size(), 2u) << "one request each";
  EXPECT_FALSE(fs::exists(Dest()));
  // Nobody listening: a connect error is transient, so it is retried (budget 1) and then named.
  opts_.retries = 1;
  s = Fetch("http://127.0.0.1:1/files/f.bin", Dest(), opts_, &r);
  EXPECT_EQ(s.code(), Status::Code::kIOError) << s.ToString();
  EXPECT_EQ(r.attempts, 2);
  EXPECT_TRUE(Contains(s.message(), "connect")) << s.ToString();
  opts_.sha256 = "xyz";
  EXPECT_EQ(Fetch(server_->Url("f.bin"), Dest(), opts_, &r).code(), Status::Code::kInvalidArgument);
}

TEST_F(FetchTest, ShaMismatchRefetchesOnceThenFailsHard) {
  opts_.sha256 = sha_;
  FetchResult r;
  Status s = Fetch(server_->Url("f.bin", "corrupt=1"), Dest(), opts_, &r);
  ASSERT_TRUE(s.ok()) << s.ToString();
  EXPECT_EQ(r.refetches, 1);
  ExpectComplete(content_);
  fs::remove(Dest());
  s = Fetch(server_->Url("f.bin", "corrupt=2"), Dest(), opts_, &r);
  EXPECT_EQ(s.code(), Status::Code::kCorruption) << s.ToString();
  EXPECT_TRUE(Contains(s.message(), "sha256")) << s.ToString();
  EXPECT_TRUE(Contains(s.message(), sha_)) << s.ToString();
  EXPECT_TRUE(Contains(s.message(), "twice")) << s.ToString();
  EXPECT_FALSE(fs::exists(Dest()));
  EXPECT_FALSE(fs::exists(Dest() + ".part"));
  // A size the user gave is checked too: larger than the file, the short file fails
  // verification (smaller: FetchTest.NoMoreThanTheDeclaredSizeIsEverWritten).
  opts_.sha256.clear();
  opts_.size = static_cast<int64_t>(content_.size()) + 5;
  s = Fetch(server_->Url("f.bin"), Dest(), opts_, &r);
  EXPECT_EQ(s.code(), Status::Code::kCorruption) << s.ToString();
  EXPECT_TRUE(Contains(s.message(), "expected " + std::to_string(content_.size() + 5)))
      << s.ToString();
}

// The sha256 (hashed on its own thread while the bytes are written) covers a resumed DEST.part's
// prefix too: a prefix damaged on disk between the runs is caught and refetched, and a sound
// one is hashed from the part (read once) and the appended bytes, without reading the file again.
TEST_F(FetchTest, TheSha256OfAResumedTransferCoversThePrefix) {
  const std::string sha = Sha(dir_ + "/srv/big.bin");
  std::string url;
  int phase = 0;
  // Leaves DEST.part with the first 1500000 bytes (and its sidecar). Each phase has its own URL:
  // the server cuts only the first request of a URL.
  auto cut_run = [&] {
    url = server_->Url("big.bin", "cut=1500000&phase=" + std::to_string(++phase));
    FetchOptions o = opts_;
    o.retries = 0;
    FetchResult r;
    Status s = Fetch(url, Dest(), o, &r);
    ASSERT_EQ(s.code(), Status::Code::kIOError) << s.ToString();
    ASSERT_EQ(fs::file_size(Dest() + ".part"), 1500000u);
  };
  // Resumes it through a FaultEnv (counting reads), with or without the sha256.
  auto resume = [&](const std::string& want_sha, FetchResult* r) {
    core::FaultEnv env;
    FetchOptions o = opts_;
    o.env = &env;
    o.sha256 = want_sha;
    Status s = Fetch(url, Dest(), o, r);
    EXPECT_TRUE(s.ok()) << s.ToString();
    return env.reads();
  };
  cut_run();
  FetchResult r;
  const int reads_without_sha = resume("", &r);
  ExpectComplete(big_);
  EXPECT_EQ(r.resumed_from, 1500000u);
  ASSERT_TRUE(fs::remove(Dest()));

  cut_run();
  const int reads_with_sha = resume(sha, &r);
  ExpectComplete(big_);
  EXPECT_EQ(r.resumed_from, 1500000u);
  EXPECT_EQ(r.refetches, 0);
  EXPECT_EQ(r.sha256, sha);
  EXPECT_EQ(reads_with_sha - reads_without_sha,
            static_cast<int>((1500000 + core::kCopyChunk - 1) / core::kCopyChunk))
      << "the prefix, in kCopyChunk reads; nothing more";
  ASSERT_TRUE(fs::remove(Dest()));

  cut_run();
  {  // one byte of the prefix flipped on disk; the sidecar still says "resume"
    std::string part = ReadAll(Dest() + ".part");
    part[123456] = static_cast<char>(part[123456] ^ 0x5a);
    WriteAll(Dest() + ".part", part);
  }
  resume(sha, &r);
  EXPECT_EQ(r.resumed_from, 1500000u);
  EXPECT_EQ(r.refetches, 1) << "the damaged prefix was caught by the sha256";
  EXPECT_EQ(r.sha256, sha);
  ExpectComplete(big_);
}

TEST_F(FetchTest, AStallIsCaughtByTheLowSpeedLimitAndResumed) {
  // The server sends 2000 bytes and then nothing, with the connection open. No global timeout
  // ends this: only the low-speed limit does.
  opts_.low_speed_bytes = 1000;
  opts_.low_speed_time_s = 1;
  FetchResult r;
  Status s = Fetch(server_->Url("f.bin", "stall=2000"), Dest(), opts_, &r);
  ASSERT_TRUE(s.ok()) << s.ToString();
  ExpectComplete(content_);
  auto reqs = server_->Requests();
  ASSERT_GE(reqs.size(), 2u);
  EXPECT_EQ(reqs[1]["range"], "bytes=2000-");
}

TEST_F(FetchTest, DiskFullIsAnImmediateClearErrorWithoutRetries) {
  core::FaultEnv env;
  // The sidecar is written first (write 1) and again with the response's validator (write 2),
  // the first 1 MiB of body is write 3: the second MiB fails.
  env.FailWriteWithEnospc(4);
  opts_.env = &env;
  FetchResult r;
  Status s = Fetch(server_->Url("big.bin"), Dest(), opts_, &r);
  EXPECT_EQ(s.code(), Status::Code::kIOError) << s.ToString();
  EXPECT_TRUE(Contains(s.message(), "No space left on device")) << s.ToString();
  EXPECT_TRUE(Contains(s.message(), Dest() + ".part")) << s.ToString();
  EXPECT_EQ(r.attempts, 1);
  EXPECT_EQ(server_->Requests().size(), 1u);
  EXPECT_FALSE(fs::exists(Dest()));
  const uint64_t held = fs::file_size(Dest() + ".part");
  EXPECT_GT(held, 0u);
  EXPECT_LT(held, big_.size());
  // Space freed: the next run resumes from what was written.
  s = Fetch(server_->Url("big.bin"), Dest(), opts_, &r);
  ASSERT_TRUE(s.ok()) << s.ToString();
  EXPECT_EQ(r.resumed_from, held);
  ExpectComplete(big_);
}

TEST_F(FetchTest, AFailingFsyncNeverYieldsDest) {
  core::FaultEnv env;
  env.FailSync(true);
  opts_.env = &env;
  Status s = Fetch(server_->Url("f.bin"), Dest(), opts_);
  EXPECT_TRUE(Contains(s.message(), "fsync")) << s.ToString();
  EXPECT_FALSE(fs::exists(Dest()));
}

// Runs Fetch in a forked child; the child writes one byte to `signal_fd` when `when` is first
// true of a progress report, and exits 0 on success with the right bytes.
pid_t FetchInChild(const std::string& url, const std::string& dest, const std::string& want,
                   FetchOptions o, int signal_fd, std::function<bool(const FetchProgress&)> when) {
  const pid_t pid = ::fork();
  if (pid != 0) return pid;
  o.progress = SignalOnceWhen(signal_fd, std::move(when));
  Status s = Fetch(url, dest, o);
  ::_exit(s.ok() && ReadAll(dest) == want ? 0 : 1);
}

TEST_F(FetchTest, SigkillMidDownloadThenTheNextRunResumesFromThePart) {
  int fds[2];
  ASSERT_EQ(::pipe(fds), 0);
  const std::string url = server_->Url("big.bin", "pause=2500000");
  // The server sends 2.5 MB and pauses; the child reports once 1 MB is in DEST.part.
  const pid_t pid = FetchInChild(url, Dest(), big_, opts_, fds[1], [](const FetchProgress& p) {
    return p.phase == FetchProgress::Phase::kTransfer && p.bytes >= 1000000;
  });
  ASSERT_GT(pid, 0);
  char c = 0;
  ASSERT_EQ(::read(fds[0], &c, 1), 1);
  ::kill(pid, SIGKILL);
  int st = 0;
  ASSERT_EQ(::waitpid(pid, &st, 0), pid);
  ASSERT_TRUE(WIFSIGNALED(st));
  server_->Command("release");  // the paused handler finds the connection gone
  const uint64_t held = fs::file_size(Dest() + ".part");
  ASSERT_GE(held, 1000000u);
  EXPECT_FALSE(fs::exists(Dest()));
  FetchResult r;
  Status s = Fetch(url, Dest(), opts_, &r);
  ASSERT_TRUE(s.ok()) << s.ToString();
  ExpectComplete(big_);
  EXPECT_EQ(r.resumed_from, held);
  auto reqs = server_->Requests();
  ASSERT_EQ(reqs.size(), 2u);
  EXPECT_EQ(reqs[1]["range"], "bytes=" + std::to_string(held) + "-");
  ::close(fds[0]);
  ::close(fds[1]);
}

TEST_F(FetchTest, BytesBufferedBeforeAPauseStillReachThePart) {
  // 100000 bytes are less than one write buffer; with the stream paused (and no stall limit to
  // end it) they must still reach DEST.part, or a kill now would lose them.
  int fds[2];
  ASSERT_EQ(::pipe(fds), 0);
  const std::string url = server_->Url("f.bin", "pause=100000");
  opts_.low_speed_time_s = 3600;
  const pid_t pid = FetchInChild(url, Dest(), content_, opts_, fds[1], [](const FetchProgress& p) {
    return p.phase == FetchProgress::Phase::kTransfer && p.bytes >= 100000;
  });
  char c = 0;
  ASSERT_EQ(::read(fds[0], &c, 1), 1);
  ::kill(pid, SIGKILL);
  int st = 0;
  ASSERT_EQ(::waitpid(pid, &st, 0), pid);
  server_->Command("release");
  EXPECT_EQ(fs::file_size(Dest() + ".part"), 100000u);
  FetchResult r;
  ASSERT_TRUE(Fetch(url, Dest(), opts_, &r).ok());
  EXPECT_EQ(r.resumed_from, 100000u);
  ExpectComplete(content_);
  ::close(fds[0]);
  ::close(fds[1]);
}

TEST_F(FetchTest, TwoProcessesMakeOneDownloadAndBothGetTheFile) {
  int fds[2];
  ASSERT_EQ(::pipe(fds), 0);
  const std::string url = server_->Url("f.bin", "pause=100000");
  auto never = [](const FetchProgress&) { return false; };
  const pid_t a = FetchInChild(url, Dest(), content_, opts_, fds[1], never);
  server_->WaitPaused();  // a is mid-download and holds the lock
  const pid_t b = FetchInChild(url, Dest(), content_, opts_, fds[1], [](const FetchProgress& p) {
    return p.phase == FetchProgress::Phase::kWaitingForLock;
  });
  char c = 0;
  ASSERT_EQ(::read(fds[0], &c, 1), 1);  // b waits for a's lock
  server_->Command("release");
  int st = 0;
  ASSERT_EQ(::waitpid(a, &st, 0), a);
  EXPECT_TRUE(WIFEXITED(st) && WEXITSTATUS(st) == 0);
  ASSERT_EQ(::waitpid(b, &st, 0), b);
  EXPECT_TRUE(WIFEXITED(st) && WEXITSTATUS(st) == 0);
  EXPECT_EQ(server_->Requests().size(), 1u) << "one download";
  ExpectComplete(content_);
  ::close(fds[0]);
  ::close(fds[1]);
}

TEST_F(FetchTest, LocalCopyRetriesAFailedReadAtItsOffset) {
  const std::string src = dir_ + "/flaky/big.bin";
  fs::create_directories(dir_ + "/flaky");
  const std::string data = RandomBytes(3 * core::kCopyChunk + 12345, 9);
  WriteAll(src, data);
  core::FaultEnv env;
  opts_.env = &env;
  env.FailReadWithEio(2);  // "Input/output error" on the second chunk's read (a Drive mount)
  FetchResult r;
  Status s = Fetch(src, Dest(), opts_, &r);
  ASSERT_TRUE(s.ok()) << s.ToString();
  ExpectComplete(data);
  EXPECT_EQ(r.attempts, 2);
  EXPECT_EQ(r.downloaded, data.size()) << "nothing read twice";
  // file:// URL, one attempt only: the error names the file; the next run resumes after one chunk.
  fs::remove(Dest());
  opts_.retries = 0;
  env.FailReadWithEio(2);
  s = Fetch("file://" + src, Dest(), opts_, &r);
  EXPECT_TRUE(Contains(s.message(), "Input/output error")) << s.ToString();
  EXPECT_TRUE(Contains(s.message(), src)) << s.ToString();
  EXPECT_EQ(fs::file_size(Dest() + ".part"), core::kCopyChunk);
  s = Fetch("file://" + src, Dest(), opts_, &r);
  ASSERT_TRUE(s.ok()) << s.ToString();
  EXPECT_EQ(r.resumed_from, core::kCopyChunk);
  ExpectComplete(data);
  EXPECT_EQ(Fetch(dir_ + "/nope", dir_ + "/out/nope", opts_, &r).code(), Status::Code::kNotFound);
}

TEST_F(FetchTest, CancelledStopsAndKeepsThePartForAResume) {
  // Mid-body: the server sends 100000 bytes and holds the rest; once they are in DEST.part the
  // hook says stop (libcurl polls it while no bytes arrive).
  bool have_bytes = false;
  opts_.low_speed_time_s = 3600;
  opts_.progress = [&](const FetchProgress& p) {
    if (p.phase == FetchProgress::Phase::kTransfer && p.bytes >= 100000) have_bytes = true;
  };
  opts_.cancelled = [&] { return have_bytes; };
  const std::string url = server_->Url("f.bin", "pause=100000");
  FetchResult r;
  Status s = Fetch(url, Dest(), opts_, &r);
  EXPECT_EQ(s.code(), Status::Code::kCancelled) << s.ToString();
  EXPECT_TRUE(Contains(s.message(), Dest() + ".part")) << s.ToString();
  server_->Command("release");
  EXPECT_FALSE(fs::exists(Dest()));
  EXPECT_EQ(fs::file_size(Dest() + ".part"), 100000u);
  opts_.cancelled = nullptr;
  ASSERT_TRUE(Fetch(url, Dest(), opts_, &r).ok());
  EXPECT_EQ(r.resumed_from, 100000u);
  ExpectComplete(content_);
  // During a retry wait (the server asks for 100 s): stops without waiting it out.
  bool waiting = false;
  opts_.progress = [&](const FetchProgress& p) {
    if (p.phase == FetchProgress::Phase::kRetryWait) waiting = true;
  };
  opts_.cancelled = [&] { return waiting; };
  opts_.retry_after_max_s = 1e6;
  s = Fetch(server_->Url("f.bin", "fail=1&code=503&retry_after=100"), dir_ + "/out/g.bin", opts_,
            &r);
  EXPECT_EQ(s.code(), Status::Code::kCancelled) << s.ToString();
  ASSERT_EQ(r.retry_waits_s.size(), 1u);
  EXPECT_EQ(r.retry_waits_s[0], 100.0);
  // While another holder has DEST.lock.
  std::unique_ptr<FileLock> held;
  ASSERT_TRUE(Env::Default()->LockFile(dir_ + "/out/h.bin.lock", false, &held).ok());
  bool blocked = false;
  opts_.progress = [&](const FetchProgress& p) {
    if (p.phase == FetchProgress::Phase::kWaitingForLock) blocked = true;
  };
  opts_.cancelled = [&] { return blocked; };
  s = Fetch(server_->Url("f.bin"), dir_ + "/out/h.bin", opts_, &r);
  EXPECT_EQ(s.code(), Status::Code::kCancelled) << s.ToString();
  EXPECT_TRUE(Contains(s.message(), "h.bin.lock")) << s.ToString();
}

TEST_F(FetchTest, DsconvertFetchCli) {
  std::string err;
  int rc = RunDsconvert(
      {"fetch", server_->Url("f.bin", "cut=100000"), Dest(), "--sha256", sha_, "--retries", "2"},
      &err);
  EXPECT_EQ(rc, 0) << err;
  ExpectComplete(content_);
  EXPECT_TRUE(Contains(err, "f.bin")) << err;
  err.clear();
  rc = RunDsconvert(
      {"fetch", server_->Url("f.bin", "corrupt=2"), dir_ + "/out/g.bin", "--sha256", sha_}, &err);
  EXPECT_EQ(rc, 1) << err;
  EXPECT_TRUE(Contains(err, "sha256")) << err;
  EXPECT_FALSE(fs::exists(dir_ + "/out/g.bin"));
  err.clear();
  rc = RunDsconvert({"fetch", server_->Url("f.bin"), dir_ + "/out/h.bin", "--sha256", "abc"}, &err);
  EXPECT_NE(rc, 0) << err;
}

// ---- signed and token URLs: the query is sent, never shown or stored

// Issue 19, item 6: a download never writes past the size the caller (or a manifest) declared.
// A server that announces more is refused before a byte is written; one that sends more without
// saying so is stopped at the declared size. Either way the error names the URL and nothing
// is kept (before: fetch(size=10) downloaded the whole file, twice, then failed verification).
TEST_F(FetchTest, NoMoreThanTheDeclaredSizeIsEverWritten) {
  opts_.size = 10;
  FetchResult r;
  Status s = Fetch(server_->Url("big.bin"), Dest(), opts_, &r);
  EXPECT_EQ(s.code(), Status::Code::kCorruption) << s.ToString();
  EXPECT_TRUE(Contains(s.message(), server_->Url("big.bin") + ": the server announces " +
                                        std::to_string(big_.size()) +
                                        " bytes (Content-Length), more than the 10 bytes"))
      << s.ToString();
  EXPECT_EQ(r.downloaded, 0u);
  EXPECT_EQ(server_->Requests().size(), 1u) << "not retried, not refetched";
  // No Content-Length: the body is cut at 10 bytes.
  s = Fetch(server_->Url("big.bin", "nolength=1"), Dest(), opts_, &r);
  EXPECT_EQ(s.code(), Status::Code::kCorruption) << s.ToString();
  EXPECT_TRUE(Contains(s.message(), "the server sent more than the 10 bytes")) << s.ToString();
  EXPECT_LE(r.downloaded, 10u);
  EXPECT_EQ(server_->Requests().size(), 1u);
  EXPECT_FALSE(fs::exists(Dest()));
  EXPECT_FALSE(fs::exists(Dest() + ".part"));
  EXPECT_FALSE(fs::exists(Dest() + ".part.json"));
  // The declared size right: the same server, fetched whole.
  opts_.size = static_cast<int64_t>(big_.size());
  s = Fetch(server_->Url("big.bin", "nolength=1"), Dest(), opts_, &r);
  ASSERT_TRUE(s.ok()) << s.ToString();
  ExpectComplete(big_);
}

// Item 6: the declared size (or the server's length) is reserved before the body arrives, so a
// full disk (a tmpfs: RAM) is an error naming DEST.part before any byte is written.
TEST_F(FetchTest, TheSizeIsReservedBeforeTheFirstByte) {
  core::FaultEnv env;
  env.SetAllocateLimit(1 << 20);  // less than big.bin
  opts_.env = &env;
  for (int64_t size : {int64_t{-1}, static_cast<int64_t>(big_.size())}) {
    SCOPED_TRACE("size " + std::to_string(size));
    opts_.size = size;
    FetchResult r;
    const int writes = env.writes();
    Status s = Fetch(server_->Url("big.bin"), Dest(), opts_, &r);
    EXPECT_EQ(s.code(), Status::Code::kIOError) << s.ToString();
    EXPECT_TRUE(Contains(s.message(), "fallocate " + Dest() + ".part")) << s.ToString();
    EXPECT_TRUE(Contains(s.message(), "No space left on device")) << s.ToString();
    EXPECT_EQ(r.downloaded, 0u);
    EXPECT_LE(env.writes() - writes, 2) << "only the sidecar was written";
    EXPECT_FALSE(fs::exists(Dest()));
    EXPECT_FALSE(fs::exists(Dest() + ".part")) << "an empty DEST.part is not left behind";
  }
}

// Item 9: a fetch leaves nothing of its own beside the user's files: no DEST.lock after it,
// no empty DEST.part (nor sidecar) after a failure that fetched nothing.
TEST_F(FetchTest, AFetchLeavesNoLockOrEmptyPartBesideTheUsersFiles) {
  const std::string out = dir_ + "/out";
  fs::create_directories(out);
  WriteAll(out + "/keep.txt", "the user's");
  Status s = Fetch(server_->Url("f.bin"), Dest(), opts_);
  ASSERT_TRUE(s.ok()) << s.ToString();
  std::set<std::string> names;
  for (const auto& e : fs::directory_iterator(out)) names.insert(e.path().filename().string());
  EXPECT_EQ(names, (std::set<std::string>{"f.bin", "keep.txt"}));
  s = Fetch(server_->Url("nothing.bin"), out + "/nothing.bin", opts_);
  EXPECT_EQ(s.code(), Status::Code::kNotFound) << s.ToString();
  names.clear();
  for (const auto& e : fs::directory_iterator(out)) names.insert(e.path().filename().string());
  EXPECT_EQ(names, (std::set<std::string>{"f.bin", "keep.txt"}));
  // A file of the user's named like the part file is never overwritten nor resumed.
  WriteAll(out + "/g.bin.part", "the user's own g.bin.part");
  s = Fetch(server_->Url("f.bin"), out + "/g.bin", opts_);
  EXPECT_EQ(s.code(), Status::Code::kAlreadyExists) << s.ToString();
  EXPECT_TRUE(Contains(s.message(), out + "/g.bin.part")) << s.ToString();
  EXPECT_EQ(ReadAll(out + "/g.bin.part"), "the user's own g.bin.part");
  EXPECT_FALSE(fs::exists(out + "/g.bin"));
}

// Item 9: the scheme is classified in one place, without regard to case: an "HTTP://" URL is
// fetched like an "http://" one (it was read as a local path: "no such file").
TEST_F(FetchTest, AnUppercaseSchemeIsAUrl) {
  std::string url = server_->Url("f.bin");
  ASSERT_EQ(url.rfind("http://", 0), 0u);
  url.replace(0, 4, "HTTP");
  EXPECT_EQ(ClassifyUrl(url), UrlScheme::kHttp);
  EXPECT_EQ(ClassifyUrl("HttpS://x/y"), UrlScheme::kHttps);
  EXPECT_EQ(ClassifyUrl("FILE:///tmp/x"), UrlScheme::kFile);
  EXPECT_EQ(ClassifyUrl("/tmp/http://x"), UrlScheme::kPath);
  EXPECT_EQ(ClassifyUrl("S3://bucket/key"), UrlScheme::kS3);
  EXPECT_EQ(ClassifyUrl("gs://bucket/key"), UrlScheme::kOther);
  opts_.sha256 = sha_;
  Status s = Fetch(url, Dest(), opts_);
  ASSERT_TRUE(s.ok()) << s.ToString();
  ExpectComplete(content_);
  EXPECT_EQ(server_->Requests().size(), 1u);
}

// The one classifier (ClassifyUrl; IsHttpUrl and IsRemoteUrl are views of it): the scheme is
// what comes before the first "://" when it is an RFC 3986 scheme (a letter, then letters,
// digits, '+', '-', '.'), compared without regard to case; anything else is a path.
TEST(UrlTest, TheOneClassifierCases) {
  struct Case {
    const char* s;
    UrlScheme scheme;
  };
  const Case cases[] = {
      {"http://x/y", UrlScheme::kHttp},
      {"HTTP://x", UrlScheme::kHttp},
      {"hTtP://x/a?q=1", UrlScheme::kHttp},
      {"https://x/y", UrlScheme::kHttps},
      {"HTTPS://X/Y", UrlScheme::kHttps},
      {"s3://b/k", UrlScheme::kS3},
      {"S3://b/k", UrlScheme::kS3},
      {"s3://b", UrlScheme::kS3},
      {"file:///tmp/x", UrlScheme::kFile},
      {"File:///tmp/x", UrlScheme::kFile},
      {"gs://b/k", UrlScheme::kOther},
      {"ftp://h/f", UrlScheme::kOther},
      {"git+ssh://h/r", UrlScheme::kOther},
      {"/local/path", UrlScheme::kPath},
      {"/local/path/", UrlScheme::kPath},
      {"relative/dir", UrlScheme::kPath},
      {"data.lmdb", UrlScheme::kPath},
      {"", UrlScheme::kPath},
      // File names with "://" in them: a path unless what precedes it is a scheme.
      {"/tmp/http://x", UrlScheme::kPath},
      {"./http://x", UrlScheme::kPath},
      {"dir/s3://b", UrlScheme::kPath},
      {"://x", UrlScheme::kPath},
      {"1http://x", UrlScheme::kPath},
      {"ht_tp://x", UrlScheme::kPath},
      {"my file://x", UrlScheme::kPath},
      {"http:/x", UrlScheme::kPath},
      {"http:x", UrlScheme::kPath},
      {"http", UrlScheme::kPath},
      // Only the first "://" counts.
      {"relative://http://x", UrlScheme::kOther},
      {"http://h/a://b", UrlScheme::kHttp},
  };
  for (const Case& c : cases) {
    EXPECT_EQ(ClassifyUrl(c.s), c.scheme) << c.s;
    const bool http = c.scheme == UrlScheme::kHttp || c.scheme == UrlScheme::kHttps;
    EXPECT_EQ(IsHttpUrl(c.s), http) << c.s;
    EXPECT_EQ(IsRemoteUrl(c.s), http || c.scheme == UrlScheme::kS3) << c.s;
  }
}

TEST(UrlTest, RedactIdentifyAppendAndNameWithoutTheQuery) {
  const std::string s3 =
      "https://b.s3.amazonaws.com/ds/data.tar?X-Amz-Expires=60&X-Amz-Signature=SEKRIT";
  EXPECT_EQ(RedactUrl(s3), "https://b.s3.amazonaws.com/ds/data.tar?...");
  EXPECT_EQ(RedactUrl("https://u:SEKRIT@h/x?t=1#f"), "https://...@h/x?...");
  EXPECT_EQ(RedactUrl("https://h/x#SEKRIT"), "https://h/x#...");
  EXPECT_EQ(RedactUrl("https://h/x"), "https://h/x");
  EXPECT_EQ(RedactUrl("/data/a?b@c"), "/data/a?b@c") << "a path is not a URL";
  EXPECT_TRUE(UrlHasQuery(s3));
  EXPECT_FALSE(UrlHasQuery("https://h/x#a?b"));
  EXPECT_FALSE(UrlHasQuery("/data/a?b"));
  // Re-signed: the same object. Another path, host or port: not.
  EXPECT_EQ(UrlIdentity(s3), "https://b.s3.amazonaws.com/ds/data.tar");
  EXPECT_EQ(UrlIdentity(s3),
            UrlIdentity("https://b.s3.amazonaws.com/ds/data.tar?X-Amz-Signature=NEW"));
  EXPECT_EQ(UrlIdentity("https://u:pw@h/x?a#b"), "https://h/x");
  EXPECT_NE(UrlIdentity("https://h/x?a"), UrlIdentity("https://h/y?a"));
  EXPECT_NE(UrlIdentity("https://h:1/x"), UrlIdentity("https://h:2/x"));
  // A dataset's files: the query follows them (token-style auth); the fragment does not.
  EXPECT_EQ(UrlAppendPath("https://h/ds/?token=T", "manifest.json"),
            "https://h/ds/manifest.json?token=T");
  EXPECT_EQ(UrlAppendPath("https://h/ds?token=T#f", "shard-00000.lmdb/data.mdb"),
            "https://h/ds/shard-00000.lmdb/data.mdb?token=T");
  EXPECT_EQ(UrlAppendPath("https://h/ds", "m"), "https://h/ds/m");
  EXPECT_EQ(UrlAppendPath("/local/ds/", "m"), "/local/ds/m");
  // The file a URL names: its path's last segment, percent-decoded; never the query.
  std::string name;
  ASSERT_TRUE(UrlFileName(s3, &name).ok());
  EXPECT_EQ(name, "data.tar");
  ASSERT_TRUE(UrlFileName("https://huggingface.co/d/resolve/main/x.tar?download=true", &name).ok());
  EXPECT_EQ(name, "x.tar");
  ASSERT_TRUE(UrlFileName("https://h/a/my%20file.tar?token=SEKRIT", &name).ok());
  EXPECT_EQ(name, "my file.tar");
  ASSERT_TRUE(UrlFileName("https://h/train/?token=SEKRIT", &name).ok());
  EXPECT_EQ(name, "train");
  ASSERT_TRUE(UrlFileName("/local/dir/f.bin", &name).ok());
  EXPECT_EQ(name, "f.bin");
  // Nothing that could leave the destination directory, and no secret in the error.
  for (const std::string bad :
       {"https://h/a/%2e%2e?token=SEKRIT", "https://h/a/..%2F..%2Fetc%2Fpasswd?token=SEKRIT",
        "https://h/?token=SEKRIT", "https://h?token=SEKRIT", "https://h/a/b%00c?token=SEKRIT",
        "https://h/a/b%0Ac?token=SEKRIT", "https://h/a/..?token=SEKRIT"}) {
    const Status st = UrlFileName(bad, &name);
    EXPECT_EQ(st.code(), Status::Code::kInvalidArgument) << bad << " -> " << name;
    EXPECT_TRUE(Contains(st.message(), "give DEST")) << st.ToString();
    EXPECT_FALSE(Contains(st.message(), "SEKRIT")) << st.ToString();
  }
}

TEST_F(FetchTest, ASignedUrlResumesWhenReSignedAndAnExpiredOneIsNotRetried) {
  const std::string path = "/files/big.bin";
  server_->Auth(path, "X-Amz-Signature", "SIGOLD1111");
  // Cut after 1 MiB, no retries: DEST.part + sidecar stay, the error names the URL redacted.
  opts_.retries = 0;
  FetchResult r;
  std::vector<FetchProgress> progress;
  opts_.progress = [&progress](const FetchProgress& p) { progress.push_back(p); };
  Status s =
      Fetch(server_->Url("big.bin", "X-Amz-Signature=SIGOLD1111&cut=1048576"), Dest(), opts_, &r);
  ASSERT_EQ(s.code(), Status::Code::kIOError) << s.ToString();
  EXPECT_FALSE(Contains(s.ToString(), "SIGOLD1111")) << s.ToString();
  EXPECT_TRUE(Contains(s.ToString(), server_->Url("big.bin", "..."))) << s.ToString();
  EXPECT_FALSE(progress.empty());
  ASSERT_EQ(fs::file_size(Dest() + ".part"), 1048576u);
  const std::string sidecar = ReadAll(Dest() + ".part.json");
  EXPECT_FALSE(Contains(sidecar, "SIGOLD1111")) << sidecar;
  EXPECT_EQ(json::parse(sidecar)["url"], server_->Url("big.bin", "..."));
  // The signature expires (the server takes a new one): the old URL gets a 403, which is not
  // retried (8 retries allowed), and the error says why; DEST.part is kept.
  server_->Auth(path, "X-Amz-Signature", "SIGNEW2222");
  opts_.retries = 8;
  s = Fetch(server_->Url("big.bin", "X-Amz-Signature=SIGOLD1111"), Dest(), opts_, &r);
  EXPECT_EQ(s.code(), Status::Code::kIOError) << s.ToString();
  EXPECT_EQ(r.attempts, 1);
  EXPECT_EQ(r.http_status, 403);
  EXPECT_TRUE(Contains(s.message(), "may have expired")) << s.ToString();
  EXPECT_TRUE(Contains(s.message(), Dest() + ".part is kept")) << s.ToString();
  EXPECT_FALSE(Contains(s.ToString(), "SIGOLD1111")) << s.ToString();
  EXPECT_EQ(fs::file_size(Dest() + ".part"), 1048576u);
  // A fresh signature of the same object resumes: a Range request, a 206, appended.
  s = Fetch(server_->Url("big.bin", "X-Amz-Signature=SIGNEW2222"), Dest(), opts_, &r);
  ASSERT_TRUE(s.ok()) << s.ToString();
  ExpectComplete(big_);
  EXPECT_EQ(r.resumed_from, 1048576u);
  EXPECT_EQ(r.downloaded, big_.size() - 1048576u);
  EXPECT_EQ(r.http_status, 206);
  const auto reqs = server_->Requests();
  ASSERT_EQ(reqs.size(), 3u);
  EXPECT_TRUE(reqs[0]["range"].is_null());
  EXPECT_EQ(reqs[1]["range"], "bytes=1048576-") << "the expired URL asked for the rest too";
  EXPECT_EQ(reqs[2]["range"], "bytes=1048576-");
  EXPECT_EQ(reqs[2]["query"], "X-Amz-Signature=SIGNEW2222") << "the query is sent as given";
}

// Google Cloud Storage answers an expired signature with 400 "ExpiredToken": the same message,
// one attempt.
TEST_F(FetchTest, AnExpiredGcsSignatureIsA400ThatSaysSo) {
  server_->Auth("/files/f.bin", "X-Goog-Signature", "GOOGNEW", 400);
  FetchResult r;
  Status s = Fetch(server_->Url("f.bin", "X-Goog-Signature=GOOGOLD5"), Dest(), opts_, &r);
  EXPECT_EQ(s.code(), Status::Code::kIOError) << s.ToString();
  EXPECT_EQ(r.attempts, 1);
  EXPECT_EQ(r.http_status, 400);
  EXPECT_TRUE(Contains(s.message(), "HTTP 400 (refused)")) << s.ToString();
  EXPECT_TRUE(Contains(s.message(), "may have expired")) << s.ToString();
  EXPECT_FALSE(Contains(s.ToString(), "GOOGOLD5")) << s.ToString();
  EXPECT_FALSE(Contains(s.message(), ".part is kept")) << "nothing arrived: " << s.ToString();
}

// A DEST.part.json written by an older dspipe holds the whole URL: a resume rewrites it without
// the query.
TEST_F(FetchTest, AnOldSidecarWithTheWholeUrlLosesItsQueryOnResume) {
  opts_.retries = 0;
  const std::string url = server_->Url("big.bin", "token=OLDSIDECAR9&cut=500000&cuts=2");
  ASSERT_EQ(Fetch(url, Dest(), opts_).code(), Status::Code::kIOError);  // cut at 500000
  json side = json::parse(ReadAll(Dest() + ".part.json"));
  side["url"] = url;  // as an older dspipe wrote it
  WriteAll(Dest() + ".part.json", side.dump());
  FetchResult r;
  ASSERT_EQ(Fetch(url, Dest(), opts_, &r).code(), Status::Code::kIOError);  // resumed, cut again
  EXPECT_EQ(r.resumed_from, 500000u);
  EXPECT_EQ(fs::file_size(Dest() + ".part"), 1000000u);
  const std::string sidecar = ReadAll(Dest() + ".part.json");
  EXPECT_FALSE(Contains(sidecar, "OLDSIDECAR9")) << sidecar;
  EXPECT_EQ(json::parse(sidecar)["url"], server_->Url("big.bin", "..."));
}

TEST_F(FetchTest, DsconvertFetchOfATokenUrlNamesTheFileWithoutTheQueryAndNeverPrintsIt) {
  server_->Auth("/files/f.bin", "token", "TOKSECRET42");
  fs::create_directories(dir_ + "/cwd");
  fs::create_directories(dir_ + "/into");
  // No DEST: the current directory, the name from the path.
  std::string out;
  int rc = RunDsconvert(
      {"fetch", server_->Url("f.bin", "token=TOKSECRET42&download=true"), "--sha256", sha_}, &out,
      dir_ + "/cwd");
  EXPECT_EQ(rc, 0) << out;
  EXPECT_TRUE(ReadAll(dir_ + "/cwd/f.bin") == content_);
  EXPECT_EQ(std::distance(fs::directory_iterator(dir_ + "/cwd"), fs::directory_iterator()), 1)
      << "f.bin only: nothing named after the query, no lock file left";
  EXPECT_TRUE(Contains(out, server_->Url("f.bin", "..."))) << out;
  // DEST an existing directory: the file goes inside it.
  rc = RunDsconvert({"fetch", server_->Url("f.bin", "token=TOKSECRET42"), dir_ + "/into"}, &out);
  EXPECT_EQ(rc, 0) << out;
  EXPECT_TRUE(ReadAll(dir_ + "/into/f.bin") == content_);
  // Expired: exit 1, the reason, not retried.
  server_->Auth("/files/f.bin", "token", "TOKNEW");
  rc = RunDsconvert({"fetch", server_->Url("f.bin", "token=TOKSECRET42"), dir_ + "/g.bin"}, &out);
  EXPECT_EQ(rc, 1) << out;
  EXPECT_TRUE(Contains(out, "may have expired")) << out;
  // A name that would leave the directory: refused before any request.
  (void)server_->Requests();
  rc = RunDsconvert({"fetch", server_->Url("%2e%2e", "token=TOKSECRET42")}, &out, dir_ + "/cwd");
  EXPECT_EQ(rc, 1) << out;
  EXPECT_TRUE(Contains(out, "give DEST")) << out;
  EXPECT_TRUE(server_->Requests().empty());
  EXPECT_FALSE(Contains(out, "TOKSECRET42")) << out;
}

}  // namespace
}  // namespace dspipe::testing
