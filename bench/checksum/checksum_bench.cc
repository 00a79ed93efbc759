// SPDX-License-Identifier: Apache-2.0
// checksum_bench: the checksums a streamed shard costs, side by side in one run.
//
//   checksum_bench [--mib 136] [--rounds 7]
//
// One thread, one buffer of --mib MiB of pseudo-random bytes (the size of the stream bench's
// dataset), --rounds rounds; each round computes, in an order that rotates by round: zlib's
// crc32 (what dspipe used before), dspipe::core::Crc32 (libdeflate's, lib/core/checksum.cc: the
// cache's completion-record read-back and the record checksum), and dspipe::core::Sha256 (OpenSSL:
// every fetched byte is hashed against the manifest). Prints GB/s of thread CPU time (other
// processes sharing the cores do not inflate it) as median (min-max) and the per-round ratio Crc32
// / zlib. Checks that both CRCs agree.
#include <zlib.h>

#include <CLI/CLI.hpp>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "../cpu_time.h"
#include "../series.h"
#include "core/checksum.h"

int main(int argc, char** argv) {
  CLI::App app{"checksum_bench: CRC-32 (libdeflate vs zlib) and sha256 throughput, one run"};
  size_t mib = 136;
  int rounds = 7;
  app.add_option("--mib", mib, "buffer size in MiB")->check(CLI::Range(1, 4096));
  app.add_option("--rounds", rounds, "rounds (median and min-max over them)")
      ->check(CLI::Range(1, 1000));
  CLI11_PARSE(app, argc, argv);

  std::vector<uint8_t> buf(mib << 20);
  std::mt19937 rng(23);
  for (uint8_t& b : buf) b = static_cast<uint8_t>(rng() & 0xFF);

  uint32_t crc_zlib = 0, crc_dspipe = 0;
  std::string sha;
  struct Row {
    const char* name;
    std::function<void()> run;
    Series gbs;
  };
  std::vector<Row> rows = {
      {"zlib crc32",
       [&] {
         crc_zlib = static_cast<uint32_t>(crc32(0, buf.data(), static_cast<uInt>(buf.size())));
       },
       {}},
      {"dspipe::Crc32 (libdeflate)", [&] { crc_dspipe = dspipe::core::Crc32(buf); }, {}},
      {"dspipe::Sha256 (OpenSSL)",
       [&] {
         dspipe::core::Sha256 h;
         h.Update(reinterpret_cast<const char*>(buf.data()), buf.size());
         sha = h.HexDigest();
       },
       {}},
  };
  Series ratio;
  for (int r = 0; r < rounds; ++r) {
    double secs[3] = {0, 0, 0};
    for (size_t k = 0; k < rows.size(); ++k) {
      const size_t i = (k + static_cast<size_t>(r)) % rows.size();
      const double t0 = ThreadCpuSeconds();
      rows[i].run();
      secs[i] = ThreadCpuSeconds() - t0;
      rows[i].gbs.v.push_back(static_cast<double>(buf.size()) / secs[i] / 1e9);
    }
    ratio.v.push_back(secs[0] / secs[1]);
    if (crc_zlib != crc_dspipe) {
      std::fprintf(stderr, "checksum_bench: CRCs differ: zlib %08x, dspipe %08x\n", crc_zlib,
                   crc_dspipe);
      return 1;
    }
  }
  std::printf("%zu MiB, %d rounds, one thread, GB/s of thread CPU time, median (min-max)\n", mib,
              rounds);
  for (const Row& row : rows) {
    std::printf("  %-28s %6.2f (%.2f-%.2f)\n", row.name, row.gbs.Median(), row.gbs.Min(),
                row.gbs.Max());
  }
  std::printf("  Crc32 / zlib speed            %6.2fx (%.2f-%.2f)  crc32 %08x, sha256 %.16s...\n",
              ratio.Median(), ratio.Min(), ratio.Max(), crc_dspipe, sha.c_str());
  return 0;
}
