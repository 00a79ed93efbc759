// SPDX-License-Identifier: Apache-2.0
// The retry policy's parts outside Retrier (internal.h): which failures are transient
// (libcurl's connect errors, timeouts and cut connections; HTTP 408, 429 and 5xx), Retry-After
// parsed (seconds or an HTTP date), and the waits that honour FetchOptions::cancelled.
#include <curl/curl.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <ctime>
#include <string>
#include <thread>

#include "fetch/internal.h"

namespace dspipe::fetch {

// ---- cancellation (FetchOptions::cancelled)
bool Cancelled(const FetchOptions& o) { return o.cancelled && o.cancelled(); }

bool SleepUnlessCancelled(const FetchOptions& o, double seconds) {
  using Clock = std::chrono::steady_clock;
  const Clock::time_point until =
      Clock::now() + std::chrono::duration_cast<Clock::duration>(
                         std::chrono::duration<double>(std::max(seconds, 0.0)));
  for (;;) {
    if (Cancelled(o)) return false;
    const Clock::time_point now = Clock::now();
    if (now >= until) return true;
    const Clock::duration left = until - now;
    const Clock::duration slice = std::chrono::milliseconds(100);
    std::this_thread::sleep_for(std::min(left, slice));
  }
}

bool TransientCurlError(CURLcode c) {
  switch (c) {
    case CURLE_COULDNT_CONNECT:
    case CURLE_COULDNT_RESOLVE_HOST:
    case CURLE_COULDNT_RESOLVE_PROXY:
    case CURLE_OPERATION_TIMEDOUT:
    case CURLE_PARTIAL_FILE:
    case CURLE_RECV_ERROR:
    case CURLE_SEND_ERROR:
    case CURLE_GOT_NOTHING:
    case CURLE_SSL_CONNECT_ERROR:
    case CURLE_HTTP2:
    case CURLE_HTTP2_STREAM:
    case CURLE_AGAIN:
      return true;
    default:
      return false;
  }
}

bool TransientHttp(long status) { return status == 408 || status == 429 || status >= 500; }

// Retry-After: seconds or an HTTP date. -1 when absent or unparsable.
double ParseRetryAfter(const std::string& v) {
  if (v.empty()) return -1;
  if (std::all_of(v.begin(), v.end(),
                  [](char c) { return std::isdigit(static_cast<unsigned char>(c)); }))
    return std::atof(v.c_str());
  const time_t when = curl_getdate(v.c_str(), nullptr);
  if (when < 0) return -1;
  return std::max(0.0, std::difftime(when, std::time(nullptr)));
}

}  // namespace dspipe::fetch
