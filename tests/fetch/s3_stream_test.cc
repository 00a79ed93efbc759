// SPDX-License-Identifier: Apache-2.0
// Streaming a remote sharded dataset through a bounded cache (docs/STORAGE.md "Streaming"),
// against a real SeaweedFS (s3_server.h) with server.py --proxy in front of it (faults): every
// epoch sees every sample once, with the batches of the same loader over the local copy; the
// shards held never exceed the limit; each epoch fetches each shard about once (Belady); resume
// mid-epoch; the errors at open (a limit below the shards in flight, the global order); a cut
// connection and 503 SlowDown retried; a shard changed on the server never reaches a batch.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <csignal>
#include <filesystem>
#include <mutex>
#include <numeric>
#include <thread>

#include "cache/cached_dataset.h"
#include "cache/test_hooks.h"
#include "dspipe/loader.h"
#include "dspipe/push.h"
#include "fetch/s3.h"
#include "fetch/s3_fixture.h"
#include "fetch/test_files.h"
#include "profile/profile.h"

namespace dspipe::testing {
namespace {

namespace fs = std::filesystem;

constexpr int kSamples = 48, kShards = 12, kPerShard = kSamples / kShards;
constexpr int kBatch = 4;

// One epoch's batches: the indices in order, and every batch's image + mask bytes.
struct Epoch {
  std::vector<uint64_t> indices;
  std::string bytes;
  Status error;
};

Status NextEpoch(Loader* loader, Epoch* e, int max_batches = -1,
                 const std::function<void()>& after_batch = nullptr) {
  *e = Epoch();
  for (int n = 0; max_batches < 0 || n < max_batches; ++n) {
    Batch b;
    Status s = loader->Next(&b);
    if (!s.ok()) return e->error = s;
    if (!b) break;
    e->indices.insert(e->indices.end(), b.indices(), b.indices() + b.size());
    e->bytes.append(reinterpret_cast<const char*>(b.images()), b.size() * b.shape().image_bytes());
    e->bytes.append(reinterpret_cast<const char*>(b.masks()), b.size() * b.shape().mask_bytes());
    if (after_batch) after_batch();
  }
  return Status::OK();
}

// The bytes of the regular files under `dir`, but those named `skip`. Walked while the streams
// copy, rename (E.tmp/ to E/, E/ to E.tmp/) and delete there: a file listed but gone before its
// stat counts nothing (file_size gives uintmax_t(-1) then, which wrapped the sum around to about
// 2^64), and a directory gone before it is listed holds nothing (with one
// recursive_directory_iterator it ended the whole walk, often before it had counted anything).
uint64_t TreeBytes(const fs::path& dir, const std::string& skip = "") {
  uint64_t n = 0;
  std::error_code ec;
  for (auto it = fs::directory_iterator(dir, ec); !ec && it != fs::directory_iterator();
       it.increment(ec)) {
    std::error_code e2;
    if (it->is_symlink(e2)) continue;
    if (it->is_directory(e2)) {
      n += TreeBytes(it->path(), skip);
      continue;
    }
    // The type comes from the listing: a file gone since is still "regular" here.
    if (!it->is_regular_file(e2) || it->path().filename() == skip) continue;
    const uintmax_t size = it->file_size(e2);
    if (!e2) n += size;
  }
  return n;
}

// Bytes under the cache's own directory that are not its small control files: the entries'
// files and those of copies in progress (E/..., E.tmp/...), less the reader tables (lock.mdb,
// about 40 KiB each, against shards of 72 KiB here) LMDB makes beside each open shard: what the
// limit counts is the dataset's files.
uint64_t CacheDataBytes(const std::string& root) {
  uint64_t n = 0;
  std::error_code ec;
  const fs::path own = fs::path(root) / "dspipe-cache-v1";
  for (auto it = fs::directory_iterator(own, ec); !ec && it != fs::directory_iterator();
       it.increment(ec)) {
    std::error_code e2;
    if (!it->is_symlink(e2) && it->is_directory(e2)) n += TreeBytes(it->path(), "lock.mdb");
  }
  return n;
}

class S3StreamTest : public SeaweedProxyTest {
 protected:
  void SetUp() override {
    SeaweedProxyTest::SetUp();
    if (!Ready()) return;
    std::string log;
    ASSERT_EQ(RunDsconvert({"synth", dir_ + "/src", "--count", std::to_string(kSamples), "--size",
                            "64x48", "--seed", "5", "--threads", "1"},
                           &log),
              0)
        << log;
    local_ = dir_ + "/ds";
    ASSERT_EQ(RunDsconvert({"build", dir_ + "/src", local_, "--shards", std::to_string(kShards),
                            "--threads", "1", "-q"},
                           &log),
              0)
        << log;
    PushResult r;
    ASSERT_OK(PushDataset(local_, "s3://bkt/train/", PushOptions(), &r));
    (void)proxy_->Requests();  // read the proxy's request log: a full pipe would stall it
    for (int i = 0; i < kShards; ++i) {
      char name[32];
      std::snprintf(name, sizeof name, "shard-%05d.lmdb", i);
      const uint64_t b = fs::file_size(local_ + "/" + name + "/data.mdb");
      total_ += b;
      largest_ = std::max(largest_, b);
    }
  }
  // Order kBlocks with blocks of one shard: the epoch reads shard after shard, each shuffled.
  LoaderOptions Options(const std::string& cache, uint64_t limit) const {
    LoaderOptions o;
    o.batch_size = kBatch;
    o.threads = 2;
    o.prefetch = 2;
    o.sampler.order = SampleOrder::kBlocks;
    o.sampler.block_size = kPerShard;
    o.sampler.seed = 11;
    o.cache = cache;
    o.cache_limit = limit;
    o.stream_ahead = 1;
    return o;
  }
  // The same loader over the local copy, read in place: the reference batches.
  std::vector<Epoch> Reference(int epochs) const {
    LoaderOptions o = Options("off", 0);
    std::unique_ptr<Loader> l;
    EXPECT_TRUE(Loader::Open(local_, o, &l).ok());
    std::vector<Epoch> v(epochs);
    for (Epoch& e : v) EXPECT_TRUE(NextEpoch(l.get(), &e).ok());
    return v;
  }
  // A quarter of the dataset's files, or the least limit the stream accepts when that is more:
  // these shards are small next to what each entry holds beside them (LMDB's reader table, about
  // 36 KiB with 512 readers, and the records), which the limit counts too.
  uint64_t Limit() const {
    std::unique_ptr<Loader> l;
    const Status s = Loader::Open("s3://bkt/train/", Options(dir_ + "/cache-min", 1), &l);
    const std::string key = "to at least ";
    const size_t at = s.message().find(key);
    EXPECT_NE(at, std::string::npos) << s.ToString();
    if (at == std::string::npos) return total_ / 4;
    return std::max<uint64_t>(total_ / 4, std::stoull(s.message().substr(at + key.size())));
  }
  static std::shared_ptr<cache::ShardStream> StreamOf(const Loader& l) {
    return cache::CacheStateOf(l.dataset()).stream;
  }

