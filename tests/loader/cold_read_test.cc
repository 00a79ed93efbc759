// SPDX-License-Identifier: Apache-2.0
// Cold reads: a record's I/O happens in `read` (Dataset::Read makes its bytes resident before
// the callback runs), and the loader's read-ahead never runs past its window. The page cache is
// dropped with posix_fadvise(DONTNEED) on data.mdb and checked with mincore; where the
// filesystem ignores the drop the cold tests skip with a message.
#include <gtest/gtest.h>
#include <sys/resource.h>

#include <algorithm>
#include <filesystem>
#include <map>
#include <mutex>
#include <set>

#include "core/files.h"
#include "dspipe/convert.h"
#include "dspipe/dataset.h"
#include "dspipe/loader.h"
#include "dspipe/sampler.h"
#include "format/residency.h"
#include "loader/loader_fixture.h"

namespace dspipe {
namespace {

constexpr int kCount = 24;
constexpr int kSide = 256;  // uncompressed raw: 192 KiB image + 64 KiB mask per record

class ColdReadTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    root_ = new std::string(testing::FreshDir("cold"));
    testing::WriteSourceTree(*root_ + "/src", kCount, kSide, kSide, true);
    BuildOptions b;
    b.source = *root_ + "/src";
    b.output = *root_ + "/raw.lmdb";
    b.store = StoreMode::kRaw;
    b.compression = Compression::kNone;
    b.threads = 2;
    BuildResult r;
    Status s = BuildDataset(b, &r);
    ASSERT_TRUE(s.ok()) << s.ToString();
  }
  static void TearDownTestSuite() {
    std::filesystem::remove_all(*root_);
    delete root_;
  }
  static std::string Db() { return *root_ + "/raw.lmdb"; }
  static std::string DataFile() { return Db() + "/data.mdb"; }

  // Drops data.mdb from the page cache; false (with the reason in *why) when it stayed.
  static bool DropCache(std::string* why) {
    core::DropFileCache(DataFile());
    const double resident = format::ResidentFraction(DataFile());
    if (resident < 0 || resident > 0.05) {
      *why = "posix_fadvise(DONTNEED) left " + std::to_string(resident * 100) + "% of " +
             DataFile() + " cached (filesystem ignores it, or mincore failed)";
      return false;
    }
    return true;
  }

  static std::string* root_;
};
std::string* ColdReadTest::root_ = nullptr;

long MajorFaultsOfThisThread() {
  rusage u{};
  getrusage(RUSAGE_THREAD, &u);
  return u.ru_majflt;
}

TEST_F(ColdReadTest, ColdRecordsFaultInDuringReadNotInTheCallback) {
  std::string why;
  if (!DropCache(&why)) GTEST_SKIP() << why;
  std::unique_ptr<Dataset> ds;
  ASSERT_TRUE(Dataset::Open(Db(), DatasetOpenOptions{}, &ds).ok());
  long in_callback = 0, touched_pages = 0;
  for (uint64_t i = 0; i < ds->size(); ++i) {
    Status s = ds->Read(i, [&](const RecordView& rec) {
      const long before = MajorFaultsOfThisThread();
      unsigned sum = 0;  // what a decoder does: read every byte (one per page suffices)
      for (auto part : {rec.image, rec.mask}) {
        for (size_t off = 0; off < part.size(); off += 4096, ++touched_pages) sum += part[off];
      }
      in_callback += MajorFaultsOfThisThread() - before;
      return sum == 0xFFFFFFFFu ? Status::Internal("impossible") : Status::OK();
    });
    ASSERT_TRUE(s.ok()) << s.ToString();
  }
  EXPECT_GT(touched_pages, kCount * 60);
  EXPECT_EQ(in_callback, 0) << "pages of cold records faulted in while the callback (decode) "
                               "touched them: the I/O would be timed as decode";
  EXPECT_GT(format::ResidentFraction(DataFile()), 0.5);
}

