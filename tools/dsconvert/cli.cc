// SPDX-License-Identifier: Apache-2.0
// dsconvert's commands (cli.h): synth | build | assemble | verify | info | fetch | push. Parses
// flags and calls the library (dspipe/convert.h, dspipe/synth.h, dspipe/fetch.h, dspipe/push.h,
// dspipe/cache.h). Exit codes: 0 ok, 1 failure (message on stderr), 2 bad usage, 3 verify found
// bad records.
#include "cli.h"

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <iostream>

#include "../option_names.h"
#include "../size_arg.h"
#include "dspipe/cache.h"
#include "dspipe/convert.h"
#include "dspipe/fetch.h"
#include "dspipe/limits.h"
#include "dspipe/push.h"
#include "dspipe/synth.h"
#include "progress.h"

namespace {

int Fail(const dspipe::Status& s) {
  std::fprintf(stderr, "dsconvert: %s\n", dspipe::cli::Describe(s).c_str());
  return 1;
}

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

// The push's summary line; `nothing` ends the one for a dataset already there.
void PrintPushed(const std::string& db, const std::string& url, const dspipe::PushResult& r,
                 const char* nothing) {
  if (r.already_present) {
    std::printf("%s is already at %s (%llu files checked); %s\n", db.c_str(), url.c_str(),
                static_cast<unsigned long long>(r.files), nothing);
    return;
  }
  std::printf("pushed %s -> %s: %llu files, %llu bytes (%llu uploaded in %llu parts", db.c_str(),
              url.c_str(), static_cast<unsigned long long>(r.files),
              static_cast<unsigned long long>(r.bytes),
              static_cast<unsigned long long>(r.bytes_uploaded),
              static_cast<unsigned long long>(r.parts_uploaded));
  if (r.parts_resumed) {
    std::printf(", %llu parts kept from an interrupted push",
                static_cast<unsigned long long>(r.parts_resumed));
  }
  if (r.files_in_place) {
    std::printf(", %llu files already there", static_cast<unsigned long long>(r.files_in_place));
  }
  std::printf("), every part's MD5 and each file's sha256 checked, manifest.json last\n");
}

// verify/info of a dataset URL (http(s)://, s3://) read the cache's verified copy, made as the
// Loader makes it (docs/CACHE.md "A dataset URL"); a local path is used in place.
dspipe::Status LocalCopy(const std::string& db, std::string* path,
                         std::unique_ptr<dspipe::CacheLease>* lease) {
  dspipe::CacheOptions co;
  co.mode = "off";  // a local path stays in place; a URL takes "off" as "auto"
  dspipe::CacheResult r;
  DSPIPE_RETURN_IF_ERROR(dspipe::AcquireCache(db, co, &r, lease));
  *path = r.path;
  return dspipe::Status::OK();
}

int Run(int argc, char** argv) {
  CLI::App app{"dsconvert: turn image/mask datasets into LMDB for dspipe"};
  app.require_subcommand(1);

  // ---- synth
  dspipe::SynthOptions so;
  std::string synth_size = "512x512";
  auto* synth = app.add_subcommand("synth", "write a deterministic synthetic image/mask dataset");
  synth->add_option("out_dir", so.out_dir, "output folder (images/, masks/)")->required();
  synth->add_option("--count", so.count, "number of samples")->capture_default_str();
  synth->add_option("--size", synth_size, "HxW (height x width, as everywhere in dspipe)")
      ->capture_default_str();
  synth->add_option("--seed", so.seed, "random seed")->capture_default_str();
  synth->add_option("--format", so.format, "image format")
      ->check(CLI::IsMember({"png", "jpg"}))
      ->capture_default_str();
  synth->add_option("--classes", so.classes, "mask classes K (ids 0..K-1)")->capture_default_str();
  synth->add_option("--threads", so.threads, "threads (0 = all cores)")->capture_default_str();

  // ---- build
  dspipe::BuildOptions bo;
  std::string store = "encoded", size, resize, spacing, on_error = "fail", check = "header";
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
  build->add_option("--store", store, "encoded: original bytes; raw: decoded pixels + zstd")
      ->check(CLI::IsMember({"encoded", "raw"}))
      ->capture_default_str();
  std::string compression = "zstd";
  build
      ->add_option("--compression", compression,
                   "--store raw: zstd (smaller) or none (no decode; tmpfs / fast local disk)")
      ->check(CLI::IsMember({"zstd", "none"}))
      ->capture_default_str();
  build->add_option("--zstd-level", bo.zstd_level, "zstd level for --store raw")
      ->capture_default_str();
  auto* size_opt = build->add_option(
      "--size", size, "HxW: resize every sample to it (images area/linear, masks nearest)");
  build
      ->add_option("--resize", resize,
                   "deprecated: WxH (width first); write --size HxW (height first)")
      ->excludes(size_opt);
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
  build->add_option("--spacing", spacing,
                    "volume sources: resample the slices in plane to this voxel size in mm, RxC "
                    "(between rows x between columns, e.g. 0.8x0.8): images bilinear (stored "
                    "float32), labels nearest, as MONAI's Spacingd");
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
  build->add_option("--on-error", on_error, "fail, or skip bad files (listed in rejected.tsv)")
      ->check(CLI::IsMember({"fail", "skip"}))
      ->capture_default_str();
  build->add_option("--check", check, "header: headers + completeness; decode: decode all")
      ->check(CLI::IsMember({"header", "decode"}))
      ->capture_default_str();
  bool no_detect_masks = false;
  build
      ->add_option("--image-key", bo.plain.image_key,
                   "plain LMDB SRC: image key pattern, e.g. img_{id}")
      ->capture_default_str();
  build->add_option("--mask-key", bo.plain.mask_key,
                    "plain LMDB SRC: mask key pattern, e.g. {key}_mask or mask_{id}");
  build->add_option("--masks", bo.plain.masks, "plain LMDB SRC: second LMDB holding the masks");
  build->add_option("--labels", bo.plain.labels, "plain LMDB SRC: key,label CSV file");
  build->add_flag("--no-detect-masks", no_detect_masks,
                  "plain LMDB SRC: don't pair keys like K_mask / mask_K automatically");
  build->add_option("--ignore-keys", bo.plain.ignore_keys,
                    "plain LMDB SRC: keys that are not samples, comma-separated globs (meta_*)");
  bool quiet = false;
  build->add_flag("-q,--quiet", quiet, "no progress output");
  build
      ->add_option("--stats-sample", bo.stats_sample,
                   "images decoded for mean/std with --store encoded --check header")
      ->capture_default_str();
  bool no_sync = false;
  build->add_flag("--no-sync", no_sync,
                  "don't fsync before writing the manifest (faster; unsafe on power loss)");
  double commit_mb = 64;
  build->add_option("--commit-mb", commit_mb, "MiB per LMDB transaction (crash loses at most one)")
      ->capture_default_str();
  double archive_buffer_mb = static_cast<double>(bo.archive_buffer_bytes >> 20);
  build
      ->add_option("--archive-buffer-mb", archive_buffer_mb,
                   "archive SRC: MiB of memory for it (held whole when it fits, else "
                   "members kept from the listing pass)")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);

