// SPDX-License-Identifier: Apache-2.0
// jpeg_bench: the JPEG region + DCT-scaled decode (lib/codec/jpeg_decode.*) measured two ways.
//
//   jpeg_bench loader DB [--mode train|val] [--decode roi|full] [--scales simd|all|none]
//                        [--batch 64] [--threads 2] [--batches 30] [--warmup 5] [--json FILE]
//   jpeg_bench scales SRC_DIR [--images 200] [--rounds 3] [--out 224] [--shorter 256]
//
// loader: one dspipe::Loader run over an encoded JPEG dataset (dsconvert build of an ImageFolder)
//   with the classification pipeline, output 224 x 224, CPU float32 normalize (ImageNet
//   mean/std), shuffled: --mode train = RandomResizedCrop(224, scale=(0.08, 1), ratio=(3/4,
//   4/3)) + hflip 0.5; --mode val = Resize(256) + CenterCrop(224) (AugmentOptions::
//   resize_shorter). --decode roi is the decode router's default (region + DCT scale from
//   --scales); --decode full turns both off (codec::SetJpegRegionDecode(false)): the whole
//   image at full size, then crop + resize, the way dspipe decoded before. Untimed --warmup
//   batches, then --batches timed ones: images/s = images / wall seconds, and images per CPU
//   second of the process (less sensitive to other processes on the machine). Prints the stage
//   table and the decode paths; --json writes them (bench/jpeg/jpeg_bench.sh reads it).
// scales: per core, the decode alone, for choosing the DCT scales: the first --images JPEGs
//   under SRC_DIR decoded by one thread at every n/8 (whole image, and the validation centre
//   crop for --out / --shorter), --rounds rounds; thread CPU ms per image, median and min..max
//   over rounds, and the ratio to 8/8. The SIMD scales in libjpeg-turbo are 1/8, 1/4, 1/2, 8/8.
#include <sys/resource.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "../cpu_time.h"
#include "codec/image.h"
#include "codec/jpeg_decode.h"
#include "dspipe/augment.h"
#include "dspipe/loader.h"
#include "dspipe/stats.h"
#include "stats/json.h"