TEST_F(ColdReadTest, ColdEpochRecordsMoreReadTimeAndTheSameDecode) {
  LoaderOptions o;
  o.batch_size = 4;
  o.threads = 1;
  o.prefetch = 1;
  o.readahead = 0;  // every record's I/O inside its own read
  o.sampler.seed = 3;
  // A fresh loader per phase: pages an open LMDB map has faulted in stay mapped, and
  // posix_fadvise(DONTNEED) does not drop mapped pages.
  auto epoch = [&](uint64_t e, StageSummary* read, StageSummary* decode) {
    std::unique_ptr<Loader> loader;
    ASSERT_TRUE(Loader::Open(Db(), o, &loader).ok());
    loader->set_epoch(e);
    Batch b;
    int batches = 0;
    while (true) {
      Status s = loader->Next(&b);
      ASSERT_TRUE(s.ok()) << s.ToString();
      if (!b) break;
      ++batches;
    }
    ASSERT_EQ(batches, kCount / 4);
    for (const StageSummary& st : loader->stats().Summaries()) {
      if (st.stage == Stage::kRead) *read = st;
      if (st.stage == Stage::kDecode) *decode = st;
    }
  };
  StageSummary warm_read, warm_decode, cold_read, cold_decode;
  epoch(0, &warm_read, &warm_decode);  // pages resident (just built, then read once)
  epoch(1, &warm_read, &warm_decode);
  std::string why;
  if (!DropCache(&why)) GTEST_SKIP() << why;
  epoch(2, &cold_read, &cold_decode);
  ASSERT_EQ(cold_read.count, static_cast<uint64_t>(kCount));
  // Medians: one preempted sample on a busy machine cannot move them.
  EXPECT_GT(cold_read.p50_ms, warm_read.p50_ms)
      << "cold read p50 " << cold_read.p50_ms << " ms vs warm " << warm_read.p50_ms;
  // Faulting 64 pages one by one inside the decode (the old behavior) costs milliseconds per
  // record; a memcpy of 256 KiB costs tens of microseconds.
  EXPECT_LT(cold_decode.p50_ms, 3 * warm_decode.p50_ms + 0.5)
      << "cold decode p50 " << cold_decode.p50_ms << " ms vs warm " << warm_decode.p50_ms;
}

// Records every WillNeed call with the number of reads started so far.
class RecordingDataset : public Dataset {
 public:
  explicit RecordingDataset(std::shared_ptr<const Dataset> inner) : inner_(std::move(inner)) {}
  const DatasetInfo& info() const override { return inner_->info(); }
  std::string KeyName(uint64_t i) const override { return inner_->KeyName(i); }
  Status Read(uint64_t i, const std::function<Status(const RecordView&)>& fn) const override {
    {
      std::lock_guard<std::mutex> l(mu_);
      read_.insert(i);
    }
    return inner_->Read(i, fn);
  }
  void WillNeed(std::span<const uint64_t> indices) const override {
    std::lock_guard<std::mutex> l(mu_);
    for (uint64_t i : indices) {
      advised_.push_back(i);
      if (read_.count(i)) ++advised_after_read_;
    }
    inner_->WillNeed(indices);
  }
  std::vector<uint64_t> advised() const {
    std::lock_guard<std::mutex> l(mu_);
    return advised_;
  }
  int advised_after_read() const {
    std::lock_guard<std::mutex> l(mu_);
    return advised_after_read_;
  }

 private:
  std::shared_ptr<const Dataset> inner_;
  mutable std::mutex mu_;
  mutable std::set<uint64_t> read_;
  mutable std::vector<uint64_t> advised_;
  mutable int advised_after_read_ = 0;
};

TEST_F(ColdReadTest, ReadAheadFollowsTheOrderAndNeverPassesItsWindow) {
  // Windows of at least a batch advise every position after the first submission; a window of 6
  // (> batch 4, < prefetch x batch) checks the bound tightly.
  for (int window : {-1, 6, 0}) {
    SCOPED_TRACE("readahead " + std::to_string(window));
    std::unique_ptr<Dataset> inner;
    ASSERT_TRUE(Dataset::Open(Db(), DatasetOpenOptions{}, &inner).ok());
    auto ds = std::make_shared<RecordingDataset>(std::shared_ptr<const Dataset>(std::move(inner)));
    LoaderOptions o;
    o.batch_size = 4;
    o.threads = 2;
    o.prefetch = 2;
    o.readahead = window;
    o.sampler.seed = 9;
    std::unique_ptr<Loader> loader;
    ASSERT_TRUE(Loader::Create(ds, o, &loader).ok());
    Sampler sampler;
    ASSERT_TRUE(Sampler::Create(kCount, o.sampler, &sampler).ok());
    const std::vector<uint64_t> order = sampler.EpochOrder(0);
    std::map<uint64_t, uint64_t> position;
    for (uint64_t p = 0; p < order.size(); ++p) position[order[p]] = p;
    const uint64_t w = window < 0 ? 2 * 4 : static_cast<uint64_t>(window);
    Batch b;
    size_t seen = 0;
    while (true) {
      ASSERT_TRUE(loader->Next(&b).ok());
      if (!b) break;
      // Delivered so far + the prefetch batches in flight + the window.
      const uint64_t limit = loader->state().position + 2 * 4 + w;
      const std::vector<uint64_t> advised = ds->advised();
      for (; seen < advised.size(); ++seen) {
        EXPECT_LT(position.at(advised[seen]), limit) << "advised beyond the window";
        if (seen > 0) {  // in the epoch's order, each once
          EXPECT_EQ(position.at(advised[seen]), position.at(advised[seen - 1]) + 1);
        }
      }
    }
    const std::vector<uint64_t> advised = ds->advised();
    if (w == 0) {
      EXPECT_TRUE(advised.empty());
    } else {
      // Everything after the first submission (prefetch batches) is advised, before its read.
      EXPECT_EQ(advised.size(), static_cast<size_t>(kCount - 2 * 4));
      EXPECT_EQ(ds->advised_after_read(), 0);
    }
  }
}

}  // namespace
}  // namespace dspipe
