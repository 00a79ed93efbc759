# SPDX-License-Identifier: Apache-2.0
# FindLMDB: the LMDB key-value store (Debian: liblmdb-dev). Defines LMDB::LMDB.
include(${CMAKE_CURRENT_LIST_DIR}/dspipeFindSystemLib.cmake)
dspipe_find_system_lib(LMDB LMDB::LMDB lmdb.h lmdb)
