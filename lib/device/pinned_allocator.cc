// SPDX-License-Identifier: Apache-2.0
// PinnedBatchAllocator: the loader's batch buffers in page-locked memory, so the GPU path's
// host->device copies are DMA straight from the buffer the workers decoded into.
#include <memory>

#include "dspipe/cuda.h"
#include "dspipe/device_loader.h"

namespace dspipe {
namespace {

class PinnedAllocator final : public BatchAllocator {
 public:
  // AllocPinned is 4096-byte aligned (>= the 256 the pool needs) and falls back to pageable
  // memory by itself when there is no device or pinning fails.
  void* Allocate(size_t bytes) override { return AllocPinned(bytes); }
  void Free(void* ptr) override { FreePinned(ptr); }
};

}  // namespace

std::shared_ptr<BatchAllocator> PinnedBatchAllocator() {
  static const std::shared_ptr<BatchAllocator> allocator = std::make_shared<PinnedAllocator>();
  return allocator;
}

}  // namespace dspipe
