// Run-time CUDA detection and pinned host memory. Compiled in every build; the CUDA parts only
// when DSPIPE_HAVE_CUDA. The dynamic loader never needs libcuda: the CUDA runtime is linked
// statically and opens the driver itself, reporting its absence as an error we turn into a
// reason string.
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <string>

#include "dspipe/cuda.h"
#include "dspipe/log.h"

#if DSPIPE_HAVE_CUDA
#include <cuda_runtime.h>

#include "kernels/cuda_check.h"
#endif

namespace dspipe {

#if DSPIPE_HAVE_CUDA
namespace kernels_internal {

Status CudaStatus(cudaError_t err, const char* call) {
  std::string msg = std::string("CUDA call `") + call + "` failed: " + cudaGetErrorString(err) +
                    " (" + cudaGetErrorName(err) + ")";
  switch (err) {
    case cudaErrorNoDevice:
    case cudaErrorInsufficientDriver:
    case cudaErrorNoKernelImageForDevice:
    case cudaErrorUnsupportedPtxVersion:
      return Status::Unsupported(msg);
    default:
      return Status::Internal(msg);
  }
}

}  // namespace kernels_internal
#endif

namespace {

struct Detection {
  bool available = false;
  int count = 0;
  std::string reason;
};

Detection RunDetection() {
  Detection r;
  const char* off = std::getenv("DSPIPE_DISABLE_CUDA");
  if (off != nullptr && *off != '\0' && std::strcmp(off, "0") != 0) {
    r.reason = "disabled by DSPIPE_DISABLE_CUDA";
    return r;
  }
#if DSPIPE_HAVE_CUDA
  int count = 0;
  const cudaError_t err = cudaGetDeviceCount(&count);
  if (err != cudaSuccess) {
    r.reason = std::string("cudaGetDeviceCount: ") + cudaGetErrorString(err) + " (" +
               cudaGetErrorName(err) + ")";
    (void)cudaGetLastError();  // clear it so later calls start clean
  } else if (count <= 0) {
    r.reason = "no CUDA device visible";
  } else {
    r.available = true;
    r.count = count;
  }
#else
  r.reason = "dspipe was built without CUDA";
#endif
  return r;
}

const Detection& Detect() {
  static const Detection d = [] {
    Detection r = RunDetection();
    // Callers that fall back to the CPU say so (one line); an explicit GPU request fails with
    // the reason instead.
    Log(LogLevel::kDebug, r.available ? "CUDA: " + std::to_string(r.count) + " device(s) visible"
                                      : "CUDA unavailable: " + r.reason);
    return r;
  }();
  return d;
}

constexpr size_t kAlign = 4096;

void* AlignedFallback(size_t bytes) {
  static std::once_flag once;
  std::call_once(once, [] {
    std::string why;
    CudaAvailable(&why);
    Log(LogLevel::kInfo, "AllocPinned: " + (why.empty() ? std::string("pinning failed") : why) +
                             "; using pageable 4096-byte-aligned memory instead");
  });
  const size_t rounded = (bytes + kAlign - 1) / kAlign * kAlign;
  return std::aligned_alloc(kAlign, rounded);
}

}  // namespace

bool CudaAvailable(std::string* reason) {
  const Detection& d = Detect();
  if (reason != nullptr) *reason = d.reason;
  return d.available;
}

int CudaDeviceCount() { return Detect().count; }

void* AllocPinned(size_t bytes) {
  if (bytes == 0) return nullptr;
#if DSPIPE_HAVE_CUDA
  if (CudaAvailable()) {
    void* p = nullptr;
    const cudaError_t err = cudaHostAlloc(&p, bytes, cudaHostAllocPortable);
    if (err == cudaSuccess) return p;
    (void)cudaGetLastError();
    Log(LogLevel::kWarn, "cudaHostAlloc(" + std::to_string(bytes) +
                             " bytes) failed: " + cudaGetErrorString(err) +
                             "; falling back to pageable memory for this buffer");
    const size_t rounded = (bytes + kAlign - 1) / kAlign * kAlign;
    return std::aligned_alloc(kAlign, rounded);
  }
#endif
  return AlignedFallback(bytes);
}

bool IsPinned(const void* p) {
  if (p == nullptr) return false;
#if DSPIPE_HAVE_CUDA
  if (CudaAvailable()) {
    unsigned int flags = 0;
    if (cudaHostGetFlags(&flags, const_cast<void*>(p)) == cudaSuccess) return true;
    (void)cudaGetLastError();  // "invalid argument" for pageable memory: not sticky, clear it
  }
#endif
  return false;
}

void FreePinned(void* p) {
  if (p == nullptr) return;
#if DSPIPE_HAVE_CUDA
  if (IsPinned(p)) {
    const cudaError_t err = cudaFreeHost(p);
    if (err != cudaSuccess) {
      Log(LogLevel::kError, std::string("cudaFreeHost failed: ") + cudaGetErrorString(err));
    }
    return;
  }
#endif
  std::free(p);
}

}  // namespace dspipe
