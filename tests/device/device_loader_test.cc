// SPDX-License-Identifier: Apache-2.0
// DeviceLoader without a GPU: the CPU path must equal the plain loader's CPU normalization, the
// pinned allocator must work, and an explicit CUDA device must be refused with the reason.
// DSPIPE_DISABLE_CUDA is set before main (detection runs once, at first use), so these tests
// check the no-GPU path on GPU machines too.
#include "dspipe/device_loader.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "device/device_fixture.h"
#include "device/device_select.h"
#include "device/device_state.h"
#include "device/slot_release.h"
#include "dspipe/cuda.h"
#include "dspipe/normalize.h"
#include "dspipe/stats.h"
#include "loader/batch_pool.h"

namespace dspipe {
namespace {

const int kForceNoGpu = ::setenv("DSPIPE_DISABLE_CUDA", "1", 1);

using testing::HostBatchCopy;
using testing::ReferenceEpoch;
using testing::SynthDataset;
using testing::TestLoaderOptions;

std::unique_ptr<DeviceLoader> OpenOrDie(const LoaderOptions& lo, const DeviceOptions& d) {
  std::unique_ptr<DeviceLoader> loader;
  const Status s = DeviceLoader::Open(SynthDataset(), lo, d, &loader);
  EXPECT_TRUE(s.ok()) << s.ToString();
  return loader;
}

// Every batch of one epoch of `loader` compared with the reference loader's, exactly.
void ExpectEpochEqualsReference(DeviceLoader* loader, const LoaderOptions& lo, uint64_t epoch,
                                const DeviceOptions& d) {
  const std::vector<HostBatchCopy> ref = ReferenceEpoch(lo, epoch);
  ASSERT_EQ(ref.size(), 4u);  // 13 samples in batches of 4
  loader->set_epoch(epoch);
  TensorBatch b;
  size_t k = 0;
  int mirrored = 0;
  for (;; ++k) {
    ASSERT_TRUE(loader->Next(&b).ok());
    if (!b) break;
    ASSERT_LT(k, ref.size());
    const HostBatchCopy& r = ref[k];
    EXPECT_FALSE(b.on_device());
    EXPECT_EQ(b.device(), -1);
    EXPECT_EQ(b.stream(), nullptr);
    EXPECT_EQ(b.ready_event(), nullptr);
    ASSERT_EQ(static_cast<size_t>(b.size()), r.indices.size());
    EXPECT_EQ(std::vector<uint64_t>(b.indices(), b.indices() + b.size()), r.indices);
    EXPECT_EQ(std::vector<int32_t>(b.labels(), b.labels() + b.size()), r.labels);
    EXPECT_EQ(std::vector<uint8_t>(b.hflip(), b.hflip() + b.size()), r.hflip);
    for (int i = 0; i < b.size(); ++i) mirrored += b.hflip()[i];
    EXPECT_EQ(b.dtype(), d.dtype);
    if (d.dtype == ImageDtype::kFloat16) {
      const auto* half = static_cast<const uint16_t*>(b.images());
      for (size_t i = 0; i < r.images.size(); ++i) {
        ASSERT_EQ(half[i], FloatToHalfBits(r.images[i])) << "batch " << k << " element " << i;
      }
    } else {
      ASSERT_EQ(std::memcmp(b.images(), r.images.data(), r.images.size() * sizeof(float)), 0)
          << "batch " << k;
    }
    ASSERT_NE(b.masks(), nullptr);
    EXPECT_EQ(b.mask_dtype(), d.mask_dtype);
    for (size_t i = 0; i < r.masks.size(); ++i) {
      const int64_t got = d.mask_dtype == MaskDtype::kInt64
                              ? static_cast<const int64_t*>(b.masks())[i]
                              : static_cast<const uint8_t*>(b.masks())[i];
      ASSERT_EQ(got, r.masks[i]) << "batch " << k << " mask pixel " << i;
    }
  }
  EXPECT_EQ(k, ref.size());
  EXPECT_GT(mirrored, 0) << "the test needs mirrored samples";
  EXPECT_LT(mirrored, 13) << "the test needs unmirrored samples";
}

TEST(DeviceLoaderCpu, AutoWithoutGpuTakesTheCpuPathAndEqualsTheLoader) {
  ASSERT_EQ(kForceNoGpu, 0);
  ASSERT_FALSE(CudaAvailable());
  const LoaderOptions lo = TestLoaderOptions();
  const DeviceOptions d;  // kAuto, fp32, int64 masks, manifest mean/std
  auto loader = OpenOrDie(lo, d);
  ASSERT_NE(loader, nullptr);
  EXPECT_FALSE(loader->on_device());
  EXPECT_FALSE(loader->loader_shape().gpu);
  EXPECT_EQ(loader->mean().size(), 3u);
  EXPECT_EQ(loader->mean(), loader->loader().dataset().info().mean);
  EXPECT_EQ(loader->std(), loader->loader().dataset().info().std);
  ExpectEpochEqualsReference(loader.get(), lo, 0, d);
  ExpectEpochEqualsReference(loader.get(), lo, 1, d);
  // The CPU normalization is timed by the loader's workers, once per batch.
  EXPECT_EQ(loader->stats().Summary(Stage::kNormalize).count, 8u);
  EXPECT_EQ(loader->stats().Summary(Stage::kH2D).count, 0u);
}

TEST(DeviceLoaderCpu, Fp16AndUint8MasksAndExplicitMeanStd) {
  LoaderOptions lo = TestLoaderOptions();
  DeviceOptions d;
  d.device = DeviceOptions::kCpu;
  d.dtype = ImageDtype::kFloat16;
  d.mask_dtype = MaskDtype::kUInt8;
  lo.mean = {100.0};  // one value: every channel
  lo.std = {50.0, 60.0, 70.0};
  auto loader = OpenOrDie(lo, d);
  ASSERT_NE(loader, nullptr);
  EXPECT_EQ(loader->mean(), (std::vector<double>{100, 100, 100}));
  EXPECT_EQ(loader->std(), (std::vector<double>{50, 60, 70}));
  ExpectEpochEqualsReference(loader.get(), lo, 3, d);
}

TEST(DeviceLoaderCpu, ExplicitCudaDeviceWithoutGpuIsUnsupported) {
  DeviceOptions d;
  d.device = 0;
  std::unique_ptr<DeviceLoader> loader;
  const Status s = DeviceLoader::Open(SynthDataset(), TestLoaderOptions(), d, &loader);
  EXPECT_EQ(s.code(), Status::Code::kUnsupported) << s.ToString();
  EXPECT_NE(s.message().find("CUDA device 0 requested"), std::string::npos) << s.ToString();
  EXPECT_NE(s.message().find("DSPIPE_DISABLE_CUDA"), std::string::npos) << s.ToString();
  EXPECT_EQ(loader, nullptr);
}

// Device choice with mocked CUDA answers: 4 visible devices, this rank's current device 2.
TEST(DevicePick, AutoTakesTheCallersCurrentDeviceNotDeviceZero) {
  device::CudaProbe four;
  four.available = true;
  four.count = 4;
  four.current = 2;
  int device = -7;
  ASSERT_TRUE(device::PickDevice(four, DeviceOptions::kAuto, &device).ok());
  EXPECT_EQ(device, 2);
  four.current = 3;
  ASSERT_TRUE(device::PickDevice(four, DeviceOptions::kAuto, &device).ok());
  EXPECT_EQ(device, 3);
  // An explicit ordinal wins over the current device; kCpu is the CPU path.
  ASSERT_TRUE(device::PickDevice(four, 1, &device).ok());
  EXPECT_EQ(device, 1);
  ASSERT_TRUE(device::PickDevice(four, DeviceOptions::kCpu, &device).ok());
  EXPECT_EQ(device, -1);
  Status s = device::PickDevice(four, 4, &device);
  EXPECT_EQ(s.code(), Status::Code::kInvalidArgument) << s.ToString();
  EXPECT_NE(s.message().find("only 4 visible"), std::string::npos) << s.ToString();
  four.current = 9;  // the runtime contradicting itself is an error, not device 0
  EXPECT_EQ(device::PickDevice(four, DeviceOptions::kAuto, &device).code(),
            Status::Code::kInternal);
}

TEST(DevicePick, NoDeviceMeansCpuForAutoAndAnErrorForAnOrdinal) {
  device::CudaProbe none;
  none.why = "mocked: no device";
  int device = 5;
  ASSERT_TRUE(device::PickDevice(none, DeviceOptions::kAuto, &device).ok());
  EXPECT_EQ(device, -1);
  const Status s = device::PickDevice(none, 0, &device);
  EXPECT_EQ(s.code(), Status::Code::kUnsupported);
  EXPECT_NE(s.message().find("mocked: no device"), std::string::npos) << s.ToString();
}

// Releasing a GPU-path batch with a mocked normalizer (issue 11 defect 6c): the host buffer
// may go back to its pool only once its copy is known done. Each call answers as told and
// counts itself.
class MockSlotOps : public device::SlotReleaseOps {
 public:
  Status release = Status::OK(), timings = Status::OK(), wait = Status::OK();
  int release_calls = 0, timings_calls = 0, wait_calls = 0;
  Status Release(void*) override {
    ++release_calls;
    return release;
  }
  Status Timings(GpuTimings* t) override {
    ++timings_calls;
    t->h2d_ms = 1.5f;
    t->normalize_ms = 0.5f;
    return timings;
  }
  Status WaitInputConsumed() override {
    ++wait_calls;
    return wait;
  }
};

// One held slot whose host batch is the only buffer of its pool.
struct HeldSlot {
  HeldSlot() {
    BatchShape shape;
    shape.batch_size = 2;
    shape.height = shape.width = 4;
    shape.channels = 3;
    pool = loader::BatchPool::Create(shape, nullptr);
    loader::BatchBuffer* buffer = nullptr;
    EXPECT_TRUE(pool->Acquire(&buffer).ok());
    host = pool->Wrap(buffer, 2, 0, 0);
    state.held.assign(1, true);
  }
  std::shared_ptr<loader::BatchPool> pool;
  device::DeviceState state;
  Batch host;
};

TEST(SlotRelease, ReleaseAndTimingsFailingWaitsForTheCopyBeforeRecycling) {
  HeldSlot h;
  MockSlotOps ops;
  ops.release = Status::Internal("mocked: cudaEventRecord failed");
  ops.timings = Status::Internal("mocked: cudaEventSynchronize failed");
  bool set_aside = true;
  const Status s = device::ReleaseDeviceSlot(h.state, 0, ops, nullptr, &h.host, &set_aside);
  // The copy was confirmed done by the wait, even though Release had already failed.
  EXPECT_EQ(ops.wait_calls, 1);
  EXPECT_FALSE(set_aside);
  EXPECT_EQ(s.code(), Status::Code::kInternal);
  EXPECT_NE(s.message().find("cudaEventRecord"), std::string::npos) << s.ToString();
  EXPECT_TRUE(h.host.empty());
  EXPECT_EQ(h.pool->in_use(), 0u);  // back in the pool
  EXPECT_FALSE(h.state.held[0]);
  EXPECT_TRUE(h.state.quarantined.empty());
}

TEST(SlotRelease, CopyNotConfirmedSetsTheHostBufferAsideInsteadOfRecycling) {
  HeldSlot h;
  MockSlotOps ops;
  ops.release = Status::Internal("mocked: cudaEventRecord failed");
  ops.timings = Status::Internal("mocked: cudaEventSynchronize failed");
  ops.wait = Status::Internal("mocked: cudaStreamSynchronize failed");
  bool set_aside = false;
  const Status s = device::ReleaseDeviceSlot(h.state, 0, ops, nullptr, &h.host, &set_aside);
  EXPECT_TRUE(set_aside);
  EXPECT_FALSE(s.ok());
  EXPECT_EQ(ops.wait_calls, 1);
  // Not recycled: the buffer is still out of the pool, kept by the quarantine, and its slot
  // stays held so nothing is processed into it either.
  EXPECT_TRUE(h.host.empty());
  ASSERT_EQ(h.state.quarantined.size(), 1u);
  EXPECT_FALSE(h.state.quarantined[0].empty());
  EXPECT_EQ(h.pool->in_use(), 1u);
  EXPECT_TRUE(h.state.held[0]);
  // Release succeeding does not make an unconfirmed copy safe either; the error is the wait's.
  HeldSlot h2;
  ops.release = Status::OK();
  const Status s2 = device::ReleaseDeviceSlot(h2.state, 0, ops, nullptr, &h2.host, &set_aside);
  EXPECT_TRUE(set_aside);
  EXPECT_NE(s2.message().find("cudaStreamSynchronize"), std::string::npos) << s2.ToString();
  EXPECT_EQ(h2.pool->in_use(), 1u);
  EXPECT_TRUE(h2.state.held[0]);
}

TEST(SlotRelease, TimingsConfirmTheCopyAndAreRecorded) {
  HeldSlot h;
  StageStats stats;
  h.state.stats = &stats;
  MockSlotOps ops;
  bool set_aside = true;
  const Status s = device::ReleaseDeviceSlot(h.state, 0, ops, nullptr, &h.host, &set_aside);
  ASSERT_TRUE(s.ok()) << s.ToString();
  EXPECT_FALSE(set_aside);
  EXPECT_EQ(ops.release_calls, 1);
  EXPECT_EQ(ops.wait_calls, 0);  // the timings already waited for the whole batch
  EXPECT_EQ(h.pool->in_use(), 0u);
  EXPECT_FALSE(h.state.held[0]);
  EXPECT_EQ(stats.Summary(Stage::kH2D).count, 1u);
  EXPECT_EQ(stats.Summary(Stage::kNormalize).count, 1u);
}

TEST(DeviceLoaderCpu, RejectsBadOptions) {
  std::unique_ptr<DeviceLoader> loader;
  LoaderOptions lo = TestLoaderOptions();
  lo.normalize = NormalizeMode::kCpuFloat32;
  Status s = DeviceLoader::Open(SynthDataset(), lo, DeviceOptions{}, &loader);
  EXPECT_EQ(s.code(), Status::Code::kInvalidArgument) << s.ToString();
  EXPECT_NE(s.message().find("normalize"), std::string::npos) << s.ToString();
  DeviceOptions d;
  d.slots = 0;
  s = DeviceLoader::Open(SynthDataset(), TestLoaderOptions(), d, &loader);
  EXPECT_EQ(s.code(), Status::Code::kInvalidArgument) << s.ToString();
  EXPECT_NE(s.message().find("slots"), std::string::npos) << s.ToString();
  lo = TestLoaderOptions();
  lo.mean = {1, 2};  // two values for three channels
  lo.std = {1, 2};
  s = DeviceLoader::Open(SynthDataset(), lo, DeviceOptions{}, &loader);
  EXPECT_EQ(s.code(), Status::Code::kInvalidArgument) << s.ToString();
  EXPECT_EQ(loader, nullptr);
}

TEST(PinnedBatchAllocator, WorksWithoutGpuAndFeedsTheLoader) {
  const auto alloc = PinnedBatchAllocator();
  ASSERT_NE(alloc, nullptr);
  EXPECT_EQ(alloc, PinnedBatchAllocator());  // one shared, stateless instance
  void* p = alloc->Allocate(100000);
  ASSERT_NE(p, nullptr);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(p) % 256, 0u);
  EXPECT_FALSE(IsPinned(p));  // no device: the pageable fallback
  std::memset(p, 0x5a, 100000);
  EXPECT_EQ(static_cast<uint8_t*>(p)[99999], 0x5a);
  alloc->Free(p);
  alloc->Free(nullptr);

