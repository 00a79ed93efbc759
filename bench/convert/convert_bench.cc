// SPDX-License-Identifier: Apache-2.0
// Side-by-side benchmark for `dsconvert build` (issue: encoded must be bound by reading the
// source files; raw is bound by decoding).
//
//   convert_bench [--count N] [--size HxW] [--repeats R] [--dir D] [--warm]
//
// For each repeat, in one run: (a) a plain sequential read of every source file, (b) `build
// --store encoded`, (c) `build --store raw` with 1 and 2 threads. Before each timed step the
// source files' cached pages are dropped (posix_fadvise DONTNEED) unless --warm, so (a) and (b)
// both read from disk. Prints the median and the min..max spread of each rate and of the ratios.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

#include "../series.h"
#include "core/files.h"
#include "dspipe/convert.h"
#include "dspipe/synth.h"
#include "size_arg.h"

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

namespace {

void Print(const char* name, const Series& s, const char* unit) {
  std::printf("  %-34s median %8.3f %s   (min %.3f, max %.3f, n=%zu)\n", name, s.Median(), unit,
              s.Min(), s.Max(), s.v.size());
}

void Check(const dspipe::Status& s) {
  if (!s.ok()) {
    std::fprintf(stderr, "convert_bench: %s\n", s.ToString().c_str());
    std::exit(1);
  }
}

}  // namespace

int main(int argc, char** argv) {
  int count = 400, w = 512, h = 512, repeats = 5;
  bool warm = false;
  std::string dir = "/tmp/dspipe_convert_bench";
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto next = [&] { return i + 1 < argc ? std::string(argv[++i]) : std::string(); };
    if (a == "--count") count = std::stoi(next());
    else if (a == "--size") {
      const std::string v = next();
      if (!dspipe::cli::ParseHeightWidth(v, &h, &w)) {  // height first, as every tool reads it
        std::fprintf(stderr, "--size must be HxW (e.g. 512x384), got '%s'\n", v.c_str());
        return 2;
      }
    } else if (a == "--repeats")
      repeats = std::stoi(next());
    else if (a == "--dir") dir = next();
    else if (a == "--warm") warm = true;
    else { std::fprintf(stderr, "unknown flag %s\n", a.c_str()); return 2; }
  }
  const std::string src = dir + "/src";
  if (!fs::exists(src + "/images")) {
    dspipe::SynthOptions so;
    so.out_dir = src;
    so.count = count;
    so.width = w;
    so.height = h;
    so.seed = 1;
    so.classes = 3;
    Check(dspipe::Synthesize(so));
  }
  std::vector<std::string> files;
  for (const char* sub : {"/images", "/masks"}) {
    for (auto& e : fs::directory_iterator(src + sub)) files.push_back(e.path().string());
  }
  std::sort(files.begin(), files.end());
  uint64_t total_bytes = 0;
  for (auto& f : files) total_bytes += fs::file_size(f);
  auto drop = [&] {
    if (warm) return true;
    bool ok = true;
    for (auto& f : files) ok = dspipe::core::DropFileCache(f) && ok;
    return ok;
  };
  std::printf("convert_bench: %d samples %dx%d (HxW), %zu files, %.1f MB, %s cache, %d repeats\n",
              count, h, w, files.size(), total_bytes / 1e6, warm ? "warm" : "cold (dropped)",
              repeats);
  Series read_mbs, enc_mbs, enc_ratio, enc_nosync_ratio, raw1, raw2, raw_scale;
  for (int r = 0; r < repeats; ++r) {
    if (!drop()) std::printf("  note: could not drop the page cache for some files\n");
    auto t0 = Clock::now();
    std::string buf;
    uint64_t n = 0;
    for (auto& f : files) {
      Check(dspipe::core::ReadFile(f, &buf));
      n += buf.size();
    }
    const double read_s = std::chrono::duration<double>(Clock::now() - t0).count();
    read_mbs.v.push_back(n / 1e6 / read_s);

    auto build = [&](dspipe::StoreMode mode, int threads, bool sync = true) {
      dspipe::BuildOptions bo;
      bo.source = src;
      bo.output = dir + "/out.lmdb";
      bo.overwrite = true;
      // Decode the same share of images for mean/std as the default (512) does on a 32k-image
      // dataset (1.6%), so the run measures what a real conversion spends per image.
      bo.stats_sample = std::max(1, count / 64);
      bo.store = mode;
      bo.threads = threads;
      bo.sync = sync;
      dspipe::BuildResult res;
      fs::remove_all(bo.output);
      drop();
      auto t = Clock::now();
      Check(dspipe::BuildDataset(bo, &res));
      return std::chrono::duration<double>(Clock::now() - t).count();
    };
    const double enc_s = build(dspipe::StoreMode::kEncoded, 2);
    enc_mbs.v.push_back(n / 1e6 / enc_s);
    enc_ratio.v.push_back(read_s / enc_s);
    const double enc_ns = build(dspipe::StoreMode::kEncoded, 2, false);
    enc_nosync_ratio.v.push_back(read_s / enc_ns);
    const double r1 = build(dspipe::StoreMode::kRaw, 1);
    const double r2 = build(dspipe::StoreMode::kRaw, 2);
    raw1.v.push_back(count / r1);
    raw2.v.push_back(count / r2);
    raw_scale.v.push_back(r1 / r2);
  }
  Print("plain sequential read", read_mbs, "MB/s");
  Print("build --store encoded (2 threads)", enc_mbs, "MB/s");
  Print("encoded / plain read (ratio)", enc_ratio, "x");
  Print("encoded --no-sync / plain read", enc_nosync_ratio, "x");
  Print("build --store raw --threads 1", raw1, "img/s");
  Print("build --store raw --threads 2", raw2, "img/s");
  Print("raw: 2 threads / 1 thread (ratio)", raw_scale, "x");
  fs::remove_all(dir + "/out.lmdb");
  return 0;
}
