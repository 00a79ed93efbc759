// SPDX-License-Identifier: Apache-2.0
// The pool of batch buffers behind dspipe::Batch (Batch::Pool and Batch::Buffer, declared in
// dspipe/batch.h; loader::BatchPool and loader::BatchBuffer here). Internal to dspipe.
//
// Buffers are allocated on demand from a BatchAllocator and recycled: a loader with K batches
// in flight and a consumer that releases each batch before asking for the next one allocates
// exactly K + 1 buffers in its lifetime. A consumer that holds many batches (list(loader))
// makes the pool grow; as those come back, the buffers beyond `keep` are freed, so the memory
// returns to what the loop needs (issue 40 item 18). All methods are thread-safe.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <vector>

#include "dspipe/batch.h"
#include "dspipe/status.h"

namespace dspipe {

struct Batch::Buffer {
  void* base = nullptr;  // the allocation
  uint8_t* images = nullptr;
  uint8_t* masks = nullptr;
  float* normalized = nullptr;
  int32_t* labels = nullptr;
  uint64_t* indices = nullptr;
  uint8_t* hflip = nullptr;
};

class Batch::Pool : public std::enable_shared_from_this<Batch::Pool> {
 public:
  using BatchBuffer = Batch::Buffer;
  // allocator == nullptr selects DefaultBatchAllocator(). The shape's layout is checked first
  // (ComputeBatchLayout, Loader::Create); one that overflows makes every Acquire fail with it.
  // keep: the buffers the pool holds on to; a buffer released while more are allocated is
  // freed instead of kept (default: all are kept).
  static std::shared_ptr<Pool> Create(const BatchShape& shape,
                                      std::shared_ptr<BatchAllocator> allocator,
                                      size_t keep = SIZE_MAX);
  ~Pool();
  Pool(const Pool&) = delete;
  Pool& operator=(const Pool&) = delete;

  // A free buffer, or a newly allocated one. Error (kAborted) when the allocator fails.
  Status Acquire(BatchBuffer** out);
  // Gives a buffer taken by Acquire back (or a Batch's, when it is reset); freed when more
  // than `keep` buffers are allocated.
  void Release(BatchBuffer* buffer);
  // Wraps an acquired buffer in a Batch of `size` samples; the Batch releases it.
  Batch Wrap(BatchBuffer* buffer, int size, uint64_t epoch, uint64_t number);

  const BatchShape& shape() const { return shape_; }
  // Bytes of one buffer.
  size_t buffer_bytes() const { return bytes_; }
  // Buffers allocated now (grows while the consumer holds batches, back to at most `keep` as
  // they are released) and buffers currently out of the pool.
  size_t allocated() const;
  size_t in_use() const;

 private:
  Pool(const BatchShape& shape, std::shared_ptr<BatchAllocator> allocator, size_t keep);

  const BatchShape shape_;
  const std::shared_ptr<BatchAllocator> allocator_;
  const size_t keep_;
  size_t off_masks_ = 0, off_normalized_ = 0, off_labels_ = 0, off_indices_ = 0, off_hflip_ = 0;
  size_t bytes_ = 0;
  Status layout_;  // ComputeBatchLayout's: not OK makes every Acquire fail with it
  mutable std::mutex mu_;
  std::vector<std::unique_ptr<BatchBuffer>> all_;  // guarded by mu_
  std::vector<BatchBuffer*> free_;                 // guarded by mu_
};

namespace loader {
using BatchBuffer = Batch::Buffer;
using BatchPool = Batch::Pool;

// Where each part of one batch buffer starts (256-byte aligned) and its total size.
struct BatchLayout {
  size_t masks = 0, normalized = 0, labels = 0, indices = 0, hflip = 0;
  size_t bytes = 0;
};
// The layout of a buffer for `shape`, every product and sum checked: InvalidArgument naming the
// factors (batch_size x height x width x channels x bytes per value) when one would not fit in
// a size_t (below PTRDIFF_MAX, what an allocation can be), instead of a wrapped size.
Status ComputeBatchLayout(const BatchShape& shape, BatchLayout* out);
}  // namespace loader

}  // namespace dspipe
