// SPDX-License-Identifier: Apache-2.0
// dsbench: profile the loader's stages and say where the bottleneck is. Parses flags and calls
// the profile library (lib/profile/profile.h); the --json schema is docs/DSBENCH.md. The flags
// are declared in flags.cc.
// Exit codes: 0 ok, 1 failure (message on stderr), 2 bad usage.
#include <CLI/CLI.hpp>
#include <cstdio>
#include <iostream>

#include "../option_names.h"
#include "../size_arg.h"
#include "core/files.h"
#include "dspipe/option_fields.h"
#include "flags.h"
#include "profile/profile.h"

namespace {

namespace pf = dspipe::profile;
using dspipe::cli::dsbench::AddOptions;
using dspipe::cli::dsbench::Args;

int Fail(const dspipe::Status& s) {
  std::fprintf(stderr, "dsbench: %s\n", dspipe::cli::Describe(s).c_str());
  return 1;
}

// "A,B" -> *a, *b (two numbers).
bool ParsePair(const std::string& text, double* a, double* b) {
  char comma = 0, extra = 0;
  return std::sscanf(text.c_str(), "%lf%c%lf%c", a, &comma, b, &extra) == 3 && comma == ',';
}

int Usage(const std::string& why) {
  std::fprintf(stderr, "dsbench: %s (see --help)\n", why.c_str());
  return 2;
}

dspipe::Status Write(const std::string& path, const std::string& what, const std::string& data) {
  if (path.empty()) return dspipe::Status::OK();
  dspipe::Status s = dspipe::core::WriteFileAtomic(path, data);
  return s.ok() ? s : s.WithContext("writing the " + what);
}

// Checks the parsed flags and completes a->o from them. Returns 0, or the exit code: 2 (bad
// usage, with a message) or 1 (a --transform that cannot be read).
int ToProfileOptions(Args* a) {
  pf::ProfileOptions& o = a->o;
  o.normalize = !a->no_normalize;
  if (!a->crop_scale.empty() &&
      !ParsePair(a->crop_scale, &o.augment.crop_scale_min, &o.augment.crop_scale_max)) {
    return Usage("--crop-scale " + a->crop_scale + ": expected MIN,MAX, e.g. 0.08,1");
  }
  if (!a->crop_ratio.empty() &&
      !ParsePair(a->crop_ratio, &o.augment.crop_ratio_min, &o.augment.crop_ratio_max)) {
    return Usage("--crop-ratio " + a->crop_ratio + ": expected MIN,MAX, e.g. 0.75,1.3333");
  }
  if (!a->size.empty() && !dspipe::cli::ParseHeightWidth(a->size, &o.height, &o.width)) {
    return Usage("--size " + a->size + ": expected HxW, e.g. 256x256");
  }
  (void)dspipe::ParseEnum(a->interpolation, &o.augment.image_interpolation);  // checked above
  if (dspipe::Status s = o.augment.Validate(); !s.ok()) {
    return Usage(dspipe::cli::Describe(s));
  }
  if (a->transform->count() > 0) {
    if (o.augment.hflip > 0 || o.augment.vflip > 0 || !a->crop_scale.empty() ||
        !a->crop_ratio.empty() || o.augment.resize_shorter > 0 || a->interpolation != "linear") {
      return Usage(
          "--transform and --hflip/--vflip/--crop-scale/--crop-ratio/--resize-shorter/"
          "--interpolation: put the flips, crop, resize and interpolation in the pipeline");
    }
    std::string text;
    dspipe::Status s = dspipe::core::ReadFile(a->transform_path, &text);
    if (s.ok()) s = dspipe::TransformPipeline::Parse(text, &o.transform);
    if (!s.ok()) return Fail(s.WithContext("--transform " + a->transform_path));
  }
  // Checked by the flags (IsMember of the names).
  (void)dspipe::ParseEnum(a->remainder, &o.remainder);
  (void)dspipe::ParseEnum(a->mean_std, &o.mean_std);
  (void)dspipe::ParseEnum(a->dtype, &o.dtype);
  (void)dspipe::ParseEnum(a->mask_dtype, &o.mask_dtype);
  o.plain.detect_masks = !a->no_detect_masks;
  o.shuffle = !a->no_shuffle;
  if (a->old_no_overlap) {
    std::fprintf(stderr, "dsbench: --cache-no-overlap is deprecated: write --no-cache-overlap\n");
  }
  o.cache_overlap = !(a->no_overlap || a->old_no_overlap);
  o.order = a->order == "blocks"   ? dspipe::SampleOrder::kBlocks
            : a->order == "shards" ? dspipe::SampleOrder::kShards
                                   : dspipe::SampleOrder::kGlobal;
  if (o.rank >= o.world_size) {
    return Usage("--rank " + std::to_string(o.rank) + ": must be less than --world-size " +
                 std::to_string(o.world_size));
  }
  if (!a->compare_db.empty() &&
      (o.world_size > 1 || a->rank->count() > 0 || a->order != "global")) {
    return Usage("--compare measures one whole dataset; drop --order/--rank/--world-size");
  }
  o.trace_path = a->trace_path;
  if (!a->sweep_text.empty() && !a->compare_db.empty()) {
    return Usage("--sweep and --compare: pick one");
  }
  if (!a->sweep_text.empty() && !a->trace_path.empty()) {
    return Usage("--trace records one configuration; run it without --sweep");
  }
  return 0;
}

// --sweep: every configuration; the report's run is the best one.
int MeasureSweep(const Args& a, pf::Report* report) {
  pf::SweepSpec spec;
  dspipe::Status s = pf::ParseSweep(a.sweep_text, &spec);
  if (!s.ok()) return Usage(s.message());
  pf::SweepResult sweep;
  s = pf::RunSweep(a.path, a.o, spec, &sweep);
  if (!s.ok()) return Fail(s);
  report->run = sweep.runs[static_cast<size_t>(sweep.best)];
  report->sweep = std::move(sweep);
  return 0;
}

// --compare: the folder PATH, then its LMDB (the one the trace records).
int MeasureCompare(const Args& a, pf::Report* report) {
  pf::ProfileOptions folder_options = a.o;
  folder_options.trace_path.clear();
  pf::ProfileResult folder;
  dspipe::Status s = pf::RunFolderProfile(a.path, folder_options, &folder);
  if (!s.ok()) return Fail(s);
  report->folder = std::move(folder);
  s = pf::RunProfile(a.compare_db, a.o, &report->run);
  if (!s.ok()) return Fail(s);
  return 0;
}

// Runs the profile into *report: the --sweep, the --compare or one configuration.
int Measure(const Args& a, pf::Report* report) {
  if (!a.sweep_text.empty()) return MeasureSweep(a, report);
  if (!a.compare_db.empty()) return MeasureCompare(a, report);
  dspipe::Status s = pf::RunProfile(a.path, a.o, &report->run);
  if (!s.ok()) return Fail(s);
  return 0;
}

// Prints the report (unless --quiet) and writes the files asked for.
int Output(const Args& a, const pf::Report& report) {
  if (!a.quiet) std::cout << pf::ReportText(report) << std::flush;
  for (const dspipe::Status& s :
       {Write(a.json_path, "JSON", pf::ReportJson(report).dump(2) + "\n"),
        Write(a.csv_path, "CSV", pf::ReportCsv(report)),
        Write(a.timeline_csv, "timeline CSV", pf::ReportTimelineCsv(report)),
        Write(a.epochs_csv, "epochs CSV", pf::ReportEpochsCsv(report)),
        Write(a.report_path, "HTML report", pf::ReportHtml(report))}) {
    if (!s.ok()) return Fail(s);
  }
  if (!a.quiet && !a.trace_path.empty()) std::cout << "trace: " << a.trace_path << "\n";
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{
      "dsbench: run the dspipe loader over a dataset, time every stage and name the bottleneck.\n"
      "  dsbench DB [options]              profile the LMDB dataset DB\n"
      "  dsbench SRC_DIR --compare DB      the image/mask folder and its LMDB side by side"};
  Args args;
  AddOptions(app, &args);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    const int rc = app.exit(e);  // prints help, or the error and a hint
    return rc == 0 ? 0 : 2;
  }
  if (int rc = ToProfileOptions(&args); rc != 0) return rc;
  pf::Report report;
  if (int rc = Measure(args, &report); rc != 0) return rc;
  return Output(args, report);
}
