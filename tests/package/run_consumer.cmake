# SPDX-License-Identifier: Apache-2.0
cmake_policy(VERSION 3.25)  # IN_LIST and the other policies of a project, in script mode
file(REMOVE_RECURSE ${WORK})
function(run)
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "failed (${rc}): ${ARGN}\n${out}\n${err}")
  endif()
  message(STATUS "${out}")
endfunction()
run(${CMAKE_COMMAND} --install ${BUILD_DIR} --prefix ${WORK}/prefix)
# Public means public (issue 38): the installed headers hold no test hooks or internals, and
# option_fields.h (for dspipe's own front ends) is not installed.
set(_inc ${WORK}/prefix/include/dspipe)
if(NOT EXISTS ${_inc}/loader.h)
  message(FATAL_ERROR "no ${_inc}/loader.h: the headers were not installed where expected")
endif()
if(EXISTS ${_inc}/option_fields.h)
  message(FATAL_ERROR "option_fields.h is installed: it is internal to dspipe's front ends")
endif()
file(GLOB _headers ${_inc}/*.h)
foreach(h IN LISTS _headers)
  file(READ ${h} _text)
  foreach(name FaultEnv WaitForCacheCopy OpenLoaderDataset ResolveNormalization nlohmann)
    string(FIND "${_text}" "${name}" _at)
    if(NOT _at EQUAL -1)
      message(FATAL_ERROR "installed ${h} mentions ${name}: internal, keep it under lib/")
    endif()
  endforeach()
endforeach()

# The package is libdspipe.so (issue: a consumer needs only what the public headers use): the
# prefix's lib holds it and its links, and no component archive; the package folder holds
# dspipe's own config, version and targets files, and none of them names a dependency.
file(GLOB _libs RELATIVE ${WORK}/prefix ${WORK}/prefix/lib*/*dspipe*)
set(_want_libs)
foreach(_lib IN LISTS _libs)
  if(NOT _lib MATCHES "/libdspipe\\.so(\\.[0-9]+)*$")
    message(FATAL_ERROR "installed ${_lib}: the package installs libdspipe.so alone")
  endif()
  if(_lib MATCHES "/libdspipe\\.so\\.${VERSION_MAJOR}$")
    set(_so ${WORK}/prefix/${_lib})
  endif()
endforeach()
if(NOT _so)
  message(FATAL_ERROR "no libdspipe.so.${VERSION_MAJOR} installed (found: ${_libs})")
endif()
file(GLOB_RECURSE _cmake_files ${WORK}/prefix/*.cmake)
# One pattern per dependency dspipe links, as a package, target or library name.
set(_deps "find_dependency|find_package|CMAKE_MODULE_PATH|LMDB|SPNG|Deflate|JPEG|EXIF|CSV|"
  "LibArchive|archive|WebP|TIFF|NIfTI|nifti|DCMTK|dcm|CURL|curl|pugixml|INIH|inih|OpenSSL|"
  "crypto|OpenCV|opencv|TBB|tbb|zstd|ZLIB|nlohmann|fmt|CLI11|Threads|pthread|CUDA::|"
  "CUDAToolkit|cudart|dspipe_(core|fetch|stats|codec|format|cache|synth|volume|convert|"
  "kernels|transforms|pipeline|device|profile)")
string(JOIN "" _deps ${_deps})
foreach(f IN LISTS _cmake_files)
  get_filename_component(_name ${f} NAME)
  if(NOT _name MATCHES "^dspipe(Config|ConfigVersion|Targets|Targets-[a-z]+)\\.cmake$")
    message(FATAL_ERROR "installed ${f}: the package needs no Find module or other file")
  endif()
  file(READ ${f} _text)
  string(REGEX REPLACE "#[^\n]*" "" _text "${_text}")  # the code, not its comments
  if(_text MATCHES "(${_deps})")
    message(FATAL_ERROR "installed ${f} names '${CMAKE_MATCH_1}': a dependency of libdspipe.so, "
      "linked privately, that a consumer should not need")
  endif()
endforeach()
list(LENGTH _cmake_files _n)
message(STATUS "package: ${_libs}; ${_n} CMake files naming no dependency")

# The exported symbols, the SONAME (shared_lib_checks.sh). The API is what the source tree's
# include/dspipe/*.h declare, option_fields.h included (not installed, but its names are exported).
string(REPLACE "," ";" _archives "${ARCHIVES}")
get_filename_component(_api ${CMAKE_CURRENT_LIST_DIR}/../../include/dspipe ABSOLUTE)
run(bash ${CMAKE_CURRENT_LIST_DIR}/shared_lib_checks.sh ${VERSION_MAJOR} ${_so} ${_api} ${_archives})

# The consumer configures with every dependency's find_package disabled (finding one would
# fail), and its program needs no library but libdspipe.so and the C++ runtime.
set(_disabled)
foreach(p LMDB SPNG Deflate JPEG EXIF CSV LibArchive WebP TIFF NIfTI DCMTK CURL pugixml INIH
    OpenSSL OpenCV TBB zstd ZLIB nlohmann_json fmt CLI11 Threads CUDAToolkit)
  list(APPEND _disabled -DCMAKE_DISABLE_FIND_PACKAGE_${p}=ON)
endforeach()
run(${CMAKE_COMMAND} -S ${CONSUMER_SRC} -B ${WORK}/build -G ${GENERATOR}
    -DCMAKE_PREFIX_PATH=${WORK}/prefix ${_disabled})
run(${CMAKE_COMMAND} --build ${WORK}/build)
execute_process(COMMAND readelf -d ${WORK}/build/consumer OUTPUT_VARIABLE _dyn
  COMMAND_ERROR_IS_FATAL ANY)
string(REGEX MATCHALL "Shared library: \\[[^]]+\\]" _needed "${_dyn}")
string(REGEX REPLACE "Shared library: \\[([^];]+)\\]" "\\1" _needed "${_needed}")
foreach(_lib IN LISTS _needed)
  if(NOT _lib MATCHES "^(libdspipe\\.so\\.${VERSION_MAJOR}|libstdc\\+\\+\\.so\\.6|libm\\.so\\.6|libgcc_s\\.so\\.1|libc\\.so\\.6)$")
    message(FATAL_ERROR "the consumer needs ${_lib}: it should link libdspipe.so alone")
  endif()
endforeach()
if(NOT "libdspipe.so.${VERSION_MAJOR}" IN_LIST _needed)
  message(FATAL_ERROR "the consumer does not need libdspipe.so.${VERSION_MAJOR}: ${_needed}")
endif()
message(STATUS "consumer needs: ${_needed}")
run(${WORK}/build/consumer ${WORK}/data)
