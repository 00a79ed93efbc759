// SPDX-License-Identifier: Apache-2.0
// dspipe::Fetch: a resumable, verified download of one URL (http, https, s3, file://) or a copy
// of one local path, into a local file.
//
//   dspipe::FetchOptions o;
//   o.sha256 = "9f86d0...";
//   dspipe::FetchResult r;
//   dspipe::Status s = dspipe::Fetch("https://host/data.mdb", "/content/data.mdb", o, &r);
//
// Guarantees (docs/FETCH.md has the details and the tests that prove each):
// - Bytes go to DEST.part, with a sidecar DEST.part.json holding the URL, the validator (strong
//   ETag or Last-Modified) and the length. DEST appears only by rename, after the size and, when
//   given, the sha256 were verified: DEST never exists unverified.
// - A later call resumes from DEST.part with `Range: bytes=N-` + `If-Range`, after a failure, a
//   crash or a SIGKILL. A 200, a 206 with the wrong Content-Range or a changed validator start
//   over; a 416 is accepted only when `bytes */len` says DEST.part is already complete.
// - An HTTP error body never lands in DEST.part; no content-encoding is ever requested, so
//   resumed bytes are the identity bytes.
// - Only transient failures are retried (connect errors, timeouts, stalls below the low-speed
//   limit, cut connections, 408, 429, 5xx), with exponential backoff + full jitter, Retry-After
//   honoured, and a retry budget that resets whenever an attempt made progress. There is no
//   global timeout. A size or sha256 mismatch deletes DEST.part and refetches once, then fails.
// - A write error (disk full) fails at once, naming DEST.part; DEST.part stays for a resume.
// - DEST.lock serializes processes fetching the same DEST: one downloads, the others wait and
//   then find DEST in place.
// - A DEST that was there before the call is "already present" only when options.sha256 is
//   given and matches (a mismatch: AlreadyExists, DEST kept). Without sha256 nothing proves it is
//   url's file (its size does not): it is fetched again into DEST.part, which replaces DEST once
//   complete. (A DEST made by the holder of DEST.lock while this call waited is taken.)
// - Local sources (a path or file://) get the same .part + verify + rename; a failed read
//   (a flaky FUSE mount's "Input/output error") is retried at its offset.
//
// Thread-safety: Fetch calls for different DESTs may run concurrently. libcurl's global init
// runs once, on first use.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "dspipe/env.h"
#include "dspipe/status.h"

