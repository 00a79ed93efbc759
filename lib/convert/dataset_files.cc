// SPDX-License-Identifier: Apache-2.0
#include "convert/dataset_files.h"

#include <filesystem>

#include "core/files.h"
#include "dspipe/fetch.h"

namespace dspipe::convert {

Status DescribeDatasetFiles(const std::string& dir, const std::vector<std::string>& rel_paths,
                            std::vector<format::ManifestFile>* files, Env* env) {
  if (env == nullptr) env = Env::Default();
  files->clear();
  for (const std::string& rel : rel_paths) {
    format::ManifestFile f;
    f.path = rel;
    const std::string full = dir + "/" + rel;
    DSPIPE_RETURN_IF_ERROR(env->FileSize(full, &f.size));
    DSPIPE_RETURN_IF_ERROR(Sha256File(full, &f.sha256, env));
    files->push_back(std::move(f));
  }
  return Status::OK();
}

Status CheckDatasetFiles(const std::string& dir, const std::vector<format::ManifestFile>& files,
                         bool check_sha256, std::vector<std::string>* problems) {
  Env* env = Env::Default();
  for (const format::ManifestFile& f : files) {
    const std::string full = dir + "/" + f.path;
    if (!env->FileExists(full)) {
      problems->push_back("file " + f.path + ": missing (the manifest lists it)");
      continue;
    }
    uint64_t size = 0;
    DSPIPE_RETURN_IF_ERROR(env->FileSize(full, &size));
    if (size != f.size) {
      problems->push_back("file " + f.path + ": size " + std::to_string(size) +
                          ", manifest says " + std::to_string(f.size));
      continue;
    }
    if (!check_sha256) continue;
    std::string hex;
    DSPIPE_RETURN_IF_ERROR(Sha256File(full, &hex));
    if (hex != f.sha256) {
      problems->push_back("file " + f.path + ": sha256 " + hex + ", manifest says " + f.sha256);
    }
  }
  return Status::OK();
}

Status LoadDatasetFiles(const std::string& dir, std::vector<format::ManifestFile>* files,
                        bool* present) {
  files->clear();
  *present = false;
  std::error_code ec;
  const std::string manifest = dir + "/" + format::kTopManifestFile;
  if (!std::filesystem::is_directory(dir, ec) || !std::filesystem::exists(manifest, ec)) {
    return Status::OK();
  }
  std::string text;
  DSPIPE_RETURN_IF_ERROR(core::ReadFile(manifest, &text));
  return format::ParseManifestFiles(text, manifest, files, present);
}

}  // namespace dspipe::convert
