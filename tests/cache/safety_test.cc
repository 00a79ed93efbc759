// SPDX-License-Identifier: Apache-2.0
// Issue 19: nothing of the user's is ever lost. The cache against datasets with symlinks, cache
// directories that hold other files or are not ours alone, planted links, fork() mid-copy,
// several processes copying at once under one cache_limit, and an entry evicted while a shard
// is asked for. Each test states what it checks against the user's files: the source read only,
// nothing outside the cache's own directory touched.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <poll.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <filesystem>
#include <functional>
#include <map>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "cache/cached_dataset.h"
#include "cache/test_hooks.h"
#include "cache_checks.h"
#include "cache_support.h"
#include "core/fault_env.h"
#include "dspipe/cache.h"
#include "dspipe/env.h"
#include "dspipe/loader.h"
#include "format/manifest.h"
#include "loader/loader_fixture.h"

namespace dspipe {
namespace {

namespace fs = std::filesystem;
using namespace cachetest;  // NOLINT: the shared test helpers

// Every name below dir (not following links), with what it is, its size and a hash of its
// bytes: two equal listings mean nothing below dir was created, removed or changed. `skip`: a
// name directly in dir left out (the cache's own directory). LMDB's reader tables (lock.mdb,
// *-lock) are left out too: any reader of an LMDB in place writes them, the cache never does.
using Tree = std::map<std::string, std::string>;
Tree Listing(const std::string& dir, const std::string& skip = "") {
  std::map<std::string, std::string> out;
  std::error_code ec;
  for (auto it = fs::recursive_directory_iterator(dir, ec);
       !ec && it != fs::recursive_directory_iterator(); it.increment(ec)) {
    const std::string rel = it->path().lexically_relative(dir).string();
    if (!skip.empty() && (rel == skip || rel.rfind(skip + "/", 0) == 0)) {
      if (rel == skip) it.disable_recursion_pending();
      continue;
    }
    const std::string name = it->path().filename().string();
    if (name == "lock.mdb" || (name.size() > 5 && name.ends_with("-lock"))) continue;
    const fs::file_status st = it->symlink_status(ec);
    if (fs::is_symlink(st)) {
      out[rel] = "link -> " + fs::read_symlink(it->path(), ec).string();
    } else if (fs::is_directory(st)) {
      out[rel] = "dir";
    } else if (fs::is_regular_file(st)) {
      const std::string bytes = ReadAll(it->path().string());
      out[rel] = "file " + std::to_string(bytes.size()) + " bytes, hash " +
                 std::to_string(std::hash<std::string>()(bytes));
    } else {
      out[rel] = "other";
    }
  }
  return out;
}

// The names whose listing differs, for a failure message.
std::string Changed(const Tree& before, const Tree& after) {
  std::string out;
  for (const auto& [k, v] : before) {
    auto it = after.find(k);
    if (it == after.end())
      out += "\n  removed " + k;
    else if (it->second != v)
      out += "\n  changed " + k + ": " + v + " -> " + it->second;
  }
  for (const auto& [k, v] : after) {
    if (!before.count(k)) out += "\n  added " + k + " (" + v + ")";
  }
  return out;
}

// The cache's entry directories below a cache root, wherever its layout keeps them (ROOT/ or
// ROOT/dspipe-cache-v1/): "<name>-<16 hex>" directories.
std::vector<std::string> EntryDirs(const std::string& root) {
  std::vector<std::string> out;
  for (const std::string& d : {root, root + "/dspipe-cache-v1"}) {
    std::error_code ec;
    for (const auto& e : fs::directory_iterator(d, ec)) {
      const std::string n = e.path().filename().string();
      if (e.is_directory() && n.size() > 17 && n[n.size() - 17] == '-' &&
          n.find('.', n.size() - 17) == std::string::npos) {
        out.push_back(e.path().string());
      }
    }
  }
  return out;
}

class SafetyTest : public CacheFixture {};

// Item 1. A dataset whose data.mdb is a symlink to the real file elsewhere (datasets linked from
// a Drive mount or a shared disk). The source lies deeper than the cache's temp dir and the file
// near the top of the tree: a path inside the entry computed from the link's target (as
// fs::relative gave: "../../../..") climbed out of the entry onto the file itself, and opening
// it with O_TRUNC emptied the user's data.
TEST_F(SafetyTest, ASymlinkedDataFileIsCopiedAndTheSourceIsNeverWritten) {
  const std::string built = Make("built");
  char tmpl[] = "/tmp/dspipe-store-XXXXXX";  // near the top of the tree
  ASSERT_NE(::mkdtemp(tmpl), nullptr);
  const std::string store = tmpl;
  const std::string target = store + "/data.mdb";
  fs::copy_file(built + "/data.mdb", target);
  const std::string linked = work_ + "/a/b/c/d/e/f/linked";  // deeper than the cache's paths
  fs::create_directories(linked);
  fs::copy_file(built + "/manifest.json", linked + "/manifest.json");
  fs::create_symlink(target, linked + "/data.mdb");
  const std::string before = ReadAll(target);
  ASSERT_GT(before.size(), 0u);
  const auto store_before = Listing(store);
  const auto linked_before = Listing(linked);

  const std::string root = shm_.path() + "/c";
  CacheResult r;
  std::unique_ptr<CacheLease> lease;
  Status s = AcquireCache(linked, Options(root), &r, &lease);
  EXPECT_EQ(ReadAll(target), before) << "the source's file was written";
  EXPECT_TRUE(Listing(store) == store_before) << Changed(store_before, Listing(store));
  EXPECT_TRUE(Listing(linked) == linked_before) << Changed(linked_before, Listing(linked));
  ASSERT_TRUE(s.ok()) << s.ToString();
  ASSERT_TRUE(r.cached) << r.reason;
  // The copy holds the target's bytes, as a regular file inside the entry.
  EXPECT_TRUE(fs::is_regular_file(fs::symlink_status(r.path + "/data.mdb")));
  EXPECT_EQ(ReadAll(r.path + "/data.mdb"), before);
  EXPECT_EQ(Records(r.path), Records(built));
  fs::remove_all(store);
}

// Item 1. Symlinked shard folders are entered: the copy holds every shard (before, the entry was
// committed with empty folders and every open of it failed).
TEST_F(SafetyTest, SymlinkedShardFoldersAreEnteredAndTheLoaderReadsTheCopy) {
  const std::string built = Make("built", 3);
  const std::string linked = work_ + "/linked";
  const std::string store = work_ + "/store";
  fs::create_directories(linked);
  fs::create_directories(store);
  fs::copy_file(built + "/manifest.json", linked + "/manifest.json");
  for (int i = 0; i < 3; ++i) {
    const std::string shard = format::ShardDirName(i);
    fs::copy(built + "/" + shard, store + "/" + shard, fs::copy_options::recursive);
    fs::create_symlink(store + "/" + shard, linked + "/" + shard);
  }
  const auto before = Listing(work_, "");
  const std::string root = shm_.path() + "/c";
  CacheResult r;
  std::unique_ptr<CacheLease> lease;
  Status s = AcquireCache(linked, Options(root), &r, &lease);
  ASSERT_TRUE(s.ok()) << s.ToString();
  ASSERT_TRUE(r.cached) << r.reason;
  EXPECT_EQ(Records(r.path), Records(built));
  for (int i = 0; i < 3; ++i) {
    const std::string copy = r.path + "/" + format::ShardDirName(i);
    EXPECT_TRUE(fs::is_directory(fs::symlink_status(copy))) << copy;
    EXPECT_EQ(ReadAll(copy + "/data.mdb"),
              ReadAll(store + "/" + format::ShardDirName(i) + "/data.mdb"));
  }
  lease.reset();
  // Through the Loader, copy first: the same batches as in place, never a failed open.
  LoaderOptions lo;
  lo.batch_size = 4;
  lo.threads = 2;
  std::unique_ptr<Loader> off, cached;
  ASSERT_TRUE(Loader::Open(linked, lo, &off).ok());
  lo.cache = shm_.path() + "/loader";
  lo.cache_overlap = false;
  s = Loader::Open(linked, lo, &cached);
  ASSERT_TRUE(s.ok()) << s.ToString();
  EXPECT_EQ(cached->dataset().info().path.rfind(lo.cache + "/", 0), 0u)
      << cached->dataset().info().path;
  EXPECT_EQ(testing::RunEpochs(cached.get(), 0, 1), testing::RunEpochs(off.get(), 0, 1));
  EXPECT_TRUE(Listing(work_, "") == before)
      << "the source tree changed:" << Changed(before, Listing(work_, ""));
}

// Item 1. What cannot be copied as it is (a FIFO, a link to nothing) is read in place with the
// reason in the one line: never an error, never half an entry.
TEST_F(SafetyTest, ADatasetThatCannotBeCopiedAsItIsIsReadInPlaceWithTheReason) {
  const std::string src = Make("ds");
  const std::string root = shm_.path() + "/c";
  ASSERT_EQ(::mkfifo((src + "/a-fifo").c_str(), 0600), 0);
  CacheResult r;
  std::unique_ptr<CacheLease> lease;
  Status s = AcquireCache(src, Options(root), &r, &lease);
  ASSERT_TRUE(s.ok()) << s.ToString();
  EXPECT_FALSE(r.cached);
  EXPECT_EQ(r.path, src);
  EXPECT_TRUE(Contains(r.reason, "a-fifo: a FIFO")) << r.reason;
  fs::remove(src + "/a-fifo");
  fs::create_symlink(work_ + "/nothing-there", src + "/dangling");
  ASSERT_TRUE(AcquireCache(src, Options(root), &r, &lease).ok());
  EXPECT_FALSE(r.cached);
  EXPECT_TRUE(Contains(r.reason, "dangling: a symbolic link to nothing")) << r.reason;
  EXPECT_TRUE(EntryDirs(root).empty());
}

// Item 2. A cache directory the user names (cache=DIR, DSPIPE_CACHE_DIR=/tmp) holds their
// files: build.tmp/, report.tmp, names ending in .lock or .used, even one shaped like an entry's
// temp dir. None is removed, changed or added to; the cache keeps to DIR/dspipe-cache-v1/.
TEST_F(SafetyTest, ANamedCacheDirKeepsEveryFileThatIsNotTheCaches) {
  const std::string src = Make("ds");
  const std::string root = work_ + "/user-dir";
  fs::create_directories(root + "/build.tmp/objects");
  std::ofstream(root + "/build.tmp/objects/a.o") << "object code";
  std::ofstream(root + "/report.tmp") << "the user's report";
  std::ofstream(root + "/notes.lock") << "notes";
  std::ofstream(root + "/ds.used") << "1 2";
  std::ofstream(root + "/x.used.tmp.1") << "3 4";
  fs::create_directories(root + "/ds-0123456789abcdef.tmp");
  std::ofstream(root + "/ds-0123456789abcdef.tmp/keep") << "keep me";
  const auto before = Listing(root);
  for (int i = 0; i < 2; ++i) {
    CacheResult r;
    std::unique_ptr<CacheLease> lease;
    Status s = AcquireCache(src, Options(root), &r, &lease);
    ASSERT_TRUE(s.ok()) << s.ToString();
    EXPECT_TRUE(r.cached) << r.reason;
    int removed = -1;
    ASSERT_TRUE(CleanCacheOrphans(root, nullptr, &removed).ok());
    EXPECT_EQ(removed, 0);
  }
  EXPECT_TRUE(Listing(root, "dspipe-cache-v1") == before)
      << Changed(before, Listing(root, "dspipe-cache-v1"));
}

// Item 3. A per-user cache root (/dev/shm/dspipe-cache-<uid> by default; here one of the same
// name in a test dir) is used only when it is ours alone: made by another user, or writable by
// others, it is not used (in place, one line saying why) and nothing in it is touched.
TEST_F(SafetyTest, APerUserRootThatIsNotOursAloneIsNotUsed) {
  const std::string src = Make("ds");
  const std::string root = shm_.path() + "/dspipe-cache-" + std::to_string(::geteuid());
  fs::create_directories(root);
  std::ofstream(root + "/theirs") << "another user's file";
  struct Case {
    const char* what;
    mode_t mode;
    uid_t uid;
    const char* reason;
  };
  std::vector<Case> cases = {{"world-writable", 0777, ::geteuid(), "group/world-writable"}};
  if (::geteuid() == 0) cases.push_back({"another user's", 0700, 4242, "owned by uid 4242"});
  for (const Case& c : cases) {
    SCOPED_TRACE(c.what);
    ASSERT_EQ(::chown(root.c_str(), c.uid, static_cast<gid_t>(-1)), 0);
    ASSERT_EQ(::chmod(root.c_str(), c.mode), 0);
    const auto before = Listing(root);
    CacheResult r;
    std::unique_ptr<CacheLease> lease;
    Status s = AcquireCache(src, Options(root), &r, &lease);
    ASSERT_TRUE(s.ok()) << s.ToString();
    EXPECT_FALSE(r.cached);
    EXPECT_EQ(r.path, src);
    EXPECT_TRUE(Contains(r.reason, c.reason)) << r.reason;
    EXPECT_TRUE(Listing(root) == before) << Changed(before, Listing(root));
  }
  ASSERT_EQ(::chown(root.c_str(), ::geteuid(), static_cast<gid_t>(-1)), 0);
  ASSERT_EQ(::chmod(root.c_str(), 0700), 0);
  CacheResult r;
  std::unique_ptr<CacheLease> lease;
  ASSERT_TRUE(AcquireCache(src, Options(root), &r, &lease).ok());
  EXPECT_TRUE(r.cached) << r.reason;
}

// Item 3. The cache's own directory is used only when it is ours: a link there (not followed),
// one writable by others, another user's, or one holding names but no marker: not used.
TEST_F(SafetyTest, ACacheDirThatIsNotOursIsNotUsed) {
  const std::string src = Make("ds");
  const std::string root = shm_.path() + "/c";
  const std::string own = root + "/dspipe-cache-v1";
  const std::string elsewhere = work_ + "/elsewhere";
  fs::create_directories(elsewhere);
  std::ofstream(elsewhere + "/precious") << "precious";
  struct Case {
    const char* what;
    std::function<void()> make;
    const char* reason;
  };
  const std::vector<Case> cases = {
      {"a link", [&] { fs::create_symlink(elsewhere, own); }, "not followed"},
      {"world-writable",
       [&] {
         fs::create_directories(own);
         fs::permissions(own, fs::perms::all);
       },
       "group/world-writable"},
      {"no marker",
       [&] {
         fs::create_directories(own);
         std::ofstream(own + "/f") << "x";
       },
       "no .dspipe-cache"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.what);
    fs::remove_all(root);
    fs::create_directories(root);
    c.make();
    const auto before = Listing(root);
    const auto elsewhere_before = Listing(elsewhere);
    CacheResult r;
    std::unique_ptr<CacheLease> lease;
    Status s = AcquireCache(src, Options(root), &r, &lease);
    ASSERT_TRUE(s.ok()) << s.ToString();
    EXPECT_FALSE(r.cached);
    EXPECT_TRUE(Contains(r.reason, c.reason)) << r.reason;
    EXPECT_TRUE(Listing(root) == before) << Changed(before, Listing(root));
    EXPECT_TRUE(Listing(elsewhere) == elsewhere_before)
        << Changed(elsewhere_before, Listing(elsewhere));
  }
}

// Item 3. A link planted at a name the cache writes (a use record, the temp name of its atomic
// write as it used to be, <E>.used.tmp.<pid>) never redirects a write onto another file of the
// user: names are created exclusively (temp names carry 64 random bits) and never followed.
TEST_F(SafetyTest, APlantedLinkNeverRedirectsAWrite) {
  const std::string src = Make("ds");
  const std::string root = shm_.path() + "/c";
  std::string entry;
  {
    CacheResult r;
    std::unique_ptr<CacheLease> lease;
    ASSERT_TRUE(AcquireCache(src, Options(root), &r, &lease).ok());
    ASSERT_TRUE(r.cached) << r.reason;
    entry = fs::path(r.entry).filename().string();
  }
  const std::string victim = work_ + "/victim.txt";
  std::ofstream(victim) << "the user's own file";
  const std::string victim_text = ReadAll(victim);
  // The entry goes (as after an eviction). While it is copied again (after the orphan sweep at
  // the start, which would remove a stale temp file), links are planted at the names it will
  // write next, in the old layout's place (ROOT) and the new one's (ROOT/dspipe-cache-v1).
  for (const std::string& dir : {root, root + "/dspipe-cache-v1"}) {
    std::error_code ec;
    fs::remove_all(dir + "/" + entry, ec);
    fs::remove(dir + "/" + entry + ".used", ec);
  }
  cache::SetStepHookForTest(
      [&](cache::Step step, const std::string&, size_t files, const cache::CancelToken*) {
        if (step != cache::Step::kFileCopied || files != 1) return;
        for (const std::string& dir : {root, root + "/dspipe-cache-v1"}) {
          std::error_code ec;
          fs::create_directories(dir, ec);  // the layout of the code under test may lack it
          for (const std::string& n :
               {entry + ".used", entry + ".used.tmp." + std::to_string(::getpid())}) {
            fs::remove(dir + "/" + n, ec);
            fs::create_symlink(victim, dir + "/" + n, ec);
          }
        }
      });
  CacheResult r;
  std::unique_ptr<CacheLease> lease;
  Status s = AcquireCache(src, Options(root), &r, &lease);
  cache::SetStepHookForTest(nullptr);
  EXPECT_EQ(ReadAll(victim), victim_text) << "a write went through a planted link";
  ASSERT_TRUE(s.ok()) << s.ToString();
  EXPECT_TRUE(r.cached) << r.reason;
  EXPECT_TRUE(r.copied);
  EXPECT_EQ(Records(r.path), Records(src));
}

// Item 4. A fork() while a background copy runs: the child does not keep the entry's lock (a
// forked DataLoader worker used to block every other rank's open until it exited), and it
// never waits for its parent's copy (it has no copy thread): it reads in place.
TEST_F(SafetyTest, AForkedChildNeitherHoldsTheEntryLockNorWaitsForTheCopy) {
  const std::string src = Make("ds", 3);
  const std::string root = shm_.path() + "/c";
  CopyGate gate(CopyGate::kUntilReleased);
  CacheOptions co = Options(root);
  cache::OpenMode mode;
  mode.overlap = true;
  std::shared_ptr<const Dataset> ds;
  CacheResult r;
  Status s = cache::OpenDatasetCached(src, DatasetOpenOptions(), co, mode, nullptr, &ds, &r);
  ASSERT_TRUE(s.ok()) << s.ToString();
  std::shared_ptr<cache::CacheCopy> copy = cache::CacheStateOf(*ds).copy;
  ASSERT_NE(copy, nullptr);
  gate.WaitHeld();  // the copy thread holds the entry's lock, its temp dir half full
  int to_child[2], from_child[2];
  ASSERT_EQ(::pipe(to_child), 0);
  ASSERT_EQ(::pipe(from_child), 0);
  const pid_t pid = ::fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    const bool in_place = copy->state() == cache::CacheCopy::State::kInPlace;
    char c = in_place ? 'i' : 'c';
    if (::write(from_child[1], &c, 1) != 1) ::_exit(2);
    if (in_place) {  // an old child would wait here forever: ask only when it says in place
      c = copy->Wait() == cache::CacheCopy::State::kInPlace && copy->cached() == nullptr ? 'w'
                                                                                         : 'x';
      if (::write(from_child[1], &c, 1) != 1) ::_exit(2);
    }
    if (::read(to_child[0], &c, 1) != 1) ::_exit(2);  // stays alive until told
    ::_exit(0);
  }
  ::close(to_child[0]);
  ::close(from_child[1]);
  char c = 0;
  ASSERT_EQ(::read(from_child[0], &c, 1), 1);
  EXPECT_EQ(c, 'i') << "the child reports its parent's copy as its own";
  if (c == 'i') {
    ASSERT_EQ(::read(from_child[0], &c, 1), 1);
    EXPECT_EQ(c, 'w') << "the child's Wait()";
  }
  gate.Release();
  EXPECT_EQ(copy->Wait(), cache::CacheCopy::State::kCached);
  // The parent's copy committed and let the lock go; the child is alive. Another process's open
  // must find the entry at once, not wait for the lock.
  Child b = StartTool({src, root}, {"DSPIPE_LOG_LEVEL=info"});
  std::string text;
  const bool waited = [&] {
    char buf[4096];
    for (;;) {
      if (Contains(text, "waiting for the process that holds")) return true;
      if (Contains(text, "result ")) return false;
      const ssize_t n = ::read(b.out, buf, sizeof buf);
      if (n <= 0) return false;
      text.append(buf, static_cast<size_t>(n));
    }
  }();
  EXPECT_FALSE(waited) << "another process's open waited for the forked child: " << text;
  c = 'q';
  ASSERT_EQ(::write(to_child[1], &c, 1), 1);  // the child exits (releasing what it held)
  int code = 0;
  text = Finish(&b, &code, text);
  EXPECT_EQ(code, 0) << text;
  EXPECT_TRUE(Contains(text, "result cached=1 copied=0")) << text;
  int st = 0;
  ASSERT_EQ(::waitpid(pid, &st, 0), pid);
  EXPECT_TRUE(WIFEXITED(st) && WEXITSTATUS(st) == 0) << st;
  ::close(to_child[1]);
  ::close(from_child[0]);
}

// ---- several cache_tool processes driven step by step (cache_tool --steps)

// A cache_tool child that reports each durable step and waits for the driver's go.
struct Stepper {
  Child child;
  int in = -1;         // its stdin: one byte = go on
  std::string buf;     // what it printed, not split into lines yet
  std::string output;  // every line so far
  bool done = false;   // EOF
  bool waiting = false;
  std::string step;  // the step it waits at ("file-copied 1", ...)
};

// Reads what the steppers print until one of them waits at a step or ends; returns its index,
// or -1 when all are done.
int NextEvent(std::vector<Stepper>* s) {
  for (;;) {
    for (size_t i = 0; i < s->size(); ++i) {
      Stepper& w = (*s)[i];
      size_t nl;
      while (!w.waiting && (nl = w.buf.find('\n')) != std::string::npos) {
        const std::string line = w.buf.substr(0, nl);
        w.buf.erase(0, nl + 1);
        w.output += line + "\n";
        if (line.rfind("step ", 0) == 0) {
          std::istringstream in(line.substr(5));
          std::string name, entry, files;
          in >> name >> entry >> files;
          w.waiting = true;
          w.step = name + " " + files;
          return static_cast<int>(i);
        }
      }
    }
    std::vector<pollfd> fds;
    std::vector<size_t> who;
    for (size_t i = 0; i < s->size(); ++i) {
      if (!(*s)[i].done && !(*s)[i].waiting) {
        fds.push_back({(*s)[i].child.out, POLLIN, 0});
        who.push_back(i);
      }
    }
    if (fds.empty()) return -1;
    if (::poll(fds.data(), fds.size(), -1) < 0 && errno != EINTR) return -1;
    for (size_t k = 0; k < fds.size(); ++k) {
      if (!(fds[k].revents & (POLLIN | POLLHUP | POLLERR))) continue;
      Stepper& w = (*s)[who[k]];
      char b[4096];
      const ssize_t n = ::read(w.child.out, b, sizeof b);
      if (n <= 0) {
        w.done = true;
        w.output += w.buf;
        w.buf.clear();
        return static_cast<int>(who[k]);
      }
      w.buf.append(b, static_cast<size_t>(n));
    }
  }
}

void Go(Stepper* w) {
  w->waiting = false;
  const char c = 'g';
  if (::write(w->in, &c, 1) != 1) ADD_FAILURE() << "a stepper died";
}

// Item 5. Four processes copy four different datasets into one cache dir at once, with a
// cache_limit room for two and a half. Each is held right after the first file of its copy
// until all four are copying or decided, then the usage of the cache dir is sampled, and again
// at every later step of every process: never above the limit (plus each file's rounding to a
// page). Every process either caches or reads in place with a reason naming the limit.
TEST_F(SafetyTest, FourProcessesCopyingFourDatasetsAtOnceNeverExceedTheLimit) {
  std::vector<std::string> sources;
  for (const char* n : {"a", "b", "c", "d"}) sources.push_back(Make(n));
  uint64_t bytes = 0;
  for (const auto& e : fs::directory_iterator(sources[0])) {
    if (e.path().filename() != "lock.mdb") bytes += e.file_size();
  }
  const uint64_t limit = bytes * 5 / 2;
  const std::string root = shm_.path() + "/c";
  std::vector<Stepper> s(sources.size());
  for (size_t i = 0; i < sources.size(); ++i) {
    s[i].child =
        StartTool({sources[i], root, "--steps", "--limit", std::to_string(limit)}, {}, &s[i].in);
  }
  uint64_t peak = 0;
  int peak_files = 0;
  auto sample = [&] {
    int files = 0;
    const uint64_t u = DatasetFileUsage(root, &files);
    if (u > peak) peak = u, peak_files = files;
    EXPECT_LE(u, limit + 4096u * files) << "limit " << limit;
  };
  // Phase 1: everyone to its first copied file (or its decision).
  size_t held = 0, finished = 0;
  while (held + finished < s.size()) {
    const int i = NextEvent(&s);
    ASSERT_GE(i, 0);
    if (s[i].done) {
      ++finished;
    } else if (s[i].step == "file-copied 1") {
      ++held;  // stays there for now
    } else {
      Go(&s[i]);
    }
  }
  sample();
  for (Stepper& w : s) {
    if (w.waiting) Go(&w);
  }
  // Phase 2: to the end, sampling at every step.
  for (int i; (i = NextEvent(&s)) >= 0;) {
    if (s[i].done) continue;
    sample();
    Go(&s[i]);
  }
  sample();
  int cached = 0;
  for (Stepper& w : s) {
    int code = 0;
    const std::string out = Finish(&w.child, &code, w.output);
    ::close(w.in);
    ASSERT_EQ(code, 0) << out;
    if (Contains(out, "result cached=1")) {
      ++cached;
    } else {
      EXPECT_TRUE(Contains(out, "result cached=0")) << out;
      EXPECT_TRUE(Contains(out, "cache_limit")) << "in place without the reason: " << out;
    }
  }
  EXPECT_GE(cached, 1);
  EXPECT_LE(cached, 2);
  EXPECT_LE(peak, limit + 4096u * peak_files);
}

// ---- order shards: ShardCache::Want on the training thread

// An Env whose first look at the cache after arm() evicts every entry under the root (another
// process's eviction landing between any check and the entry's lock): the old Want checked that
// the entry existed, then took its lock and copied the shard on the training thread.
class EvictingEnv : public core::FaultEnv {
 public:
  explicit EvictingEnv(std::string root) : root_(std::move(root)) {}
  void arm() { armed_ = true; }
  bool FileExists(const std::string& path) override {
    const bool there = core::FaultEnv::FileExists(path);
    Evict();
    return there;
  }
  Status OpenDirectory(const std::string& path, std::unique_ptr<Directory>* out) override {
    Evict();
    return core::FaultEnv::OpenDirectory(path, out);
  }

