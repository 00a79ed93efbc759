// SPDX-License-Identifier: Apache-2.0
// loader_bench: how close the loader gets to the decode bound, and what raw+zstd buys.
//
//   loader_bench [--dir DIR] [--count N] [--size PX] [--batch B] [--threads T] [--repeats R]
//
// Makes a synth dataset (N images of PX x PX RGB PNG + PNG mask) in DIR (reused when present),
// builds it as an encoded (PNG) and a raw+zstd LMDB, then measures, R times each:
//   bound   single-thread read + decode (image and mask) rate of the same records x T
//   loader  Loader images/s: batch B, T threads, hflip 0.5 + CPU float32 normalize
// and prints the median and spread (min..max) of each, plus the ratios the README quotes:
//   loader / bound (target >= 0.85) and raw loader / PNG loader (target >= 5).
// On a shared machine the process may get fewer cores than threads; it also prints the cores
// it got and a CPU efficiency (loader images per core-second / decode images per CPU-second),
// which stays meaningful under contention.
#include <sys/resource.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

#include "codec/image.h"
#include "dspipe/convert.h"
#include "dspipe/loader.h"
#include "dspipe/stats.h"
#include "dspipe/synth.h"

namespace {

using namespace dspipe;
namespace fs = std::filesystem;

struct Args {
  std::string dir = "/tmp/dspipe-loader-bench";
  int count = 200;
  int size = 512;
  int batch = 8;
  int threads = 2;
  int repeats = 5;
};

void Die(const Status& s) {
  std::fprintf(stderr, "loader_bench: %s\n", s.ToString().c_str());
  std::exit(1);
}
void Check(const Status& s) {
  if (!s.ok()) Die(s);
}

struct Spread {
  double median = 0, min = 0, max = 0;
};
Spread Summarize(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return {n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2, v.front(), v.back()};
}

std::string MakeDatasets(const Args& a, std::string* raw) {
  const std::string src =
      a.dir + "/synth-" + std::to_string(a.size) + "-" + std::to_string(a.count);
  const std::string png = src + "-png.lmdb";
  *raw = src + "-raw.lmdb";
  if (!fs::exists(png + "/data.mdb") || !fs::exists(*raw + "/data.mdb")) {
    SynthOptions so;
    so.out_dir = src;
    so.count = a.count;
    so.width = so.height = a.size;
    so.classes = 4;
    std::fprintf(stderr, "making %d synthetic %dx%d samples in %s\n", a.count, a.size, a.size,
                 src.c_str());
    Check(Synthesize(so));
    for (auto [out, store] : {std::pair{png, StoreMode::kEncoded}, {*raw, StoreMode::kRaw}}) {
      BuildOptions bo;
      bo.source = src;
      bo.output = out;
      bo.store = store;
      bo.overwrite = true;
      BuildResult r;
      Check(BuildDataset(bo, &r));
    }
  }
  return png;
}

double CpuSeconds() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return static_cast<double>(u.ru_utime.tv_sec + u.ru_stime.tv_sec) +
         static_cast<double>(u.ru_utime.tv_usec + u.ru_stime.tv_usec) * 1e-6;
}

// Single-thread read + decode of every record (image and mask), images/s.
double DecodeRate(const Dataset& ds, double* per_cpu_second = nullptr) {
  const DatasetInfo& info = ds.info();
  std::vector<uint8_t> image(static_cast<size_t>(info.height) * info.width * info.channels);
  std::vector<uint8_t> mask(static_cast<size_t>(info.height) * info.width);
  const double cpu0 = CpuSeconds();
  const uint64_t t0 = NowNs();
  for (uint64_t i = 0; i < ds.size(); ++i) {
    Check(ds.Read(i, [&](const RecordView& r) {
      const int h = static_cast<int>(r.header.height), w = static_cast<int>(r.header.width);
      DSPIPE_RETURN_IF_ERROR(codec::DecodePayloadInto(r.header.image_codec, r.image, info.channels,
                                                      h, w, image.data()));
      if (r.mask.empty()) return Status::OK();
      return codec::DecodePayloadInto(r.header.mask_codec, r.mask, 1, h, w, mask.data());
    }));
  }
  const auto images = static_cast<double>(ds.size());
  const double rate = images * 1e9 / static_cast<double>(NowNs() - t0);
  if (per_cpu_second) *per_cpu_second = images / std::max(1e-9, CpuSeconds() - cpu0);
  return rate;
}

