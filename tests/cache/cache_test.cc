// SPDX-License-Identifier: Apache-2.0
// The RAM-disk cache against real dspipe datasets and real tmpfs directories (/dev/shm):
// copies, the budget fallback, ENOSPC before copying, a kill mid-copy, two racing processes,
// leases against eviction, LRU order, the Loader reading the copy, and a plain LMDB whose masks
// LMDB is cached in the same entry.
#include "dspipe/cache.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <lmdb.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <condition_variable>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "cache/cache_dir.h"
#include "cache/cached_dataset.h"
#include "cache/populate.h"
#include "cache/test_hooks.h"
#include "cache_support.h"
#include "core/fault_env.h"
#include "dspipe/dataset.h"
#include "dspipe/env.h"
#include "dspipe/format.h"
#include "dspipe/loader.h"
#include "loader/cache_copy.h"
#include "loader/loader_fixture.h"
#include "profile/profile.h"

namespace dspipe {
namespace {

namespace fs = std::filesystem;
using testing::Build;
using testing::FreshDir;
using testing::WriteSourceTree;
using namespace cachetest;  // NOLINT: the shared test helpers

// The cache's own directory below a cache root (everything the cache makes is in there).
std::string Own(const std::string& root) { return root + "/" + cache::kOwnDirName; }

// Names in the cache's own directory of root ending with suffix.
std::vector<std::string> Named(const std::string& root, const std::string& suffix) {
  std::vector<std::string> out;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(Own(root), ec)) {
    const std::string n = e.path().filename().string();
    if (n.ends_with(suffix)) out.push_back(n);
  }
  return out;
}

class CacheTest : public CacheFixture {};

TEST_F(CacheTest, CopiesVerifiedDatasetOnceAndReusesTheEntry) {
  for (int shards : {1, 3}) {
    SCOPED_TRACE("shards " + std::to_string(shards));
    const std::string src = Make("ds" + std::to_string(shards), shards);
    const std::string root = shm_.path() + "/c";
    CacheResult r;
    std::unique_ptr<CacheLease> lease;
    Status s = AcquireCache(src, Options(root), &r, &lease);
    ASSERT_TRUE(s.ok()) << s.ToString();
    ASSERT_TRUE(r.cached) << r.reason;
    EXPECT_TRUE(r.copied);
    EXPECT_NE(lease, nullptr);
    EXPECT_EQ(r.path, r.entry + "/ds" + std::to_string(shards));
    EXPECT_TRUE(Contains(r.Describe(), "cached at " + r.entry)) << r.Describe();
    EXPECT_TRUE(Named(root, ".tmp").empty());
    // Every file but LMDB's reader table, byte for byte.
    uint64_t bytes = 0;
    for (const auto& e : fs::recursive_directory_iterator(src)) {
      if (!e.is_regular_file()) continue;
      const std::string rel = fs::relative(e.path(), src).string();
      if (e.path().filename() == "lock.mdb") {
        EXPECT_FALSE(fs::exists(r.path + "/" + rel)) << rel;
        continue;
      }
      bytes += e.file_size();
      EXPECT_EQ(ReadAll(e.path().string()), ReadAll(r.path + "/" + rel)) << rel;
    }
    EXPECT_EQ(r.bytes, bytes);
    EXPECT_EQ(Records(r.path), Records(src));
    // The default Env copies inside the kernel (copy_file_range, or sendfile across
    // filesystems), not through a user-space buffer.
    EXPECT_NE(cache::LastCopyMethod(), "read/write");

    CacheResult again;
    std::unique_ptr<CacheLease> lease2;
    ASSERT_TRUE(AcquireCache(src, Options(root), &again, &lease2).ok());
    EXPECT_TRUE(again.cached);
    EXPECT_FALSE(again.copied);
    EXPECT_EQ(again.path, r.path);
  }
}

TEST_F(CacheTest, ChangedDatasetGetsANewEntry) {
  const std::string src = Make("ds");
  const std::string root = shm_.path() + "/c";
  CacheResult a, b;
  std::unique_ptr<CacheLease> la, lb;
  ASSERT_TRUE(AcquireCache(src, Options(root), &a, &la).ok());
  Make("ds");  // rebuilt: new files, new mtimes
  ASSERT_TRUE(AcquireCache(src, Options(root), &b, &lb).ok());
  ASSERT_TRUE(a.cached && b.cached);
  EXPECT_NE(a.entry, b.entry);
  EXPECT_TRUE(b.copied);
}

TEST_F(CacheTest, TinyCapacityOrBudgetFallsBackInPlaceWithTheReason) {
  const std::string src = Make("ds");
  const std::string root = shm_.path() + "/c";
  CacheResult r;
  std::unique_ptr<CacheLease> lease;

  CacheOptions o = Options(root);
  o.cache_limit = 1024;
  ASSERT_TRUE(AcquireCache(src, o, &r, &lease).ok());
  EXPECT_FALSE(r.cached);
  EXPECT_EQ(r.path, src);
  EXPECT_EQ(lease, nullptr);
  EXPECT_TRUE(Contains(r.reason, "larger than cache_limit (1.0 KiB)")) << r.reason;
  EXPECT_TRUE(Contains(r.Describe(), "in place: ")) << r.Describe();
  EXPECT_FALSE(fs::exists(root)) << "nothing is made for a dataset that cannot fit";

  // The pipeline's own buffers take all the RAM: a tmpfs cache would only push it into swap.
  o = Options(root);
  o.reserved_ram = uint64_t{1} << 60;
  ASSERT_TRUE(AcquireCache(src, o, &r, &lease).ok());
  EXPECT_FALSE(r.cached);
  EXPECT_TRUE(Contains(r.reason, "RAM left 0 B")) << r.reason;
  EXPECT_TRUE(Contains(r.reason, "budget 0 B")) << r.reason;

  // Little free space on the cache's filesystem (reported by a FaultEnv).
  core::FaultEnv fe;
  fe.SetFreeSpace(4096);
  o = Options(root);
  o.env = &fe;
  ASSERT_TRUE(AcquireCache(src, o, &r, &lease).ok());
  EXPECT_FALSE(r.cached);
  EXPECT_TRUE(Contains(r.reason, "free on " + root + " 4.0 KiB")) << r.reason;
  EXPECT_EQ(fe.writes(), 0);
  EXPECT_TRUE(Named(root, ".tmp").empty());
  EXPECT_TRUE(Named(root, ".used").empty());

  // The margin counts too.
  o = Options(root);
  o.margin = uint64_t{1} << 60;
  ASSERT_TRUE(AcquireCache(src, o, &r, &lease).ok());
  EXPECT_FALSE(r.cached);
  EXPECT_TRUE(Contains(r.reason, "margin 1048576.0 TiB")) << r.reason;

  // "off" never touches anything.
  o.mode = "off";
  ASSERT_TRUE(AcquireCache(src, o, &r, &lease).ok());
  EXPECT_FALSE(r.cached);
  EXPECT_EQ(r.reason, "cache off");
}

// Free space looks plentiful (as when another process fills the tmpfs after the check), but
// the reservation fails: an ENOSPC naming the file before a single byte is copied.
// writes_after_reserved() counts the writes made after the reservation step (the cache's own
// records before it, the marker and the reservation, are not data).
class FullAfterCheckEnv : public core::FaultEnv {
 public:
  FullAfterCheckEnv() {
    cache::SetStepHookForTest(
        [this](cache::Step step, const std::string&, size_t, const cache::CancelToken*) {
          if (step == cache::Step::kReserved) at_reserved_ = writes();
        });
  }
  ~FullAfterCheckEnv() override { cache::SetStepHookForTest(nullptr); }
  void SetFreeSpace(uint64_t bytes) { SetAllocateLimit(bytes); }  // what fallocate sees
  int writes_after_reserved() const { return at_reserved_ < 0 ? -1 : writes() - at_reserved_; }

