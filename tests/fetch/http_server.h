// SPDX-License-Identifier: Apache-2.0
// Starts tests/fetch/server.py (a real HTTP server on 127.0.0.1 that misbehaves on command; or
// its hostile modes: HttpServer("--redirect", PORT), HttpServer("--s3loop"))
// as a child process, and talks to it over its stdin/stdout pipes; RunDsconvert runs the CLI.
// Header-only.
#pragma once

#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <functional>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <string>
#include <vector>

#include "dspipe/fetch.h"

extern char** environ;

namespace dspipe::testing {

class HttpServer {
 public:
  // Serves root/<name> at http://127.0.0.1:<port>/files/<name>. HttpServer("--proxy", PORT):
  // forwards to 127.0.0.1:PORT (an S3 server) and misbehaves on command (server.py's docstring).
  explicit HttpServer(const std::string& root, const std::string& upstream_port = "") {
    int in[2], out[2];
    if (::pipe2(in, O_CLOEXEC) != 0 || ::pipe2(out, O_CLOEXEC) != 0)
      throw std::runtime_error("pipe");
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_adddup2(&fa, in[0], 0);
    posix_spawn_file_actions_adddup2(&fa, out[1], 1);
    const std::string script = std::string(DSPIPE_SOURCE_DIR) + "/tests/fetch/server.py";
    std::vector<char*> argv = {const_cast<char*>("/usr/bin/python3"),
                               const_cast<char*>(script.c_str()), const_cast<char*>(root.c_str())};
    if (!upstream_port.empty()) argv.push_back(const_cast<char*>(upstream_port.c_str()));
    argv.push_back(nullptr);
    if (posix_spawn(&pid_, argv[0], &fa, nullptr, argv.data(), environ) != 0)
      throw std::runtime_error("spawn server.py");
    posix_spawn_file_actions_destroy(&fa);
    ::close(in[0]);
    ::close(out[1]);
    to_ = ::fdopen(in[1], "w");
    from_ = ::fdopen(out[0], "r");
    const std::string first = ReadLine();  // waits until the server listens
    if (first.rfind("PORT ", 0) != 0) throw std::runtime_error("server.py said: " + first);
    port_ = std::stoi(first.substr(5));
  }
  ~HttpServer() {
    std::fclose(to_);  // the server exits when its stdin closes
    std::fclose(from_);
    ::kill(pid_, SIGKILL);
    int st = 0;
    ::waitpid(pid_, &st, 0);
  }
  HttpServer(const HttpServer&) = delete;
  HttpServer& operator=(const HttpServer&) = delete;

  int port() const { return port_; }
  std::string Url(const std::string& name, const std::string& query = "") const {
    return "http://127.0.0.1:" + std::to_string(port_) + "/files/" + name +
           (query.empty() ? "" : "?" + query);
  }

  // The next line the server prints (blocks until there is one).
  std::string ReadLine() {
    char buf[4096];
    if (std::fgets(buf, sizeof buf, from_) == nullptr) throw std::runtime_error("server.py died");
    std::string s(buf);
    if (!s.empty() && s.back() == '\n') s.pop_back();
    return s;
  }
  void Command(const std::string& cmd) {
    std::fputs((cmd + "\n").c_str(), to_);
    std::fflush(to_);
  }
  // Every request logged since the last call. A request that has been answered, at least in
  // part, is logged before the server reads "sync".
  std::vector<nlohmann::json> Requests() {
    Command("sync");
    std::vector<nlohmann::json> reqs;
    for (const std::string& l : pending_) reqs.push_back(nlohmann::json::parse(l.substr(4)));
    pending_.clear();
    for (std::string line = ReadLine(); line != "SYNC"; line = ReadLine()) {
      if (line.rfind("REQ ", 0) == 0) reqs.push_back(nlohmann::json::parse(line.substr(4)));
    }
    return reqs;
  }
  // Requests for path (e.g. "/files/ds/data.mdb") behave as if they carried query too (the
  // misbehaviour for URLs the code under test builds itself). Returns once the server has it.
  void Set(const std::string& path, const std::string& query) {
    Command("set " + path + " " + query);
    for (std::string line = ReadLine(); line != "SET"; line = ReadLine()) {
      if (line.rfind("REQ ", 0) == 0) pending_.push_back(line);
    }
  }
  // Requests for paths starting with prefix (e.g. "/files/big.bin", "/files/ds/") must carry
  // param=value in their query, or get `code` (403: S3's "Request has expired"; 400: GCS's
  // "ExpiredToken"): a token, or a signature when the prefix is one object. Called again, the
  // new value replaces the old (a re-signed URL; the old one now "expired"). Returns once the
  // server has it.
  void Auth(const std::string& prefix, const std::string& param, const std::string& value,
            int code = 403) {
    Command("auth " + prefix + " " + param + " " + value + " " + std::to_string(code));
    for (std::string line = ReadLine(); line != "AUTH"; line = ReadLine()) {
      if (line.rfind("REQ ", 0) == 0) pending_.push_back(line);
    }
  }
  // Blocks until the server prints "PAUSED ..." (a ?pause=N request stopped mid-body).
  void WaitPaused() {
    for (std::string line = ReadLine();; line = ReadLine()) {
      if (line.rfind("PAUSED", 0) == 0) return;
      if (line.rfind("REQ ", 0) == 0) pending_.push_back(line);
    }
  }

