# SPDX-License-Identifier: Apache-2.0
# FindWebP: libwebp, for the WebP header check before decoding (Debian: libwebp-dev; OpenCV
# links it anyway). Defines WebP::WebP.
include(${CMAKE_CURRENT_LIST_DIR}/dspipeFindSystemLib.cmake)
dspipe_find_system_lib(WebP WebP::WebP webp/decode.h webp)
