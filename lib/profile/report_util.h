// SPDX-License-Identifier: Apache-2.0
// Shared pieces of the report writers. Internal to the profile component.
#pragma once

#include <string>
#include <vector>

#include "profile/profile.h"

namespace dspipe::profile {

// The --json schema version; bump only for incompatible changes (docs/DSBENCH.md).
inline constexpr int kJsonVersion = 1;

struct StageRow {
  StageSummary summary;
  double ms_per_batch = 0;  // stage total / measured batches (summed over workers)
  double share = 0;         // stage total / sum of the non-wait stage totals; 0 for wait
};
std::vector<StageRow> StageRows(const ProfileResult& r);
// The stage's name in tables and CSV: StageName, or "transform1", "transform2", ... for the
// transform rows (their labels go beside them).
std::string RowName(const StageSummary& s);
// What follows HxWxC in the dataset line: " + mask" for 8-bit datasets, the types for typed
// ones (" uint16 + uint16 mask"). report_text.cc.
std::string ShapeTypes(const DatasetSummary& d);
// The dataset line's "(...)": what was read and how its records hold images, in words
// ("dspipe LMDB, encoded images", "plain LMDB, values as stored"). report_text.cc.
std::string KindAndStore(const DatasetSummary& d);

}  // namespace dspipe::profile
