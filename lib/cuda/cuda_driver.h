// SPDX-License-Identifier: Apache-2.0
// What this machine has of an NVIDIA driver, looked at without CUDA: the kernel module's
// /proc/driver/nvidia, the /dev/nvidia* device nodes and the user-space driver libcuda.so.1.
// When CUDA reports an error and none of the three is there, the reason says "no NVIDIA driver
// or device found" instead of CUDA's "driver version is insufficient", which reads as "upgrade
// your driver" on a machine that has no GPU at all (issue 40, item 17).
#pragma once

#include <string>

namespace dspipe::cuda {

struct NvidiaDriverProbe {
  bool proc_driver = false;  // /proc/driver/nvidia exists
  bool device_node = false;  // some /dev/nvidia* exists
  bool libcuda = false;      // dlopen("libcuda.so.1") succeeds
  bool Any() const { return proc_driver || device_node || libcuda; }
};

NvidiaDriverProbe ProbeNvidiaDriver();

// The reason string for a machine without any of the three ("no NVIDIA driver or device found
// (no /proc/driver/nvidia, no /dev/nvidia*, no libcuda.so.1)"); empty when the probe found one,
// so CUDA's own error is the better reason.
std::string NoNvidiaDriverReason(const NvidiaDriverProbe& probe);

}  // namespace dspipe::cuda