 private:
  std::atomic<int> at_reserved_{-1};
};

// "auto" chose the directory, so an unusable one means "in place" (say why), not a failed
// open; the same directory named by the user is an error. A path under a regular file cannot
// be made even by root (CI runs as root, so permissions would not show it).
TEST_F(CacheTest, AutoWithAnUnusableCacheDirFallsBackInPlace) {
  const std::string src = Make("ds");
  const std::string blocker = work_ + "/not-a-dir";
  std::ofstream(blocker) << "x";
  const std::string root = blocker + "/cache";
  ASSERT_EQ(::setenv("DSPIPE_CACHE_DIR", root.c_str(), 1), 0);
  CacheResult r;
  std::unique_ptr<CacheLease> lease;
  CacheOptions o;
  o.mode = "auto";
  o.margin = 0;
  const Status s = AcquireCache(src, o, &r, &lease);
  EXPECT_TRUE(s.ok()) << s.ToString();
  EXPECT_FALSE(r.cached);
  EXPECT_EQ(r.path, src);
  EXPECT_TRUE(Contains(r.reason, "the cache dir " + root + " is not usable")) << r.reason;

  o.mode = root;
  EXPECT_FALSE(AcquireCache(src, o, &r, &lease).ok()) << "a named dir that cannot be made fails";
  ASSERT_EQ(::unsetenv("DSPIPE_CACHE_DIR"), 0);

  // Unset, "auto" resolves to this user's /dev/shm/dspipe-cache-<uid> on a machine whose
  // /dev/shm is a tmpfs.
  std::string why;
  const std::string resolved = CacheRoot("auto", &why);
  EXPECT_TRUE(resolved == "/dev/shm/dspipe-cache-" + std::to_string(::geteuid()) ||
              (resolved.empty() && !why.empty()))
      << resolved;
}

// Nothing is copied unless asked (docs/CACHE.md): CacheOptions defaults to "off" as
// LoaderOptions::cache does. (DSPIPE_CACHE_DIR points into the test's dir, so a default that
// cached would do it there.)
TEST_F(CacheTest, DefaultModeIsOffAsTheLoaders) {
  EXPECT_EQ(CacheOptions().mode, "off");
  EXPECT_EQ(CacheOptions().mode, LoaderOptions().cache);
  const std::string src = Make("ds");
  ASSERT_EQ(::setenv("DSPIPE_CACHE_DIR", (shm_.path() + "/c").c_str(), 1), 0);
  CacheResult r;
  std::unique_ptr<CacheLease> lease;
  const Status s = AcquireCache(src, CacheOptions(), &r, &lease);
  ASSERT_EQ(::unsetenv("DSPIPE_CACHE_DIR"), 0);
  ASSERT_TRUE(s.ok()) << s.ToString();
  EXPECT_FALSE(r.cached);
  EXPECT_EQ(r.path, src);
  EXPECT_EQ(r.reason, "cache off");
  EXPECT_EQ(lease, nullptr);
}

TEST_F(CacheTest, FullFilesystemIsAClearEnospcBeforeCopying) {
  // manifest.json (small, sorted first) then the shards: a copier that reserved each file just
  // before copying it would have written the manifest before failing.
  const std::string src = Make("ds", 3);
  const std::string root = shm_.path() + "/c";
  constexpr uint64_t kFree = 20000;
  ASSERT_LT(fs::file_size(src + "/manifest.json"), kFree);
  ASSERT_GT(fs::file_size(src + "/shard-00000.lmdb/data.mdb"), kFree);
  FullAfterCheckEnv fe;
  fe.SetFreeSpace(kFree);  // what fallocate sees
  CacheOptions o = Options(root);
  o.env = &fe;
  CacheResult r;
  std::unique_ptr<CacheLease> lease;
  Status s = AcquireCache(src, o, &r, &lease);
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.code(), Status::Code::kIOError) << s.ToString();
  EXPECT_TRUE(Contains(s.message(), "No space left on device")) << s.ToString();
  EXPECT_TRUE(Contains(s.message(), "fallocate " + Own(root))) << s.ToString();
  EXPECT_TRUE(Contains(s.message(), "data.mdb")) << s.ToString();
  EXPECT_EQ(fe.writes_after_reserved(), 0) << "bytes were copied before the space was reserved";
  EXPECT_EQ(lease, nullptr);
  EXPECT_TRUE(Named(root, ".tmp").empty());
  EXPECT_TRUE(Named(root, ".used").empty());
  EXPECT_TRUE(Named(root, "ds").empty());
  for (const auto& e : fs::directory_iterator(Own(root))) {
    EXPECT_FALSE(e.is_directory()) << "left behind: " << e.path();
  }
}

TEST_F(CacheTest, KillMidCopyLeavesNoEntryAndTheNextStartRemovesTheOrphan) {
  const std::string src = Make("ds", 3);  // manifest.json + 3 shards: several files
  const std::string root = shm_.path() + "/c";
  // Stop the copier right after its first file is complete, while it holds the entry's lock.
  Child a = StartTool({src, root, "--stop-after-files", "1"}, {});
  ASSERT_TRUE(WaitStopped(a.pid));
  ASSERT_EQ(Named(root, ".tmp").size(), 1u);
  const std::string tmp = Own(root) + "/" + Named(root, ".tmp")[0];
  const std::string entry = tmp.substr(0, tmp.size() - 4);
  // A live (stopped) creator's temp dir is not an orphan.
  int removed = -1;
  ASSERT_TRUE(CleanCacheOrphans(root, nullptr, &removed).ok());
  EXPECT_EQ(removed, 0);
  EXPECT_TRUE(fs::exists(tmp));

  ::kill(a.pid, SIGKILL);
  int code = 0;
  Finish(&a, &code);
  EXPECT_EQ(code, -SIGKILL);
  EXPECT_FALSE(fs::exists(entry)) << "a killed copy left a final entry";
  EXPECT_FALSE(fs::exists(entry + ".used"));
  EXPECT_TRUE(fs::exists(tmp));

  // The next start removes the orphan and makes a complete copy.
  ASSERT_TRUE(CleanCacheOrphans(root, nullptr, &removed).ok());
  EXPECT_EQ(removed, 1);
  EXPECT_FALSE(fs::exists(tmp));
  CacheResult r;
  std::unique_ptr<CacheLease> lease;
  ASSERT_TRUE(AcquireCache(src, Options(root), &r, &lease).ok());
  ASSERT_TRUE(r.cached) << r.reason;
  EXPECT_TRUE(r.copied);
  EXPECT_EQ(r.entry, entry);
  EXPECT_EQ(Records(r.path), Records(src));
}

