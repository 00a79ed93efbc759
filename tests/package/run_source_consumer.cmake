# Configures a consumer that builds dspipe from source (add_subdirectory or FetchContent),
# builds only its program (and the dspipe libraries it needs), and runs it. CUDA off: the CUDA
# path is not what this tests, and the consumer build stays short.
file(REMOVE_RECURSE ${WORK})
function(run)
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "failed (${rc}): ${ARGN}\n${out}\n${err}")
  endif()
  message(STATUS "${out}")
endfunction()
run(${CMAKE_COMMAND} -S ${CONSUMER_SRC} -B ${WORK}/build -G ${GENERATOR}
    -DDSPIPE_SOURCE=${DSPIPE_SOURCE} -DCMAKE_BUILD_TYPE=RelWithDebInfo -DDSPIPE_CUDA=OFF
    -DBUILD_SHARED_LIBS=${SHARED})
run(${CMAKE_COMMAND} --build ${WORK}/build --target consumer)
run(${WORK}/build/consumer ${WORK}/data)
