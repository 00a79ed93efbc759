// SPDX-License-Identifier: Apache-2.0
// Per-rank loading over a sharded dataset (docs/SCALE.md): 3 ranks as 3 loaders in one process,
// orders kShards and kBlocks, and a rank of order kShards reading only its own shard files.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <filesystem>
#include <map>
#include <set>
#include <thread>

#include "dspipe/cache.h"
#include "dspipe/loader.h"
#include "dspipe/sampler.h"
#include "format/manifest.h"
#include "loader/cache_copy.h"
#include "loader/loader_fixture.h"

namespace dspipe {
namespace {

namespace fs = std::filesystem;

constexpr int kCount = 23;  // over 6 shards of 3 or 4: unequal shards
constexpr int kShards = 6, kRanks = 3, kBatch = 4;

class RankTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    root_ = new std::string(testing::FreshDir("rank"));
    testing::WriteSourceTree(*root_ + "/src", kCount, 16, 16, false);
    path_ = new std::string(
        testing::Build(*root_ + "/src", *root_ + "/sharded", StoreMode::kEncoded, kShards));
  }
  static void TearDownTestSuite() {
    fs::remove_all(*root_);
    delete root_;
    delete path_;
  }

  static LoaderOptions Options(SampleOrder order, int rank, RemainderRule rule, bool drop_last) {
    LoaderOptions o;
    o.batch_size = kBatch;
    o.threads = 2;
    o.sampler.seed = 99;
    o.sampler.order = order;
    o.sampler.block_size = 5;
    o.sampler.world_size = kRanks;
    o.sampler.rank = rank;
    o.sampler.remainder = rule;
    o.drop_last = drop_last;
    return o;
  }

  static std::unique_ptr<Loader> Open(const LoaderOptions& o, const std::string& path) {
    std::unique_ptr<Loader> loader;
    Status s = Loader::Open(path, o, &loader);
    EXPECT_TRUE(s.ok()) << s.ToString();
    return loader;
  }

  // Dataset indices one loader hands out in `epoch`, in order.
  static std::vector<uint64_t> Epoch(Loader* loader, uint64_t epoch) {
    std::vector<uint64_t> seen;
    for (const testing::BatchCopy& b : testing::RunEpochs(loader, epoch, 1)) {
      seen.insert(seen.end(), b.indices.begin(), b.indices.end());
    }
    return seen;
  }

  static std::string* root_;
  static std::string* path_;
};
std::string* RankTest::root_ = nullptr;
std::string* RankTest::path_ = nullptr;

TEST_F(RankTest, ThreeRanksSeeEverySampleExactlyOncePerEpoch) {
  for (SampleOrder order : {SampleOrder::kShards, SampleOrder::kBlocks}) {
    for (bool drop_last : {false, true}) {
      std::vector<std::unique_ptr<Loader>> ranks;
      for (int r = 0; r < kRanks; ++r) {
        ranks.push_back(Open(Options(order, r, RemainderRule::kUneven, drop_last), *path_));
        ASSERT_TRUE(ranks.back());
      }
      for (uint64_t epoch : {0, 1, 2}) {
        std::map<uint64_t, int> visits;
        uint64_t expected = 0;
        for (int r = 0; r < kRanks; ++r) {
          const std::vector<uint64_t> seen = Epoch(ranks[r].get(), epoch);
          // The loader hands out exactly its sampler's order, cut by drop_last.
          Sampler sampler;
          ASSERT_TRUE(Sampler::Create(ranks[r]->dataset().info().shard_sizes,
                                      ranks[r]->options().sampler, &sampler)
                          .ok());
          std::vector<uint64_t> want = sampler.EpochOrder(epoch);
          if (drop_last) want.resize(want.size() / kBatch * kBatch);
          EXPECT_EQ(seen, want) << SampleOrderName(order) << " rank " << r << " epoch " << epoch;
          expected += want.size();
          for (uint64_t i : seen) ++visits[i];
        }
        for (auto [index, count] : visits) ASSERT_EQ(count, 1) << "index " << index;
        EXPECT_EQ(visits.size(), expected);
        if (!drop_last) {
          EXPECT_EQ(visits.size(), static_cast<size_t>(kCount))
              << SampleOrderName(order) << " epoch " << epoch;
        }
      }
    }
  }
}

