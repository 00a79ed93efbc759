// SPDX-License-Identifier: Apache-2.0
// The dataset manifest (JSON): docs/FORMAT.md describes every field. Internal.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "dspipe/dataset.h"
#include "dspipe/status.h"

namespace dspipe::format {

inline constexpr const char* kTopManifestFile = "manifest.json";  // sharded datasets
inline constexpr const char* kShardPrefix = "shard-";
// The newest manifest version: 2 for datasets of typed samples (sample_type / mask_type other
// than uint8), which a reader of version 1 would load as 8-bit; 1 otherwise.
inline constexpr int kManifestVersion = 2;

// Per-record tables in the meta database (docs/FORMAT.md "Per-record tables";
// Dataset::ReadRecordTable): record key k's entry is under "<table>/" + k's 16 hex digits.
// foreground: a volume slice's pixel count per class; source: the file the record was made
// from, named as rejected.tsv names files (written by every build).
inline constexpr const char* kForegroundTable = "foreground";
inline constexpr const char* kSourceTable = "source";

// "shard-00003.lmdb"
std::string ShardDirName(int index);

// A shard's record range [begin, end) of global indices; key_begin is the first key stored.
struct ShardRange {
  std::string name;  // directory name inside a sharded dataset ("" for a lone LMDB)
  uint64_t begin = 0;
  uint64_t end = 0;
  // Key stored for index `begin`. Equals `begin` except in a dataset joined by `dsconvert
  // assemble` after --on-error skip rejected samples of an earlier shard (optional "key_begin").
  uint64_t key_begin = 0;
};

// Parses a manifest. `where` names the file or LMDB in messages. For a sharded top manifest
// *ranges lists its shards; for a lone LMDB it is one range; for one shard of a sharded set
// (which has a "shard" object) it is that shard's global range.
Status ParseManifest(const std::string& text, const std::string& where, DatasetInfo* info,
                     std::vector<ShardRange>* ranges);

// ---- "files": what a reader needs, with sizes and sha256 (docs/FORMAT.md)
// A sharded dataset lists every shard's data.mdb in its manifest.json; a lone LMDB has a
// manifest.json beside data.mdb (the manifest inside data.mdb cannot hold data.mdb's own hash).
// Manifests written before the field existed have no list: they still open; only fetching a
// dataset needs it.
struct ManifestFile {
  std::string path;    // relative to the dataset directory, '/'-separated, e.g. "data.mdb"
  uint64_t size = 0;   // bytes
  std::string sha256;  // 64 lowercase hex digits
};

// The "files" list of a manifest. *present = false (and no error) when the manifest has none.
// Paths must be relative and stay inside the dataset (no "..", no absolute paths, no empty
// components); sizes are integers below 2^63 that sum below 2^63 (Corruption naming the file
// that overflows); sha256 is 64 hex digits. `where` names the file in messages.
Status ParseManifestFiles(const std::string& text, const std::string& where,
                          std::vector<ManifestFile>* files, bool* present);

// Returns manifest_text (a JSON object) with its "files" field set to files.
Status SetManifestFiles(const std::string& manifest_text, const std::vector<ManifestFile>& files,
                        std::string* out);

}  // namespace dspipe::format
