// SPDX-License-Identifier: Apache-2.0
// A small synth dataset shared by the profile tests: 24 samples of 64x64 RGB PNG + PNG mask as a
// folder (images/, masks/) and as the LMDB dsconvert builds from it. Made once per process.
#pragma once

#include <string>

namespace dspipe::profile::testing {

struct TestDataset {
  std::string dir;     // temp root, removed at exit
  std::string folder;  // dir/src: images/ + masks/
  std::string lmdb;    // dir/db.lmdb
};
// Creates it on first use (ASSERTs inside on failure). Thread-compatible (tests run serially).
const TestDataset& SmallDataset();
// The same 24 samples as a sharded dataset of 3 shards of 8 (dsconvert build --shards 3), at
// SmallDataset().dir + "/sharded". Made on first use (only the tests that need it pay for it).
const std::string& ShardedDataset();

}  // namespace dspipe::profile::testing