TEST_F(RankTest, ShardsPadAndDropKeepRanksInStep) {
  for (RemainderRule rule : {RemainderRule::kPad, RemainderRule::kDrop}) {
    for (uint64_t epoch : {0, 1, 2}) {
      std::set<size_t> counts;
      std::map<uint64_t, int> visits;
      for (int r = 0; r < kRanks; ++r) {
        auto loader = Open(Options(SampleOrder::kShards, r, rule, false), *path_);
        ASSERT_TRUE(loader);
        const auto seen = Epoch(loader.get(), epoch);
        counts.insert(seen.size());
        for (uint64_t i : seen) ++visits[i];
      }
      EXPECT_EQ(counts.size(), 1u) << RemainderRuleName(rule) << ": equal counts per rank";
      if (rule == RemainderRule::kPad) {
        EXPECT_EQ(visits.size(), static_cast<size_t>(kCount));
      }
      if (rule == RemainderRule::kDrop) {
        for (auto [index, count] : visits) ASSERT_EQ(count, 1) << "index " << index;
      }
    }
  }
}

// A copy of the dataset without the data.mdb of the shards rank 1 does not read in epoch 0: it
// still loads its epoch; in an epoch that gives it a removed shard, the error names that shard.
TEST_F(RankTest, ARankReadsOnlyItsShards) {
  const std::string partial = *root_ + "/partial";
  fs::remove_all(partial);
  fs::copy(*path_, partial, fs::copy_options::recursive);
  const LoaderOptions o = Options(SampleOrder::kShards, 1, RemainderRule::kUneven, false);
  Sampler sampler;
  std::unique_ptr<Loader> full = Open(o, *path_);
  ASSERT_TRUE(full);
  const std::vector<uint64_t> sizes = full->dataset().info().shard_sizes;
  ASSERT_EQ(sizes.size(), static_cast<size_t>(kShards));
  ASSERT_TRUE(Sampler::Create(sizes, o.sampler, &sampler).ok());
  const std::vector<uint64_t> mine = sampler.EpochShards(0);
  ASSERT_EQ(mine.size(), 2u);
  std::set<uint64_t> removed;
  for (uint64_t k = 0; k < sizes.size(); ++k) {
    if (std::find(mine.begin(), mine.end(), k) != mine.end()) continue;
    ASSERT_TRUE(
        fs::remove(partial + "/" + format::ShardDirName(static_cast<int>(k)) + "/data.mdb"));
    removed.insert(k);
  }

  auto loader = Open(o, partial);
  ASSERT_TRUE(loader);
  EXPECT_EQ(Epoch(loader.get(), 0), Epoch(full.get(), 0));

  // The first epoch whose shards for rank 1 include a removed one (the order rotates).
  uint64_t epoch = 1;
  for (;; ++epoch) {
    ASSERT_LT(epoch, 100u);
    bool hit = false;
    for (uint64_t k : sampler.EpochShards(epoch)) hit |= removed.count(k) > 0;
    if (hit) break;
  }
  loader->set_epoch(epoch);
  Status failed;
  Batch batch;
  while (true) {
    Status s = loader->Next(&batch);
    if (!s.ok()) {
      failed = s;
      break;
    }
    if (!batch) break;
  }
  ASSERT_FALSE(failed.ok()) << "epoch " << epoch << " read a removed shard without an error";
  // Which removed shard the error names depends on the shuffled order; it must name one.
  bool named = false;
  for (uint64_t k : removed) {
    named |= failed.message().find(format::ShardDirName(static_cast<int>(k))) != std::string::npos;
  }
  EXPECT_TRUE(named) << failed.ToString();
  EXPECT_NE(failed.message().find(partial), std::string::npos) << failed.ToString();

  // The same copy opened eagerly (the default) is refused at open, naming a shard.
  std::unique_ptr<Dataset> ds;
  Status s = Dataset::Open(partial, DatasetOpenOptions{}, &ds);
  EXPECT_FALSE(s.ok());
  // Lazily: opens; reading a record of a removed shard fails naming it, every time.
  DatasetOpenOptions lazy;
  lazy.lazy_shards = true;
  ASSERT_TRUE(Dataset::Open(partial, lazy, &ds).ok());
  const uint64_t first = *removed.begin();
  uint64_t index = 0;
  for (uint64_t k = 0; k < first; ++k) index += sizes[k];
  auto nop = [](const RecordView&) { return Status::OK(); };
  for (int attempt = 0; attempt < 2; ++attempt) {
    s = ds->Read(index, nop);
    EXPECT_FALSE(s.ok());
    EXPECT_NE(s.message().find("shard " + format::ShardDirName(static_cast<int>(first))),
              std::string::npos)
        << s.ToString();
  }
}

