// SPDX-License-Identifier: Apache-2.0
// TensorBatch: releasing hands the device slot back to the GpuNormalizer and the pinned host
// batch back to the loader's pool, in that order, and only after the batch's copy is done.
#include <string>
#include <utility>

#include "device/device_state.h"
#include "device/slot_release.h"
#include "dspipe/device_loader.h"
#include "dspipe/log.h"

namespace dspipe {

TensorBatch::~TensorBatch() {
  if (!state_) return;
  const Status s = Release(state_->consumer_stream);
  if (!s.ok()) Log(LogLevel::kError, "TensorBatch: releasing batch: " + s.ToString());
}

TensorBatch::TensorBatch(TensorBatch&& other) noexcept { *this = std::move(other); }

TensorBatch& TensorBatch::operator=(TensorBatch&& other) noexcept {
  if (this == &other) return *this;
  if (state_) {
    const Status s = Release(state_->consumer_stream);
    if (!s.ok()) Log(LogLevel::kError, "TensorBatch: releasing batch: " + s.ToString());
  }
  state_ = std::move(other.state_);
  host_ = std::move(other.host_);
  slot_ = other.slot_;
  on_device_ = other.on_device_;
  device_ = other.device_;
  images_ = other.images_;
  masks_ = other.masks_;
  fp16_ = other.fp16_;
  masks_int64_ = other.masks_int64_;
  mask_classes_ = other.mask_classes_;
  stream_ = other.stream_;
  ready_event_ = other.ready_event_;
  pinned_ = other.pinned_;
  other.Clear();
  return *this;
}

void TensorBatch::Clear() {
  state_.reset();
  host_.Reset();
  slot_ = -1;
  on_device_ = false;
  device_ = -1;
  images_ = masks_ = stream_ = ready_event_ = nullptr;
  fp16_ = masks_int64_ = pinned_ = false;
  mask_classes_ = 0;
}

Status TensorBatch::StreamWait(void* consumer_stream) const {
  if (!on_device_ || !state_) return Status::OK();
  std::lock_guard<std::mutex> lock(state_->mu);
  return state_->gpu(static_cast<size_t>(slot_))
      ->StreamWaitReady(state_->device_batches[static_cast<size_t>(slot_)], consumer_stream);
}

Status TensorBatch::WaitReady() const {
  if (!on_device_ || !state_) return Status::OK();
  std::lock_guard<std::mutex> lock(state_->mu);
  return state_->gpu(static_cast<size_t>(slot_))
      ->WaitReady(state_->device_batches[static_cast<size_t>(slot_)]);
}

namespace device {

Status ReleaseDeviceSlot(DeviceState& state, size_t slot, SlotReleaseOps& ops,
                         void* consumer_stream, Batch* host, bool* set_aside) {
  *set_aside = false;
  Status status = ops.Release(consumer_stream);
  // The host buffer goes back to the pool below: its DMA must be over. This also waits for
  // the kernels (the timings need them), normally long finished: the consumer waited.
  GpuTimings t;
  const Status timed = ops.Timings(&t);
  if (timed.ok() && state.stats != nullptr) {
    state.stats->Record(Stage::kH2D, static_cast<uint64_t>(double{t.h2d_ms} * 1e6));
    state.stats->Record(Stage::kNormalize, static_cast<uint64_t>(double{t.normalize_ms} * 1e6));
  }
  if (!timed.ok()) {
    // Whether or not Release failed, the host buffer's copy must be known to be done.
    const Status waited = ops.WaitInputConsumed();
    if (!waited.ok()) {
      // Unknown: the DMA may still read the buffer. Keep it (and its slot) out of use for
      // the loader's lifetime rather than let the pool refill it under the copy.
      state.quarantined.push_back(std::move(*host));
      if (status.ok()) status = waited;
      *set_aside = true;
      return status;
    }
  }
  state.held[slot] = false;
  host->Reset();
  return status;
}

}  // namespace device

namespace {

// The slot's GpuNormalizer answering for one DeviceBatch.
class GpuSlotOps : public device::SlotReleaseOps {
 public:
  GpuSlotOps(GpuNormalizer* gpu, const DeviceBatch& db) : gpu_(gpu), db_(db) {}
  Status Release(void* consumer_stream) override { return gpu_->Release(db_, consumer_stream); }
  Status Timings(GpuTimings* t) override { return gpu_->Timings(db_, t); }
  Status WaitInputConsumed() override { return gpu_->WaitInputConsumed(db_); }

 private:
  GpuNormalizer* gpu_;
  const DeviceBatch& db_;
};

}  // namespace

Status TensorBatch::Release(void* consumer_stream) {
  if (!state_) {
    Clear();
    return Status::OK();
  }
  Status status;
  bool set_aside = false;
  {
    std::lock_guard<std::mutex> lock(state_->mu);
    const auto slot = static_cast<size_t>(slot_);
    if (on_device_) {
      GpuSlotOps ops(state_->gpu(slot), state_->device_batches[slot]);
      status = device::ReleaseDeviceSlot(*state_, slot, ops, consumer_stream, &host_, &set_aside);
    } else if (void* event = state_->pin ? CudaRecordEvent(consumer_stream) : nullptr) {
      // pin_memory: a non_blocking copy out of this batch may still run on consumer_stream.
      state_->pending.push_back({slot, std::move(host_), event});
    } else {
      state_->ReleaseCpuSlot(slot);
    }
  }
  Clear();
  if (set_aside) return status.WithContext("TensorBatch::Release (host buffer set aside)");
  if (!status.ok()) return status.WithContext("TensorBatch::Release");
  return Status::OK();
}

}  // namespace dspipe
