// SPDX-License-Identifier: Apache-2.0
// Internal to lib/convert: the seam tests use to stop a build at a known durable state (and
// kill it there). Production code never reads it from the environment: a test (or a test tool
// such as tests/convert/dsconvert_hooked) installs the hooks; without them nothing happens.
#pragma once

#include <cstdint>
#include <functional>

namespace dspipe::convert {

struct TestHooks {
  // Called on the committing thread right after a batch of records, with the cursor that
  // describes them, is durable (a process killed inside the hook leaves exactly that state).
  // `commits`: this process's record commits since the hooks were installed, 1 for the first.
  // A test stops the process here (raise(SIGSTOP)) or blocks on a condition of its own.
  std::function<void(uint64_t commits)> after_record_commit;
};

// Installs the hooks (empty = none, the default) and restarts the commit count. Thread-safe.
void SetTestHooks(TestHooks hooks);

// Counts one record commit and calls after_record_commit, when installed.
void RunAfterRecordCommit();

}  // namespace dspipe::convert
