// The volumes a build reads, each once: its slices are consecutive items of the plan, made by
// several threads at once. Internal.
#pragma once

#include <deque>
#include <future>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
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
  ~VolumeCache();  // waits for the reads Prefetch started
  Status Get(const std::string& path, bool label, std::shared_ptr<const Volume>* out);
  // Starts reading a volume on a thread of its own unless it is held or being read: a build
  // asks for the next volume when it starts on one, so the next read overlaps this one's slices
  // (a read is one thread's work, and the slices of one volume wait for it). Get() then waits
  // for that read, or takes its result.
  void Prefetch(const std::string& path, bool label);
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
  std::vector<std::thread> prefetching_;                      // joined by the destructor

  // Under mu_: the entry for key, made (and true returned) when it is not held.
  bool Claim(const Key& key, std::shared_future<Result>* f, std::promise<Result>* mine);
  // Reads a claimed volume (ReadVolume or ReadChannels) into its promise.
  void Read(const Key& key, std::vector<std::string> files, std::promise<Result>* mine);
  size_t capacity_;
};

}  // namespace dspipe::volume
