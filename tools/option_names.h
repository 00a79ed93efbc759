// SPDX-License-Identifier: Apache-2.0
// How dsconvert and dsbench name the options a message mentions (Status::Render, see
// dspipe/status.h): "BuildOptions::resume" = true is "--resume", "BuildOptions::on_error" =
// skip is "--on-error skip". The rule is the field name with '-' for '_' behind "--"; the
// table holds the flags that are spelled otherwise. A bool option set to false is its --no-
// flag. Header-only; shared by the two CLIs.
#pragma once

#include <string>
#include <string_view>
#include <utility>

#include "dspipe/status.h"

namespace dspipe::cli {

inline std::string OptionName(std::string_view field, std::string_view value) {
  static constexpr std::pair<std::string_view, std::string_view> kSpelled[] = {
      {"LoaderOptions::batch_size", "--batch"},
      {"LoaderOptions::height", "--size"},
      {"LoaderOptions::width", "--size"},
      {"LoaderOptions::cache", "--cache"},
      {"AugmentOptions::crop_scale_min", "--crop-scale"},
      {"AugmentOptions::crop_scale_max", "--crop-scale"},
      {"AugmentOptions::crop_ratio_min", "--crop-ratio"},
      {"AugmentOptions::crop_ratio_max", "--crop-ratio"},
      {"AugmentOptions::image_interpolation", "--interpolation"},
      {"BuildOptions::resize_width", "--size"},
      {"BuildOptions::resize_height", "--size"},
      {"BuildOptions::spacing_rows", "--spacing"},
      {"BuildOptions::spacing_cols", "--spacing"},
      {"BuildOptions::slice_height", "--slice-size"},
      {"BuildOptions::slice_width", "--slice-size"},
      {"BuildOptions::archive_buffer_bytes", "--archive-buffer-mb"},
      {"BuildOptions::commit_bytes", "--commit-mb"},
      {"BuildOptions::check", "--check"},
      {"VerifyOptions::file_sha256", "--sha256"},  // dsconvert verify --no-sha256
  };
  std::string flag;
  for (const auto& [f, spelled] : kSpelled) {
    if (f == field) flag = spelled;
  }
  if (flag.empty()) {
    const size_t colons = field.find("::");
    flag = "--" + std::string(colons == std::string_view::npos ? field : field.substr(colons + 2));
    for (char& c : flag) c = c == '_' ? '-' : c;
  }
  if (value.empty() || value == "true") return flag;
  if (value == "false") return "--no-" + flag.substr(2);
  return flag + " " + std::string(value);
}

// "dsconvert: <the status with the options named as flags>".
inline std::string Describe(const Status& s) { return s.Render(OptionName); }

}  // namespace dspipe::cli
