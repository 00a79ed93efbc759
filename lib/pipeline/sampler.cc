#include "dspipe/sampler.h"

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

Status Sampler::Create(uint64_t dataset_size, const SamplerOptions& options, Sampler* out) {
  const int s = options.num_shards;
  if (dataset_size == 0) return Status::InvalidArgument("sampler: the dataset is empty");
  if (s < 1) {
    return Status::InvalidArgument("sampler: num_shards must be >= 1, got " + std::to_string(s));
  }
  if (options.shard_id < 0 || options.shard_id >= s) {
    return Status::InvalidArgument(
        "sampler: shard_id must be in [0, num_shards=" + std::to_string(s) + "), got " +
        std::to_string(options.shard_id));
  }
  const uint64_t shards = static_cast<uint64_t>(s);
  const uint64_t rank = static_cast<uint64_t>(options.shard_id);
  uint64_t per_rank = 0;
  switch (options.remainder) {
    case RemainderRule::kPad:
      per_rank = (dataset_size + shards - 1) / shards;
      break;
    case RemainderRule::kDrop:
      per_rank = dataset_size / shards;
      break;
    case RemainderRule::kUneven:
      per_rank = dataset_size / shards + (rank < dataset_size % shards ? 1 : 0);
      break;
  }
  if (per_rank == 0) {
    return Status::InvalidArgument("sampler: " + std::to_string(dataset_size) +
                                   " samples leave rank " + std::to_string(rank) + " of " +
                                   std::to_string(shards) + " nothing with remainder rule '" +
                                   RemainderRuleName(options.remainder) + "'");
  }
  out->size_ = dataset_size;
  out->per_rank_ = per_rank;
  out->options_ = options;
  return Status::OK();
}

std::vector<uint64_t> Sampler::GlobalOrder(uint64_t epoch) const {
  std::vector<uint64_t> order(size_);
  std::iota(order.begin(), order.end(), uint64_t{0});
  if (!options_.shuffle) return order;
  // Fisher-Yates with a stream keyed by (seed, epoch): the same on every rank and platform.
  auto rng = Rng::For(options_.seed, epoch, 0x5348554646ULL /* "SHUFF" */);
  for (uint64_t i = size_ - 1; i > 0; --i) std::swap(order[i], order[rng.Below(i + 1)]);
  return order;
}

std::vector<uint64_t> Sampler::EpochOrder(uint64_t epoch) const {
  const std::vector<uint64_t> global = GlobalOrder(epoch);
  const auto shards = static_cast<uint64_t>(options_.num_shards);
  const auto rank = static_cast<uint64_t>(options_.shard_id);
  std::vector<uint64_t> mine;
  mine.reserve(per_rank_);
  // Position p of the padded / truncated global order is global[p % N].
  for (uint64_t k = 0; k < per_rank_; ++k) mine.push_back(global[(rank + k * shards) % size_]);
  return mine;
}

}  // namespace dspipe
