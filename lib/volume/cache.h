// The volumes a build reads, each once: its slices are consecutive items of the plan, made by
// several threads at once. Internal.
#pragma once

#include <deque>
#include <future>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "volume/volume.h"

namespace dspipe::volume {

// Thread-safe. Get() reads a volume (ReadVolume) on the first call for it, in the calling
// thread; concurrent calls for the same volume wait for that read. The `capacity` volumes
// asked for last stay (a build's current volume, its label and the next ones); an older one is
// read again if asked for again.
class VolumeCache {
 public:
  explicit VolumeCache(size_t capacity = 6) : capacity_(capacity) {}
  Status Get(const std::string& path, bool label, std::shared_ptr<const Volume>* out);
  // An image kept as one file per channel: Get(image, false) reads `files` (ReadChannels);
  // `image` is the first of them, as the build's items name it.
  void SetChannels(const std::string& image, std::vector<std::string> files);

 private:
  using Result = std::pair<Status, std::shared_ptr<const Volume>>;
  using Key = std::pair<std::string, bool>;
  std::mutex mu_;
  std::map<Key, std::shared_future<Result>> held_;
  std::deque<Key> order_;                                     // oldest first
  std::map<std::string, std::vector<std::string>> channels_;  // SetChannels
  size_t capacity_;
};

}  // namespace dspipe::volume
