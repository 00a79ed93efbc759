// SPDX-License-Identifier: Apache-2.0
// Private: turning cudaError_t into dspipe::Status. Include only from CUDA-enabled sources.
#pragma once

#include <cuda_runtime.h>

#include "dspipe/status.h"

namespace dspipe::cuda {

// "CUDA call `cudaMemcpyAsync(...)` failed: out of memory (cudaErrorMemoryAllocation)".
// No device / driver problems map to Unsupported, everything else to Internal.
Status CudaStatus(cudaError_t err, const char* call);

}  // namespace dspipe::cuda

// Evaluates a CUDA runtime call; on failure returns a Status naming the call and the error.
#define DSPIPE_CUDA_RETURN_IF_ERROR(call)                                                  \
  do {                                                                                     \
    const cudaError_t _dspipe_err = (call);                                                \
    if (_dspipe_err != cudaSuccess) return ::dspipe::cuda::CudaStatus(_dspipe_err, #call); \
  } while (0)
