# SPDX-License-Identifier: Apache-2.0
# FindDeflate: libdeflate whole-buffer zlib/deflate and crc32 (Debian: libdeflate-dev).
# Defines Deflate::Deflate. The PNG fast path (lib/codec/png_fast*) inflates with it.
include(${CMAKE_CURRENT_LIST_DIR}/dspipeFindSystemLib.cmake)
dspipe_find_system_lib(Deflate Deflate::Deflate libdeflate.h deflate)
