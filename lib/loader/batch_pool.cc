// SPDX-License-Identifier: Apache-2.0
#include "loader/batch_pool.h"

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <initializer_list>
#include <string>
#include <utility>

namespace dspipe {
namespace {

constexpr size_t kAlign = 256;
size_t AlignUp(size_t n) { return (n + kAlign - 1) / kAlign * kAlign; }

class AlignedAllocator final : public BatchAllocator {
 public:
  void* Allocate(size_t bytes) override {
    constexpr size_t kPage = 4096;
    return std::aligned_alloc(kPage, (bytes + kPage - 1) / kPage * kPage);
  }
  void Free(void* ptr) override { std::free(ptr); }
};

}  // namespace

std::shared_ptr<BatchAllocator> DefaultBatchAllocator() {
  static const auto allocator = std::make_shared<AlignedAllocator>();
  return allocator;
}

Batch& Batch::operator=(Batch&& other) noexcept {
  if (this != &other) {
    Reset();
    pool_ = std::move(other.pool_);
    buffer_ = std::exchange(other.buffer_, nullptr);
    shape_ = other.shape_;
    size_ = std::exchange(other.size_, 0);
    epoch_ = other.epoch_;
    number_ = other.number_;
    images_ = std::exchange(other.images_, nullptr);
    masks_ = std::exchange(other.masks_, nullptr);
    normalized_ = std::exchange(other.normalized_, nullptr);
    labels_ = std::exchange(other.labels_, nullptr);
    indices_ = std::exchange(other.indices_, nullptr);
    hflip_ = std::exchange(other.hflip_, nullptr);
  }
  return *this;
}

void Batch::Reset() {
  if (buffer_ != nullptr) pool_->Release(std::exchange(buffer_, nullptr));
  pool_.reset();
  size_ = 0;
  images_ = masks_ = nullptr;
  normalized_ = nullptr;
  labels_ = nullptr;
  indices_ = nullptr;
  hflip_ = nullptr;
}

using loader::BatchBuffer;
using loader::BatchPool;

namespace loader {

Status ComputeBatchLayout(const BatchShape& shape, BatchLayout* out) {
  *out = BatchLayout();
  const auto what = [&shape] {
    return "batch_size " + std::to_string(shape.batch_size) + " x height " +
           std::to_string(shape.height) + " x width " + std::to_string(shape.width) + " x " +
           std::to_string(shape.channels) + " channels";
  };
  if (shape.batch_size < 0 || shape.height < 0 || shape.width < 0 || shape.channels < 0) {
    return Status::InvalidArgument("batch buffer: negative size in " + what());
  }
  constexpr size_t kMax = static_cast<size_t>(PTRDIFF_MAX) - kAlign;
  bool over = false;
  const auto mul = [&over](std::initializer_list<size_t> factors) {
    size_t r = 1;
    for (size_t f : factors) over |= __builtin_mul_overflow(r, f, &r);
    over |= r > kMax;
    return over ? 0 : AlignUp(r);
  };
  size_t at = 0;
  const auto add = [&over, &at](size_t part) {
    const size_t begin = at;
    over |= __builtin_add_overflow(at, part, &at) || at > kMax;
    return begin;
  };
  const auto n = static_cast<size_t>(shape.batch_size);
  const auto h = static_cast<size_t>(shape.height), w = static_cast<size_t>(shape.width);
  const auto c = static_cast<size_t>(shape.channels);
  add(mul({n, h, w, c, SampleTypeSize(shape.image_type)}));  // images, at 0
  out->masks = add(shape.masks ? mul({n, h, w, SampleTypeSize(shape.mask_type)}) : 0);
  out->normalized = add(shape.normalized ? mul({n, h, w, c, sizeof(float)}) : 0);
  out->labels = add(mul({n, sizeof(int32_t)}));
  out->indices = add(mul({n, sizeof(uint64_t)}));
  out->hflip = add(mul({n}));
  out->bytes = at;
  if (over) {
    *out = BatchLayout();
    return Status::InvalidArgument(
        "batch buffer: " + what() +
        (shape.normalized ? " (and x 4 bytes for the float copy)" : "") +
        " is more bytes than one allocation can hold; lower " + Opt("LoaderOptions::batch_size") +
        " or the output size (" + Opt("LoaderOptions::height") + "/" + Opt("LoaderOptions::width") +
        ", or the transform's crop/resize)");
  }
  return Status::OK();
}

}  // namespace loader

Batch::Pool::Pool(const BatchShape& shape, std::shared_ptr<BatchAllocator> allocator, size_t keep)
    : shape_(shape),
      allocator_(allocator ? std::move(allocator) : DefaultBatchAllocator()),
      keep_(keep) {
  loader::BatchLayout l;
  layout_ = loader::ComputeBatchLayout(shape, &l);
  if (!layout_.ok()) return;  // Acquire says why
  off_masks_ = l.masks;
  off_normalized_ = l.normalized;
  off_labels_ = l.labels;
  off_indices_ = l.indices;
  off_hflip_ = l.hflip;
  bytes_ = l.bytes;
}

std::shared_ptr<BatchPool> BatchPool::Create(const BatchShape& shape,
                                             std::shared_ptr<BatchAllocator> allocator,
                                             size_t keep) {
  return std::shared_ptr<BatchPool>(new Batch::Pool(shape, std::move(allocator), keep));
}

Batch::Pool::~Pool() {
  // Every Batch holds a reference to the pool, so all buffers are back by now.
  for (auto& b : all_) allocator_->Free(b->base);
}

Status BatchPool::Acquire(BatchBuffer** out) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!free_.empty()) {
      *out = free_.back();
      free_.pop_back();
      return Status::OK();
    }
  }
  DSPIPE_RETURN_IF_ERROR(layout_);
  void* base = allocator_->Allocate(bytes_);
  if (base == nullptr) {
    return Status::Aborted("batch pool: the allocator could not provide " + std::to_string(bytes_) +
                           " bytes for a batch buffer");
  }
  auto buffer = std::make_unique<BatchBuffer>();
  auto* p = static_cast<uint8_t*>(base);
  buffer->base = base;
  buffer->images = p;
  buffer->masks = shape_.masks ? p + off_masks_ : nullptr;
  buffer->normalized = shape_.normalized ? reinterpret_cast<float*>(p + off_normalized_) : nullptr;
  buffer->labels = reinterpret_cast<int32_t*>(p + off_labels_);
  buffer->indices = reinterpret_cast<uint64_t*>(p + off_indices_);
  buffer->hflip = p + off_hflip_;
  *out = buffer.get();
  std::lock_guard<std::mutex> lock(mu_);
  all_.push_back(std::move(buffer));
  return Status::OK();
}

