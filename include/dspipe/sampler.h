// SPDX-License-Identifier: Apache-2.0
// Which samples a rank sees in which order: per-epoch shuffling and sharding across ranks.
//
// Epoch e's order is a function of (seed, epoch, dataset / shard sizes, ranks, order, rule)
// only: every rank computes its share of the same global order, so no communication is needed
// and a restarted process recomputes exactly the same order. docs/SCALE.md has the reasoning.
//
// Three orders (SamplerOptions::order; S = world_size ranks, N samples):
//   kGlobal (default) the global order P is one permutation of 0..N-1 (Fisher-Yates, O(N) time
//           and memory per rank and epoch); rank r takes positions r, r+S, r+2S, ... of P, like
//           PyTorch's DistributedSampler.
//   kBlocks P cuts 0..N-1 into blocks of block_size consecutive indices, puts the blocks in the
//           order of a permutation of the blocks and each block's indices in the order of the
//           block's own permutation (all keyed by (seed, epoch)). Rank r takes the contiguous
//           positions [r*N/S, (r+1)*N/S) of P (boundaries as below) and computes only the blocks
//           overlapping them: O(N/block_size + N/S) per rank and epoch. Consecutive samples of a
//           rank come from one block: build the dataset with --shuffle.
//   kWeighted P is num_samples draws of indices with probability proportional to weights[i] -
//           with replacement (each draw independent, as torch's WeightedRandomSampler), or
//           without (an index at most once: Efraimidis-Spirakis keys, the order of the keys).
//           Then cut across ranks as kGlobal. The weights are per sample (a class balance, a
//           slice's foreground share); a weight 0 is never drawn. shuffle must be true.
//   kShards the blocks are the dataset's shard files (Create with shard sizes). A rank gets whole
//           shards: shard k of the epoch's shard permutation goes to rank k mod S (with shuffle
//           off: shard k, every epoch), so it reads only its shards' files; its samples are
//           shuffled among themselves. Needs at least S shards (InvalidArgument otherwise) and
//           no empty shard. The per-rank totals differ with the shard sizes and with which
//           shards an epoch gives a rank; see the rules below.
// With shuffle false every order is the dataset order 0..N-1 (kGlobal: strided across ranks,
// kBlocks: a contiguous range per rank, kShards: the rank's shards, in shard order).
//
// What happens to the samples that do not divide evenly across ranks:
//   kPad    (default) every rank gets the same count and every sample is seen at least once.
//           kGlobal / kBlocks: P is extended by wrapping around to ceil(N/S)*S entries, so the
//           first (ceil(N/S)*S - N) samples of P are seen twice in that epoch. kShards: every
//           rank gets the total of the ceil(#shards/S) largest shards (the most any rank can
//           be given); a rank with fewer samples continues from the start of its own shuffled
//           samples (repeating its own samples: it still reads only its shards).
//   kDrop   every rank gets the same count, no sample twice. kGlobal / kBlocks: P is cut to
//           floor(N/S)*S entries; its last N mod S samples (a different set each shuffled
//           epoch) are not seen. kShards: every rank gets the total of the floor(#shards/S)
//           smallest shards (the least any rank can be given) and leaves out the rest of its
//           shuffled samples: with #shards a multiple of S and equal shards nothing is dropped,
//           otherwise up to a shard's worth per rank.
//   kUneven nothing is added or dropped: every sample exactly once. kGlobal / kBlocks: the first
//           N mod S ranks get one sample more than the others. kShards: each rank gets all
//           the samples of its shards, so counts differ by rank and by epoch
//           (SamplesInEpoch). Only safe when ranks need not stay in step.
//
// Thread-safety: immutable after construction; all methods are const and thread-safe.
#pragma once

#include <cstdint>
#include <vector>

#include "dspipe/status.h"

