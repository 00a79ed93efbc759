// SPDX-License-Identifier: Apache-2.0
// Internal to lib/cache: the seam tests use to stop a cache operation at a known durable step
// (and kill it there, or let another process race it). Production code never reads it from the
// environment: a test (or a test tool such as tests/cache/cache_tool) installs the hook.
#pragma once

#include <functional>
#include <string>

namespace dspipe::cache {

class CancelToken;  // cache/populate.h

// The durable steps of AcquireCache, in the order one open reaches them. A hook at a step sees
// the state that step made durable; a process killed there leaves exactly that state.
enum class Step {
  kLocked,         // E.lock is held (nothing else done for this entry yet)
  kReserved,       // the room check passed and the reservation (E.tmp/) is recorded
  kFileCopied,     // one more file of E.tmp/ is complete and fsynced (files_done counts them)
  kRecorded,       // E.tmp/'s completion record is written (every byte verified)
  kUseRecorded,    // E.used is written for the entry about to be committed
  kCommitted,      // E.tmp/ was renamed to E/ (the entry exists)
  kLeased,         // E.lease is held shared and E.lock is about to be released
  kEvictRenamed,   // an evicted entry E/ was renamed to E.tmp/ (not deleted yet)
  kOrphanRemoved,  // a dead process's E.tmp/ (or use record temp file) was removed
};
const char* StepName(Step step);

// Called on the thread doing the step, with the entry's name (not its path), the number of
// files complete (kFileCopied; 0 otherwise) and the copy's cancel token (null when the copy
// cannot be cancelled). Tests block here on a condition of their own.
using StepHook = std::function<void(Step step, const std::string& entry, size_t files_done,
                                    const CancelToken* cancel)>;

// Installs the hook (empty = none, the default). Thread-safe.
void SetStepHookForTest(StepHook hook);

// Calls the hook, when one is installed.
void RunStepHook(Step step, const std::string& entry, size_t files_done = 0,
                 const CancelToken* cancel = nullptr);

}  // namespace dspipe::cache