namespace dspipe {

struct FetchProgress {
  enum class Phase { kWaitingForLock, kTransfer, kVerifying, kRetryWait };
  Phase phase = Phase::kTransfer;
  uint64_t bytes = 0;        // bytes in DEST.part now
  uint64_t total = 0;        // expected final size; 0 while unknown
  uint64_t start_bytes = 0;  // bytes DEST.part had when this attempt started (resume point)
};

struct FetchOptions {
  // Expected sha256 of the file, 64 hex digits (any case); "" = not checked (nor computed: it
  // is hashed while it is written, so checking it costs CPU but no second read).
  std::string sha256;
  // Expected size in bytes; -1 = take the server's length (checked against what arrived).
  int64_t size = -1;
  // Retries of transient failures in a row without progress (an attempt that wrote bytes resets
  // the count). 0 = one attempt only.
  int retries = 8;
  // Backoff before retry k (0-based) is uniform in [0, min(backoff_max_s, backoff_base_s*2^k)]
  // (full jitter); a Retry-After from the server replaces it, capped at retry_after_max_s.
  double backoff_base_s = 0.5;
  double backoff_max_s = 30;
  double retry_after_max_s = 300;
  // A transfer slower than low_speed_bytes/s for low_speed_time_s is a stall: aborted and
  // retried. This replaces a global timeout, which would kill slow but healthy downloads.
  long low_speed_bytes = 1024;
  long low_speed_time_s = 30;
  long connect_timeout_s = 30;
  // Take DEST.lock (see above). Default on.
  bool lock = true;
  // The file system to write through; nullptr = Env::Default(). Tests pass a fault-injecting Env.
  Env* env = nullptr;
  // Called from the calling thread as bytes arrive (throttling is the callee's job), while
  // waiting for the lock, while verifying and before a retry wait.
  std::function<void(const FetchProgress&)> progress;
  // Polled from the calling thread while the fetch runs: by libcurl's progress callback (at
  // least once a second, also while no bytes arrive), before each local copy block, and every
  // 0.1 s of a retry wait or a wait for DEST.lock. Returning true stops the fetch with
  // Status::Cancelled naming DEST.part, which keeps every byte that arrived: the next call resumes.
  // The Python binding uses it for Ctrl-C. Empty (default) = never cancelled.
  std::function<bool()> cancelled;
};

struct FetchResult {
  uint64_t bytes = 0;            // size of DEST
  std::string sha256;            // hex sha256 of DEST; "" when options.sha256 was ""
  uint64_t resumed_from = 0;     // bytes kept from an earlier DEST.part by the first attempt
  uint64_t downloaded = 0;       // bytes transferred by this call
  int attempts = 0;              // transfer attempts (requests, or copy passes)
  int refetches = 0;             // whole-file refetches after a failed verification
  bool already_present = false;  // DEST matched sha256, or a lock holder made it while we waited
  std::vector<double> retry_waits_s;  // the wait before each retry, in order
  long http_status = 0;               // the last HTTP response's status; 0 = none (or not HTTP)
};

// Fetches url (http://, https://, s3://bucket/key, file:// or a plain path) to dest. See the
// guarantees above. s3://: each request signed with SigV4 (credentials, region and endpoint from
// the AWS variables and files, docs/STORAGE.md), a resume sent with If-Match: <ETag> (412: the
// object changed, start over), S3's error code named in the message.
// Errors name the URL or file and the reason; InvalidArgument for bad options, NotFound for a
// 404 or missing source, Corruption for a verification that failed twice, IOError for the OS.
Status Fetch(const std::string& url, const std::string& dest, const FetchOptions& options,
             FetchResult* result = nullptr);

// Fetches a dataset served over HTTP (or a file:// URL / local path of a dataset directory)
// into dest_dir. url is the dataset directory's URL ("https://host/ds" or ".../ds/"): its
// manifest.json is fetched first and must list every file a reader needs with its size and
// sha256 (the "files" field, written by dsconvert build; docs/FORMAT.md). Each listed file is
// fetched with Fetch (resume, retries, size + sha256 verified, one refetch on a mismatch) into
// dest_dir.part/ beside dest_dir, which is renamed to dest_dir once all are in place: dest_dir
// never exists incomplete.
// - dest_dir.lock serializes processes: one downloads, the others wait and find dest_dir done.
// - A crash or kill leaves dest_dir.part/ (finished files + one FILE.part): the next call
//   resumes there, unless the served manifest changed since (then it starts over).
// - A manifest without the "files" list (built by an older dspipe) is an Unsupported error
//   naming its URL. An existing dest_dir is taken as done when its manifest.json lists the same
//   files with matching sizes; otherwise AlreadyExists.
// - options.sha256 and options.size must be unset (they come from the manifest); the other
//   fields apply to every file. options.progress sees one aggregate transfer: bytes and total
//   over all files.
// result (optional): bytes = the dataset's total size, resumed_from / downloaded / attempts /
// refetches summed over the files, already_present = dest_dir was complete; sha256 is "".
Status FetchDataset(const std::string& url, const std::string& dest_dir,
                    const FetchOptions& options, FetchResult* result = nullptr);

// ---- What a source string names: the one URL classifier. Every component routes by it (Fetch,
// FetchDataset, the cache, dsconvert), so "HTTPS://host/x" is a URL everywhere, never a file.
enum class UrlScheme {
  kPath,   // no "scheme://": a local path
  kFile,   // file://PATH
  kHttp,   // http://
  kHttps,  // https://
  kS3,     // s3://bucket/key (SigV4-signed requests: lib/fetch/s3.h)
  kOther,  // another scheme (ftp://, gs://, ...): not read by dspipe's fetch
};
// By the scheme before "://" (RFC 3986: a letter, then letters, digits, '+', '-', '.'),
// compared without regard to case.
UrlScheme ClassifyUrl(std::string_view url);
// kHttp or kHttps.
bool IsHttpUrl(std::string_view url);
// kHttp, kHttps or kS3: a source read over the network (a dataset FetchDataset fetches; the
// cache copies it before it is read).
bool IsRemoteUrl(std::string_view url);

// ---- URLs with a secret in their query: pre-signed S3/GCS URLs (?X-Amz-Signature=...),
// token URLs (?token=..., ?download=true&...). docs/FETCH.md, "Signed and token URLs".
// Fetch and FetchDataset send the query as given, and never show it: every message, log line,
// progress note and file they write (DEST.part.json, the cache's metadata) shows RedactUrl(url).

// url with its query replaced by "?..." (a fragment alone by "#..."), and a user:password@ by
// "...@". Anything that is not "scheme://..." (a path) is returned unchanged; an s3:// URL keeps
// its '?' and '#' (characters of the key, no secret). The one redaction every message uses.
std::string RedactUrl(const std::string& url);

// True when url is "scheme://..." with a query ('?' before any '#'); never for s3:// (its '?' is
// the key's).
bool UrlHasQuery(const std::string& url);

// scheme://host[:port]/path of an http(s) URL (libcurl's parse): no user info, query or
// fragment. What a resume (DEST.part.json) and the cache's key match on, so a re-signed URL of
// the same object resumes and finds the same cache entry (the ETag / Last-Modified / length
// checks still tell a different object apart). Other strings are returned unchanged.
std::string UrlIdentity(const std::string& url);

// url with "/" + rel appended to its path, the query kept (token-style auth: one token for a
// directory's files), the fragment dropped. Paths and file:// URLs: url + "/" + rel.
std::string UrlAppendPath(const std::string& url, const std::string& rel);

// The file name url names (`dsconvert fetch URL` without DEST): the last non-empty segment of
// its path, percent-decoded (libcurl); never the query or the fragment. A plain path: its last
// component. InvalidArgument (naming RedactUrl(url)) when there is none, or when the name is
// "." or "..", or holds a '/' (from "%2F") or a control character: it never leaves the
// directory it is put in.
Status UrlFileName(const std::string& url, std::string* name);

// Hex sha256 of a file read through env (nullptr = Env::Default()).
Status Sha256File(const std::string& path, std::string* hex, Env* env = nullptr);

}  // namespace dspipe
