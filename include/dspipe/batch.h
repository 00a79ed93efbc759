// SPDX-License-Identifier: Apache-2.0
// A batch of samples handed out by the Loader, and the allocator seam its buffers come from.
//
// Memory: each batch lives in one buffer from a pool owned by the loader. A Batch is a move-only
// handle; destroying or Reset()ing it returns the buffer to the pool, so steady-state iteration
// allocates nothing. The pool outlives the loader as long as a Batch refers to it (a Batch may
// be kept after its Loader is destroyed). Holding many batches keeps that many buffers alive:
// the pool allocates a new buffer rather than block, and Loader::pool_buffers() reports it.
//
// Layout of one buffer (each array 256-byte aligned, all in one allocation so a pinned-memory
// allocator makes the whole batch DMA-able): images, masks, normalized, labels, indices, hflip.
//
// Thread-safety: a Batch is not synchronized; use it from one thread at a time. Distinct
// Batches may be used and released on different threads concurrently.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>

#include "dspipe/format.h"

namespace dspipe {

// Where batch buffers come from. The default is aligned host malloc; the CUDA path passes an
// allocator returning pinned (page-locked) host memory so host->device copies can be async.
// Allocate must return memory aligned to at least 256 bytes, or nullptr on failure. Both calls
// may come from any thread (not concurrently for the same pointer). The allocator must stay
// valid until every buffer it handed out is freed: the loader keeps a shared_ptr to it.
struct BatchAllocator {
  virtual ~BatchAllocator() = default;
  virtual void* Allocate(size_t bytes) = 0;
  virtual void Free(void* ptr) = 0;
};
// 4096-byte aligned std::aligned_alloc / free. Thread-safe, stateless.
std::shared_ptr<BatchAllocator> DefaultBatchAllocator();

// The shape of the batches of one loader.
struct BatchShape {
  int batch_size = 0;  // capacity in samples; a Batch may hold fewer (last batch, skips)
  int height = 0;
  int width = 0;
  int channels = 0;         // image channels (uint8: 1 or 3; typed datasets: as stored, 1..16)
  bool masks = false;       // one mask per sample
  bool normalized = false;  // float32 NCHW copy of the images (always for typed images)
  // The sample types (dspipe/format.h) of images() and masks(): the dataset's. Typed images
  // (uint16, int16, float32) are also given as float32 in their own units by normalized().
  SampleType image_type = SampleType::kUint8;
  SampleType mask_type = SampleType::kUint8;  // uint8 or uint16 class ids

  size_t pixels() const { return static_cast<size_t>(height) * width; }
  size_t image_bytes() const { return pixels() * channels * SampleTypeSize(image_type); }
  size_t mask_bytes() const { return masks ? pixels() * SampleTypeSize(mask_type) : 0; }
  size_t normalized_floats() const { return normalized ? pixels() * channels : 0; }
};

class Batch {
 public:
  Batch() = default;
  ~Batch() { Reset(); }
  Batch(Batch&& other) noexcept { *this = std::move(other); }
  Batch& operator=(Batch&& other) noexcept;
  Batch(const Batch&) = delete;
  Batch& operator=(const Batch&) = delete;

  // False for an empty handle (e.g. the end-of-epoch signal of Loader::Next).
  explicit operator bool() const { return buffer_ != nullptr; }
  bool empty() const { return buffer_ == nullptr; }
  // Returns the buffer to its pool now; the handle becomes empty.
  void Reset();

  // Samples in this batch (<= shape().batch_size).
  int size() const { return size_; }
  const BatchShape& shape() const { return shape_; }
  int height() const { return shape_.height; }
  int width() const { return shape_.width; }
  int channels() const { return shape_.channels; }
  // The epoch and the batch's number within the epoch (0-based) for this rank.
  uint64_t epoch() const { return epoch_; }
  uint64_t number() const { return number_; }

  // NHWC samples of shape().image_type (uint8 unless the dataset is typed), size() *
  // image_bytes() bytes.
  uint8_t* images() const { return images_; }
  std::span<uint8_t> image(int i) const {
    return {images_ + i * shape_.image_bytes(), shape_.image_bytes()};
  }
  // NHW masks of shape().mask_type (uint8, or uint16 ids), or nullptr when the dataset has none.
  uint8_t* masks() const { return masks_; }
  std::span<uint8_t> mask(int i) const {
    return {masks_ + i * shape_.mask_bytes(), shape_.mask_bytes()};
  }
  // float32 NCHW normalized images, or nullptr unless the loader normalizes on the CPU.
  float* normalized() const { return normalized_; }
  // int32 class labels (-1 = none), one per sample.
  const int32_t* labels() const { return labels_; }
  // Dataset indices of the samples, in batch order.
  const uint64_t* indices() const { return indices_; }
  // Per sample: 1 when its augmentation drew a horizontal flip. Informational, except with
  // LoaderOptions::defer_hflip, where those samples are NOT flipped yet and the consumer must
  // mirror them (e.g. GpuNormalizer's per-sample mirror flags).
  const uint8_t* hflip() const { return hflip_; }

  // The loader's pool of batch buffers and one of its buffers: declared here, defined inside
  // dspipe (lib/loader/batch_pool.h), which makes every Batch. Not for use outside dspipe.
  class Pool;
  struct Buffer;

 private:
  friend class Pool;
  std::shared_ptr<Pool> pool_;  // buffer_ goes back to it; kept alive while the batch is held
  Buffer* buffer_ = nullptr;
  BatchShape shape_;
  int size_ = 0;
  uint64_t epoch_ = 0;
  uint64_t number_ = 0;
  uint8_t* images_ = nullptr;
  uint8_t* masks_ = nullptr;
  float* normalized_ = nullptr;
  int32_t* labels_ = nullptr;
  uint64_t* indices_ = nullptr;
  uint8_t* hflip_ = nullptr;
};

}  // namespace dspipe
