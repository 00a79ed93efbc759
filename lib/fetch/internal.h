// SPDX-License-Identifier: Apache-2.0
// Shared by the one-file fetch (fetch.cc, part.cc, http_download.cc, local_copy.cc, retry.cc),
// dataset.cc (a dataset) and the S3 requests (s3*.cc): waits that honour FetchOptions::cancelled,
// the DEST.lock / DEST_DIR.lock protocol (taken, and removed by its holder when done), the retry
// policy and which failures are transient, the libcurl handle.
// Internal.
#pragma once

#include <curl/curl.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdint>
#include <memory>
#include <random>
#include <string>
#include <string_view>

#include "core/checksum.h"
#include "dspipe/env.h"
#include "dspipe/fetch.h"

namespace dspipe::fetch {

// ASCII lower case; surrounding white space removed (header names and values).
inline std::string Lower(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}
inline std::string Trim(std::string_view s) {
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.front()))) s.remove_prefix(1);
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.remove_suffix(1);
  return std::string(s);
}

// Sleeps `seconds`, polling o.cancelled every 0.1 s; false when it said stop.
bool SleepUnlessCancelled(const FetchOptions& o, double seconds);

// Takes the exclusive lock at lock_path: at once when free; otherwise reports kWaitingForLock
// through o.progress and waits (blocking, or polling o.cancelled when it is set: then Cancelled).
Status LockForFetch(Env* env, const std::string& lock_path, const FetchOptions& o,
                    std::unique_ptr<FileLock>* lock);

// Removes the lock file the caller holds (when it is an empty regular file: dspipe's), then
// releases the lock: no DEST.lock is left beside the user's files.
void ReleaseFetchLock(Env* env, const std::string& lock_path, std::unique_ptr<FileLock>* lock);

// True when FetchOptions::cancelled says stop.
bool Cancelled(const FetchOptions& o);

// Which failures are worth another attempt: connect errors, timeouts, cut connections (libcurl),
// 408, 429 and 5xx (HTTP).
bool TransientCurlError(CURLcode c);
bool TransientHttp(long status);

// Retry-After: seconds or an HTTP date. -1 when absent or unparsable.
double ParseRetryAfter(const std::string& v);

// curl_global_init, once per process.
void GlobalInit();

// The options every transfer of fetch's sets: no signals, a progress callback (the caller's
// XFERINFOFUNCTION), FetchOptions' connect timeout and low-speed limit (no global timeout), the
// user agent, and no content decoding (the bytes on the wire are the file's).
void SetTransferOptions(CURL* h, const FetchOptions& o);

// sha256 (Sha256, Sha256Hex, IsHex64): core/checksum.h.

// The retry policy shared by HTTP downloads, local copies and S3 requests: exponential backoff
// with full jitter, Retry-After honoured (capped), a budget of FetchOptions::retries failures in
// a row that an attempt with progress resets. Each wait goes to FetchResult::retry_waits_s.
class Retrier {
 public:
  Retrier(const FetchOptions& o, FetchResult* r) : o_(o), r_(r), rng_(std::random_device{}()) {}

  // After a failed attempt: false when the budget is spent. made_progress resets the budget.
  // retry_after_s >= 0 replaces the jittered backoff.
  bool Wait(bool made_progress, double retry_after_s, uint64_t bytes, uint64_t total) {
    if (made_progress) failures_ = 0;
    if (failures_ >= o_.retries) return false;
    double wait;
    if (retry_after_s >= 0) {
      wait = std::min(retry_after_s, o_.retry_after_max_s);
    } else {
      const double cap =
          std::min(o_.backoff_max_s, o_.backoff_base_s * std::ldexp(1.0, std::min(failures_, 30)));
      wait = std::uniform_real_distribution<double>(0, std::max(cap, 0.0))(rng_);
    }
    ++failures_;
    r_->retry_waits_s.push_back(wait);
    if (o_.progress) {
      FetchProgress p;
      p.phase = FetchProgress::Phase::kRetryWait;
      p.bytes = bytes;
      p.total = total;
      o_.progress(p);
    }
    if (!SleepUnlessCancelled(o_, wait)) {
      cancelled_ = true;
      return false;
    }
    return true;
  }
  int failures() const { return failures_; }
  bool cancelled() const { return cancelled_; }

 private:
  const FetchOptions& o_;
  FetchResult* r_;
  std::mt19937_64 rng_;
  int failures_ = 0;
  bool cancelled_ = false;
};

// One easy handle and its header list, freed together.
struct CurlHandle {
  CURL* h = curl_easy_init();
  curl_slist* headers = nullptr;
  ~CurlHandle() {
    curl_slist_free_all(headers);
    curl_easy_cleanup(h);
  }
};

}  // namespace dspipe::fetch