TEST_F(CacheTest, AcquireRemovesAnOrphanLeftByAKilledCopy) {
  const std::string src = Make("ds", 3);
  const std::string other = Make("other");
  const std::string root = shm_.path() + "/c";
  Child a = StartTool({src, root, "--stop-after-files", "1"}, {});
  ASSERT_TRUE(WaitStopped(a.pid));
  ::kill(a.pid, SIGKILL);
  int code = 0;
  Finish(&a, &code);
  ASSERT_EQ(Named(root, ".tmp").size(), 1u);
  // Opening any other dataset cleans it.
  CacheResult r;
  std::unique_ptr<CacheLease> lease;
  ASSERT_TRUE(AcquireCache(other, Options(root), &r, &lease).ok());
  EXPECT_TRUE(r.cached);
  EXPECT_TRUE(Named(root, ".tmp").empty());
}

// A kill during the use record's write (Directory::WriteFileAtomic) leaves
// E.used.tmp-<16 hex>: the next start removes it unless a process holds E.lock (every use record
// is written under it), whatever process wrote it (no pid is asked about: in containers sharing
// /dev/shm a live writer's pid may be another namespace's). The lock, lease and use files of an
// entry that is gone are removed too; names that are not the cache's are left alone.
TEST_F(CacheTest, StartRemovesUseRecordTempFilesNobodyIsWriting) {
  const std::string root = shm_.path() + "/c";
  // Make the cache dir (marked) with one real entry in it.
  const std::string src = Make("ds");
  {
    CacheResult r;
    std::unique_ptr<CacheLease> lease;
    ASSERT_TRUE(AcquireCache(src, Options(root), &r, &lease).ok());
    ASSERT_TRUE(r.cached) << r.reason;
  }
  const std::string own = Own(root);
  const std::string e1 = "e1-0123456789abcdef", e2 = "e2-0123456789abcdef";
  const std::string of_dead = e1 + ".used.tmp-00112233445566aa";
  const std::string of_writer = e2 + ".used.tmp-00112233445566bb";
  const std::string not_ours = "notes.used.tmp-00112233445566cc";
  for (const std::string& n : {of_dead, of_writer, not_ours, e1 + ".used", e1 + ".lease"}) {
    std::ofstream(own + "/" + n) << "1 2";
  }
  std::unique_ptr<FileLock> writer;
  ASSERT_TRUE(Env::Default()->LockFile(own + "/" + e2 + ".lock", false, &writer).ok());
  int removed = 0;
  ASSERT_TRUE(CleanCacheOrphans(root, nullptr, &removed).ok());
  EXPECT_EQ(removed, 1);
  EXPECT_FALSE(fs::exists(own + "/" + of_dead));
  EXPECT_TRUE(fs::exists(own + "/" + of_writer)) << "its writer holds " << e2 << ".lock";
  EXPECT_TRUE(fs::exists(own + "/" + not_ours)) << "not a name of the cache's";
  EXPECT_FALSE(fs::exists(own + "/" + e1 + ".used")) << "an entry that is gone";
  EXPECT_FALSE(fs::exists(own + "/" + e1 + ".lease"));
  EXPECT_EQ(Named(root, ".used").size(), 1u) << "the real entry's record stays";
  writer.reset();  // the writer is gone: the next start removes its file
  ASSERT_TRUE(CleanCacheOrphans(root, nullptr, &removed).ok());
  EXPECT_EQ(removed, 1);
  EXPECT_FALSE(fs::exists(own + "/" + of_writer));
  EXPECT_TRUE(fs::exists(own + "/" + not_ours));
}

TEST_F(CacheTest, TwoRacingProcessesMakeOneCopy) {
  const std::string src = Make("ds", 3);
  const std::string root = shm_.path() + "/c";
  // A starts copying and stops mid-copy, holding the entry's lock.
  Child a = StartTool({src, root, "--stop-after-files", "1"}, {});
  ASSERT_TRUE(WaitStopped(a.pid));
  // B comes along and waits for A (it says so, at info level, before blocking on the lock).
  Child b = StartTool({src, root}, {"DSPIPE_LOG_LEVEL=info"});
  std::string b_text;
  ASSERT_TRUE(ReadUntil(b.out, "waiting for the process that holds", &b_text)) << b_text;
  ::kill(a.pid, SIGCONT);
  int code_a = 0, code_b = 0;
  const std::string a_text = Finish(&a, &code_a);
  b_text = Finish(&b, &code_b, b_text);
  ASSERT_EQ(code_a, 0) << a_text;
  ASSERT_EQ(code_b, 0) << b_text;
  EXPECT_TRUE(Contains(a_text, "result cached=1 copied=1 path=")) << a_text;
  EXPECT_TRUE(Contains(b_text, "result cached=1 copied=0 path=")) << b_text;
  const auto path_of = [](const std::string& t) {
    const size_t p = t.find("path=");
    return t.substr(p + 5, t.find('\n', p) - p - 5);
  };
  EXPECT_EQ(path_of(a_text), path_of(b_text));
  // One entry, no temp dir.
  EXPECT_EQ(Named(root, ".used").size(), 1u);
  EXPECT_TRUE(Named(root, ".tmp").empty());
  EXPECT_EQ(Records(path_of(b_text)), Records(src));
}

