// SPDX-License-Identifier: Apache-2.0
// BuildDataset (dspipe/convert.h): the options check (ValidateBuildOptions), then the steps in
// order — plan (build_plan.cc), each shard's commit loop (build_commit.cc), finish
// (build_finish.cc) — and a finished output's --resume. builder.h maps the files.
#include "convert/builder.h"

#include <chrono>
#include <cmath>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <stdexcept>

#include "dspipe/limits.h"
#include "format/manifest.h"

namespace dspipe {
namespace convert {

Status Builder::Run() {
  const auto t0 = std::chrono::steady_clock::now();
  DSPIPE_RETURN_IF_ERROR(Validate());
  bool fresh = true;
  DSPIPE_RETURN_IF_ERROR(PrepareOutput(&fresh));
  if (!fresh) {
    std::unique_ptr<Dataset> ds;
    if (Dataset::Open(Target(), DatasetOpenOptions{}, &ds).ok()) {
      // Finished: still refuse other options (a different SRC, --gray, --store, --resize ...)
      // rather than report success for a build that was not asked for.
      const json m = json::parse(ds->info().manifest_json, nullptr, false);
      const json stored = m.is_object() && m.contains("build") && m["build"].is_object() &&
                                  m["build"].contains("options")
                              ? m["build"]["options"]
                              : json();
      DSPIPE_RETURN_IF_ERROR(CheckResumeOptions(stored, Fingerprint(o_, source_abs_), o_.output));
      const uint64_t records = ds->size();
      if (m.is_object() && m.contains("build") && m["build"].is_object()) {
        const json& n = m["build"].value("empty_slices", json(0));
        if (n.is_number_unsigned()) result_->empty_slices = n.get<uint64_t>();
      }
      const bool one_lmdb = o_.shards == 1 && ds->info().kind == DatasetKind::kDspipe;
      const std::string manifest = ds->info().manifest_json;
      ds.reset();  // the state shard is opened next (LMDB: one open per process)
      // Finished from another source is no more this build than one with other options.
      DSPIPE_RETURN_IF_ERROR(CheckFinishedSourceUnchanged());
      result_->already_complete = true;
      result_->records = records;
      // One shard, killed after its final commit but before manifest.json: write it now. (Not
      // a shard built alone with --shard-index: assemble writes the dataset's manifest.json.)
      if (one_lmdb && !env_->FileExists(o_.output + "/" + format::kTopManifestFile)) {
        DSPIPE_RETURN_IF_ERROR(WriteFileList(manifest, {"data.mdb"}));
      }
      return Status::OK();
    }
  }
  DSPIPE_RETURN_IF_ERROR(Plan(fresh));
  // Images kept as one file per channel: the volume reader reads each case's files (the plan,
  // fresh or resumed, names the first).
  if (plan_meta_.contains("volumes")) {
    for (const json& v : plan_meta_.at("volumes").at("list")) {
      if (v.contains("channel_files")) {
        volumes_.SetChannels(v.at("image").get<std::string>(),
                             v.at("channel_files").get<std::vector<std::string>>());
      }
    }
  }
  resuming_ = !fresh;
  result_->sources = plan_.size();
  Accum acc;
  for (int s = 0; s < o_.shards; ++s) {
    if (OneShard() && s != o_.shard_index) continue;
    DSPIPE_RETURN_IF_ERROR(BuildShard(s, &acc));
  }
  DSPIPE_RETURN_IF_ERROR(Finish(acc));
  result_->seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return Status::OK();
}

}  // namespace convert

// Every check here reads the options alone (no file), so BuildDataset refuses bad ones before
// it creates the output, and a front end (dsconvert) can call it as its own up-front check.
Status ValidateBuildOptions(const BuildOptions& o) {
  if (o.source.empty() || o.output.empty()) {
    return Status::InvalidArgument("source and output are required");
  }
  if (o.shards < 1 || o.shards > 4096) {
    return Status::InvalidArgument(Opt("BuildOptions::shards") + " must be 1..4096");
  }
  if (o.shard_index < -1 || o.shard_index >= o.shards || (o.shard_index >= 0 && o.shards < 2)) {
    return Status::InvalidArgument(
        Opt("BuildOptions::shard_index") + " must be 0.." + std::to_string(o.shards - 1) +
        " and needs " + Opt("BuildOptions::shards") + " > 1, got " + std::to_string(o.shard_index));
  }
  if ((o.resize_width > 0) != (o.resize_height > 0) || o.resize_width < 0 || o.resize_height < 0) {
    return Status::InvalidArgument(Opt("BuildOptions::resize_width") + " and " +
                                   Opt("BuildOptions::resize_height") +
                                   " must both be positive, or both 0 (keep the size)");
  }
  if (o.depth != 0 && o.depth != 8) {
    return Status::InvalidArgument(Opt("BuildOptions::depth") +
                                   " must be 0 (the source's own) or 8 (reduce 16-bit images to "
                                   "their high byte), got " +
                                   std::to_string(o.depth));
  }
  if (!o.mask_map.empty()) {
    uint8_t lut[256];
    DSPIPE_RETURN_IF_ERROR(convert::ParseMaskMap(o.mask_map, lut));
  }
  volume::SliceAxis axis;
  if (!volume::ParseSliceAxis(o.slice_axis, &axis).ok()) {
    return Status::InvalidArgument(Opt("BuildOptions::slice_axis") +
                                   " must be axial, coronal or sagittal, got '" + o.slice_axis +
                                   "'");
  }
  if (o.context < 0 || (2 * o.context + 1) > kMaxChannels) {
    return Status::InvalidArgument(
        Opt("BuildOptions::context") + " must be 0.." + std::to_string((kMaxChannels - 1) / 2) +
        " (2K+1 slices as channels; a record holds at most " + std::to_string(kMaxChannels) +
        "), got " + std::to_string(o.context));
  }
  auto G = [](double v) {
    char b[32];
    std::snprintf(b, sizeof b, "%g", v);
    return std::string(b);
  };
  const bool spacing_ok =
      (o.spacing_rows == 0 && o.spacing_cols == 0) ||
      (std::isfinite(o.spacing_rows) && std::isfinite(o.spacing_cols) && o.spacing_rows >= 0.01 &&
       o.spacing_cols >= 0.01 && o.spacing_rows <= 1000 && o.spacing_cols <= 1000);
  if (!spacing_ok) {
    return Status::InvalidArgument(
        Opt("BuildOptions::spacing_rows,BuildOptions::spacing_cols") +
        " (rows, columns) must be both 0 (the volumes' own) or both 0.01..1000 mm, got " +
        G(o.spacing_rows) + " and " + G(o.spacing_cols));
  }
  const DecodeLimits lim = GetDecodeLimits();
  if (!(o.slice_height == 0 && o.slice_width == 0) &&
      !(o.slice_height >= 1 && o.slice_width >= 1 &&
        static_cast<uint32_t>(o.slice_height) <= lim.max_side &&
        static_cast<uint32_t>(o.slice_width) <= lim.max_side &&
        uint64_t(o.slice_height) * uint64_t(o.slice_width) <= lim.max_pixels)) {
    return Status::InvalidArgument(
        Opt("BuildOptions::slice_height,BuildOptions::slice_width") +
        " (height, width) must be both 0 (the slices' own size) or both 1.." +
        std::to_string(lim.max_side) + " with at most " + std::to_string(lim.max_pixels) +
        " pixels (the decode limits), got " + std::to_string(o.slice_height) + " and " +
        std::to_string(o.slice_width));
  }
  if (o.max_side < 0) {
    return Status::InvalidArgument(Opt("BuildOptions::max_side") + " must be >= 0 (0 = off), got " +
                                   std::to_string(o.max_side));
  }
  if (o.max_side > 0 && o.resize_width > 0) {
    return Status::InvalidArgument(
        Opt("BuildOptions::max_side") + " excludes " + Opt("BuildOptions::resize_width") + " (" +
        Opt("BuildOptions::resize_width") + " sets the size; pass one of them)");
  }
  if (o.jpeg_quality < 0 || o.jpeg_quality > 100) {
    return Status::InvalidArgument(Opt("BuildOptions::jpeg_quality") +
                                   " must be 1..100, or 0 (keep the bytes), got " +
                                   std::to_string(o.jpeg_quality));
  }
  if (o.jpeg_quality > 0 && o.store == StoreMode::kRaw) {
    return Status::InvalidArgument(Opt("BuildOptions::jpeg_quality") +
                                   " stores JPEGs; it excludes " +
                                   Opt("BuildOptions::store", "raw"));
  }
  if (o.jpeg_restarts && o.store == StoreMode::kRaw) {
    return Status::InvalidArgument(Opt("BuildOptions::jpeg_restarts") +
                                   " stores JPEGs; it excludes " +
                                   Opt("BuildOptions::store", "raw"));
  }
  if (o.compression == Compression::kNone && o.store != StoreMode::kRaw) {
    return Status::InvalidArgument(Opt("BuildOptions::compression", "none") + " applies to " +
                                   Opt("BuildOptions::store", "raw") +
                                   " (encoded records keep the file's bytes)");
  }
  if (o.zstd_level < 1 || o.zstd_level > 22) {
    return Status::InvalidArgument(Opt("BuildOptions::zstd_level") + " must be 1..22");
  }
  if (o.resume && o.overwrite) {
    return Status::InvalidArgument(Opt("BuildOptions::resume") + " and " +
                                   Opt("BuildOptions::overwrite") + " exclude each other");
  }
  if (o.threads < 0) {
    return Status::InvalidArgument(Opt("BuildOptions::threads") + " must be >= 0");
  }
  const UrlScheme out = ClassifyUrl(o.output);
  if (out != UrlScheme::kPath && out != UrlScheme::kS3) {
    return Status::InvalidArgument(Opt("BuildOptions::output") + " " + RedactUrl(o.output) +
                                   ": must be a local directory or an s3://bucket/prefix/ URL");
  }
  if (out == UrlScheme::kS3 && o.shard_index >= 0) {
    return Status::InvalidArgument(
        Opt("BuildOptions::shard_index") + " builds one shard for AssembleDataset to join: build " +
        "the shards into a local directory, assemble it, then PushDataset (dsconvert push) it; " +
        Opt("BuildOptions::output") + " s3://... builds and pushes the whole dataset");
  }
  if (out != UrlScheme::kS3 && !o.staging.empty()) {
    return Status::InvalidArgument(Opt("BuildOptions::staging") + " applies to " +
                                   Opt("BuildOptions::output", "s3://bucket/prefix/") +
                                   " only (a local output is built in place)");
  }
  return Status::OK();
}

Status BuildDataset(const BuildOptions& options, BuildResult* result) {
  *result = BuildResult{};
  if (ClassifyUrl(options.output) == UrlScheme::kS3) {
    DSPIPE_RETURN_IF_ERROR(ValidateBuildOptions(options));
    return convert::BuildAndPush(options, result);  // build_push.cc: builds here first, then pushes
  }
  convert::Builder b(options, result);
  // The stored build state and cursor are JSON that a crash, a fault or a hand edit may have
  // damaged; their readers throw (nlohmann::json, std::vector::at). Found by
  // tests/fuzz/fuzz_build_state: report it, never terminate.
  try {
    return b.Run();
  } catch (const nlohmann::json::exception& e) {
    return Status::Corruption(options.output + ": bad build state or cursor: " + e.what());
  } catch (const std::out_of_range& e) {
    return Status::Corruption(options.output + ": bad build state or cursor: " + e.what());
  }
}

}  // namespace dspipe
