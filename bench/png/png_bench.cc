// SPDX-License-Identifier: Apache-2.0
// png_bench: the PNG fast path (lib/codec/png_fast*) against libspng, side by side in one run.
//
//   png_bench [--rounds 7] [--decodes 40] [--dir DIR] [--count 200] [--size 512] [--batch 8]
//             [--threads 2] [--loader-rounds 3] [--skip-loader]
//
// 1. Per core: one thread decodes the same 512x512 PNG --decodes times with libspng, then with
//    the fast path (the order alternates by round), --rounds rounds. Images: "random" (uniform
//    noise, incompressible), "noisy" (a gradient plus noise), "smooth" (a gradient), RGB, and a
//    gray mask; written by OpenCV at its default level 1 (what dsconvert synth/EncodePng write).
//    Prints CPU ms per decode (the thread's CPU time, so other processes sharing the cores do
//    not inflate it; median, min..max over rounds) and the ratio libspng / fast per round.
//    Then the unfiltering alone, per filter type and pixel size: plain loop, SSE2, AVX2.
// 2. The loader over an encoded PNG LMDB (synth dataset, like loader_bench), --loader-rounds
//    rounds, each: libspng (the fast path switched off: SetPngFastPathEnabled(false), as
//    DSPIPE_PNG_DECODER=libspng does), fast unfused (loader::SetFusedDecodeEnabled(false):
//    decode, then flip, then normalize) and fast fused (flip and normalize per row inside the
//    decode), the order rotating by round. Per configuration: the single-thread read + decode
//    (image and mask) rate x threads (the decode bound) and the loader's images/s (batch B,
//    T threads, hflip 0.5, CPU float32 normalize), plus the images per CPU-second (meaningful
//    when other processes share the cores), and per-round ratios.
#include <sys/resource.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <filesystem>
#include <string>
#include <vector>

#include "../cpu_time.h"
#include "codec/image.h"
#include "codec/png_fast.h"
#include "dspipe/convert.h"
#include "dspipe/loader.h"
#include "dspipe/stats.h"
#include "dspipe/synth.h"
#include "loader/sample.h"