  // Batches decoded into its buffers are the same as with the default allocator.
  LoaderOptions lo = TestLoaderOptions();
  lo.normalize = NormalizeMode::kCpuFloat32;
  const std::vector<HostBatchCopy> ref = ReferenceEpoch(lo, 2);
  lo.allocator = alloc;
  std::unique_ptr<Loader> loader;
  ASSERT_TRUE(Loader::Open(SynthDataset(), lo, &loader).ok());
  loader->set_epoch(2);
  Batch b;
  for (const HostBatchCopy& r : ref) {
    ASSERT_TRUE(loader->Next(&b).ok());
    ASSERT_TRUE(b);
    EXPECT_EQ(std::vector<uint64_t>(b.indices(), b.indices() + b.size()), r.indices);
    EXPECT_EQ(std::memcmp(b.normalized(), r.images.data(), r.images.size() * sizeof(float)), 0);
  }
}

// A held batch keeps its buffers: later batches never land in them, and they are reused only
// once released. With every slot held and max_slots reached, Next refuses instead of
// overwriting.
TEST(DeviceLoaderCpu, BuffersAreRecycledOnlyAfterRelease) {
  LoaderOptions lo = TestLoaderOptions();
  lo.prefetch = 2;
  DeviceOptions d;
  d.device = DeviceOptions::kCpu;
  d.slots = 2;
  d.max_slots = 2;
  auto loader = OpenOrDie(lo, d);
  ASSERT_NE(loader, nullptr);
  TensorBatch held;
  ASSERT_TRUE(loader->Next(&held).ok());
  ASSERT_TRUE(held);
  const size_t floats = static_cast<size_t>(held.size()) * 3 * 48 * 64;
  const auto* held_images = static_cast<const float*>(held.images());
  const std::vector<float> before(held_images, held_images + floats);
  const std::vector<int64_t> masks_before(static_cast<const int64_t*>(held.masks()),
                                          static_cast<const int64_t*>(held.masks()) + 4 * 48 * 64);
  const void* held_masks = held.masks();

  std::set<const void*> seen;
  TensorBatch other;
  for (int epoch_batches = 0; epoch_batches < 9; ++epoch_batches) {  // runs across epochs
    ASSERT_TRUE(loader->Next(&other).ok());
    if (!other) continue;  // end of epoch
    EXPECT_NE(other.images(), held.images());
    EXPECT_NE(other.masks(), held_masks);
    seen.insert(other.images());
    // Both slots are held now: a third batch would need one of them.
    TensorBatch third;
    const Status s = loader->Next(&third);
    EXPECT_EQ(s.code(), Status::Code::kInvalidArgument) << s.ToString();
    EXPECT_NE(s.message().find("slots"), std::string::npos) << s.ToString();
    EXPECT_FALSE(third);
  }
  EXPECT_EQ(std::vector<float>(held_images, held_images + floats), before);
  EXPECT_EQ(std::vector<int64_t>(static_cast<const int64_t*>(held.masks()),
                                 static_cast<const int64_t*>(held.masks()) + 4 * 48 * 64),
            masks_before);
  // Buffers are reused (the pool does not grow with the number of batches).
  EXPECT_LE(loader->loader().pool_buffers(), static_cast<size_t>(lo.prefetch + d.slots + 1));
  EXPECT_TRUE(held.Release().ok());
  EXPECT_FALSE(held);
  EXPECT_TRUE(held.Release().ok());  // idempotent
  TensorBatch a, b;
  EXPECT_TRUE(loader->Next(&a).ok());
  EXPECT_TRUE(loader->Next(&b).ok());
}

// A consumer that keeps batches (a list, autograd) never stalls or fails the loader: with the
// default max_slots (no limit) each batch held beyond `slots` takes a new slot, the held batches
// keep their contents, and once released the slots and host buffers are reused, not grown.
TEST(DeviceLoaderCpu, HeldBatchesTakeNewSlotsAndMemoryStaysBounded) {
  LoaderOptions lo = TestLoaderOptions();
  lo.prefetch = 2;
  DeviceOptions d;
  d.device = DeviceOptions::kCpu;
  d.slots = 2;
  auto loader = OpenOrDie(lo, d);
  ASSERT_NE(loader, nullptr);
  EXPECT_EQ(loader->slots_allocated(), 2u);
  constexpr size_t kHeld = 10;  // 2.5 epochs of 4 batches
  std::vector<TensorBatch> held;
  std::vector<std::vector<float>> images;
  std::vector<std::vector<int64_t>> masks;
  std::set<const void*> distinct;
  while (held.size() < kHeld) {
    TensorBatch b;
    const Status s = loader->Next(&b);
    ASSERT_TRUE(s.ok()) << s.ToString();
    if (!b) continue;  // end of an epoch
    const size_t pixels = static_cast<size_t>(b.size()) * 48 * 64;
    const auto* f = static_cast<const float*>(b.images());
    const auto* m = static_cast<const int64_t*>(b.masks());
    images.emplace_back(f, f + pixels * 3);
    masks.emplace_back(m, m + pixels);
    distinct.insert(b.images());
    distinct.insert(b.masks());
    held.push_back(std::move(b));
  }
  EXPECT_EQ(distinct.size(), 2 * kHeld);  // no two held batches share a buffer
  EXPECT_EQ(loader->slots_allocated(), kHeld);
  for (size_t i = 0; i < kHeld; ++i) {
    const auto* f = static_cast<const float*>(held[i].images());
    const auto* m = static_cast<const int64_t*>(held[i].masks());
    EXPECT_EQ(std::vector<float>(f, f + images[i].size()), images[i]) << "batch " << i;
    EXPECT_EQ(std::vector<int64_t>(m, m + masks[i].size()), masks[i]) << "batch " << i;
  }
  const size_t pool = loader->loader().pool_buffers();
  EXPECT_LE(pool, kHeld + static_cast<size_t>(lo.prefetch) + 1);
  held.clear();
  // Released: five more epochs, one batch held at a time, allocate nothing new.
  TensorBatch b;
  for (int batches = 0; batches < 25; ++batches) ASSERT_TRUE(loader->Next(&b).ok());
  EXPECT_EQ(loader->slots_allocated(), kHeld);
  // Issue 40 item 18: the host batches held came back to the pool, which freed those beyond
  // prefetch + 2 (what a loop needs) instead of keeping the memory of all of them.
  EXPECT_LE(loader->loader().pool_buffers(), static_cast<size_t>(lo.prefetch) + 2);
  EXPECT_LT(loader->loader().pool_buffers(), pool);
}

TEST(DeviceLoaderCpu, RejectsMaxSlotsBelowSlots) {
  DeviceOptions d;
  d.device = DeviceOptions::kCpu;
  d.slots = 3;
  d.max_slots = 2;
  std::unique_ptr<DeviceLoader> loader;
  const Status s = DeviceLoader::Open(SynthDataset(), TestLoaderOptions(), d, &loader);
  EXPECT_EQ(s.code(), Status::Code::kInvalidArgument) << s.ToString();
  EXPECT_NE(s.message().find("max_slots"), std::string::npos) << s.ToString();
}

TEST(DeviceLoaderCpu, BatchOutlivesItsLoader) {
  auto loader = OpenOrDie(TestLoaderOptions(), DeviceOptions{});
  ASSERT_NE(loader, nullptr);
  TensorBatch b;
  ASSERT_TRUE(loader->Next(&b).ok());
  ASSERT_TRUE(b);
  const std::vector<uint64_t> indices(b.indices(), b.indices() + b.size());
  const float first = static_cast<const float*>(b.images())[0];
  loader.reset();
  EXPECT_EQ(std::vector<uint64_t>(b.indices(), b.indices() + b.size()), indices);
  EXPECT_EQ(static_cast<const float*>(b.images())[0], first);
  TensorBatch moved = std::move(b);
  EXPECT_FALSE(b);  // NOLINT(bugprone-use-after-move): moved-from is empty by contract
  EXPECT_TRUE(moved);
  EXPECT_TRUE(moved.Release().ok());
}

}  // namespace
}  // namespace dspipe

