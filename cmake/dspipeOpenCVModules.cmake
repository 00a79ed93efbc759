# SPDX-License-Identifier: Apache-2.0
# OpenCV's three modules without OpenCV's CMake package. Debian ships OpenCVConfig.cmake only in
# libopencv-dev, which depends on every module's -dev package (contrib, dnn, viz with VTK,
# videoio with FFmpeg, ...: on a fresh Debian 12, 195 more packages and 600 MB more on disk than
# dspipe needs). The modules dspipe links have -dev packages of their own, with the headers and
# the libraries but no CMake package: libopencv-core-dev, libopencv-imgproc-dev and
# libopencv-imgcodecs-dev (scripts/install-deps.sh --tools installs those). Used when
# find_package(OpenCV) finds nothing; defines what that would: the IMPORTED targets opencv_core,
# opencv_imgproc and opencv_imgcodecs, OpenCV_LIBS and OpenCV_INCLUDE_DIRS.
include_guard(GLOBAL)
include(FindPackageHandleStandardArgs)
find_path(OpenCV_MODULES_INCLUDE_DIR opencv2/core.hpp PATH_SUFFIXES opencv4)
set(_dspipe_cv_vars OpenCV_MODULES_INCLUDE_DIR)
foreach(_m core imgproc imgcodecs)
  find_library(OpenCV_${_m}_LIBRARY opencv_${_m})
  list(APPEND _dspipe_cv_vars OpenCV_${_m}_LIBRARY)
  mark_as_advanced(OpenCV_${_m}_LIBRARY)
endforeach()
mark_as_advanced(OpenCV_MODULES_INCLUDE_DIR)
find_package_handle_standard_args(OpenCVModules
  REQUIRED_VARS ${_dspipe_cv_vars}
  REASON_FAILURE_MESSAGE
    "neither OpenCV's CMake package (Debian: libopencv-dev) nor the modules' headers and libraries (Debian: libopencv-core-dev libopencv-imgproc-dev libopencv-imgcodecs-dev) were found: run scripts/install-deps.sh, or set OpenCV_DIR")
if(NOT OpenCVModules_FOUND)
  message(FATAL_ERROR "dspipe needs OpenCV's core, imgproc and imgcodecs modules")
endif()
set(OpenCV_LIBS)
set(OpenCV_INCLUDE_DIRS ${OpenCV_MODULES_INCLUDE_DIR})
set(_dspipe_cv_deps)
foreach(_m core imgproc imgcodecs)  # each module needs the ones before it
  if(NOT TARGET opencv_${_m})
    add_library(opencv_${_m} SHARED IMPORTED)
    set_target_properties(opencv_${_m} PROPERTIES
      IMPORTED_LOCATION "${OpenCV_${_m}_LIBRARY}"
      INTERFACE_INCLUDE_DIRECTORIES "${OpenCV_MODULES_INCLUDE_DIR}"
      INTERFACE_LINK_LIBRARIES "${_dspipe_cv_deps}")
  endif()
  list(APPEND _dspipe_cv_deps opencv_${_m})
  list(APPEND OpenCV_LIBS opencv_${_m})
endforeach()
message(STATUS "OpenCV: the modules' libraries without OpenCV's CMake package (${OpenCV_INCLUDE_DIRS})")
