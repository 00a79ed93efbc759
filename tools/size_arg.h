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

}  // namespace dspipe::cli

#endif  // DSPIPE_TOOLS_SIZE_ARG_H_
