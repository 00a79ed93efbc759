// Shared by the cache tests: tmpfs dirs, records of a dataset, cache_tool child processes and a
// gate that holds a background copy at a known point. Header-only.
#pragma once

#include <fcntl.h>
#include <gtest/gtest.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <condition_variable>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "cache/populate.h"
#include "cache/test_hooks.h"
#include "dspipe/dataset.h"

extern char** environ;

namespace dspipe::cachetest {

namespace fs = std::filesystem;

// A fresh directory on /dev/shm (a tmpfs), removed at scope exit.
class ShmDir {
 public:
  ShmDir() {
    char tmpl[] = "/dev/shm/dspipe-cache-test-XXXXXX";
    const char* p = ::mkdtemp(tmpl);
    if (p == nullptr) throw std::runtime_error("mkdtemp on /dev/shm failed");
    path_ = p;
  }
  ~ShmDir() {
    std::error_code ec;
    fs::remove_all(path_, ec);
  }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

inline std::string ReadAll(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

inline bool Contains(const std::string& s, const std::string& part) {
  return s.find(part) != std::string::npos;
}

// Every record of a dataset, CRC-checked, as strings.
inline std::vector<std::string> Records(const Dataset& ds) {
  std::vector<std::string> out;
  for (uint64_t i = 0; i < ds.size(); ++i) {
    Status s = ds.Read(i, [&](const RecordView& v) {
      out.emplace_back(reinterpret_cast<const char*>(v.image.data()), v.image.size());
      out.back().append(reinterpret_cast<const char*>(v.mask.data()), v.mask.size());
      return Status::OK();
    });
    EXPECT_TRUE(s.ok()) << s.ToString();
  }
  return out;
}

inline std::vector<std::string> Records(const std::string& path) {
  std::unique_ptr<Dataset> ds;
  DatasetOpenOptions o;
  o.verify_crc = true;
  Status s = Dataset::Open(path, o, &ds);
  EXPECT_TRUE(s.ok()) << s.ToString();
  return ds ? Records(*ds) : std::vector<std::string>{};
}

// ---- several processes (cache_tool: one AcquireCache per process)

struct Child {
  pid_t pid = -1;
  int out = -1;  // read end of its stdout + stderr (or -1 when they go to a file)
};

// Starts cache_tool with args; stdout+stderr to a pipe; `extra_env` ("NAME=value") goes first,
// so it wins over the same name in this process's environment (getenv takes the first).
// stdin is a pipe too (its write end in *stdin_w, or closed when null).
inline Child StartTool(const std::vector<std::string>& args,
                       const std::vector<std::string>& extra_env, int* stdin_w = nullptr) {
  std::vector<std::string> env_s = extra_env;
  for (char** e = environ; *e != nullptr; ++e) env_s.emplace_back(*e);
  std::vector<char*> envp;
  for (auto& e : env_s) envp.push_back(e.data());
  envp.push_back(nullptr);
  std::vector<std::string> argv_s = {CACHE_TOOL_PATH};
  argv_s.insert(argv_s.end(), args.begin(), args.end());
  std::vector<char*> argv;
  for (auto& a : argv_s) argv.push_back(a.data());
  argv.push_back(nullptr);
  int out[2], in[2];
  if (::pipe2(out, O_CLOEXEC) != 0 || ::pipe2(in, O_CLOEXEC) != 0) throw std::runtime_error("pipe");
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_adddup2(&fa, out[1], 1);
  posix_spawn_file_actions_adddup2(&fa, out[1], 2);
  posix_spawn_file_actions_adddup2(&fa, in[0], 0);
  Child c;
  const int rc = posix_spawn(&c.pid, argv[0], &fa, nullptr, argv.data(), envp.data());
  posix_spawn_file_actions_destroy(&fa);
  if (rc != 0) throw std::runtime_error("posix_spawn cache_tool failed");
  ::close(out[1]);
  ::close(in[0]);
  if (stdin_w) {
    *stdin_w = in[1];
  } else {
    ::close(in[1]);
  }
  c.out = out[0];
  return c;
}

// Reads the child's output until `needle` appears (true) or EOF (false). *text gets it all.
inline bool ReadUntil(int fd, const std::string& needle, std::string* text) {
  char buf[4096];
  while (!Contains(*text, needle)) {
    const ssize_t n = ::read(fd, buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    text->append(buf, static_cast<size_t>(n));
  }
  return true;
}

// Reads to EOF and reaps the child; returns its output; *code its exit status (-signal).
inline std::string Finish(Child* c, int* code, std::string text = "") {
  ReadUntil(c->out, "\x01never", &text);
  ::close(c->out);
  int st = 0;
  if (::waitpid(c->pid, &st, 0) != c->pid) throw std::runtime_error("waitpid");
  *code = WIFEXITED(st) ? WEXITSTATUS(st) : -WTERMSIG(st);
  return text;
}

inline bool WaitStopped(pid_t pid) {
  int st = 0;
  if (::waitpid(pid, &st, WUNTRACED) != pid) throw std::runtime_error("waitpid");
  return WIFSTOPPED(st);
}

// Holds a background copy right after its first file (the entry's lock held, its temp dir
// partly filled) until the test releases it, or, in kUntilCancelled mode, until the copy is
// cancelled (the loader that wanted it is being destroyed): a known point, not a guessed one.
class CopyGate {
 public:
  enum Mode { kUntilReleased, kUntilCancelled };
  explicit CopyGate(Mode mode) : mode_(mode) {
    cache::SetStepHookForTest([this](cache::Step step, const std::string&, size_t files_done,
                                     const cache::CancelToken* cancel) {
      if (step != cache::Step::kFileCopied || files_done != 1) return;
      std::unique_lock<std::mutex> lock(mu_);
      held_ = true;
      cv_.notify_all();
      if (mode_ == kUntilCancelled) {
        lock.unlock();
        ASSERT_NE(cancel, nullptr);
        cancel->WaitRequested();
        return;
      }
      cv_.wait(lock, [this] { return released_; });
    });
  }
  ~CopyGate() {
    Release();
    cache::SetStepHookForTest(nullptr);
  }
  void WaitHeld() {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait(lock, [this] { return held_; });
  }
  void Release() {
    std::lock_guard<std::mutex> lock(mu_);
    released_ = true;
    cv_.notify_all();
  }

 private:
  const Mode mode_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool held_ = false, released_ = false;
};

}  // namespace dspipe::cachetest
