// SPDX-License-Identifier: Apache-2.0
// Loader behaviour on bad input: corrupt records, plain LMDBs written by Python, fork.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <mutex>
#include <opencv2/imgcodecs.hpp>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "dspipe/format.h"
#include "dspipe/loader.h"
#include "loader/loader_fixture.h"

namespace dspipe {
namespace {

constexpr int kCount = 13;
constexpr int kH = 24, kW = 32;

class LoaderCorruptTest : public testing::EncodedLmdbTest {
 protected:
  LoaderCorruptTest() : EncodedLmdbTest(kCount, kH, kW) {}

  // Record 5: valid header, PNG payload garbled (fails to decode). Record 9: bad magic.
  void Corrupt() {
    std::string v5 = testing::ReadRecord(path_, 5);
    for (size_t i = kRecordHeaderSize + 40; i < kRecordHeaderSize + 80; ++i) v5[i] ^= 0x5A;
    testing::OverwriteRecord(path_, 5, v5);
    std::string v9 = testing::ReadRecord(path_, 9);
    v9[0] = 'X';
    testing::OverwriteRecord(path_, 9, v9);
  }

  std::unique_ptr<Loader> Open(LoaderOptions o) {
    o.batch_size = 4;
    o.threads = 2;
    std::unique_ptr<Loader> loader;
    Status s = Loader::Open(path_, o, &loader);
    EXPECT_TRUE(s.ok()) << s.ToString();
    return loader;
  }
};

TEST_F(LoaderCorruptTest, TruncatedDataFileIsRefusedAtOpenNotSigbus) {
  const std::string mdb = path_ + "/data.mdb";
  const auto size = std::filesystem::file_size(mdb);
  std::filesystem::resize_file(mdb, std::min<uintmax_t>(20 * 1024, size / 2));
  std::unique_ptr<Loader> loader;
  const Status s = Loader::Open(path_, LoaderOptions{}, &loader);
  EXPECT_EQ(s.code(), Status::Code::kCorruption) << s.ToString();
  EXPECT_NE(s.message().find(mdb), std::string::npos) << s.ToString();
  EXPECT_NE(s.message().find("truncated"), std::string::npos) << s.ToString();
  EXPECT_EQ(loader, nullptr);
}

TEST_F(LoaderCorruptTest, CorruptRecordIsAnErrorNamingTheKey) {
  Corrupt();
  LoaderOptions o;
  o.sampler.shuffle = false;  // batches 0..3, 4..7 (holds 5), 8..11 (holds 9), 12
  auto loader = Open(o);
  Batch b;
  ASSERT_TRUE(loader->Next(&b).ok());
  Status s = loader->Next(&b);
  ASSERT_EQ(s.code(), Status::Code::kCorruption) << s.ToString();
  EXPECT_NE(s.message().find(KeyName(5)), std::string::npos) << s.ToString();
  EXPECT_NE(s.message().find("data.lmdb"), std::string::npos) << s.ToString();
  // Issue 40: the error leads back to the file the record was built from (the dataset's
  // per-record source table), in the message and as Status::path.
  const std::string source5 = root_ + "/src/images/000005.png";
  EXPECT_NE(s.message().find("(record made from " + source5 + ")"), std::string::npos)
      << s.ToString();
  EXPECT_EQ(s.path(), source5);
  EXPECT_EQ(s.key(), KeyName(5));
  EXPECT_FALSE(b);
  s = loader->Next(&b);  // the caller may go on: the failing batch was skipped
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find(KeyName(9)), std::string::npos) << s.ToString();
  ASSERT_TRUE(loader->Next(&b).ok());
  ASSERT_TRUE(b);
  EXPECT_EQ(b.indices()[0], 12u);
}

// Issue 40 item 16: the key was shown only as hex; the message names the record as
// batch["index"] does, then its key, and both sizes of a mask of another size.
TEST_F(LoaderCorruptTest, AMaskOfAnotherSizeIsNamedWithBothSizes) {
  const std::string value = testing::ReadRecord(path_, 5);
  RecordView v;
  ASSERT_TRUE(
      DecodeRecord({reinterpret_cast<const uint8_t*>(value.data()), value.size()}, false, &v).ok());
  std::vector<uint8_t> small;
  ASSERT_TRUE(cv::imencode(".png", cv::Mat(kH / 2, kW / 2, CV_8UC1, cv::Scalar(1)), small));
  std::string rewritten;
  RecordHeader h = v.header;
  h.mask_size = static_cast<uint32_t>(small.size());
  EncodeRecord(h, v.image, small, &rewritten);
  testing::OverwriteRecord(path_, 5, rewritten);
  LoaderOptions o;
  o.sampler.shuffle = false;
  auto loader = Open(o);
  Batch b;
  ASSERT_TRUE(loader->Next(&b).ok());
  const Status s = loader->Next(&b);
  ASSERT_EQ(s.code(), Status::Code::kCorruption) << s.ToString();
  EXPECT_NE(s.message().find("record 5 (key " + KeyName(5) + ") in " + path_), std::string::npos)
      << s.ToString();
  // A dspipe record's header gives the size, height first as every size dspipe prints (a plain
  // LMDB's mask: "the mask is HxW (height x width) but the image is HxW", test_first_hour.py).
  EXPECT_NE(s.message().find("decoded image is 12x16 (height x width), header says 24x32"),
            std::string::npos)
      << s.ToString();
}

TEST_F(LoaderCorruptTest, MaxCorruptSkipsAndCountsThem) {
  Corrupt();
  LoaderOptions o;
  o.max_corrupt = 2;
  auto loader = Open(o);
  for (uint64_t epoch = 0; epoch < 2; ++epoch) {
    std::map<uint64_t, int> seen;
    int smaller = 0;
    for (const auto& b : testing::RunEpochs(loader.get(), epoch, 1)) {
      for (uint64_t i : b.indices) ++seen[i];
      smaller += b.indices.size() < 4;
    }
    EXPECT_EQ(seen.size(), static_cast<size_t>(kCount - 2));
    EXPECT_EQ(seen.count(5), 0u);
    EXPECT_EQ(seen.count(9), 0u);
    for (auto [i, n] : seen) EXPECT_EQ(n, 1) << i;
    EXPECT_GE(smaller, 2);  // the skipped samples' batches came out smaller
  }
  EXPECT_EQ(loader->corrupt_skipped(), 4u);

  o.max_corrupt = 1;
  o.sampler.shuffle = false;
  auto strict = Open(o);
  Batch b;
  Status s;
  int errors = 0;
  while ((s = strict->Next(&b)).ok() ? static_cast<bool>(b) : true) {
    if (!s.ok()) {
      ++errors;
      EXPECT_NE(s.message().find("max_corrupt=1"), std::string::npos) << s.ToString();
      EXPECT_NE(s.message().find(KeyName(9)), std::string::npos) << s.ToString();
    }
  }
  EXPECT_EQ(errors, 1);
}

// Flips one random bit in the value of record `index` (seeded: the same bit every run).
void FlipOneBit(const std::string& lmdb_dir, uint64_t index, std::mt19937_64* rng) {
  std::string v = testing::ReadRecord(lmdb_dir, index);
  const uint64_t bit = (*rng)() % (static_cast<uint64_t>(v.size()) * 8);
  v[bit / 8] = static_cast<char>(v[bit / 8] ^ (1 << (bit % 8)));
  testing::OverwriteRecord(lmdb_dir, index, v);
}

// Skipped records are listed with their keys, not only counted: each distinct record once,
// in the order met, across epochs; corrupt_skipped() goes on counting every meeting.
TEST_F(LoaderCorruptTest, SkippedRecordsAreListedByKey) {
  std::mt19937_64 rng(11);
  const std::vector<uint64_t> flipped = {2, 5, 11};
  for (uint64_t i : flipped) FlipOneBit(path_, i, &rng);
  LoaderOptions o;
  o.max_corrupt = 3;
  o.sampler.shuffle = false;
  o.dataset.verify_crc = true;  // a flipped bit anywhere in the value fails the record CRC
  auto loader = Open(o);
  EXPECT_EQ(loader->corrupt_records().count, 0u);
  EXPECT_TRUE(loader->corrupt_records().records.empty());
  for (const auto& b : testing::RunEpochs(loader.get(), 0, 2)) {
    for (uint64_t i : b.indices) EXPECT_EQ(std::count(flipped.begin(), flipped.end(), i), 0);
  }
  const CorruptReport r = loader->corrupt_records();
  EXPECT_EQ(r.count, 6u);  // 3 records x 2 epochs
  EXPECT_EQ(r.count, loader->corrupt_skipped());
  EXPECT_FALSE(r.truncated);
  ASSERT_EQ(r.records.size(), flipped.size());
  for (size_t k = 0; k < flipped.size(); ++k) {
    EXPECT_EQ(r.records[k].index, flipped[k]);
    EXPECT_EQ(r.records[k].key, KeyName(flipped[k]));
    EXPECT_EQ(r.records[k].epoch, 0u);
    EXPECT_NE(r.records[k].reason.find(KeyName(flipped[k])), std::string::npos)
        << r.records[k].reason;
    char name[32];
    std::snprintf(name, sizeof(name), "%06d.png", static_cast<int>(flipped[k]));
    EXPECT_EQ(r.records[k].source, root_ + "/src/images/" + name);
  }
}

// More corrupt records than CorruptReport::kMaxListed: the first ones are listed, the list
// says it is not all of them, and the count has every one.
TEST(LoaderCorruptList, ListIsBoundedAndSaysSo) {
  const int n = static_cast<int>(CorruptReport::kMaxListed) + 6;
  const std::string root = testing::FreshDir("LoaderCorruptListBounded");
  testing::WriteSourceTree(root + "/src", n, 8, 8, false);
  const std::string path = testing::Build(root + "/src", root + "/data.lmdb", StoreMode::kRaw, 1);
  std::mt19937_64 rng(5);
  for (int i = 0; i < n - 1; ++i) FlipOneBit(path, static_cast<uint64_t>(i), &rng);
  LoaderOptions o;
  o.batch_size = 8;
  o.threads = 2;
  o.max_corrupt = n;
  o.sampler.shuffle = false;
  o.dataset.verify_crc = true;
  std::unique_ptr<Loader> loader;
  const Status s = Loader::Open(path, o, &loader);
  ASSERT_TRUE(s.ok()) << s.ToString();
  const auto batches = testing::RunEpochs(loader.get(), 0, 1);
  ASSERT_EQ(batches.size(), 1u);  // only the last record survives
  EXPECT_EQ(batches[0].indices, std::vector<uint64_t>{static_cast<uint64_t>(n - 1)});
  const CorruptReport r = loader->corrupt_records();
  EXPECT_EQ(r.count, static_cast<uint64_t>(n - 1));
  EXPECT_TRUE(r.truncated);
  ASSERT_EQ(r.records.size(), CorruptReport::kMaxListed);
  for (size_t k = 0; k < r.records.size(); ++k) {
    EXPECT_EQ(r.records[k].index, k);  // in order: no shuffle
    EXPECT_EQ(r.records[k].key, KeyName(k));
  }
  loader.reset();
  std::filesystem::remove_all(root);
}

// Issue 40 item 5: with max_corrupt large and every record bad, the epoch does not end
// silently empty: its end is an error saying so, with the count and the first reason; the next
// epoch is then read (and fails the same way).
TEST(LoaderCorruptList, AnEpochWithEveryRecordSkippedIsAnErrorNotSilentlyEmpty) {
  const int n = 10;
  const std::string root = testing::FreshDir("LoaderCorruptAllSkipped");
  testing::WriteSourceTree(root + "/src", n, 8, 8, false);
  const std::string path = testing::Build(root + "/src", root + "/data.lmdb", StoreMode::kRaw, 1);
  std::mt19937_64 rng(7);
  for (int i = 0; i < n; ++i) FlipOneBit(path, static_cast<uint64_t>(i), &rng);
  LoaderOptions o;
  o.batch_size = 4;
  o.threads = 2;
  o.max_corrupt = 1000;
  o.sampler.shuffle = false;
  o.dataset.verify_crc = true;
  std::unique_ptr<Loader> loader;
  ASSERT_TRUE(Loader::Open(path, o, &loader).ok());
  for (uint64_t epoch = 0; epoch < 2; ++epoch) {
    Batch batch;
    Status s;
    int batches = 0;
    while ((s = loader->Next(&batch)).ok() && batch) ++batches;
    EXPECT_EQ(batches, 0);
    EXPECT_EQ(s.code(), Status::Code::kAborted) << s.ToString();
    EXPECT_NE(s.message().find("epoch " + std::to_string(epoch) +
                               " delivered no sample: all 10 records read were skipped as "
                               "corrupt (LoaderOptions::max_corrupt = 1000)"),
              std::string::npos)
        << s.ToString();
    EXPECT_NE(s.message().find(KeyName(0)), std::string::npos) << s.ToString();  // the first
    EXPECT_EQ(loader->epoch(), epoch + 1);
  }
  // One good record in an epoch: no error (ListIsBoundedAndSaysSo reads such an epoch).
  loader.reset();
  std::filesystem::remove_all(root);
}

// The record CRC catches damage that still decodes (here: the label field).
TEST_F(LoaderCorruptTest, VerifyCrcCatchesSilentDamage) {
  std::string v = testing::ReadRecord(path_, 3);
  v[16] = 7;  // label -1 -> a plausible class id
  testing::OverwriteRecord(path_, 3, v);
  LoaderOptions o;
  o.sampler.shuffle = false;
  auto fast = Open(o);
  Batch b;
  ASSERT_TRUE(fast->Next(&b).ok());
  EXPECT_NE(b.labels()[3], -1) << "without CRC checks the damage goes through (documented)";
  o.dataset.verify_crc = true;
  auto checked = Open(o);
  Status s = checked->Next(&b);
  EXPECT_EQ(s.code(), Status::Code::kCorruption);
  EXPECT_NE(s.message().find(KeyName(3)), std::string::npos) << s.ToString();
  EXPECT_EQ(s.key(), KeyName(3)) << "the key apart from the text (Python: CorruptRecord.key)";
}

TEST_F(LoaderCorruptTest, PlainLmdbFromPythonLoads) {
  const std::string plain = root_ + "/plain.lmdb";
  const std::string cmd = std::string("/usr/bin/python3 ") + DSPIPE_SOURCE_DIR +
                          "/bench/make_plain_lmdb.py " + root_ + "/src " + plain + " >/dev/null";
  ASSERT_EQ(std::system(cmd.c_str()), 0) << cmd;
  std::unique_ptr<Loader> loader;
  LoaderOptions o;
  o.batch_size = 4;
  o.threads = 2;
  o.sampler.shuffle = false;
  o.normalize = NormalizeMode::kCpuFloat32;
  Status s = Loader::Open(plain, o, &loader);
  EXPECT_EQ(s.code(), Status::Code::kInvalidArgument) << "no manifest statistics";
  EXPECT_NE(s.message().find("mean"), std::string::npos) << s.ToString();
  o.mean = {127.5};
  o.std = {127.5};
  ASSERT_TRUE(Loader::Open(plain, o, &loader).ok());
  EXPECT_FALSE(loader->shape().masks);
  EXPECT_EQ(loader->shape().height, kH);
  EXPECT_EQ(loader->shape().width, kW);
  uint64_t next = 0;
  for (const auto& b : testing::RunEpochs(loader.get(), 0, 1)) {
    for (size_t i = 0; i < b.indices.size(); ++i, ++next) {
      ASSERT_EQ(b.indices[i], next);
      const cv::Mat want = testing::GenImage(static_cast<int>(next), kH, kW);
      const size_t n = static_cast<size_t>(kH) * kW * 3;
      ASSERT_EQ(0, std::memcmp(b.images.data() + i * n, want.data, n)) << "record " << next;
      EXPECT_NEAR(b.normalized[i * n], (want.data[0] - 127.5) / 127.5, 1e-6);
    }
  }
  EXPECT_EQ(next, static_cast<uint64_t>(kCount));
}

// Issue 35: a plain LMDB of 16-bit PNGs is refused at open (the decoder would keep the high
// byte), with the build option that reduces them knowingly.
TEST_F(LoaderCorruptTest, PlainLmdbOf16BitImagesIsRefusedAtOpen) {
  cv::Mat g16(kH, kW, CV_16UC1, cv::Scalar(803));
  std::vector<uint8_t> png;
  ASSERT_TRUE(cv::imencode(".png", g16, png));
  const std::string bytes(png.begin(), png.end());
  const std::string plain = root_ + "/deep.lmdb";
  testing::WritePlainLmdb(plain, {{"slice-000", bytes}, {"slice-001", bytes}});
  LoaderOptions o;
  o.batch_size = 2;
  o.mean = {803};
  o.std = {100};
  std::unique_ptr<Loader> loader;
  Status s = Loader::Open(plain, o, &loader);
  ASSERT_EQ(s.code(), Status::Code::kBadInput) << s.ToString();
  EXPECT_NE(s.message().find("loader: key slice-000 in " + plain + ": a 16-bit image"),
            std::string::npos)
      << s.ToString();
  EXPECT_NE(s.message().find("BuildOptions::depth = 8"), std::string::npos) << s.ToString();
}

TEST_F(LoaderCorruptTest, UseAfterForkIsAnErrorNotAHang) {
  LoaderOptions o;
  auto loader = Open(o);
  Batch b;
  ASSERT_TRUE(loader->Next(&b).ok());  // workers running, batches in flight
  const pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    alarm(20);
    Status s = loader->Next(&b);
    const bool named = s.message().find("fork") != std::string::npos;
    loader.reset();
    _exit(s.code() == Status::Code::kUnsupported && named ? 0 : 1);
  }
  int status = 0;
  ASSERT_EQ(waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(WIFEXITED(status)) << "child died from signal " << WTERMSIG(status);
  EXPECT_EQ(WEXITSTATUS(status), 0);
  ASSERT_TRUE(loader->Next(&b).ok());  // the parent is unaffected
}

// A dataset whose reads of some records fail with an I/O error (a streamed shard fetch refused,
// a network file system's EIO) the first `failures` times each, as a flaky proxy does.
class FlakyDataset : public Dataset {
 public:
  FlakyDataset(std::shared_ptr<const Dataset> inner, std::set<uint64_t> flaky, int failures)
      : inner_(std::move(inner)), flaky_(std::move(flaky)), failures_(failures) {}
  const DatasetInfo& info() const override { return inner_->info(); }
  std::string KeyName(uint64_t i) const override { return inner_->KeyName(i); }
  Status Read(uint64_t i, const std::function<Status(const RecordView&)>& fn) const override {
    if (flaky_.count(i)) {
      std::lock_guard<std::mutex> l(mu_);
      if (failed_[i] < failures_) {
        ++failed_[i];
        return Status::IOError("GET shard of key " + KeyName(i) + ": HTTP 403 (flaky proxy)");
      }
    }
    return inner_->Read(i, fn);
  }

