// SPDX-License-Identifier: Apache-2.0
// dsconvert's commands that write a dataset (commands.h): synth (a synthetic image/mask folder),
// build (a source to LMDB, dspipe/convert.h) and assemble (the shards built one at a time).
#include <CLI/CLI.hpp>
#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <string>

#include "../option_names.h"
#include "../size_arg.h"
#include "commands.h"
#include "dspipe/convert.h"
#include "dspipe/synth.h"
#include "progress.h"

namespace dspipe::cli::dsconvert {

namespace {

void PrintBuilt(const std::string& out, const dspipe::BuildResult& r) {
  std::printf("built %s: %llu records from %llu sources", out.c_str(),
              static_cast<unsigned long long>(r.records),
              static_cast<unsigned long long>(r.sources));
  if (r.resumed_from) {
    std::printf(" (resumed at %llu)", static_cast<unsigned long long>(r.resumed_from));
  }
  std::printf(", %.2f s, %.1f MB/s read\n", r.seconds,
              r.seconds > 0 ? static_cast<double>(r.bytes_read) / 1e6 / r.seconds : 0.0);
  if (r.skipped) {
    std::printf("skipped %llu bad files; see %s\n", static_cast<unsigned long long>(r.skipped),
                r.report_path.empty() ? (out + "/rejected.tsv once assembled").c_str()
                                      : r.report_path.c_str());
  }
  if (r.empty_slices) {
    std::printf("left out %llu slices whose label is empty (--skip-empty)\n",
                static_cast<unsigned long long>(r.empty_slices));
  }
}

}  // namespace

CLI::App* AddSynth(CLI::App& app, SynthArgs* a) {
  dspipe::SynthOptions& so = a->options;
  auto* synth = app.add_subcommand("synth", "write a deterministic synthetic image/mask dataset");
  synth->add_option("out_dir", so.out_dir, "output folder (images/, masks/)")->required();
  synth->add_option("--count", so.count, "number of samples")->capture_default_str();
  synth->add_option("--size", a->size, "HxW (height x width, as everywhere in dspipe)")
      ->capture_default_str();
  synth->add_option("--seed", so.seed, "random seed")->capture_default_str();
  synth->add_option("--format", so.format, "image format")
      ->check(CLI::IsMember({"png", "jpg"}))
      ->capture_default_str();
  synth->add_option("--classes", so.classes, "mask classes K (ids 0..K-1)")->capture_default_str();
  synth->add_option("--threads", so.threads, "threads (0 = all cores)")->capture_default_str();
  return synth;
}

int RunSynth(SynthArgs* a) {
  dspipe::SynthOptions& so = a->options;
  if (!dspipe::cli::ParseHeightWidth(a->size, &so.height, &so.width)) {
    std::fprintf(stderr, "dsconvert synth: --size must be HxW (height x width), got '%s'\n",
                 a->size.c_str());
    return 2;
  }
  if (so.height != so.width) {
    // The order changed in this release (it was WxH): a non-square size says which it is.
    std::fprintf(stderr,
                 "dsconvert synth: --size %s is %d rows x %d columns (HxW, as dsbench and "
                 "Python read sizes; before this release synth read it as WxH)\n",
                 a->size.c_str(), so.height, so.width);
  }
  dspipe::Status s = dspipe::Synthesize(so);
  if (!s.ok()) return Fail(s);
  std::printf("wrote %d samples (%dx%d %s, %d classes) to %s\n", so.count, so.height, so.width,
              so.format.c_str(), so.classes, so.out_dir.c_str());
  return 0;
}

CLI::App* AddBuild(CLI::App& app, BuildArgs* a) {
  dspipe::BuildOptions& bo = a->options;
  auto* build = app.add_subcommand("build",
                                   "convert SRC (folder, CSV, ImageFolder, plain LMDB or "
                                   ".tar/.tar.gz/.tar.zst/.zip of one) to LMDB");
  build
      ->add_option("src", bo.source,
                   "images/+masks/ folder, CSV file, ImageFolder tree or plain LMDB")
      ->required();
  build
      ->add_option("out", bo.output,
                   "output LMDB directory, or s3://bucket/prefix/ (built in --staging, then "
                   "pushed as `push` does, then the staging copy removed)")
      ->required();
  build->add_option("--staging", bo.staging,
                    "OUT s3://...: the local directory it is built in before the push "
                    "(default: one in the temp dir named after the URL)");
  build->add_option("--store", a->store, "encoded: original bytes; raw: decoded pixels + zstd")
      ->check(CLI::IsMember({"encoded", "raw"}))
      ->capture_default_str();
  build
      ->add_option("--compression", a->compression,
                   "--store raw: zstd (smaller) or none (no decode; tmpfs / fast local disk)")
      ->check(CLI::IsMember({"zstd", "none"}))
      ->capture_default_str();
  build->add_option("--zstd-level", bo.zstd_level, "zstd level for --store raw")
      ->capture_default_str();
  auto* size_opt = build->add_option(
      "--size", a->size, "HxW: resize every sample to it (images area/linear, masks nearest)");
  build->add_option("--resize", a->resize, "HxW: the same as --size")->excludes(size_opt);
  build
      ->add_option("--max-side", bo.max_side,
                   "shrink images whose longer side exceeds N to N (aspect kept; re-encoded)")
      ->check(CLI::PositiveNumber)
      ->excludes("--resize")
      ->excludes(size_opt);
  build
      ->add_option("--jpeg-quality", bo.jpeg_quality,
                   "store every image as a JPEG of quality Q (1..100, 4:2:0), not --store raw")
      ->check(CLI::Range(1, 100));
  build->add_flag(
      "--jpeg-restarts", bo.jpeg_restarts,
      "store JPEGs with a restart marker per MCU (lossless): crops decode only their MCUs");
  build->add_flag("--gray", bo.gray, "store 1-channel images");
  build
      ->add_option("--depth", bo.depth,
                   "8: reduce 16-bit images to their high byte (without it, 16-bit and float "
                   "images are kept as they are)")
      ->check(CLI::IsMember({0, 8}));
  build->add_flag("--pages-as-channels", bo.pages_as_channels,
                  "stack the pages of a multi-page TIFF (16-bit or float) as channels; without "
                  "it such TIFFs are refused");
  build->add_option("--mask-map", bo.mask_map,
                    "rewrite mask ids while building: FROM:TO,... (ids 0..255; 255:1 turns 0/255 "
                    "binary masks into classes 0 and 1)");
  build
      ->add_option(
          "--slice-axis", bo.slice_axis,
          "volume sources (NIfTI, DICOM series): cut the canonical (RAS) volume along this axis")
      ->check(CLI::IsMember({"axial", "coronal", "sagittal"}))
      ->capture_default_str();
  build->add_flag("--allow-empty-classes", bo.allow_empty_classes,
                  "class subfolders: keep a class folder holding no image as a label with no "
                  "samples (refused otherwise, as torchvision's ImageFolder does)");
  build->add_flag("--drop-alpha", bo.drop_alpha,
                  "8-bit images with transparent pixels: store the colour channels and drop the "
                  "alpha (refused otherwise; an opaque alpha is dropped without loss)");
  build->add_flag("--skip-empty", bo.skip_empty,
                  "volume sources with labels: leave out slices whose label is all 0 (after "
                  "--mask-map); the manifest lists the kept slices");
  build
      ->add_option("--context", bo.context,
                   "volume sources: 2.5D, the K slices on each side of a record's slice as "
                   "channels too (2K+1 slices, clamped at the volume's ends)")
      ->capture_default_str();
  build->add_option("--spacing", a->spacing,
                    "volume sources: resample the slices in plane to this voxel size in mm, RxC "
                    "(between rows x between columns, e.g. 0.8x0.8): images bilinear (stored "
                    "float32), labels nearest, as MONAI's Spacingd");
  build->add_option("--slice-size", a->slice_size,
                    "volume sources: pad or crop every slice about its centre to HxW (height x "
                    "width, after --spacing; padding 0), as MONAI's ResizeWithPadOrCropd");
  build->add_flag("--shuffle", bo.shuffle, "shuffle record order (with --seed)");
  build->add_option("--seed", bo.seed, "shuffle seed")->capture_default_str();
  build->add_option("--threads", bo.threads, "threads (0 = all cores)")->capture_default_str();
  build->add_option("--shards", bo.shards, "number of LMDB shards")->capture_default_str();
  build
      ->add_option("--shard-index", bo.shard_index,
                   "build only this shard (0..N-1) of a --shards N build; then `assemble`")
      ->check(CLI::NonNegativeNumber);
  build->add_flag("--resume", bo.resume, "continue an interrupted build");
  build->add_flag("--overwrite", bo.overwrite, "replace an existing output");
  build->add_option("--on-error", a->on_error, "fail, or skip bad files (listed in rejected.tsv)")
      ->check(CLI::IsMember({"fail", "skip"}))
      ->capture_default_str();
  build->add_option("--check", a->check, "header: headers + completeness; decode: decode all")
      ->check(CLI::IsMember({"header", "decode"}))
      ->capture_default_str();
  build
      ->add_option("--image-key", bo.plain.image_key,
                   "plain LMDB SRC: image key pattern, e.g. img_{id}")
      ->capture_default_str();
  build->add_option("--mask-key", bo.plain.mask_key,
                    "plain LMDB SRC: mask key pattern, e.g. {key}_mask or mask_{id}");
  build->add_option("--masks", bo.plain.masks, "plain LMDB SRC: second LMDB holding the masks");
  build->add_option("--labels", bo.plain.labels, "plain LMDB SRC: key,label CSV file");
  build->add_flag("--no-detect-masks", a->no_detect_masks,
                  "plain LMDB SRC: don't pair keys like K_mask / mask_K automatically");
  build->add_flag("--scan-keys", bo.plain.scan_keys,
                  "plain LMDB SRC: list every key at open, even when they look like 0..N-1 "
                  "(which are otherwise checked by probes)");
  build->add_option("--ignore-keys", bo.plain.ignore_keys,
                    "plain LMDB SRC: keys that are not samples, comma-separated globs (meta_*)");
  build->add_flag("-q,--quiet", a->quiet, "no progress output");
  build
      ->add_option("--stats-sample", bo.stats_sample,
                   "images decoded for mean/std with --store encoded --check header")
      ->capture_default_str();
  build->add_flag("--no-sync", a->no_sync,
                  "don't fsync before writing the manifest (faster; unsafe on power loss)");
  build
      ->add_option("--commit-mb", a->commit_mb,
                   "MiB per LMDB transaction (crash loses at most one)")
      ->capture_default_str();
  build
      ->add_option("--archive-buffer-mb", a->archive_buffer_mb,
                   "archive SRC: MiB of memory for it (held whole when it fits, else "
                   "members kept from the listing pass)")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  return build;
}

int RunBuild(BuildArgs* a) {
  dspipe::BuildOptions& bo = a->options;
  if (!a->size.empty() &&
      !dspipe::cli::ParseHeightWidth(a->size, &bo.resize_height, &bo.resize_width)) {
    std::fprintf(stderr, "dsconvert build: --size must be HxW (height x width), got '%s'\n",
                 a->size.c_str());
    return 2;
  }
  if (!a->spacing.empty() &&
      !dspipe::cli::ParseSpacing(a->spacing, &bo.spacing_rows, &bo.spacing_cols)) {
    std::fprintf(stderr,
                 "dsconvert build: --spacing must be RxC in mm (between rows x between "
                 "columns, e.g. 0.8x0.8) or one number for both, got '%s'\n",
                 a->spacing.c_str());
    return 2;
  }
  if (!a->slice_size.empty() &&
      !dspipe::cli::ParseHeightWidth(a->slice_size, &bo.slice_height, &bo.slice_width)) {
    std::fprintf(stderr, "dsconvert build: --slice-size must be HxW (height x width), got '%s'\n",
                 a->slice_size.c_str());
    return 2;
  }
  if (!a->resize.empty()) {
    // Height first, as --size and every other size (it read width first before this release):
    // a size whose sides differ says what it makes, so an old script's transposed size shows.
    if (!dspipe::cli::ParseHeightWidth(a->resize, &bo.resize_height, &bo.resize_width)) {
      std::fprintf(stderr, "dsconvert build: --resize must be HxW (height x width), got '%s'\n",
                   a->resize.c_str());
      return 2;
    }
    if (bo.resize_height != bo.resize_width) {
      std::fprintf(stderr,
                   "dsconvert build: --resize %s is %d rows x %d columns (HxW, as --size, dsbench "
                   "and Python read it; before this release --resize read width first)\n",
                   a->resize.c_str(), bo.resize_height, bo.resize_width);
    }
  }
  bo.store = a->store == "raw" ? dspipe::StoreMode::kRaw : dspipe::StoreMode::kEncoded;
  bo.compression =
      a->compression == "none" ? dspipe::Compression::kNone : dspipe::Compression::kZstd;
  bo.on_error = a->on_error == "skip" ? dspipe::OnError::kSkip : dspipe::OnError::kFail;
  bo.sync = !a->no_sync;
  bo.plain.detect_masks = !a->no_detect_masks;
  bo.commit_bytes = static_cast<uint64_t>(std::max(0.0, a->commit_mb) * (1 << 20));
  bo.archive_buffer_bytes = static_cast<uint64_t>(a->archive_buffer_mb * (1 << 20));
  bo.check = a->check == "decode" ? dspipe::CheckLevel::kDecode : dspipe::CheckLevel::kHeader;
  // Bad option combinations are a usage error (exit 2), refused before anything is written.
  if (dspipe::Status v = dspipe::ValidateBuildOptions(bo); !v.ok()) {
    std::fprintf(stderr, "dsconvert build: %s\n", dspipe::cli::Describe(v).c_str());
    return 2;
  }
  dspipe::cli::Progress progress("build");
  if (!a->quiet) bo.progress = [&](uint64_t d, uint64_t t) { progress.Update(d, t); };
  dspipe::BuildResult r;
  dspipe::Status s = dspipe::BuildDataset(bo, &r);
  if (!s.ok()) return Fail(s);
  if (r.already_complete && !r.pushed) {
    std::printf("%s is already complete (%llu records); nothing to do\n", bo.output.c_str(),
                static_cast<unsigned long long>(r.records));
    return 0;
  }
  if (r.already_complete) {
    std::printf("%s is already built (%llu records)\n", r.staging.c_str(),
                static_cast<unsigned long long>(r.records));
  } else {
    PrintBuilt(r.pushed ? r.staging : bo.output, r);
  }
  if (r.pushed) {
    PrintPushed(r.staging, bo.output, r.push, "nothing pushed");
    std::error_code ec;
    const char* left = !std::filesystem::exists(r.staging, ec) ? "removed"
                       : !r.report_path.empty() ? "dataset files removed, the report kept"
                                                : "left in place (it holds files the build "
                                                  "did not write)";
    std::printf("%s: %s\n", r.staging.c_str(), left);
  }
  return 0;
}

CLI::App* AddAssemble(CLI::App& app, AssembleArgs* a) {
  auto* assemble = app.add_subcommand(
      "assemble", "join the shards built one at a time (--shard-index) into one dataset");
  assemble->add_option("out", a->dir, "the dataset directory (OUT of the shard builds)")
      ->required();
  return assemble;
}

int RunAssemble(const AssembleArgs& a) {
  dspipe::AssembleResult r;
  dspipe::Status s = dspipe::AssembleDataset(a.dir, &r);
  if (!s.ok()) return Fail(s);
  std::printf("%s %s: %llu records in %d shards\n",
              r.already_complete ? "already assembled" : "assembled", a.dir.c_str(),
              static_cast<unsigned long long>(r.records), r.shards);
  if (r.skipped) {
    std::printf("skipped %llu bad files; see %s\n", static_cast<unsigned long long>(r.skipped),
                r.report_path.c_str());
  }
  return 0;
}

}  // namespace dspipe::cli::dsconvert
