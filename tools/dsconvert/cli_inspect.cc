// SPDX-License-Identifier: Apache-2.0
// dsconvert's commands that read a dataset (commands.h): verify (every record's checksum and
// decode, the listed files' sizes and sha256) and info (count, shapes, storage, sizes, mean/std).
#include <CLI/CLI.hpp>
#include <cstdio>
#include <memory>
#include <string>

#include "commands.h"
#include "dspipe/cache.h"
#include "dspipe/convert.h"
#include "dspipe/fetch.h"

namespace dspipe::cli::dsconvert {

namespace {

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

}  // namespace

CLI::App* AddVerify(CLI::App& app, VerifyArgs* a) {
  auto* verify = app.add_subcommand("verify", "check every record's checksum and decode it");
  verify->add_option("db", a->db, "dataset")->required();
  verify->add_option("--threads", a->threads, "threads (0 = all cores)");
  verify->add_flag("--no-sha256", a->no_sha256,
                   "check the listed files' sizes but not their sha256");
  return verify;
}

int RunVerify(const VerifyArgs& a) {
  dspipe::VerifyOptions vo;
  vo.threads = a.threads;
  vo.file_sha256 = !a.no_sha256;
  dspipe::VerifyResult r;
  std::string path;
  std::unique_ptr<dspipe::CacheLease> lease;
  dspipe::Status s = LocalCopy(a.db, &path, &lease);
  if (s.ok()) s = dspipe::VerifyDataset(path, vo, &r);
  if (!s.ok()) return Fail(s);
  for (const std::string& p : r.problems) std::printf("BAD %s\n", p.c_str());
  std::printf("%s: %llu records, %llu bad", dspipe::RedactUrl(a.db).c_str(),
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

CLI::App* AddInfo(CLI::App& app, InfoArgs* a) {
  auto* info = app.add_subcommand("info", "print count, shapes, storage, sizes, mean/std");
  info->add_option("db", a->db, "dataset")->required();
  return info;
}

int RunInfo(const InfoArgs& a) {
  std::string text, path;
  std::unique_ptr<dspipe::CacheLease> lease;
  dspipe::Status s = LocalCopy(a.db, &path, &lease);
  if (s.ok()) s = dspipe::DescribeDataset(path, &text);
  if (!s.ok()) return Fail(s);
  if (path != a.db) std::printf("source:      %s\n", dspipe::RedactUrl(a.db).c_str());
  std::fputs(text.c_str(), stdout);
  return 0;
}

}  // namespace dspipe::cli::dsconvert
