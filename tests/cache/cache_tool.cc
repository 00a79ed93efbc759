// Test helper: one AcquireCache call in its own process, for the multi-process cache tests.
//   cache_tool SRC ROOT [--limit BYTES] [--hold]
// Prints "result cached=C copied=K path=P" on stdout. --hold keeps the lease until stdin
// closes (a live reader in another process). Exit 0 on OK, 1 with the error on stderr.
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "dspipe/cache.h"

int main(int argc, char** argv) {
  if (argc < 3) {
    std::fprintf(stderr, "usage: cache_tool SRC ROOT [--limit BYTES] [--hold]\n");
    return 2;
  }
  dspipe::CacheOptions o;
  o.mode = argv[2];
  o.margin = 0;
  bool hold = false;
  for (int i = 3; i < argc; ++i) {
    if (std::strcmp(argv[i], "--hold") == 0) hold = true;
    if (std::strcmp(argv[i], "--limit") == 0 && i + 1 < argc) {
      o.cache_limit = std::strtoull(argv[++i], nullptr, 10);
    }
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
  std::fflush(stdout);
  if (hold) {
    char buf[64];
    while (std::fread(buf, 1, sizeof buf, stdin) > 0) {
    }
  }
  return 0;
}
