// SPDX-License-Identifier: Apache-2.0
// One-shard-at-a-time builds (BuildOptions::shard_index): the state of each shard, for
// AssembleDataset and for verify/info on a dataset whose shards are not joined yet. Internal.
#pragma once

#include <string>

#include "dspipe/status.h"

namespace dspipe::convert {

// OK when `path` is not an unjoined one-shard-at-a-time build (then Dataset::Open says what it
// is). Otherwise an error naming each missing or unfinished shard, or, when every shard is
// finished, one saying to run `dsconvert assemble`.
Status DiagnoseUnassembled(const std::string& path);

}  // namespace dspipe::convert
