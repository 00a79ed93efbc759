// SPDX-License-Identifier: Apache-2.0
// Test helper: one AcquireCache call in its own process, for the multi-process cache tests and
// the torture test.
//   cache_tool SRC ROOT [--limit BYTES] [--hold] [--stop-after-files N] [--steps] [--digest]
// Prints "result cached=C copied=K path=P" and then "reason R" on stdout. Exit 0 on OK, 1 with
// the error on stderr.
//   --hold               keeps the lease until stdin closes (a live reader in another process)
//   --stop-after-files N stops itself (SIGSTOP) right after the N-th file of its copy is complete,
//                        holding the entry's lock with the temp dir half full: a test waits for
//                        the stop (waitpid WUNTRACED) and kills it or lets another process race
//   --steps              at every durable step of the cache (cache/test_hooks.h) prints
//                        "step NAME ENTRY N" and waits for one byte on stdin before going on:
//                        the torture test's driver kills it there or lets it go ('g')
//   --digest             then reads every file below the path it got (the copy, or the source
//                        in place) and prints "digest HEX" (crc32 over names and bytes, LMDB
//                        reader tables skipped), for comparison with the source's
// Installs the hooks itself: the library never reads a test setting from the environment.
#include <signal.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "cache/test_hooks.h"
#include "cache_checks.h"
#include "dspipe/cache.h"

int main(int argc, char** argv) {
  if (argc < 3) {
    std::fprintf(stderr,
                 "usage: cache_tool SRC ROOT [--limit BYTES] [--hold] [--stop-after-files N] "
                 "[--steps] [--digest]\n");
    return 2;
  }
  dspipe::CacheOptions o;
  o.mode = argv[2];
  o.margin = 0;
  bool hold = false, steps = false, digest = false;
  long stop_after = 0;
  for (int i = 3; i < argc; ++i) {
    if (std::strcmp(argv[i], "--hold") == 0) hold = true;
    if (std::strcmp(argv[i], "--steps") == 0) steps = true;
    if (std::strcmp(argv[i], "--digest") == 0) digest = true;
    if (std::strcmp(argv[i], "--limit") == 0 && i + 1 < argc) {
      o.cache_limit = std::strtoull(argv[++i], nullptr, 10);
    }
    if (std::strcmp(argv[i], "--stop-after-files") == 0 && i + 1 < argc) {
      stop_after = std::strtol(argv[++i], nullptr, 10);
    }
  }
  if (stop_after > 0 || steps) {
    dspipe::cache::SetStepHookForTest([stop_after, steps](dspipe::cache::Step step,
                                                          const std::string& entry, size_t files,
                                                          const dspipe::cache::CancelToken*) {
      if (stop_after > 0 && step == dspipe::cache::Step::kFileCopied &&
          files == static_cast<size_t>(stop_after)) {
        ::raise(SIGSTOP);
      }
      if (steps) {
        std::printf("step %s %s %zu\n", dspipe::cache::StepName(step), entry.c_str(), files);
        std::fflush(stdout);
        char c = 0;
        if (::read(0, &c, 1) != 1) std::_Exit(3);  // the driver is gone
      }
    });
  }
  dspipe::CacheResult r;
  std::unique_ptr<dspipe::CacheLease> lease;
  dspipe::Status s = dspipe::AcquireCache(argv[1], o, &r, &lease);
  if (!s.ok()) {
    std::fprintf(stderr, "cache_tool: %s\n", s.ToString().c_str());
    return 1;
  }
  std::printf("result cached=%d copied=%d path=%s\n", r.cached ? 1 : 0, r.copied ? 1 : 0,
              r.path.c_str());
  std::printf("reason %s\n", r.reason.c_str());
  if (digest) std::printf("digest %08x\n", dspipe::cachetest::DatasetDigest(r.path));
  std::fflush(stdout);
  if (hold) {
    char buf[64];
    while (std::fread(buf, 1, sizeof buf, stdin) > 0) {
    }
  }
  return 0;
}
