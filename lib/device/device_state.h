// SPDX-License-Identifier: Apache-2.0
// Private: what a DeviceLoader shares with the TensorBatches it hands out. Batches keep it
// alive (shared_ptr), so a batch may outlive its loader and still be released safely.
#pragma once

#include <cstdint>
#include <cstdlib>
#include <memory>
#include <mutex>
#include <utility>
#include <vector>

#include "dspipe/batch.h"
#include "dspipe/cuda.h"
#include "dspipe/device_loader.h"
#include "dspipe/stats.h"

namespace dspipe::device {

// A reusable host buffer, grown on demand: page-locked (AllocPinned) when reserved pinned.
class HostBuffer {
 public:
  HostBuffer() = default;
  HostBuffer(HostBuffer&& o) noexcept
      : p_(std::exchange(o.p_, nullptr)), bytes_(std::exchange(o.bytes_, 0)), pinned_(o.pinned_) {}
  HostBuffer& operator=(HostBuffer&&) = delete;
  HostBuffer(const HostBuffer&) = delete;
  ~HostBuffer() { Free(); }

  // At least `bytes` bytes; the contents are not kept when it grows. nullptr when out of memory.
  void* Reserve(size_t bytes, bool pinned) {
    if (p_ != nullptr && bytes <= bytes_ && pinned == pinned_) return p_;
    Free();
    p_ = pinned ? AllocPinned(bytes) : std::malloc(bytes);
    bytes_ = p_ != nullptr ? bytes : 0;
    pinned_ = pinned;
    return p_;
  }
  // Gives the memory back now (a later Reserve allocates again).
  void Drop() { Free(); }

 private:
  void Free() {
    if (p_ == nullptr) return;
    if (pinned_) {
      FreePinned(p_);
    } else {
      std::free(p_);
    }
    p_ = nullptr;
    bytes_ = 0;
  }
  void* p_ = nullptr;
  size_t bytes_ = 0;
  bool pinned_ = false;
};

// A released CPU-path batch whose pinned memory a host->device copy may still read: its slot
// and host buffer are reused once `event` (recorded on the consumer's stream at the release)
// has completed.
struct PendingRelease {
  size_t slot = 0;
  Batch host;
  void* event = nullptr;
};

}  // namespace dspipe::device

namespace dspipe {

// TensorBatch::State (declared in dspipe/device_loader.h), device::DeviceState below.
struct TensorBatch::State {
  using HostBuffer = device::HostBuffer;
  using PendingRelease = device::PendingRelease;
  ~State() {
    for (PendingRelease& p : pending) CudaFreeEvent(p.event);
  }
  std::mutex mu;
  // Host batches whose copy to the device could not be confirmed done (a failing GPU): never
  // recycled while the normalizers live. Declared before gpus so they go after them (a
  // normalizer's destructor waits for its stream).
  std::vector<Batch> quarantined;
  // GPU path only (empty on the CPU path). Not thread-safe by themselves: every call under mu.
  // gpus[0] owns slots [0, base_slots); each slot added beyond those (a batch held while all
  // others are held too) gets a one-slot normalizer of its own: gpus[slot - base_slots + 1].
  std::vector<std::unique_ptr<GpuNormalizer>> gpus;
  size_t base_slots = 0;
  GpuNormalizer* gpu(size_t slot) const {
    return slot < base_slots ? gpus[0].get() : gpus[slot - base_slots + 1].get();
  }
  int local_slot(size_t slot) const { return slot < base_slots ? static_cast<int>(slot) : 0; }
  // The loader's stats, for h2d / normalize times; nulled (under mu) when the loader goes.
  StageStats* stats = nullptr;
  // Implicit releases (destructor, Next) use this stream (cudaStream_t; nullptr = now).
  void* consumer_stream = nullptr;
  // Per slot (guarded by mu): held by a TensorBatch, the GPU's handle for it, and the CPU
  // path's converted outputs (int64 masks, float16 images), reused batch after batch.
  std::vector<bool> held;
  std::vector<DeviceBatch> device_batches;
  std::vector<HostBuffer> cpu_masks;
  std::vector<HostBuffer> cpu_half;
  // CPU path with DeviceOptions::pin_memory on a machine with CUDA: host memory is pinned and
  // releases wait for the consumer's stream (pending, guarded by mu).
  bool pin = false;
  std::vector<PendingRelease> pending;

  // A CPU-path slot is free again; one added beyond the base slots (a batch held while all
  // others were) gives its converted outputs' memory back, so holding many batches once does
  // not keep their memory for the loader's lifetime (issue 40 item 18; the host batch goes
  // back to the loader's pool, which frees the buffers beyond what the loop needs).
  // REQUIRES: mu held.
  void ReleaseCpuSlot(size_t slot) {
    held[slot] = false;
    if (slot >= base_slots) {
      cpu_masks[slot].Drop();
      cpu_half[slot].Drop();
    }
  }

  // Hands back the pending releases whose event has completed. REQUIRES: mu held.
  void ReapPending() {
    for (size_t i = 0; i < pending.size();) {
      if (!CudaEventDone(pending[i].event)) {
        ++i;
        continue;
      }
      CudaFreeEvent(pending[i].event);
      ReleaseCpuSlot(pending[i].slot);
      pending[i].host.Reset();
      pending[i] = std::move(pending.back());
      pending.pop_back();
    }
  }
};

namespace device {
using DeviceState = TensorBatch::State;
}  // namespace device

}  // namespace dspipe
