// SPDX-License-Identifier: Apache-2.0
// The CUDA path: run-time detection, pinned host memory, GPU normalization.
//
// No CUDA header or type appears here: streams and events are passed as void* (cudaStream_t /
// cudaEvent_t), device buffers as void*. Every function exists in every build; a build without
// CUDA, or a machine without a driver or device, gets CudaAvailable() == false (one info line
// in the log, once), AllocPinned falling back to page-aligned pageable memory, and
// Status::Unsupported from the GPU calls. Nothing here crashes or aborts for lack of a GPU.
// Setting the environment variable DSPIPE_DISABLE_CUDA=1 forces the no-GPU path (for tests).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "dspipe/normalize.h"
#include "dspipe/status.h"

namespace dspipe {

// True when this build has CUDA and the process sees at least one device. Otherwise false and,
// if reason is non-null, *reason says why ("dspipe was built without CUDA", "no NVIDIA driver
// or device found (...)" on a machine without one, "cudaGetDeviceCount: ..." when a driver is
// there and CUDA still fails, ...). Detection runs once per process; thread-safe.
bool CudaAvailable(std::string* reason = nullptr);
// Number of visible devices; 0 when CudaAvailable() is false.
int CudaDeviceCount();
// The calling thread's current CUDA device (cudaGetDevice): what a data-parallel rank set with
// cudaSetDevice / torch.cuda.set_device. 0 when CudaAvailable() is false.
int CudaCurrentDevice();

// Page-locked host memory for fast asynchronous host->device copies (cudaHostAlloc), 4096-byte
// aligned. Without a device it falls back to 4096-aligned pageable memory (said once in the
// log), so callers can use it unconditionally. Returns nullptr when bytes == 0 or on failure.
// Pinned memory is a scarce system resource: allocate batch buffers once and reuse them.
// Thread-safe. Free only with FreePinned.
void* AllocPinned(size_t bytes);
void FreePinned(void* p);  // nullptr is a no-op
// True when p came from AllocPinned and is really page-locked (not the fallback).
bool IsPinned(const void* p);

// Host-side waits on a stream, without blocking: CudaRecordEvent records an event on `stream`
// (cudaStream_t; nullptr = the legacy default stream); once CudaEventDone(event) is true, all
// work enqueued there before the call has run (e.g. a copy out of a pinned buffer, which may
// then be reused). nullptr without a usable device (nothing to wait for); when recording fails
// it synchronizes the stream itself and returns nullptr. CudaEventDone(nullptr) is true;
// CudaFreeEvent(nullptr) is a no-op. Thread-safe.
void* CudaRecordEvent(void* stream);
bool CudaEventDone(void* event);
void CudaFreeEvent(void* event);

// ---- raw device kernels (pointers are device memory; stream is a cudaStream_t or nullptr) --
// Enqueue the normalization of d_src [n][h][w][c] uint8 into d_dst [n][c][h][w] of `dtype`
// (float32, or IEEE half); same formula as the CPU path (normalize.h). Image i is mirrored when
// p.mirror or (d_mirror_flags && d_mirror_flags[i] != 0) (d_mirror_flags: n bytes on device,
// may be null). Fastest when h*w % 4 == 0, w % 4 == 0 when mirroring, and both pointers are
// 16-byte aligned (cudaMalloc memory is); any other shape takes a correct scalar path.
// Returns after enqueueing; errors name the failing CUDA call.
Status NormalizeNhwcToNchwGpu(const uint8_t* d_src, int n, int h, int w, const NormalizeParams& p,
                              const uint8_t* d_mirror_flags, ImageDtype dtype, void* d_dst,
                              void* stream);
// Enqueue masks d_src [n][h][w] uint8 -> d_dst [n][h][w] int64, mirrored like the images.
Status MasksToInt64Gpu(const uint8_t* d_src, int n, int h, int w, bool mirror,
                       const uint8_t* d_mirror_flags, int64_t* d_dst, void* stream);
// Enqueue masks d_src [n][h][w] uint8 -> d_dst [n][h][w] uint8, mirrored like the images (a
// mirrored copy; d_src and d_dst must not overlap).
Status MasksToUint8Gpu(const uint8_t* d_src, int n, int h, int w, bool mirror,
                       const uint8_t* d_mirror_flags, uint8_t* d_dst, void* stream);

// ---- GpuNormalizer: pinned host batch -> normalized device batch --------------------------

struct GpuNormalizerOptions {
  // CUDA device ordinal. Default 0.
  int device = 0;
  // The images' element type: float32, or float16 (half the device memory and write
  // bandwidth, ~3 decimal digits of precision). Default float32.
  ImageDtype dtype = ImageDtype::kFloat32;
  // Device buffer sets in rotation. A returned DeviceBatch stays valid until it is Released or
  // until num_slots further Process calls, whichever comes first. 2 lets the consumer work on
  // batch k while batch k+1 is copied; more costs device memory. Default 2, minimum 1.
  int num_slots = 2;
  // Record CUDA events so LastTimings() can report H2D and kernel times. Cheap (3 events per
  // batch); turn off to save a few microseconds. Default true.
  bool timing = true;
  // The masks' element type: int64 class ids (what cross-entropy losses take), or uint8 (8x less
  // device memory and bandwidth; convert on the consumer side). Default int64.
  MaskDtype mask_dtype = MaskDtype::kInt64;
};

// One uint8 batch in host memory, ideally from AllocPinned (pageable memory works, but the copy
// is then synchronous and slower). The memory must stay untouched until WaitInputConsumed().
struct HostBatch {
  const uint8_t* images = nullptr;  // [n][h][w][channels] uint8, required
  const uint8_t* masks = nullptr;   // [n][h][w] uint8 class ids, or nullptr
  const uint8_t* mirror = nullptr;  // [n] per-sample flip flags (0/1), or nullptr
  int n = 0, h = 0, w = 0;
};

// A normalized batch in device memory, owned by the GpuNormalizer that produced it. Work on it
// only after waiting for ready_event (StreamWaitReady / WaitReady).
struct DeviceBatch {
  void* images = nullptr;  // [n][c][h][w] float* (dtype float32) or __half* (float16)
  void* masks = nullptr;   // [n][h][w] int64_t* (mask_dtype int64) or uint8_t*, or nullptr
  int n = 0, c = 0, h = 0, w = 0;
  ImageDtype dtype = ImageDtype::kFloat32;
  MaskDtype mask_dtype = MaskDtype::kInt64;
  void* stream = nullptr;       // cudaStream_t the work was enqueued on (the normalizer's own)
  void* ready_event = nullptr;  // cudaEvent_t recorded after the last kernel
  int slot = -1;                // which buffer set (for Release)
};

struct GpuTimings {
  float h2d_ms = 0;        // host->device copies of images, masks and flags
  float normalize_ms = 0;  // normalize + mask kernels
};

// Owns a non-blocking CUDA stream, the device buffers (sized on first use, grown when a larger
// batch arrives, reused otherwise) and the events. Not thread-safe: drive one instance from
// one thread at a time (it may be a different thread per call).
class GpuNormalizer {
 public:
  // Unsupported (with CudaAvailable's reason) when there is no usable device; InvalidArgument
  // for a bad device ordinal or num_slots.
  static Status Create(const GpuNormalizerOptions& options, std::unique_ptr<GpuNormalizer>* out);
  ~GpuNormalizer();  // waits for outstanding work, frees everything
  GpuNormalizer(const GpuNormalizer&) = delete;
  GpuNormalizer& operator=(const GpuNormalizer&) = delete;

