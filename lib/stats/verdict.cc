// SPDX-License-Identifier: Apache-2.0
// Diagnose: the bottleneck verdict over stage summaries. Rules: docs/STATS.md.
#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <thread>

#include "dspipe/stats.h"

namespace dspipe {
namespace {

// The consumer is the limit when it waits for data less than this fraction of its step.
constexpr double kConsumerWaitFraction = 0.05;
// A second stage this large (share of loader time) is worth naming in suggestions.
constexpr double kAlsoLargeShare = 0.25;

const char* BoundOf(Stage s) {
  switch (s) {
    case Stage::kRead:
      return "io";
    case Stage::kDecode:
      return "decode";
    case Stage::kTransform:
      return "transform";
    case Stage::kCollate:
      return "collate";
    case Stage::kH2D:
      return "h2d";
    case Stage::kNormalize:
      return "normalize";
    default:
      return "unknown";
  }
}

const char* LabelOf(Stage s) {
  switch (s) {
    case Stage::kRead:
      return "I/O-bound";
    case Stage::kDecode:
      return "Decode-bound";
    case Stage::kTransform:
      return "Transform-bound";
    case Stage::kCollate:
      return "Collate-bound";
    case Stage::kH2D:
      return "H2D-bound";
    case Stage::kNormalize:
      return "Normalize-bound";
    default:
      return "Unknown";
  }
}

int Pct(double share) { return static_cast<int>(share * 100.0 + 0.5); }

struct Inputs {
  std::array<StageSummary, kNumStages> by_stage{};
  std::array<double, kNumStages> cost{};  // effective ms per batch, parallel stages / threads
  int threads = 1;
  int cores = 1;
};

void Suggest(const Inputs& in, const LoaderShape& shape, Verdict* out) {
  const Verdict& v = *out;
  auto& s = out->suggestions;
  const double loader = v.loader_ms_per_batch;
  auto share = [&](Stage st) { return loader > 0 ? in.cost[static_cast<size_t>(st)] / loader : 0; };
  const bool cpu_room = in.threads < in.cores;
  // Only a run that has a GPU (on the GPU path, or one it could use) hears about GPUs.
  const bool has_gpu = shape.gpu || shape.cuda_usable;
  const std::string more_threads =
      fmt::format("Raise threads from {} to {} ({} cores available; `dsbench --threads {}`)",
                  in.threads, in.cores, in.cores, in.cores);

  if (v.bound == "consumer") {
    s.push_back(
        "The loader keeps up: the training step is the limit, a faster loader will not "
        "speed up training");
    s.push_back(
        fmt::format("Speed up the step (mixed precision, larger batch) or run the loader "
                    "with fewer threads (now {}) to free CPU",
                    in.threads));
    return;
  }
  if (v.starved) {
    s.push_back(fmt::format(
        "The {} waits for data: loader {:.2f} ms/batch vs compute {:.2f} ms; "
        "fix the {} stage first",
        has_gpu ? "GPU" : "training step", loader, v.compute_ms, StageName(v.limiting_stage)));
  }
  if (v.bound == "io") {
    s.push_back(
        "Copy the dataset to a RAM disk (tmpfs: /dev/shm or `mount -t tmpfs -o size=8G "
        "tmpfs /mnt/ramdisk`) or at least to local disk; FUSE/network mounts such as "
        "Google Drive are slow under random reads");
    const StageSummary& r = in.by_stage[static_cast<size_t>(Stage::kRead)];
    if (r.p99_ms > 3 * r.p50_ms) {
      s.push_back(
          fmt::format("Deepen prefetch (now {}; `dsbench --prefetch {}`): read p99 {:.3f} ms "
                      "vs p50 {:.3f} ms, queued batches absorb the spikes",
                      shape.prefetch, 2 * shape.prefetch, r.p99_ms, r.p50_ms));
    } else {
      s.push_back(fmt::format(
          "Deepen prefetch (now {}; `dsbench --prefetch {}`): the read-ahead window grows with "
          "it (prefetch x batch samples), so more reads overlap",
          shape.prefetch, 2 * shape.prefetch));
    }
    if (in.threads < 4 * in.cores) {
      s.push_back(
          fmt::format("More threads (now {}; `dsbench --threads {}`): reads wait on the disk, "
                      "so threads beyond the {} cores still help",
                      in.threads, 2 * in.cores, in.cores));
    }
    if (shape.store == "encoded" && share(Stage::kDecode) >= kAlsoLargeShare) {
      s.push_back(
          fmt::format("Decode is also {}% of loader time: `dsconvert build --store raw` "
                      "skips it, at the cost of larger records (do it once reads are "
                      "fast)",
                      Pct(share(Stage::kDecode))));
    }
  } else if (v.bound == "decode") {
    if (cpu_room) s.push_back(more_threads);
    if (shape.store == "encoded") {
      s.push_back(
          "Rebuild with `dsconvert build --store raw`: zstd-compressed pixels skip the "
          "image decode (larger records; best on local disk or a RAM disk)");
    } else if (shape.store == "raw") {
      s.push_back(
          "Raw records spend their decode in zstd; `dsconvert build --store raw "
          "--compression none` (uncompressed) removes it where disk and RAM allow");
    }
    if (!cpu_room) {
      s.push_back(
          fmt::format("All {} cores are busy decoding: more vCPUs (Colab Pro 4, Pro+ 8) "
                      "scale this stage",
                      in.cores));
    }
  } else if (v.bound == "transform" || v.bound == "normalize" || v.bound == "collate") {
    if (!shape.gpu && has_gpu) {
      s.push_back(
          "Normalize on the GPU (DeviceLoader; `dsbench --device cuda`): ship uint8 batches "
          "and skip the CPU float pass");
    }
    if (v.bound == "transform") {
      s.push_back(
          "Use fewer or cheaper augmentations: store data at training resolution to "
          "skip the resize, flip whole batches");
    } else if (v.bound == "collate") {
      s.push_back("Collate is a memory copy: keep batches uint8 and avoid per-sample resizes");
    } else if (shape.gpu) {
      s.push_back(
          "GPU normalize runs on the consumer path: run it on a stream overlapping the "
          "step");
    }
    if (cpu_room) s.push_back(more_threads);
  } else if (v.bound == "h2d") {
    s.push_back("Copy from pinned (page-locked) host memory with asynchronous copies");
    if (!shape.gpu && has_gpu) {
      s.push_back("Ship uint8 and normalize on the GPU: 4x fewer bytes than float32");
    }
    s.push_back(
        fmt::format("Larger batches (now {}) amortize the per-copy overhead", shape.batch_size));
  }
}

}  // namespace

Verdict Diagnose(const std::vector<StageSummary>& summaries, const LoaderShape& shape,
                 double compute_ms) {
  Inputs in;
  for (const StageSummary& s : summaries) {
    // kSegment rows break transform down: counted in transform already.
    if (static_cast<int>(s.stage) < kNumStages) in.by_stage[static_cast<size_t>(s.stage)] = s;
  }
  auto at = [&](Stage st) -> const StageSummary& { return in.by_stage[static_cast<size_t>(st)]; };
  in.threads = std::max(1, shape.threads);
  in.cores = shape.cpu_cores > 0
                 ? shape.cpu_cores
                 : std::max(1, static_cast<int>(std::thread::hardware_concurrency()));
  const int batch = std::max(1, shape.batch_size);

  Verdict v;
  v.compute_ms = compute_ms;
  // Batches: a per-batch stage's count, else the per-sample count / batch size.
  double batches = 0;
  for (Stage st : {Stage::kCollate, Stage::kH2D, Stage::kNormalize, Stage::kWait}) {
    if (batches == 0 && at(st).count > 0) batches = static_cast<double>(at(st).count);
  }
  if (batches == 0) {
    uint64_t samples = 0;
    for (Stage st : {Stage::kRead, Stage::kDecode, Stage::kTransform}) {
      samples = std::max(samples, at(st).count);
    }
    batches = static_cast<double>(samples) / batch;
  }

  double best = -1;
  for (int i = 0; i < kNumStages; ++i) {
    const Stage st = static_cast<Stage>(i);
    if (st == Stage::kWait || at(st).count == 0 || batches <= 0) continue;
    const bool serial = st == Stage::kH2D || (st == Stage::kNormalize && shape.gpu);
    in.cost[static_cast<size_t>(i)] = at(st).total_ms / batches / (serial ? 1 : in.threads);
    v.loader_ms_per_batch += in.cost[static_cast<size_t>(i)];
    if (in.cost[static_cast<size_t>(i)] > best) {
      best = in.cost[static_cast<size_t>(i)];
      v.limiting_stage = st;
    }
  }
  if (at(Stage::kWait).count > 0) v.wait_ms_per_batch = at(Stage::kWait).mean_ms;
  if (v.limiting_stage == Stage::kCount) {
    v.bound = "unknown";
    v.headline = "No stage timings recorded";
    return v;
  }
  const double loader = v.loader_ms_per_batch;
  v.share = loader > 0 ? best / loader : 1.0;
  v.starved = compute_ms > 0 && loader > compute_ms;

  bool consumer = false;
  if (v.wait_ms_per_batch >= 0) {
    const double step = compute_ms > 0 ? compute_ms + v.wait_ms_per_batch : loader;
    consumer = v.wait_ms_per_batch <= kConsumerWaitFraction * step;
  } else {
    consumer = compute_ms > 0 && loader <= compute_ms;
  }

  if (consumer) {
    v.bound = "consumer";
    v.headline = fmt::format(
        "Consumer-bound: the loader keeps up ({}); the training step is the limit "
        "(loader {:.2f} ms/batch, largest stage {} {}%)",
        v.wait_ms_per_batch >= 0 ? fmt::format("wait {:.3f} ms/batch", v.wait_ms_per_batch)
                                 : fmt::format("compute {:.2f} ms/batch", compute_ms),
        loader, StageName(v.limiting_stage), Pct(v.share));
  } else {
    v.bound = BoundOf(v.limiting_stage);
    v.headline = fmt::format("{}: {} is {}% of loader time ({:.2f} ms/batch with {} threads)",
                             LabelOf(v.limiting_stage), StageName(v.limiting_stage), Pct(v.share),
                             loader, in.threads);
    if (v.starved) {
      v.headline += fmt::format("; {}: loader {:.2f} ms/batch > compute {:.2f} ms",
                                shape.gpu || shape.cuda_usable ? "GPU starved" : "starved", loader,
                                compute_ms);
    } else if (compute_ms > 0) {
      v.headline +=
          fmt::format("; fed: loader {:.2f} ms/batch <= compute {:.2f} ms", loader, compute_ms);
    }
  }
  Suggest(in, shape, &v);
  return v;
}

Verdict Diagnose(const StageStats& stats, const LoaderShape& shape, double compute_ms) {
  return Diagnose(stats.Summaries(), shape, compute_ms);
}

}  // namespace dspipe
