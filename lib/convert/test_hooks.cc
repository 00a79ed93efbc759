// SPDX-License-Identifier: Apache-2.0
// The test seam of lib/convert (test_hooks.h).
#include "convert/test_hooks.h"

#include <mutex>
#include <utility>

namespace dspipe::convert {
namespace {

std::mutex& HooksMu() {
  static std::mutex mu;
  return mu;
}
TestHooks& Hooks() {
  static TestHooks hooks;
  return hooks;
}
uint64_t& Commits() {  // guarded by HooksMu()
  static uint64_t commits = 0;
  return commits;
}

}  // namespace

void SetTestHooks(TestHooks hooks) {
  std::lock_guard<std::mutex> lock(HooksMu());
  Hooks() = std::move(hooks);
  Commits() = 0;
}

void RunAfterRecordCommit() {
  std::function<void(uint64_t)> hook;
  uint64_t commits = 0;
  {
    std::lock_guard<std::mutex> lock(HooksMu());
    commits = ++Commits();
    hook = Hooks().after_record_commit;
  }
  if (hook) hook(commits);
}

}  // namespace dspipe::convert
