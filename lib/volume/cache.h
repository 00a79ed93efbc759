// SPDX-License-Identifier: Apache-2.0
// The volumes a build reads, each once: its slices are consecutive items of the plan, made by
// several threads at once. Internal.
#pragma once

#include <condition_variable>
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
// read again if asked for again. The voxel buffer of the last image and of the last label
// volume nobody holds any more is kept for the next read of its kind (ReadNifti reuses it:
// pages already mapped), so the cache holds at most two volumes' memory beyond `capacity`.
class VolumeCache {
 public:
  explicit VolumeCache(size_t capacity = 6);
  ~VolumeCache();  // stops the prefetch thread (a read under way finishes first)
  VolumeCache(const VolumeCache&) = delete;
  VolumeCache& operator=(const VolumeCache&) = delete;
  Status Get(const std::string& path, bool label, std::shared_ptr<const Volume>* out);
  // Queues a volume for the cache's one prefetch thread unless it is held or being read: a
  // build asks for the next volume when it starts on one, so the next read overlaps this one's
  // slices (a read is one thread's work, and the slices of one volume wait for it). Get() then
  // waits for that read, takes its result, or, when the read has not started yet, reads the
  // volume itself.
  void Prefetch(const std::string& path, bool label);
  // An image kept as one file per channel: Get(image, false) reads `files` (ReadChannels);
  // `image` is the first of them, as the build's items name it.
  void SetChannels(const std::string& image, std::vector<std::string> files);

 private:
  struct Spare;  // the voxel buffers kept for the next read, shared with the volumes' deleters
  using Result = std::pair<Status, std::shared_ptr<const Volume>>;
  using Key = std::pair<std::string, bool>;
  using Promise = std::shared_ptr<std::promise<Result>>;
  struct Job {  // a claimed volume no thread has started to read
    Key key;
    std::vector<std::string> files;
    Promise promise;
  };
  std::mutex mu_;
  std::map<Key, std::shared_future<Result>> held_;
  std::deque<Key> order_;                                     // oldest first
  std::map<std::string, std::vector<std::string>> channels_;  // SetChannels
  std::deque<Job> queue_;                                     // Prefetch's, oldest first
  std::condition_variable queued_;
  bool stopping_ = false;
  std::thread prefetcher_;  // started by the first Prefetch; runs PrefetchLoop
  size_t capacity_;
  std::shared_ptr<Spare> spare_;

  // Under mu_: the entry for key, made with a new promise (returned) when it is not held.
  Promise Claim(const Key& key, std::shared_future<Result>* f);
  // Under mu_: the files of an image kept as one file per channel (none otherwise).
  std::vector<std::string> ChannelFiles(const Key& key) const;
  // Reads a claimed volume (ReadVolume or ReadChannels) into its promise.
  void Read(const Key& key, const std::vector<std::string>& files, std::promise<Result>* p);
  void PrefetchLoop();
};

}  // namespace dspipe::volume
