// SPDX-License-Identifier: Apache-2.0
#include "test_dataset.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>

namespace dspipe::profile::testing {
namespace {

std::string g_dir;
void RemoveDir() {
  std::error_code ec;
  if (!g_dir.empty()) std::filesystem::remove_all(g_dir, ec);
}

void Run(const std::string& cmd) {
  const int rc = std::system(cmd.c_str());
  if (rc != 0) ADD_FAILURE() << cmd << " exited with " << rc;
}

// Made by the dsconvert binary, in child processes, on purpose: oneTBB fixes its worker-pool
// size at the first TBB use in a process, so building in-process (BuildDataset uses TBB) would
// leave the loaders under test with cores - 1 workers (reported to the loader owner).
TestDataset Make() {
  TestDataset d;
  d.dir = (std::filesystem::temp_directory_path() /
           ("dspipe_profile_test_" + std::to_string(::getpid())))
              .string();
  std::filesystem::remove_all(d.dir);
  g_dir = d.dir;
  std::atexit(RemoveDir);
  d.folder = d.dir + "/src";
  d.lmdb = d.dir + "/db.lmdb";
  // dsconvert is not under test here (tests/convert runs it under the sanitizers); in a TSan
  // build its reports would only fail the fixture.
  const std::string dsconvert = std::string("TSAN_OPTIONS=report_bugs=0 ") + DSCONVERT_PATH;
  Run(dsconvert + " synth " + d.folder +
      " --count 24 --size 64x64 --classes 3 --threads 2 > /dev/null");
  Run(dsconvert + " build " + d.folder + " " + d.lmdb + " --threads 2 --no-sync -q > /dev/null");
  EXPECT_TRUE(std::filesystem::exists(d.lmdb + "/data.mdb"));
  return d;
}

}  // namespace

const TestDataset& SmallDataset() {
  static const TestDataset d = Make();
  return d;
}

const std::string& ShardedDataset() {
  static const std::string sharded = [] {
    const TestDataset& d = SmallDataset();
    const std::string out = d.dir + "/sharded";
    Run(std::string("TSAN_OPTIONS=report_bugs=0 ") + DSCONVERT_PATH + " build " + d.folder + " " +
        out + " --shards 3 --threads 2 --no-sync -q > /dev/null");
    EXPECT_TRUE(std::filesystem::exists(out + "/manifest.json"));
    return out;
  }();
  return sharded;
}

}  // namespace dspipe::profile::testing

// ThreadSanitizer hook (unused in other builds), as in tests/loader/loader_fixture.cc: the
// reports suppressed are inside code dspipe does not own and TSan cannot see synchronize (GDAL's
// mutexes under OpenCV's codec registry; oneTBB's small-object pool recycling task memory).
extern "C" const char* __tsan_default_suppressions() {
  return "deadlock:libgdal.so\n"
         "race:new_object\n"
         "race:finalize\n"
         "called_from_lib:libtbb.so.12\n";
}
