# SPDX-License-Identifier: Apache-2.0
# Shared by the add_subdirectory and FetchContent consumers: dspipe as a subproject builds its
# libraries only (tests, benches and install rules off), follows BUILD_SHARED_LIBS, and the
# consumer program links dspipe::dspipe as with find_package.
foreach(v DSPIPE_BUILD_TESTS DSPIPE_BUILD_BENCH DSPIPE_INSTALL)
  if(${v})
    message(FATAL_ERROR "${v} is ON although dspipe is not the top-level project")
  endif()
endforeach()
foreach(t convert_test loader_test normalize_bench)
  if(TARGET ${t})
    message(FATAL_ERROR "dspipe defined its test/bench target ${t} as a subproject")
  endif()
endforeach()
get_target_property(_type dspipe::core TYPE)
if(BUILD_SHARED_LIBS AND NOT _type STREQUAL "SHARED_LIBRARY")
  message(FATAL_ERROR "BUILD_SHARED_LIBS=ON but dspipe::core is a ${_type}")
elseif(NOT BUILD_SHARED_LIBS AND NOT _type STREQUAL "STATIC_LIBRARY")
  message(FATAL_ERROR "BUILD_SHARED_LIBS=OFF but dspipe::core is a ${_type}")
endif()
add_executable(consumer ${CMAKE_CURRENT_LIST_DIR}/consumer/main.cc)
target_link_libraries(consumer PRIVATE dspipe::dspipe)
