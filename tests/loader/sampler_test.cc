// SPDX-License-Identifier: Apache-2.0
#include "dspipe/sampler.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <numeric>
#include <set>

namespace dspipe {
namespace {

Sampler Make(uint64_t n, int shards, int rank, RemainderRule rule, bool shuffle = true,
             uint64_t seed = 7) {
  SamplerOptions o;
  o.world_size = shards;
  o.rank = rank;
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
  o.world_size = 2;
  o.rank = 2;
  Status st = Sampler::Create(10, o, &s);
  EXPECT_EQ(st.code(), Status::Code::kInvalidArgument);
  EXPECT_NE(st.message().find("rank"), std::string::npos) << st.ToString();
  o.world_size = 4;
  o.rank = 3;
  o.remainder = RemainderRule::kDrop;
  EXPECT_FALSE(Sampler::Create(3, o, &s).ok());
  o.remainder = RemainderRule::kUneven;
  EXPECT_FALSE(Sampler::Create(3, o, &s).ok());
  o.remainder = RemainderRule::kPad;
  EXPECT_TRUE(Sampler::Create(3, o, &s).ok());
}

// ---- kBlocks / kShards (docs/SCALE.md)

SamplerOptions OrderOptions(SampleOrder order, int ranks, int rank, RemainderRule rule,
                            uint64_t block_size = 5) {
  SamplerOptions o;
  o.order = order;
  o.block_size = block_size;
  o.world_size = ranks;
  o.rank = rank;
  o.remainder = rule;
  o.seed = 11;
  return o;
}

Sampler MakeOrder(const std::vector<uint64_t>& shard_sizes, const SamplerOptions& o) {
  Sampler s;
  Status st = Sampler::Create(shard_sizes, o, &s);
  EXPECT_TRUE(st.ok()) << st.ToString();
  return s;
}

// Visits per index across `ranks` ranks in `epoch`; also checks each rank's count.
std::map<uint64_t, int> OrderVisits(const std::vector<uint64_t>& sizes, SampleOrder order,
                                    int ranks, RemainderRule rule, uint64_t epoch,
                                    std::vector<uint64_t>* counts = nullptr) {
  std::map<uint64_t, int> visits;
  const uint64_t n = std::accumulate(sizes.begin(), sizes.end(), uint64_t{0});
  for (int r = 0; r < ranks; ++r) {
    Sampler s = MakeOrder(sizes, OrderOptions(order, ranks, r, rule));
    const auto mine = s.EpochOrder(epoch);
    EXPECT_EQ(mine.size(), s.SamplesInEpoch(epoch));
    if (counts) counts->push_back(mine.size());
    for (uint64_t i : mine) {
      EXPECT_LT(i, n);
      ++visits[i];
    }
  }
  return visits;
}

// The shard (index into sizes) that holds dataset index i.
uint64_t ShardOf(const std::vector<uint64_t>& sizes, uint64_t i) {
  uint64_t k = 0;
  while (i >= sizes[k]) i -= sizes[k++];
  return k;
}

TEST(SamplerOrderTest, UnevenSeesEverySampleExactlyOncePerEpoch) {
  // Unequal shards; 3 ranks; 3 epochs; blocks of 5 (N = 47: a short last block).
  const std::vector<uint64_t> sizes = {9, 8, 8, 7, 8, 7};
  for (SampleOrder order : {SampleOrder::kBlocks, SampleOrder::kShards}) {
    for (uint64_t epoch : {0, 1, 2}) {
      std::vector<uint64_t> counts;
      auto visits = OrderVisits(sizes, order, 3, RemainderRule::kUneven, epoch, &counts);
      ASSERT_EQ(visits.size(), 47u) << SampleOrderName(order) << " epoch " << epoch;
      for (auto [index, count] : visits) ASSERT_EQ(count, 1) << "index " << index;
      if (order == SampleOrder::kBlocks) {
        EXPECT_EQ(counts, (std::vector<uint64_t>{16, 16, 15}));
      }
    }
  }
}

TEST(SamplerOrderTest, BlocksAreContiguousRangesOfOneGlobalPermutation) {
  const uint64_t n = 23;  // blocks of 5: 4 full + one of 3
  for (RemainderRule rule : {RemainderRule::kPad, RemainderRule::kDrop, RemainderRule::kUneven}) {
    const auto global =
        MakeOrder({n}, OrderOptions(SampleOrder::kBlocks, 3, 0, rule)).GlobalOrder(4);
    auto sorted = global;
    std::sort(sorted.begin(), sorted.end());
    for (uint64_t i = 0; i < n; ++i) ASSERT_EQ(sorted[i], i);
    // Each block of 5 consecutive indices is contiguous in P.
    for (uint64_t p = 0; p < n; ++p) {
      const uint64_t b = global[p] / 5;
      uint64_t q = p;
      while (q < n && global[q] / 5 == b) ++q;
      EXPECT_EQ(q - p, b == 4 ? 3u : 5u) << "at " << p;
      p = q - 1;
    }
    // Rank r's order is its range of P (padded by wrapping around P).
    std::vector<uint64_t> joined;
    for (int r = 0; r < 3; ++r) {
      const auto mine =
          MakeOrder({n}, OrderOptions(SampleOrder::kBlocks, 3, r, rule)).EpochOrder(4);
      joined.insert(joined.end(), mine.begin(), mine.end());
    }
    std::vector<uint64_t> expected;
    const uint64_t total = rule == RemainderRule::kPad    ? 24
                           : rule == RemainderRule::kDrop ? 21
                                                          : 23;
    for (uint64_t p = 0; p < total; ++p) expected.push_back(global[p % n]);
    EXPECT_EQ(joined, expected) << RemainderRuleName(rule);
  }
}

TEST(SamplerOrderTest, BlocksPadAndDropKeepCountsEqual) {
  const uint64_t n = 47;
  for (uint64_t epoch : {0, 1, 2}) {
    std::vector<uint64_t> counts;
    auto pad = OrderVisits({n}, SampleOrder::kBlocks, 3, RemainderRule::kPad, epoch, &counts);
    EXPECT_EQ(counts, (std::vector<uint64_t>{16, 16, 16}));
    const auto global =
        MakeOrder({n}, OrderOptions(SampleOrder::kBlocks, 3, 0, RemainderRule::kPad))
            .GlobalOrder(epoch);
    ASSERT_EQ(pad.size(), n);
    EXPECT_EQ(pad[global[0]], 2);  // 48 - 47: the first sample of P twice
    counts.clear();
    auto drop = OrderVisits({n}, SampleOrder::kBlocks, 3, RemainderRule::kDrop, epoch, &counts);
    EXPECT_EQ(counts, (std::vector<uint64_t>{15, 15, 15}));
    ASSERT_EQ(drop.size(), 45u);
    EXPECT_EQ(drop.count(global[45]) + drop.count(global[46]), 0u);
  }
}

TEST(SamplerOrderTest, ShardsGiveEachRankWholeShardsRotatedByEpoch) {
  const std::vector<uint64_t> sizes = {9, 8, 8, 7, 8, 7};
  std::set<std::vector<uint64_t>> assignments;
  for (uint64_t epoch : {0, 1, 2, 3}) {
    std::vector<uint64_t> all;
    for (int r = 0; r < 3; ++r) {
      Sampler s =
          MakeOrder(sizes, OrderOptions(SampleOrder::kShards, 3, r, RemainderRule::kUneven));
      const auto shards = s.EpochShards(epoch);
      EXPECT_EQ(shards.size(), 2u);
      std::set<uint64_t> read;
      for (uint64_t i : s.EpochOrder(epoch)) read.insert(ShardOf(sizes, i));
      EXPECT_EQ(read, std::set<uint64_t>(shards.begin(), shards.end()));
      all.insert(all.end(), shards.begin(), shards.end());
    }
    assignments.insert(all);
    std::sort(all.begin(), all.end());
    EXPECT_EQ(all, (std::vector<uint64_t>{0, 1, 2, 3, 4, 5}));
  }
  EXPECT_GT(assignments.size(), 1u);  // the shard permutation changes with the epoch
  // Unshuffled: shard k goes to rank k mod 3, in dataset order.
  SamplerOptions o = OrderOptions(SampleOrder::kShards, 3, 1, RemainderRule::kUneven);
  o.shuffle = false;
  Sampler s = MakeOrder(sizes, o);
  EXPECT_EQ(s.EpochShards(5), (std::vector<uint64_t>{1, 4}));
  std::vector<uint64_t> expected;
  for (uint64_t i = 9; i < 17; ++i) expected.push_back(i);
  for (uint64_t i = 32; i < 40; ++i) expected.push_back(i);
  EXPECT_EQ(s.EpochOrder(5), expected);
}

TEST(SamplerOrderTest, ShardsPadAndDropKeepCountsEqual) {
  // 7 shards over 3 ranks: one rank gets 3 shards, the others 2.
  const std::vector<uint64_t> sizes = {9, 8, 8, 7, 8, 7, 6};
  for (uint64_t epoch : {0, 1, 2}) {
    std::vector<uint64_t> counts;
    auto pad = OrderVisits(sizes, SampleOrder::kShards, 3, RemainderRule::kPad, epoch, &counts);
    EXPECT_EQ(counts, (std::vector<uint64_t>{25, 25, 25}));  // 9 + 8 + 8
    ASSERT_EQ(pad.size(), 53u);                              // every sample at least once
    counts.clear();
    auto drop = OrderVisits(sizes, SampleOrder::kShards, 3, RemainderRule::kDrop, epoch, &counts);
    EXPECT_EQ(counts, (std::vector<uint64_t>{13, 13, 13}));  // 6 + 7
    for (auto [index, count] : drop) ASSERT_EQ(count, 1) << "index " << index;
    // Pad repeats only a rank's own samples: each rank's order stays inside its shards.
    for (int r = 0; r < 3; ++r) {
      for (RemainderRule rule : {RemainderRule::kPad, RemainderRule::kDrop}) {
        Sampler s = MakeOrder(sizes, OrderOptions(SampleOrder::kShards, 3, r, rule));
        const auto shards = s.EpochShards(epoch);
        for (uint64_t i : s.EpochOrder(epoch)) {
          ASSERT_NE(std::find(shards.begin(), shards.end(), ShardOf(sizes, i)), shards.end());
        }
      }
    }
  }
}

TEST(SamplerOrderTest, DeterministicAndSeeded) {
  const std::vector<uint64_t> sizes = {9, 8, 8, 7, 8, 7};
  for (SampleOrder order : {SampleOrder::kBlocks, SampleOrder::kShards}) {
    SamplerOptions o = OrderOptions(order, 3, 2, RemainderRule::kPad);
    const auto a = MakeOrder(sizes, o).EpochOrder(1);
    EXPECT_EQ(a, MakeOrder(sizes, o).EpochOrder(1));
    EXPECT_NE(a, MakeOrder(sizes, o).EpochOrder(2));
    o.seed = 12;
    EXPECT_NE(a, MakeOrder(sizes, o).EpochOrder(1));
  }
}

// Like PermutationIsStable: the orders are part of the resume contract. Pinned when they were
// written (blocks {0,1,2} {3,4,5} {6,7,8} {9}; shards {0,1,2} {3,4,5} {6,7} {8,9}), so any
// change to the streams shows here.
TEST(SamplerOrderTest, OrdersAreStable) {
  SamplerOptions o = OrderOptions(SampleOrder::kBlocks, 1, 0, RemainderRule::kPad, 3);
  o.seed = 42;
  EXPECT_EQ(MakeOrder({10}, o).EpochOrder(0),
            (std::vector<uint64_t>{9, 6, 8, 7, 3, 4, 5, 2, 1, 0}));
  o = OrderOptions(SampleOrder::kShards, 2, 1, RemainderRule::kPad);
  o.seed = 42;
  // Rank 1 gets shards 0 and 3 (5 samples), padded to 6 with its own first sample.
  EXPECT_EQ(MakeOrder({3, 3, 2, 2}, o).EpochOrder(0), (std::vector<uint64_t>{0, 2, 9, 1, 8, 0}));
}

TEST(SamplerOrderTest, RejectsFewerShardsThanRanksAndEmptyShards) {
  Sampler s;
  Status st = Sampler::Create(std::vector<uint64_t>{10, 10},
                              OrderOptions(SampleOrder::kShards, 3, 0, RemainderRule::kPad), &s);
  EXPECT_EQ(st.code(), Status::Code::kInvalidArgument);
  EXPECT_NE(st.message().find("2 shards for 3 ranks"), std::string::npos) << st.ToString();
  st = Sampler::Create(uint64_t{100},
                       OrderOptions(SampleOrder::kShards, 2, 0, RemainderRule::kUneven), &s);
  EXPECT_EQ(st.code(), Status::Code::kInvalidArgument) << st.ToString();
  st = Sampler::Create(std::vector<uint64_t>{10, 0, 10},
                       OrderOptions(SampleOrder::kShards, 2, 0, RemainderRule::kUneven), &s);
  EXPECT_NE(st.message().find("shard 1 "), std::string::npos) << st.ToString();
  st = Sampler::Create(uint64_t{100},
                       OrderOptions(SampleOrder::kBlocks, 2, 0, RemainderRule::kPad, 0), &s);
  EXPECT_NE(st.message().find("block_size"), std::string::npos) << st.ToString();
  // One rank over one shard is fine.
  EXPECT_TRUE(Sampler::Create(uint64_t{100},
                              OrderOptions(SampleOrder::kShards, 1, 0, RemainderRule::kPad), &s)
                  .ok());
}

// order=weighted: draws follow the weights (chi-square at a fixed seed), a weight 0 is never
// drawn, without replacement an index at most once per epoch, every rank its share of the same
// draws, and bad weights refused by name.
Sampler Weighted(std::vector<double> w, uint64_t n, bool replacement, int shards = 1, int rank = 0,
                 RemainderRule rule = RemainderRule::kPad) {
  SamplerOptions o;
  o.order = SampleOrder::kWeighted;
  o.seed = 11;
  o.weights = std::move(w);
  o.num_samples = n;
  o.replacement = replacement;
  o.world_size = shards;
  o.rank = rank;
  o.remainder = rule;
  Sampler s;
  const Status st = Sampler::Create(o.weights.size(), o, &s);
  EXPECT_TRUE(st.ok()) << st.ToString();
  return s;
}

double ChiSquare(const std::vector<double>& w, const std::vector<uint64_t>& counts, double n) {
  double total = 0, chi = 0;
  for (double x : w) total += x;
  for (size_t i = 0; i < w.size(); ++i) {
    if (w[i] == 0) continue;
    const double e = n * w[i] / total;
    chi += (counts[i] - e) * (counts[i] - e) / e;
  }
  return chi;
}

TEST(SamplerTest, WeightedDrawsFollowTheWeights) {
  const std::vector<double> w = {1, 2, 3, 0, 4, 10};
  Sampler s = Weighted(w, 20000, true);
  EXPECT_EQ(s.samples_per_epoch(), 20000u);
  std::vector<uint64_t> counts(w.size());
  for (uint64_t i : s.EpochOrder(0)) ++counts[i];
  EXPECT_EQ(counts[3], 0u);
  // 5 categories of nonzero weight: 4 degrees of freedom, P(chi2 > 18.47) = 0.001.
  EXPECT_LT(ChiSquare(w, counts, 20000), 18.47);
  EXPECT_EQ(s.EpochOrder(0), Weighted(w, 20000, true).EpochOrder(0));  // (seed, epoch) only
  EXPECT_NE(s.EpochOrder(0), s.EpochOrder(1));
  // Without replacement: each nonzero index once when all are drawn; the first draw of an
  // epoch is index i with probability w_i / sum(w) (over 4000 epochs).
  Sampler all = Weighted(w, 0, false);
  std::vector<uint64_t> firsts(w.size());
  for (uint64_t e = 0; e < 4000; ++e) {
    std::vector<uint64_t> order = all.EpochOrder(e);
    ASSERT_EQ(order.size(), 5u);  // num_samples 0: every sample of nonzero weight once
    ++firsts[order[0]];
  }
  EXPECT_LT(ChiSquare(w, firsts, 4000), 18.47);
}

TEST(SamplerTest, WeightedRanksShareOneDrawAndWeightsAreChecked) {
  const std::vector<double> w = {1, 2, 3, 0, 4, 10, 5};
  Sampler few = Weighted(w, 5, false);
  std::vector<uint64_t> global = few.EpochOrder(3);
  std::set<uint64_t> distinct(global.begin(), global.end());
  EXPECT_EQ(distinct.size(), 5u);
  EXPECT_EQ(distinct.count(3), 0u);
  // Two ranks (drop): positions r, r + 2, ... of the same 5 draws, disjoint.
  std::vector<uint64_t> a = Weighted(w, 5, false, 2, 0, RemainderRule::kDrop).EpochOrder(3);
  std::vector<uint64_t> b = Weighted(w, 5, false, 2, 1, RemainderRule::kDrop).EpochOrder(3);
  EXPECT_EQ(a, (std::vector<uint64_t>{global[0], global[2]}));
  EXPECT_EQ(b, (std::vector<uint64_t>{global[1], global[3]}));
  auto refused = [&](SamplerOptions o, uint64_t n, const std::string& what) {
    o.order = SampleOrder::kWeighted;
    Sampler s;
    const Status st = Sampler::Create(n, o, &s);
    EXPECT_EQ(st.code(), Status::Code::kInvalidArgument) << what;
    EXPECT_NE(st.message().find(what), std::string::npos) << st.ToString();
  };
  SamplerOptions o;
  o.weights = w;
  refused(o, 8, "7 values for a dataset of 8");
  o.weights[2] = -1;
  refused(o, 7, "weights[2]");
  o.weights.assign(7, 0.0);
  refused(o, 7, "every one");
  o.weights = w;
  o.replacement = false;
  o.num_samples = 7;
  refused(o, 7, "6 samples of nonzero weight");
  o = SamplerOptions{};
  o.weights = w;
  o.shuffle = false;
  refused(o, 7, "draws at random");
  o = SamplerOptions{};
  o.weights = w;  // with the global order
  Sampler s;
  EXPECT_EQ(Sampler::Create(7, o, &s).code(), Status::Code::kInvalidArgument);
}

}  // namespace
}  // namespace dspipe
