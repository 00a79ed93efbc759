// Private: what a DeviceLoader shares with the TensorBatches it hands out. Batches keep it
// alive (shared_ptr), so a batch may outlive its loader and still be released safely.
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <vector>

#include "dspipe/batch.h"
#include "dspipe/cuda.h"
#include "dspipe/stats.h"

namespace dspipe::internal {

struct DeviceState {
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
  std::vector<std::vector<int64_t>> cpu_masks;
  std::vector<std::vector<uint16_t>> cpu_half;
};

}  // namespace dspipe::internal
