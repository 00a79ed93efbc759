// SPDX-License-Identifier: Apache-2.0
// dsconvert's commands that move a dataset (commands.h): fetch (a resumable, verified download
// of a file or a dataset directory, dspipe/fetch.h) and push (an upload to s3://, dspipe/push.h).
#include <CLI/CLI.hpp>
#include <cstdio>
#include <filesystem>
#include <string>

#include "commands.h"
#include "dspipe/fetch.h"
#include "dspipe/push.h"
#include "progress.h"

namespace dspipe::cli::dsconvert {

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

CLI::App* AddFetch(CLI::App& app, FetchArgs* a) {
  dspipe::FetchOptions& fo = a->options;
  auto* fetch = app.add_subcommand(
      "fetch",
      "resumable, verified download of URL (http, https, s3, file://) or copy of a path; "
      "with --dataset (or a URL whose path ends in '/') a whole dataset directory; a "
      "URL's query (a signature or token) is sent, never printed");
  fetch->add_option("url", a->url, "http(s)://, s3:// or file:// URL, or a local path")->required();
  fetch->add_option("dest", a->dest,
                    "destination file (DEST.part while in progress); an existing directory, or "
                    "none (the current one): the file named after the URL's path goes there");
  fetch->add_option("--sha256", fo.sha256, "expected sha256 (64 hex digits)");
  auto* bytes_opt =
      fetch->add_option("--bytes", fo.size, "expected size in bytes (-1 = the server's)")
          ->capture_default_str();
  a->size_opt = fetch->add_option("--size", a->size_deprecated, "deprecated: write --bytes")
                    ->excludes(bytes_opt);
  fetch->add_option("--retries", fo.retries, "retries in a row without progress")
      ->capture_default_str();
  fetch
      ->add_option("--stall-seconds", fo.low_speed_time_s,
                   "abort and retry a transfer below 1 KiB/s for this long")
      ->capture_default_str();
  fetch->add_flag("-q,--quiet", a->quiet, "no progress output");
  fetch->add_flag("--dataset", a->dataset,
                  "URL is a dataset directory: fetch its manifest.json and every file it lists "
                  "into the directory DEST (implied by a URL whose path ends in '/')");
  return fetch;
}

int RunFetch(FetchArgs* a) {
  dspipe::FetchOptions& fo = a->options;
  if (a->size_opt->count() > 0) {
    fo.size = a->size_deprecated;
    std::fprintf(stderr,
                 "dsconvert fetch: --size is deprecated (a size is HxW elsewhere): write "
                 "--bytes %lld\n",
                 static_cast<long long>(fo.size));
  }
  dspipe::cli::Progress progress("fetch", dspipe::cli::Progress::Unit::kBytes);
  if (!a->quiet) {
    fo.progress = [&](const dspipe::FetchProgress& p) {
      using Phase = dspipe::FetchProgress::Phase;
      if (p.phase == Phase::kTransfer) progress.Update(p.bytes, p.total);
      if (p.phase == Phase::kWaitingForLock)
        progress.Note("another process is fetching " + a->dest + "; waiting for it");
      if (p.phase == Phase::kRetryWait) progress.Note("transfer failed; retrying");
      // A dataset verifies each file as it arrives: one note per file would bury the bar.
      if (p.phase == Phase::kVerifying && !a->dataset) progress.Note("verifying");
    };
  }
  // The query (a signature or a token) is sent, never shown.
  const std::string shown_url = dspipe::RedactUrl(a->url);
  // A dataset URL is one whose path ends in '/' (the query does not count).
  const std::string id = dspipe::UrlIdentity(a->url);
  const bool dataset = a->dataset || (!id.empty() && id.back() == '/');
  std::error_code ec;
  if (a->dest.empty() || (!dataset && std::filesystem::is_directory(a->dest, ec))) {
    // Named after the URL's path: never its query, never a name that leaves the directory.
    std::string name;
    dspipe::Status s = dspipe::UrlFileName(a->url, &name);
    if (!s.ok()) return Fail(s);
    a->dest = a->dest.empty() ? name : (std::filesystem::path(a->dest) / name).string();
  }
  dspipe::FetchResult r;
  if (dataset) {
    dspipe::Status s = dspipe::FetchDataset(a->url, a->dest, fo, &r);
    if (!s.ok()) return Fail(s);
    if (r.already_present) {
      std::printf("%s is already present (%llu bytes); nothing to do\n", a->dest.c_str(),
                  static_cast<unsigned long long>(r.bytes));
      return 0;
    }
    std::printf("fetched dataset %s -> %s: %llu bytes, every file's size and sha256 verified",
                shown_url.c_str(), a->dest.c_str(), static_cast<unsigned long long>(r.bytes));
    if (r.resumed_from)
      std::printf(" (%llu bytes kept from an interrupted run)",
                  static_cast<unsigned long long>(r.resumed_from));
    if (r.refetches) std::printf(", %d refetches after a failed verification", r.refetches);
    std::printf("\n");
    return 0;
  }
  dspipe::Status s = dspipe::Fetch(a->url, a->dest, fo, &r);
  if (!s.ok()) return Fail(s);
  if (r.already_present) {
    std::printf("%s is already present (%llu bytes%s); nothing to do\n", a->dest.c_str(),
                static_cast<unsigned long long>(r.bytes), r.sha256.empty() ? "" : ", verified");
    return 0;
  }
  std::printf("fetched %s -> %s: %llu bytes", shown_url.c_str(), a->dest.c_str(),
              static_cast<unsigned long long>(r.bytes));
  if (!r.sha256.empty()) std::printf(", sha256 %s verified", r.sha256.c_str());
  if (r.resumed_from)
    std::printf(" (resumed at %llu)", static_cast<unsigned long long>(r.resumed_from));
  if (r.attempts > 1) std::printf(", %d attempts", r.attempts);
  if (r.refetches) std::printf(", refetched after a failed verification");
  std::printf("\n");
  return 0;
}

CLI::App* AddPush(CLI::App& app, PushArgs* a) {
  dspipe::PushOptions& po = a->options;
  auto* push = app.add_subcommand(
      "push",
      "upload a dataset to s3://bucket/prefix/ (multipart, every part's MD5 checked, "
      "resumable after a kill, manifest.json last; a re-push checks and uploads nothing)");
  push->add_option("db", a->db, "dataset directory (with manifest.json)")->required();
  push->add_option("url", a->url, "s3://bucket/prefix/")->required();
  push->add_option("--part-mb", a->part_mb, "multipart part size in MiB (at least 5)")
      ->capture_default_str()
      ->check(CLI::Range(5.0, 5120.0));
  push->add_option("--retries", po.fetch.retries, "retries in a row of a failed request")
      ->capture_default_str();
  push->add_flag("--overwrite", po.overwrite,
                 "replace what is at the prefix when it is not this dataset's (another dataset, "
                 "a foreign manifest.json or objects): only the dataset's names are written; "
                 "other objects are left");
  push->add_flag("-q,--quiet", a->quiet, "no progress output");
  return push;
}

int RunPush(PushArgs* a) {
  dspipe::PushOptions& po = a->options;
  po.part_size = static_cast<uint64_t>(a->part_mb * (1 << 20));
  dspipe::cli::Progress progress("push", dspipe::cli::Progress::Unit::kBytes);
  if (!a->quiet) po.progress = [&](uint64_t d, uint64_t t) { progress.Update(d, t); };
  dspipe::PushResult r;
  dspipe::Status s = dspipe::PushDataset(a->db, a->url, po, &r);
  if (!s.ok()) return Fail(s);
  PrintPushed(a->db, a->url, r, "nothing to do");
  return 0;
}

}  // namespace dspipe::cli::dsconvert