TEST_F(CacheTest, EvictionNeverTakesAnEntryALiveReaderHolds) {
  const std::string d1 = Make("d1");
  const std::string d2 = Make("d2");
  const std::string root = shm_.path() + "/c";
  CacheResult r1;
  std::unique_ptr<CacheLease> l1;
  ASSERT_TRUE(AcquireCache(d1, Options(root), &r1, &l1).ok());
  ASSERT_TRUE(r1.cached);
  // Room for one of the two only.
  CacheOptions o = Options(root);
  o.cache_limit = r1.bytes + r1.bytes / 2;

  std::unique_ptr<Dataset> reader;
  ASSERT_TRUE(Dataset::Open(r1.path, DatasetOpenOptions(), &reader).ok());
  const std::vector<std::string> before = Records(*reader);

  CacheResult r2;
  std::unique_ptr<CacheLease> l2;
  ASSERT_TRUE(AcquireCache(d2, o, &r2, &l2).ok());
  EXPECT_FALSE(r2.cached) << "evicted an entry a reader holds";
  EXPECT_TRUE(Contains(r2.reason, "held by live processes")) << r2.reason;
  EXPECT_TRUE(Contains(r2.reason, "cache_limit")) << r2.reason;
  EXPECT_TRUE(r2.evicted.empty());
  EXPECT_TRUE(fs::exists(r1.path));
  EXPECT_EQ(Records(*reader), before) << "the reader saw its entry change";
  EXPECT_EQ(Records(*reader), Records(d1));

  // A reader in another process holds it the same way.
  reader.reset();
  l1.reset();
  int w = -1;
  Child holder = StartTool({d1, root, "--hold"}, {}, &w);
  std::string h_text;
  ASSERT_TRUE(ReadUntil(holder.out, "result cached=1", &h_text)) << h_text;
  ASSERT_TRUE(AcquireCache(d2, o, &r2, &l2).ok());
  EXPECT_FALSE(r2.cached);
  EXPECT_TRUE(fs::exists(r1.path));
  ::close(w);  // the holder exits, its lease with it
  int code = 0;
  Finish(&holder, &code, h_text);
  EXPECT_EQ(code, 0);

  // Released: now it is evicted to make room.
  ASSERT_TRUE(AcquireCache(d2, o, &r2, &l2).ok());
  EXPECT_TRUE(r2.cached) << r2.reason;
  ASSERT_EQ(r2.evicted.size(), 1u);
  EXPECT_EQ(r2.evicted[0], r1.entry);
  EXPECT_FALSE(fs::exists(r1.entry));
  EXPECT_FALSE(fs::exists(r1.entry + ".used"));
  EXPECT_TRUE(Named(root, ".tmp").empty());
}

TEST_F(CacheTest, EvictsTheLeastRecentlyUsedFirst) {
  const std::string a = Make("a"), b = Make("b"), c = Make("c");
  const std::string root = shm_.path() + "/c";
  CacheOptions o = Options(root);
  CacheResult ra, rb, rc;
  std::unique_ptr<CacheLease> l;
  ASSERT_TRUE(AcquireCache(a, o, &ra, &l).ok());
  ASSERT_TRUE(AcquireCache(b, o, &rb, &l).ok());
  ASSERT_TRUE(AcquireCache(a, o, &ra, &l).ok());  // a used after b
  l.reset();
  ASSERT_TRUE(ra.cached && rb.cached);
  o.cache_limit = ra.bytes + rb.bytes + rb.bytes / 2;  // two fit, not three
  ASSERT_TRUE(AcquireCache(c, o, &rc, &l).ok());
  ASSERT_TRUE(rc.cached) << rc.reason;
  ASSERT_EQ(rc.evicted.size(), 1u);
  EXPECT_EQ(rc.evicted[0], rb.entry);
  EXPECT_TRUE(fs::exists(ra.entry));
}

TEST_F(CacheTest, LoaderReadsTheCopyAndGivesTheSameBatches) {
  const std::string src = Make("ds", 3);
  const std::string root = shm_.path() + "/c";
  LoaderOptions o;
  o.batch_size = 4;
  o.threads = 2;
  std::unique_ptr<Loader> in_place, cached;
  ASSERT_TRUE(Loader::Open(src, o, &in_place).ok());
  EXPECT_EQ(in_place->dataset().info().path, src);
  o.cache = root;
  Status s = Loader::Open(src, o, &cached);
  ASSERT_TRUE(s.ok()) << s.ToString();
  loader::WaitForCacheCopy(*cached);  // the copy is made in the background; epoch 0 then reads it
  EXPECT_EQ(testing::RunEpochs(cached.get(), 0, 2), testing::RunEpochs(in_place.get(), 0, 2));
  EXPECT_EQ(cached->dataset().info().path.rfind(root + "/", 0), 0u)
      << cached->dataset().info().path;
  EXPECT_TRUE(Contains(cached->reading_from(), "(cache, since epoch 0)")) << cached->reading_from();
  // The loader holds the lease: the entry cannot be evicted while it lives.
  std::vector<std::string> used = Named(root, ".used");
  ASSERT_EQ(used.size(), 1u);
  const std::string entry = Own(root) + "/" + used[0].substr(0, used[0].size() - 5);
  std::unique_ptr<FileLock> lock;
  EXPECT_EQ(Env::Default()->LockFile(entry + ".lease", false, &lock).code(),
            Status::Code::kAborted);
  cached.reset();
  EXPECT_TRUE(Env::Default()->LockFile(entry + ".lease", false, &lock).ok());

  // A loader whose cache cannot take the dataset reads it in place.
  o.cache_limit = 1024;
  ASSERT_TRUE(Loader::Open(src, o, &cached).ok());
  EXPECT_EQ(cached->dataset().info().path, src);
}

}  // namespace
}  // namespace dspipe