// The cache's entries in the cache root `dir` (directories of its own dir, not .tmp), by name.
std::set<std::string> Entries(const std::string& dir) {
  std::set<std::string> out;
  for (const auto& e : fs::directory_iterator(dir + "/dspipe-cache-v1")) {
    const std::string name = e.path().filename().string();
    if (e.is_directory() && !name.ends_with(".tmp")) out.insert(name);
  }
  return out;
}

// The shard k an entry name "<shard dir>-<16 hex>" is a copy of.
uint64_t ShardOfEntry(const std::string& name) {
  for (uint64_t k = 0; k < static_cast<uint64_t>(kShards); ++k) {
    if (name.starts_with(format::ShardDirName(static_cast<int>(k)) + "-")) return k;
  }
  ADD_FAILURE() << "entry " << name << " is not a shard's";
  return ~uint64_t{0};
}

// Order kShards with cache DIR: each rank copies only the shards it reads (this epoch's and
// the next's), one entry per shard, and reads them from there: the batches equal cache="off"
// even with those shards' source files gone.
TEST_F(RankTest, WithTheCacheARankCopiesOnlyItsShards) {
  const std::string src = *root_ + "/cached-src";
  fs::remove_all(src);
  fs::copy(*path_, src, fs::copy_options::recursive);
  for (int r = 0; r < kRanks; ++r) {
    LoaderOptions off = Options(SampleOrder::kShards, r, RemainderRule::kUneven, false);
    auto plain = Open(off, *path_);
    ASSERT_TRUE(plain);
    LoaderOptions o = off;
    o.cache = *root_ + "/cache-rank" + std::to_string(r);
    fs::remove_all(o.cache);
    auto loader = Open(o, src);
    ASSERT_TRUE(loader);
    loader::WaitForCacheCopy(*loader);
    Sampler sampler;
    ASSERT_TRUE(Sampler::Create(plain->dataset().info().shard_sizes, o.sampler, &sampler).ok());
    std::set<uint64_t> want;
    for (uint64_t e : {0, 1}) {
      for (uint64_t k : sampler.EpochShards(e)) want.insert(k);
    }
    ASSERT_LT(want.size(), static_cast<size_t>(kShards));
    std::set<uint64_t> have;
    for (const std::string& name : Entries(o.cache)) have.insert(ShardOfEntry(name));
    EXPECT_EQ(have, want) << "rank " << r;
    EXPECT_NE(loader->reading_from().find(std::to_string(want.size()) + " of 6 shards cached"),
              std::string::npos)
        << loader->reading_from();
    // The copies are what the loader reads: the sources of those shards are gone.
    for (uint64_t k : want) {
      ASSERT_TRUE(fs::remove(src + "/" + format::ShardDirName(static_cast<int>(k)) + "/data.mdb"));
    }
    EXPECT_EQ(testing::RunEpochs(loader.get(), 0, 2), testing::RunEpochs(plain.get(), 0, 2))
        << "rank " << r;
    loader.reset();  // its copies of the next epoch's shards stop before the sources change
    fs::remove_all(src);
    fs::copy(*path_, src, fs::copy_options::recursive);
  }
  // cache_overlap = false: the epoch's shards (and the next's) are there when Open returns.
  LoaderOptions o = Options(SampleOrder::kShards, 2, RemainderRule::kUneven, false);
  o.cache = *root_ + "/cache-no-overlap";
  o.cache_overlap = false;
  fs::remove_all(o.cache);
  auto loader = Open(o, src);
  ASSERT_TRUE(loader);
  Sampler sampler;
  ASSERT_TRUE(Sampler::Create(loader->dataset().info().shard_sizes, o.sampler, &sampler).ok());
  std::set<uint64_t> want;
  for (uint64_t e : {0, 1}) {
    for (uint64_t k : sampler.EpochShards(e)) want.insert(k);
  }
  std::set<uint64_t> have;
  for (const std::string& name : Entries(o.cache)) have.insert(ShardOfEntry(name));
  EXPECT_EQ(have, want);
  loader.reset();
  fs::remove_all(src);
}

