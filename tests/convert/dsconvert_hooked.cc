// SPDX-License-Identifier: Apache-2.0
// dsconvert with the builder's test seam (lib/convert/test_hooks.h) installed from a leading
// flag, for the kill/resume tests:
//   dsconvert_hooked --stop-after-commits N <dsconvert arguments...>
// runs `dsconvert <arguments...>` and stops itself (SIGSTOP) right after its N-th record commit
// is durable. The test waits for that stop (waitpid WUNTRACED: WaitStopped in test_support.h)
// and kills the process there, or reads its state and lets it continue (SIGCONT): the kill
// lands at a known committed state instead of a guessed one (a file size or a sleep). Without
// the flag it is plain dsconvert.
#include <signal.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "cli.h"
#include "convert/test_hooks.h"

int main(int argc, char** argv) {
  if (argc >= 3 && std::strcmp(argv[1], "--stop-after-commits") == 0) {
    char* end = nullptr;
    const unsigned long long n = std::strtoull(argv[2], &end, 10);
    if (*argv[2] == '\0' || *end != '\0' || n == 0) {
      std::fprintf(stderr, "dsconvert_hooked: --stop-after-commits needs a count >= 1, got '%s'\n",
                   argv[2]);
      return 2;
    }
    dspipe::convert::TestHooks hooks;
    hooks.after_record_commit = [n](uint64_t commits) {
      if (commits == n) ::raise(SIGSTOP);
    };
    dspipe::convert::SetTestHooks(std::move(hooks));
    argv[2] = argv[0];  // the program name, then the dsconvert arguments
    return dspipe::cli::DsconvertMain(argc - 2, argv + 2);
  }
  return dspipe::cli::DsconvertMain(argc, argv);
}