namespace dspipe {
namespace {

// dsbench's library through the cache dir `root`: batches of 4, no warm-up (the first measured
// batch is the loader's first: epoch 0 reads in place), no resource sampling, `threads`.
profile::ProfileOptions CachedProfile(const std::string& root, int threads) {
  profile::ProfileOptions o;
  o.batch_size = 4;
  o.threads = threads;
  o.warmup = 0;
  o.sample_ms = 0;
  o.ram_cache = root;
  return o;
}

// dsbench's library: --cache opens the dataset through the cache and reports the copy apart.
TEST_F(CacheTest, ProfileRunReportsTheCopyAndThenTheWarmEntry) {
  const std::string src = Make("ds");
  const std::string root = shm_.path() + "/c";
  profile::ProfileOptions o = CachedProfile(root, 1);
  o.batches = 3;
  profile::ProfileResult first, second, off;
  Status s = profile::RunProfile(src, o, &first);
  ASSERT_TRUE(s.ok()) << s.ToString();
  // Not in the cache yet: the run reads in place while the copy is made in the background, and
  // waits for it at the end.
  EXPECT_FALSE(first.ram_cache.cached) << first.ram_cache.note;
  EXPECT_TRUE(first.ram_cache.overlapped);
  EXPECT_TRUE(first.ram_cache.copied) << first.ram_cache.note;
  EXPECT_GT(first.ram_cache.copy_seconds, 0.0);
  EXPECT_EQ(first.ram_cache.path, src);
  EXPECT_TRUE(Contains(first.ram_cache.note, ", in the background; this run read in place"))
      << first.ram_cache.note;
  ASSERT_TRUE(profile::RunProfile(src, o, &second).ok());
  EXPECT_TRUE(second.ram_cache.cached);
  EXPECT_FALSE(second.ram_cache.overlapped);
  EXPECT_FALSE(second.ram_cache.copied);
  EXPECT_EQ(second.ram_cache.copy_seconds, 0.0);
  EXPECT_EQ(second.ram_cache.path.rfind(root + "/", 0), 0u) << second.ram_cache.path;
  profile::Report report;
  report.run = second;
  const nlohmann::json json = profile::ReportJson(report);
  EXPECT_EQ(json.at("ram_cache").at("cached"), true) << json.dump();
  EXPECT_EQ(json["epochs"][0]["source"], "cache") << json.dump();  // the entry was there
  o.ram_cache = "off";
  ASSERT_TRUE(profile::RunProfile(src, o, &off).ok());
  EXPECT_FALSE(off.ram_cache.cached);
  EXPECT_EQ(off.ram_cache.path, src);
}

// dsbench --cache --epochs 3 --cache-wait on a dataset not cached yet: epoch 0 reads in place
// while the copy is made, the run waits for the copy at the end of epoch 0 (the real condition:
// CacheCopy::Wait), and epochs 1 and 2 read the copy through the counting wrapper, their reads
// counted. Before the wrapper forwarded the copy, every epoch read in place.
TEST_F(CacheTest, ProfileRunSwitchesToTheCopyAtAnEpochBoundaryAndCountsItsReads) {
  const std::string src = Make("ds");  // 12 samples: 3 batches of 4 per epoch
  const std::string root = shm_.path() + "/c";
  profile::ProfileOptions o = CachedProfile(root, 2);
  o.epochs = 3;
  o.cache_wait = true;
  profile::ProfileResult r;
  Status s = profile::RunProfile(src, o, &r);
  ASSERT_TRUE(s.ok()) << s.ToString();
  ASSERT_EQ(r.epochs.size(), 3u);
  EXPECT_EQ(r.epochs[0].source, "in place");
  EXPECT_EQ(r.epochs[0].records_in_place, 12u);
  EXPECT_EQ(r.epochs[0].records_cache, 0u);
  for (size_t e = 1; e < 3; ++e) {
    SCOPED_TRACE("epoch " + std::to_string(e));
    EXPECT_EQ(r.epochs[e].source, "cache");
    EXPECT_EQ(r.epochs[e].records_in_place, 0u);
    EXPECT_EQ(r.epochs[e].records_cache, 12u);
    // The same 12 records, from the copy: the same stored bytes.
    EXPECT_EQ(r.epochs[e].bytes_cache, r.epochs[0].bytes_in_place);
    EXPECT_EQ(r.epochs[e].batches, 3u);
    EXPECT_EQ(r.epochs[e].images, 12u);
  }
  EXPECT_GT(r.epochs[0].bytes_in_place, 12u * kRecordHeaderSize);
  EXPECT_EQ(r.images, 36u);
  EXPECT_GT(r.mb_per_s, 0.0);
  const profile::RamCacheResult& rc = r.ram_cache;
  EXPECT_TRUE(rc.overlapped);
  EXPECT_TRUE(rc.cached) << rc.note;
  EXPECT_TRUE(rc.copied) << rc.note;
  EXPECT_EQ(rc.cache_from_epoch, 1);
  EXPECT_GT(rc.copy_seconds, 0.0);
  EXPECT_EQ(rc.path.rfind(root + "/", 0), 0u) << rc.path;
  EXPECT_TRUE(Contains(rc.note, "this run read in place, then the copy from epoch 1")) << rc.note;
  // The per-epoch source reaches every output that shows it.
  profile::Report report;
  report.run = r;
  const nlohmann::json j = profile::ReportJson(report);
  ASSERT_EQ(j.at("epochs").size(), 3u);
  EXPECT_EQ(j["epochs"][0]["source"], "in place");
  EXPECT_EQ(j["epochs"][2]["source"], "cache");
  EXPECT_EQ(j["epochs"][2]["records_cache"], 12);
  EXPECT_EQ(j["ram_cache"]["cache_from_epoch"], 1);
  const std::string csv = profile::ReportEpochsCsv(report);
  EXPECT_TRUE(Contains(csv, "\n0,in place,3,12,")) << csv;
  EXPECT_TRUE(Contains(csv, "\n1,cache,3,12,")) << csv;
  EXPECT_TRUE(Contains(csv, "\n2,cache,3,12,")) << csv;
  const std::string text = profile::ReportText(report);
  EXPECT_TRUE(Contains(text, "    1  cache ")) << text;
  EXPECT_TRUE(Contains(text, "    0  in place ")) << text;
}

// Without --cache-wait the loader switches at whichever epoch boundary follows the commit: where
// that is depends on the machine, what holds on every run is checked (epoch 0 in place, each
// epoch read whole from one side, the cache for good once switched, the report agreeing).
TEST_F(CacheTest, ProfileRunWithoutWaitingReportsWhereEachEpochReadFrom) {
  const std::string src = Make("ds");
  const std::string root = shm_.path() + "/c";
  profile::ProfileOptions o = CachedProfile(root, 2);
  o.epochs = 3;
  profile::ProfileResult r;
  Status s = profile::RunProfile(src, o, &r);
  ASSERT_TRUE(s.ok()) << s.ToString();
  ASSERT_EQ(r.epochs.size(), 3u);
  EXPECT_EQ(r.epochs[0].source, "in place");
  int first_cache = -1;
  for (size_t e = 0; e < 3; ++e) {
    SCOPED_TRACE("epoch " + std::to_string(e));
    EXPECT_EQ(r.epochs[e].records_in_place + r.epochs[e].records_cache, 12u);
    if (r.epochs[e].source == "cache") {
      if (first_cache < 0) first_cache = static_cast<int>(e);
    } else {
      EXPECT_EQ(r.epochs[e].source, "in place");
      EXPECT_LT(first_cache, 0) << "back in place after the switch";
    }
  }
  EXPECT_EQ(r.ram_cache.cache_from_epoch, first_cache);
  EXPECT_EQ(r.ram_cache.cached, first_cache >= 0);
  EXPECT_TRUE(r.ram_cache.overlapped);
  EXPECT_TRUE(r.ram_cache.copied) << r.ram_cache.note;
  EXPECT_EQ(Named(root, ".used").size(), 1u);  // the run waited for the copy at its end
}

}  // namespace
}  // namespace dspipe

// ---- the copy overlapped with the first epoch (cache::OpenMode::overlap, the Loader's default)

