#include "volume/cache.h"

namespace dspipe::volume {

VolumeCache::~VolumeCache() {
  for (std::thread& t : prefetching_) t.join();
}

bool VolumeCache::Claim(const Key& key, std::shared_future<Result>* f, std::promise<Result>* mine) {
  auto it = held_.find(key);
  if (it != held_.end()) {
    *f = it->second;
    return false;
  }
  *f = mine->get_future().share();
  held_.emplace(key, *f);
  order_.push_back(key);
  while (order_.size() > capacity_) {  // readers of an evicted one keep their future
    held_.erase(order_.front());
    order_.pop_front();
  }
  return true;
}

void VolumeCache::Read(const Key& key, std::vector<std::string> files, std::promise<Result>* mine) {
  auto v = std::make_shared<Volume>();
  Status s =
      files.empty() ? ReadVolume(key.first, key.second, v.get()) : ReadChannels(files, v.get());
  mine->set_value({s, s.ok() ? std::shared_ptr<const Volume>(std::move(v)) : nullptr});
}

Status VolumeCache::Get(const std::string& path, bool label, std::shared_ptr<const Volume>* out) {
  const Key key{path, label};
  std::shared_future<Result> f;
  std::promise<Result> mine;
  bool read = false;
  std::vector<std::string> files;  // an image kept as one file per channel
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!label) {
      auto c = channels_.find(path);
      if (c != channels_.end()) files = c->second;
    }
    read = Claim(key, &f, &mine);
  }
  if (read) Read(key, std::move(files), &mine);
  const Result& r = f.get();
  *out = r.second;
  return r.first;
}

void VolumeCache::Prefetch(const std::string& path, bool label) {
  const Key key{path, label};
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<std::string> files;
  if (!label) {
    auto c = channels_.find(path);
    if (c != channels_.end()) files = c->second;
  }
  std::shared_future<Result> f;
  auto mine = std::make_shared<std::promise<Result>>();
  if (!Claim(key, &f, mine.get())) return;
  prefetching_.emplace_back([this, key, files = std::move(files), mine]() mutable {
    Read(key, std::move(files), mine.get());
  });
}

void VolumeCache::SetChannels(const std::string& image, std::vector<std::string> files) {
  std::lock_guard<std::mutex> lock(mu_);
  channels_[image] = std::move(files);
}

}  // namespace dspipe::volume
