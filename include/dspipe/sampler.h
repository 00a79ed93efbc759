// Which samples a rank sees in which order: per-epoch shuffling and sharding across ranks.
//
// Epoch e's order is a function of (seed, epoch, dataset size, shards, rule) only: every rank
// computes the same global permutation and takes its share, so no communication is needed and
// a restarted process recomputes exactly the same order.
//
// Sharding (num_shards = S ranks, N samples, global order P = permutation or 0..N-1): rank r
// takes positions r, r+S, r+2S, ... of the (possibly padded or truncated) global order, like
// PyTorch's DistributedSampler. What happens to the N mod S leftover samples:
//   kPad    (default) P is extended by wrapping around to ceil(N/S)*S entries, so every rank
//           gets ceil(N/S) samples; the first (ceil(N/S)*S - N) samples of P are seen twice in
//           that epoch, every other sample exactly once. Equal per-rank counts keep
//           collective ops (DDP all-reduce) in step.
//   kDrop   P is cut to floor(N/S)*S entries; the last N mod S samples of P (a different set
//           each shuffled epoch) are not seen in that epoch; every other sample exactly once.
//   kUneven nothing is added or dropped: every sample exactly once; the first N mod S ranks get
//           one sample more than the others. Only safe when ranks need not stay in step.
//
// Thread-safety: immutable after construction; all methods are const and thread-safe.
#pragma once

#include <cstdint>
#include <vector>

#include "dspipe/status.h"

namespace dspipe {

enum class RemainderRule { kPad, kDrop, kUneven };
const char* RemainderRuleName(RemainderRule rule);

struct SamplerOptions {
  // Shuffle with a fresh permutation every epoch. Default true. false: dataset order.
  bool shuffle = true;
  // Permutation seed; epoch e's permutation depends on (seed, e) only. Default 0.
  uint64_t seed = 0;
  // Number of ranks (>= 1) and this rank (0 <= shard_id < num_shards). Default 1 / 0.
  int num_shards = 1;
  int shard_id = 0;
  // What happens to the samples that do not divide evenly across ranks (see above).
  RemainderRule remainder = RemainderRule::kPad;
};

class Sampler {
 public:
  // Validates the options against a dataset of `dataset_size` samples. Errors: InvalidArgument
  // naming the field (bad shard id, empty dataset, kDrop with fewer samples than shards).
  static Status Create(uint64_t dataset_size, const SamplerOptions& options, Sampler* out);

  // Samples this rank sees per epoch (the same every epoch).
  uint64_t samples_per_epoch() const { return per_rank_; }
  uint64_t dataset_size() const { return size_; }
  const SamplerOptions& options() const { return options_; }

  // Dataset indices this rank visits in epoch `epoch`, in order (size samples_per_epoch()).
  std::vector<uint64_t> EpochOrder(uint64_t epoch) const;
  // The global order of epoch `epoch` before sharding: a permutation of 0..N-1.
  std::vector<uint64_t> GlobalOrder(uint64_t epoch) const;

 private:
  uint64_t size_ = 0;
  uint64_t per_rank_ = 0;
  SamplerOptions options_;
};

}  // namespace dspipe
