// SPDX-License-Identifier: Apache-2.0
// Plain LMDBs (written by other tools: keys -> encoded image bytes in the main database): how
// their keys become samples at open (masks paired by pattern, by detection or from a second
// LMDB; labels from a CSV; numeric order for decimal keys) and reading them. Internal; the
// public face is Dataset::Open with DatasetOpenOptions::plain (dspipe/dataset.h).
#pragma once

#include <memory>
#include <string>

#include "dspipe/dataset.h"
#include "format/lmdb_env.h"

namespace dspipe::format {

class PlainLmdbDataset : public Dataset {
 public:
  // "'key'" names of the image key and of the mask key of record `index` ("" without masks).
  virtual std::string ImageKey(uint64_t index) const = 0;
  virtual std::string MaskKey(uint64_t index) const = 0;
  // The LMDB the masks are read from (the images' own, or PlainLmdbOptions::masks).
  virtual const std::string& mask_path() const = 0;
  // True when the keys were checked as dense decimals by probes instead of listed and sorted.
  virtual bool dense() const = 0;
};

// Pairs and orders the keys of `env` (a plain LMDB, already open) under options.plain.
// Errors: kBadInput naming the offending key or CSV line, kInvalidArgument for bad patterns.
Status OpenPlainLmdb(const std::string& path, std::unique_ptr<LmdbEnv> env,
                     const DatasetOpenOptions& options, std::unique_ptr<PlainLmdbDataset>* out);

// Opens `path` and refuses anything but a plain LMDB (for dsconvert build's plain source).
Status OpenPlainLmdb(const std::string& path, const DatasetOpenOptions& options,
                     std::unique_ptr<PlainLmdbDataset>* out);

}  // namespace dspipe::format
