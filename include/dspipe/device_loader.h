// SPDX-License-Identifier: Apache-2.0
// dspipe::DeviceLoader: the loader plus the device stage. Batches come out normalized, as
// float32 (or float16) NCHW tensors with int64 (or uint8) masks, on the GPU when there is one:
//
//   source -> read -> decode -> transform -> collate -> stage (pinned) -> h2d + normalize (GPU)
//
//   std::unique_ptr<DeviceLoader> loader;
//   DSPIPE_RETURN_IF_ERROR(DeviceLoader::Open("train.lmdb", loader_options, {}, &loader));
//   TensorBatch batch;
//   while (true) {
//     DSPIPE_RETURN_IF_ERROR(loader->Next(&batch));   // releases the previous batch first
//     if (!batch) break;                              // end of the epoch
//     batch.StreamWait(my_stream);                    // GPU: order my work after the copy
//     Train(batch.images(), batch.masks(), my_stream);
//     batch.Release(my_stream);                       // recycled once my_stream gets here
//   }
//
// GPU path (a usable CUDA device): the loader's batch buffers are pinned (PinnedBatchAllocator),
// the loader skips normalization (NormalizeMode::kNone) and leaves horizontal flips to the GPU
// (defer_hflip). Next() takes the next host batch and enqueues its H2D copy and the fused
// normalize + mirror + mask kernels on a private stream, then returns at once: batch k's copy
// overlaps the workers decoding k+1.. (prefetch) and the consumer's GPU work on k-1 (slots >= 2).
// CPU path (no device, or device = kCpu): the loader normalizes on its workers
// (NormalizeMode::kCpuFloat32) and TensorBatch points at host memory (on_device() == false).
// Both paths give the same numbers: the CPU normalization is the reference (docs/GPU.md).
//
// Ownership: a TensorBatch holds its host batch (pinned buffer) and its device buffer set until
// it is released (Release(), destruction, or reuse in Next); only then are they recycled. At most
// DeviceOptions::max_slots batches may be held at once (no limit by default: holding more than
// `slots` adds slots). A TensorBatch may outlive its DeviceLoader.
// Thread-safety: Next, set_epoch, Restore and state may be called from any thread; the calls
// are serialized (two threads calling Next get distinct batches, each once; state() is the
// position after the last batch handed out). TensorBatches may be released from any thread.
// stats() may be read from any thread.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "dspipe/batch.h"
#include "dspipe/dataset.h"
#include "dspipe/loader.h"
#include "dspipe/normalize.h"  // ImageDtype, MaskDtype
#include "dspipe/stats.h"
#include "dspipe/status.h"

