// SPDX-License-Identifier: Apache-2.0
// ReportText and the stage rows shared by all writers.
#include <fmt/format.h>

#include <algorithm>

#include "profile/profile.h"
#include "profile/report_util.h"

namespace dspipe::profile {
namespace {

bool PerSample(Stage s) {
  return s == Stage::kRead || s == Stage::kDecode || s == Stage::kTransform || s == Stage::kSegment;
}

std::string Config(const ProfileResult& r) {
  const ProfileOptions& c = r.config;
  return fmt::format(
      "batch {}, threads {}, prefetch {}, device {}{}, order {}{}, rank {} of {}", c.batch_size,
      c.threads, c.prefetch, c.device,
      c.compute_ms > 0 ? fmt::format(", compute {} ms", c.compute_ms) : std::string(),
      SampleOrderName(c.order),
      c.order == SampleOrder::kBlocks ? fmt::format(" (block {})", c.block_size) : std::string(),
      c.rank, c.world_size) +
         (c.transform ? fmt::format(", transform: {} segment(s)", c.transform->segment_labels().size())
                      : std::string());
}

}  // namespace

// " uint16 + uint16 mask" after HxWxC: the types when the dataset is typed, else " + mask".
std::string ShapeTypes(const DatasetSummary& d) {
  const bool typed = d.sample_type != "uint8" || (d.has_masks && d.mask_type != "uint8");
  std::string s = typed ? " " + d.sample_type : "";
  if (d.has_masks) s += typed ? " + " + d.mask_type + " mask" : " + mask";
  return s;
}

std::string KindAndStore(const DatasetSummary& d) {
  const std::string kind = d.kind == "dspipe"    ? "dspipe LMDB"
                           : d.kind == "sharded" ? "sharded dspipe dataset"
                           : d.kind == "plain"   ? "plain LMDB"
                           : d.kind == "folder"  ? "image folder"
                                                 : d.kind;
  const std::string store = d.store == "encoded" ? "encoded images"
                            : d.store == "raw"   ? "raw pixels"
                            : d.store == "plain" ? "values as stored"
                                                 : d.store;
  return kind + ", " + store;
}

namespace {

void AppendRun(const ProfileResult& r, std::string* out) {
  const DatasetSummary& d = r.dataset;
  *out += fmt::format("{} ({}): {} samples, {}x{}x{} (HxWxC){}, {:.1f} MB on disk\n", d.path,
                      KindAndStore(d), d.count, d.height, d.width, d.channels, ShapeTypes(d),
                      static_cast<double>(d.bytes) / 1e6);
  *out += fmt::format("config: {}\n", Config(r));
  if (r.cache.requested) *out += fmt::format("cache: {}\n", r.cache.note);
  for (const std::string& n : r.notes) *out += fmt::format("note: {}\n", n);
  *out += fmt::format(
      "throughput: {:.1f} images/s, {:.1f} MB/s stored ({:.1f} MB/s decoded), {} batches in "
      "{:.3f} s\n\n",
      r.images_per_s, r.mb_per_s, r.decoded_mb_per_s, r.batches, r.seconds);
  if (r.timeline.size() >= 2) {
    uint64_t read = 0, faults = 0, rss = 0;
    double cpu = 0, busiest = 0;
    for (const ResourceSample& s : r.timeline) {
      read += s.read_bytes;
      faults += s.major_faults;
      rss = std::max(rss, s.rss_bytes);
      busiest = std::max(busiest, s.cpu_user_pct + s.cpu_system_pct);
    }
    const double secs = std::max(1e-9, r.timeline.back().t_s);
    for (size_t i = 1; i < r.timeline.size(); ++i) {
      const double dt = r.timeline[i].t_s - r.timeline[i - 1].t_s;
      cpu += (r.timeline[i].cpu_user_pct + r.timeline[i].cpu_system_pct) * dt;
    }
    *out += fmt::format(
        "resources: CPU {:.0f}% avg ({:.0f}% peak), RSS peak {:.1f} MB, {:.1f} MB read from "
        "storage, {} major faults ({} samples every {} ms{})\n",
        cpu / secs, busiest, static_cast<double>(rss) / 1e6, static_cast<double>(read) / 1e6,
        faults, r.timeline.size(), r.config.sample_ms, r.timeline_gpu ? ", GPU sampled" : "");
  }
  // Per epoch, where it read from: with the RAM-disk cache (an overlapped copy switches the
  // loader from the dataset in place to the copy at an epoch boundary).
  if (r.ram_cache.mode != "off" && !r.epochs.empty()) {
    *out += fmt::format("epochs (ram cache: copy {:.3f} s{}):\n", r.ram_cache.copy_seconds,
                        r.ram_cache.overlapped
                            ? fmt::format(", in the background; waited {:.3f} s",
                                          r.ram_cache.copy_wait_seconds)
                            : std::string(r.ram_cache.copied ? ", before the run" : ""));
    for (size_t i = 0; i < r.epochs.size(); ++i) {
      const EpochResult& e = r.epochs[i];
      *out += fmt::format("  {:>3}  {:<8} {:>9.1f} images/s  {:>6} images in {:.3f} s, {:.1f} MB "
                          "read\n",
                          i, e.source, e.images_per_s, e.images, e.seconds,
                          static_cast<double>(e.bytes_in_place + e.bytes_cache) / 1e6);
      if (e.streamed) {
        *out += fmt::format(
            "       network: {} shards, {:.1f} MB fetched; shard reads {} cached, {} waited "
            "{:.3f} s\n",
            e.net_fetches, static_cast<double>(e.net_bytes) / 1e6, e.shard_hits, e.shard_waits,
            e.net_wait_seconds);
      }
    }
    *out += "\n";
  }
  *out += FormatTable(r.stages, r.config.batch_size);
  *out += fmt::format("\nverdict: {}\n", r.verdict.headline);
  for (const std::string& s : r.verdict.suggestions) *out += fmt::format("  - {}\n", s);
}

}  // namespace

std::string RowName(const StageSummary& s) {
  return s.stage == Stage::kSegment ? "transform" + std::to_string(s.row + 1)
                                    : std::string(StageName(s.stage));
}

std::vector<StageRow> StageRows(const ProfileResult& r) {
  double busy = 0;  // the segment rows break transform down: counted once
  for (const StageSummary& s : r.stages) {
    if (s.stage != Stage::kWait && s.stage != Stage::kSegment) busy += s.total_ms;
  }
  std::vector<StageRow> rows;
  for (const StageSummary& s : r.stages) {
    StageRow row;
    row.summary = s;
    row.ms_per_batch = s.mean_ms * (PerSample(s.stage) ? r.config.batch_size : 1);
    row.share = s.stage != Stage::kWait && busy > 0 ? s.total_ms / busy : 0;
    rows.push_back(row);
  }
  return rows;
}

std::string ReportText(const Report& report) {
  std::string out;
  if (report.sweep) {
    out += fmt::format("{:>6} {:>8} {:>9} {:>10} {:>9}  {}\n", "batch", "threads", "prefetch",
                       "images/s", "MB/s", "bound");
    const auto& runs = report.sweep->runs;
    for (size_t i = 0; i < runs.size(); ++i) {
      const ProfileResult& r = runs[i];
      out += fmt::format("{:>6} {:>8} {:>9} {:>10.1f} {:>9.1f}  {}{}\n", r.config.batch_size,
                         r.config.threads, r.config.prefetch, r.images_per_s, r.mb_per_s,
                         r.verdict.bound,
                         static_cast<int>(i) == report.sweep->best ? "  <- best" : "");
    }
    out += "\nbest configuration:\n";
  }
  if (report.folder) out += "== LMDB ==\n";
  AppendRun(report.run, &out);
  if (report.folder) {
    out += "\n== folder (same loader stages over the files) ==\n";
    AppendRun(*report.folder, &out);
    const double f = report.folder->images_per_s;
    out += fmt::format("\ncompare: LMDB {:.1f} images/s vs folder {:.1f} images/s: {:.2f}x\n",
                       report.run.images_per_s, f, f > 0 ? report.run.images_per_s / f : 0.0);
  }
  return out;
}

}  // namespace dspipe::profile
