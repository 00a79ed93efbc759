// SPDX-License-Identifier: Apache-2.0
// The one-file fetch's internals, shared by fetch.cc (the entry point: lock, rounds, rename),
// part.cc (DEST.part, its sidecar DEST.part.json, the hash of its bytes, the verify),
// http_download.cc (an http(s):// or s3:// transfer into DEST.part) and local_copy.cc (a local
// file copied into DEST.part). The retry policy and the libcurl handle are in internal.h.
// Internal.
#pragma once

#include <cctype>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <mutex>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "core/files.h"
#include "dspipe/env.h"
#include "dspipe/fetch.h"
#include "fetch/internal.h"

namespace dspipe::fetch {

// ---- sha256 of DEST.part's bytes, as they are written

// A Sha256 fed on its own thread, so that hashing overlaps receiving and writing instead of
// adding to them (the sha256 runs at ~1.8 GB/s; on the transfer thread it cost a quarter of a
// 127.0.0.1 download's rate). The producer hands over whole buffers: Submit takes the bytes of
// *chunk and gives back an empty buffer (one the hasher is done with, capacity kept), so there is
// no copy and no allocation per chunk. Chunks are hashed in submission order; at most kMaxQueued
// wait, then Submit blocks (memory stays bounded when the disk outruns the hash).
// One producer thread; enabled=false makes every call a no-op and starts no thread.
class HashThread {
 public:
  explicit HashThread(bool enabled);
  ~HashThread();
  HashThread(const HashThread&) = delete;
  HashThread& operator=(const HashThread&) = delete;

  bool enabled() const { return enabled_; }
  // Bytes submitted since the last Reset (hashed or queued).
  uint64_t bytes() const { return submitted_; }
  // Queues *chunk's bytes after those submitted before; *chunk comes back empty.
  void Submit(std::string* chunk);
  // Starts over (DEST.part was truncated): waits for the queued chunks, then drops their hash.
  void Reset();
  // The sha256 of every byte submitted since the last Reset.
  std::string HexDigest();

 private:
  static constexpr size_t kMaxQueued = 4;

  void Drain();
  void Run();

  const bool enabled_;
  uint64_t submitted_ = 0;  // producer thread only
  core::Sha256 sha_;        // the hasher thread's, or the producer's while the queue is drained
  std::mutex mu_;
  std::condition_variable work_, room_, idle_;
  std::deque<std::string> queue_;  // chunks to hash, in order
  std::vector<std::string> free_;  // hashed chunks' buffers, for reuse
  bool busy_ = false, stop_ = false;
  std::thread thread_;
};

// Feeds the first `n` bytes of path to h (a resumed .part's prefix), before any new byte.
Status HashPrefix(Env* env, const std::string& path, uint64_t n, HashThread* h);

// ---- sidecar: what DEST.part holds, so a later run can resume it safely.
struct Sidecar {
  // HTTP: RedactUrl(url) (no query: it may be a signature or a token); a resume matches its
  // UrlIdentity, so a re-signed URL of the same object resumes. Local copies: the source path.
  std::string url;
  std::string validator;  // strong ETag (with quotes) or Last-Modified; "" = cannot resume
  int64_t length = -1;    // full length of the file; -1 unknown
};

bool LoadSidecar(Env* env, const std::string& path, Sidecar* sc);
Status SaveSidecar(Env* env, const std::string& path, const Sidecar& sc);

// The error of a fetch stopped by FetchOptions::cancelled; DEST.part is kept for a resume.
Status CancelledError(const std::string& part_path);

// Every kWritebackEvery bytes written, DEST.part's new bytes are handed to the disk
// (StartWriteback), so the fsync before the rename does not wait for the whole file's writeback.
// Starts the writeback of `part` when kWritebackEvery bytes were appended since *last.
void MaybeStartWriteback(WritableFile* part, uint64_t* last);

// ---- the transfers that fill DEST.part

// Downloads url (http(s):// or s3://) into DEST.part until it holds the whole file. Retries
// transient failures. http_download.cc.
Status DownloadHttp(const std::string& url, const std::string& part_path,
                    const std::string& sidecar_path, const FetchOptions& o, Env* env,
                    FetchResult* res, bool first_round, HashThread* hash);

// Copies a local file into DEST.part, resuming at DEST.part's size; a failed read is retried
// at its offset. local_copy.cc.
Status CopyLocal(const std::string& src, const std::string& part_path,
                 const std::string& sidecar_path, const FetchOptions& o, Env* env, FetchResult* res,
                 bool first_round, uint64_t* src_size, HashThread* hash);

// ---- after a transfer

// Size and sha256 of path against what is expected. Corruption names both values.
// hash: the sha256 of the bytes as they were written, used when it covers the whole file (no
// second read); nullptr or partial = read the file.
Status Verify(Env* env, const std::string& path, const std::string& what, int64_t want_size,
              const std::string& want_sha, FetchResult* res, HashThread* hash = nullptr);

// DEST.part is ours when its sidecar DEST.part.json is beside it (always written first). A
// DEST.part with bytes and no sidecar is someone else's file: it is never truncated, resumed or
// removed. (An empty one holds nothing to lose.)
Status CheckPartIsOurs(Env* env, const std::string& dest, const std::string& part,
                       const std::string& sidecar);

// After a failure: a DEST.part that holds nothing to resume goes, with its sidecar (both ours).
void RemoveEmptyPart(Env* env, const std::string& part, const std::string& sidecar);

}  // namespace dspipe::fetch
