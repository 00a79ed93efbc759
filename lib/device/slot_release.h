// SPDX-License-Identifier: Apache-2.0
// Private: what releasing a TensorBatch on the GPU path does with its device slot and its host
// buffer, given what the slot's GpuNormalizer answers. Split out (like device_select.h) so tests
// can make Release, Timings and WaitInputConsumed fail on machines without a GPU.
#pragma once

#include <cstddef>

#include "device/device_state.h"
#include "dspipe/batch.h"
#include "dspipe/cuda.h"
#include "dspipe/status.h"

namespace dspipe::device {

// The three GpuNormalizer calls a release makes for one DeviceBatch.
class SlotReleaseOps {
 public:
  virtual ~SlotReleaseOps() = default;
  // GpuNormalizer::Release(batch, consumer_stream): the device buffers go back to the slot.
  virtual Status Release(void* consumer_stream) = 0;
  // GpuNormalizer::Timings(batch, t): blocks until the batch is done (so its copy is too).
  virtual Status Timings(GpuTimings* t) = 0;
  // GpuNormalizer::WaitInputConsumed(batch): blocks until the host buffer may be reused.
  virtual Status WaitInputConsumed() = 0;
};

// Releases `slot` of `state` (the caller holds state.mu) through ops and records the batch's
// h2d / normalize times into state.stats when Timings answers. The host buffer *host is
// recycled (Reset: back to its pool) and the slot freed only once its copy to the device is
// known to be done: Timings succeeded, or else WaitInputConsumed did, whether or not Release
// failed. When neither confirms it, the DMA may still read the buffer: *host moves to
// state.quarantined and the slot stays held, for the loader's lifetime; *set_aside is true.
// Returns the first failure (Release's, else WaitInputConsumed's); a failing Timings alone,
// followed by a successful wait, is not an error.
Status ReleaseDeviceSlot(DeviceState& state, size_t slot, SlotReleaseOps& ops,
                         void* consumer_stream, Batch* host, bool* set_aside);

}  // namespace dspipe::device
