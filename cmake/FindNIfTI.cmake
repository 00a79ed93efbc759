# SPDX-License-Identifier: Apache-2.0
# FindNIfTI: nifti_clib's NIfTI-1/2 reader (Debian: libnifti2-dev). Defines NIfTI::NIfTI
# (libnifti2 with its gzip layer libznz; include <nifti2_io.h>: its own headers include each
# other by bare name from /usr/include/nifti).
include(FindPackageHandleStandardArgs)
find_path(NIfTI_INCLUDE_DIR nifti2_io.h PATH_SUFFIXES nifti)
find_library(NIfTI_LIBRARY NAMES nifti2)
find_library(NIfTI_ZNZ_LIBRARY NAMES znz)
find_package_handle_standard_args(NIfTI REQUIRED_VARS NIfTI_LIBRARY NIfTI_ZNZ_LIBRARY
  NIfTI_INCLUDE_DIR)
if(NIfTI_FOUND AND NOT TARGET NIfTI::NIfTI)
  add_library(NIfTI::NIfTI UNKNOWN IMPORTED)
  set_target_properties(NIfTI::NIfTI PROPERTIES
    IMPORTED_LOCATION "${NIfTI_LIBRARY}"
    INTERFACE_INCLUDE_DIRECTORIES "${NIfTI_INCLUDE_DIR}"
    INTERFACE_LINK_LIBRARIES "${NIfTI_ZNZ_LIBRARY}")
endif()
mark_as_advanced(NIfTI_INCLUDE_DIR NIfTI_LIBRARY NIfTI_ZNZ_LIBRARY)