namespace {

using namespace dspipe;
namespace fs = std::filesystem;

void Check(const Status& s) {
  if (!s.ok()) {
    std::fprintf(stderr, "png_bench: %s\n", s.ToString().c_str());
    std::exit(1);
  }
}

struct Spread {
  double median = 0, min = 0, max = 0;
};
Spread Summarize(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return {n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2, v.front(), v.back()};
}

// ---- 1. per-core decode ----------------------------------------------------------------------

struct Sample {
  std::string name;
  std::string png;
  int channels = 3;
  bool mask = false;
};

std::vector<Sample> MakeSamples(int size) {
  cv::Mat gradient(size, size, CV_8UC3);
  for (int y = 0; y < size; ++y) {
    for (int x = 0; x < size; ++x) {
      gradient.at<cv::Vec3b>(y, x) = cv::Vec3b(static_cast<uint8_t>(x / 2),
                                               static_cast<uint8_t>(y / 2),
                                               static_cast<uint8_t>((x + y) / 4));
    }
  }
  cv::Mat random(size, size, CV_8UC3), noise(size, size, CV_8UC3), noisy;
  cv::randu(random, 0, 256);
  cv::randn(noise, cv::Scalar::all(0), cv::Scalar::all(12));
  cv::add(gradient, noise, noisy);
  cv::Mat mask(size, size, CV_8UC1, cv::Scalar(0));
  mask(cv::Rect(size / 8, size / 6, size / 3, size / 4)).setTo(1);
  mask(cv::Rect(size / 2, size / 2, size / 3, size / 4)).setTo(2);
  std::vector<Sample> out = {{"random RGB", {}, 3, false},
                             {"noisy RGB", {}, 3, false},
                             {"smooth RGB", {}, 3, false},
                             {"mask (gray)", {}, 1, true}};
  const cv::Mat* images[] = {&random, &noisy, &gradient, &mask};
  for (size_t i = 0; i < out.size(); ++i) Check(codec::EncodePng(*images[i], 1, &out[i].png));
  return out;
}

// Milliseconds per decode of `s`, n decodes straight into one buffer (as the loader does).
double DecodeMs(const Sample& s, int size, int n, bool fast) {
  codec::SetPngFastPathEnabled(fast);
  std::vector<uint8_t> dst(static_cast<size_t>(size) * size * s.channels);
  const std::span<const uint8_t> bytes(reinterpret_cast<const uint8_t*>(s.png.data()),
                                       s.png.size());
  const double t0 = ThreadCpuSeconds();
  for (int i = 0; i < n; ++i) {
    Check(codec::DecodePayloadInto(Codec::kPng, bytes, s.channels, size, size, dst.data(),
                                   s.mask));
  }
  codec::SetPngFastPathEnabled(true);
  return (ThreadCpuSeconds() - t0) * 1e3 / n;
}

void PerCore(int size, int rounds, int decodes) {
  const std::vector<Sample> samples = MakeSamples(size);
  const char* isa = codec::BestUnfilterIsa() == codec::UnfilterIsa::kAvx2 ? "AVX2" : "SSE2";
  std::printf("Per core: %dx%d PNG (OpenCV level 1), %d decodes x %d rounds, one thread, "
              "unfilter ISA %s\n",
              size, size, decodes, rounds, isa);
  std::printf("  %-12s %8s %24s %24s %22s\n", "image", "bytes", "libspng CPU ms (min..max)",
              "fast CPU ms (min..max)", "ratio (min..max)");
  for (const Sample& s : samples) {
    (void)DecodeMs(s, size, 3, false);  // warm caches and thread-local scratch
    (void)DecodeMs(s, size, 3, true);
    std::vector<double> slow, fast, ratio;
    for (int r = 0; r < rounds; ++r) {
      double a = 0, b = 0;
      if (r % 2 == 0) {
        a = DecodeMs(s, size, decodes, false);
        b = DecodeMs(s, size, decodes, true);
      } else {
        b = DecodeMs(s, size, decodes, true);
        a = DecodeMs(s, size, decodes, false);
      }
      slow.push_back(a);
      fast.push_back(b);
      ratio.push_back(a / b);
    }
    const Spread sl = Summarize(slow), fa = Summarize(fast), ra = Summarize(ratio);
    std::printf("  %-12s %8zu %8.3f (%.3f..%.3f) %8.3f (%.3f..%.3f) %6.2fx (%.2f..%.2f)\n",
                s.name.c_str(), s.png.size(), sl.median, sl.min, sl.max, fa.median, fa.min,
                fa.max, ra.median, ra.min, ra.max);
  }
}

// Unfiltering alone: a 512-row image of `width` pixels, every row one filter type, per ISA.
void UnfilterIsas(int width, int rounds) {
  const bool avx2 = codec::BestUnfilterIsa() == codec::UnfilterIsa::kAvx2;
  std::printf("\nUnfilter alone (%d x 512 rows, one filter type per run, %d rounds): GB/s of "
              "output per core, median\n", width, rounds);
  std::printf("  %-5s %-6s %8s %8s %8s %10s\n", "bytes", "filter", "plain", "SSE2",
              avx2 ? "AVX2" : "(no AVX2)", "best/plain");
  const char* names[] = {"None", "Sub", "Up", "Avg", "Paeth"};
  cv::RNG rng(3);
  for (int bpp = 1; bpp <= 4; ++bpp) {
    const size_t n = static_cast<size_t>(width) * bpp;
    std::vector<uint8_t> src(n * 512), out(n * 512);
    rng.fill(cv::Mat(1, static_cast<int>(src.size()), CV_8UC1, src.data()), cv::RNG::UNIFORM, 0,
             256);
    for (int filter = 1; filter <= 4; ++filter) {
      double gbs[3] = {0, 0, 0};
      const codec::UnfilterIsa isas[] = {codec::UnfilterIsa::kScalar, codec::UnfilterIsa::kSse2,
                                         codec::UnfilterIsa::kAvx2};
      for (int k = 0; k < (avx2 ? 3 : 2); ++k) {
        std::vector<double> v;
        for (int r = 0; r < rounds; ++r) {
          const double t0 = ThreadCpuSeconds();
          for (int rep = 0; rep < 4; ++rep) {
            for (size_t y = 0; y < 512; ++y) {
              const uint8_t* prev = y == 0 ? src.data() : out.data() + (y - 1) * n;
              codec::UnfilterRow(isas[k], filter, src.data() + y * n, prev, out.data() + y * n,
                                 n, bpp);
            }
          }
          v.push_back(4.0 * static_cast<double>(out.size()) * 1e-9 /
                      std::max(1e-9, ThreadCpuSeconds() - t0));
        }
        gbs[k] = Summarize(v).median;
      }
      std::printf("  %-5d %-6s %8.2f %8.2f %8.2f %9.2fx\n", bpp, names[filter], gbs[0], gbs[1],
                  gbs[2], std::max(gbs[1], gbs[2]) / gbs[0]);
    }
  }
}

// ---- 2. the loader ---------------------------------------------------------------------------

std::string MakeDataset(const std::string& dir, int count, int size) {
  const std::string src = dir + "/synth-" + std::to_string(size) + "-" + std::to_string(count);
  const std::string png = src + "-png.lmdb";
  if (!fs::exists(png + "/data.mdb")) {
    SynthOptions so;
    so.out_dir = src;
    so.count = count;
    so.width = so.height = size;
    so.classes = 4;
    std::fprintf(stderr, "making %d synthetic %dx%d samples in %s\n", count, size, size,
                 src.c_str());
    Check(Synthesize(so));
    BuildOptions bo;
    bo.source = src;
    bo.output = png;
    bo.store = StoreMode::kEncoded;
    bo.overwrite = true;
    BuildResult r;
    Check(BuildDataset(bo, &r));
  }
  return png;
}

// Single-thread read + decode of every record (image and mask): images/s and images/CPU-s.
void DecodeRate(const Dataset& ds, double* rate, double* per_cpu) {
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
      return codec::DecodePayloadInto(r.header.mask_codec, r.mask, 1, h, w, mask.data(), true);
    }));
  }
  const auto images = static_cast<double>(ds.size());
  *rate = images * 1e9 / static_cast<double>(NowNs() - t0);
  *per_cpu = images / std::max(1e-9, CpuSeconds() - cpu0);
}

