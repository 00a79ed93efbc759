// SPDX-License-Identifier: Apache-2.0
// An http(s):// or s3:// download into DEST.part: one libcurl easy handle per attempt, the
// response headers parsed (status, ETag/Last-Modified, Content-Range, Content-Length,
// Content-Encoding, Retry-After), the body appended to DEST.part (a 200 from byte 0, a 206 from
// DEST.part's size, checked against the sidecar's validator and length), and the decision of
// each outcome: done, resume (Range + If-Range, If-Match on S3), start over, retry or fail.
// The retry policy is Retrier's (internal.h); DEST.part, its sidecar and hash are part.h's.
#include <curl/curl.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <mutex>
#include <string>

#include "fetch/part.h"
#include "fetch/s3.h"

namespace dspipe::fetch {
namespace {

// ---- one HTTP request
struct Request {
  // in
  std::string url;
  Env* env = nullptr;
  WritableFile* part = nullptr;
  std::string sidecar_path;
  Sidecar* sidecar = nullptr;
  uint64_t offset = 0;  // bytes DEST.part had when the request started
  const FetchOptions* opts = nullptr;
  HashThread* hash = nullptr;  // covers DEST.part's bytes as they are written
  // response headers (of the last response: redirects reset them)
  long status = 0;
  std::string etag, last_modified, content_range, content_encoding, retry_after, location;
  int64_t content_length = -1;
  // body state
  bool body_started = false;
  bool accepting = false;  // body goes to DEST.part (200, or 206 with the right range)
  bool restart = false;    // the response cannot be appended: start DEST.part over
  bool cancelled = false;  // FetchOptions::cancelled said stop
  // The bytes the file may have (FetchOptions::size: the caller's or the manifest's); -1 none.
  int64_t declared = -1;
  std::string overflow;  // set when the server sent (or announced) more than `declared`
  std::string restart_reason;
  Status write_error;
  std::string pending;        // body bytes not yet written (gathered into ~1 MiB writes)
  std::string error_body;     // the first bytes of a body not accepted (an S3 error's XML)
  uint64_t received = 0;      // body bytes written by this request
  uint64_t writeback_at = 0;  // DEST.part's size at the last StartWriteback
  uint64_t total = 0;         // expected final size, 0 unknown
};

// Parses "bytes a-b/len" or "bytes */len". Missing numbers are -1.
void ParseContentRange(const std::string& v, int64_t* first, int64_t* last, int64_t* len) {
  *first = *last = *len = -1;
  long long a = -1, b = -1, l = -1;
  if (std::sscanf(v.c_str(), "bytes %lld-%lld/%lld", &a, &b, &l) >= 2) {
    *first = a;
    *last = b;
    *len = l;
  } else if (std::sscanf(v.c_str(), "bytes */%lld", &l) == 1) {
    *len = l;
  }
}

size_t OnHeader(char* data, size_t size, size_t n, void* user) {
  auto* rq = static_cast<Request*>(user);
  const size_t bytes = size * n;
  std::string_view line(data, bytes);
  if (line.rfind("HTTP/", 0) == 0) {  // a new response (after a redirect or 100-continue)
    rq->etag.clear();
    rq->last_modified.clear();
    rq->content_range.clear();
    rq->content_encoding.clear();
    rq->retry_after.clear();
    rq->location.clear();
    rq->content_length = -1;
    rq->body_started = rq->accepting = false;  // a redirect's body (if any) decided nothing
    const size_t sp = line.find(' ');
    rq->status =
        sp == std::string_view::npos ? 0 : std::atol(std::string(line.substr(sp + 1, 3)).c_str());
    return bytes;
  }
  const size_t colon = line.find(':');
  if (colon == std::string_view::npos) return bytes;
  const std::string name = Lower(Trim(line.substr(0, colon)));
  const std::string value = Trim(line.substr(colon + 1));
  if (name == "etag")
    rq->etag = value;
  else if (name == "last-modified")
    rq->last_modified = value;
  else if (name == "content-range")
    rq->content_range = value;
  else if (name == "content-encoding")
    rq->content_encoding = Lower(value);
  else if (name == "retry-after")
    rq->retry_after = value;
  else if (name == "location")
    rq->location = value;
  else if (name == "content-length")
    rq->content_length = std::atoll(value.c_str());
  return bytes;
}

void Report(const Request& rq) {
  if (!rq.opts->progress) return;
  FetchProgress p;
  p.phase = FetchProgress::Phase::kTransfer;
  p.bytes = rq.part->size();
  p.total = rq.total;
  p.start_bytes = rq.offset;
  rq.opts->progress(p);
}

// Decides, at the first body byte (or at the end of an empty body), where the body goes.
void StartBody(Request* rq) {
  rq->body_started = true;
  const bool encoded = !rq->content_encoding.empty() && rq->content_encoding != "identity";
  if (rq->status == 200) {
    if (encoded) {  // we never ask for an encoding; bytes we could not resume are useless
      rq->restart = true;
      rq->restart_reason = "server sent Content-Encoding: " + rq->content_encoding;
      return;
    }
    // A full body: what DEST.part had (if anything) is replaced.
    if (rq->part->size() > 0) {
      rq->write_error = rq->part->Truncate(0);
      if (!rq->write_error.ok()) return;
    }
    rq->hash->Reset();
    rq->offset = 0;
    rq->sidecar->url = RedactUrl(rq->url);  // the query may be a secret: never on disk
    const bool strong_etag = !rq->etag.empty() && rq->etag.rfind("W/", 0) != 0;
    rq->sidecar->validator = strong_etag ? rq->etag : rq->last_modified;
    rq->sidecar->length = rq->content_length;
    rq->total = rq->content_length > 0 ? static_cast<uint64_t>(rq->content_length) : 0;
    if (rq->declared >= 0 && rq->content_length > rq->declared) {
      rq->overflow = "the server announces " + std::to_string(rq->content_length) +
                     " bytes (Content-Length), more than";
      return;
    }
    rq->write_error = SaveSidecar(rq->env, rq->sidecar_path, *rq->sidecar);
    rq->accepting = rq->write_error.ok();
  } else if (rq->status == 206) {
    int64_t first, last, len;
    ParseContentRange(rq->content_range, &first, &last, &len);
    if (encoded || first != static_cast<int64_t>(rq->offset) ||
        (rq->sidecar->length >= 0 && len >= 0 && len != rq->sidecar->length)) {
      rq->restart = true;
      rq->restart_reason = encoded ? "Content-Encoding on a resumed transfer"
                                   : "206 with Content-Range '" + rq->content_range +
                                         "' for a request from byte " + std::to_string(rq->offset);
      return;
    }
    // A server that ignores If-Range (SeaweedFS does) answers with the new version's bytes: its
    // strong ETag tells them apart from those held.
    const std::string& held = rq->sidecar->validator;
    if (!held.empty() && held.front() == '"' && !rq->etag.empty() && rq->etag != held) {
      rq->restart = true;
      rq->restart_reason = "206 of another version (ETag " + rq->etag + ", " + held + " held)";
      return;
    }
    rq->total = len > 0 ? static_cast<uint64_t>(len) : 0;
    if (rq->declared >= 0 && len > rq->declared) {
      rq->overflow =
          "the server announces " + std::to_string(len) + " bytes (Content-Range), more than";
      return;
    }
    rq->accepting = true;
  }
  // Any other status: the body is an error page; it is read and dropped.
  if (rq->accepting) {
    // Reserve what is still to come where the size is known (the caller's, the manifest's, or
    // the server's length): a full disk (a tmpfs: RAM) is an error now, before the bytes.
    const uint64_t want = rq->declared >= 0 ? static_cast<uint64_t>(rq->declared) : rq->total;
    if (want > rq->part->size()) {
      rq->write_error = rq->part->Allocate(rq->part->size(), want - rq->part->size());
      if (!rq->write_error.ok()) rq->accepting = false;
    }
  }
}

// Body bytes are gathered into writes of about kWriteBuffer (fewer, larger writes to DEST.part);
// libcurl hands over up to kCurlBuffer at a time.
constexpr size_t kWriteBuffer = size_t{1} << 20;
constexpr long kCurlBuffer = 512L * 1024;

// Writes the buffered body bytes to DEST.part, then hands them to the hash thread. False on a
// write error (those bytes are then not hashed: the hash covers what DEST.part holds).
bool Flush(Request* rq) {
  if (rq->pending.empty() || !rq->write_error.ok()) return rq->write_error.ok();
  rq->write_error = rq->part->Append(rq->pending);
  if (!rq->write_error.ok()) return false;
  rq->received += rq->pending.size();
  MaybeStartWriteback(rq->part, &rq->writeback_at);
  rq->hash->Submit(&rq->pending);  // pending comes back empty (a recycled buffer)
  rq->pending.reserve(kWriteBuffer + kCurlBuffer);
  Report(*rq);
  return true;
}

size_t OnBody(char* data, size_t size, size_t n, void* user) {
  auto* rq = static_cast<Request*>(user);
  const size_t bytes = size * n;
  if (!rq->body_started) StartBody(rq);
  if (!rq->write_error.ok() || rq->restart || !rq->overflow.empty()) {
    return 0;  // aborts the transfer (CURLE_WRITE_ERROR)
  }
  if (!rq->accepting) {
    if (rq->error_body.size() < 8192) rq->error_body.append(data, std::min<size_t>(bytes, 8192));
    return bytes;
  }
  if (rq->declared >= 0) {
    // Never more than the declared bytes in DEST.part: what fits is kept, then it stops.
    const uint64_t have = rq->part->size() + rq->pending.size();
    const uint64_t room =
        static_cast<uint64_t>(rq->declared) > have ? static_cast<uint64_t>(rq->declared) - have : 0;
    if (bytes > room) {
      rq->pending.append(data, static_cast<size_t>(room));
      rq->overflow = "the server sent more than";
      Flush(rq);
      return 0;
    }
  }
  rq->pending.append(data, bytes);
  if (rq->pending.size() >= kWriteBuffer && !Flush(rq)) return 0;
  return bytes;
}

// Called by libcurl about once a second even while no bytes arrive: a stalled or paused stream
// still gets its buffered bytes into DEST.part, so a kill then loses at most about a second.
int OnXferInfo(void* user, curl_off_t, curl_off_t, curl_off_t, curl_off_t) {
  auto* rq = static_cast<Request*>(user);
  if (Cancelled(*rq->opts)) {  // aborts the transfer; what is buffered is flushed after it
    rq->cancelled = true;
    return 1;
  }
  if (!rq->accepting || rq->restart || !rq->overflow.empty() || rq->pending.empty()) return 0;
  return Flush(rq) ? 0 : 1;
}

}  // namespace

void SetTransferOptions(CURL* h, const FetchOptions& o) {
  curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
  curl_easy_setopt(h, CURLOPT_NOPROGRESS, 0L);  // the caller's XFERINFOFUNCTION polls cancelled
  curl_easy_setopt(h, CURLOPT_CONNECTTIMEOUT, o.connect_timeout_s);
  curl_easy_setopt(h, CURLOPT_LOW_SPEED_LIMIT, o.low_speed_bytes);
  curl_easy_setopt(h, CURLOPT_LOW_SPEED_TIME, o.low_speed_time_s);
  curl_easy_setopt(h, CURLOPT_USERAGENT, "dspipe-fetch/0.1");
  // No CURLOPT_ACCEPT_ENCODING: identity bytes only, so byte ranges mean file offsets.
  curl_easy_setopt(h, CURLOPT_HTTP_CONTENT_DECODING, 0L);
}

void GlobalInit() {
  static std::once_flag once;
  std::call_once(once, [] { curl_global_init(CURL_GLOBAL_DEFAULT); });
}

// Downloads url into DEST.part until it holds the whole file. Retries transient failures.
Status DownloadHttp(const std::string& url, const std::string& part_path,
                    const std::string& sidecar_path, const FetchOptions& o, Env* env,
                    FetchResult* res, bool first_round, HashThread* hash) {
  GlobalInit();
  const std::string shown = RedactUrl(url);  // the query may be a secret: never in a message
  Sidecar sc;
  // Scheme + host + path, not the query: a fresh signature of the same object resumes (its
  // validator, sent as If-Range, and the length still tell a different object apart).
  const bool resumable = LoadSidecar(env, sidecar_path, &sc) &&
                         UrlIdentity(sc.url) == UrlIdentity(url) && !sc.validator.empty() &&
                         env->FileExists(part_path);
  if (!resumable) {
    // The sidecar first: a DEST.part is ours only with its sidecar beside it (CheckPartIsOurs).
    sc = Sidecar{RedactUrl(url), "", -1};
    DSPIPE_RETURN_IF_ERROR(SaveSidecar(env, sidecar_path, sc));
  }
  std::unique_ptr<WritableFile> part;
  DSPIPE_RETURN_IF_ERROR(env->NewWritableFile(part_path, /*truncate=*/!resumable, &part));
  if (resumable && sc.url != RedactUrl(sc.url)) {
    // Written by a dspipe that kept the whole URL: its query (a secret) leaves the disk now.
    sc.url = RedactUrl(sc.url);
    DSPIPE_RETURN_IF_ERROR(SaveSidecar(env, sidecar_path, sc));
  }
  if (first_round) res->resumed_from = part->size();
  hash->Reset();
  DSPIPE_RETURN_IF_ERROR(HashPrefix(env, part_path, part->size(), hash));
  // s3://bucket/key: the object's http(s) URL, each request signed (SigV4) by libcurl.
  const bool is_s3 = s3::IsS3Url(url);
  const bool https = ClassifyUrl(url) == UrlScheme::kHttps;
  s3::Config s3cfg;
  std::string http_url = url;
  if (is_s3) {
    s3::Location loc;
    DSPIPE_RETURN_IF_ERROR(s3::ParseUrl(url, &loc));
    DSPIPE_RETURN_IF_ERROR(s3::ResolveConfig(s3::SystemEnv(), &s3cfg).WithContext(shown));
    http_url = s3::HttpUrl(s3cfg, loc);
  }
  Retrier retrier(o, res);
  std::string last_error;
  for (;;) {
    if (part->size() > 0 && sc.validator.empty()) {
      // Without a validator the bytes held cannot be matched to the server's file: start over.
      DSPIPE_RETURN_IF_ERROR(part->Truncate(0));
      hash->Reset();
    }
    ++res->attempts;
    Request rq;
    rq.url = url;
    rq.env = env;
    rq.part = part.get();
    rq.sidecar_path = sidecar_path;
    rq.sidecar = &sc;
    rq.offset = part->size();
    rq.writeback_at = part->size();
    rq.opts = &o;
    rq.hash = hash;
    rq.declared = o.size;
    rq.total = sc.length > 0 ? static_cast<uint64_t>(sc.length) : 0;
    CurlHandle c;
    if (c.h == nullptr) return Status::Internal("curl_easy_init failed");
    char errbuf[CURL_ERROR_SIZE] = {0};
    curl_easy_setopt(c.h, CURLOPT_URL, http_url.c_str());
    curl_easy_setopt(c.h, CURLOPT_ERRORBUFFER, errbuf);
    if (is_s3) {
      // Signed: the signature and x-amz-security-token (a header libcurl would carry to any
      // host) never follow a redirect; a 3xx is an error naming where it pointed.
      curl_easy_setopt(c.h, CURLOPT_FOLLOWLOCATION, 0L);
    } else {
      // Unsigned: redirects are followed, never from https to http (the URL's query may be a
      // token), and credentials of the URL's userinfo never go to another host.
      curl_easy_setopt(c.h, CURLOPT_FOLLOWLOCATION, 1L);
      curl_easy_setopt(c.h, CURLOPT_MAXREDIRS, 10L);
      curl_easy_setopt(c.h, CURLOPT_REDIR_PROTOCOLS_STR, https ? "https" : "http,https");
      curl_easy_setopt(c.h, CURLOPT_UNRESTRICTED_AUTH, 0L);
    }
    SetTransferOptions(c.h, o);
    curl_easy_setopt(c.h, CURLOPT_HEADERFUNCTION, OnHeader);
    curl_easy_setopt(c.h, CURLOPT_HEADERDATA, &rq);
    curl_easy_setopt(c.h, CURLOPT_WRITEFUNCTION, OnBody);
    curl_easy_setopt(c.h, CURLOPT_WRITEDATA, &rq);
    curl_easy_setopt(c.h, CURLOPT_BUFFERSIZE, kCurlBuffer);
    curl_easy_setopt(c.h, CURLOPT_XFERINFOFUNCTION, OnXferInfo);
    curl_easy_setopt(c.h, CURLOPT_XFERINFODATA, &rq);
    if (rq.offset > 0) {
      const std::string range = "Range: bytes=" + std::to_string(rq.offset) + "-";
      // S3: If-Match (412 when the object changed); If-Range is ignored by some S3 servers.
      const std::string if_range = (is_s3 ? "If-Match: " : "If-Range: ") + sc.validator;
      c.headers = curl_slist_append(c.headers, range.c_str());
      c.headers = curl_slist_append(c.headers, if_range.c_str());
    }
    if (is_s3) s3::Sign(c.h, s3cfg, s3::kEmptySha256, &c.headers);
    if (c.headers != nullptr) curl_easy_setopt(c.h, CURLOPT_HTTPHEADER, c.headers);
    rq.pending.reserve(kWriteBuffer + kCurlBuffer);
    const CURLcode cc = curl_easy_perform(c.h);
    if (rq.accepting && !rq.restart) Flush(&rq);  // what arrived is a valid prefix, cut or not
    long status = 0;
    curl_easy_getinfo(c.h, CURLINFO_RESPONSE_CODE, &status);
    rq.status = status;
    res->http_status = status;
    res->downloaded += rq.received;
    if (cc == CURLE_OK && !rq.body_started) StartBody(&rq);  // an empty body
    if (!rq.write_error.ok()) return rq.write_error;         // disk full: never retried
    if (rq.cancelled) return CancelledError(part_path);
    if (!rq.overflow.empty()) {
      // Not retried: the same server would send more again. What arrived is not the file the
      // caller (or the manifest) described: nothing is kept.
      part.reset();
      DSPIPE_RETURN_IF_ERROR(env->RemoveFile(part_path));
      DSPIPE_RETURN_IF_ERROR(env->RemoveFile(sidecar_path));
      return Status::Corruption(shown + ": " + rq.overflow + " the " + std::to_string(o.size) +
                                " bytes declared for it (the expected size); stopped there, "
                                "nothing kept (" +
                                part_path + " removed)");
    }
    const bool progress = rq.received > 0;
    double retry_after = -1;
    if (rq.restart) {
      // Start over from byte 0; a budget failure, so a server that always misbehaves ends.
      DSPIPE_RETURN_IF_ERROR(part->Truncate(0));
      hash->Reset();
      sc = Sidecar{RedactUrl(url), "", -1};
      DSPIPE_RETURN_IF_ERROR(SaveSidecar(env, sidecar_path, sc));
      last_error = rq.restart_reason;
      if (!retrier.Wait(false, 0, 0, 0)) break;
      continue;
    }
    if (cc == CURLE_OK) {
      if (rq.accepting) {
        if (rq.content_length >= 0 && rq.received != static_cast<uint64_t>(rq.content_length)) {
          last_error = "body ended after " + std::to_string(rq.received) + " of " +
                       std::to_string(rq.content_length) + " bytes";
        } else {
          return part->Close();
        }
      } else if (status == 416 && rq.offset > 0) {
        int64_t first, last, len;
        ParseContentRange(rq.content_range, &first, &last, &len);
        if (len == static_cast<int64_t>(rq.offset)) return part->Close();  // already complete
        DSPIPE_RETURN_IF_ERROR(part->Truncate(0));
        hash->Reset();
        sc = Sidecar{RedactUrl(url), "", -1};
        DSPIPE_RETURN_IF_ERROR(SaveSidecar(env, sidecar_path, sc));
        last_error = "416 with Content-Range '" + rq.content_range + "' for " +
                     std::to_string(rq.offset) + " bytes held";
        if (!retrier.Wait(false, 0, 0, 0)) break;
        continue;
      } else if (status == 412 && is_s3 && rq.offset > 0) {
        // If-Match failed: the object changed since DEST.part was started. Start over.
        DSPIPE_RETURN_IF_ERROR(part->Truncate(0));
        hash->Reset();
        DSPIPE_RETURN_IF_ERROR(env->RemoveFile(sidecar_path));
        last_error = "the object changed on the server (ETag no longer " + sc.validator + ")";
        sc = Sidecar{};
        if (!retrier.Wait(false, 0, 0, 0)) break;
        continue;
      } else if (is_s3 && s3::IsRedirect(status) && !rq.location.empty()) {
        const Status e = s3::RedirectError(shown, status, rq.location, s3cfg);
        if (part->size() == 0) return e;
        return Status(e.code(), e.message() + " (" + part_path + " is kept: run again to resume)");
      } else if (TransientHttp(status)) {
        std::string code, message;
        if (is_s3) s3::ParseError(rq.error_body, &code, &message);
        last_error = "HTTP " + std::to_string(status) + (code.empty() ? "" : " " + code);
        retry_after = ParseRetryAfter(rq.retry_after);
      } else if (is_s3) {
        const Status e = s3::RequestError(shown, status, rq.error_body, s3cfg);
        if (part->size() == 0) return e;
        return Status(e.code(), e.message() + " (" + part_path + " is kept: run again to resume)");
      } else if (status == 404 || status == 410) {
        return Status::NotFound(shown + ": HTTP " + std::to_string(status));
      } else if ((status == 400 || status == 401 || status == 403) && UrlHasQuery(url)) {
        // A signed or token URL refused: most often its signature expired (S3: 403; GCS: 400
        // "ExpiredToken"). Not transient: the same URL will not work again; a fresh one of the
        // same object resumes DEST.part.
        std::string m = shown + ": HTTP " + std::to_string(status) +
                        " (refused): the URL's query (a signature or token) may have "
                        "expired or be wrong; get a fresh URL and run again";
        if (part->size() > 0) {
          m += " (" + part_path + " is kept: a fresh URL of the same object resumes it)";
        }
        return Status::IOError(m);
      } else {
        return Status::IOError(shown + ": HTTP " + std::to_string(status));
      }
    } else if (cc == CURLE_UNSUPPORTED_PROTOCOL && https) {
      char* to = nullptr;
      curl_easy_getinfo(c.h, CURLINFO_EFFECTIVE_URL, &to);
      return Status::IOError(shown + ": the server redirected to " +
                             RedactUrl(to ? std::string(to) : std::string("?")) +
                             ", not https: refused (a download that starts on https stays on "
                             "https); fetch that URL itself if you trust it");
    } else if (TransientCurlError(cc)) {
      last_error =
          std::string(curl_easy_strerror(cc)) + (errbuf[0] ? std::string(": ") + errbuf : "");
    } else {
      return Status::IOError(shown + ": " + curl_easy_strerror(cc) +
                             (errbuf[0] ? std::string(" (") + errbuf + ")" : ""));
    }
    if (!retrier.Wait(progress, retry_after, part->size(), rq.total)) break;
  }
  if (retrier.cancelled()) return CancelledError(part_path);
  return Status::IOError(shown + ": gave up after " + std::to_string(res->attempts) +
                         " attempts (" + std::to_string(o.retries) +
                         " retries without progress); last error: " + last_error + "; " +
                         part_path + " is kept: run again to resume");
}

}  // namespace dspipe::fetch
