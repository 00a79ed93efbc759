// SPDX-License-Identifier: Apache-2.0
// GpuNormalizer: pinned uint8 batch -> H2D on a private stream -> fused normalize kernel.
// Each slot has its own device buffers and events so batch k+1 can be copied while the
// consumer still reads batch k. Without CUDA, Create() says why and nothing else is reachable.
#include <string>
#include <utility>
#include <vector>

#include "dspipe/cuda.h"
#include "dspipe/log.h"

#if DSPIPE_HAVE_CUDA
#include <cuda_runtime.h>

#include "cuda/cuda_check.h"
#if __has_include(<nvtx3/nvToolsExt.h>)
#include <nvtx3/nvToolsExt.h>
#define DSPIPE_HAVE_NVTX 1
#endif
#endif

namespace dspipe {

#if DSPIPE_HAVE_CUDA
namespace {

// Named range in Nsight Systems (no-op without nvtx3 or without a profiler attached).
class NvtxRange {
 public:
  explicit NvtxRange([[maybe_unused]] const char* name) {
#ifdef DSPIPE_HAVE_NVTX
    nvtxRangePushA(name);
#endif
  }
  ~NvtxRange() {
#ifdef DSPIPE_HAVE_NVTX
    nvtxRangePop();
#endif
  }
  NvtxRange(const NvtxRange&) = delete;
  NvtxRange& operator=(const NvtxRange&) = delete;
};

struct DeviceBuffer {
  void* ptr = nullptr;
  size_t bytes = 0;
};

// Grows b to at least `bytes`; the old buffer may still be read by queued work, so wait first.
Status Reserve(DeviceBuffer* b, size_t bytes, cudaStream_t stream) {
  if (b->bytes >= bytes) return Status::OK();
  if (b->ptr != nullptr) {
    DSPIPE_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(stream));
    DSPIPE_CUDA_RETURN_IF_ERROR(cudaFree(b->ptr));
    *b = DeviceBuffer{};
  }
  DSPIPE_CUDA_RETURN_IF_ERROR(cudaMalloc(&b->ptr, bytes));
  b->bytes = bytes;
  return Status::OK();
}

struct Slot {
  DeviceBuffer images_u8, images_out, masks_u8, masks_out, flags;
  cudaEvent_t start = nullptr, h2d_done = nullptr, ready = nullptr, released = nullptr;
  bool release_pending = false;  // `released` was recorded on a consumer stream
};

void LogIfError(cudaError_t err, const char* what) {
  if (err != cudaSuccess) {
    Log(LogLevel::kError, std::string("~GpuNormalizer: ") + what + ": " + cudaGetErrorString(err));
  }
}

// Makes `device` current for a scope and restores the caller's current device afterwards: on a
// data-parallel rank the trainer's current device must not change under it.
class DeviceGuard {
 public:
  explicit DeviceGuard(int device) {
    if (cudaGetDevice(&prev_) != cudaSuccess) {
      (void)cudaGetLastError();
      prev_ = -1;
    }
    if (prev_ != device) {
      err_ = cudaSetDevice(device);
      switched_ = err_ == cudaSuccess && prev_ >= 0;
    }
  }
  ~DeviceGuard() {
    if (switched_) LogIfError(cudaSetDevice(prev_), "restore the caller's device");
  }
  DeviceGuard(const DeviceGuard&) = delete;
  DeviceGuard& operator=(const DeviceGuard&) = delete;
  cudaError_t error() const { return err_; }

 private:
  int prev_ = -1;
  cudaError_t err_ = cudaSuccess;
  bool switched_ = false;
};

}  // namespace

struct GpuNormalizer::Impl {
  GpuNormalizerOptions opt;
  cudaStream_t stream = nullptr;
  std::vector<Slot> slots;
  int next = 0;
  int last = -1;

