// SPDX-License-Identifier: Apache-2.0
// BuildDataset with an s3://bucket/prefix/ output (dspipe/convert.h, BuildOptions::output and
// ::staging; docs/STORAGE.md "Building straight to s3://"): the dataset is built in a local
// staging directory exactly as a local build, pushed (PushDataset: every part checked,
// manifest.json last), then staging's dataset files are removed. Resumable at every step: a kill
// during the build leaves staging resumable (resume), one during the push leaves a finished
// staging build, which a rerun finds complete and pushes again (the push continues its
// multipart uploads and skips files already there).
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <vector>

#include "convert/builder.h"
#include "core/checksum.h"
#include "dspipe/log.h"
#include "dspipe/push.h"

namespace dspipe::convert {
namespace {

namespace fs = std::filesystem;

constexpr const char* kReport = "rejected.tsv";

// Whether the directory holds only what a build writes (so removing it removes nothing else):
// IsBuildFile names and shard directories. Else *foreign is the first other name. Through the
// Directory (Env::OpenDirectory): a symlink is a foreign name, never followed.
Status OnlyBuildFiles(Directory* dir, const std::vector<std::string>& names, bool* only,
                      std::string* foreign) {
  *only = true;
  for (const std::string& n : names) {
    FileInfo info;
    DSPIPE_RETURN_IF_ERROR(dir->Stat(n, &info));
    const bool shard = IsShardDirName(n) && info.kind == FileKind::kDirectory;
    const bool file = IsBuildFile(n) && info.kind == FileKind::kRegular;
    if (!file && !shard) {
      *only = false;
      *foreign = n;
      return Status::OK();
    }
  }
  return Status::OK();
}

std::string Octal(uint32_t mode) {
  char buf[8];
  std::snprintf(buf, sizeof buf, "%04o", mode & 07777);
  return buf;
}

// Opens (creating with mode 0700 when missing) the directory `name` in `parent` and checks it:
// a directory, not a link (OpenDir refuses one), owned by this user; with `private_mode`, open
// to nobody else.
Status OwnDir(Directory* parent, const std::string& name, bool private_mode,
              std::unique_ptr<Directory>* out) {
  const std::string path = parent->path() + "/" + name;
  FileInfo at;
  DSPIPE_RETURN_IF_ERROR(parent->Stat(name, &at));
  if (at.kind == FileKind::kSymlink ||
      (at.kind != FileKind::kMissing && at.kind != FileKind::kDirectory)) {
    return Status::AlreadyExists(path + " is a " +
                                 (at.kind == FileKind::kSymlink ? "symlink" : "file") +
                                 ", not a directory of yours; refusing to build in it: remove "
                                 "it or set " +
                                 Opt("BuildOptions::staging") + " to a directory of yours");
  }
  DSPIPE_RETURN_IF_ERROR(parent->OpenDir(name, /*create=*/true, 0700, out));
  FileInfo info;
  DSPIPE_RETURN_IF_ERROR((*out)->StatSelf(&info));
  const uint32_t me = static_cast<uint32_t>(::geteuid());
  if (info.uid != me) {
    return Status::AlreadyExists(path + " is owned by uid " + std::to_string(info.uid) +
                                 ", not by you (uid " + std::to_string(me) +
                                 "): its owner could read the dataset or replace its files before "
                                 "the push; refusing to build in it: set " +
                                 Opt("BuildOptions::staging") + " to a directory of yours");
  }
  if (private_mode && (info.mode & 077) != 0) {
    return Status::AlreadyExists(
        path + " has mode " + Octal(info.mode) +
        ": other users could read the dataset or "
        "replace its files before the push; refusing to build in it: chmod 700 " +
        path + ", or set " + Opt("BuildOptions::staging") + " to a directory of yours");
  }
  return Status::OK();
}

}  // namespace

Status PrepareStaging(Env* env, const std::string& url, const std::string& given,
                      std::string* staging) {
  std::unique_ptr<Directory> parent, dir;
  if (!given.empty()) {  // the user's choice: made 0700 when missing, owner checked when there
    const fs::path p = fs::path(given).lexically_normal();
    const std::string up = p.has_parent_path() ? p.parent_path().string() : ".";
    DSPIPE_RETURN_IF_ERROR(env->CreateDirs(up));
    DSPIPE_RETURN_IF_ERROR(env->OpenDirectory(up, &parent));
    DSPIPE_RETURN_IF_ERROR(OwnDir(parent.get(), p.filename().string(), false, &dir));
    *staging = given;
    return Status::OK();
  }
  std::error_code ec;
  const fs::path tmp = fs::temp_directory_path(ec);
  if (ec) return Status::IOErrorErrno("temp_directory_path", "", ec.value());
  std::unique_ptr<Directory> temp, mine;
  DSPIPE_RETURN_IF_ERROR(env->OpenDirectory(tmp.string(), &temp));
  const std::string own = "dspipe-" + std::to_string(::geteuid());
  DSPIPE_RETURN_IF_ERROR(OwnDir(temp.get(), own, /*private_mode=*/true, &mine));
  const std::string name = "build-" + core::Sha256Hex(url).substr(0, 16);
  DSPIPE_RETURN_IF_ERROR(OwnDir(mine.get(), name, /*private_mode=*/true, &dir));
  *staging = (tmp / own / name).string();
  return Status::OK();
}

Status BuildAndPush(const BuildOptions& options, BuildResult* result) {
  const std::string url = options.output;
  Env* env = options.env != nullptr ? options.env : Env::Default();
  std::string staging;
  DSPIPE_RETURN_IF_ERROR(PrepareStaging(env, url, options.staging, &staging));
  BuildOptions local = options;
  local.output = staging;
  local.staging.clear();
  const std::string where = "building " + RedactUrl(url) + " in " + staging;
  DSPIPE_RETURN_IF_ERROR(BuildDataset(local, result).WithContext(where));
  result->staging = staging;

  PushOptions po;
  po.env = options.env;
  po.overwrite = options.overwrite;  // what is at the prefix may be replaced, as a local output
  DSPIPE_RETURN_IF_ERROR(PushDataset(staging, url, po, &result->push)
                             .WithContext("pushing " + staging + " (built for it; a rerun with " +
                                          Opt("BuildOptions::resume", "true") + " pushes again)"));
  result->pushed = true;

  // Pushed and checked: the local copy goes, unless it holds the rejected-files report (the
  // dataset's files go then, the report stays where report_path says). A directory holding
  // anything a build does not write is left as it is. Through the build's Env, as --overwrite.
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

}  // namespace dspipe::convert
