// SPDX-License-Identifier: Apache-2.0
// dspipe._dspipe._stop_after_commits_for_test(n): the builder's test seam (lib/convert/
// test_hooks.h) for tests/python/test_ray.py, whose Ray workers install it at start-up
// (runtime_env worker_process_setup_hook) so that each shard task stops itself (SIGSTOP) right
// after its n-th durable record commit: the driver then kills or resumes it, with no timing.
// The only binding that is not public API (the leading underscore); nothing in dspipe calls it,
// and n = 0 removes the hook.
#include "convert/test_hooks.h"

#include <nanobind/nanobind.h>

#include <csignal>
#include <cstdint>

#include "bindings.h"

namespace dspipe {

void RegisterTestHooks(nanobind::module_& m) {
  m.def("_stop_after_commits_for_test", [](uint64_t n) {
    convert::TestHooks hooks;
    if (n > 0) {
      hooks.after_record_commit = [n](uint64_t commits) {
        if (commits == n) ::raise(SIGSTOP);
      };
    }
    convert::SetTestHooks(std::move(hooks));
  });
}

}  // namespace dspipe