namespace dspipe {
namespace {

// DeviceOptions::pin_memory without a usable device: nothing changes (the batches equal the
// reference, pageable memory) and one log line says why, however many loaders ask.
TEST(DeviceLoaderCpu, PinMemoryWithoutGpuIsANoOpWithOneLogLine) {
  DeviceOptions d;
  d.device = DeviceOptions::kCpu;
  d.pin_memory = true;
  const LoaderOptions lo = TestLoaderOptions();
  ::testing::internal::CaptureStderr();
  auto a = OpenOrDie(lo, d);
  auto b = OpenOrDie(lo, d);
  const std::string log = ::testing::internal::GetCapturedStderr();
  size_t lines = 0;
  for (size_t at = log.find("pin_memory"); at != std::string::npos;
       at = log.find("pin_memory", at + 1)) {
    ++lines;
  }
  EXPECT_EQ(lines, 1u) << log;
  EXPECT_NE(log.find("no usable CUDA device"), std::string::npos) << log;
  ExpectEpochEqualsReference(a.get(), lo, 0, d);
  TensorBatch t;
  ASSERT_TRUE(b->Next(&t).ok());
  EXPECT_FALSE(t.pinned());
}

// Issue 39 item 6 (the Python binding's next from two threads crashed): DeviceLoader::Next
// from two threads hands out distinct batches in distinct slots, each sample once, with the
// pixels of the reference epoch.
TEST(DeviceLoaderCpu, TwoThreadsCallingNextGetDistinctBatchesEachOnce) {
  const LoaderOptions lo = TestLoaderOptions();
  const std::vector<HostBatchCopy> ref = ReferenceEpoch(lo, 0);
  std::map<uint64_t, const HostBatchCopy*> by_first;
  for (const HostBatchCopy& r : ref) by_first[r.indices[0]] = &r;
  for (int round = 0; round < 3; ++round) {
    std::unique_ptr<DeviceLoader> loader = OpenOrDie(lo, DeviceOptions{});
    std::mutex mu;
    std::multiset<uint64_t> delivered;
    std::vector<std::string> errors;
    auto consume = [&] {
      std::vector<TensorBatch> held;  // kept: their slots stay taken while the other runs
      while (true) {
        TensorBatch b;
        const Status s = loader->Next(&b);
        if (!s.ok() || !b || b.epoch() != 0) {
          std::lock_guard<std::mutex> l(mu);
          if (!s.ok()) errors.push_back(s.ToString());
          return;
        }
        const auto it = by_first.find(b.indices()[0]);
        std::lock_guard<std::mutex> l(mu);
        if (it == by_first.end() ||
            it->second->images.size() * sizeof(float) != static_cast<size_t>(b.size()) *
                                                             b.channels() * b.height() * b.width() *
                                                             sizeof(float) ||
            std::memcmp(it->second->images.data(), b.images(),
                        it->second->images.size() * sizeof(float)) != 0) {
          errors.push_back("batch starting at " + std::to_string(b.indices()[0]) +
                           " is not the reference's");
        }
        for (int i = 0; i < b.size(); ++i) delivered.insert(b.indices()[i]);
        held.push_back(std::move(b));
      }
    };
    std::thread a(consume), b(consume);
    a.join();
    b.join();
    EXPECT_TRUE(errors.empty()) << errors.front();
    std::multiset<uint64_t> all;
    for (const HostBatchCopy& r : ref) all.insert(r.indices.begin(), r.indices.end());
    EXPECT_EQ(delivered, all) << "round " << round;
  }
}

}  // namespace
}  // namespace dspipe