  std::string local_;
  uint64_t total_ = 0, largest_ = 0;
};

TEST_F(S3StreamTest, EveryEpochSeesEverySampleOnceWithinAQuarterOfTheDatasetFetchingItOnce) {
  const uint64_t limit = Limit();
  ASSERT_GE(limit, 2 * largest_) << "the test's shards are too unequal for stream_ahead 1";
  const std::vector<Epoch> ref = Reference(3);
  std::unique_ptr<Loader> l;
  const std::string cache = dir_ + "/cache";
  ASSERT_OK(Loader::Open("s3://bkt/train/", Options(cache, limit), &l));
  std::shared_ptr<cache::ShardStream> stream = StreamOf(*l);
  ASSERT_NE(stream, nullptr) << l->reading_from();
  EXPECT_NE(l->reading_from().find("streaming: "), std::string::npos) << l->reading_from();
  uint64_t most = 0, fetched = 0;
  for (int epoch = 0; epoch < 3; ++epoch) {
    Epoch e;
    ASSERT_OK(NextEpoch(l.get(), &e, -1, [&] { most = std::max(most, CacheDataBytes(cache)); }));
    // The local loader's batches, byte for byte: so every sample exactly once.
    EXPECT_EQ(e.indices, ref[epoch].indices) << "epoch " << epoch;
    EXPECT_TRUE(e.bytes == ref[epoch].bytes) << "epoch " << epoch;
    std::vector<uint64_t> sorted = e.indices;
    std::sort(sorted.begin(), sorted.end());
    std::vector<uint64_t> all(kSamples);
    std::iota(all.begin(), all.end(), uint64_t{0});
    EXPECT_EQ(sorted, all) << "epoch " << epoch;
    const cache::StreamStats st = stream->stats();
    // Belady over an order that reads shard after shard: each shard about once per epoch.
    EXPECT_LE(st.fetched_bytes - fetched, total_ + total_ / 20) << "epoch " << epoch;
    EXPECT_GE(st.fetched_bytes - fetched, total_ / 2) << "epoch " << epoch;  // a quarter cached
    fetched = st.fetched_bytes;
  }
  const cache::StreamStats st = stream->stats();
  EXPECT_LE(st.peak_held_bytes, limit);
  EXPECT_LE(most, limit);
  EXPECT_GT(most, 0u);
  EXPECT_GT(st.evictions, 0u);
  // The data objects went through the proxy as whole-object GETs, one per fetch the stats count.
  // The stream already fetches ahead into the next epoch (the order it was given spans the
  // boundary), so one fetch may be under way: its GET answered and logged, not yet counted. The
  // stats are read first, so every counted fetch's GET is in the log; stream_ahead 1 is one
  // fetch thread, so at most one GET more.
  uint64_t gets = 0;
  for (const nlohmann::json& r : proxy_->Requests()) {
    const std::string p = r["path"];
    if (r["method"] == "GET" && p.find("/data.mdb") != std::string::npos) ++gets;
  }
  EXPECT_GE(gets, st.fetches);
  EXPECT_LE(gets, st.fetches + 1);
  EXPECT_LE(gets, static_cast<uint64_t>(3 * kShards + kShards / 4));
}

TEST_F(S3StreamTest, ResumeMidEpochGivesExactlyTheRemainingSamples) {
  const std::vector<Epoch> ref = Reference(2);
  const LoaderOptions o = Options(dir_ + "/cache", Limit());
  LoaderState state;
  {
    std::unique_ptr<Loader> l;
    ASSERT_OK(Loader::Open("s3://bkt/train/", o, &l));
    Epoch e;
    ASSERT_OK(NextEpoch(l.get(), &e));     // epoch 0
    ASSERT_OK(NextEpoch(l.get(), &e, 5));  // 5 batches of epoch 1
    state = l->state();
  }
  std::unique_ptr<Loader> l;
  ASSERT_OK(Loader::Open("s3://bkt/train/", o, &l));
  ASSERT_OK(l->Restore(state));
  Epoch rest;
  ASSERT_OK(NextEpoch(l.get(), &rest));
  const std::vector<uint64_t> want(ref[1].indices.begin() + 5 * kBatch, ref[1].indices.end());
  EXPECT_EQ(rest.indices, want);
}

TEST_F(S3StreamTest, TheErrorsAtOpenNameTheMinimumLimitAndTheOrdersThatStream) {
  std::unique_ptr<Loader> l;
  // stream_ahead 1 + the shard read: two of the largest shards.
  Status s = Loader::Open("s3://bkt/train/", Options(dir_ + "/cache", largest_), &l);
  EXPECT_EQ(s.code(), Status::Code::kInvalidArgument) << s.ToString();
  // The minimum counts each shard with what its entry holds beside its files.
  const size_t at = s.message().find("to at least ");
  ASSERT_NE(at, std::string::npos) << s.ToString();
  EXPECT_GE(std::stoull(s.message().substr(at + 12)), 2 * largest_) << s.ToString();
  EXPECT_NE(s.message().find("with its LMDB lock file and records"), std::string::npos)
      << s.ToString();
  // The global order reads any record at any time: refused when the dataset does not fit.
  LoaderOptions g = Options(dir_ + "/cache", Limit());
  g.sampler.order = SampleOrder::kGlobal;
  s = Loader::Open("s3://bkt/train/", g, &l);
  EXPECT_EQ(s.code(), Status::Code::kUnsupported) << s.ToString();
  EXPECT_NE(s.message().find("\"shards\""), std::string::npos) << s.ToString();
  EXPECT_NE(s.message().find("\"blocks\""), std::string::npos) << s.ToString();
  EXPECT_FALSE(fs::exists(dir_ + "/cache/dspipe-cache-v1") && CacheDataBytes(dir_ + "/cache") > 0);
}

TEST_F(S3StreamTest, CutConnectionsAndSlowDownAreRetriedAndAChangedShardNeverReachesABatch) {
  const std::vector<Epoch> ref = Reference(1);
  proxy_->Set("/bkt/train/shard-00003.lmdb/data.mdb", "cut=1000");
  proxy_->Set("/bkt/train/shard-00007.lmdb/data.mdb", "fail=2&code=503&retry_after=0");
  {
    std::unique_ptr<Loader> l;
    ASSERT_OK(Loader::Open("s3://bkt/train/", Options(dir_ + "/cache1", Limit()), &l));
    Epoch e;
    ASSERT_OK(NextEpoch(l.get(), &e));
    EXPECT_EQ(e.indices, ref[0].indices);
    EXPECT_TRUE(e.bytes == ref[0].bytes);
  }
  // Both faults were met: shard 3's body cut and resumed with a Range; shard 7 answered 503.
  int resumed = 0, slowdowns = 0;
  for (const nlohmann::json& r : proxy_->Requests()) {
    if (r["path"] == "/bkt/train/shard-00003.lmdb/data.mdb" && !r["range"].is_null()) ++resumed;
    if (r["path"] == "/bkt/train/shard-00007.lmdb/data.mdb" && r["n"].get<int>() < 2) ++slowdowns;
  }
  EXPECT_GE(resumed, 1);
  EXPECT_EQ(slowdowns, 2);
  // Shard 5's object replaced on the server (the manifest unchanged): its fetch fails its
  // sha256 check, the read names the shard, and no batch before it holds other bytes.
  std::unique_ptr<fetch::s3::Client> c;
  ASSERT_OK(fetch::s3::Client::Make(FetchOptions(), &c));
  std::string other(static_cast<size_t>(fs::file_size(local_ + "/shard-00005.lmdb/data.mdb")),
                    '\x5a');
  ASSERT_OK(c->Put("s3://bkt/train/shard-00005.lmdb/data.mdb", other));
  (void)proxy_->Requests();
  std::unique_ptr<Loader> l;
  ASSERT_OK(Loader::Open("s3://bkt/train/", Options(dir_ + "/cache2", Limit()), &l));
  Epoch e;
  Status s = NextEpoch(l.get(), &e);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.ToString().find("shard-00005.lmdb"), std::string::npos) << s.ToString();
  EXPECT_NE(s.ToString().find("sha256"), std::string::npos) << s.ToString();
  ASSERT_LE(e.indices.size(), ref[0].indices.size());
  EXPECT_TRUE(std::equal(e.indices.begin(), e.indices.end(), ref[0].indices.begin()));
  EXPECT_TRUE(e.bytes == ref[0].bytes.substr(0, e.bytes.size()));
}

// Issue 39 item 13. A stream's eviction deletes the shard's files without holding the stream's
// lock: while the first eviction sits between its rename and its delete (the kEvictRenamed
// hook, on the fetch thread), another thread's stats() and Describe() return, and a child forked
// right there finds nothing of the stream held: SetOrder, Advance, stats and Describe touch
// nothing of the parent's (stats are empty: the child streamed nothing; Describe says why) and
// a read is refused naming fork(). Then the epoch completes with every sample once.
// The 60 s bounds only turn the old deadlocks into failures; a passing run never waits on them.
TEST_F(S3StreamTest, EvictionDeletesWithoutTheLockAndAForkedChildTouchesNothingOfTheStream) {
  const std::vector<Epoch> ref = Reference(1);
  std::unique_ptr<Loader> l;
  ASSERT_OK(Loader::Open("s3://bkt/train/", Options(dir_ + "/cache", Limit()), &l));
  std::shared_ptr<cache::ShardStream> stream = StreamOf(*l);
  ASSERT_NE(stream, nullptr);
  const Dataset* ds = &l->dataset();
  std::atomic<bool> once{false};
  bool other_thread_returned = false;
  int child_status = -1;
  std::string other_describe;
  cache::SetStepHookForTest(
      [&](cache::Step step, const std::string&, size_t, const cache::CancelToken*) {
        if (step != cache::Step::kEvictRenamed || once.exchange(true)) return;
        struct Shared {
          std::mutex m;
          std::condition_variable cv;
          bool done = false;
          std::string describe;
        };
        auto sh = std::make_shared<Shared>();
        std::thread([sh, stream] {  // detached: on the old code it returns only after the hook
          const cache::StreamStats st = stream->stats();
          const std::string d = stream->Describe();
          std::lock_guard<std::mutex> g(sh->m);
          sh->describe = d + " / " + std::to_string(st.fetches) + " fetched";
          sh->done = true;
          sh->cv.notify_all();
        })
            .detach();
        {
          std::unique_lock<std::mutex> g(sh->m);
          other_thread_returned =
              sh->cv.wait_for(g, std::chrono::seconds(60), [&] { return sh->done; });
          other_describe = sh->describe;
        }
        const pid_t pid = ::fork();
        if (pid == 0) {
          ::alarm(60);  // the old code waits here forever for a lock its parent's thread held
          int bad = 0;
          stream->SetOrder({0, 1, 2}, {});
          stream->Advance(1);
          const cache::StreamStats st = stream->stats();
          if (st.fetches != 0 || st.held_bytes != 0) bad |= 1;
          if (stream->Describe().find("fork()") == std::string::npos) bad |= 2;
          const Status r = ds->Read(0, [](const RecordView&) { return Status::OK(); });
          if (r.code() != Status::Code::kUnsupported ||
              r.message().find("fork()") == std::string::npos) {
            bad |= 4;
          }
          ::_exit(bad);
        }
        if (pid > 0) ::waitpid(pid, &child_status, 0);
      });
  Epoch e;
  const Status s = NextEpoch(l.get(), &e);
  cache::SetStepHookForTest(nullptr);
  ASSERT_OK(s);
  ASSERT_TRUE(once.load()) << "no shard was evicted";
  EXPECT_TRUE(other_thread_returned)
      << "stats() waited for the stream's lock while an evicted shard's files were deleted";
  EXPECT_NE(other_describe.find("streaming: "), std::string::npos) << other_describe;
  ASSERT_TRUE(WIFEXITED(child_status)) << "the forked child was killed by signal "
                                       << (WIFSIGNALED(child_status) ? WTERMSIG(child_status) : 0)
                                       << " (SIGALRM: it waited for the stream's lock)";
  EXPECT_EQ(WEXITSTATUS(child_status), 0)
      << "bit 1: stats not empty, 2: Describe without fork(), 4: Read not refused";
  EXPECT_EQ(e.indices, ref[0].indices);
  EXPECT_TRUE(e.bytes == ref[0].bytes);
}

// Every byte under the cache's own directory: entries with their LMDB lock files and completion
// records, copies in progress, the entries' lock, lease and use records, the budget lock.
// (TreeBytes: what the streams change meanwhile.)
uint64_t CacheDirBytes(const std::string& root) {
  return TreeBytes(fs::path(root) / "dspipe-cache-v1");
}

// Issue 39 item 11: 16 shards of ~0.8 MiB (64 samples of 256x192 stored raw, 4 a shard),
// streamed through a cache limited to a quarter of the dataset (room for stream_ahead 2 + 1
// shards).
class S3StreamLimitTest : public SeaweedProxyTest {
 protected:
  static constexpr int kCount = 64, kShards16 = 16, kPer = kCount / kShards16;
  void SetUp() override {
    SeaweedProxyTest::SetUp();
    if (!Ready()) return;
    std::string log;
    ASSERT_EQ(RunDsconvert({"synth", dir_ + "/src", "--count", std::to_string(kCount), "--size",
                            "256x192", "--seed", "7", "--threads", "1"},
                           &log),
              0)
        << log;
    local_ = dir_ + "/ds";
    ASSERT_EQ(RunDsconvert({"build", dir_ + "/src", local_, "--shards", std::to_string(kShards16),
                            "--store", "raw", "--compression", "none", "--threads", "1", "-q"},
                           &log),
              0)
        << log;
    PushResult r;
    ASSERT_OK(PushDataset(local_, "s3://bkt/sixteen/", PushOptions(), &r));
    // Straight to SeaweedFS from here: no fault is injected, and the proxy's request log
    // (a pipe nobody reads during the epochs) would fill and stall it.
    env_.reset();
    env_ = std::make_unique<S3Env>("http://127.0.0.1:" + std::to_string(weed_->port()));
    for (auto& e : fs::recursive_directory_iterator(local_)) {
      if (e.is_regular_file()) total_ += e.file_size();
    }
  }
  LoaderOptions Options(const std::string& cache, uint64_t limit, SampleOrder order) const {
    LoaderOptions o;
    o.batch_size = 4;
    o.threads = 2;
    o.prefetch = 2;
    o.sampler.order = order;
    o.sampler.block_size = kPer;
    o.sampler.seed = 3;
    o.cache = cache;
    o.cache_limit = limit;
    return o;  // stream_ahead 2, the default
  }
  std::string local_;
  uint64_t total_ = 0;
};

// A limit accepted at open holds for every epoch, in the orders "shards" and "blocks": both
// epochs complete with every sample once, and the cache directory (every byte in it, lock files
// and records included) never holds more than the limit. On the old code the stream's own
// entries and copies counted as other processes' against its limit ("cannot be cached (needs
// ..., cache_limit ... has ... in other entries; 3 other entries held by live processes ...)").
TEST_F(S3StreamLimitTest, ALimitAcceptedAtOpenHoldsForEveryEpochInShardsAndBlocksOrders) {
  const uint64_t limit = total_ / 4;
  for (const SampleOrder order : {SampleOrder::kShards, SampleOrder::kBlocks}) {
    SCOPED_TRACE(order == SampleOrder::kShards ? "order shards" : "order blocks");
    const std::string cache = dir_ + (order == SampleOrder::kShards ? "/cache-s" : "/cache-b");
    std::unique_ptr<Loader> l;
    ASSERT_OK(Loader::Open("s3://bkt/sixteen/", Options(cache, limit, order), &l));
    std::shared_ptr<cache::ShardStream> stream = cache::CacheStateOf(l->dataset()).stream;
    ASSERT_NE(stream, nullptr) << l->reading_from();
    uint64_t most = 0;
    for (int epoch = 0; epoch < 2; ++epoch) {
      Epoch e;
      ASSERT_OK(NextEpoch(l.get(), &e, -1, [&] { most = std::max(most, CacheDirBytes(cache)); }));
      std::vector<uint64_t> sorted = e.indices;
      std::sort(sorted.begin(), sorted.end());
      std::vector<uint64_t> all(kCount);
      std::iota(all.begin(), all.end(), uint64_t{0});
      EXPECT_EQ(sorted, all) << "epoch " << epoch;
    }
    const cache::StreamStats st = stream->stats();
    EXPECT_LE(st.peak_held_bytes, limit);
    EXPECT_GT(st.evictions, 0u);
    EXPECT_LE(most, limit) << "the cache directory held more than the limit";
    EXPECT_GT(most, 0u);
  }
}

// Two ranks stream their halves (order "shards", 2 ranks) through ONE cache directory at once,
// each with a limit of a quarter of the dataset: 3 epochs, each rank's samples once per epoch
// (the same as the rank's loader over the local copy), and the directory never holds more than
// the two limits together. On the old code each rank counted the other's leased shards against
// its own limit and failed mid-epoch.
TEST_F(S3StreamLimitTest, TwoRanksSharingOneCacheDirStreamThreeEpochsEachSampleOncePerRank) {
  const uint64_t limit = total_ / 4;
  const std::string cache = dir_ + "/cache";
  struct Rank {
    std::unique_ptr<Loader> loader;
    std::vector<std::vector<uint64_t>> want, got;
    Status error;
    uint64_t most = 0;
  };
  Rank ranks[2];
  for (int r = 0; r < 2; ++r) {
    LoaderOptions o = Options(cache, limit, SampleOrder::kShards);
    o.sampler.world_size = 2;
    o.sampler.rank = r;
    ASSERT_OK(Loader::Open("s3://bkt/sixteen/", o, &ranks[r].loader));
    ASSERT_NE(cache::CacheStateOf(ranks[r].loader->dataset()).stream, nullptr);
    LoaderOptions local = o;
    local.cache = "off";
    local.cache_limit = 0;
    std::unique_ptr<Loader> ref;
    ASSERT_OK(Loader::Open(local_, local, &ref));
    for (int epoch = 0; epoch < 3; ++epoch) {
      Epoch e;
      ASSERT_OK(NextEpoch(ref.get(), &e));
      ranks[r].want.push_back(e.indices);
    }
  }
  std::vector<std::thread> threads;
  for (Rank& rank : ranks) {
    threads.emplace_back([&rank, &cache] {
      for (int epoch = 0; epoch < 3 && rank.error.ok(); ++epoch) {
        Epoch e;
        rank.error = NextEpoch(rank.loader.get(), &e, -1,
                               [&] { rank.most = std::max(rank.most, CacheDirBytes(cache)); });
        rank.got.push_back(e.indices);
      }
    });
  }
  for (std::thread& t : threads) t.join();
  std::vector<uint64_t> both;
  for (int r = 0; r < 2; ++r) {
    ASSERT_OK(ranks[r].error);
    ASSERT_EQ(ranks[r].got.size(), 3u);
    for (int epoch = 0; epoch < 3; ++epoch) {
      EXPECT_EQ(ranks[r].got[epoch], ranks[r].want[epoch]) << "rank " << r << " epoch " << epoch;
    }
    EXPECT_LE(ranks[r].most, 2 * limit) << "rank " << r;
  }
  // The two ranks' shares of an epoch are the whole dataset, once.
  for (int r = 0; r < 2; ++r)
    both.insert(both.end(), ranks[r].got[0].begin(), ranks[r].got[0].end());
  std::sort(both.begin(), both.end());
  std::vector<uint64_t> all(kCount);
  std::iota(all.begin(), all.end(), uint64_t{0});
  EXPECT_EQ(both, all);
}

// dsbench measures a streamed run like any other, and says per epoch what came over the network.
TEST_F(S3StreamTest, DsbenchReportsEachEpochsNetworkFigures) {
  profile::ProfileOptions po;
  po.threads = 2;
  po.batch_size = kBatch;
  po.batches = 0;
  po.epochs = 2;
  po.warmup = 0;
  po.order = SampleOrder::kBlocks;
  po.block_size = kPerShard;
  po.ram_cache = dir_ + "/cache";
  po.cache_limit = Limit();
  po.stream_ahead = 1;
  profile::ProfileResult r;
  ASSERT_OK(profile::RunProfile("s3://bkt/train/", po, &r));
  ASSERT_EQ(r.epochs.size(), 2u);
  for (const profile::EpochResult& e : r.epochs) {
    EXPECT_TRUE(e.streamed);
    EXPECT_EQ(e.source, "stream");
    EXPECT_EQ(e.images, static_cast<uint64_t>(kSamples));
    EXPECT_GT(e.net_fetches, 0u);
    EXPECT_GT(e.net_bytes, 0u);
    EXPECT_LE(e.net_bytes, total_ + total_ / 20);
    EXPECT_EQ(e.shard_hits + e.shard_waits, e.records_cache);
  }
  profile::Report rep;
  rep.run = r;
  const std::string text = profile::ReportText(rep);
  EXPECT_NE(text.find("network: "), std::string::npos) << text;
  EXPECT_NE(profile::ReportJson(rep)["epochs"][0].dump().find("\"network\""), std::string::npos);
}

}  // namespace
}  // namespace dspipe::testing
