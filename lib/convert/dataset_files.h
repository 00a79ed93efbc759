// SPDX-License-Identifier: Apache-2.0
// The per-file sizes and sha256 of a finished dataset (the manifest's "files" list, parsed and
// written by format/manifest.h): computed by the builder, checked by verify. Internal.
#pragma once

#include <string>
#include <vector>

#include "dspipe/env.h"
#include "dspipe/status.h"
#include "format/manifest.h"

namespace dspipe::convert {

// Size and sha256 of each of rel_paths (relative to dir), in that order, read through env
// (nullptr = Env::Default()).
Status DescribeDatasetFiles(const std::string& dir, const std::vector<std::string>& rel_paths,
                            std::vector<format::ManifestFile>* files, Env* env = nullptr);

// Checks every file of the list under dir: its size always, its sha256 when check_sha256.
// Each mismatch or missing file is appended to *problems ("file data.mdb: size ..., manifest
// says ..."); an error reading a file that exists is returned as a Status naming it.
Status CheckDatasetFiles(const std::string& dir, const std::vector<format::ManifestFile>& files,
                         bool check_sha256, std::vector<std::string>* problems);

// The files list of the dataset at dir: from dir/manifest.json (a sharded dataset, or the file
// beside a lone LMDB's data.mdb). *present = false when there is no such file or it has no list.
Status LoadDatasetFiles(const std::string& dir, std::vector<format::ManifestFile>* files,
                        bool* present);

}  // namespace dspipe::convert
