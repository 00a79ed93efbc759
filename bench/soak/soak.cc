// SPDX-License-Identifier: Apache-2.0
// soak: does memory stay flat over many epochs? Runs E epochs (default 50) over a synthetic
// dataset through the Loader and through the DeviceLoader's CPU path (DeviceOptions::kCpu),
// samples the process RSS (/proc/self/statm) after every epoch and reports the growth from the
// end of epoch 1 (pools, thread stacks and allocator arenas are warm by then) to the end of
// the last epoch. Growth of 1 MiB or more is reported as GROWTH and the exit status is 1.
//
//   soak [--dir DIR] [--count N] [--size PX] [--epochs E] [--batch B] [--threads T]
//        [--store encoded|raw] [--path both|loader|device] [--csv FILE]
//
// The dataset (N PX x PX PNG images + masks, built to DIR/<store>.lmdb) is reused when present.
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <string>
#include <vector>

#include "dspipe/convert.h"
#include "dspipe/device_loader.h"
#include "dspipe/loader.h"
#include "dspipe/synth.h"

namespace {

using namespace dspipe;
namespace fs = std::filesystem;

void Check(const Status& s) {
  if (!s.ok()) {
    std::fprintf(stderr, "soak: %s\n", s.ToString().c_str());
    std::exit(2);
  }
}

// Resident set size of this process in bytes.
int64_t RssBytes() {
  std::ifstream f("/proc/self/statm");
  int64_t pages_total = 0, pages_resident = 0;
  f >> pages_total >> pages_resident;
  return pages_resident * ::sysconf(_SC_PAGESIZE);
}

struct Run {
  std::string name;
  std::vector<int64_t> rss;  // after each epoch
  uint64_t samples = 0;
};

// Runs `epochs` epochs; one_epoch(e) consumes epoch e and returns the samples it saw.
Run Soak(const std::string& name, int epochs, const std::function<uint64_t(int)>& one_epoch) {
  Run r{name, {}, 0};
  for (int e = 0; e < epochs; ++e) {
    r.samples += one_epoch(e);
    r.rss.push_back(RssBytes());
    std::printf("%-7s epoch %3d  rss %8.2f MiB\n", name.c_str(), e + 1,
                static_cast<double>(r.rss.back()) / (1 << 20));
    std::fflush(stdout);
  }
  return r;
}

}  // namespace

int main(int argc, char** argv) {
  std::string dir = "/tmp/dspipe-soak", store = "encoded", path = "both", csv;
  int count = 256, size = 128, epochs = 50, batch = 16, threads = 2;
  CLI::App app{"soak: RSS over many epochs through the Loader and the DeviceLoader CPU path"};
  app.add_option("--dir", dir, "work directory (dataset reused when present)")
      ->capture_default_str();
  app.add_option("--count", count, "samples")->capture_default_str()->check(CLI::Range(1, 1 << 20));
  app.add_option("--size", size, "image side in pixels")->capture_default_str()
      ->check(CLI::Range(16, 8192));
  app.add_option("--epochs", epochs, "epochs per path")->capture_default_str()
      ->check(CLI::Range(2, 100000));
  app.add_option("--batch", batch, "batch size")->capture_default_str()->check(CLI::Range(1, 4096));
  app.add_option("--threads", threads, "loader threads")->capture_default_str()
      ->check(CLI::Range(1, 256));
  app.add_option("--store", store, "dataset storage")->capture_default_str()
      ->check(CLI::IsMember({"encoded", "raw"}));
  app.add_option("--path", path, "which loader")->capture_default_str()
      ->check(CLI::IsMember({"both", "loader", "device"}));
  app.add_option("--csv", csv, "also write epoch,path,rss_bytes rows here");
  CLI11_PARSE(app, argc, argv);

  const std::string src = dir + "/src", db = dir + "/" + store + ".lmdb";
  if (!fs::exists(src + "/images")) {
    SynthOptions so;
    so.out_dir = src;
    so.count = count;
    so.width = so.height = size;
    so.classes = 5;
    so.seed = 3;
    Check(Synthesize(so));
  }
  if (!fs::exists(db)) {
    BuildOptions bo;
    bo.source = src;
    bo.output = db;
    bo.store = store == "raw" ? StoreMode::kRaw : StoreMode::kEncoded;
    BuildResult br;
    Check(BuildDataset(bo, &br));
  }
  LoaderOptions lo;
  lo.batch_size = batch;
  lo.threads = threads;
  lo.sampler.shuffle = true;
  lo.augment.hflip = 0.5;
  lo.normalize = NormalizeMode::kCpuFloat32;

  std::vector<Run> runs;
  const int64_t start = RssBytes();
  if (path != "device") {
    std::unique_ptr<Loader> loader;
    Check(Loader::Open(db, lo, &loader));
    Batch b;
    runs.push_back(Soak("loader", epochs, [&](int e) {
      loader->set_epoch(static_cast<uint64_t>(e));
      uint64_t n = 0;
      for (;;) {
        Check(loader->Next(&b));
        if (!b) break;
        n += static_cast<uint64_t>(b.size());
      }
      return n;
    }));
  }
  if (path != "loader") {
    LoaderOptions dlo = lo;
    dlo.normalize = NormalizeMode::kNone;  // the DeviceLoader normalizes itself
    DeviceOptions dev;
    dev.device = DeviceOptions::kCpu;
    std::unique_ptr<DeviceLoader> dl;
    Check(DeviceLoader::Open(db, dlo, dev, &dl));
    TensorBatch t;
    runs.push_back(Soak("device", epochs, [&](int e) {
      dl->set_epoch(static_cast<uint64_t>(e));
      uint64_t n = 0;
      for (;;) {
        Check(dl->Next(&t));
        if (!t) break;
        n += static_cast<uint64_t>(t.size());
      }
      return n;
    }));
  }

  std::FILE* out = csv.empty() ? nullptr : std::fopen(csv.c_str(), "w");
  if (out) std::fprintf(out, "path,epoch,rss_bytes\n");
  bool grew = false;
  std::printf("\nsoak: %d samples %dx%d %s, batch %d, %d threads, %d epochs per path; "
              "rss at start %.2f MiB\n",
              count, size, size, store.c_str(), batch, threads, epochs,
              static_cast<double>(start) / (1 << 20));
  std::printf("%-7s %12s %12s %12s %14s %s\n", "path", "epoch1 MiB", "last MiB", "max MiB",
              "growth KiB", "verdict");
  for (const Run& r : runs) {
    const int64_t first = r.rss.front(), last = r.rss.back();
    const int64_t peak = *std::max_element(r.rss.begin(), r.rss.end());
    const int64_t growth = last - first;
    const bool bad = growth >= (int64_t{1} << 20);
    grew = grew || bad;
    std::printf("%-7s %12.2f %12.2f %12.2f %14.1f %s (%llu samples)\n", r.name.c_str(),
                static_cast<double>(first) / (1 << 20), static_cast<double>(last) / (1 << 20),
                static_cast<double>(peak) / (1 << 20), static_cast<double>(growth) / 1024,
                bad ? "GROWTH >= 1 MiB" : "ok (< 1 MiB)",
                static_cast<unsigned long long>(r.samples));
    if (out) {
      for (size_t e = 0; e < r.rss.size(); ++e) {
        std::fprintf(out, "%s,%zu,%lld\n", r.name.c_str(), e + 1,
                     static_cast<long long>(r.rss[e]));
      }
    }
  }
  if (out) std::fclose(out);
  return grew ? 1 : 0;
}
