# SPDX-License-Identifier: Apache-2.0
# Configures a consumer that builds dspipe from source (add_subdirectory or FetchContent),
# builds only its program (and the dspipe libraries it needs), and runs it. CUDA off: the CUDA
# path is not what this tests. -O0 without debug info: what is tested is how dspipe builds and
# links inside another project, not its speed, and the two builds of the library (each test
# compiles it) take a fraction of an optimized build's time.
file(REMOVE_RECURSE ${WORK})
function(run)
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "failed (${rc}): ${ARGN}\n${out}\n${err}")
  endif()
  message(STATUS "${out}")
  set(out "${out}" PARENT_SCOPE)
endfunction()
# Through ccache where it is installed (scripts/lib/ccache.sh's CCACHE_BASEDIR is the checkout):
# the library's sources compile the same way in every run, so a rerun recompiles what changed.
find_program(CCACHE_PROGRAM ccache)
set(launch)
if(CCACHE_PROGRAM)
  set(launch -DCMAKE_C_COMPILER_LAUNCHER=${CCACHE_PROGRAM}
             -DCMAKE_CXX_COMPILER_LAUNCHER=${CCACHE_PROGRAM})
endif()
# OPENCV_MODULES: OpenCV's CMake package hidden, so dspipe finds the modules alone (the build
# after `scripts/install-deps.sh --tools`); the configure output must say so.
set(opencv)
if(OPENCV_MODULES)
  set(opencv -DCMAKE_DISABLE_FIND_PACKAGE_OpenCV=ON)
endif()
run(${CMAKE_COMMAND} -S ${CONSUMER_SRC} -B ${WORK}/build -G ${GENERATOR} ${launch}
    -DDSPIPE_SOURCE=${DSPIPE_SOURCE} -DCMAKE_BUILD_TYPE=Debug "-DCMAKE_C_FLAGS_DEBUG=-O0"
    "-DCMAKE_CXX_FLAGS_DEBUG=-O0" -DDSPIPE_CUDA=OFF -DBUILD_SHARED_LIBS=${SHARED} ${opencv})
if(OPENCV_MODULES AND NOT out MATCHES "OpenCV: the modules' libraries without OpenCV's CMake package")
  message(FATAL_ERROR "OPENCV_MODULES: dspipe did not take cmake/dspipeOpenCVModules.cmake")
endif()
run(${CMAKE_COMMAND} --build ${WORK}/build --target consumer)
run(${WORK}/build/consumer ${WORK}/data)
