# SPDX-License-Identifier: Apache-2.0
# FindEXIF: libexif (Debian: libexif-dev). Defines EXIF::EXIF.
include(${CMAKE_CURRENT_LIST_DIR}/dspipeFindSystemLib.cmake)
dspipe_find_system_lib(EXIF EXIF::EXIF libexif/exif-data.h exif)