namespace dspipe {

// BatchAllocator handing out page-locked host memory (AllocPinned / FreePinned, 4096-byte
// aligned), so host->device copies are asynchronous DMA. Without a usable device it falls back
// to aligned pageable memory (one info line in the log). Thread-safe, stateless.
std::shared_ptr<BatchAllocator> PinnedBatchAllocator();

struct DeviceOptions {
  // The caller's current CUDA device (CudaCurrentDevice: cudaGetDevice on the thread calling
  // Create, i.e. the rank's GPU under data parallelism) when one is usable, else the CPU path.
  static constexpr int kAuto = -1;
  static constexpr int kCpu = -2;  // always the CPU path
  // kAuto (default), kCpu, or a CUDA device ordinal >= 0. An ordinal without a usable device
  // is an Unsupported error (with the reason), never a silent fallback.
  int device = kAuto;
  // Images' element type. Default kFloat32. (The CPU path converts its float32 result to
  // float16 on the consumer thread.)
  ImageDtype dtype = ImageDtype::kFloat32;
  // Masks' element type. Default kInt64. Ignored for datasets without masks.
  MaskDtype mask_dtype = MaskDtype::kInt64;
  // Device buffer sets (and host batches held back from the pool) made up front. 2 (default)
  // lets the copy of k overlap the consumer's work on k-1; each slot costs one normalized batch
  // of device memory. Minimum 1.
  int slots = 2;
  // Most batches the consumer may hold at once. When every slot is held, Next adds a slot (one
  // more buffer set, kept and reused afterwards) instead of blocking or failing, up to this many;
  // beyond it Next is an InvalidArgument error. 0 (default) = no limit, so a consumer that keeps
  // batches (a list, autograd) never stalls the loader. Memory is bounded by the most batches
  // ever held at once: released slots are reused, never freed before the loader and its batches.
  int max_slots = 0;
  // cudaStream_t (as void*) used when a TensorBatch is released implicitly (destroyed or reused
  // by Next): its buffers are recycled once this stream reaches that point. nullptr (default):
  // the consumer has finished all GPU work on a batch (e.g. synchronized) before dropping it;
  // otherwise call Release(stream) explicitly.
  void* consumer_stream = nullptr;
  // CPU path: the batches' host memory (images, masks, their float16 / int64 conversions) is
  // page-locked (PinnedBatchAllocator, AllocPinned), so the consumer's own host->device copies
  // (torch's `.to("cuda", non_blocking=True)`) are asynchronous DMA. A released batch's buffers
  // are reused only once consumer_stream has reached the point of its release (a CUDA event), so
  // a copy still in flight never reads a refilled buffer. Without a usable CUDA device it does
  // nothing but say so in one log line. The GPU path always stages through pinned memory.
  // Default false.
  bool pin_memory = false;
};

// One normalized batch: tensors on the device (GPU path) or host (CPU path), plus the labels,
// indices and flip flags on the host. Move-only. Not synchronized: use from one thread at a time.
class TensorBatch {
 public:
  TensorBatch() = default;
  ~TensorBatch();
  TensorBatch(TensorBatch&& other) noexcept;
  TensorBatch& operator=(TensorBatch&& other) noexcept;
  TensorBatch(const TensorBatch&) = delete;
  TensorBatch& operator=(const TensorBatch&) = delete;

  explicit operator bool() const { return static_cast<bool>(host_); }
  bool empty() const { return host_.empty(); }

  // True: images()/masks() are device pointers; wait for ready_event() before reading them.
  bool on_device() const { return on_device_; }
  int device() const { return device_; }  // CUDA ordinal, or -1 on the CPU path
  int size() const { return host_.size(); }
  int channels() const { return host_.channels(); }
  int height() const { return host_.height(); }
  int width() const { return host_.width(); }
  uint64_t epoch() const { return host_.epoch(); }
  uint64_t number() const { return host_.number(); }

  // [size][channels][height][width] float32 (dtype() kFloat32) or IEEE binary16 bit patterns.
  void* images() const { return images_; }
  ImageDtype dtype() const { return fp16_ ? ImageDtype::kFloat16 : ImageDtype::kFloat32; }
  // [size][height][width] int64 (mask_dtype() kInt64) or uint8 class ids; nullptr without masks.
  // With a MONAI config ending in AsDiscreted(to_onehot=N) (mask_classes() N > 0):
  // [size][N][height][width] float32 one-hot, as MONAI gives the label (mask_dtype() is then
  // not the element type).
  void* masks() const { return masks_; }
  MaskDtype mask_dtype() const { return masks_int64_ ? MaskDtype::kInt64 : MaskDtype::kUInt8; }
  int mask_classes() const { return mask_classes_; }
  // Host arrays of size() entries (see Batch): labels (-1 = none), dataset indices, and 1 where
  // the sample was mirrored horizontally (already applied to images() and masks()).
  const int32_t* labels() const { return host_.labels(); }
  const uint64_t* indices() const { return host_.indices(); }
  const uint8_t* hflip() const { return host_.hflip(); }

  // CPU path with DeviceOptions::pin_memory on a machine with CUDA: images() and masks() are
  // page-locked host memory. false otherwise (pageable, or on the device).
  bool pinned() const { return pinned_; }

