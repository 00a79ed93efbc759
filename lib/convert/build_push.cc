// BuildDataset with an s3://bucket/prefix/ output (dspipe/convert.h, BuildOptions::output and
// ::staging; docs/STORAGE.md "Building straight to s3://"): the dataset is built in a local
// staging directory exactly as a local build, pushed (PushDataset: every part checked,
// manifest.json last), then staging's dataset files are removed. Resumable at every step: a kill
// during the build leaves staging resumable (resume), one during the push leaves a finished
// staging build, which a rerun finds complete and pushes again (the push continues its
// multipart uploads and skips files already there).
#include <filesystem>
#include <set>
#include <vector>

#include "convert/builder.h"
#include "core/checksum.h"
#include "dspipe/log.h"
#include "dspipe/push.h"

namespace dspipe::build {
namespace {

namespace fs = std::filesystem;

constexpr const char* kReport = "rejected.tsv";

// Whether the directory holds only what a build writes (so removing it removes nothing else):
// the manifest and its atomic-write temporaries (name.tmp-<hex>), a lone LMDB's files, shard
// directories, the rejected-files report. Else *foreign is the first other name. Through the
// Directory (Env::OpenDirectory): a symlink is a foreign name, never followed.
Status OnlyBuildFiles(Directory* dir, const std::vector<std::string>& names, bool* only,
                      std::string* foreign) {
  static const std::set<std::string> kNames = {kTopManifestFile, "data.mdb", "lock.mdb", kReport};
  *only = true;
  for (const std::string& n : names) {
    FileInfo info;
    DSPIPE_RETURN_IF_ERROR(dir->Stat(n, &info));
    const bool shard = n.rfind("shard-", 0) == 0 && info.kind == FileKind::kDirectory;
    const size_t tmp = n.find(".tmp-");
    const bool temp = tmp != std::string::npos && kNames.count(n.substr(0, tmp));
    const bool file = kNames.count(n) && info.kind == FileKind::kRegular;
    if (!file && !shard && !temp) {
      *only = false;
      *foreign = n;
      return Status::OK();
    }
  }
  return Status::OK();
}

}  // namespace

Status BuildAndPush(const BuildOptions& options, BuildResult* result) {
  const std::string url = options.output;
  std::string staging = options.staging;
  if (staging.empty()) {
    std::error_code ec;
    const fs::path tmp = fs::temp_directory_path(ec);
    if (ec) return Status::IOErrorErrno("temp_directory_path", "", ec.value());
    staging = (tmp / ("dspipe-build-" + Sha256Hex(url).substr(0, 16))).string();
  }
  BuildOptions local = options;
  local.output = staging;
  local.staging.clear();
  const std::string where = "building " + RedactUrl(url) + " in " + staging;
  DSPIPE_RETURN_IF_ERROR(BuildDataset(local, result).WithContext(where));
  result->staging = staging;

  PushOptions po;
  po.env = options.env;
  DSPIPE_RETURN_IF_ERROR(PushDataset(staging, url, po, &result->push)
                             .WithContext("pushing " + staging + " (built for it; a rerun with " +
                                          Opt("BuildOptions::resume", "true") + " pushes again)"));
  result->pushed = true;

  // Pushed and checked: the local copy goes, unless it holds the rejected-files report (the
  // dataset's files go then, the report stays where report_path says). A directory holding
  // anything a build does not write is left as it is. Through the build's Env, as --overwrite.
  Env* env = options.env != nullptr ? options.env : Env::Default();
  std::unique_ptr<Directory> dir;
  std::vector<std::string> names;
  DSPIPE_RETURN_IF_ERROR(env->OpenDirectory(staging, &dir));
  DSPIPE_RETURN_IF_ERROR(dir->List(&names));
  bool only = false;
  std::string foreign;
  DSPIPE_RETURN_IF_ERROR(OnlyBuildFiles(dir.get(), names, &only, &foreign));
  if (!only) {
    Log(LogLevel::kWarn, staging + " holds " + foreign +
                             ", which the build did not write: left in place after the push");
    return Status::OK();
  }
  if (result->report_path.empty()) return env->RemoveTree(staging);
  for (const std::string& n : names) {
    if (n != kReport) DSPIPE_RETURN_IF_ERROR(dir->RemoveTree(n));
  }
  return Status::OK();
}

}  // namespace dspipe::build
