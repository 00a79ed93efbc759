// SPDX-License-Identifier: Apache-2.0
// Private: which path a DeviceLoader takes, from what the CUDA runtime reports. Split out so
// tests can feed it device counts and current devices that no test machine has.
#pragma once

#include <string>

#include "dspipe/status.h"

namespace dspipe::device {

// What the CUDA runtime says (CudaAvailable, CudaDeviceCount, CudaCurrentDevice).
struct CudaProbe {
  bool available = false;
  std::string why;     // why not available
  int count = 0;       // visible devices
  int current = 0;     // the calling thread's current device (cudaGetDevice)
};

// The probe of this process and thread, from the real CUDA runtime.
CudaProbe ProbeCuda();

// requested: DeviceOptions::device (kAuto -1, kCpu -2, or an ordinal). *device: the CUDA
// ordinal to use, or -1 for the CPU path. kAuto takes the caller's current device (on a
// data-parallel rank that is the rank's GPU, not GPU 0). Errors name the request.
Status PickDevice(const CudaProbe& probe, int requested, int* device);

}  // namespace dspipe::device