namespace dspipe {
namespace {

LoaderOptions OverlapLoaderOptions() {
  LoaderOptions o;
  o.batch_size = 4;
  o.threads = 2;
  o.sampler.seed = 7;
  o.augment.hflip = 0.5;
  return o;
}

TEST_F(CacheTest, LoaderReadsInPlaceWhileCopyingThenSwitchesToTheCacheAtAnEpochBoundary) {
  const std::string src = Make("ds", 3);
  const std::string root = shm_.path() + "/c";
  LoaderOptions o = OverlapLoaderOptions();
  std::unique_ptr<Loader> off, cached;
  ASSERT_TRUE(Loader::Open(src, o, &off).ok());
  const std::vector<testing::BatchCopy> want = testing::RunEpochs(off.get(), 0, 3);
  o.cache = root;
  CopyGate gate(CopyGate::kUntilReleased);
  Status s = Loader::Open(src, o, &cached);
  ASSERT_TRUE(s.ok()) << s.ToString();
  gate.WaitHeld();  // the copy is mid-way and stays there
  EXPECT_EQ(cached->dataset().info().path, src);
  EXPECT_EQ(cached->reading_from(), src + " (in place, copying into the cache)");
  std::vector<testing::BatchCopy> got = testing::RunEpochs(cached.get(), 0, 1);
  EXPECT_TRUE(Named(root, ".used").empty()) << "an entry before the copy was let go on";
  EXPECT_EQ(cached->dataset().info().path, src);
  gate.Release();
  loader::WaitForCacheCopy(*cached);
  ASSERT_EQ(Named(root, ".used").size(), 1u);
  EXPECT_TRUE(Contains(cached->reading_from(), "the cache's copy is ready"))
      << cached->reading_from();
  for (const testing::BatchCopy& b : testing::RunEpochs(cached.get(), 1, 2)) got.push_back(b);
  EXPECT_EQ(cached->dataset().info().path.rfind(root + "/", 0), 0u)
      << cached->dataset().info().path;
  EXPECT_TRUE(Contains(cached->reading_from(), "(cache, since epoch 1)")) << cached->reading_from();
  EXPECT_EQ(got, want);
  // The switched loader holds the entry's lease.
  const std::string used = Named(root, ".used")[0];
  const std::string entry = Own(root) + "/" + used.substr(0, used.size() - 5);
  std::unique_ptr<FileLock> lock;
  EXPECT_EQ(Env::Default()->LockFile(entry + ".lease", false, &lock).code(),
            Status::Code::kAborted);
  cached.reset();
  EXPECT_TRUE(Env::Default()->LockFile(entry + ".lease", false, &lock).ok());
}

TEST_F(CacheTest, AFailedBackgroundCopyKeepsTheLoaderInPlaceWithOneLogLine) {
  const std::string src = Make("ds", 3);
  const std::string root = shm_.path() + "/c";
  LoaderOptions lo = OverlapLoaderOptions();
  std::unique_ptr<Loader> off, loader;
  ASSERT_TRUE(Loader::Open(src, lo, &off).ok());
  core::FaultEnv fe;  // not the default Env: the copy goes through its writes, the first one fails
  fe.FailWriteWithEnospc(1);
  CacheOptions co = Options(root);
  co.env = &fe;
  cache::OpenMode mode;
  mode.overlap = true;
  ::testing::internal::CaptureStderr();
  std::shared_ptr<const Dataset> ds;
  CacheResult r;
  Status s = cache::OpenDatasetCached(src, lo.dataset, co, mode, nullptr, &ds, &r);
  ASSERT_TRUE(s.ok()) << s.ToString();
  EXPECT_FALSE(r.cached);
  ASSERT_NE(cache::CacheStateOf(*ds).copy, nullptr);
  ASSERT_TRUE(Loader::Create(ds, lo, &loader).ok());
  loader::WaitForCacheCopy(*loader);
  const std::string log = ::testing::internal::GetCapturedStderr();
  EXPECT_EQ(cache::CacheStateOf(*ds).copy->state(), cache::CacheCopy::State::kInPlace);
  EXPECT_TRUE(Contains(cache::CacheStateOf(*ds).copy->result().reason, "No space left on device"))
      << cache::CacheStateOf(*ds).copy->result().reason;
  EXPECT_EQ(testing::RunEpochs(loader.get(), 0, 2), testing::RunEpochs(off.get(), 0, 2));
  EXPECT_EQ(loader->dataset().info().path, src);
  EXPECT_TRUE(Contains(loader->reading_from(), "(in place: the copy failed:"))
      << loader->reading_from();
  std::istringstream lines(log);
  std::vector<std::string> cache_lines;
  for (std::string line; std::getline(lines, line);) {
    if (Contains(line, "dspipe cache:")) cache_lines.push_back(line);
  }
  ASSERT_EQ(cache_lines.size(), 1u) << log;
  EXPECT_TRUE(Contains(cache_lines[0], src + ": in place: the copy failed:")) << log;
  EXPECT_TRUE(Contains(cache_lines[0], "No space left on device")) << log;
  EXPECT_TRUE(Named(root, ".tmp").empty());
  EXPECT_TRUE(Named(root, ".used").empty());
  for (const auto& e : fs::directory_iterator(Own(root))) {
    EXPECT_FALSE(e.is_directory()) << "left behind: " << e.path();
  }
}

TEST(CacheCancelTest, ACancelledCopyIsToldByItsCodeNotItsText) {
  const Status c = cache::CancelledError("copying /d/data.mdb");
  EXPECT_EQ(c.code(), Status::Code::kCancelled) << c.ToString();
  EXPECT_TRUE(cache::IsCancelled(c));
  EXPECT_TRUE(cache::IsCancelled(c.WithContext("cache: copying /d into /c")));
  // The same words under another code are not a cancellation (nor a fetch's Aborted lock wait).
  EXPECT_FALSE(cache::IsCancelled(Status::Aborted(c.message())));
  EXPECT_FALSE(cache::IsCancelled(Status::IOError("x: cancelled (by nobody)")));
  EXPECT_FALSE(cache::IsCancelled(Status::OK()));
}

TEST_F(CacheTest, DestroyingTheLoaderMidCopyCancelsItAndTheNextOpenCopiesAgain) {
  const std::string src = Make("ds", 3);
  const std::string root = shm_.path() + "/c";
  LoaderOptions o = OverlapLoaderOptions();
  o.cache = root;
  {
    CopyGate gate(CopyGate::kUntilCancelled);
    std::unique_ptr<Loader> loader;
    ASSERT_TRUE(Loader::Open(src, o, &loader).ok());
    gate.WaitHeld();
    Batch b;
    ASSERT_TRUE(loader->Next(&b).ok());  // read in place meanwhile
    EXPECT_TRUE(b);
    b.Reset();
    loader.reset();  // cancels the copy held at the gate and joins its thread
    EXPECT_TRUE(Named(root, ".used").empty());
    EXPECT_TRUE(Named(root, ".tmp").empty());
    for (const auto& e : fs::directory_iterator(Own(root))) {
      EXPECT_FALSE(e.is_directory()) << "left behind: " << e.path();
    }
  }
  std::unique_ptr<Loader> again;
  ASSERT_TRUE(Loader::Open(src, o, &again).ok());
  loader::WaitForCacheCopy(*again);
  EXPECT_EQ(Named(root, ".used").size(), 1u);
  again->set_epoch(0);
  EXPECT_EQ(again->dataset().info().path.rfind(root + "/", 0), 0u) << again->dataset().info().path;
}

// Another process copying (ENTRY.lock held) does not block the first epoch: it is read in place
// and the loader switches once that process's entry appears.
TEST_F(CacheTest, AnotherProcessCopyingDoesNotBlockTheFirstEpoch) {
  const std::string src = Make("ds", 3);
  const std::string root = shm_.path() + "/c";
  Child a = StartTool({src, root, "--stop-after-files", "1"}, {});
  ASSERT_TRUE(WaitStopped(a.pid));  // mid-copy, holding the entry's lock
  LoaderOptions o = OverlapLoaderOptions();
  std::unique_ptr<Loader> off, loader;
  ASSERT_TRUE(Loader::Open(src, o, &off).ok());
  o.cache = root;
  ASSERT_TRUE(Loader::Open(src, o, &loader).ok());
  std::vector<testing::BatchCopy> got = testing::RunEpochs(loader.get(), 0, 1);
  EXPECT_EQ(loader->reading_from(), src + " (in place, copying into the cache)");
  ::kill(a.pid, SIGCONT);
  int code = 0;
  const std::string a_text = Finish(&a, &code);
  ASSERT_EQ(code, 0) << a_text;
  loader::WaitForCacheCopy(*loader);
  for (const testing::BatchCopy& b : testing::RunEpochs(loader.get(), 1, 1)) got.push_back(b);
  EXPECT_TRUE(Contains(loader->reading_from(), "(cache, since epoch 1)")) << loader->reading_from();
  EXPECT_EQ(got, testing::RunEpochs(off.get(), 0, 2));
  EXPECT_EQ(Named(root, ".used").size(), 1u);
}

}  // namespace
}  // namespace dspipe