namespace dspipe {

enum class RemainderRule { kPad, kDrop, kUneven };
const char* RemainderRuleName(RemainderRule rule);

enum class SampleOrder { kGlobal, kBlocks, kShards, kWeighted };
// "global" | "blocks" | "shards" | "weighted".
const char* SampleOrderName(SampleOrder order);

struct SamplerOptions {
  // Shuffle with a fresh permutation every epoch. Default true. false: dataset order.
  bool shuffle = true;
  // Permutation seed; epoch e's permutation depends on (seed, e) only. Default 0.
  uint64_t seed = 0;
  // Number of ranks (>= 1) and this rank (0 <= rank < world_size). Default 1 / 0.
  int world_size = 1;
  int rank = 0;
  // What happens to the samples that do not divide evenly across ranks (see above).
  RemainderRule remainder = RemainderRule::kPad;
  // How the epoch's order is built and cut across ranks (see above). Default kGlobal.
  SampleOrder order = SampleOrder::kGlobal;
  // kBlocks: indices per block, >= 1. Default 4096 (10^8 samples: 24 415 blocks, 195 KB of
  // block order per rank and epoch). Smaller mixes more, costs O(N / block_size) per rank.
  uint64_t block_size = 4096;
  // kWeighted: one weight per dataset sample (>= 0, finite, not all 0); the draws per epoch
  // before the cut across ranks (0 = the dataset's size with replacement, every sample of
  // nonzero weight once without; without replacement at most that many); with replacement
  // (default) or without.
  std::vector<double> weights;
  uint64_t num_samples = 0;
  bool replacement = true;
};

class Sampler {
 public:
  // Validates the options against a dataset of `dataset_size` samples. Errors: InvalidArgument
  // naming the field (bad shard id, empty dataset, kDrop with fewer samples than shards).
  // The dataset is one shard of dataset_size samples (kShards then needs world_size == 1).
  static Status Create(uint64_t dataset_size, const SamplerOptions& options, Sampler* out);
  // The dataset is shard_sizes.size() shard files of these record counts, in index order
  // (DatasetInfo::shard_sizes). Only kShards uses the split; the other orders see the total.
  static Status Create(const std::vector<uint64_t>& shard_sizes, const SamplerOptions& options,
                       Sampler* out);

  // Samples this rank sees in epoch `epoch` (EpochOrder(epoch).size()). The same every epoch
  // except with kShards + kUneven.
  uint64_t SamplesInEpoch(uint64_t epoch) const;
  // SamplesInEpoch(0).
  uint64_t samples_per_epoch() const { return SamplesInEpoch(0); }
  uint64_t dataset_size() const { return size_; }
  const std::vector<uint64_t>& shard_sizes() const { return shard_sizes_; }
  const SamplerOptions& options() const { return options_; }

  // Dataset indices this rank visits in epoch `epoch`, in order (size SamplesInEpoch(epoch)).
  std::vector<uint64_t> EpochOrder(uint64_t epoch) const;
  // The global order of epoch `epoch` before the cut across ranks: a permutation of 0..N-1
  // (kShards: the ranks' shards in shard-permutation order, unshuffled within), to see how the
  // ranks' orders fit together. O(N) in time and memory: EpochOrder does not build it.
  std::vector<uint64_t> GlobalOrder(uint64_t epoch) const;
  // kShards: the shards (indices into shard_sizes()) this rank reads in epoch `epoch`, in the
  // order their samples are concatenated before the rank's shuffle. Other orders: every shard
  // this rank's EpochOrder(epoch) touches, ascending.
  std::vector<uint64_t> EpochShards(uint64_t epoch) const;

 private:
  // kGlobal / kBlocks: positions [*begin, *end) of the padded/truncated P this rank takes.
  void Range(uint64_t* begin, uint64_t* end) const;
  // Appends P[lo..hi) (hi <= N) to *out, computing only the blocks overlapping it (kBlocks).
  void AppendBlocks(uint64_t epoch, const std::vector<uint64_t>& block_order, uint64_t lo,
                    uint64_t hi, std::vector<uint64_t>* out) const;
  std::vector<uint64_t> BlockOrder(uint64_t epoch) const;
  std::vector<uint64_t> ShardOrder(uint64_t epoch) const;
  std::vector<uint64_t> WeightedOrder(uint64_t epoch) const;
  std::vector<double> cumulative_;  // kWeighted with replacement: running sums of the weights

  uint64_t size_ = 0;
  uint64_t draws_ = 0;     // entries of the global order P: size_, or kWeighted's num_samples
  uint64_t per_rank_ = 0;  // kPad / kDrop (every order), kUneven (kGlobal / kBlocks)
  std::vector<uint64_t> shard_sizes_;
  std::vector<uint64_t> shard_begin_;  // first index of each shard
  SamplerOptions options_;
};

}  // namespace dspipe
