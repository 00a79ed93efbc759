// Finding the samples of a source dataset. Internal.
#pragma once

#include <string>
#include <vector>

#include "dspipe/status.h"

namespace dspipe {

struct SourceItem {
  std::string image;  // absolute or SRC-relative path
  std::string mask;   // "" when none
  int label = -1;
  std::string error;  // set when the item is known bad before reading (e.g. no mask)
};

struct SourceList {
  std::string kind;  // "folder" | "csv" | "imagefolder"
  std::vector<SourceItem> items;
  bool has_masks = false;
  bool has_labels = false;
  std::vector<std::string> class_names;
  std::vector<std::string> warnings;  // e.g. masks without an image
};

// Scans SRC (see BuildOptions::source). Items are in a stable order (sorted paths).
Status ScanSources(const std::string& source, SourceList* out);

}  // namespace dspipe
