// SPDX-License-Identifier: Apache-2.0
// ToJson: StageSummary and Verdict as JSON (dsbench --json, the benches). Internal to dspipe,
// not part of the installed API: it keeps nlohmann::json out of include/dspipe/stats.h.
#pragma once

#include <nlohmann/json_fwd.hpp>
#include <vector>

#include "dspipe/stats.h"

namespace dspipe::stats {

// JSON with the field names of StageSummary / Verdict (documented in docs/STATS.md). Pure
// functions.
nlohmann::json ToJson(const StageSummary& summary);
nlohmann::json ToJson(const std::vector<StageSummary>& summaries);
nlohmann::json ToJson(const Verdict& verdict);

}  // namespace dspipe::stats
