// SPDX-License-Identifier: Apache-2.0
// dsbench's flags, apart from main() (main.cc) so that a test can declare them on an app of its
// own without running anything (tests/profile/cli_options_test.cc checks that every option field
// has its flag, dspipe/option_fields.h).
#pragma once

#include <CLI/CLI.hpp>
#include <string>

#include "profile/profile.h"

namespace dspipe::cli::dsbench {

// The flags as parsed; ToProfileOptions (main.cc) completes `o` from the rest.
struct Args {
  std::string path, compare_db, json_path, csv_path, trace_path, report_path, sweep_text,
      timeline_csv, epochs_csv;
  profile::ProfileOptions o;
  bool no_normalize = false, no_shuffle = false, quiet = false;
  std::string crop_scale, crop_ratio, size, interpolation = "linear";
  std::string transform_path;
  std::string order = "global";
  // Enum flags by their value names (dspipe/option_fields.h); AddOptions sets each to o's
  // default, ToProfileOptions parses them into o.
  std::string remainder, mean_std, dtype, mask_dtype;
  bool no_overlap = false;
  bool old_no_overlap = false;  // --cache-no-overlap, the old name: works, and says so
  bool no_detect_masks = false;
  // To tell whether they were given.
  CLI::Option* transform = nullptr;
  CLI::Option* rank = nullptr;
};

// Declares every flag on `app`, parsed into *a.
void AddOptions(CLI::App& app, Args* a);

}  // namespace dspipe::cli::dsbench