// Per-shard entries follow the whole-dataset rules: an entry a live loader holds is never
// evicted (the other shard stays in place, with the reason); released, LRU evicts it.
TEST_F(RankTest, ShardEntriesAreLeasedAndEvictedOneByOne) {
  LoaderOptions o = Options(SampleOrder::kShards, 0, RemainderRule::kUneven, false);
  o.cache = *root_ + "/cache-evict";
  fs::remove_all(o.cache);
  auto loader = Open(o, *path_);
  ASSERT_TRUE(loader);
  loader::WaitForCacheCopy(*loader);
  const std::set<std::string> held = Entries(o.cache);
  ASSERT_FALSE(held.empty());
  std::set<uint64_t> held_shards;
  for (const std::string& name : held) held_shards.insert(ShardOfEntry(name));
  uint64_t other = 0;
  while (held_shards.count(other) > 0) ++other;
  ASSERT_LT(other, static_cast<uint64_t>(kShards));

  CacheOptions co;
  co.mode = o.cache;
  co.margin = 0;
  CacheResult probe;
  std::unique_ptr<CacheLease> lease;
  const std::string other_path = *path_ + "/" + format::ShardDirName(static_cast<int>(other));
  // How big the other shard's entry is, found in a scratch cache dir.
  CacheOptions scratch = co;
  scratch.mode = *root_ + "/cache-scratch";
  fs::remove_all(scratch.mode);
  ASSERT_TRUE(AcquireCache(other_path, scratch, &probe, &lease).ok());
  ASSERT_TRUE(probe.cached) << probe.reason;
  lease.reset();
  uint64_t held_bytes = 0;
  for (const std::string& name : held) {
    for (const auto& f : fs::recursive_directory_iterator(o.cache + "/dspipe-cache-v1/" + name)) {
      const std::string n = f.path().filename().string();  // the dataset's files only
      if (f.is_regular_file() && n != "lock.mdb" && n != "dspipe-entry.json" &&
          n != ".dspipe-reserved") {
        held_bytes += f.file_size();
      }
    }
  }
  co.cache_limit = held_bytes + probe.bytes / 2;  // the other shard fits only by evicting

  CacheResult r;
  ASSERT_TRUE(AcquireCache(other_path, co, &r, &lease).ok());
  EXPECT_FALSE(r.cached) << "evicted a shard entry a live loader holds";
  EXPECT_NE(r.reason.find("held by live processes"), std::string::npos) << r.reason;
  EXPECT_TRUE(r.evicted.empty());
  EXPECT_EQ(Entries(o.cache), held);

  loader.reset();  // its leases go with it
  ASSERT_TRUE(AcquireCache(other_path, co, &r, &lease).ok());
  EXPECT_TRUE(r.cached) << r.reason;
  ASSERT_FALSE(r.evicted.empty());
  for (const std::string& e : r.evicted) {
    EXPECT_EQ(held.count(fs::path(e).filename().string()), 1u) << e;
  }
  fs::remove_all(o.cache);
  fs::remove_all(scratch.mode);
}