 private:
  std::shared_ptr<const Dataset> inner_;
  std::set<uint64_t> flaky_;
  int failures_;
  mutable std::mutex mu_;
  mutable std::map<uint64_t, int> failed_;
};

// Issue 39 item 5: an I/O error used to be returned after its batch was passed, so the next
// call went on without it (60 of 64 delivered) and a checkpoint skipped it too.
TEST_F(LoaderCorruptTest, AnIOErrorMovesNothingAndTheNextCallLoadsTheBatchAgain) {
  for (int threads : {1, 2}) {
    SCOPED_TRACE("threads " + std::to_string(threads));
    std::unique_ptr<Dataset> inner;
    ASSERT_TRUE(Dataset::Open(path_, DatasetOpenOptions{}, &inner).ok());
    auto flaky = std::make_shared<FlakyDataset>(std::shared_ptr<const Dataset>(std::move(inner)),
                                                std::set<uint64_t>{5, 6}, 2);
    LoaderOptions o;
    o.batch_size = 4;
    o.threads = threads;
    o.prefetch = 3;
    std::unique_ptr<Loader> loader;
    ASSERT_TRUE(Loader::Create(flaky, o, &loader).ok());
    std::multiset<uint64_t> delivered;
    int errors = 0;
    Batch b;
    for (int calls = 0; calls < 20; ++calls) {
      const uint64_t before = loader->state().position;
      const Status s = loader->Next(&b);
      if (!s.ok()) {
        ++errors;
        EXPECT_EQ(s.code(), Status::Code::kIOError) << s.ToString();
        EXPECT_NE(s.ToString().find("HTTP 403"), std::string::npos) << s.ToString();
        EXPECT_EQ(loader->state().position, before) << "an error moved the position";
        EXPECT_EQ(loader->epoch(), 0u);
        continue;
      }
      if (!b) break;
      for (int i = 0; i < b.size(); ++i) delivered.insert(b.indices()[i]);
    }
    EXPECT_EQ(errors, 2);  // each flaky record fails twice; both sit in one batch
    std::multiset<uint64_t> all;
    for (uint64_t i = 0; i < kCount; ++i) all.insert(i);
    EXPECT_EQ(delivered, all) << "every sample exactly once";
  }
}

TEST_F(LoaderCorruptTest, ACheckpointTakenAfterAnIOErrorResumesWithTheFailedBatch) {
  std::unique_ptr<Dataset> inner;
  ASSERT_TRUE(Dataset::Open(path_, DatasetOpenOptions{}, &inner).ok());
  auto flaky = std::make_shared<FlakyDataset>(std::shared_ptr<const Dataset>(std::move(inner)),
                                              std::set<uint64_t>{5}, 1000);
  LoaderOptions o;
  o.batch_size = 4;
  o.threads = 2;
  o.sampler.shuffle = true;
  o.sampler.seed = 3;
  std::unique_ptr<Loader> loader;
  ASSERT_TRUE(Loader::Create(flaky, o, &loader).ok());
  std::set<uint64_t> delivered;
  Batch b;
  Status s;
  while ((s = loader->Next(&b)).ok() && b) {
    for (int i = 0; i < b.size(); ++i) delivered.insert(b.indices()[i]);
  }
  ASSERT_EQ(s.code(), Status::Code::kIOError) << s.ToString();
  EXPECT_EQ(loader->Next(&b).code(), Status::Code::kIOError) << "the loader stays at the batch";
  const LoaderState state = loader->state();
  // Resumed over the same data, healthy now: the rest of the epoch, the failed batch first.
  std::unique_ptr<Loader> resumed = Open(o);
  ASSERT_TRUE(resumed->Restore(state).ok());
  while (true) {
    ASSERT_TRUE(resumed->Next(&b).ok());
    if (!b) break;
    EXPECT_EQ(b.epoch(), 0u);
    for (int i = 0; i < b.size(); ++i) {
      EXPECT_TRUE(delivered.insert(b.indices()[i]).second) << "delivered twice: " << b.indices()[i];
    }
  }
  EXPECT_EQ(delivered.size(), static_cast<size_t>(kCount));
}

}  // namespace
}  // namespace dspipe
