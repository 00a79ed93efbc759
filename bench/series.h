// SPDX-License-Identifier: Apache-2.0
// Repeated measurements of one bench row: median and min-max, as every bench reports them.
// Header-only; shared by the bench programs (bench/*/...).
#pragma once

#include <algorithm>
#include <vector>

struct Series {
  std::vector<double> v;
  double Median() const {
    std::vector<double> s = v;
    std::sort(s.begin(), s.end());
    return s.empty() ? 0 : s[s.size() / 2];
  }
  double Min() const { return *std::min_element(v.begin(), v.end()); }
  double Max() const { return *std::max_element(v.begin(), v.end()); }
};
