# SPDX-License-Identifier: Apache-2.0
# FindCSV: libcsv (Debian: libcsv-dev). Defines CSV::CSV.
include(${CMAKE_CURRENT_LIST_DIR}/dspipeFindSystemLib.cmake)
dspipe_find_system_lib(CSV CSV::CSV csv.h csv)