  // Enqueues H2D copies, normalization (p.channels channels) and mask conversion for in, and
  // fills *out. Returns without waiting for the GPU.
  Status Process(const HostBatch& in, const NormalizeParams& p, DeviceBatch* out);
  // As above, into buffer set `slot` (0 <= slot < num_slots) instead of the next in rotation,
  // for callers that track which slots their consumers still hold. The slot's previous batch
  // becomes invalid. InvalidArgument for a slot out of range.
  Status Process(const HostBatch& in, const NormalizeParams& p, int slot, DeviceBatch* out);
  // Blocks until the host memory of the batch that produced b may be reused.
  Status WaitInputConsumed(const DeviceBatch& b);
  // Blocks the host until b is ready.
  Status WaitReady(const DeviceBatch& b);
  // Makes consumer_stream (cudaStream_t; nullptr = legacy default stream) wait for b.
  Status StreamWaitReady(const DeviceBatch& b, void* consumer_stream);
  // Tells the normalizer the consumer is done with b once consumer_stream reaches this point
  // (nullptr: done now, host-synchronously). The slot's next reuse waits for that.
  Status Release(const DeviceBatch& b, void* consumer_stream);
  // Timings of the most recent Process call; blocks until it has finished. Unsupported when
  // options.timing is false.
  Status LastTimings(GpuTimings* t);
  // Timings of batch b (valid until its slot is processed again); blocks until b is ready.
  Status Timings(const DeviceBatch& b, GpuTimings* t);

 private:
  struct Impl;
  explicit GpuNormalizer(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace dspipe