// One epoch through the loader, images/s; *cores = CPU time / wall time (how many cores the
// process really got: on a shared machine less than the thread count). Prints the stage table
// of the last repeat.
double LoaderRate(Loader* loader, uint64_t epoch, bool print, double* cores) {
  loader->stats().Reset();
  loader->set_epoch(epoch);
  Batch b;
  uint64_t images = 0;
  const double cpu0 = CpuSeconds();
  const uint64_t t0 = NowNs();
  while (true) {
    Check(loader->Next(&b));
    if (!b) break;
    images += static_cast<uint64_t>(b.size());
  }
  const uint64_t wall_ns = NowNs() - t0;
  *cores = (CpuSeconds() - cpu0) * 1e9 / static_cast<double>(wall_ns);
  const double rate = static_cast<double>(images) * 1e9 / static_cast<double>(wall_ns);
  if (print) {
    std::printf("%s",
                FormatTable(loader->stats().Summaries(), loader->options().batch_size).c_str());
    std::printf("verdict: %s\n",
                Diagnose(loader->stats(), loader->loader_shape(), 0).headline.c_str());
  }
  return rate;
}

Args Parse(int argc, char** argv) {
  Args a;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string k = argv[i], v = argv[i + 1];
    if (k == "--dir")
      a.dir = v;
    else if (k == "--count")
      a.count = std::stoi(v);
    else if (k == "--size")
      a.size = std::stoi(v);
    else if (k == "--batch")
      a.batch = std::stoi(v);
    else if (k == "--threads")
      a.threads = std::stoi(v);
    else if (k == "--repeats")
      a.repeats = std::stoi(v);
    else
      Die(Status::InvalidArgument("unknown flag " + k));
  }
  return a;
}

}  // namespace

int main(int argc, char** argv) {
  const Args a = Parse(argc, argv);
  std::string raw_path;
  const std::string png_path = MakeDatasets(a, &raw_path);

  LoaderOptions o;
  o.batch_size = a.batch;
  o.threads = a.threads;
  o.augment.hflip = 0.5;
  o.normalize = NormalizeMode::kCpuFloat32;
  std::unique_ptr<Loader> png, raw;
  Check(Loader::Open(png_path, o, &png));
  Check(Loader::Open(raw_path, o, &raw));

  std::vector<double> bound_png, bound_raw, rate_png, rate_raw, cores_png, cores_raw;
  std::vector<double> eff_png, eff_raw;  // loader rate / (1-thread decode per CPU-s x cores got)
  double cores = 0, cpu_png = 0, cpu_raw = 0;
  // Warm-up: page the LMDBs into the page cache, start the worker threads.
  DecodeRate(png->dataset());
  DecodeRate(raw->dataset());
  LoaderRate(png.get(), 0, false, &cores);
  LoaderRate(raw.get(), 0, false, &cores);
  for (int r = 0; r < a.repeats; ++r) {
    const bool last = r + 1 == a.repeats;
    bound_png.push_back(DecodeRate(png->dataset(), &cpu_png) * a.threads);
    if (last) std::printf("\nPNG loader stages (last repeat):\n");
    rate_png.push_back(LoaderRate(png.get(), static_cast<uint64_t>(r + 1), last, &cores));
    cores_png.push_back(cores);
    eff_png.push_back(rate_png.back() / (cpu_png * cores));
    bound_raw.push_back(DecodeRate(raw->dataset(), &cpu_raw) * a.threads);
    if (last) std::printf("\nraw+zstd loader stages (last repeat):\n");
    rate_raw.push_back(LoaderRate(raw.get(), static_cast<uint64_t>(r + 1), last, &cores));
    cores_raw.push_back(cores);
    eff_raw.push_back(rate_raw.back() / (cpu_raw * cores));
  }
  const Spread bp = Summarize(bound_png), br = Summarize(bound_raw);
  const Spread lp = Summarize(rate_png), lr = Summarize(rate_raw);
  std::printf(
      "\n%d x %dx%d RGB + mask, batch %d, %d threads (%d usable CPUs), hflip 0.5 + "
      "normalize, %d repeats: median (min..max) images/s\n",
      a.count, a.size, a.size, a.batch, a.threads, UsableCpus(), a.repeats);
  auto row = [](const char* name, const Spread& s) {
    std::printf("  %-28s %9.1f (%.1f..%.1f)\n", name, s.median, s.min, s.max);
  };
  row("PNG decode bound (1T x T)", bp);
  row("PNG loader", lp);
  row("raw+zstd decode bound", br);
  row("raw+zstd loader", lr);
  std::printf("  cores the process got while loading: PNG %.2f, raw %.2f (median)\n",
              Summarize(cores_png).median, Summarize(cores_raw).median);
  std::printf(
      "  CPU efficiency (loader img/s per core it got / 1-thread decode img per CPU-s):"
      " PNG %.2f, raw %.2f\n",
      Summarize(eff_png).median, Summarize(eff_raw).median);
  std::printf("  PNG loader / decode bound      %.2f  (target >= 0.85)\n", lp.median / bp.median);
  std::printf("  raw loader / raw decode bound  %.2f\n", lr.median / br.median);
  std::printf("  raw+zstd loader / PNG loader   %.2f  (target >= 5)\n", lr.median / lp.median);
  return 0;
}
