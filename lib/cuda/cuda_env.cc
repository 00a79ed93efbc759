// SPDX-License-Identifier: Apache-2.0
// Run-time CUDA detection and pinned host memory. Compiled in every build; the CUDA parts only
// when DSPIPE_HAVE_CUDA. The dynamic loader never needs libcuda: the CUDA runtime is linked
// statically and opens the driver itself, reporting its absence as an error we turn into a
// reason string.
#include <dirent.h>
#include <dlfcn.h>
#include <sys/stat.h>

#include <cstdlib>
#include <cstring>
#include <mutex>
#include <string>
#include <unordered_map>

#include "cuda/cuda_driver.h"
#include "dspipe/cuda.h"
#include "dspipe/log.h"

#if DSPIPE_HAVE_CUDA
#include <cuda_runtime.h>

#include "cuda/cuda_check.h"
#endif

namespace dspipe {

#if DSPIPE_HAVE_CUDA
namespace cuda {

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

}  // namespace cuda
#endif

namespace cuda {

NvidiaDriverProbe ProbeNvidiaDriver() {
  NvidiaDriverProbe p;
  struct stat st {};
  p.proc_driver = ::stat("/proc/driver/nvidia", &st) == 0;
  if (DIR* dev = ::opendir("/dev")) {
    while (const dirent* e = ::readdir(dev)) {
      if (std::strncmp(e->d_name, "nvidia", 6) == 0) {
        p.device_node = true;
        break;
      }
    }
    ::closedir(dev);
  }
  // RTLD_NOLOAD first: the CUDA runtime may already hold it. Otherwise load and unload it.
  void* h = ::dlopen("libcuda.so.1", RTLD_LAZY | RTLD_LOCAL | RTLD_NOLOAD);
  if (h == nullptr) h = ::dlopen("libcuda.so.1", RTLD_LAZY | RTLD_LOCAL);
  if (h != nullptr) {
    p.libcuda = true;
    ::dlclose(h);
  }
  return p;
}

std::string NoNvidiaDriverReason(const NvidiaDriverProbe& probe) {
  if (probe.Any()) return {};
  return "no NVIDIA driver or device found (no /proc/driver/nvidia, no /dev/nvidia*, no "
         "libcuda.so.1)";
}

}  // namespace cuda

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
    r.reason = cuda::NoNvidiaDriverReason(cuda::ProbeNvidiaDriver());
    if (r.reason.empty()) {
      r.reason = std::string("cudaGetDeviceCount: ") + cudaGetErrorString(err) + " (" +
                 cudaGetErrorName(err) + ")";
    }
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

// Every live AllocPinned block and how it was allocated. FreePinned decides by this record,
// never by asking CUDA (cudaHostGetFlags fails after fork and during runtime shutdown, which
// used to send pinned blocks to std::free). Leaked on purpose: blocks may be freed from static
// destructors that run after this file's.
struct Allocations {
  std::mutex mu;
  std::unordered_map<const void*, bool> pinned;  // block -> page-locked (else aligned_alloc)
};
Allocations& Registry() {
  static Allocations* r = new Allocations();
  return *r;
}
void Track(void* p, bool is_pinned) {
  if (p == nullptr) return;
  Allocations& r = Registry();
  std::lock_guard<std::mutex> lock(r.mu);
  r.pinned[p] = is_pinned;
}

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

int CudaCurrentDevice() {
  if (!CudaAvailable()) return 0;
#if DSPIPE_HAVE_CUDA
  int device = 0;
  if (cudaGetDevice(&device) == cudaSuccess) return device;
  (void)cudaGetLastError();
#endif
  return 0;
}

void* AllocPinned(size_t bytes) {
  if (bytes == 0) return nullptr;
#if DSPIPE_HAVE_CUDA
  if (CudaAvailable()) {
    void* p = nullptr;
    const cudaError_t err = cudaHostAlloc(&p, bytes, cudaHostAllocPortable);
    if (err == cudaSuccess) {
      Track(p, true);
      return p;
    }
    (void)cudaGetLastError();
    Log(LogLevel::kWarn, "cudaHostAlloc(" + std::to_string(bytes) +
                             " bytes) failed: " + cudaGetErrorString(err) +
                             "; falling back to pageable memory for this buffer");
    const size_t rounded = (bytes + kAlign - 1) / kAlign * kAlign;
    void* q = std::aligned_alloc(kAlign, rounded);
    Track(q, false);
    return q;
  }
#endif
  void* q = AlignedFallback(bytes);
  Track(q, false);
  return q;
}

bool IsPinned(const void* p) {
  if (p == nullptr) return false;
  Allocations& r = Registry();
  std::lock_guard<std::mutex> lock(r.mu);
  const auto it = r.pinned.find(p);
  return it != r.pinned.end() && it->second;
}

void FreePinned(void* p) {
  if (p == nullptr) return;
  bool is_pinned = false;
  {
    Allocations& r = Registry();
    std::lock_guard<std::mutex> lock(r.mu);
    const auto it = r.pinned.find(p);
    if (it == r.pinned.end()) {
      // Not ours (or freed twice): freeing it with either allocator would corrupt the heap.
      Log(LogLevel::kError,
          "FreePinned: pointer was not allocated by AllocPinned (or was "
          "already freed); ignored");
      return;
    }
    is_pinned = it->second;
    r.pinned.erase(it);
  }
  if (!is_pinned) {
    std::free(p);
    return;
  }
#if DSPIPE_HAVE_CUDA
  const cudaError_t err = cudaFreeHost(p);
  if (err != cudaSuccess) {
    (void)cudaGetLastError();
    // During runtime shutdown the driver releases the memory itself; after fork the child
    // cannot free the parent's pinned pages. Either way std::free would be wrong: leak it.
    Log(err == cudaErrorCudartUnloading ? LogLevel::kDebug : LogLevel::kError,
        std::string("cudaFreeHost failed: ") + cudaGetErrorString(err) + "; block leaked");
  }
#endif
}

void* CudaRecordEvent(void* stream) {
  if (!CudaAvailable()) return nullptr;
#if DSPIPE_HAVE_CUDA
  cudaEvent_t event = nullptr;
  cudaError_t err = cudaEventCreateWithFlags(&event, cudaEventDisableTiming);
  if (err == cudaSuccess) {
    err = cudaEventRecord(event, static_cast<cudaStream_t>(stream));
    if (err == cudaSuccess) return event;
    (void)cudaEventDestroy(event);
  }
  (void)cudaGetLastError();
  Log(LogLevel::kWarn, std::string("cudaEventRecord failed: ") + cudaGetErrorString(err) +
                           "; waiting for the stream instead");
  // No event: the caller would reuse memory a copy may still read. Wait here instead.
  if (cudaStreamSynchronize(static_cast<cudaStream_t>(stream)) != cudaSuccess) {
    (void)cudaGetLastError();
  }
#else
  (void)stream;
#endif
  return nullptr;
}

bool CudaEventDone(void* event) {
  if (event == nullptr) return true;
#if DSPIPE_HAVE_CUDA
  const cudaError_t err = cudaEventQuery(static_cast<cudaEvent_t>(event));
  if (err == cudaErrorNotReady) return false;
  if (err != cudaSuccess) (void)cudaGetLastError();  // a failed context: nothing will complete
#endif
  return true;
}

void CudaFreeEvent(void* event) {
  if (event == nullptr) return;
#if DSPIPE_HAVE_CUDA
  if (cudaEventDestroy(static_cast<cudaEvent_t>(event)) != cudaSuccess) (void)cudaGetLastError();
#endif
}

}  // namespace dspipe
