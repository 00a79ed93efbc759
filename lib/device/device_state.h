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
  // recycled while the normalizer lives. Declared before gpu so they go after it (its destructor
  // waits for the stream).
  std::vector<Batch> quarantined;
  // GPU path only (null on the CPU path). Not thread-safe by itself: every call under mu.
  std::unique_ptr<GpuNormalizer> gpu;
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
