// SPDX-License-Identifier: Apache-2.0
// The one command-line size parser of dsconvert and dsbench: sizes are HEIGHTxWIDTH everywhere
// (dsbench --size, dsconvert synth --size and build --size, Python's (height, width) tuples).
#ifndef DSPIPE_TOOLS_SIZE_ARG_H_
#define DSPIPE_TOOLS_SIZE_ARG_H_

#include <cstdio>
#include <string>

namespace dspipe::cli {

// "HxW" (or "HXW") -> *h, *w, both positive; false on anything else ("12", "0x10", "+3x4",
// "3x4 ", "axb").
inline bool ParseHeightWidth(const std::string& text, int* h, int* w) {
  char x = 0, extra = 0;
  if (text.find_first_of("+- \t") != std::string::npos) return false;
  if (std::sscanf(text.c_str(), "%d%c%d%c", h, &x, w, &extra) != 3) return false;
  return (x == 'x' || x == 'X') && *h > 0 && *w > 0;
}

// "RxC" in mm (a voxel size: between rows x between columns, e.g. "0.8x0.8"), or one number
// for both -> *rows, *cols; false on anything else (the values' range is the library's check).
inline bool ParseSpacing(const std::string& text, double* rows, double* cols) {
  char x = 0, extra = 0;
  if (text.find_first_of("+- \t") != std::string::npos) return false;
  const int n = std::sscanf(text.c_str(), "%lf%c%lf%c", rows, &x, cols, &extra);
  if (n == 1) {
    *cols = *rows;
    return true;
  }
  return n == 3 && (x == 'x' || x == 'X');
}

}  // namespace dspipe::cli

#endif  // DSPIPE_TOOLS_SIZE_ARG_H_