namespace {

using namespace dspipe;
namespace fs = std::filesystem;

void Check(const Status& s) {
  if (!s.ok()) {
    std::fprintf(stderr, "jpeg_bench: %s\n", s.ToString().c_str());
    std::exit(1);
  }
}


codec::JpegScales ParseScales(const std::string& s) {
  if (s == "none") return codec::JpegScales::kNone;
  if (s == "all") return codec::JpegScales::kAll;
  if (s == "simd") return codec::JpegScales::kSimd;
  std::fprintf(stderr, "jpeg_bench: --scales must be simd, all or none, not '%s'\n", s.c_str());
  std::exit(2);
}

struct LoaderArgs {
  std::string db, mode = "train", decode = "roi", scales = "simd", json;
  int batch = 64, threads = 2, batches = 30, warmup = 5;
};

int RunLoader(const LoaderArgs& a) {
  if (a.mode != "train" && a.mode != "val") {
    std::fprintf(stderr, "jpeg_bench: --mode must be train or val\n");
    return 2;
  }
  if (a.decode != "roi" && a.decode != "full") {
    std::fprintf(stderr, "jpeg_bench: --decode must be roi or full\n");
    return 2;
  }
  codec::SetJpegRegionDecode(a.decode == "roi");
  codec::SetJpegScales(ParseScales(a.scales));
  LoaderOptions o;
  o.batch_size = a.batch;
  o.threads = a.threads;
  o.height = o.width = 224;
  o.channels = 3;
  o.normalize = NormalizeMode::kCpuFloat32;
  o.mean = {123.675, 116.28, 103.53};  // ImageNet, as torchvision's Normalize * 255
  o.std = {58.395, 57.12, 57.375};
  if (a.mode == "train") {
    o.augment.crop_scale_min = 0.08;
    o.augment.hflip = 0.5;
  } else {
    o.augment.resize_shorter = 256;
  }
  std::unique_ptr<Loader> loader;
  Check(Loader::Open(a.db, o, &loader));
  uint64_t epoch = 0;
  Batch b;
  auto next = [&]() -> int {
    while (true) {
      Check(loader->Next(&b));
      if (b) return b.size();
      loader->set_epoch(++epoch);
    }
  };
  for (int i = 0; i < a.warmup; ++i) (void)next();
  loader->stats().Reset();
  const double cpu0 = CpuSeconds();
  const uint64_t t0 = NowNs();
  uint64_t images = 0;
  for (int i = 0; i < a.batches; ++i) images += static_cast<uint64_t>(next());
  const double wall = static_cast<double>(NowNs() - t0) * 1e-9;
  const double cpu = CpuSeconds() - cpu0;
  b.Reset();
  const StageStats& stats = loader->stats();
  const std::vector<StageSummary> stages = stats.Summaries();
  const std::vector<DecodePathSummary> paths = stats.DecodePaths();
  std::printf(
      "jpeg_bench loader: %s, mode %s, decode %s (scales %s), batch %d, %d threads: "
      "%.1f images/s, %.1f images per CPU-second (%llu images, %.2f s)\n",
      a.db.c_str(), a.mode.c_str(), a.decode.c_str(), a.scales.c_str(), a.batch, a.threads,
      static_cast<double>(images) / wall, static_cast<double>(images) / cpu,
      static_cast<unsigned long long>(images), wall);
  std::printf("%s", FormatTable(stages, a.batch).c_str());
  nlohmann::json jp = nlohmann::json::array();
  for (const DecodePathSummary& p : paths) {
    std::printf("  decode path %-12s %8llu samples  %7.3f ms mean\n", DecodePathName(p.path),
                static_cast<unsigned long long>(p.count), p.mean_ms);
    jp.push_back({{"path", DecodePathName(p.path)}, {"count", p.count}, {"mean_ms", p.mean_ms}});
  }
  if (!a.json.empty()) {
    const nlohmann::json doc = {{"tool", "jpeg_bench"},
                                {"db", a.db},
                                {"mode", a.mode},
                                {"decode", a.decode},
                                {"scales", a.scales},
                                {"batch", a.batch},
                                {"threads", a.threads},
                                {"images", images},
                                {"seconds", wall},
                                {"cpu_seconds", cpu},
                                {"images_per_s", static_cast<double>(images) / wall},
                                {"images_per_cpu_s", static_cast<double>(images) / cpu},
                                {"decode_paths", jp},
                                {"stages", stats::ToJson(stages)}};
    std::ofstream(a.json) << doc.dump(2) << "\n";
  }
  return 0;
}

struct ScalesArgs {
  std::string dir;
  int images = 200, rounds = 3, out = 224, shorter = 256;
};

std::string ReadAll(const fs::path& p) {
  std::ifstream f(p, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(f), {});
}

enum class Crop { kWhole, kVal, kTrain };

// Thread CPU ms per image to decode `files` at scale n/8 (0: the router's choice among the SIMD
// scales) of the whole image, the val centre crop or a train RandomResizedCrop draw.
double DecodeMs(const std::vector<std::string>& files, int n, Crop crop, const ScalesArgs& a) {
  cv::Mat out, buffer;
  const double t0 = ThreadCpuSeconds();
  uint64_t i = 0;
  for (const std::string& f : files) {
    const std::span<const uint8_t> bytes(reinterpret_cast<const uint8_t*>(f.data()), f.size());
    codec::JpegDecodeOptions o;
    o.scale_num = n;
    o.out_width = o.out_height = a.out;
    if (crop != Crop::kWhole) {
      codec::JpegInfo info;
      Check(codec::ReadJpegInfo(bytes, &info));
      AugmentOptions aug;
      if (crop == Crop::kVal) {
        aug.resize_shorter = a.shorter;
      } else {
        aug.crop_scale_min = 0.08;
      }
      const AugmentParams p =
          DrawAugment(aug, 0, 0, i++, info.oriented_height(), info.oriented_width(), a.out, a.out);
      o.crop_x = p.crop_x;
      o.crop_y = p.crop_y;
      o.crop_w = p.crop_w;
      o.crop_h = p.crop_h;
    }
    codec::JpegDecodeResult r;
    Check(codec::DecodeJpeg(bytes, o, &out, &r, &buffer));
  }
  return (ThreadCpuSeconds() - t0) * 1e3 / static_cast<double>(files.size());
}

int RunScales(const ScalesArgs& a) {
  std::vector<fs::path> paths;
  for (const auto& e : fs::recursive_directory_iterator(a.dir)) {
    if (e.is_regular_file() && e.path().extension() == ".jpg") paths.push_back(e.path());
  }
  std::sort(paths.begin(), paths.end());
  if (paths.size() > static_cast<size_t>(a.images)) paths.resize(static_cast<size_t>(a.images));
  if (paths.empty()) {
    std::fprintf(stderr, "jpeg_bench: no .jpg files under %s\n", a.dir.c_str());
    return 1;
  }
  std::vector<std::string> files;
  for (const fs::path& p : paths) files.push_back(ReadAll(p));
  std::printf(
      "jpeg_bench scales: %zu JPEGs from %s, one thread, %d rounds; thread CPU ms per "
      "image (median, min..max), ratio to 8/8\n",
      files.size(), a.dir.c_str(), a.rounds);
  {
    // The train pipeline's crops: region + the SIMD scale the router picks, against the whole
    // image at 8/8 (what the full-decode path decodes for the same samples).
    std::vector<double> whole, roi;
    (void)DecodeMs(files, 0, Crop::kTrain, a);
    for (int r = 0; r < a.rounds; ++r) {
      whole.push_back(DecodeMs(files, 8, Crop::kWhole, a));
      roi.push_back(DecodeMs(files, 0, Crop::kTrain, a));
    }
    std::sort(whole.begin(), whole.end());
    std::sort(roi.begin(), roi.end());
    const double w = whole[whole.size() / 2], r = roi[roi.size() / 2];
    std::printf(
        "  train RandomResizedCrop(%d, scale=(0.08, 1)) draws: region + SIMD scale %.3f ms, "
        "whole image 8/8 %.3f ms: %.2fx\n",
        a.out, r, w, w / r);
  }
  for (Crop crop : {Crop::kWhole, Crop::kVal}) {
    std::printf("  %s\n", crop == Crop::kVal
                              ? "val centre crop (Resize(256) + CenterCrop(224) window)"
                              : "whole image");
    std::map<int, std::vector<double>> ms;
    (void)DecodeMs(files, 8, crop, a);  // warm up
    for (int r = 0; r < a.rounds; ++r) {
      for (int k = 0; k < 8; ++k) {
        const int n = r % 2 == 0 ? k + 1 : 8 - k;  // alternate the order by round
        ms[n].push_back(DecodeMs(files, n, crop, a));
      }
    }
    auto median = [](std::vector<double> v) {
      std::sort(v.begin(), v.end());
      return v[v.size() / 2];
    };
    const double full = median(ms[8]);
    for (int n = 1; n <= 8; ++n) {
      const auto [lo, hi] = std::minmax_element(ms[n].begin(), ms[n].end());
      const bool simd = n == 1 || n == 2 || n == 4 || n == 8;
      std::printf("    %d/8 %-4s %7.3f ms (%.3f..%.3f)  %.2fx of 8/8  (%.2f of the pixels)\n", n,
                  simd ? "simd" : "", median(ms[n]), *lo, *hi, median(ms[n]) / full, n * n / 64.0);
    }
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"jpeg_bench: JPEG region + DCT-scaled decode, in the loader and per core"};
  app.require_subcommand(1);
  LoaderArgs la;
  CLI::App* loader = app.add_subcommand("loader", "one Loader run over an encoded JPEG dataset");
  loader->add_option("db", la.db, "dataset (dsconvert build of an ImageFolder)")->required();
  loader->add_option("--mode", la.mode, "train (RandomResizedCrop + hflip) or val")
      ->capture_default_str();
  loader->add_option("--decode", la.decode, "roi (the router's default) or full")
      ->capture_default_str();
  loader->add_option("--scales", la.scales, "DCT scales with --decode roi: simd, all, none")
      ->capture_default_str();
  loader->add_option("--batch", la.batch)->capture_default_str();
  loader->add_option("--threads", la.threads)->capture_default_str();
  loader->add_option("--batches", la.batches, "timed batches")->capture_default_str();
  loader->add_option("--warmup", la.warmup, "untimed batches first")->capture_default_str();
  loader->add_option("--json", la.json, "write the results as JSON");
  ScalesArgs sa;
  CLI::App* scales = app.add_subcommand("scales", "per-core decode cost at each n/8 scale");
  scales->add_option("dir", sa.dir, "folder of .jpg files (searched recursively)")->required();
  scales->add_option("--images", sa.images)->capture_default_str();
  scales->add_option("--rounds", sa.rounds)->capture_default_str();
  scales->add_option("--out", sa.out, "output side (val crop)")->capture_default_str();
  scales->add_option("--shorter", sa.shorter, "Resize(N) before the centre crop")
      ->capture_default_str();
  CLI11_PARSE(app, argc, argv);
  if (*loader) return RunLoader(la);
  return RunScales(sa);
}
