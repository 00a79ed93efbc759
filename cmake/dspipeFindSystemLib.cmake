# SPDX-License-Identifier: Apache-2.0
# dspipe_find_system_lib(<Pkg> <target> <header> <library names...>)
# Finds a C library of a Debian -dev package by its header and library file and defines the
# IMPORTED target <target>. The Find<Pkg>.cmake modules beside this file call it; they serve
# both dspipe's own build and the installed package (dspipeConfig.cmake's find_dependency), so
# a consumer resolves dspipe's dependencies the same way dspipe did, without pkg-config.
include_guard(GLOBAL)
include(FindPackageHandleStandardArgs)

macro(dspipe_find_system_lib pkg target header)
  find_path(${pkg}_INCLUDE_DIR ${header})
  find_library(${pkg}_LIBRARY NAMES ${ARGN})
  find_package_handle_standard_args(${pkg} REQUIRED_VARS ${pkg}_LIBRARY ${pkg}_INCLUDE_DIR)
  if(${pkg}_FOUND AND NOT TARGET ${target})
    add_library(${target} UNKNOWN IMPORTED)
    set_target_properties(${target} PROPERTIES
      IMPORTED_LOCATION "${${pkg}_LIBRARY}"
      INTERFACE_INCLUDE_DIRECTORIES "${${pkg}_INCLUDE_DIR}")
  endif()
  mark_as_advanced(${pkg}_INCLUDE_DIR ${pkg}_LIBRARY)
endmacro()
