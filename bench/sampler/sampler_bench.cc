// SPDX-License-Identifier: Apache-2.0
// sampler_bench: how long one rank takes to compute its epoch order, and how much memory.
//
//   sampler_bench --n 100000000 --ranks 100 --rank 50 --order blocks [--block-size 4096]
//                 [--shards 1000] [--epochs 3] [--seed 0]
//
// Creates the Sampler (order global, blocks or shards; --shards equal shards for "shards") and
// calls EpochOrder for epochs 0..E-1, timing each call. Prints one JSON line: the options, the
// seconds of each epoch, the samples this rank got, a checksum of its order (so the work cannot
// be optimized away) and the process's peak RSS (getrusage ru_maxrss, KiB). Run one
// configuration per process so the peak RSS is that configuration's.
#include <sys/resource.h>

#include <CLI/CLI.hpp>
#include <chrono>
#include <cstdio>
#include <string>
#include <vector>

#include "dspipe/sampler.h"

int main(int argc, char** argv) {
  CLI::App app{"sampler_bench: one rank's EpochOrder time and peak RSS"};
  uint64_t n = 10'000'000, block_size = 4096, shards = 1000, seed = 0;
  int ranks = 100, rank = 50, epochs = 3;
  std::string order = "blocks";
  app.add_option("--n", n, "dataset size")->capture_default_str();
  app.add_option("--ranks", ranks, "number of ranks")->capture_default_str();
  app.add_option("--rank", rank, "this rank")->capture_default_str();
  app.add_option("--order", order, "global | blocks | shards")
      ->check(CLI::IsMember({"global", "blocks", "shards"}))
      ->capture_default_str();
  app.add_option("--block-size", block_size, "order blocks: indices per block")
      ->capture_default_str();
  app.add_option("--shards", shards, "order shards: equal shard files")->capture_default_str();
  app.add_option("--epochs", epochs, "epochs timed")->capture_default_str();
  app.add_option("--seed", seed, "sampler seed")->capture_default_str();
  CLI11_PARSE(app, argc, argv);

  dspipe::SamplerOptions o;
  o.seed = seed;
  o.world_size = ranks;
  o.rank = rank;
  o.block_size = block_size;
  o.order = order == "global"   ? dspipe::SampleOrder::kGlobal
            : order == "blocks" ? dspipe::SampleOrder::kBlocks
                                : dspipe::SampleOrder::kShards;
  std::vector<uint64_t> sizes{n};
  if (o.order == dspipe::SampleOrder::kShards) {
    sizes.assign(shards, 0);
    for (uint64_t k = 0; k < shards; ++k) sizes[k] = n * (k + 1) / shards - n * k / shards;
  }
  dspipe::Sampler sampler;
  dspipe::Status s = dspipe::Sampler::Create(sizes, o, &sampler);
  if (!s.ok()) {
    std::fprintf(stderr, "sampler_bench: %s\n", s.ToString().c_str());
    return 1;
  }
  std::string secs;
  uint64_t samples = 0, checksum = 0;
  for (int e = 0; e < epochs; ++e) {
    const auto t0 = std::chrono::steady_clock::now();
    const std::vector<uint64_t> mine = sampler.EpochOrder(static_cast<uint64_t>(e));
    const double dt = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    samples = mine.size();
    for (uint64_t i : mine) checksum = checksum * 31 + i;
    secs += (secs.empty() ? "" : ", ") + std::to_string(dt);
  }
  rusage ru{};
  getrusage(RUSAGE_SELF, &ru);
  std::printf(
      "{\"order\": \"%s\", \"n\": %llu, \"ranks\": %d, \"rank\": %d, \"block_size\": %llu, "
      "\"seconds\": [%s], \"samples\": %llu, \"checksum\": %llu, \"max_rss_kib\": %ld}\n",
      order.c_str(), static_cast<unsigned long long>(n), ranks, rank,
      static_cast<unsigned long long>(block_size), secs.c_str(),
      static_cast<unsigned long long>(samples), static_cast<unsigned long long>(checksum),
      ru.ru_maxrss);
  return 0;
}
