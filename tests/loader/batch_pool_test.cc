// SPDX-License-Identifier: Apache-2.0
#include "loader/batch_pool.h"

#include <gtest/gtest.h>

#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <set>
#include <thread>
#include <vector>

namespace dspipe::loader {
namespace {

// Counts calls and checks that every pointer freed was allocated and not freed before.
class CountingAllocator : public BatchAllocator {
 public:
  void* Allocate(size_t bytes) override {
    ++allocs;
    last_bytes = bytes;
    void* p = std::aligned_alloc(4096, (bytes + 4095) / 4096 * 4096);
    live.insert(p);
    return p;
  }
  void Free(void* p) override {
    ++frees;
    EXPECT_EQ(live.erase(p), 1u);
    std::free(p);
  }
  int allocs = 0, frees = 0;
  size_t last_bytes = 0;
  std::set<void*> live;
};

BatchShape Shape() {
  BatchShape s;
  s.batch_size = 4;
  s.height = 5;
  s.width = 7;
  s.channels = 3;
  s.masks = true;
  s.normalized = true;
  return s;
}

TEST(BatchPoolTest, ReusesBuffersAndFreesThemAtTheEnd) {
  auto alloc = std::make_shared<CountingAllocator>();
  {
    auto pool = BatchPool::Create(Shape(), alloc);
    for (int round = 0; round < 100; ++round) {
      BatchBuffer* a = nullptr;
      BatchBuffer* b = nullptr;
      ASSERT_TRUE(pool->Acquire(&a).ok());
      ASSERT_TRUE(pool->Acquire(&b).ok());
      Batch batch = pool->Wrap(a, 3, 1, round);
      pool->Release(b);
      EXPECT_EQ(pool->in_use(), 1u);
      batch.Reset();
      EXPECT_EQ(pool->in_use(), 0u);
    }
    EXPECT_EQ(pool->allocated(), 2u);
    EXPECT_EQ(alloc->allocs, 2);
    EXPECT_EQ(alloc->frees, 0);
  }
  EXPECT_EQ(alloc->frees, 2);
  EXPECT_TRUE(alloc->live.empty());
}

// Issue 40 item 18: buffers released while more than `keep` are allocated are freed, so a
// consumer that held many batches does not leave the memory of all of them behind.
TEST(BatchPoolTest, BuffersBeyondKeepAreFreedWhenTheyComeBack) {
  auto alloc = std::make_shared<CountingAllocator>();
  {
    auto pool = BatchPool::Create(Shape(), alloc, /*keep=*/2);
    std::vector<Batch> held;
    for (int i = 0; i < 10; ++i) {
      BatchBuffer* b = nullptr;
      ASSERT_TRUE(pool->Acquire(&b).ok());
      held.push_back(pool->Wrap(b, 4, 0, i));
    }
    EXPECT_EQ(pool->allocated(), 10u);
    held.clear();
    EXPECT_EQ(pool->allocated(), 2u);
    EXPECT_EQ(pool->in_use(), 0u);
    EXPECT_EQ(alloc->frees, 8);
    EXPECT_EQ(alloc->live.size(), 2u);
    for (int round = 0; round < 50; ++round) {  // the two kept are reused
      BatchBuffer* b = nullptr;
      ASSERT_TRUE(pool->Acquire(&b).ok());
      pool->Release(b);
    }
    EXPECT_EQ(alloc->allocs, 10);
  }
  EXPECT_TRUE(alloc->live.empty());
}

TEST(BatchPoolTest, LayoutIsAlignedAndDisjoint) {
  auto alloc = std::make_shared<CountingAllocator>();
  auto pool = BatchPool::Create(Shape(), alloc);
  BatchBuffer* buf = nullptr;
  ASSERT_TRUE(pool->Acquire(&buf).ok());
  const BatchShape s = Shape();
  struct Range {
    const void* p;
    size_t bytes;
  };
  const Range ranges[] = {{buf->images, 4 * s.image_bytes()},
                          {buf->masks, 4 * s.mask_bytes()},
                          {buf->normalized, 4 * s.normalized_floats() * sizeof(float)},
                          {buf->labels, 4 * sizeof(int32_t)},
                          {buf->indices, 4 * sizeof(uint64_t)},
                          {buf->hflip, 4}};
  auto base = reinterpret_cast<uintptr_t>(buf->base);
  for (size_t i = 0; i < std::size(ranges); ++i) {
    const auto p = reinterpret_cast<uintptr_t>(ranges[i].p);
    EXPECT_EQ(p % 256, 0u) << i;
    EXPECT_GE(p, base);
    EXPECT_LE(p + ranges[i].bytes, base + alloc->last_bytes) << i;
    if (i > 0) {
      EXPECT_GE(p, reinterpret_cast<uintptr_t>(ranges[i - 1].p) + ranges[i - 1].bytes) << i;
    }
  }
  EXPECT_EQ(pool->buffer_bytes(), alloc->last_bytes);
  pool->Release(buf);
}

// Issue 39 item 12: batch x height x width x channels (x 4 for the float copy) is multiplied
// with checks. 64 x 2^30 x 2^30 x 3 wraps to exactly 0 in 64 bits; the pool never asks the
// allocator for a wrapped size: every Acquire is InvalidArgument naming the factors.
TEST(BatchPoolTest, AShapeWhoseBytesOverflowIsRefusedNeverAllocatedWrapped) {
  BatchShape huge = Shape();
  huge.batch_size = 64;
  huge.height = huge.width = 1 << 30;
  huge.channels = 3;
  BatchShape floats = Shape();  // the uint8 images fit; their float copy does not
  floats.batch_size = 1;
  floats.height = floats.width = 1 << 30;
  floats.channels = 3;
  floats.normalized = true;
  for (const BatchShape& shape : {huge, floats}) {
    auto alloc = std::make_shared<CountingAllocator>();
    auto pool = BatchPool::Create(shape, alloc);
    BatchBuffer* buf = nullptr;
    const Status s = pool->Acquire(&buf);
    EXPECT_EQ(s.code(), Status::Code::kInvalidArgument) << s.ToString();
    EXPECT_NE(s.message().find("batch_size " + std::to_string(shape.batch_size) +
                               " x height 1073741824 x width 1073741824 x 3 channels"),
              std::string::npos)
        << s.ToString();
    EXPECT_NE(s.message().find("LoaderOptions::batch_size"), std::string::npos) << s.ToString();
    EXPECT_EQ(alloc->allocs, 0) << "asked for " << alloc->last_bytes << " bytes";
    if (s.ok()) pool->Release(buf);
  }
}

// The checked layout is the one the pool uses, and a shape just below the limit is accepted.
TEST(BatchPoolTest, TheCheckedLayoutIsThePoolsAndLargeShapesThatFitAreAccepted) {
  BatchLayout l;
  ASSERT_TRUE(ComputeBatchLayout(Shape(), &l).ok());
  auto alloc = std::make_shared<CountingAllocator>();
  auto pool = BatchPool::Create(Shape(), alloc);
  EXPECT_EQ(pool->buffer_bytes(), l.bytes);
  BatchBuffer* buf = nullptr;
  ASSERT_TRUE(pool->Acquire(&buf).ok());
  const auto at = [&](const void* p) {
    return static_cast<size_t>(static_cast<const uint8_t*>(p) -
                               static_cast<const uint8_t*>(buf->base));
  };
  EXPECT_EQ(at(buf->masks), l.masks);
  EXPECT_EQ(at(buf->normalized), l.normalized);
  EXPECT_EQ(at(buf->labels), l.labels);
  EXPECT_EQ(at(buf->indices), l.indices);
  EXPECT_EQ(at(buf->hflip), l.hflip);
  pool->Release(buf);
  BatchShape big = Shape();  // 2^40 bytes of images: fits in a size_t (not allocated here)
  big.batch_size = 1 << 10;
  big.height = big.width = 1 << 15;
  big.channels = 1;
  big.masks = false;
  ASSERT_TRUE(ComputeBatchLayout(big, &l).ok());
  EXPECT_GE(l.bytes, size_t{1} << 40);
  big.channels = -1;
  EXPECT_EQ(ComputeBatchLayout(big, &l).code(), Status::Code::kInvalidArgument);
}

TEST(BatchPoolTest, BatchKeepsThePoolAliveAndMovesOwnership) {
  auto alloc = std::make_shared<CountingAllocator>();
  Batch kept;
  {
    auto pool = BatchPool::Create(Shape(), alloc);
    BatchBuffer* buf = nullptr;
    ASSERT_TRUE(pool->Acquire(&buf).ok());
    Batch b = pool->Wrap(buf, 2, 3, 4);
    b.images()[0] = 42;
    kept = std::move(b);
    EXPECT_TRUE(b.empty());
    EXPECT_EQ(pool->in_use(), 1u);
  }
  ASSERT_FALSE(kept.empty());
  EXPECT_EQ(kept.size(), 2);
  EXPECT_EQ(kept.epoch(), 3u);
  EXPECT_EQ(kept.number(), 4u);
  EXPECT_EQ(kept.images()[0], 42);
  EXPECT_EQ(kept.mask(1).size(), 35u);
  EXPECT_EQ(alloc->frees, 0);
  kept.Reset();  // last reference: the pool goes and frees its buffer
  EXPECT_EQ(alloc->frees, 1);
}

TEST(BatchPoolTest, FailingAllocatorIsAnError) {
  struct Failing : BatchAllocator {
    void* Allocate(size_t) override { return nullptr; }
    void Free(void*) override {}
  };
  auto pool = BatchPool::Create(Shape(), std::make_shared<Failing>());
  BatchBuffer* buf = nullptr;
  Status s = pool->Acquire(&buf);
  EXPECT_EQ(s.code(), Status::Code::kAborted);
  EXPECT_NE(s.message().find("bytes"), std::string::npos);
}

TEST(BatchPoolTest, ConcurrentReleaseFromManyThreads) {
  auto pool = BatchPool::Create(Shape(), nullptr);
  std::vector<Batch> batches;
  for (int i = 0; i < 8; ++i) {
    BatchBuffer* buf = nullptr;
    ASSERT_TRUE(pool->Acquire(&buf).ok());
    batches.push_back(pool->Wrap(buf, 1, 0, i));
  }
  std::vector<std::thread> threads;
  for (auto& b : batches) threads.emplace_back([&b] { b.Reset(); });
  for (auto& t : threads) t.join();
  EXPECT_EQ(pool->in_use(), 0u);
  EXPECT_EQ(pool->allocated(), 8u);
}

}  // namespace
}  // namespace dspipe::loader
