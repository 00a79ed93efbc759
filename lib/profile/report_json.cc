// SPDX-License-Identifier: Apache-2.0
// ReportJson and ReportCsv: the machine-readable outputs (schema: docs/DSBENCH.md).
#include <fmt/format.h>

#include "dspipe/option_fields.h"
#include "profile/profile.h"
#include "profile/report_util.h"
#include "stats/json.h"

namespace dspipe::profile {
namespace {

using nlohmann::json;

json DatasetJson(const DatasetSummary& d) {
  return {{"path", d.path},           {"kind", d.kind},           {"store", d.store},
          {"count", d.count},         {"height", d.height},       {"width", d.width},
          {"channels", d.channels},   {"has_masks", d.has_masks}, {"sample_type", d.sample_type},
          {"mask_type", d.mask_type}, {"bytes", d.bytes}};
}

json ConfigJson(const ProfileOptions& o) {
  return {{"batch", o.batch_size},
          {"threads", o.threads},
          {"prefetch", o.prefetch},
          {"readahead", o.readahead < 0 ? o.prefetch * o.batch_size : o.readahead},
          {"device", o.device},
          {"batches", o.epochs > 0 ? 0 : o.batches},
          {"epochs", o.epochs},
          {"warmup", o.warmup},
          {"compute_ms", o.compute_ms},
          {"normalize", o.normalize},
          {"hflip", o.augment.hflip},
          {"vflip", o.augment.vflip},
          {"crop_scale", {o.augment.crop_scale_min, o.augment.crop_scale_max}},
          {"crop_ratio", {o.augment.crop_ratio_min, o.augment.crop_ratio_max}},
          {"resize_shorter", o.augment.resize_shorter},
          {"interpolation", EnumName(o.augment.image_interpolation)},
          {"size", {o.height, o.width}},
          {"channels", o.channels},
          {"mean", o.mean},
          {"std", o.std},
          {"transform", o.transform ? json::parse(o.transform->ToJson())["transform"] : json()},
          {"shuffle", o.shuffle},
          {"seed", o.seed},
          {"order", SampleOrderName(o.order)},
          {"block_size", o.block_size},
          {"rank", o.rank},
          {"world_size", o.world_size},
          {"drop_cache", o.drop_cache}};
}

json ThroughputJson(const ProfileResult& r) {
  return {{"images_per_s", r.images_per_s},
          {"mb_per_s", r.mb_per_s},
          {"decoded_mb_per_s", r.decoded_mb_per_s},
          {"batches", r.batches},
          {"images", r.images},
          {"seconds", r.seconds}};
}

json StagesJson(const ProfileResult& r) {
  json stages = json::array();
  for (const StageRow& row : StageRows(r)) {
    json s = stats::ToJson(row.summary);
    s["ms_per_batch"] = row.ms_per_batch;
    s["share"] = row.share;
    stages.push_back(std::move(s));
  }
  return stages;
}

json TimelineJson(const ProfileResult& r) {
  json samples = json::array();
  for (const ResourceSample& s : r.timeline) {
    json j = {{"t_s", s.t_s},
              {"cpu_user_pct", s.cpu_user_pct},
              {"cpu_system_pct", s.cpu_system_pct},
              {"rss_bytes", s.rss_bytes},
              {"read_bytes", s.read_bytes},
              {"major_faults", s.major_faults},
              {"images", s.images},
              {"images_per_s", s.images_per_s},
              {"wait_ms", s.wait_ms}};
    if (s.gpu_util_pct) j["gpu_util_pct"] = *s.gpu_util_pct;
    if (s.gpu_mem_used_mb) j["gpu_mem_used_mb"] = *s.gpu_mem_used_mb;
    samples.push_back(std::move(j));
  }
  return {{"sample_ms", r.config.sample_ms}, {"gpu", r.timeline_gpu},
          {"samples", std::move(samples)}};
}

json EpochsJson(const ProfileResult& r) {
  json epochs = json::array();
  for (size_t i = 0; i < r.epochs.size(); ++i) {
    const EpochResult& e = r.epochs[i];
    epochs.push_back({{"epoch", i},
                      {"source", e.source},
                      {"batches", e.batches},
                      {"images", e.images},
                      {"seconds", e.seconds},
                      {"images_per_s", e.images_per_s},
                      {"records_in_place", e.records_in_place},
                      {"bytes_in_place", e.bytes_in_place},
                      {"records_cache", e.records_cache},
                      {"bytes_cache", e.bytes_cache}});
    if (e.streamed) {
      epochs.back()["network"] = {{"fetches", e.net_fetches},
                                  {"bytes", e.net_bytes},
                                  {"shard_hits", e.shard_hits},
                                  {"shard_waits", e.shard_waits},
                                  {"wait_seconds", e.net_wait_seconds}};
    }
  }
  return epochs;
}

json RunJson(const ProfileResult& r) {
  return {{"source", r.source},
          {"dataset", DatasetJson(r.dataset)},
          {"config", ConfigJson(r.config)},
          {"cache",
           {{"requested", r.cache.requested},
            {"files", r.cache.files},
            {"dropped", r.cache.dropped},
            {"note", r.cache.note}}},
          {"ram_cache",
           {{"mode", r.ram_cache.mode},
            {"cached", r.ram_cache.cached},
            {"copied", r.ram_cache.copied},
            {"copy_s", r.ram_cache.copy_seconds},
            {"overlapped", r.ram_cache.overlapped},
            {"copy_wait_s", r.ram_cache.copy_wait_seconds},
            {"cache_from_epoch", r.ram_cache.cache_from_epoch},
            {"path", r.ram_cache.path},
            {"note", r.ram_cache.note}}},
          {"throughput", ThroughputJson(r)},
          {"stages", StagesJson(r)},
          {"epochs", EpochsJson(r)},
          {"verdict", stats::ToJson(r.verdict)},
          {"notes", r.notes},
          {"timeline", TimelineJson(r)}};
}

json SweepEntryJson(const ProfileResult& r) {
  return {{"config",
           {{"batch", r.config.batch_size},
            {"threads", r.config.threads},
            {"prefetch", r.config.prefetch}}},
          {"throughput", ThroughputJson(r)},
          {"verdict",
           {{"bound", r.verdict.bound},
            {"limiting_stage", StageName(r.verdict.limiting_stage)},
            {"share", r.verdict.share},
            {"starved", r.verdict.starved},
            {"headline", r.verdict.headline}}}};
}

std::string Num(double v) { return fmt::format("{:.6g}", v); }

std::string CsvField(const std::string& s) {
  if (s.find_first_of(",\"\n") == std::string::npos) return s;
  std::string q = "\"";
  for (char c : s) q += c == '"' ? std::string("\"\"") : std::string(1, c);
  return q + "\"";
}

}  // namespace

std::string ReportTimelineCsv(const Report& report) {
  std::string out =
      "t_s,cpu_user_pct,cpu_system_pct,rss_bytes,read_bytes,major_faults,images,images_per_s,"
      "wait_ms,gpu_util_pct,gpu_mem_used_mb\n";
  for (const ResourceSample& s : report.run.timeline) {
    out += fmt::format("{},{},{},{},{},{},{},{},{},{},{}\n", Num(s.t_s), Num(s.cpu_user_pct),
                       Num(s.cpu_system_pct), s.rss_bytes, s.read_bytes, s.major_faults, s.images,
                       Num(s.images_per_s), Num(s.wait_ms),
                       s.gpu_util_pct ? Num(*s.gpu_util_pct) : "",
                       s.gpu_mem_used_mb ? Num(*s.gpu_mem_used_mb) : "");
  }
  return out;
}

std::string ReportEpochsCsv(const Report& report) {
  std::string out =
      "epoch,source,batches,images,seconds,images_per_s,records_in_place,bytes_in_place,"
      "records_cache,bytes_cache\n";
  for (size_t i = 0; i < report.run.epochs.size(); ++i) {
    const EpochResult& e = report.run.epochs[i];
    out += fmt::format("{},{},{},{},{},{},{},{},{},{}\n", i, CsvField(e.source), e.batches,
                       e.images, Num(e.seconds), Num(e.images_per_s), e.records_in_place,
                       e.bytes_in_place, e.records_cache, e.bytes_cache);
  }
  return out;
}

json ReportJson(const Report& report) {
  json j = {{"tool", "dsbench"}, {"version", kJsonVersion}};
  j.update(RunJson(report.run));
  if (report.sweep) {
    json runs = json::array();
    for (const ProfileResult& r : report.sweep->runs) runs.push_back(SweepEntryJson(r));
    j["sweep"] = std::move(runs);
    if (report.sweep->best >= 0) {
      const ProfileResult& b = report.sweep->runs[static_cast<size_t>(report.sweep->best)];
      j["best"] = {{"index", report.sweep->best},
                   {"config",
                    {{"batch", b.config.batch_size},
                     {"threads", b.config.threads},
                     {"prefetch", b.config.prefetch}}},
                   {"images_per_s", b.images_per_s}};
    }
  }
  if (report.folder) {
    const double folder_rate = report.folder->images_per_s;
    j["compare"] = {{"folder", RunJson(*report.folder)},
                    {"lmdb",
                     {{"dataset", DatasetJson(report.run.dataset)},
                      {"throughput", ThroughputJson(report.run)}}},
                    {"speedup", folder_rate > 0 ? report.run.images_per_s / folder_rate : 0.0}};
  }
  return j;
}

std::string ReportCsv(const Report& report) {
  std::string out;
  if (report.sweep) {
    out =
        "batch,threads,prefetch,images_per_s,mb_per_s,seconds,batches,bound,limiting_stage,"
        "share,starved,best\n";
    const auto& runs = report.sweep->runs;
    for (size_t i = 0; i < runs.size(); ++i) {
      const ProfileResult& r = runs[i];
      out += fmt::format(
          "{},{},{},{},{},{},{},{},{},{},{},{}\n", r.config.batch_size, r.config.threads,
          r.config.prefetch, Num(r.images_per_s), Num(r.mb_per_s), Num(r.seconds), r.batches,
          CsvField(r.verdict.bound), StageName(r.verdict.limiting_stage), Num(r.verdict.share),
          r.verdict.starved ? 1 : 0, static_cast<int>(i) == report.sweep->best ? 1 : 0);
    }
    return out;
  }
  out =
      "source,stage,count,total_ms,mean_ms,p50_ms,p95_ms,p99_ms,max_ms,ms_per_batch,share,order,"
      "rank,world_size\n";
  auto rows = [&](const ProfileResult& r) {
    for (const StageRow& row : StageRows(r)) {
      const StageSummary& s = row.summary;
      out += fmt::format("{},{},{},{},{},{},{},{},{},{},{},{},{},{}\n", r.source,
                         RowName(s), s.count, Num(s.total_ms), Num(s.mean_ms),
                         Num(s.p50_ms), Num(s.p95_ms), Num(s.p99_ms), Num(s.max_ms),
                         Num(row.ms_per_batch), Num(row.share), SampleOrderName(r.config.order),
                         r.config.rank, r.config.world_size);
    }
  };
  rows(report.run);
  if (report.folder) rows(*report.folder);
  return out;
}

}  // namespace dspipe::profile