namespace dspipe {
namespace {

// A plain LMDB (records in the main database) holding `files[i]`'s bytes under key "i":
// a directory with data.mdb, or, with `as_file`, one LMDB file (MDB_NOSUBDIR). `file_bytes`
// > 0: the data file is that large (MDB_WRITEMAP sizes it to the map).
void WritePlainLmdb(const std::string& path, const std::vector<std::string>& files, bool as_file,
                    size_t file_bytes = 0) {
  if (!as_file) fs::create_directories(path);
  MDB_env* env = nullptr;
  ASSERT_EQ(mdb_env_create(&env), 0);
  ASSERT_EQ(mdb_env_set_mapsize(env, file_bytes > 0 ? file_bytes : 1 << 24), 0);
  const unsigned flags = (as_file ? MDB_NOSUBDIR : 0) | (file_bytes > 0 ? MDB_WRITEMAP : 0);
  ASSERT_EQ(mdb_env_open(env, path.c_str(), flags, 0644), 0) << path;
  MDB_txn* txn = nullptr;
  ASSERT_EQ(mdb_txn_begin(env, nullptr, 0, &txn), 0);
  MDB_dbi dbi;
  ASSERT_EQ(mdb_dbi_open(txn, nullptr, 0, &dbi), 0);
  for (size_t i = 0; i < files.size(); ++i) {
    std::string key = std::to_string(i), value = ReadAll(files[i]);
    MDB_val k{key.size(), key.data()}, v{value.size(), value.data()};
    ASSERT_EQ(mdb_put(txn, dbi, &k, &v, 0), 0);
  }
  ASSERT_EQ(mdb_txn_commit(txn), 0);
  mdb_env_close(env);
  if (as_file) fs::remove(path + "-lock");
}

// The source tree's images in a plain LMDB directory, its masks in a second plain LMDB (a file).
class PlainCacheTest : public CacheTest {
 protected:
  void SetUp() override {
    CacheTest::SetUp();
    images_ = work_ + "/images.lmdb";
    masks_ = work_ + "/masks.mdb";
    WriteMasks(12);
    std::vector<std::string> images;
    for (int i = 0; i < 12; ++i) images.push_back(File("images", i));
    WritePlainLmdb(images_, images, false);
  }
  std::string File(const std::string& dir, int i) const {
    char name[32];
    std::snprintf(name, sizeof name, "%06d.png", i);
    return work_ + "/src/" + dir + "/" + name;
  }
  // The masks LMDB with the first n masks (a rewrite changes its size and mtime), its file
  // `file_bytes` large when > 0.
  void WriteMasks(int n, size_t file_bytes = 0) {
    fs::remove(masks_);
    std::vector<std::string> masks;
    for (int i = 0; i < n; ++i) masks.push_back(File("masks", i));
    WritePlainLmdb(masks_, masks, true, file_bytes);
  }
  DatasetOpenOptions Plain() const {
    DatasetOpenOptions o;
    o.plain.masks = masks_;
    return o;
  }
  CacheOptions WithMasks(const std::string& root) const {
    CacheOptions o = Options(root);
    o.masks = masks_;
    return o;
  }
  std::vector<std::string> PlainRecords(const std::string& images, const std::string& masks) {
    DatasetOpenOptions o;
    o.plain.masks = masks;
    std::unique_ptr<Dataset> ds;
    Status s = Dataset::Open(images, o, &ds);
    EXPECT_TRUE(s.ok()) << s.ToString();
    return ds ? Records(*ds) : std::vector<std::string>{};
  }
  std::string images_, masks_;
};

TEST_F(PlainCacheTest, TheMasksLmdbIsCachedInTheSameEntryAndTheLoaderReadsIt) {
  const std::vector<std::string> records = PlainRecords(images_, masks_);
  ASSERT_EQ(records.size(), 12u);
  ASSERT_FALSE(records[0].empty());
  LoaderOptions o = OverlapLoaderOptions();
  o.dataset.plain.masks = masks_;
  std::unique_ptr<Loader> off;
  ASSERT_TRUE(Loader::Open(images_, o, &off).ok());
  ASSERT_TRUE(off->dataset().info().has_masks);
  const std::vector<testing::BatchCopy> want = testing::RunEpochs(off.get(), 0, 3);
  off.reset();

  // Copy first (no overlap): epoch 0 reads the copy, masks from the entry.
  const std::string first = shm_.path() + "/first";
  o.cache = first;
  o.cache_overlap = false;
  std::unique_ptr<Loader> cached;
  Status s = Loader::Open(images_, o, &cached);
  ASSERT_TRUE(s.ok()) << s.ToString();
  EXPECT_EQ(testing::RunEpochs(cached.get(), 0, 3), want);
  EXPECT_EQ(cached->dataset().info().path.rfind(first + "/", 0), 0u);
  EXPECT_TRUE(Contains(cached->dataset().info().pairing, "from " + first + "/"))
      << "masks read in place: " << cached->dataset().info().pairing;
  cached.reset();

  // Overlapped: epoch 0 in place while the copy is held mid-way, then the switch.
  const std::string root = shm_.path() + "/c";
  o.cache = root;
  o.cache_overlap = true;
  {
    CopyGate gate(CopyGate::kUntilReleased);
    s = Loader::Open(images_, o, &cached);
    ASSERT_TRUE(s.ok()) << s.ToString();
    gate.WaitHeld();
    std::vector<testing::BatchCopy> got = testing::RunEpochs(cached.get(), 0, 1);
    EXPECT_EQ(cached->dataset().info().path, images_);
    EXPECT_TRUE(Named(root, ".used").empty());
    gate.Release();
    loader::WaitForCacheCopy(*cached);
    for (const testing::BatchCopy& b : testing::RunEpochs(cached.get(), 1, 2)) got.push_back(b);
    EXPECT_TRUE(Contains(cached->reading_from(), "(cache, since epoch 1)"))
        << cached->reading_from();
    EXPECT_TRUE(Contains(cached->dataset().info().pairing, "from " + root + "/"))
        << "masks read in place: " << cached->dataset().info().pairing;
    EXPECT_EQ(got, want);
  }
  cached.reset();

  // One entry holds both, byte for byte, and its size counts both.
  const std::vector<std::string> used = Named(root, ".used");
  ASSERT_EQ(used.size(), 1u);
  const std::string entry = Own(root) + "/" + used[0].substr(0, used[0].size() - 5);
  EXPECT_EQ(ReadAll(entry + "/images.lmdb/data.mdb"), ReadAll(images_ + "/data.mdb"));
  EXPECT_EQ(ReadAll(entry + "/masks/masks.mdb"), ReadAll(masks_));
  const uint64_t both = fs::file_size(images_ + "/data.mdb") + fs::file_size(masks_);
  uint64_t used_bytes = 0;
  int64_t ns = 0;
  std::istringstream(ReadAll(Own(root) + "/" + used[0])) >> ns >> used_bytes;
  EXPECT_EQ(used_bytes, both);

  // The masks source gone, the entry still gives every record with its mask.
  fs::remove(masks_);
  EXPECT_EQ(PlainRecords(entry + "/images.lmdb", entry + "/masks/masks.mdb"), records);
}

TEST_F(PlainCacheTest, AChangedMasksLmdbGetsANewEntryAndTheBudgetCountsIt) {
  const std::string root = shm_.path() + "/c";
  CacheResult a, b;
  std::unique_ptr<CacheLease> la, lb;
  Status s = AcquireCache(images_, WithMasks(root), &a, &la);
  ASSERT_TRUE(s.ok()) << s.ToString();
  ASSERT_TRUE(a.cached) << a.reason;
  EXPECT_EQ(a.masks_path, a.entry + "/masks/masks.mdb");
  EXPECT_EQ(PlainRecords(a.path, a.masks_path), PlainRecords(images_, masks_));
  // The masks LMDB changed (one mask fewer, and a size that differs for sure, so the test does
  // not rest on the mtime's granularity), the images did not.
  const uint64_t old_size = fs::file_size(masks_);
  WriteMasks(11, 1 << 20);
  ASSERT_NE(fs::file_size(masks_), old_size);
  s = AcquireCache(images_, WithMasks(root), &b, &lb);
  ASSERT_TRUE(s.ok()) << s.ToString();
  ASSERT_TRUE(b.cached) << b.reason;
  EXPECT_TRUE(b.copied);
  EXPECT_NE(a.entry, b.entry);

  // A cache_limit between the images alone and images + masks: in place, with the reason.
  const uint64_t images = fs::file_size(images_ + "/data.mdb");
  const uint64_t both = images + fs::file_size(masks_);
  CacheOptions o = WithMasks(shm_.path() + "/limited");
  o.cache_limit = (images + both) / 2;
  ASSERT_LT(images, o.cache_limit);
  CacheResult c;
  std::unique_ptr<CacheLease> lc;
  ASSERT_TRUE(AcquireCache(images_, o, &c, &lc).ok());
  EXPECT_FALSE(c.cached);
  EXPECT_EQ(c.bytes, both);
  EXPECT_TRUE(Contains(c.reason, "with its masks LMDB")) << c.reason;
  EXPECT_TRUE(Contains(c.reason, "larger than cache_limit")) << c.reason;
  EXPECT_EQ(c.path, images_);
  EXPECT_TRUE(c.masks_path.empty());
  EXPECT_EQ(lc, nullptr);
  // The images alone would have fitted.
  o.masks.clear();
  ASSERT_TRUE(AcquireCache(images_, o, &c, &lc).ok());
  EXPECT_TRUE(c.cached) << c.reason;

  // Through the loader: the same limit reads in place, masks included, and says why.
  LoaderOptions lo = OverlapLoaderOptions();
  lo.dataset.plain.masks = masks_;
  lo.cache = shm_.path() + "/loader";
  lo.cache_limit = o.cache_limit;
  std::unique_ptr<Loader> loader;
  ::testing::internal::CaptureStderr();
  s = Loader::Open(images_, lo, &loader);
  const std::string log = ::testing::internal::GetCapturedStderr();
  ASSERT_TRUE(s.ok()) << s.ToString();
  EXPECT_EQ(loader->dataset().info().path, images_);
  EXPECT_TRUE(loader->dataset().info().has_masks);
  EXPECT_TRUE(Contains(log, images_ + ": in place: the dataset with its masks LMDB")) << log;
  EXPECT_FALSE(fs::exists(lo.cache)) << "made " << lo.cache;
}

// The masks' space is reserved with the images', before any byte of either is copied: a masks
// LMDB that does not fit is an ENOSPC naming it with nothing written and nothing left.
TEST_F(PlainCacheTest, AMasksLmdbThatDoesNotFitIsAnEnospcBeforeAnyByteIsCopied) {
  WriteMasks(12, 1 << 20);
  const uint64_t images = fs::file_size(images_ + "/data.mdb");
  ASSERT_EQ(fs::file_size(masks_), 1u << 20);
  const std::string root = shm_.path() + "/c";
  FullAfterCheckEnv fe;
  fe.SetFreeSpace(4 * images);  // what fallocate sees: the images fit, the masks do not
  ASSERT_LT(4 * images, 1u << 20);
  CacheOptions o = WithMasks(root);
  o.env = &fe;
  CacheResult r;
  std::unique_ptr<CacheLease> lease;
  Status s = AcquireCache(images_, o, &r, &lease);
  ASSERT_FALSE(s.ok());
  EXPECT_TRUE(Contains(s.message(), "No space left on device")) << s.ToString();
  EXPECT_TRUE(Contains(s.message(), "masks.mdb")) << s.ToString();
  EXPECT_EQ(fe.writes_after_reserved(), 0)
      << "the images were copied before the masks' space was reserved";
  EXPECT_EQ(lease, nullptr);
  for (const auto& e : fs::directory_iterator(Own(root))) {
    EXPECT_FALSE(e.is_directory()) << "left behind: " << e.path();
  }
}

}  // namespace
}  // namespace dspipe
