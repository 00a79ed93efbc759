// SPDX-License-Identifier: Apache-2.0
#include "device/device_fixture.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <bit>
#include <cstring>
#include <filesystem>

#include "dspipe/convert.h"
#include "dspipe/synth.h"

namespace dspipe::testing {

namespace fs = std::filesystem;

const std::string& SynthDataset() {
  static const std::string path = [] {
    const fs::path root =
        fs::path(DSPIPE_BINARY_DIR) / "test-tmp" / ("device-" + std::to_string(::getpid()));
    fs::remove_all(root);
    SynthOptions so;
    so.out_dir = (root / "src").string();
    so.count = 13;
    so.width = 64;
    so.height = 48;
    so.classes = 3;
    so.seed = 5;
    so.threads = 1;
    Status s = Synthesize(so);
    EXPECT_TRUE(s.ok()) << s.ToString();
    BuildOptions bo;
    bo.source = so.out_dir;
    bo.output = (root / "synth.lmdb").string();
    bo.threads = 1;
    bo.sync = false;
    BuildResult r;
    s = BuildDataset(bo, &r);
    EXPECT_TRUE(s.ok()) << s.ToString();
    EXPECT_EQ(r.records, 13u);
    return bo.output;
  }();
  return path;
}

LoaderOptions TestLoaderOptions() {
  LoaderOptions o;
  o.batch_size = 4;
  o.threads = 2;
  o.sampler.seed = 7;
  o.augment.hflip = 0.5;
  o.augment.vflip = 0.5;
  return o;
}

std::vector<HostBatchCopy> ReferenceEpoch(const LoaderOptions& options, uint64_t epoch) {
  LoaderOptions o = options;
  o.normalize = NormalizeMode::kCpuFloat32;
  std::unique_ptr<Loader> loader;
  Status s = Loader::Open(SynthDataset(), o, &loader);
  EXPECT_TRUE(s.ok()) << s.ToString();
  std::vector<HostBatchCopy> out;
  if (!s.ok()) return out;
  loader->set_epoch(epoch);
  Batch b;
  while (true) {
    s = loader->Next(&b);
    EXPECT_TRUE(s.ok()) << s.ToString();
    if (!s.ok() || !b) break;
    const auto n = static_cast<size_t>(b.size());
    HostBatchCopy c;
    c.images.assign(b.normalized(), b.normalized() + n * b.shape().normalized_floats());
    if (b.masks() != nullptr) c.masks.assign(b.masks(), b.masks() + n * b.shape().mask_bytes());
    c.labels.assign(b.labels(), b.labels() + n);
    c.indices.assign(b.indices(), b.indices() + n);
    c.hflip.assign(b.hflip(), b.hflip() + n);
    out.push_back(std::move(c));
  }
  return out;
}

int64_t UlpDistance(float a, float b) {
  auto ordered = [](float f) {
    const auto i = std::bit_cast<int32_t>(f);
    return i < 0 ? int64_t{INT32_MIN} - i : int64_t{i};
  };
  const int64_t d = ordered(a) - ordered(b);
  return d < 0 ? -d : d;
}

}  // namespace dspipe::testing
