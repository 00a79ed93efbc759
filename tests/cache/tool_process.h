// SPDX-License-Identifier: Apache-2.0
// cache_tool child processes for the cache tests and the torture test: started with pipes on
// stdin and stdout+stderr, read until a line appears, reaped. No gtest: the torture test's
// driver uses it too. Header-only.
#pragma once

#include <fcntl.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <stdexcept>
#include <string>
#include <vector>

extern char** environ;

namespace dspipe::cachetest {

struct Child {
  pid_t pid = -1;
  int out = -1;  // read end of its stdout + stderr (or -1 when they go to a file)
};

// Starts the cache_tool at `tool` with args; stdout+stderr to a pipe; `extra_env` ("NAME=value")
// goes first, so it wins over the same name in this process's environment (getenv takes the first).
// stdin is a pipe too (its write end in *stdin_w, or closed when null).
inline Child StartToolAt(const std::string& tool, const std::vector<std::string>& args,
                         const std::vector<std::string>& extra_env, int* stdin_w = nullptr) {
  std::vector<std::string> env_s = extra_env;
  for (char** e = environ; *e != nullptr; ++e) env_s.emplace_back(*e);
  std::vector<char*> envp;
  for (auto& e : env_s) envp.push_back(e.data());
  envp.push_back(nullptr);
  std::vector<std::string> argv_s = {tool};
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
  while (text->find(needle) == std::string::npos) {
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

}  // namespace dspipe::cachetest
