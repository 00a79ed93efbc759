#include "dspipe/sampler.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <numeric>
#include <set>

namespace dspipe {
namespace {

Sampler Make(uint64_t n, int shards, int rank, RemainderRule rule, bool shuffle = true,
             uint64_t seed = 7) {
  SamplerOptions o;
  o.num_shards = shards;
  o.shard_id = rank;
  o.remainder = rule;
  o.shuffle = shuffle;
  o.seed = seed;
  Sampler s;
  Status st = Sampler::Create(n, o, &s);
  EXPECT_TRUE(st.ok()) << st.ToString();
  return s;
}

// How often each dataset index is visited in `epoch` across all ranks.
std::map<uint64_t, int> Visits(uint64_t n, int shards, RemainderRule rule, uint64_t epoch) {
  std::map<uint64_t, int> visits;
  for (int r = 0; r < shards; ++r) {
    Sampler s = Make(n, shards, r, rule);
    const auto order = s.EpochOrder(epoch);
    EXPECT_EQ(order.size(), s.samples_per_epoch());
    for (uint64_t i : order) {
      EXPECT_LT(i, n);
      ++visits[i];
    }
  }
  return visits;
}

TEST(SamplerTest, UnevenSeesEverySampleExactlyOnceAcrossShards) {
  for (uint64_t n : {1, 2, 7, 10, 11, 13, 100, 101}) {
    for (int shards : {1, 2, 3}) {
      if (n < static_cast<uint64_t>(shards)) continue;
      for (uint64_t epoch : {0, 1, 5}) {
        auto visits = Visits(n, shards, RemainderRule::kUneven, epoch);
        ASSERT_EQ(visits.size(), n) << "n=" << n << " shards=" << shards;
        for (auto [index, count] : visits) ASSERT_EQ(count, 1) << "index " << index;
      }
      // Per-rank counts differ by at most one.
      uint64_t lo = n, hi = 0;
      for (int r = 0; r < shards; ++r) {
        const uint64_t c = Make(n, shards, r, RemainderRule::kUneven).samples_per_epoch();
        lo = std::min(lo, c);
        hi = std::max(hi, c);
      }
      EXPECT_LE(hi - lo, 1u);
    }
  }
}

TEST(SamplerTest, PadRepeatsExactlyTheFirstSamplesOfTheGlobalOrder) {
  for (uint64_t n : {7, 10, 11, 13, 101}) {
    for (int shards : {1, 2, 3}) {
      const uint64_t per_rank = (n + shards - 1) / shards;
      const uint64_t pad = per_rank * shards - n;
      const auto global = Make(n, shards, 0, RemainderRule::kPad).GlobalOrder(3);
      auto visits = Visits(n, shards, RemainderRule::kPad, 3);
      ASSERT_EQ(visits.size(), n);  // every sample at least once
      std::set<uint64_t> twice;
      for (auto [index, count] : visits) {
        ASSERT_LE(count, 2);
        if (count == 2) twice.insert(index);
      }
      EXPECT_EQ(twice, std::set<uint64_t>(global.begin(), global.begin() + pad))
          << "n=" << n << " shards=" << shards;
      for (int r = 0; r < shards; ++r) {
        EXPECT_EQ(Make(n, shards, r, RemainderRule::kPad).samples_per_epoch(), per_rank);
      }
    }
  }
}

TEST(SamplerTest, DropOmitsExactlyTheLastSamplesOfTheGlobalOrder) {
  for (uint64_t n : {7, 10, 11, 13, 101}) {
    for (int shards : {1, 2, 3}) {
      const uint64_t kept = n / shards * shards;
      const auto global = Make(n, shards, 0, RemainderRule::kDrop).GlobalOrder(2);
      auto visits = Visits(n, shards, RemainderRule::kDrop, 2);
      ASSERT_EQ(visits.size(), kept);
      for (auto [index, count] : visits) ASSERT_EQ(count, 1);
      for (uint64_t k = kept; k < n; ++k) EXPECT_EQ(visits.count(global[k]), 0u);
    }
  }
}

TEST(SamplerTest, ShuffleIsAFreshPermutationPerEpochAndReproducible) {
  const uint64_t n = 1000;
  Sampler a = Make(n, 1, 0, RemainderRule::kPad, true, 1);
  Sampler b = Make(n, 1, 0, RemainderRule::kPad, true, 1);
  Sampler c = Make(n, 1, 0, RemainderRule::kPad, true, 2);
  const auto e0 = a.EpochOrder(0), e1 = a.EpochOrder(1);
  EXPECT_EQ(e0, b.EpochOrder(0));
  EXPECT_NE(e0, e1);
  EXPECT_NE(e0, c.EpochOrder(0));
  auto sorted = e0;
  std::sort(sorted.begin(), sorted.end());
  std::vector<uint64_t> iota(n);
  std::iota(iota.begin(), iota.end(), uint64_t{0});
  EXPECT_EQ(sorted, iota);
  EXPECT_NE(e0, iota);
  EXPECT_EQ(Make(n, 1, 0, RemainderRule::kPad, false).EpochOrder(4), iota);
}

TEST(SamplerTest, UnshuffledShardsAreStrided) {
  Sampler s = Make(10, 3, 1, RemainderRule::kPad, false);
  EXPECT_EQ(s.EpochOrder(0), (std::vector<uint64_t>{1, 4, 7, 0}));
}

// The permutation is part of the resume contract: it must not change across platforms or
// library versions. Reference values from an independent Python model of splitmix64 + Lemire.
TEST(SamplerTest, PermutationIsStable) {
  Sampler s = Make(10, 1, 0, RemainderRule::kPad, true, 42);
  EXPECT_EQ(s.EpochOrder(0), (std::vector<uint64_t>{2, 1, 0, 6, 9, 3, 4, 5, 7, 8}));
}

TEST(SamplerTest, RejectsBadOptions) {
  Sampler s;
  SamplerOptions o;
  EXPECT_EQ(Sampler::Create(0, o, &s).code(), Status::Code::kInvalidArgument);
  o.num_shards = 2;
  o.shard_id = 2;
  Status st = Sampler::Create(10, o, &s);
  EXPECT_EQ(st.code(), Status::Code::kInvalidArgument);
  EXPECT_NE(st.message().find("shard_id"), std::string::npos) << st.ToString();
  o.num_shards = 4;
  o.shard_id = 3;
  o.remainder = RemainderRule::kDrop;
  EXPECT_FALSE(Sampler::Create(3, o, &s).ok());
  o.remainder = RemainderRule::kUneven;
  EXPECT_FALSE(Sampler::Create(3, o, &s).ok());
  o.remainder = RemainderRule::kPad;
  EXPECT_TRUE(Sampler::Create(3, o, &s).ok());
}

}  // namespace
}  // namespace dspipe