void BatchPool::Release(BatchBuffer* buffer) {
  void* base = nullptr;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (all_.size() <= keep_) {
      free_.push_back(buffer);
      return;
    }
    const auto it = std::find_if(all_.begin(), all_.end(),
                                 [buffer](const auto& b) { return b.get() == buffer; });
    base = buffer->base;
    all_.erase(it);  // destroys *buffer
  }
  allocator_->Free(base);  // outside the lock: a pinned free can take a while
}

Batch BatchPool::Wrap(BatchBuffer* buffer, int size, uint64_t epoch, uint64_t number) {
  Batch b;
  b.pool_ = shared_from_this();
  b.buffer_ = buffer;
  b.shape_ = shape_;
  b.size_ = size;
  b.epoch_ = epoch;
  b.number_ = number;
  b.images_ = buffer->images;
  b.masks_ = buffer->masks;
  b.normalized_ = buffer->normalized;
  b.labels_ = buffer->labels;
  b.indices_ = buffer->indices;
  b.hflip_ = buffer->hflip;
  return b;
}

size_t BatchPool::allocated() const {
  std::lock_guard<std::mutex> lock(mu_);
  return all_.size();
}

size_t BatchPool::in_use() const {
  std::lock_guard<std::mutex> lock(mu_);
  return all_.size() - free_.size();
}

}  // namespace dspipe