// One epoch: images/s and images per CPU-second.
void LoaderRate(Loader* loader, uint64_t epoch, double* rate, double* per_cpu) {
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
  *rate = static_cast<double>(images) * 1e9 / static_cast<double>(NowNs() - t0);
  *per_cpu = static_cast<double>(images) / std::max(1e-9, CpuSeconds() - cpu0);
}

struct Series {
  std::vector<double> bound, bound_cpu, loader, loader_cpu;
};

void LoaderSideBySide(const std::string& dir, int count, int size, int batch, int threads,
                      int rounds) {
  const std::string path = MakeDataset(dir, count, size);
  LoaderOptions o;
  o.batch_size = batch;
  o.threads = threads;
  o.augment.hflip = 0.5;
  o.normalize = NormalizeMode::kCpuFloat32;
  std::unique_ptr<Loader> loader;
  Check(Loader::Open(path, o, &loader));
  // [0] libspng (fast path off), [1] fast path, unfused (decode, flip, then normalize),
  // [2] fast path, fused (flip and normalize done per row inside the decode).
  constexpr int kConfigs = 3;
  Series series[kConfigs];
  auto run = [&](int config, uint64_t epoch) {
    codec::SetPngFastPathEnabled(config != 0);
    loader::SetFusedDecodeEnabled(config == 2);
    Series& s = series[config];
    double rate = 0, per_cpu = 0;
    DecodeRate(loader->dataset(), &rate, &per_cpu);
    s.bound.push_back(rate * threads);
    s.bound_cpu.push_back(per_cpu);
    LoaderRate(loader.get(), epoch, &rate, &per_cpu);
    s.loader.push_back(rate);
    s.loader_cpu.push_back(per_cpu);
  };
  double ignored = 0, ignored2 = 0;
  DecodeRate(loader->dataset(), &ignored, &ignored2);  // page the LMDB in
  LoaderRate(loader.get(), 0, &ignored, &ignored2);    // start the workers
  for (int r = 0; r < rounds; ++r) {
    const uint64_t epoch = static_cast<uint64_t>(r + 1);
    // Each round starts with a different configuration, and every other round runs backwards.
    for (int k = 0; k < kConfigs; ++k) {
      const int step = r % 2 == 0 ? k : kConfigs - k;
      run((r + step) % kConfigs, epoch);
    }
  }
  codec::SetPngFastPathEnabled(true);
  loader::SetFusedDecodeEnabled(true);
  std::printf("\nLoader: %d x %dx%d RGB PNG + PNG mask (synth, encoded LMDB), batch %d, "
              "%d threads, hflip 0.5 + CPU float32 normalize, %d rounds interleaved\n",
              count, size, size, batch, threads, rounds);
  std::printf("  decode bound = one thread's read + decode (image and mask) x %d; the loader\n"
              "  adds the flip, the float32 normalize and the batching\n", threads);
  std::printf("  %-11s %26s %26s %16s %16s\n", "decoder", "decode bound img/s", "loader img/s",
              "bound img/CPU-s", "loader img/CPU-s");
  const char* names[] = {"libspng", "fast", "fast+fused"};
  Spread sum[kConfigs][4];
  for (int f = 0; f < kConfigs; ++f) {
    const Series& s = series[f];
    sum[f][0] = Summarize(s.bound);
    sum[f][1] = Summarize(s.loader);
    sum[f][2] = Summarize(s.bound_cpu);
    sum[f][3] = Summarize(s.loader_cpu);
    std::printf("  %-11s %8.1f (%6.1f..%6.1f) %8.1f (%6.1f..%6.1f) %16.1f %16.1f\n", names[f],
                sum[f][0].median, sum[f][0].min, sum[f][0].max, sum[f][1].median, sum[f][1].min,
                sum[f][1].max, sum[f][2].median, sum[f][3].median);
  }
  // Per-round ratios (the configurations of one round ran back to back), then their median.
  auto ratio = [&](const std::vector<double>& a, const std::vector<double>& b) {
    std::vector<double> r;
    for (size_t i = 0; i < a.size(); ++i) r.push_back(a[i] / b[i]);
    return Summarize(r);
  };
  auto line = [&](const char* what, Spread w, Spread c, const char* target) {
    std::printf("  %-34s wall %.2f (%.2f..%.2f)  per CPU-s %.2f (%.2f..%.2f)%s\n", what, w.median,
                w.min, w.max, c.median, c.min, c.max, target);
  };
  line("fused loader / fast decode bound", ratio(series[2].loader, series[2].bound),
       ratio(series[2].loader_cpu, series[2].bound_cpu), "  (target >= 0.9)");
  line("unfused loader / fast decode bound", ratio(series[1].loader, series[1].bound),
       ratio(series[1].loader_cpu, series[1].bound_cpu), "");
  line("fused loader / unfused loader", ratio(series[2].loader, series[1].loader),
       ratio(series[2].loader_cpu, series[1].loader_cpu), "");
  line("fused loader / libspng loader", ratio(series[2].loader, series[0].loader),
       ratio(series[2].loader_cpu, series[0].loader_cpu), "  (target >= 1.4)");
  line("fast bound / libspng bound", ratio(series[1].bound, series[0].bound),
       ratio(series[1].bound_cpu, series[0].bound_cpu), "");
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"png_bench: the PNG fast path against libspng, side by side"};
  int rounds = 7, decodes = 40, count = 200, size = 512, batch = 8, threads = 2,
      loader_rounds = 3;
  std::string dir = "/tmp/dspipe-png-bench";
  bool skip_loader = false;
  app.add_option("--rounds", rounds, "per-core rounds")->capture_default_str();
  app.add_option("--decodes", decodes, "decodes per image per round")->capture_default_str();
  app.add_option("--dir", dir, "where the synth dataset lives (reused)")->capture_default_str();
  app.add_option("--count", count, "synth samples")->capture_default_str();
  app.add_option("--size", size, "image side in pixels")->capture_default_str();
  app.add_option("--batch", batch, "loader batch size")->capture_default_str();
  app.add_option("--threads", threads, "loader threads")->capture_default_str();
  app.add_option("--loader-rounds", loader_rounds, "loader rounds")->capture_default_str();
  app.add_flag("--skip-loader", skip_loader, "per-core decode only");
  CLI11_PARSE(app, argc, argv);
  PerCore(size, rounds, decodes);
  UnfilterIsas(size, rounds);
  if (!skip_loader) LoaderSideBySide(dir, count, size, batch, threads, loader_rounds);
  return 0;
}
