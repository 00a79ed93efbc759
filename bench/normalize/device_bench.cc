// SPDX-License-Identifier: Apache-2.0
// device_bench: end-to-end images/s of DeviceLoader, GPU path vs CPU path, on a synth dataset.
//
//   device_bench [--dir DIR] [--count N] [--size PX] [--batch B] [--threads T] [--epochs E]
//
// Makes N synthetic PX x PX RGB PNG images + PNG masks in DIR (reused when present) and builds
// them into DIR/synth.lmdb, then for each path runs one warm-up epoch and E timed epochs of
// batch B, T loader threads, hflip 0.5, float32 + int64 masks:
//   gpu  pinned batches, H2D + fused normalize/mirror/mask kernels on the GPU (device 0)
//   cpu  the loader's workers normalize (NormalizeMode::kCpuFloat32), host pointers
// The consumer does no work of its own: it waits until each batch is ready (WaitReady) and
// releases it, so the figure is the pipeline's own rate. Prints images/s, the stage table and
// the bottleneck verdict of each path. Without a GPU the gpu row says why and is skipped.
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>

#include "dspipe/convert.h"
#include "dspipe/cuda.h"
#include "dspipe/device_loader.h"
#include "dspipe/stats.h"
#include "dspipe/synth.h"

namespace {

using namespace dspipe;
namespace fs = std::filesystem;

struct Args {
  std::string dir = "/tmp/dspipe-device-bench";
  int count = 256;
  int size = 512;
  int batch = 16;
  int threads = 0;  // 0 = usable CPUs
  int epochs = 2;
};

[[noreturn]] void Die(const Status& s) {
  std::fprintf(stderr, "device_bench: %s\n", s.ToString().c_str());
  std::exit(1);
}

Args Parse(int argc, char** argv) {
  Args a;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string k = argv[i], v = argv[i + 1];
    if (k == "--dir")
      a.dir = v;
    else if (k == "--count")
      a.count = std::atoi(v.c_str());
    else if (k == "--size")
      a.size = std::atoi(v.c_str());
    else if (k == "--batch")
      a.batch = std::atoi(v.c_str());
    else if (k == "--threads")
      a.threads = std::atoi(v.c_str());
    else if (k == "--epochs")
      a.epochs = std::atoi(v.c_str());
    else
      Die(Status::InvalidArgument("unknown option " + k));
  }
  if ((argc - 1) % 2 != 0) Die(Status::InvalidArgument("options take one value each"));
  return a;
}

std::string MakeDataset(const Args& a) {
  const fs::path lmdb = fs::path(a.dir) / "synth.lmdb";
  const fs::path stamp =
      fs::path(a.dir) / ("done-" + std::to_string(a.count) + "-" + std::to_string(a.size));
  if (fs::exists(stamp)) return lmdb.string();
  SynthOptions so;
  so.out_dir = (fs::path(a.dir) / "src").string();
  so.count = a.count;
  so.width = so.height = a.size;
  so.classes = 4;
  if (Status s = Synthesize(so); !s.ok()) Die(s);
  BuildOptions bo;
  bo.source = so.out_dir;
  bo.output = lmdb.string();
  bo.overwrite = true;
  bo.sync = false;
  BuildResult r;
  if (Status s = BuildDataset(bo, &r); !s.ok()) Die(s);
  std::FILE* f = std::fopen(stamp.c_str(), "w");
  if (f != nullptr) std::fclose(f);
  return lmdb.string();
}

// Runs one path; returns images/s over the timed epochs (0 when the path is unavailable).
double Run(const std::string& path, const Args& a, int device, const char* name) {
  LoaderOptions lo;
  lo.batch_size = a.batch;
  lo.threads = a.threads;
  lo.prefetch = 4;
  lo.augment.hflip = 0.5;
  DeviceOptions d;
  d.device = device;
  std::unique_ptr<DeviceLoader> loader;
  if (Status s = DeviceLoader::Open(path, lo, d, &loader); !s.ok()) {
    std::printf("%-4s path: unavailable: %s\n", name, s.ToString().c_str());
    return 0;
  }
  TensorBatch b;
  auto epoch = [&](uint64_t e) {
    loader->set_epoch(e);
    uint64_t images = 0;
    while (true) {
      if (Status s = loader->Next(&b); !s.ok()) Die(s);
      if (!b) break;
      if (Status s = b.WaitReady(); !s.ok()) Die(s);
      images += static_cast<uint64_t>(b.size());
      if (Status s = b.Release(); !s.ok()) Die(s);
    }
    return images;
  };
  epoch(0);  // warm-up: page cache, pools, device buffers, CUDA context
  loader->stats().Reset();
  const uint64_t t0 = NowNs();
  uint64_t images = 0;
  for (int e = 1; e <= a.epochs; ++e) images += epoch(static_cast<uint64_t>(e));
  const double secs = static_cast<double>(NowNs() - t0) / 1e9;
  const double rate = static_cast<double>(images) / secs;
  std::printf("%-4s path: %.0f images/s (%llu images in %.2f s, %d threads, batch %d)\n", name,
              rate, static_cast<unsigned long long>(images), secs,
              loader->loader().options().threads, a.batch);
  std::printf("%s", FormatTable(loader->stats().Summaries(), a.batch).c_str());
  std::printf("verdict: %s\n\n",
              Diagnose(loader->stats(), loader->loader_shape(), 0).headline.c_str());
  return rate;
}

}  // namespace

int main(int argc, char** argv) {
  const Args a = Parse(argc, argv);
  const std::string path = MakeDataset(a);
  std::printf("dataset: %s (%d images %dx%d PNG + mask)\n", path.c_str(), a.count, a.size, a.size);
  std::string why;
  double gpu = 0;
  if (CudaAvailable(&why)) {
    gpu = Run(path, a, 0, "gpu");
  } else {
    std::printf("gpu  path: skipped: %s\n", why.c_str());
  }
  const double cpu = Run(path, a, DeviceOptions::kCpu, "cpu");
  if (gpu > 0 && cpu > 0) std::printf("end-to-end GPU path / CPU path: %.2fx\n", gpu / cpu);
  const char* require = std::getenv("DSPIPE_REQUIRE_GPU");
  return (require != nullptr && *require != '\0' && gpu <= 0) ? 1 : 0;
}
