// SPDX-License-Identifier: Apache-2.0
#include "volume/cache.h"

#include <algorithm>
#include <new>

namespace dspipe::volume {

struct VolumeCache::Spare {
  std::mutex mu;
  std::vector<uint8_t> buffers[2];  // [label]: an image volume's, a label volume's

  std::vector<uint8_t> Take(bool label) {
    std::lock_guard<std::mutex> lock(mu);
    return std::move(buffers[label]);
  }
  // Kept when larger than the one held (the memory of a volume read again is enough).
  void Give(bool label, std::vector<uint8_t> b) {
    std::lock_guard<std::mutex> lock(mu);
    if (b.capacity() > buffers[label].capacity()) buffers[label].swap(b);
  }  // the smaller one is freed here
};

VolumeCache::VolumeCache(size_t capacity)
    : capacity_(capacity), spare_(std::make_shared<Spare>()) {}

VolumeCache::~VolumeCache() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
    queue_.clear();  // nobody waits on them: the build that asked has finished
  }
  queued_.notify_all();
  if (prefetcher_.joinable()) prefetcher_.join();
}

VolumeCache::Promise VolumeCache::Claim(const Key& key, std::shared_future<Result>* f) {
  auto it = held_.find(key);
  if (it != held_.end()) {
    *f = it->second;
    return nullptr;
  }
  auto mine = std::make_shared<std::promise<Result>>();
  *f = mine->get_future().share();
  held_.emplace(key, *f);
  order_.push_back(key);
  while (order_.size() > capacity_) {  // readers of an evicted one keep their future
    held_.erase(order_.front());
    order_.pop_front();
  }
  return mine;
}

std::vector<std::string> VolumeCache::ChannelFiles(const Key& key) const {
  if (key.second) return {};
  auto c = channels_.find(key.first);
  return c == channels_.end() ? std::vector<std::string>{} : c->second;
}

void VolumeCache::Read(const Key& key, const std::vector<std::string>& files,
                       std::promise<Result>* p) {
  const bool label = key.second;
  // The volume's voxels go back to spare_ when its last holder lets go (the deleter keeps
  // spare_ alive past the cache).
  std::shared_ptr<Volume> v(new Volume, [spare = spare_, label](Volume* done) {
    spare->Give(label, std::move(done->data));
    delete done;
  });
  v->data = spare_->Take(label);
  Status s;
  try {
    s = files.empty() ? ReadVolume(key.first, key.second, v.get()) : ReadChannels(files, v.get());
  } catch (const std::bad_alloc&) {  // the prefetch thread must not end the process
    s = Status::Internal(key.first + ": out of memory reading the volume");
  }
  p->set_value({s, s.ok() ? std::shared_ptr<const Volume>(std::move(v)) : nullptr});
}

Status VolumeCache::Get(const std::string& path, bool label, std::shared_ptr<const Volume>* out) {
  const Key key{path, label};
  std::shared_future<Result> f;
  Promise mine;
  std::vector<std::string> files;
  {
    std::lock_guard<std::mutex> lock(mu_);
    files = ChannelFiles(key);
    mine = Claim(key, &f);
    if (mine == nullptr) {  // held: queued for the prefetch thread and not started? read it here
      auto q = std::find_if(queue_.begin(), queue_.end(), [&](const Job& j) { return j.key == key; });
      if (q != queue_.end()) {
        mine = std::move(q->promise);
        queue_.erase(q);
      }
    }
  }
  if (mine != nullptr) Read(key, files, mine.get());
  const Result& r = f.get();
  *out = r.second;
  return r.first;
}

void VolumeCache::Prefetch(const std::string& path, bool label) {
  const Key key{path, label};
  {
    std::lock_guard<std::mutex> lock(mu_);
    std::shared_future<Result> f;
    Promise mine = Claim(key, &f);
    if (mine == nullptr) return;
    queue_.push_back(Job{key, ChannelFiles(key), std::move(mine)});
    if (!prefetcher_.joinable()) prefetcher_ = std::thread([this] { PrefetchLoop(); });
  }
  queued_.notify_one();
}

void VolumeCache::PrefetchLoop() {
  std::unique_lock<std::mutex> lock(mu_);
  for (;;) {
    queued_.wait(lock, [this] { return stopping_ || !queue_.empty(); });
    if (stopping_) return;
    Job job = std::move(queue_.front());
    queue_.pop_front();
    lock.unlock();
    Read(job.key, job.files, job.promise.get());
    lock.lock();
  }
}

void VolumeCache::SetChannels(const std::string& image, std::vector<std::string> files) {
  std::lock_guard<std::mutex> lock(mu_);
  channels_[image] = std::move(files);
}

}  // namespace dspipe::volume
