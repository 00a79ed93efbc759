// SPDX-License-Identifier: Apache-2.0
// Shared by the cache tests: tmpfs dirs, records of a dataset, cache_tool child processes and a
// gate that holds a background copy at a known point. Header-only.
#pragma once

#include <fcntl.h>
#include <gtest/gtest.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <condition_variable>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "cache/populate.h"
#include "cache/test_hooks.h"
#include "dspipe/cache.h"
#include "dspipe/dataset.h"
#include "loader/loader_fixture.h"
#include "tool_process.h"

namespace dspipe::cachetest {

namespace fs = std::filesystem;

// A fresh directory on /dev/shm (a tmpfs), removed at scope exit.
class ShmDir {
 public:
  ShmDir() {
    char tmpl[] = "/dev/shm/dspipe-cache-test-XXXXXX";
    const char* p = ::mkdtemp(tmpl);
    if (p == nullptr) throw std::runtime_error("mkdtemp on /dev/shm failed");
    path_ = p;
  }
  ~ShmDir() {
    std::error_code ec;
    fs::remove_all(path_, ec);
  }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

inline std::string ReadAll(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

inline bool Contains(const std::string& s, const std::string& part) {
  return s.find(part) != std::string::npos;
}

// Every record of a dataset, CRC-checked, as strings.
inline std::vector<std::string> Records(const Dataset& ds) {
  std::vector<std::string> out;
  for (uint64_t i = 0; i < ds.size(); ++i) {
    Status s = ds.Read(i, [&](const RecordView& v) {
      out.emplace_back(reinterpret_cast<const char*>(v.image.data()), v.image.size());
      out.back().append(reinterpret_cast<const char*>(v.mask.data()), v.mask.size());
      return Status::OK();
    });
    EXPECT_TRUE(s.ok()) << s.ToString();
  }
  return out;
}

inline std::vector<std::string> Records(const std::string& path) {
  std::unique_ptr<Dataset> ds;
  DatasetOpenOptions o;
  o.verify_crc = true;
  Status s = Dataset::Open(path, o, &ds);
  EXPECT_TRUE(s.ok()) << s.ToString();
  return ds ? Records(*ds) : std::vector<std::string>{};
}

// Each test's fresh directory (named after it) holding a source tree of 12 samples with masks,
// datasets built from it (Make), and a fresh tmpfs dir (shm_) to put cache roots in.
class CacheFixture : public ::testing::Test {
 protected:
  void SetUp() override {
    const std::string name = ::testing::UnitTest::GetInstance()->current_test_info()->name();
    work_ = testing::FreshDir("cache-" + name);
    testing::WriteSourceTree(work_ + "/src", 12, 48, 64, /*masks=*/true);
  }
  void TearDown() override {
    std::error_code ec;
    fs::remove_all(work_, ec);
  }
  // A dataset built from the source tree: one LMDB, or a sharded directory.
  std::string Make(const std::string& name, int shards = 1) {
    return testing::Build(work_ + "/src", work_ + "/" + name, StoreMode::kEncoded, shards);
  }
  // Cache options for the cache root `root`, with no margin.
  CacheOptions Options(const std::string& root) const {
    CacheOptions o;
    o.mode = root;
    o.margin = 0;
    return o;
  }
  std::string work_;
  ShmDir shm_;
};

// ---- several processes (cache_tool: one AcquireCache per process)

inline Child StartTool(const std::vector<std::string>& args,
                       const std::vector<std::string>& extra_env, int* stdin_w = nullptr) {
  return StartToolAt(CACHE_TOOL_PATH, args, extra_env, stdin_w);
}

// Holds a background copy right after its first file (the entry's lock held, its temp dir
// partly filled) until the test releases it, or, in kUntilCancelled mode, until the copy is
// cancelled (the loader that wanted it is being destroyed): a known point, not a guessed one.
class CopyGate {
 public:
  enum Mode { kUntilReleased, kUntilCancelled };
  explicit CopyGate(Mode mode) : mode_(mode) {
    cache::SetStepHookForTest([this](cache::Step step, const std::string&, size_t files_done,
                                     const cache::CancelToken* cancel) {
      if (step != cache::Step::kFileCopied || files_done != 1) return;
      std::unique_lock<std::mutex> lock(mu_);
      held_ = true;
      cv_.notify_all();
      if (mode_ == kUntilCancelled) {
        lock.unlock();
        ASSERT_NE(cancel, nullptr);
        cancel->WaitRequested();
        return;
      }
      cv_.wait(lock, [this] { return released_; });
    });
  }
  ~CopyGate() {
    Release();
    cache::SetStepHookForTest(nullptr);
  }
  void WaitHeld() {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait(lock, [this] { return held_; });
  }
  void Release() {
    std::lock_guard<std::mutex> lock(mu_);
    released_ = true;
    cv_.notify_all();
  }

 private:
  const Mode mode_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool held_ = false, released_ = false;
};

}  // namespace dspipe::cachetest
