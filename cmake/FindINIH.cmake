# SPDX-License-Identifier: Apache-2.0
# FindINIH: inih, the INI parser (Debian: libinih-dev). Defines INIH::INIH.
include(${CMAKE_CURRENT_LIST_DIR}/dspipeFindSystemLib.cmake)
dspipe_find_system_lib(INIH INIH::INIH ini.h inih)
