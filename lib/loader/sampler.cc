// SPDX-License-Identifier: Apache-2.0
#include "dspipe/sampler.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <string>

#include "core/rng.h"

namespace dspipe {

const char* RemainderRuleName(RemainderRule rule) {
  switch (rule) {
    case RemainderRule::kPad:
      return "pad";
    case RemainderRule::kDrop:
      return "drop";
    case RemainderRule::kUneven:
      return "uneven";
  }
  return "?";
}

const char* SampleOrderName(SampleOrder order) {
  switch (order) {
    case SampleOrder::kGlobal:
      return "global";
    case SampleOrder::kBlocks:
      return "blocks";
    case SampleOrder::kShards:
      return "shards";
    case SampleOrder::kWeighted:
      return "weighted";
  }
  return "?";
}

using core::Mix64;
using core::Rng;

namespace {

// Stream keys: "SHUFF" (kGlobal, unchanged since the first release: part of the resume
// contract), then one per kind of permutation of the other orders.
constexpr uint64_t kGlobalStream = 0x5348554646ULL;        // "SHUFF"
constexpr uint64_t kBlockOrderStream = 0x424C4B4F5244ULL;  // "BLKORD"
constexpr uint64_t kInBlockStream = 0x424C4B494EULL;       // "BLKIN"
constexpr uint64_t kShardOrderStream = 0x5348524452ULL;    // "SHRDR"
constexpr uint64_t kInRankStream = 0x52414E4BULL;          // "RANK"
constexpr uint64_t kWeightedStream = 0x5745494748ULL;      // "WEIGH"

void Shuffle(Rng rng, std::vector<uint64_t>* v) {
  for (uint64_t i = v->size(); i > 1; --i) std::swap((*v)[i - 1], (*v)[rng.Below(i)]);
}

}  // namespace

Status Sampler::Create(uint64_t dataset_size, const SamplerOptions& options, Sampler* out) {
  return Create(std::vector<uint64_t>{dataset_size}, options, out);
}

Status Sampler::Create(const std::vector<uint64_t>& shard_sizes, const SamplerOptions& options,
                       Sampler* out) {
  const int s = options.world_size;
  uint64_t dataset_size = 0;
  for (uint64_t n : shard_sizes) dataset_size += n;
  if (dataset_size == 0) return Status::InvalidArgument("sampler: the dataset is empty");
  if (s < 1) {
    return Status::InvalidArgument("sampler: " + Opt("SamplerOptions::world_size") +
                                   " must be >= 1, got " + std::to_string(s));
  }
  if (options.rank < 0 || options.rank >= s) {
    return Status::InvalidArgument("sampler: " + Opt("SamplerOptions::rank") + " must be in [0, " +
                                   Opt("SamplerOptions::world_size", std::to_string(s)) +
                                   "), got " + std::to_string(options.rank));
  }
  const uint64_t shards = static_cast<uint64_t>(s);
  const uint64_t rank = static_cast<uint64_t>(options.rank);
  if (options.order == SampleOrder::kBlocks && options.block_size == 0) {
    return Status::InvalidArgument("sampler: " + Opt("SamplerOptions::block_size") +
                                   " must be >= 1 with " + Opt("SamplerOptions::order", "blocks"));
  }
  const uint64_t files = shard_sizes.size();
  if (options.order == SampleOrder::kShards) {
    if (files < shards) {
      return Status::InvalidArgument(
          "sampler: " + Opt("SamplerOptions::order", "shards") +
          " gives every rank whole shard files, but the dataset has " + std::to_string(files) +
          " shard" + (files == 1 ? "" : "s") + " for " + std::to_string(shards) + " ranks (" +
          Opt("SamplerOptions::world_size") + "); rebuild it with at least " +
          std::to_string(shards) + " shards (" +
          Opt("BuildOptions::shards", std::to_string(shards)) + "), or use " +
          Opt("SamplerOptions::order", "blocks"));
    }
    for (uint64_t k = 0; k < files; ++k) {
      if (shard_sizes[k] == 0) {
        return Status::InvalidArgument("sampler: " + Opt("SamplerOptions::order", "shards") +
                                       ": shard " + std::to_string(k) + " of the dataset is empty");
      }
    }
  }
  uint64_t draws = dataset_size;
  std::vector<double> cumulative;
  if (options.order == SampleOrder::kWeighted) {
    const std::string w = Opt("SamplerOptions::weights");
    if (options.weights.size() != dataset_size) {
      return Status::InvalidArgument("sampler: " + w + " has " +
                                     std::to_string(options.weights.size()) +
                                     " values for a dataset of " + std::to_string(dataset_size) +
                                     " samples: give one weight per sample, in index order");
    }
    if (!options.shuffle) {
      return Status::InvalidArgument("sampler: " + Opt("SamplerOptions::order", "weighted") +
                                     " draws at random: leave " +
                                     Opt("SamplerOptions::shuffle", "true"));
    }
    double total = 0;
    uint64_t nonzero = 0;
    cumulative.reserve(options.weights.size());
    for (size_t i = 0; i < options.weights.size(); ++i) {
      const double x = options.weights[i];
      if (!std::isfinite(x) || x < 0) {
        return Status::InvalidArgument("sampler: " + w + "[" + std::to_string(i) + "] is " +
                                       std::to_string(x) + ": weights are finite and >= 0");
      }
      total += x;
      nonzero += x > 0;
      cumulative.push_back(total);
    }
    if (!(total > 0)) {
      return Status::InvalidArgument("sampler: every one of " + w + " is 0: nothing to draw");
    }
    // Default: the dataset's size, or (without replacement) every sample of nonzero weight once.
    draws = options.num_samples > 0 ? options.num_samples
            : options.replacement   ? dataset_size
                                    : nonzero;
    if (!options.replacement && draws > nonzero) {
      return Status::InvalidArgument(
          "sampler: " + std::to_string(draws) + " draws without replacement (" +
          Opt("SamplerOptions::replacement", "false") + ") from " + std::to_string(nonzero) +
          " samples of nonzero weight: set " + Opt("SamplerOptions::num_samples") +
          " <= " + std::to_string(nonzero) + ", or draw with replacement");
    }
    if (!options.replacement) cumulative.clear();
  } else if (!options.weights.empty()) {
    return Status::InvalidArgument("sampler: " + Opt("SamplerOptions::weights") + " are for " +
                                   Opt("SamplerOptions::order", "weighted") + "; the order is " +
                                   SampleOrderName(options.order));
  }
  uint64_t per_rank = 0;
  if (options.order == SampleOrder::kShards) {
    std::vector<uint64_t> sorted = shard_sizes;
    std::sort(sorted.begin(), sorted.end());
    switch (options.remainder) {
      case RemainderRule::kPad:  // the ceil(files / shards) largest
        for (uint64_t k = 0; k < (files + shards - 1) / shards; ++k) {
          per_rank += sorted[files - 1 - k];
        }
        break;
      case RemainderRule::kDrop:  // the floor(files / shards) smallest
        for (uint64_t k = 0; k < files / shards; ++k) per_rank += sorted[k];
        break;
      case RemainderRule::kUneven:  // per epoch; never zero (every rank has a non-empty shard)
        per_rank = 1;
        break;
    }
  } else {
    switch (options.remainder) {
      case RemainderRule::kPad:
        per_rank = (draws + shards - 1) / shards;
        break;
      case RemainderRule::kDrop:
        per_rank = draws / shards;
        break;
      case RemainderRule::kUneven:
        per_rank = draws / shards + (rank < draws % shards ? 1 : 0);
        break;
    }
  }
  if (per_rank == 0) {
    return Status::InvalidArgument(
        "sampler: " + std::to_string(dataset_size) + " samples leave rank " + std::to_string(rank) +
        " of " + std::to_string(shards) + " nothing with " +
        Opt("SamplerOptions::remainder", RemainderRuleName(options.remainder)));
  }
  out->size_ = dataset_size;
  out->draws_ = draws;
  out->cumulative_ = std::move(cumulative);
  out->per_rank_ = per_rank;
  out->shard_sizes_ = shard_sizes;
  out->shard_begin_.assign(files, 0);
  for (uint64_t k = 1; k < files; ++k) {
    out->shard_begin_[k] = out->shard_begin_[k - 1] + shard_sizes[k - 1];
  }
  out->options_ = options;
  return Status::OK();
}

uint64_t Sampler::SamplesInEpoch(uint64_t epoch) const {
  if (options_.order != SampleOrder::kShards || options_.remainder != RemainderRule::kUneven) {
    return per_rank_;
  }
  uint64_t n = 0;
  for (uint64_t shard : EpochShards(epoch)) n += shard_sizes_[shard];
  return n;
}

void Sampler::Range(uint64_t* begin, uint64_t* end) const {
  const auto shards = static_cast<uint64_t>(options_.world_size);
  const auto rank = static_cast<uint64_t>(options_.rank);
  if (options_.remainder == RemainderRule::kUneven) {
    // The first N mod S ranks take one more, as with kGlobal.
    const uint64_t q = size_ / shards, rem = size_ % shards;
    *begin = rank * q + std::min(rank, rem);
  } else {
    *begin = rank * per_rank_;
  }
  *end = *begin + per_rank_;
}

std::vector<uint64_t> Sampler::BlockOrder(uint64_t epoch) const {
  const uint64_t k = options_.block_size;
  std::vector<uint64_t> order((size_ + k - 1) / k);
  std::iota(order.begin(), order.end(), uint64_t{0});
  if (options_.shuffle) Shuffle(Rng::For(options_.seed, epoch, kBlockOrderStream), &order);
  return order;
}

void Sampler::AppendBlocks(uint64_t epoch, const std::vector<uint64_t>& block_order, uint64_t lo,
                           uint64_t hi, std::vector<uint64_t>* out) const {
  const uint64_t k = options_.block_size;
  const uint64_t blocks = block_order.size();
  const uint64_t last = size_ - (blocks - 1) * k;  // size of block blocks-1 (the short one)
  // Where the short block sits in the order: blocks before it are full, those after it start
  // (k - last) earlier.
  const uint64_t short_at = static_cast<uint64_t>(
      std::find(block_order.begin(), block_order.end(), blocks - 1) - block_order.begin());
  const auto start_of = [&](uint64_t j) { return j * k - (j > short_at ? k - last : 0); };
  std::vector<uint64_t> block;
  uint64_t p = lo;
  while (p < hi) {
    uint64_t j;
    if (p < short_at * k) {
      j = p / k;
    } else if (p < short_at * k + last) {
      j = short_at;
    } else {
      j = short_at + 1 + (p - short_at * k - last) / k;
    }
    const uint64_t b = block_order[j];
    const uint64_t size = b == blocks - 1 ? last : k;
    block.resize(size);
    std::iota(block.begin(), block.end(), b * k);
    if (options_.shuffle) {
      Shuffle(Rng::For(Mix64(options_.seed ^ kInBlockStream), epoch, b), &block);
    }
    const uint64_t from = p - start_of(j);
    const uint64_t to = std::min(size, hi - start_of(j));
    out->insert(out->end(), block.begin() + static_cast<ptrdiff_t>(from),
                block.begin() + static_cast<ptrdiff_t>(to));
    p += to - from;
  }
}

std::vector<uint64_t> Sampler::ShardOrder(uint64_t epoch) const {
  std::vector<uint64_t> order(shard_sizes_.size());
  std::iota(order.begin(), order.end(), uint64_t{0});
  if (options_.shuffle) Shuffle(Rng::For(options_.seed, epoch, kShardOrderStream), &order);
  return order;
}

std::vector<uint64_t> Sampler::EpochShards(uint64_t epoch) const {
  const auto shards = static_cast<uint64_t>(options_.world_size);
  const auto rank = static_cast<uint64_t>(options_.rank);
  std::vector<uint64_t> mine;
  if (options_.order == SampleOrder::kShards) {
    const std::vector<uint64_t> order = ShardOrder(epoch);
    for (uint64_t k = rank; k < order.size(); k += shards) mine.push_back(order[k]);
    return mine;
  }
  std::vector<bool> touched(shard_sizes_.size(), false);
  for (uint64_t index : EpochOrder(epoch)) {
    const auto it = std::upper_bound(shard_begin_.begin(), shard_begin_.end(), index);
    touched[static_cast<size_t>(it - shard_begin_.begin()) - 1] = true;
  }
  for (uint64_t k = 0; k < touched.size(); ++k) {
    if (touched[k]) mine.push_back(k);
  }
  return mine;
}

std::vector<uint64_t> Sampler::WeightedOrder(uint64_t epoch) const {
  std::vector<uint64_t> order;
  order.reserve(draws_);
  Rng rng = Rng::For(Mix64(options_.seed ^ kWeightedStream), epoch, 0);
  if (options_.replacement) {  // inverse CDF on the running sums: O(draws log N)
    const double total = cumulative_.back();
    for (uint64_t k = 0; k < draws_; ++k) {
      const double u = rng.Uniform() * total;
      auto it = std::upper_bound(cumulative_.begin(), cumulative_.end(), u);
      // u < total; rounding at the top end, or a run of 0 weights before it, never picks a
      // weight 0: step back to the last sample with weight > 0.
      size_t i = std::min<size_t>(static_cast<size_t>(it - cumulative_.begin()), size_ - 1);
      while (options_.weights[i] <= 0) --i;
      order.push_back(i);
    }
    return order;
  }
  // Without replacement (Efraimidis-Spirakis): key log(u) / w per sample of weight w > 0; the
  // draws are the samples of the largest keys, largest first. O(N log N).
  std::vector<std::pair<double, uint64_t>> keys;
  keys.reserve(size_);
  for (uint64_t i = 0; i < size_; ++i) {
    const double u = rng.Uniform();  // one per sample, whatever its weight: the same stream
    const double w = options_.weights[i];
    if (w > 0) keys.emplace_back(std::log(u > 0 ? u : 0x1.0p-60) / w, i);
  }
  std::partial_sort(keys.begin(), keys.begin() + static_cast<std::ptrdiff_t>(draws_), keys.end(),
                    [](const auto& a, const auto& b) {
                      return a.first > b.first || (a.first == b.first && a.second < b.second);
                    });
  for (uint64_t k = 0; k < draws_; ++k) order.push_back(keys[k].second);
  return order;
}

std::vector<uint64_t> Sampler::GlobalOrder(uint64_t epoch) const {
  std::vector<uint64_t> order;
  if (options_.order == SampleOrder::kWeighted) return WeightedOrder(epoch);
  if (options_.order == SampleOrder::kBlocks) {
    order.reserve(size_);
    AppendBlocks(epoch, BlockOrder(epoch), 0, size_, &order);
    return order;
  }
  if (options_.order == SampleOrder::kShards) {
    order.reserve(size_);
    const std::vector<uint64_t> shards = ShardOrder(epoch);
    const auto ranks = static_cast<uint64_t>(options_.world_size);
    for (uint64_t r = 0; r < ranks; ++r) {
      for (uint64_t k = r; k < shards.size(); k += ranks) {
        for (uint64_t i = 0; i < shard_sizes_[shards[k]]; ++i) {
          order.push_back(shard_begin_[shards[k]] + i);
        }
      }
    }
    return order;
  }
  order.resize(size_);
  std::iota(order.begin(), order.end(), uint64_t{0});
  if (!options_.shuffle) return order;
  // Fisher-Yates with a stream keyed by (seed, epoch): the same on every rank and platform.
  auto rng = Rng::For(options_.seed, epoch, kGlobalStream);
  for (uint64_t i = size_ - 1; i > 0; --i) std::swap(order[i], order[rng.Below(i + 1)]);
  return order;
}

std::vector<uint64_t> Sampler::EpochOrder(uint64_t epoch) const {
  const auto shards = static_cast<uint64_t>(options_.world_size);
  const auto rank = static_cast<uint64_t>(options_.rank);
  std::vector<uint64_t> mine;
  switch (options_.order) {
    case SampleOrder::kGlobal:
    case SampleOrder::kWeighted: {
      const std::vector<uint64_t> global = GlobalOrder(epoch);
      mine.reserve(per_rank_);
      // Position p of the padded / truncated global order is global[p % draws].
      for (uint64_t k = 0; k < per_rank_; ++k) {
        mine.push_back(global[(rank + k * shards) % draws_]);
      }
      return mine;
    }
    case SampleOrder::kBlocks: {
      uint64_t begin = 0, end = 0;
      Range(&begin, &end);
      mine.reserve(end - begin);
      const std::vector<uint64_t> blocks = BlockOrder(epoch);
      // Positions past N wrap around to the start of P (kPad).
      for (uint64_t p = begin; p < end;) {
        const uint64_t q = p % size_;
        const uint64_t n = std::min(end - p, size_ - q);
        AppendBlocks(epoch, blocks, q, q + n, &mine);
        p += n;
      }
      return mine;
    }
    case SampleOrder::kShards: {
      std::vector<uint64_t> own;
      for (uint64_t shard : EpochShards(epoch)) {
        for (uint64_t i = 0; i < shard_sizes_[shard]; ++i) own.push_back(shard_begin_[shard] + i);
      }
      if (options_.shuffle) {
        Shuffle(Rng::For(Mix64(options_.seed ^ kInRankStream), epoch, rank), &own);
      }
      if (options_.remainder == RemainderRule::kUneven) return own;
      mine.reserve(per_rank_);
      // kPad: wrap around the rank's own samples; kDrop: per_rank_ <= own.size().
      for (uint64_t k = 0; k < per_rank_; ++k) mine.push_back(own[k % own.size()]);
      return mine;
    }
  }
  return mine;
}

}  // namespace dspipe
