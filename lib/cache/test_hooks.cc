// SPDX-License-Identifier: Apache-2.0
// The test seam of lib/cache (test_hooks.h).
#include "cache/test_hooks.h"

#include <mutex>

namespace dspipe::cache {
namespace {

std::mutex& HookMu() {
  static std::mutex mu;
  return mu;
}
StepHook& Hook() {
  static StepHook hook;
  return hook;
}

}  // namespace

const char* StepName(Step step) {
  switch (step) {
    case Step::kLocked:
      return "locked";
    case Step::kReserved:
      return "reserved";
    case Step::kFileCopied:
      return "file-copied";
    case Step::kRecorded:
      return "recorded";
    case Step::kUseRecorded:
      return "use-recorded";
    case Step::kCommitted:
      return "committed";
    case Step::kLeased:
      return "leased";
    case Step::kEvictRenamed:
      return "evict-renamed";
    case Step::kOrphanRemoved:
      return "orphan-removed";
  }
  return "?";
}

void SetStepHookForTest(StepHook hook) {
  std::lock_guard<std::mutex> lock(HookMu());
  Hook() = std::move(hook);
}

void RunStepHook(Step step, const std::string& entry, size_t files_done,
                 const CancelToken* cancel) {
  StepHook hook;
  {
    std::lock_guard<std::mutex> lock(HookMu());
    hook = Hook();
  }
  if (hook) hook(step, entry, files_done, cancel);
}

}  // namespace dspipe::cache