  // ---- assemble
  std::string assemble_dir;
  auto* assemble = app.add_subcommand(
      "assemble", "join the shards built one at a time (--shard-index) into one dataset");
  assemble->add_option("out", assemble_dir, "the dataset directory (OUT of the shard builds)")
      ->required();

  // ---- verify / info
  std::string db;
  int verify_threads = 0;
  auto* verify = app.add_subcommand("verify", "check every record's checksum and decode it");
  verify->add_option("db", db, "dataset")->required();
  verify->add_option("--threads", verify_threads, "threads (0 = all cores)");
  bool verify_no_sha = false;
  verify->add_flag("--no-sha256", verify_no_sha,
                   "check the listed files' sizes but not their sha256");
  auto* info = app.add_subcommand("info", "print count, shapes, storage, sizes, mean/std");
  info->add_option("db", db, "dataset")->required();

  // Decode limits (dspipe/limits.h), for every subcommand: images whose headers declare more
  // are refused with a message naming these flags.
  dspipe::DecodeLimits limits;
  for (CLI::App* sub : {build, verify, info}) {
    sub->add_option("--max-image-side", limits.max_side,
                    "refuse images wider or taller than this (pixels)")
        ->capture_default_str();
    sub->add_option("--max-image-pixels", limits.max_pixels,
                    "refuse images with more pixels than this")
        ->capture_default_str();
  }

