# SPDX-License-Identifier: Apache-2.0
# FindSPNG: libspng PNG decoder (Debian: libspng-dev). Defines SPNG::SPNG.
include(${CMAKE_CURRENT_LIST_DIR}/dspipeFindSystemLib.cmake)
dspipe_find_system_lib(SPNG SPNG::SPNG spng.h spng)