  // GPU path: the cudaStream_t the work ran on and the cudaEvent_t recorded after it; nullptr
  // on the CPU path (the data is ready when Next returns).
  void* stream() const { return stream_; }
  void* ready_event() const { return ready_event_; }
  // Makes consumer_stream (cudaStream_t; nullptr = legacy default stream) wait until the batch
  // is ready, without blocking the host. No-op on the CPU path.
  Status StreamWait(void* consumer_stream) const;
  // Blocks the host until the batch is ready. No-op on the CPU path.
  Status WaitReady() const;
  // Hands the batch back: its device buffers are reused once consumer_stream (nullptr: now)
  // reaches this point, its host buffer once its copy has finished (this may block briefly).
  // Records the batch's h2d / normalize times into the loader's stats. Idempotent.
  Status Release(void* consumer_stream = nullptr);

  // What a DeviceLoader shares with its batches: declared here, defined inside dspipe
  // (lib/device/device_state.h). Not for use outside dspipe.
  struct State;

 private:
  friend class DeviceLoader;
  void Clear();

  std::shared_ptr<State> state_;
  Batch host_;
  int slot_ = -1;
  bool on_device_ = false;
  int device_ = -1;
  void* images_ = nullptr;
  void* masks_ = nullptr;
  bool fp16_ = false;
  bool masks_int64_ = false;
  int mask_classes_ = 0;
  bool pinned_ = false;
  void* stream_ = nullptr;
  void* ready_event_ = nullptr;
};

class DeviceLoader {
 public:
  // Opens the dataset at path (LoaderOptions::dataset) / uses an open one. The path taken (GPU
  // or CPU) is decided here; kAuto without a device logs one line saying why. Errors:
  // Unsupported when device >= 0 and no device is usable (the message says why);
  // InvalidArgument for bad options (incl. LoaderOptions::normalize / defer_hflip, which the
  // DeviceLoader sets itself: leave them at their defaults) or missing mean/std.
  static Status Open(const std::string& path, const LoaderOptions& loader_options,
                     const DeviceOptions& device_options, std::unique_ptr<DeviceLoader>* out);
  static Status Create(std::shared_ptr<const Dataset> dataset, const LoaderOptions& loader_options,
                       const DeviceOptions& device_options, std::unique_ptr<DeviceLoader>* out);
  ~DeviceLoader();
  DeviceLoader(const DeviceLoader&) = delete;
  DeviceLoader& operator=(const DeviceLoader&) = delete;

  // Releases *out (with DeviceOptions::consumer_stream), then hands out the next batch of the
  // epoch; at the end of an epoch *out is left empty once (as Loader::Next). GPU path: returns
  // once the copy and kernels are enqueued. When every slot is held it adds one;
  // InvalidArgument when max_slots (> 0) batches are still held.
  Status Next(TensorBatch* out);

  // True when batches are on the GPU; false on the CPU path.
  bool on_device() const;
  // Mean / std (pixel units) actually used, one per channel.
  const std::vector<double>& mean() const;
  const std::vector<double>& std() const;

  // Slots (device buffer sets) made so far: DeviceOptions::slots, plus one per batch held
  // beyond them at the busiest moment. Thread-safe.
  size_t slots_allocated() const;

  // The underlying loader: epochs, resume state, shape, dataset. Do not call its Next.
  Loader& loader();
  void set_epoch(uint64_t epoch) { loader().set_epoch(epoch); }
  LoaderState state() { return loader().state(); }
  Status Restore(const LoaderState& s) { return loader().Restore(s); }
  // The loader's stage stats, with h2d and normalize (GPU path: CUDA event times, recorded when
  // each batch is released) beside the CPU stages.
  StageStats& stats() { return loader().stats(); }
  // For Diagnose(stats(), loader_shape(), compute_ms): gpu = on_device().
  LoaderShape loader_shape();

 private:
  struct Impl;
  explicit DeviceLoader(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace dspipe