  // ---- push
  std::string push_db, push_url;
  dspipe::PushOptions po;
  double push_part_mb = 16;
  bool push_quiet = false;
  auto* push = app.add_subcommand(
      "push",
      "upload a dataset to s3://bucket/prefix/ (multipart, every part's MD5 checked, "
      "resumable after a kill, manifest.json last; a re-push checks and uploads nothing)");
  push->add_option("db", push_db, "dataset directory (with manifest.json)")->required();
  push->add_option("url", push_url, "s3://bucket/prefix/")->required();
  push->add_option("--part-mb", push_part_mb, "multipart part size in MiB (at least 5)")
      ->capture_default_str()
      ->check(CLI::Range(5.0, 5120.0));
  push->add_option("--retries", po.fetch.retries, "retries in a row of a failed request")
      ->capture_default_str();
  push->add_flag("--overwrite", po.overwrite,
                 "replace what is at the prefix when it is not this dataset's (another dataset, "
                 "a foreign manifest.json or objects): only the dataset's names are written; "
                 "other objects are left");
  push->add_flag("-q,--quiet", push_quiet, "no progress output");

  // ---- fetch
  std::string fetch_url, fetch_dest;
  dspipe::FetchOptions fo;
  bool fetch_quiet = false;
  auto* fetch = app.add_subcommand(
      "fetch",
      "resumable, verified download of URL (http, https, s3, file://) or copy of a path; "
      "with --dataset (or a URL whose path ends in '/') a whole dataset directory; a "
      "URL's query (a signature or token) is sent, never printed");
  fetch->add_option("url", fetch_url, "http(s)://, s3:// or file:// URL, or a local path")
      ->required();
  fetch->add_option("dest", fetch_dest,
                    "destination file (DEST.part while in progress); an existing directory, or "
                    "none (the current one): the file named after the URL's path goes there");
  fetch->add_option("--sha256", fo.sha256, "expected sha256 (64 hex digits)");
  auto* bytes_opt =
      fetch->add_option("--bytes", fo.size, "expected size in bytes (-1 = the server's)")
          ->capture_default_str();
  int64_t fetch_size_deprecated = -1;
  auto* fetch_size_opt =
      fetch->add_option("--size", fetch_size_deprecated, "deprecated: write --bytes")
          ->excludes(bytes_opt);
  fetch->add_option("--retries", fo.retries, "retries in a row without progress")
      ->capture_default_str();
  fetch
      ->add_option("--stall-seconds", fo.low_speed_time_s,
                   "abort and retry a transfer below 1 KiB/s for this long")
      ->capture_default_str();
  fetch->add_flag("-q,--quiet", fetch_quiet, "no progress output");
  bool fetch_dataset = false;
  fetch->add_flag("--dataset", fetch_dataset,
                  "URL is a dataset directory: fetch its manifest.json and every file it lists "
                  "into the directory DEST (implied by a URL whose path ends in '/')");

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? 0 : 2;
  }
  dspipe::SetDecodeLimits(limits);

  if (*synth) {
    if (!dspipe::cli::ParseHeightWidth(synth_size, &so.height, &so.width)) {
      std::fprintf(stderr, "dsconvert synth: --size must be HxW (height x width), got '%s'\n",
                   synth_size.c_str());
      return 2;
    }
    if (so.height != so.width) {
      // The order changed in this release (it was WxH): a non-square size says which it is.
      std::fprintf(stderr,
                   "dsconvert synth: --size %s is %d rows x %d columns (HxW, as dsbench and "
                   "Python read sizes; before this release synth read it as WxH)\n",
                   synth_size.c_str(), so.height, so.width);
    }
    dspipe::Status s = dspipe::Synthesize(so);
    if (!s.ok()) return Fail(s);
    std::printf("wrote %d samples (%dx%d %s, %d classes) to %s\n", so.count, so.height, so.width,
                so.format.c_str(), so.classes, so.out_dir.c_str());
    return 0;
  }
  if (*build) {
    if (!size.empty() &&
        !dspipe::cli::ParseHeightWidth(size, &bo.resize_height, &bo.resize_width)) {
      std::fprintf(stderr, "dsconvert build: --size must be HxW (height x width), got '%s'\n",
                   size.c_str());
      return 2;
    }
    if (!spacing.empty() &&
        !dspipe::cli::ParseSpacing(spacing, &bo.spacing_rows, &bo.spacing_cols)) {
      std::fprintf(stderr,
                   "dsconvert build: --spacing must be RxC in mm (between rows x between "
                   "columns, e.g. 0.8x0.8) or one number for both, got '%s'\n",
                   spacing.c_str());
      return 2;
    }
    if (!resize.empty()) {
      // Kept for one release, in its old order (width first), so no script changes meaning.
      if (!dspipe::cli::ParseHeightWidth(resize, &bo.resize_width, &bo.resize_height)) {
        std::fprintf(stderr,
                     "dsconvert build: --resize must be WxH, got '%s' (--resize is "
                     "deprecated: write --size HxW)\n",
                     resize.c_str());
        return 2;
      }
      std::fprintf(stderr,
                   "dsconvert build: --resize WxH is deprecated (sizes are HxW everywhere else): "
                   "write --size %dx%d\n",
                   bo.resize_height, bo.resize_width);
    }
    bo.store = store == "raw" ? dspipe::StoreMode::kRaw : dspipe::StoreMode::kEncoded;
    bo.compression =
        compression == "none" ? dspipe::Compression::kNone : dspipe::Compression::kZstd;
    bo.on_error = on_error == "skip" ? dspipe::OnError::kSkip : dspipe::OnError::kFail;
    bo.sync = !no_sync;
    bo.plain.detect_masks = !no_detect_masks;
    bo.commit_bytes = static_cast<uint64_t>(std::max(0.0, commit_mb) * (1 << 20));
    bo.archive_buffer_bytes = static_cast<uint64_t>(archive_buffer_mb * (1 << 20));
    bo.check = check == "decode" ? dspipe::CheckLevel::kDecode : dspipe::CheckLevel::kHeader;
    // Bad option combinations are a usage error (exit 2), refused before anything is written.
    if (dspipe::Status v = dspipe::ValidateBuildOptions(bo); !v.ok()) {
      std::fprintf(stderr, "dsconvert build: %s\n", dspipe::cli::Describe(v).c_str());
      return 2;
    }
    dspipe::cli::Progress progress("build");
    if (!quiet) bo.progress = [&](uint64_t d, uint64_t t) { progress.Update(d, t); };
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
  if (*assemble) {
    dspipe::AssembleResult r;
    dspipe::Status s = dspipe::AssembleDataset(assemble_dir, &r);
    if (!s.ok()) return Fail(s);
    std::printf("%s %s: %llu records in %d shards\n",
                r.already_complete ? "already assembled" : "assembled", assemble_dir.c_str(),
                static_cast<unsigned long long>(r.records), r.shards);
    if (r.skipped) {
      std::printf("skipped %llu bad files; see %s\n", static_cast<unsigned long long>(r.skipped),
                  r.report_path.c_str());
    }
    return 0;
  }
  if (*verify) {
    dspipe::VerifyOptions vo;
    vo.threads = verify_threads;
    vo.file_sha256 = !verify_no_sha;
    dspipe::VerifyResult r;
    std::string path;
    std::unique_ptr<dspipe::CacheLease> lease;
    dspipe::Status s = LocalCopy(db, &path, &lease);
    if (s.ok()) s = dspipe::VerifyDataset(path, vo, &r);
    if (!s.ok()) return Fail(s);
    for (const std::string& p : r.problems) std::printf("BAD %s\n", p.c_str());
    std::printf("%s: %llu records, %llu bad", dspipe::RedactUrl(db).c_str(),
                static_cast<unsigned long long>(r.records), static_cast<unsigned long long>(r.bad));
    if (r.files_listed) {
      std::printf("; %llu files (%s), %llu bad", static_cast<unsigned long long>(r.files),
                  vo.file_sha256 ? "size + sha256" : "size",
                  static_cast<unsigned long long>(r.bad_files));
    } else {
      std::printf("; no per-file list in the manifest (built by an older dspipe)");
    }
    std::printf("\n");
    return r.bad || r.bad_files ? 3 : 0;
  }
  if (*fetch) {
    if (fetch_size_opt->count() > 0) {
      fo.size = fetch_size_deprecated;
      std::fprintf(stderr,
                   "dsconvert fetch: --size is deprecated (a size is HxW elsewhere): write "
                   "--bytes %lld\n",
                   static_cast<long long>(fo.size));
    }
    dspipe::cli::Progress progress("fetch", dspipe::cli::Progress::Unit::kBytes);
    if (!fetch_quiet) {
      fo.progress = [&](const dspipe::FetchProgress& p) {
        using Phase = dspipe::FetchProgress::Phase;
        if (p.phase == Phase::kTransfer) progress.Update(p.bytes, p.total);
        if (p.phase == Phase::kWaitingForLock)
          progress.Note("another process is fetching " + fetch_dest + "; waiting for it");
        if (p.phase == Phase::kRetryWait) progress.Note("transfer failed; retrying");
        // A dataset verifies each file as it arrives: one note per file would bury the bar.
        if (p.phase == Phase::kVerifying && !fetch_dataset) progress.Note("verifying");
      };
    }
    // The query (a signature or a token) is sent, never shown.
    const std::string shown_url = dspipe::RedactUrl(fetch_url);
    // A dataset URL is one whose path ends in '/' (the query does not count).
    const std::string id = dspipe::UrlIdentity(fetch_url);
    const bool dataset = fetch_dataset || (!id.empty() && id.back() == '/');
    std::error_code ec;
    if (fetch_dest.empty() || (!dataset && std::filesystem::is_directory(fetch_dest, ec))) {
      // Named after the URL's path: never its query, never a name that leaves the directory.
      std::string name;
      dspipe::Status s = dspipe::UrlFileName(fetch_url, &name);
      if (!s.ok()) return Fail(s);
      fetch_dest = fetch_dest.empty() ? name : (std::filesystem::path(fetch_dest) / name).string();
    }
    dspipe::FetchResult r;
    if (dataset) {
      dspipe::Status s = dspipe::FetchDataset(fetch_url, fetch_dest, fo, &r);
      if (!s.ok()) return Fail(s);
      if (r.already_present) {
        std::printf("%s is already present (%llu bytes); nothing to do\n", fetch_dest.c_str(),
                    static_cast<unsigned long long>(r.bytes));
        return 0;
      }
      std::printf("fetched dataset %s -> %s: %llu bytes, every file's size and sha256 verified",
                  shown_url.c_str(), fetch_dest.c_str(), static_cast<unsigned long long>(r.bytes));
      if (r.resumed_from)
        std::printf(" (%llu bytes kept from an interrupted run)",
                    static_cast<unsigned long long>(r.resumed_from));
      if (r.refetches) std::printf(", %d refetches after a failed verification", r.refetches);
      std::printf("\n");
      return 0;
    }
    dspipe::Status s = dspipe::Fetch(fetch_url, fetch_dest, fo, &r);
    if (!s.ok()) return Fail(s);
    if (r.already_present) {
      std::printf("%s is already present (%llu bytes%s); nothing to do\n", fetch_dest.c_str(),
                  static_cast<unsigned long long>(r.bytes), r.sha256.empty() ? "" : ", verified");
      return 0;
    }
    std::printf("fetched %s -> %s: %llu bytes", shown_url.c_str(), fetch_dest.c_str(),
                static_cast<unsigned long long>(r.bytes));
    if (!r.sha256.empty()) std::printf(", sha256 %s verified", r.sha256.c_str());
    if (r.resumed_from)
      std::printf(" (resumed at %llu)", static_cast<unsigned long long>(r.resumed_from));
    if (r.attempts > 1) std::printf(", %d attempts", r.attempts);
    if (r.refetches) std::printf(", refetched after a failed verification");
    std::printf("\n");
    return 0;
  }
  if (*push) {
    po.part_size = static_cast<uint64_t>(push_part_mb * (1 << 20));
    dspipe::cli::Progress progress("push", dspipe::cli::Progress::Unit::kBytes);
    if (!push_quiet) po.progress = [&](uint64_t d, uint64_t t) { progress.Update(d, t); };
    dspipe::PushResult r;
    dspipe::Status s = dspipe::PushDataset(push_db, push_url, po, &r);
    if (!s.ok()) return Fail(s);
    PrintPushed(push_db, push_url, r, "nothing to do");
    return 0;
  }
  if (*info) {
    std::string text, path;
    std::unique_ptr<dspipe::CacheLease> lease;
    dspipe::Status s = LocalCopy(db, &path, &lease);
    if (s.ok()) s = dspipe::DescribeDataset(path, &text);
    if (!s.ok()) return Fail(s);
    if (path != db) std::printf("source:      %s\n", dspipe::RedactUrl(db).c_str());
    std::fputs(text.c_str(), stdout);
    return 0;
  }
  return 2;
}

}  // namespace

int dspipe::cli::DsconvertMain(int argc, char** argv) {
  // The library reports errors as Status; anything thrown is a dspipe bug, but still an exit 1
  // with a message rather than terminate().
  try {
    return Run(argc, argv);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "dsconvert: Internal: unexpected exception: %s\n", e.what());
    return 1;
  }
}
