// SPDX-License-Identifier: Apache-2.0
// Test helper: writes NIfTI volumes with nifti_clib itself (the library dspipe reads them with;
// tests/python/test_volumes.py checks the same reader against nibabel's files and arrays).
#pragma once

#include <nifti2_io.h>

#include <cstring>
#include <string>
#include <vector>

namespace dspipe::testing {

struct NiftiSpec {
  int64_t nx = 1, ny = 1, nz = 1, nt = 1;
  int datatype = DT_INT16;
  double affine[4][4] = {{1, 0, 0, 0}, {0, 1, 0, 0}, {0, 0, 1, 0}, {0, 0, 0, 1}};
  int sform_code = 1;  // 0: no sform (then no qform either: nibabel's base affine)
  double scl_slope = 0, scl_inter = 0;
  double pixdim[3] = {1, 1, 1};  // used when sform_code is 0
};

// Writes `data` (nx*ny*nz*nt samples of the spec's type, i fastest) to path (.nii or .nii.gz).
inline bool WriteNifti(const std::string& path, const NiftiSpec& s, const void* data) {
  const int64_t dims[8] = {s.nt > 1 ? 4 : 3, s.nx, s.ny, s.nz, s.nt, 1, 1, 1};
  nifti_image* nim = nifti_make_new_nim(dims, s.datatype, 1);
  if (nim == nullptr) return false;
  std::memcpy(nim->data, data, static_cast<size_t>(nim->nvox) * nim->nbyper);
  nim->qform_code = 0;
  nim->sform_code = s.sform_code;
  for (int r = 0; r < 4; ++r)
    for (int c = 0; c < 4; ++c) nim->sto_xyz.m[r][c] = s.affine[r][c];
  nim->dx = nim->pixdim[1] = s.pixdim[0];
  nim->dy = nim->pixdim[2] = s.pixdim[1];
  nim->dz = nim->pixdim[3] = s.pixdim[2];
  nim->scl_slope = s.scl_slope;
  nim->scl_inter = s.scl_inter;
  if (nifti_set_filenames(nim, path.c_str(), 0, 1) != 0) {
    nifti_image_free(nim);
    return false;
  }
  nifti_image_write(nim);
  nifti_image_free(nim);
  return true;
}

}  // namespace dspipe::testing
