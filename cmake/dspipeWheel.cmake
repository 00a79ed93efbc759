# SPDX-License-Identifier: Apache-2.0
# Link options for the self-contained wheel (scripts/build-wheel.sh sets -DDSPIPE_WHEEL=ON). The
# root CMakeLists.txt includes this file before it looks for the dependencies; nothing changes
# for the normal build, `pip install .` or a find_package(dspipe) consumer.
#
# What it changes, and why (numbers from scripts/build-wheel.sh on Debian 12):
# - libarchive is linked from its static archive: dspipe enables tar/zip + gzip/zstd/bzip2/xz
#   by name (lib/convert/sources_archive.cc), so the linker takes only those readers and
#   libarchive's libxml2 -> ICU dependency (the xar reader; libicudata alone is 31 MB, and
#   libicuuc sets GLIBCXX_3.4.30) stays out of the wheel. Its compression libraries stay shared
#   (auditwheel bundles them).
# - libstdc++ is linked statically into the module and the two CLIs (-static-libstdc++; libgcc_s
#   stays shared, it is on the manylinux allow-list and a static libgcc would need glibc 2.35's
#   _dl_find_object), hidden inside each binary (--exclude-libs), so the GLIBCXX version the
#   wheel needs is the one of the libraries it bundles (libLerc, libfmt: 3.4.29), not the 3.4.30
#   (std::condition_variable::wait) the module needs from a shared libstdc++ (measured: that
#   alone would make the wheel manylinux_2_35).
#   oneTBB's runtime keeps using the system libstdc++: an exception escaping a oneTBB task
#   would cross the two copies (same Itanium C++ ABI); dspipe reports errors as Status, and the
#   Python tests (scripts/test.sh) run on this wheel.
# - std::random_device in the static libstdc++ calls arc4random (GLIBC_2.36): the link wraps it
#   to dspipe_wheel_compat.c's getrandom() version, so the wheel keeps the floor its libraries
#   set (manylinux_2_34) and installs on glibc 2.35 (Colab).
# - OpenCV is the small static build of scripts/build-opencv.sh (OpenCV_DIR points at it).
# - DCMTK is the small static build of scripts/build-dcmtk.sh (DCMTK_DIR points at it; its
#   exported targets carry their own dependencies: one another, libz, pthread, rt). Debian's
#   shared libdcmdata links libxml2 -> ICU, the same 31 MB and GLIBCXX_3.4.30 as above (measured:
#   the wheel was manylinux_2_35, 35.7 MiB, with 13 more bundled libraries), and reads its data
#   dictionary from /usr/share/libdcmtk17; the static one has no XML or ICU and the dictionary
#   compiled in. dspipe_wheel_link_setup() refuses a shared DCMTK.
include_guard(GLOBAL)

find_library(DSPIPE_WHEEL_LIBARCHIVE_A NAMES libarchive.a REQUIRED)
set(LibArchive_LIBRARY "${DSPIPE_WHEEL_LIBARCHIVE_A}" CACHE FILEPATH "" FORCE)

# Called after find_package(LibArchive) and find_package(DCMTK): the static libarchive's own
# dependencies (Debian's `pkg-config --static --libs libarchive`, less libacl and libxml2, which
# only the disk-writing and xar code that dspipe does not link use; liblz4 ships no dev symlink on
# Debian 12), and a check that DCMTK is the static build of scripts/build-dcmtk.sh (its exported
# targets carry their own dependencies: one another, libz, pthread, rt), not Debian's shared one.
function(dspipe_wheel_link_setup)
  get_target_property(_dcmdata_type DCMTK::dcmdata TYPE)
  if(NOT _dcmdata_type STREQUAL "STATIC_LIBRARY")
    message(FATAL_ERROR "DSPIPE_WHEEL: DCMTK::dcmdata is a ${_dcmdata_type} (${DCMTK_DIR}); "
      "the wheel links the static DCMTK of scripts/build-dcmtk.sh (set DCMTK_DIR to its "
      "lib/cmake/dcmtk; scripts/build-wheel.sh does)")
  endif()
  set(_deps)
  foreach(_lib nettle lzma zstd bz2 z)
    find_library(DSPIPE_WHEEL_${_lib} NAMES ${_lib} REQUIRED)
    list(APPEND _deps "${DSPIPE_WHEEL_${_lib}}")
  endforeach()
  find_library(DSPIPE_WHEEL_lz4 NAMES lz4 liblz4.so.1 REQUIRED)
  list(APPEND _deps "${DSPIPE_WHEEL_lz4}")
  set_property(TARGET LibArchive::LibArchive APPEND PROPERTY INTERFACE_LINK_LIBRARIES ${_deps})
endfunction()

# For the module and the CLIs (python/CMakeLists.txt, tools/ via the root): link options plus the
# wrapper's object library.
add_library(dspipe_wheel_compat OBJECT ${CMAKE_CURRENT_LIST_DIR}/dspipe_wheel_compat.c)
set(DSPIPE_WHEEL_LINK_OPTIONS -static-libstdc++ -Wl,--exclude-libs,ALL -Wl,--as-needed
  -Wl,--gc-sections -Wl,--wrap=arc4random)
function(dspipe_wheel_link target)
  target_link_options(${target} PRIVATE ${DSPIPE_WHEEL_LINK_OPTIONS})
  target_sources(${target} PRIVATE $<TARGET_OBJECTS:dspipe_wheel_compat>)
endfunction()
