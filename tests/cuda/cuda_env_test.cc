// SPDX-License-Identifier: Apache-2.0
// The reason CudaAvailable gives on a machine without an NVIDIA driver (issue 40, item 17):
// "no NVIDIA driver or device found", not CUDA's "driver version is insufficient".
#include <gtest/gtest.h>

#include <string>

#include "cuda/cuda_driver.h"
#include "dspipe/cuda.h"

namespace dspipe {
namespace {

using cuda::NoNvidiaDriverReason;
using cuda::NvidiaDriverProbe;
using cuda::ProbeNvidiaDriver;

TEST(CudaDriverProbe, NothingFoundIsSaidAsNoDriverOrDevice) {
  EXPECT_EQ(NoNvidiaDriverReason(NvidiaDriverProbe{}),
            "no NVIDIA driver or device found (no /proc/driver/nvidia, no /dev/nvidia*, no "
            "libcuda.so.1)");
}

TEST(CudaDriverProbe, AnyPartFoundLeavesTheReasonToCuda) {
  NvidiaDriverProbe p;
  p.libcuda = true;
  EXPECT_EQ(NoNvidiaDriverReason(p), "");
  p = {};
  p.device_node = true;
  EXPECT_EQ(NoNvidiaDriverReason(p), "");
  p = {};
  p.proc_driver = true;
  EXPECT_EQ(NoNvidiaDriverReason(p), "");
}

TEST(CudaDriverProbe, AMachineWithoutADriverGetsThatReasonFromCudaAvailable) {
  std::string why;
  if (CudaAvailable(&why)) GTEST_SKIP() << "a CUDA device is visible";
  if (!DSPIPE_HAVE_CUDA) GTEST_SKIP() << "built without CUDA: " << why;
  if (!why.empty() && why.rfind("disabled by", 0) == 0) GTEST_SKIP() << why;
  const NvidiaDriverProbe probe = ProbeNvidiaDriver();
  if (probe.Any()) {
    EXPECT_EQ(why.rfind("cudaGetDeviceCount: ", 0), 0u) << why;
  } else {
    EXPECT_EQ(why, NoNvidiaDriverReason(probe));
    EXPECT_EQ(why.find("insufficient"), std::string::npos) << why;
  }
}

}  // namespace
}  // namespace dspipe
