// SPDX-License-Identifier: Apache-2.0
// DEST.part and what is known about it: the sidecar DEST.part.json (what a later run needs to
// resume it safely), the sha256 of its bytes fed as they are written (HashThread), the verify
// of its size and sha256, and the rules for a DEST.part that is not ours or holds nothing.
// Shared by the HTTP download (http_download.cc) and the local copy (local_copy.cc): part.h.
#include "fetch/part.h"

#include <algorithm>
#include <memory>
#include <nlohmann/json.hpp>

namespace dspipe::fetch {

using json = nlohmann::json;

// ---- HashThread

HashThread::HashThread(bool enabled) : enabled_(enabled) {
  if (enabled_) thread_ = std::thread([this] { Run(); });
}

HashThread::~HashThread() {
  if (!thread_.joinable()) return;
  {
    std::lock_guard<std::mutex> l(mu_);
    stop_ = true;
  }
  work_.notify_all();
  thread_.join();
}

void HashThread::Submit(std::string* chunk) {
  if (!enabled_ || chunk->empty()) {
    chunk->clear();
    return;
  }
  submitted_ += chunk->size();
  std::string spare;
  {
    std::unique_lock<std::mutex> l(mu_);
    room_.wait(l, [&] { return queue_.size() < kMaxQueued; });
    queue_.push_back(std::move(*chunk));
    if (!free_.empty()) {
      spare = std::move(free_.back());
      free_.pop_back();
    }
  }
  work_.notify_one();
  *chunk = std::move(spare);
  chunk->clear();
}

void HashThread::Reset() {
  if (!enabled_) return;
  Drain();
  sha_.Reset();
  submitted_ = 0;
}

std::string HashThread::HexDigest() {
  Drain();
  return sha_.HexDigest();
}

void HashThread::Drain() {
  std::unique_lock<std::mutex> l(mu_);
  idle_.wait(l, [&] { return queue_.empty() && !busy_; });
}

void HashThread::Run() {
  std::unique_lock<std::mutex> l(mu_);
  for (;;) {
    work_.wait(l, [&] { return stop_ || !queue_.empty(); });
    if (stop_) return;  // only the destructor stops it: nobody wants the hash any more
    std::string chunk = std::move(queue_.front());
    queue_.pop_front();
    busy_ = true;
    l.unlock();
    room_.notify_one();
    sha_.Update(chunk.data(), chunk.size());
    chunk.clear();
    l.lock();
    if (free_.size() < kMaxQueued) free_.push_back(std::move(chunk));
    busy_ = false;
    if (queue_.empty()) idle_.notify_all();
  }
}

// ---- HashPrefix

Status HashPrefix(Env* env, const std::string& path, uint64_t n, HashThread* h) {
  if (!h->enabled()) return Status::OK();
  std::unique_ptr<RandomAccessFile> f;
  DSPIPE_RETURN_IF_ERROR(env->NewRandomAccessFile(path, &f));
  std::string buf;
  for (uint64_t off = 0; off < n;) {
    buf.resize(static_cast<size_t>(std::min<uint64_t>(core::kCopyChunk, n - off)));
    size_t got = 0;
    DSPIPE_RETURN_IF_ERROR(f->Read(off, buf.size(), buf.data(), &got));
    if (got == 0) return Status::IOError(path + ": shorter than " + std::to_string(n) + " bytes");
    buf.resize(got);
    h->Submit(&buf);  // hashed while the next chunk is read
    off += got;
  }
  return Status::OK();
}

// ---- sidecar

bool LoadSidecar(Env* env, const std::string& path, Sidecar* sc) {
  std::string text;
  if (!env->ReadFile(path, &text).ok()) return false;
  json j = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (!j.is_object() || !j.contains("url") || !j["url"].is_string()) return false;
  sc->url = j["url"].get<std::string>();
  sc->validator = j.value("validator", std::string());
  sc->length = j.value("length", int64_t{-1});
  return true;
}

Status SaveSidecar(Env* env, const std::string& path, const Sidecar& sc) {
  json j = {{"url", sc.url}, {"validator", sc.validator}, {"length", sc.length}};
  return env->WriteFileAtomic(path, j.dump(2));
}

// ---- cancellation, writeback

Status CancelledError(const std::string& part_path) {
  return Status::Cancelled("cancelled; " + part_path + " is kept: run again to resume");
}

constexpr uint64_t kWritebackEvery = uint64_t{8} << 20;

void MaybeStartWriteback(WritableFile* part, uint64_t* last) {
  if (part->size() < *last + kWritebackEvery && part->size() >= *last) return;
  part->StartWriteback();
  *last = part->size();
}

// ---- verify, and a DEST.part that is not ours or holds nothing

Status Verify(Env* env, const std::string& path, const std::string& what, int64_t want_size,
              const std::string& want_sha, FetchResult* res, HashThread* hash) {
  uint64_t size = 0;
  DSPIPE_RETURN_IF_ERROR(env->FileSize(path, &size));
  if (want_size >= 0 && size != static_cast<uint64_t>(want_size))
    return Status::Corruption(what + ": size " + std::to_string(size) + ", expected " +
                              std::to_string(want_size));
  res->sha256.clear();
  if (want_sha.empty()) {
    // Nothing to check against: no hash (it would cost a full read for information only).
  } else if (hash != nullptr && hash->enabled() && hash->bytes() == size) {
    res->sha256 = hash->HexDigest();
  } else {
    DSPIPE_RETURN_IF_ERROR(Sha256File(path, &res->sha256, env));
  }
  if (!want_sha.empty() && res->sha256 != Lower(want_sha))
    return Status::Corruption(what + ": sha256 " + res->sha256 + ", expected " + Lower(want_sha));
  res->bytes = size;
  return Status::OK();
}

Status CheckPartIsOurs(Env* env, const std::string& dest, const std::string& part,
                       const std::string& sidecar) {
  uint64_t size = 0;
  if (!env->FileExists(part) || (env->FileSize(part, &size).ok() && size == 0)) {
    return Status::OK();
  }
  Sidecar sc;
  if (LoadSidecar(env, sidecar, &sc)) return Status::OK();
  return Status::AlreadyExists(part + " exists and was not made by dspipe fetch (no " + sidecar +
                               " beside it): it is not overwritten; move it away to fetch " + dest);
}

void RemoveEmptyPart(Env* env, const std::string& part, const std::string& sidecar) {
  uint64_t size = 0;
  if (env->FileExists(part) && !(env->FileSize(part, &size).ok() && size == 0)) return;
  (void)env->RemoveFile(part);  // best effort: the fetch's error is what matters
  (void)env->RemoveFile(sidecar);
}

}  // namespace dspipe::fetch
