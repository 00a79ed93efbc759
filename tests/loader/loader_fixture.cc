// SPDX-License-Identifier: Apache-2.0
#include "loader/loader_fixture.h"

#include <gtest/gtest.h>
#include <lmdb.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <opencv2/imgcodecs.hpp>
#include <opencv2/imgproc.hpp>

#include "dspipe/format.h"

namespace dspipe::testing {

namespace fs = std::filesystem;

cv::Mat GenImage(int i, int h, int w) {
  cv::Mat img(h, w, CV_8UC3);
  const int cx = (i * 37) % w, cy = (i * 23) % h, r = 4 + (i * 7) % (std::min(h, w) / 2);
  for (int y = 0; y < h; ++y) {
    for (int x = 0; x < w; ++x) {
      const bool in_blob = (x - cx) * (x - cx) + (y - cy) * (y - cy) < r * r;
      const bool in_bar = x < w / 3 && ((y / 6 + i) % 3 == 0);
      auto& px = img.at<cv::Vec3b>(y, x);
      px[0] = (in_blob || in_bar) ? 230 : 20;
      px[1] = static_cast<uint8_t>((x * 255 / w + i * 11) % 256);
      px[2] = static_cast<uint8_t>((y * 255 / h + i * 5) % 256);
    }
  }
  return img;
}

cv::Mat MaskOf(const cv::Mat& rgb) {
  cv::Mat ch0, m;
  cv::extractChannel(rgb, ch0, 0);
  cv::threshold(ch0, m, 127, 1, cv::THRESH_BINARY);
  return m;
}

void EncodedLmdbTest::SetUp() {
  root_ = FreshDir(::testing::UnitTest::GetInstance()->current_test_info()->name());
  WriteSourceTree(root_ + "/src", n_, h_, w_, /*masks=*/true);
  path_ = Build(root_ + "/src", root_ + "/data.lmdb", StoreMode::kEncoded, 1);
}

void EncodedLmdbTest::TearDown() { std::filesystem::remove_all(root_); }

std::string FreshDir(const std::string& name) {
  const fs::path dir =
      fs::path(DSPIPE_BINARY_DIR) / "test-tmp" / (name + "-" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  return dir.string();
}

void WriteSourceTree(const std::string& dir, int n, int h, int w, bool masks) {
  fs::create_directories(fs::path(dir) / "images");
  if (masks) fs::create_directories(fs::path(dir) / "masks");
  for (int i = 0; i < n; ++i) {
    char name[32];
    std::snprintf(name, sizeof(name), "%06d.png", i);
    const cv::Mat rgb = GenImage(i, h, w);
    cv::Mat bgr;
    cv::cvtColor(rgb, bgr, cv::COLOR_RGB2BGR);
    ASSERT_TRUE(cv::imwrite((fs::path(dir) / "images" / name).string(), bgr));
    if (masks) {
      ASSERT_TRUE(cv::imwrite((fs::path(dir) / "masks" / name).string(), MaskOf(rgb)));
    }
  }
}

std::string Build(const std::string& src, const std::string& out, StoreMode store, int shards) {
  BuildOptions o;
  o.source = src;
  o.output = out;
  o.store = store;
  o.shards = shards;
  // One thread: the builder's oneTBB pipeline synchronizes inside the uninstrumented libtbb,
  // which ThreadSanitizer reports as races; the datasets here are tiny anyway.
  o.threads = 1;
  o.overwrite = true;
  BuildResult r;
  Status s = BuildDataset(o, &r);
  EXPECT_TRUE(s.ok()) << s.ToString();
  return out;
}

namespace {
struct Txn {
  MDB_env* env = nullptr;
  MDB_txn* txn = nullptr;
  MDB_dbi dbi = 0;
  Txn(const std::string& dir, bool write) {
    EXPECT_EQ(mdb_env_create(&env), 0);
    mdb_env_set_maxdbs(env, 8);
    EXPECT_EQ(mdb_env_open(env, dir.c_str(), write ? 0 : MDB_RDONLY, 0644), 0) << dir;
    EXPECT_EQ(mdb_txn_begin(env, nullptr, write ? 0 : MDB_RDONLY, &txn), 0);
    EXPECT_EQ(mdb_dbi_open(txn, kRecordsDb, 0, &dbi), 0);
  }
  ~Txn() {
    if (txn) mdb_txn_abort(txn);
    mdb_env_close(env);
  }
};
}  // namespace

void WritePlainLmdb(const std::string& dir,
                    const std::vector<std::pair<std::string, std::string>>& entries) {
  std::filesystem::create_directories(dir);
  MDB_env* env = nullptr;
  ASSERT_EQ(mdb_env_create(&env), 0);
  ASSERT_EQ(mdb_env_set_mapsize(env, size_t{64} << 20), 0);
  ASSERT_EQ(mdb_env_open(env, dir.c_str(), 0, 0644), 0) << dir;
  MDB_txn* txn = nullptr;
  ASSERT_EQ(mdb_txn_begin(env, nullptr, 0, &txn), 0);
  MDB_dbi dbi = 0;
  ASSERT_EQ(mdb_dbi_open(txn, nullptr, 0, &dbi), 0);
  for (const auto& [key, value] : entries) {
    MDB_val k{key.size(), const_cast<char*>(key.data())};
    MDB_val v{value.size(), const_cast<char*>(value.data())};
    ASSERT_EQ(mdb_put(txn, dbi, &k, &v, 0), 0);
  }
  ASSERT_EQ(mdb_txn_commit(txn), 0);
  mdb_env_close(env);
}

void OverwriteRecord(const std::string& lmdb_dir, uint64_t index, const std::string& value) {
  Txn t(lmdb_dir, true);
  uint8_t kb[kKeySize];
  EncodeKey(index, kb);
  MDB_val k{kKeySize, kb}, v{value.size(), const_cast<char*>(value.data())};
  ASSERT_EQ(mdb_put(t.txn, t.dbi, &k, &v, 0), 0);
  ASSERT_EQ(mdb_txn_commit(t.txn), 0);
  t.txn = nullptr;
}

std::string ReadRecord(const std::string& lmdb_dir, uint64_t index) {
  Txn t(lmdb_dir, false);
  uint8_t kb[kKeySize];
  EncodeKey(index, kb);
  MDB_val k{kKeySize, kb}, v;
  EXPECT_EQ(mdb_get(t.txn, t.dbi, &k, &v), 0);
  return std::string(static_cast<const char*>(v.mv_data), v.mv_size);
}

BatchCopy Copy(const Batch& b) {
  BatchCopy c;
  const auto n = static_cast<size_t>(b.size());
  const BatchShape& s = b.shape();
  c.epoch = b.epoch();
  c.number = b.number();
  c.images.assign(b.images(), b.images() + n * s.image_bytes());
  if (b.masks()) c.masks.assign(b.masks(), b.masks() + n * s.mask_bytes());
  if (b.normalized()) {
    c.normalized.assign(b.normalized(), b.normalized() + n * s.normalized_floats());
  }
  c.labels.assign(b.labels(), b.labels() + n);
  c.indices.assign(b.indices(), b.indices() + n);
  c.hflip.assign(b.hflip(), b.hflip() + n);
  return c;
}

std::vector<BatchCopy> RunEpochs(Loader* loader, uint64_t first_epoch, int epochs) {
  std::vector<BatchCopy> out;
  for (int e = 0; e < epochs; ++e) {
    loader->set_epoch(first_epoch + static_cast<uint64_t>(e));
    Batch batch;
    while (true) {
      Status s = loader->Next(&batch);
      EXPECT_TRUE(s.ok()) << s.ToString();
      if (!s.ok() || !batch) break;
      out.push_back(Copy(batch));
    }
  }
  return out;
}

}  // namespace dspipe::testing

// ThreadSanitizer hook (unused in other builds). The reports suppressed here are inside code
// dspipe does not own and TSan cannot see synchronize:
//  - OpenCV's codec registry initializes GDAL, whose mutexes TSan reports as a lock-order
//    inversion inside libgdal;
//  - oneTBB recycles task objects through its small-object pool, synchronized inside the
//    uninstrumented libtbb: a task's finalize() and the construction of a later task in the
//    same memory look like a race. The patterns name only those two TBB functions (new_object,
//    finalize), which never have dspipe code above them on the stack, so races in dspipe code are
//    still reported.
extern "C" const char* __tsan_default_suppressions() {
  return "deadlock:libgdal.so\n"
         "race:new_object\n"
         "race:finalize\n"
         "called_from_lib:libtbb.so.12\n";
}