 private:
  void Evict() {
    if (!armed_.exchange(false)) return;
    for (const std::string& e : EntryDirs(root_)) {
      std::error_code ec;
      fs::remove(e + ".used", ec);
      fs::remove_all(e, ec);
    }
  }
  const std::string root_;
  std::atomic<bool> armed_{false};
};

// Item 9. Want() never copies a shard, nor waits for a lock, on the calling (training) thread,
// even when the shard's entry goes between a look and the lock: the shard is then copied by
// the background thread.
TEST_F(SafetyTest, WantNeverCopiesOnTheCallingThreadEvenWhenTheEntryGoesMeanwhile) {
  const std::string src = Make("ds", 3);
  const std::string root = shm_.path() + "/c";
  {  // shard 0's entry is there at first
    CacheResult r;
    std::unique_ptr<CacheLease> lease;
    ASSERT_TRUE(AcquireCache(src + "/" + format::ShardDirName(0), Options(root), &r, &lease).ok());
    ASSERT_TRUE(r.cached) << r.reason;
  }
  std::mutex mu;
  std::set<std::thread::id> copied_on;
  cache::SetStepHookForTest(
      [&](cache::Step step, const std::string&, size_t, const cache::CancelToken*) {
        if (step != cache::Step::kFileCopied) return;
        std::lock_guard<std::mutex> lock(mu);
        copied_on.insert(std::this_thread::get_id());
      });
  EvictingEnv env(root);
  CacheOptions co = Options(root);
  co.env = &env;
  cache::OpenMode mode;
  mode.per_shard = true;
  DatasetOpenOptions oo;
  oo.lazy_shards = true;
  std::shared_ptr<const Dataset> ds;
  Status s = cache::OpenDatasetCached(src, oo, co, mode, nullptr, &ds);
  ASSERT_TRUE(s.ok()) << s.ToString();
  std::shared_ptr<cache::ShardCache> sc = cache::CacheStateOf(*ds).shards;
  ASSERT_NE(sc, nullptr);
  env.arm();
  sc->Want({0});
  sc->Wait();
  cache::SetStepHookForTest(nullptr);
  std::lock_guard<std::mutex> lock(mu);
  EXPECT_EQ(copied_on.count(std::this_thread::get_id()), 0u)
      << "a shard was copied on the training thread";
  EXPECT_EQ(copied_on.size(), 1u) << "the evicted shard was copied again, in the background";
  EXPECT_EQ(sc->cached_count(), 1u) << sc->Describe();
}

}  // namespace
}  // namespace dspipe
