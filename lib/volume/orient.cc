// SPDX-License-Identifier: Apache-2.0
// What every volume reader shares (volume.h): the closest canonical (RAS) orientation of an
// affine, and the exact sample type of scaled integers.
#include <nifti2_io.h>

#include <cmath>
#include <cstdio>

#include "volume/volume.h"

namespace dspipe::volume {

Status SetCanonical(VolumeInfo* out) {
  for (const auto& row : out->affine) {
    for (double v : row) {
      if (!std::isfinite(v)) return Status::BadInput(out->path + ": its affine is not finite");
    }
  }
  // The closest canonical orientation: nifti_clib's answer for the 3x3 part.
  nifti_dmat44 m{};
  for (int r = 0; r < 4; ++r)
    for (int c = 0; c < 4; ++c) m.m[r][c] = out->affine[r][c];
  int code[3] = {0, 0, 0};
  nifti_dmat44_to_orientation(m, &code[0], &code[1], &code[2]);
  bool seen[3] = {false, false, false};
  for (int f = 0; f < 3; ++f) {
    if (code[f] < NIFTI_L2R || code[f] > NIFTI_S2I || seen[(code[f] - 1) / 2]) {
      return Status::BadInput(out->path +
                              ": its affine has no orientation (a zero or repeated axis)");
    }
    const int a = (code[f] - 1) / 2;  // L2R/R2L -> 0, P2A/A2P -> 1, I2S/S2I -> 2
    seen[a] = true;
    out->perm[a] = f;
    out->flip[a] = code[f] % 2 == 0;  // R2L, A2P, S2I run against the canonical axis
  }
  // canon_affine = affine * T, T taking canonical indices to file indices.
  Affine t{};
  t[3][3] = 1;
  for (int a = 0; a < 3; ++a) {
    const int f = out->perm[a];
    out->canon_dim[a] = out->dim[f];
    t[f][a] = out->flip[a] ? -1 : 1;
    if (out->flip[a]) t[f][3] = static_cast<double>(out->dim[f] - 1);
  }
  for (int r = 0; r < 4; ++r) {
    for (int c = 0; c < 4; ++c) {
      double s = 0;
      for (int k = 0; k < 4; ++k) s += out->affine[r][k] * t[k][c];
      out->canon_affine[r][c] = s;
    }
  }
  for (int a = 0; a < 3; ++a) {
    double s = 0;
    for (int r = 0; r < 3; ++r) s += out->canon_affine[r][a] * out->canon_affine[r][a];
    out->canon_spacing[a] = std::sqrt(s);
  }
  return Status::OK();
}

Status ExactIntegerType(const std::string& path, double lo, double hi, SampleType* out) {
  if (lo >= -32768 && hi <= 32767) {
    *out = SampleType::kInt16;
  } else if (lo >= 0 && hi <= 65535) {
    *out = SampleType::kUint16;
  } else if (lo >= -16777216 && hi <= 16777216) {
    *out = SampleType::kFloat32;
  } else {
    char b[160];
    std::snprintf(b, sizeof b, "%.9g to %.9g", lo, hi);
    return Status::BadInput(path + ": its values run from " + b +
                            ", which neither a 16-bit integer nor float32 holds exactly");
  }
  return Status::OK();
}

}  // namespace dspipe::volume
