// SPDX-License-Identifier: Apache-2.0
// ReportHtml: one self-contained page. Inline CSS and inline SVG only: no scripts, no fonts, no
// external references, so it opens offline and can be attached to an issue as it is.
#include <fmt/format.h>

#include <algorithm>

#include "profile/profile.h"
#include "profile/report_util.h"

namespace dspipe::profile {
namespace {

std::string Esc(const std::string& s) {
  std::string o;
  for (char c : s) {
    switch (c) {
      case '&':
        o += "&amp;";
        break;
      case '<':
        o += "&lt;";
        break;
      case '>':
        o += "&gt;";
        break;
      case '"':
        o += "&quot;";
        break;
      default:
        o += c;
    }
  }
  return o;
}

constexpr const char* kStyle = R"(<style>
body{font:14px/1.4 system-ui,sans-serif;margin:24px;color:#222;max-width:1000px}
h1{font-size:20px}h2{font-size:16px;margin-top:28px;border-bottom:1px solid #ddd}
table{border-collapse:collapse;margin:8px 0}td,th{padding:3px 10px;text-align:right}
th{background:#f2f2f2}td:first-child,th:first-child{text-align:left}
.verdict{background:#fff6e0;border-left:4px solid #e0a000;padding:8px 12px}
.kv td{text-align:left}.best{font-weight:bold;background:#e8f5e9}
svg text{font:12px system-ui,sans-serif}
</style>)";

// Horizontal bars of ms per batch, one per stage.
std::string StageBars(const ProfileResult& r) {
  const std::vector<StageRow> rows = StageRows(r);
  double max = 0;
  for (const StageRow& row : rows) max = std::max(max, row.ms_per_batch);
  if (max <= 0) max = 1;
  const int bar_h = 22, label_w = 90, width = 560;
  std::string svg = fmt::format(
      "<svg width=\"{}\" height=\"{}\" role=\"img\" aria-label=\"ms per batch by stage\">\n",
      label_w + width + 120, static_cast<int>(rows.size()) * bar_h + 6);
  int y = 2;
  for (const StageRow& row : rows) {
    const bool wait = row.summary.stage == Stage::kWait;
    const bool limiting = row.summary.stage == r.verdict.limiting_stage;
    const double w = row.ms_per_batch / max * width;
    svg += fmt::format(
        "<text x=\"0\" y=\"{}\">{}</text><rect x=\"{}\" y=\"{}\" width=\"{:.1f}\" height=\"{}\" "
        "fill=\"{}\"/><text x=\"{:.1f}\" y=\"{}\">{:.3f} ms{}</text>\n",
        y + 15, RowName(row.summary), label_w, y, std::max(w, 1.0), bar_h - 6,
        wait ? "#9e9e9e" : (limiting ? "#e53935" : "#42a5f5"), label_w + std::max(w, 1.0) + 6,
        y + 15, row.ms_per_batch, wait ? "" : fmt::format(" ({:.0f}%)", row.share * 100));
    y += bar_h;
  }
  return svg + "</svg>\n";
}

std::string StageTable(const ProfileResult& r) {
  std::string t =
      "<table><tr><th>stage</th><th>count</th><th>mean ms</th><th>p50</th><th>p95</th>"
      "<th>p99</th><th>max</th><th>ms/batch</th><th>share</th></tr>\n";
  for (const StageRow& row : StageRows(r)) {
    const StageSummary& s = row.summary;
    t += fmt::format(
        "<tr><td>{}</td><td>{}</td><td>{:.3f}</td><td>{:.3f}</td><td>{:.3f}</td><td>{:.3f}</td>"
        "<td>{:.3f}</td><td>{:.3f}</td><td>{}</td></tr>\n",
        RowName(s),
        s.folded > 0 ? fmt::format("{} (+{} fused into another stage)", s.count, s.folded)
                     : std::to_string(s.count),
        s.mean_ms, s.p50_ms, s.p95_ms, s.p99_ms, s.max_ms,
        row.ms_per_batch,
        s.stage == Stage::kWait ? std::string("-") : fmt::format("{:.1f}%", row.share * 100));
  }
  return t + "</table>\n";
}

// The resource timeline: each series scaled to its own maximum (named in the legend), over time.
std::string TimelineChart(const ProfileResult& r) {
  const std::vector<ResourceSample>& s = r.timeline;
  if (s.size() < 2) return "";
  struct Series {
    const char* name;
    const char* unit;
    const char* color;
    std::vector<double> v;
  };
  std::vector<Series> series = {{"images/s", "", "#1f77b4", {}},
                                {"CPU user+system", "%", "#d62728", {}},
                                {"storage read", " MB/s", "#2ca02c", {}},
                                {"consumer wait", " ms/interval", "#ff7f0e", {}},
                                {"RSS", " MB", "#9467bd", {}}};
  for (size_t i = 0; i < s.size(); ++i) {
    const double dt = i > 0 ? std::max(1e-9, s[i].t_s - s[i - 1].t_s) : 1;
    series[0].v.push_back(s[i].images_per_s);
    series[1].v.push_back(s[i].cpu_user_pct + s[i].cpu_system_pct);
    series[2].v.push_back(static_cast<double>(s[i].read_bytes) / 1e6 / dt);
    series[3].v.push_back(s[i].wait_ms);
    series[4].v.push_back(static_cast<double>(s[i].rss_bytes) / 1e6);
  }
  if (r.timeline_gpu) {
    series.push_back({"GPU utilization", "%", "#8c564b", {}});
    for (const ResourceSample& x : s) series.back().v.push_back(x.gpu_util_pct.value_or(0));
  }
  const double w = 760, h = 200, left = 10, top = 10;
  const double t_max = std::max(1e-9, s.back().t_s);
  std::string svg = fmt::format("<svg width=\"{}\" height=\"{}\" role=\"img\">\n", w + 20,
                                h + 40 + 18 * static_cast<double>(series.size()));
  svg += fmt::format("<rect x=\"{}\" y=\"{}\" width=\"{}\" height=\"{}\" fill=\"none\" "
                     "stroke=\"#ccc\"/>\n",
                     left, top, w, h);
  double legend_y = top + h + 34;
  for (const Series& ser : series) {
    const double max = std::max(1e-12, *std::max_element(ser.v.begin(), ser.v.end()));
    std::string points;
    for (size_t i = 0; i < s.size(); ++i) {
      points += fmt::format("{:.1f},{:.1f} ", left + w * s[i].t_s / t_max,
                            top + h - h * ser.v[i] / max);
    }
    svg += fmt::format("<polyline fill=\"none\" stroke=\"{}\" stroke-width=\"1.5\" "
                       "points=\"{}\"/>\n",
                       ser.color, points);
    svg += fmt::format("<text x=\"{}\" y=\"{}\" fill=\"{}\">{} (top = {:.1f}{})</text>\n",
                       left, legend_y, ser.color, ser.name, max, ser.unit);
    legend_y += 18;
  }
  svg += fmt::format("<text x=\"{}\" y=\"{}\">0 s</text><text x=\"{}\" y=\"{}\" "
                     "text-anchor=\"end\">{:.2f} s</text>\n",
                     left, top + h + 14, left + w, top + h + 14, t_max);
  return "<h3>Resource timeline (every " + std::to_string(r.config.sample_ms) +
         " ms; each line scaled to its own top)</h3>\n" + svg + "</svg>\n";
}

// Per epoch, where it read from (in place / cache), as the console's epochs lines: with the
// RAM-disk cache (an overlapped copy switches the loader to the copy at an epoch boundary).
std::string EpochTable(const ProfileResult& r) {
  if (r.ram_cache.mode == "off" || r.epochs.empty()) return "";
  const RamCacheResult& c = r.ram_cache;
  std::string t = fmt::format(
      "<h3>Epochs (ram cache: copy {:.3f} s{})</h3>\n<table><tr><th>epoch</th><th>source</th>"
      "<th>images/s</th><th>images</th><th>seconds</th><th>records in place</th>"
      "<th>records cache</th><th>MB read</th></tr>\n",
      c.copy_seconds,
      c.overlapped ? fmt::format(", in the background; waited {:.3f} s", c.copy_wait_seconds)
                   : std::string(c.copied ? ", before the run" : ""));
  for (size_t i = 0; i < r.epochs.size(); ++i) {
    const EpochResult& e = r.epochs[i];
    t += fmt::format(
        "<tr><td>{}</td><td>{}</td><td>{:.1f}</td><td>{}</td><td>{:.3f}</td><td>{}</td><td>{}</td>"
        "<td>{:.1f}</td></tr>\n",
        i, Esc(e.source), e.images_per_s, e.images, e.seconds, e.records_in_place,
        e.records_cache, static_cast<double>(e.bytes_in_place + e.bytes_cache) / 1e6);
  }
  return t + "</table>\n";
}

std::string RunSection(const ProfileResult& r, const std::string& title) {
  const DatasetSummary& d = r.dataset;
  std::string h = fmt::format("<h2>{}</h2>\n<table class=\"kv\">\n", Esc(title));
  auto kv = [&](const std::string& k, const std::string& v) {
    h += fmt::format("<tr><td>{}</td><td>{}</td></tr>\n", Esc(k), Esc(v));
  };
  kv("dataset", fmt::format("{} ({}): {} samples, {}x{}x{} (HxWxC){}", d.path, KindAndStore(d),
                            d.count, d.height, d.width, d.channels, ShapeTypes(d)));
  kv("config", fmt::format("batch {}, threads {}, prefetch {}, device {}, compute {} ms, order {}, "
                           "rank {} of {}",
                           r.config.batch_size, r.config.threads, r.config.prefetch,
                           r.config.device, r.config.compute_ms, SampleOrderName(r.config.order),
                           r.config.rank, r.config.world_size));
  kv("throughput",
     fmt::format("{:.1f} images/s, {:.1f} MB/s stored, {:.1f} MB/s decoded "
                 "({} batches in {:.3f} s)",
                 r.images_per_s, r.mb_per_s, r.decoded_mb_per_s, r.batches, r.seconds));
  if (r.cache.requested) kv("cache", r.cache.note);
  for (const std::string& n : r.notes) kv("note", n);
  h += "</table>\n<div class=\"verdict\"><b>" + Esc(r.verdict.headline) + "</b><ul>\n";
  for (const std::string& s : r.verdict.suggestions) h += "<li>" + Esc(s) + "</li>\n";
  h += "</ul></div>\n<h3>Stage time per batch</h3>\n" + StageBars(r) + StageTable(r);
  h += EpochTable(r);
  h += TimelineChart(r);
  return h;
}

// Vertical bars: images/s per sweep configuration, the best one highlighted.
std::string SweepChart(const SweepResult& sweep) {
  double max = 0;
  for (const ProfileResult& r : sweep.runs) max = std::max(max, r.images_per_s);
  if (max <= 0) max = 1;
  const int n = static_cast<int>(sweep.runs.size());
  const int col = 70, plot_h = 220, top = 20, bottom = 50;
  std::string svg = fmt::format(
      "<svg width=\"{}\" height=\"{}\" role=\"img\" aria-label=\"images per second by "
      "configuration\">\n",
      std::max(n * col + 20, 200), plot_h + top + bottom);
  for (int i = 0; i < n; ++i) {
    const ProfileResult& r = sweep.runs[static_cast<size_t>(i)];
    const double h = r.images_per_s / max * plot_h;
    const int x = 10 + i * col;
    svg += fmt::format(
        "<rect x=\"{}\" y=\"{:.1f}\" width=\"{}\" height=\"{:.1f}\" fill=\"{}\"/>"
        "<text x=\"{}\" y=\"{:.1f}\">{:.0f}</text>"
        "<text x=\"{}\" y=\"{}\">b{} t{}</text><text x=\"{}\" y=\"{}\">k{}</text>\n",
        x, top + plot_h - h, col - 14, std::max(h, 1.0), i == sweep.best ? "#43a047" : "#42a5f5", x,
        top + plot_h - h - 4, r.images_per_s, x, top + plot_h + 16, r.config.batch_size,
        r.config.threads, x, top + plot_h + 32, r.config.prefetch);
  }
  return svg + "</svg>\n";
}

std::string SweepTable(const SweepResult& sweep) {
  std::string t =
      "<table><tr><th>batch</th><th>threads</th><th>prefetch</th><th>images/s</th><th>MB/s</th>"
      "<th>bound</th></tr>\n";
  for (size_t i = 0; i < sweep.runs.size(); ++i) {
    const ProfileResult& r = sweep.runs[i];
    t += fmt::format(
        "<tr{}><td>{}</td><td>{}</td><td>{}</td><td>{:.1f}</td><td>{:.1f}</td><td>{}</td></tr>\n",
        static_cast<int>(i) == sweep.best ? " class=\"best\"" : "", r.config.batch_size,
        r.config.threads, r.config.prefetch, r.images_per_s, r.mb_per_s, Esc(r.verdict.bound));
  }
  return t + "</table>\n";
}

std::string CompareChart(const ProfileResult& lmdb, const ProfileResult& folder) {
  const double max = std::max({lmdb.images_per_s, folder.images_per_s, 1e-9});
  std::string svg =
      "<svg width=\"700\" height=\"60\" role=\"img\" aria-label=\"images per "
      "second, folder vs LMDB\">\n";
  int y = 2;
  for (const ProfileResult* r : {&folder, &lmdb}) {
    const double w = r->images_per_s / max * 480;
    svg += fmt::format(
        "<text x=\"0\" y=\"{}\">{}</text><rect x=\"70\" y=\"{}\" width=\"{:.1f}\" height=\"20\" "
        "fill=\"{}\"/><text x=\"{:.1f}\" y=\"{}\">{:.1f} images/s</text>\n",
        y + 15, r->source, y, std::max(w, 1.0), r == &lmdb ? "#43a047" : "#9e9e9e",
        76 + std::max(w, 1.0), y + 15, r->images_per_s);
    y += 28;
  }
  return svg + "</svg>\n";
}

}  // namespace

std::string ReportHtml(const Report& report) {
  std::string h =
      "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\n"
      "<title>dsbench report</title>\n";
  h += kStyle;
  h += "</head><body>\n<h1>dsbench: " + Esc(report.run.dataset.path) + "</h1>\n";
  if (report.sweep) {
    h += "<h2>Sweep: images/s by configuration (b = batch, t = threads, k = prefetch)</h2>\n";
    h += SweepChart(*report.sweep) + SweepTable(*report.sweep);
  }
  if (report.folder) {
    const double f = report.folder->images_per_s;
    h += fmt::format("<h2>Folder vs LMDB: {:.2f}x</h2>\n",
                     f > 0 ? report.run.images_per_s / f : 0.0);
    h += CompareChart(report.run, *report.folder);
  }
  h += RunSection(report.run, report.sweep ? "Best configuration" : "LMDB run");
  if (report.folder) h += RunSection(*report.folder, "Folder run (same loader stages)");
  h += "<p><small>dsbench JSON schema version " + std::to_string(kJsonVersion) +
       "; see docs/DSBENCH.md for how each number is measured.</small></p>\n</body></html>\n";
  return h;
}

}  // namespace dspipe::profile
