// SPDX-License-Identifier: Apache-2.0
// What MONAI's grid-sampling transforms share (RandRotated, RandAffined in monai_resize.cc,
// Rand2DElasticd in monai_elastic.cc): grid_sample's per-key modes, RandAffineGrid's ranges,
// their draws and AffineGrid's composition. Internal to the MONAI front end (monai_leaf.h).
#pragma once

#include <array>
#include <opencv2/core.hpp>
#include <utility>
#include <vector>

#include "transforms/monai_leaf.h"
#include "transforms/monai_resample.h"

namespace dspipe::transforms::monai {

// grid_sample's mode, padding_mode and align_corners: [0] the image's, [1] the label's.
struct GridModes {
  bool nearest[2] = {false, true};
  GridPad pad[2] = {GridPad::kBorder, GridPad::kBorder};
  bool align[2] = {false, false};
};

// mode (bilinear, nearest; the label's must be nearest), padding_mode, align_corners (when
// the transform has one), per key.
void ReadGrid(ArgReader& r, const Keys& k, const char* pad_def, bool has_align, GridModes* g);

// One of RandAffineGrid's ranges: each entry draws one parameter, uniform in [lo, hi].
struct Range {
  std::vector<std::pair<double, double>> e;
};

// A range: null, a number x (one draw in [-x, x]), or a list whose entries are numbers (+-x),
// [lo, hi] pairs or null (no draw).
Range ReadRange(ArgReader& r, const char* key);

// RandAffineGrid's four ranges (rotate, shear, translate, scale).
struct AffineRanges {
  Range rotate, shear, translate, scale;
  void Read(ArgReader& r);
  // RandAffineGrid.randomize: every entry of every range drawn in that order; the first two of
  // each kept in d (2-D): rotate d[0][0], shear d[1] (coefficients [0][1], [1][0]), translate
  // d[2] (rows, columns), scale d[3] (1 + draw; an axis without one keeps 1).
  void Draw(Rng& rng, double d[4][2]) const;
};

// What RandAffined and Rand2DElasticd both take: spatial_size (absent or null: the input's;
// `size` stays {-1, -1}), prob (0.1), the four ranges, and mode / padding_mode per key
// (reflection padding by default, no align_corners).
void ReadRandGridArgs(ArgReader& r, const Keys& k, std::array<int, 2>* size, double* p,
                      AffineRanges* ranges, GridModes* g);

// AffineGrid's matrix R @ Sh @ T @ S on homogeneous (row, column) coordinates, Sh MONAI's
// two elementary shears S10 @ S01.
cv::Matx33d AffineMatrix(const double d[4][2]);

}  // namespace dspipe::transforms::monai