// Restore continues exactly like an uninterrupted run, also into an epoch whose count differs
// (kShards + kUneven) and with the seed taken from the state.
TEST_F(RankTest, ResumeWithShardsOrder) {
  for (uint64_t seed : {99, 5}) {
    LoaderOptions o = Options(SampleOrder::kShards, 0, RemainderRule::kUneven, false);
    o.sampler.seed = seed;
    auto whole = Open(o, *path_);
    ASSERT_TRUE(whole);
    (void)Epoch(whole.get(), 0);
    whole->set_epoch(1);
    const uint64_t count = whole->samples_per_epoch();  // the current epoch's
    const std::vector<uint64_t> want = Epoch(whole.get(), 1);
    ASSERT_EQ(want.size(), count);

    auto resumed = Open(Options(SampleOrder::kShards, 0, RemainderRule::kUneven, false), *path_);
    ASSERT_TRUE(resumed);
    ASSERT_TRUE(resumed->Restore(LoaderState::At(seed, 1, kBatch)).ok());
    EXPECT_EQ(resumed->samples_per_epoch(), want.size());
    std::vector<uint64_t> rest;
    Batch batch;
    while (true) {
      ASSERT_TRUE(resumed->Next(&batch).ok());
      if (!batch) break;
      for (int i = 0; i < batch.size(); ++i) rest.push_back(batch.indices()[i]);
    }
    EXPECT_EQ(rest, std::vector<uint64_t>(want.begin() + kBatch, want.end())) << "seed " << seed;
    EXPECT_FALSE(resumed->Restore(LoaderState::At(seed, 1, want.size() + 1)).ok());
  }
}

// Lazily opened shards: first reads from many threads at once open each shard once and all
// succeed (TSan runs this too); a process forked after Open is refused, as for eager shards.
TEST_F(RankTest, LazyShardsOpenOnceUnderConcurrentReadsAndNotAfterFork) {
  DatasetOpenOptions lazy;
  lazy.lazy_shards = true;
  std::unique_ptr<Dataset> ds;
  ASSERT_TRUE(Dataset::Open(*path_, lazy, &ds).ok());
  std::atomic<int> bad{0};
  std::vector<std::thread> threads;
  for (int k = 0; k < 6; ++k) {
    threads.emplace_back([&, k] {
      for (uint64_t i = 0; i < kCount; ++i) {
        const uint64_t index = (i * 5 + static_cast<uint64_t>(k)) % kCount;
        if (!ds->Read(index, [](const RecordView&) { return Status::OK(); }).ok()) ++bad;
      }
    });
  }
  for (std::thread& t : threads) t.join();
  EXPECT_EQ(bad.load(), 0);

  std::unique_ptr<Dataset> fresh;
  ASSERT_TRUE(Dataset::Open(*path_, lazy, &fresh).ok());
  const pid_t pid = ::fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    Status s = fresh->Read(0, [](const RecordView&) { return Status::OK(); });
    ::_exit(s.code() == Status::Code::kUnsupported ? 0 : 1);
  }
  int st = 0;
  ASSERT_EQ(::waitpid(pid, &st, 0), pid);
  ASSERT_TRUE(WIFEXITED(st));
  EXPECT_EQ(WEXITSTATUS(st), 0) << "a forked child opened a shard of the parent's Dataset";
  EXPECT_TRUE(fresh->Read(0, [](const RecordView&) { return Status::OK(); }).ok());
}

TEST_F(RankTest, FewerShardsThanRanksIsAClearError) {
  LoaderOptions o = Options(SampleOrder::kShards, 0, RemainderRule::kPad, false);
  o.sampler.world_size = kShards + 1;
  std::unique_ptr<Loader> loader;
  Status s = Loader::Open(*path_, o, &loader);
  EXPECT_EQ(s.code(), Status::Code::kInvalidArgument) << s.ToString();
  EXPECT_NE(s.message().find("6 shards for 7 ranks"), std::string::npos) << s.ToString();
}

}  // namespace
}  // namespace dspipe
