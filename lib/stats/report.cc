// SPDX-License-Identifier: Apache-2.0
// FormatTable and ToJson: the human and machine views of summaries and verdicts.
#include <fmt/format.h>

#include <nlohmann/json.hpp>

#include "dspipe/stats.h"
#include "stats/json.h"

namespace dspipe {
namespace {

bool PerSample(Stage s) {
  return s == Stage::kRead || s == Stage::kDecode || s == Stage::kTransform || s == Stage::kSegment;
}

}  // namespace

std::string FormatTable(const std::vector<StageSummary>& summaries, int batch_size) {
  const int batch = std::max(1, batch_size);
  double busy_ms = 0;  // all stages but wait: the denominator of "share"
  for (const StageSummary& s : summaries) {
    if (s.stage != Stage::kWait && s.stage != Stage::kSegment) busy_ms += s.total_ms;
  }
  std::string out =
      fmt::format("{:<10}{:>10}{:>10}{:>10}{:>10}{:>10}{:>10}{:>10}{:>7}\n", "stage", "count",
                  "mean ms", "p50 ms", "p95 ms", "p99 ms", "max ms", "ms/batch", "share");
  for (const StageSummary& s : summaries) {
    const double per_batch = PerSample(s.stage) ? s.mean_ms * batch : s.mean_ms;
    const std::string share = s.stage == Stage::kWait || busy_ms <= 0
                                  ? std::string("-")
                                  : fmt::format("{:.1f}%", 100.0 * s.total_ms / busy_ms);
    // Segment rows (a breakdown of transform) are indented, numbered and labelled.
    const std::string name = s.stage == Stage::kSegment ? fmt::format(" transform{}", s.row + 1)
                                                        : std::string(StageName(s.stage));
    out += fmt::format("{:<10}{:>10}{:>10.3f}{:>10.3f}{:>10.3f}{:>10.3f}{:>10.3f}{:>10.3f}{:>7}",
                       name, s.count, s.mean_ms, s.p50_ms, s.p95_ms, s.p99_ms, s.max_ms,
                       per_batch, share);
    // A folded segment ran inside another stage's pass: its samples are counted here, timed
    // there (normalize, or decode on the fused PNG path).
    std::string label = s.label;
    if (s.folded > 0) {
      label += fmt::format(" (+{} of {} samples fused into another stage, timed there)", s.folded,
                           s.folded + s.count);
    }
    out += s.stage == Stage::kSegment ? "  " + label + "\n" : "\n";
  }
  return out;
}

namespace stats {

nlohmann::json ToJson(const StageSummary& s) {
  nlohmann::json j{{"stage", StageName(s.stage)}, {"count", s.count},
                   {"total_ms", s.total_ms},      {"mean_ms", s.mean_ms},
                   {"stddev_ms", s.stddev_ms},    {"min_ms", s.min_ms},
                   {"p50_ms", s.p50_ms},          {"p95_ms", s.p95_ms},
                   {"p99_ms", s.p99_ms},          {"max_ms", s.max_ms}};
  if (s.stage == Stage::kSegment) {
    j["row"] = s.row;
    j["label"] = s.label;
    j["folded"] = s.folded;
  }
  return j;
}

nlohmann::json ToJson(const std::vector<StageSummary>& summaries) {
  nlohmann::json arr = nlohmann::json::array();
  for (const StageSummary& s : summaries) arr.push_back(ToJson(s));
  return arr;
}

nlohmann::json ToJson(const Verdict& v) {
  return nlohmann::json{{"bound", v.bound},
                        {"limiting_stage", StageName(v.limiting_stage)},
                        {"share", v.share},
                        {"loader_ms_per_batch", v.loader_ms_per_batch},
                        {"wait_ms_per_batch", v.wait_ms_per_batch},
                        {"compute_ms", v.compute_ms},
                        {"starved", v.starved},
                        {"headline", v.headline},
                        {"suggestions", v.suggestions}};
}

}  // namespace stats
}  // namespace dspipe