  Status Init() {
    DeviceGuard guard(opt.device);
    if (guard.error() != cudaSuccess) {
      return cuda::CudaStatus(guard.error(), "cudaSetDevice(options.device)");
    }
    DSPIPE_CUDA_RETURN_IF_ERROR(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
    slots.resize(static_cast<size_t>(opt.num_slots));
    const unsigned timing_flags = opt.timing ? cudaEventDefault : cudaEventDisableTiming;
    for (Slot& s : slots) {
      DSPIPE_CUDA_RETURN_IF_ERROR(cudaEventCreateWithFlags(&s.start, timing_flags));
      DSPIPE_CUDA_RETURN_IF_ERROR(cudaEventCreateWithFlags(&s.h2d_done, timing_flags));
      DSPIPE_CUDA_RETURN_IF_ERROR(cudaEventCreateWithFlags(&s.ready, timing_flags));
      DSPIPE_CUDA_RETURN_IF_ERROR(cudaEventCreateWithFlags(&s.released, cudaEventDisableTiming));
    }
    return Status::OK();
  }

  ~Impl() {
    if (stream == nullptr) return;
    DeviceGuard guard(opt.device);
    LogIfError(guard.error(), "cudaSetDevice");
    LogIfError(cudaStreamSynchronize(stream), "cudaStreamSynchronize");
    for (Slot& s : slots) {
      for (DeviceBuffer* b : {&s.images_u8, &s.images_out, &s.masks_u8, &s.masks_out, &s.flags}) {
        if (b->ptr != nullptr) LogIfError(cudaFree(b->ptr), "cudaFree");
      }
      for (cudaEvent_t e : {s.start, s.h2d_done, s.ready, s.released}) {
        if (e != nullptr) LogIfError(cudaEventDestroy(e), "cudaEventDestroy");
      }
    }
    LogIfError(cudaStreamDestroy(stream), "cudaStreamDestroy");
  }

  static Status SlotTimings(const Slot& s, GpuTimings* t) {
    DSPIPE_CUDA_RETURN_IF_ERROR(cudaEventSynchronize(s.ready));
    DSPIPE_CUDA_RETURN_IF_ERROR(cudaEventElapsedTime(&t->h2d_ms, s.start, s.h2d_done));
    DSPIPE_CUDA_RETURN_IF_ERROR(cudaEventElapsedTime(&t->normalize_ms, s.h2d_done, s.ready));
    return Status::OK();
  }

  Status SlotOf(const DeviceBatch& b, Slot** s) {
    if (b.slot < 0 || b.slot >= static_cast<int>(slots.size()) || b.stream != stream) {
      return Status::InvalidArgument("GpuNormalizer: DeviceBatch slot " + std::to_string(b.slot) +
                                     " does not come from this normalizer");
    }
    *s = &slots[static_cast<size_t>(b.slot)];
    return Status::OK();
  }

  Status Process(const HostBatch& in, const NormalizeParams& p, int index, DeviceBatch* out) {
    DSPIPE_RETURN_IF_ERROR(ValidateNormalizeParams(p).WithContext("GpuNormalizer::Process"));
    if (in.images == nullptr || in.n <= 0 || in.h <= 0 || in.w <= 0 || out == nullptr) {
      return Status::InvalidArgument(
          "GpuNormalizer::Process: need images, n, h, w > 0 and an output, got n=" +
          std::to_string(in.n) + " h=" + std::to_string(in.h) + " w=" + std::to_string(in.w));
    }
    if (index < 0 || index >= static_cast<int>(slots.size())) {
      return Status::InvalidArgument("GpuNormalizer::Process: slot " + std::to_string(index) +
                                     " out of range (num_slots " + std::to_string(slots.size()) +
                                     ")");
    }
    DeviceGuard guard(opt.device);
    if (guard.error() != cudaSuccess) {
      return cuda::CudaStatus(guard.error(), "cudaSetDevice(options.device)");
    }
    Slot& s = slots[static_cast<size_t>(index)];
    next = (index + 1) % static_cast<int>(slots.size());
    if (s.release_pending) {
      DSPIPE_CUDA_RETURN_IF_ERROR(cudaStreamWaitEvent(stream, s.released, 0));
      s.release_pending = false;
    }
    const size_t pixels = static_cast<size_t>(in.n) * in.h * in.w;
    const size_t image_bytes = pixels * p.channels;
    const size_t out_bytes = image_bytes * (opt.dtype == ImageDtype::kFloat16 ? 2 : 4);
    DSPIPE_RETURN_IF_ERROR(Reserve(&s.images_u8, image_bytes, stream));
    DSPIPE_RETURN_IF_ERROR(Reserve(&s.images_out, out_bytes, stream));
    if (in.masks != nullptr) {
      DSPIPE_RETURN_IF_ERROR(Reserve(&s.masks_u8, pixels, stream));
      const size_t mask_out_bytes =
          opt.mask_dtype == MaskDtype::kInt64 ? pixels * sizeof(int64_t) : pixels;
      DSPIPE_RETURN_IF_ERROR(Reserve(&s.masks_out, mask_out_bytes, stream));
    }
    if (in.mirror != nullptr) DSPIPE_RETURN_IF_ERROR(Reserve(&s.flags, in.n, stream));
    const auto* d_flags = in.mirror != nullptr ? static_cast<const uint8_t*>(s.flags.ptr) : nullptr;
    {
      NvtxRange range("dspipe h2d");
      if (opt.timing) DSPIPE_CUDA_RETURN_IF_ERROR(cudaEventRecord(s.start, stream));
      DSPIPE_CUDA_RETURN_IF_ERROR(
          cudaMemcpyAsync(s.images_u8.ptr, in.images, image_bytes, cudaMemcpyHostToDevice, stream));
      if (in.masks != nullptr) {
        DSPIPE_CUDA_RETURN_IF_ERROR(
            cudaMemcpyAsync(s.masks_u8.ptr, in.masks, pixels, cudaMemcpyHostToDevice, stream));
      }
      if (in.mirror != nullptr) {
        DSPIPE_CUDA_RETURN_IF_ERROR(
            cudaMemcpyAsync(s.flags.ptr, in.mirror, in.n, cudaMemcpyHostToDevice, stream));
      }
      DSPIPE_CUDA_RETURN_IF_ERROR(cudaEventRecord(s.h2d_done, stream));
    }
    {
      NvtxRange range("dspipe normalize");
      DSPIPE_RETURN_IF_ERROR(NormalizeNhwcToNchwGpu(static_cast<const uint8_t*>(s.images_u8.ptr),
                                                    in.n, in.h, in.w, p, d_flags, opt.dtype,
                                                    s.images_out.ptr, stream));
      if (in.masks != nullptr && opt.mask_dtype == MaskDtype::kInt64) {
        DSPIPE_RETURN_IF_ERROR(MasksToInt64Gpu(static_cast<const uint8_t*>(s.masks_u8.ptr), in.n,
                                               in.h, in.w, p.mirror, d_flags,
                                               static_cast<int64_t*>(s.masks_out.ptr), stream));
      } else if (in.masks != nullptr) {
        DSPIPE_RETURN_IF_ERROR(MasksToUint8Gpu(static_cast<const uint8_t*>(s.masks_u8.ptr), in.n,
                                               in.h, in.w, p.mirror, d_flags,
                                               static_cast<uint8_t*>(s.masks_out.ptr), stream));
      }
      DSPIPE_CUDA_RETURN_IF_ERROR(cudaEventRecord(s.ready, stream));
    }
    *out = DeviceBatch{};
    out->images = s.images_out.ptr;
    out->masks = in.masks != nullptr ? s.masks_out.ptr : nullptr;
    out->n = in.n, out->c = p.channels, out->h = in.h, out->w = in.w;
    out->dtype = opt.dtype;
    out->mask_dtype = opt.mask_dtype;
    out->stream = stream;
    out->ready_event = s.ready;
    out->slot = index;
    last = index;
    return Status::OK();
  }
};

GpuNormalizer::GpuNormalizer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
GpuNormalizer::~GpuNormalizer() = default;

Status GpuNormalizer::Create(const GpuNormalizerOptions& options,
                             std::unique_ptr<GpuNormalizer>* out) {
  std::string why;
  if (!CudaAvailable(&why)) return Status::Unsupported("GpuNormalizer: " + why);
  if (options.device < 0 || options.device >= CudaDeviceCount()) {
    return Status::InvalidArgument("GpuNormalizer: device " + std::to_string(options.device) +
                                   " out of range (" + std::to_string(CudaDeviceCount()) +
                                   " visible)");
  }
  if (options.num_slots < 1) {
    return Status::InvalidArgument("GpuNormalizer: num_slots must be >= 1, got " +
                                   std::to_string(options.num_slots));
  }
  auto impl = std::make_unique<Impl>();
  impl->opt = options;
  DSPIPE_RETURN_IF_ERROR(impl->Init().WithContext("GpuNormalizer::Create"));
  out->reset(new GpuNormalizer(std::move(impl)));
  return Status::OK();
}

Status GpuNormalizer::Process(const HostBatch& in, const NormalizeParams& p, DeviceBatch* out) {
  return impl_->Process(in, p, impl_->next, out);
}

Status GpuNormalizer::Process(const HostBatch& in, const NormalizeParams& p, int slot,
                              DeviceBatch* out) {
  return impl_->Process(in, p, slot, out);
}

Status GpuNormalizer::WaitInputConsumed(const DeviceBatch& b) {
  Slot* s = nullptr;
  DSPIPE_RETURN_IF_ERROR(impl_->SlotOf(b, &s));
  DSPIPE_CUDA_RETURN_IF_ERROR(cudaEventSynchronize(s->h2d_done));
  return Status::OK();
}

Status GpuNormalizer::WaitReady(const DeviceBatch& b) {
  Slot* s = nullptr;
  DSPIPE_RETURN_IF_ERROR(impl_->SlotOf(b, &s));
  DSPIPE_CUDA_RETURN_IF_ERROR(cudaEventSynchronize(s->ready));
  return Status::OK();
}

Status GpuNormalizer::StreamWaitReady(const DeviceBatch& b, void* consumer_stream) {
  Slot* s = nullptr;
  DSPIPE_RETURN_IF_ERROR(impl_->SlotOf(b, &s));
  DSPIPE_CUDA_RETURN_IF_ERROR(
      cudaStreamWaitEvent(static_cast<cudaStream_t>(consumer_stream), s->ready, 0));
  return Status::OK();
}

Status GpuNormalizer::Release(const DeviceBatch& b, void* consumer_stream) {
  Slot* s = nullptr;
  DSPIPE_RETURN_IF_ERROR(impl_->SlotOf(b, &s));
  if (consumer_stream == nullptr) {
    s->release_pending = false;
    return Status::OK();
  }
  DSPIPE_CUDA_RETURN_IF_ERROR(
      cudaEventRecord(s->released, static_cast<cudaStream_t>(consumer_stream)));
  s->release_pending = true;
  return Status::OK();
}

Status GpuNormalizer::LastTimings(GpuTimings* t) {
  if (!impl_->opt.timing) {
    return Status::Unsupported("GpuNormalizer::LastTimings: options.timing is false");
  }
  if (impl_->last < 0) {
    return Status::InvalidArgument("GpuNormalizer::LastTimings: no batch processed yet");
  }
  return impl_->SlotTimings(impl_->slots[static_cast<size_t>(impl_->last)], t);
}

Status GpuNormalizer::Timings(const DeviceBatch& b, GpuTimings* t) {
  if (!impl_->opt.timing) {
    return Status::Unsupported("GpuNormalizer::Timings: options.timing is false");
  }
  Slot* s = nullptr;
  DSPIPE_RETURN_IF_ERROR(impl_->SlotOf(b, &s));
  return impl_->SlotTimings(*s, t);
}

#else  // !DSPIPE_HAVE_CUDA: every entry point reports why; no object can be created.

struct GpuNormalizer::Impl {};

namespace {
Status NoCuda(const char* fn) {
  std::string why;
  CudaAvailable(&why);
  return Status::Unsupported(std::string(fn) + ": " + why);
}
}  // namespace

Status NormalizeNhwcToNchwGpu(const uint8_t*, int, int, int, const NormalizeParams&, const uint8_t*,
                              ImageDtype, void*, void*) {
  return NoCuda("NormalizeNhwcToNchwGpu");
}
Status MasksToInt64Gpu(const uint8_t*, int, int, int, bool, const uint8_t*, int64_t*, void*) {
  return NoCuda("MasksToInt64Gpu");
}
Status MasksToUint8Gpu(const uint8_t*, int, int, int, bool, const uint8_t*, uint8_t*, void*) {
  return NoCuda("MasksToUint8Gpu");
}

GpuNormalizer::GpuNormalizer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
GpuNormalizer::~GpuNormalizer() = default;
Status GpuNormalizer::Create(const GpuNormalizerOptions&, std::unique_ptr<GpuNormalizer>*) {
  return NoCuda("GpuNormalizer");
}
Status GpuNormalizer::Process(const HostBatch&, const NormalizeParams&, DeviceBatch*) {
  return NoCuda("GpuNormalizer::Process");
}
Status GpuNormalizer::Process(const HostBatch&, const NormalizeParams&, int, DeviceBatch*) {
  return NoCuda("GpuNormalizer::Process");
}
Status GpuNormalizer::WaitInputConsumed(const DeviceBatch&) {
  return NoCuda("GpuNormalizer::WaitInputConsumed");
}
Status GpuNormalizer::WaitReady(const DeviceBatch&) { return NoCuda("GpuNormalizer::WaitReady"); }
Status GpuNormalizer::StreamWaitReady(const DeviceBatch&, void*) {
  return NoCuda("GpuNormalizer::StreamWaitReady");
}
Status GpuNormalizer::Release(const DeviceBatch&, void*) {
  return NoCuda("GpuNormalizer::Release");
}
Status GpuNormalizer::LastTimings(GpuTimings*) { return NoCuda("GpuNormalizer::LastTimings"); }
Status GpuNormalizer::Timings(const DeviceBatch&, GpuTimings*) {
  return NoCuda("GpuNormalizer::Timings");
}

#endif  // DSPIPE_HAVE_CUDA

}  // namespace dspipe
