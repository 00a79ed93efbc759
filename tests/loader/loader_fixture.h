// SPDX-License-Identifier: Apache-2.0
// Test datasets for the loader: images whose pixels are a known function of the index, masks
// derived from the pixels (1 where channel 0 > 127), built into real dspipe LMDBs.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <opencv2/core.hpp>
#include <string>
#include <utility>
#include <vector>

#include "dspipe/batch.h"
#include "dspipe/convert.h"
#include "dspipe/loader.h"
#include "dspipe/status.h"

namespace dspipe::testing {

// RGB image for sample i: two-level channel 0 (20 / 230) with index-dependent blobs.
cv::Mat GenImage(int i, int h, int w);
// 1 where channel 0 > 127, else 0 (CV_8UC1).
cv::Mat MaskOf(const cv::Mat& rgb);

// A fresh empty directory under the build tree (or $TMPDIR), named after `name` and the pid.
std::string FreshDir(const std::string& name);
// Writes dir/images/%06d.png (+ dir/masks/%06d.png) for i < n.
void WriteSourceTree(const std::string& dir, int n, int h, int w, bool masks);
// Builds src into out (asserting success) and returns out.
std::string Build(const std::string& src, const std::string& out, StoreMode store, int shards);
// A fixture giving each test a fresh directory root_ (FreshDir, named after the test) holding a
// source tree of n samples h x w with masks (WriteSourceTree) built into path_ =
// root_/data.lmdb (--store encoded, one shard); root_ is removed after the test.
class EncodedLmdbTest : public ::testing::Test {
 protected:
  EncodedLmdbTest(int n, int h, int w) : n_(n), h_(h), w_(w) {}
  void SetUp() override;
  void TearDown() override;

  std::string root_, path_;

 private:
  const int n_, h_, w_;
};

// Writes a plain LMDB (the main database: key -> value, as Python's lmdb writes one) at dir.
void WritePlainLmdb(const std::string& dir,
                    const std::vector<std::pair<std::string, std::string>>& entries);
// Replaces the value of record `index` in a dspipe LMDB (for corruption tests).
void OverwriteRecord(const std::string& lmdb_dir, uint64_t index, const std::string& value);
std::string ReadRecord(const std::string& lmdb_dir, uint64_t index);

// A deep copy of a batch, for comparisons after the batch is released.
struct BatchCopy {
  uint64_t epoch = 0, number = 0;
  std::vector<uint8_t> images, masks, hflip;
  std::vector<float> normalized;
  std::vector<int32_t> labels;
  std::vector<uint64_t> indices;
  bool operator==(const BatchCopy&) const = default;
};
BatchCopy Copy(const Batch& b);
// Runs the loader through `epochs` epochs (set_epoch each) and copies every batch.
std::vector<BatchCopy> RunEpochs(Loader* loader, uint64_t first_epoch, int epochs);

}  // namespace dspipe::testing