 private:
  pid_t pid_ = -1;
  int port_ = 0;
  FILE* to_ = nullptr;
  FILE* from_ = nullptr;
  std::vector<std::string> pending_;
};

// Runs the dsconvert binary with args (in the directory cwd, when given); *err gets its stdout +
// stderr. Returns the exit code.
inline int RunDsconvert(const std::vector<std::string>& args, std::string* err,
                        const std::string& cwd = "") {
  int p[2];
  if (::pipe(p) != 0) return -1;
  const pid_t pid = ::fork();
  if (pid == 0) {
    ::dup2(p[1], 1);
    ::dup2(p[1], 2);
    ::close(p[0]);
    if (!cwd.empty() && ::chdir(cwd.c_str()) != 0) ::_exit(126);
    std::vector<char*> argv{const_cast<char*>(DSCONVERT_PATH)};
    for (const auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
    argv.push_back(nullptr);
    ::execv(argv[0], argv.data());
    ::_exit(127);
  }
  ::close(p[1]);
  char buf[4096];
  ssize_t n;
  while ((n = ::read(p[0], buf, sizeof buf)) > 0) err->append(buf, static_cast<size_t>(n));
  ::close(p[0]);
  int st = 0;
  ::waitpid(pid, &st, 0);
  return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

// A FetchOptions::progress for a fetch in a forked child: writes one byte to signal_fd the
// first time `when` holds of a report, so the parent waits on the pipe (a real condition, not a
// sleep); the child exits 3 if the write fails.
inline std::function<void(const FetchProgress&)> SignalOnceWhen(
    int signal_fd, std::function<bool(const FetchProgress&)> when) {
  return [signal_fd, when = std::move(when), signalled = false](const FetchProgress& p) mutable {
    if (!signalled && when(p)) {
      signalled = true;
      const char c = 'x';
      if (::write(signal_fd, &c, 1) != 1) ::_exit(3);
    }
  };
}

// The small dataset the fetch and cache-URL tests serve: `dsconvert synth` of 30 samples of
// 48x40 into src (seed "" = synth's default), then `dsconvert build` of it into out as 2
// raw+zstd shards, replacing what out held. Both by the CLI (child processes), so the calling
// test stays single-threaded until it forks. Returns "" or the failing command's output.
inline std::string BuildServedDataset(const std::string& src, const std::string& out,
                                      const std::string& seed = "") {
  std::vector<std::string> synth = {"synth", src, "--count", "30", "--size", "48x40"};
  if (!seed.empty()) synth.insert(synth.end(), {"--seed", seed});
  synth.insert(synth.end(), {"--threads", "1"});
  std::string log;
  if (RunDsconvert(synth, &log) != 0) return "dsconvert synth: " + log;
  std::error_code ec;
  std::filesystem::remove_all(out, ec);
  if (RunDsconvert({"build", src, out, "--shards", "2", "--threads", "1", "--store", "raw", "-q"},
                   &log) != 0) {
    return "dsconvert build: " + log;
  }
  return "";
}

}  // namespace dspipe::testing
