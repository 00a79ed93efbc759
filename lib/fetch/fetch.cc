// Fetch: DEST.part + sidecar, Range/If-Range resume, transient-only retries, verify, rename.
// The HTTP transfer is libcurl's; the local copy reads through the Env; both share the
// .part/sidecar/verify/rename path and the retry policy below.
#include "dspipe/fetch.h"

#include <curl/curl.h>
#include <openssl/evp.h>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstdio>
#include <cstring>
#include <deque>
#include <filesystem>
#include <mutex>
#include <nlohmann/json.hpp>
#include <random>
#include <thread>

#include "fetch/internal.h"
#include "fetch/s3.h"

namespace dspipe {
namespace {

using json = nlohmann::json;

constexpr size_t kCopyChunk = size_t{1} << 20;

// ---- sha256: Sha256 (fetch/internal.h)

// A Sha256 fed on its own thread, so that hashing overlaps receiving and writing instead of
// adding to them (the sha256 runs at ~1.8 GB/s; on the transfer thread it cost a quarter of a
// 127.0.0.1 download's rate). The producer hands over whole buffers: Submit takes the bytes of
// *chunk and gives back an empty buffer (one the hasher is done with, capacity kept), so there is
// no copy and no allocation per chunk. Chunks are hashed in submission order; at most kMaxQueued
// wait, then Submit blocks (memory stays bounded when the disk outruns the hash).
// One producer thread; enabled=false makes every call a no-op and starts no thread.
class HashThread {
 public:
  explicit HashThread(bool enabled) : enabled_(enabled) {
    if (enabled_) thread_ = std::thread([this] { Run(); });
  }
  ~HashThread() {
    if (!thread_.joinable()) return;
    {
      std::lock_guard<std::mutex> l(mu_);
      stop_ = true;
    }
    work_.notify_all();
    thread_.join();
  }
  HashThread(const HashThread&) = delete;
  HashThread& operator=(const HashThread&) = delete;

  bool enabled() const { return enabled_; }
  // Bytes submitted since the last Reset (hashed or queued).
  uint64_t bytes() const { return submitted_; }
  // Queues *chunk's bytes after those submitted before; *chunk comes back empty.
  void Submit(std::string* chunk) {
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
  // Starts over (DEST.part was truncated): waits for the queued chunks, then drops their hash.
  void Reset() {
    if (!enabled_) return;
    Drain();
    sha_.Reset();
    submitted_ = 0;
  }
  // The sha256 of every byte submitted since the last Reset.
  std::string HexDigest() {
    Drain();
    return sha_.HexDigest();
  }

 private:
  static constexpr size_t kMaxQueued = 4;

  void Drain() {
    std::unique_lock<std::mutex> l(mu_);
    idle_.wait(l, [&] { return queue_.empty() && !busy_; });
  }
  void Run() {
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

  const bool enabled_;
  uint64_t submitted_ = 0;  // producer thread only
  Sha256 sha_;              // the hasher thread's, or the producer's while the queue is drained
  std::mutex mu_;
  std::condition_variable work_, room_, idle_;
  std::deque<std::string> queue_;  // chunks to hash, in order
  std::vector<std::string> free_;  // hashed chunks' buffers, for reuse
  bool busy_ = false, stop_ = false;
  std::thread thread_;
};

// Feeds the first `n` bytes of path to h (a resumed .part's prefix), before any new byte.
Status HashPrefix(Env* env, const std::string& path, uint64_t n, HashThread* h) {
  if (!h->enabled()) return Status::OK();
  std::unique_ptr<RandomAccessFile> f;
  DSPIPE_RETURN_IF_ERROR(env->NewRandomAccessFile(path, &f));
  std::string buf;
  for (uint64_t off = 0; off < n;) {
    buf.resize(static_cast<size_t>(std::min<uint64_t>(kCopyChunk, n - off)));
    size_t got = 0;
    DSPIPE_RETURN_IF_ERROR(f->Read(off, buf.size(), buf.data(), &got));
    if (got == 0) return Status::IOError(path + ": shorter than " + std::to_string(n) + " bytes");
    buf.resize(got);
    h->Submit(&buf);  // hashed while the next chunk is read
    off += got;
  }
  return Status::OK();
}

std::string Lower(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

std::string Trim(std::string_view s) {
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.front()))) s.remove_prefix(1);
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.remove_suffix(1);
  return std::string(s);
}

// ---- sidecar: what DEST.part holds, so a later run can resume it safely.
struct Sidecar {
  // HTTP: RedactUrl(url) (no query: it may be a signature or a token); a resume matches its
  // UrlIdentity, so a re-signed URL of the same object resumes. Local copies: the source path.
  std::string url;
  std::string validator;  // strong ETag (with quotes) or Last-Modified; "" = cannot resume
  int64_t length = -1;    // full length of the file; -1 unknown
};

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

}  // namespace

// ---- cancellation (FetchOptions::cancelled)
bool Cancelled(const FetchOptions& o) { return o.cancelled && o.cancelled(); }

namespace {

Status CancelledError(const std::string& part_path) {
  return Status::Aborted("cancelled; " + part_path + " is kept: run again to resume");
}

// ---- retry policy shared by HTTP and local copies: Retrier (fetch/internal.h)

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
  std::string etag, last_modified, content_range, content_encoding, retry_after;
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
// Every this many bytes written, DEST.part's new bytes are handed to the disk (StartWriteback),
// so the fsync before the rename does not wait for the whole file's writeback.
constexpr uint64_t kWritebackEvery = uint64_t{8} << 20;

// Starts the writeback of `part` when kWritebackEvery bytes were appended since *last.
void MaybeStartWriteback(WritableFile* part, uint64_t* last) {
  if (part->size() < *last + kWritebackEvery && part->size() >= *last) return;
  part->StartWriteback();
  *last = part->size();
}

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

namespace {

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
    curl_easy_setopt(c.h, CURLOPT_FOLLOWLOCATION, 1L);
    curl_easy_setopt(c.h, CURLOPT_MAXREDIRS, 10L);
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

// Copies a local file into DEST.part, resuming at DEST.part's size; a failed read is retried
// at its offset.
Status CopyLocal(const std::string& src, const std::string& part_path,
                 const std::string& sidecar_path, const FetchOptions& o, Env* env, FetchResult* res,
                 bool first_round, uint64_t* src_size, HashThread* hash) {
  DSPIPE_RETURN_IF_ERROR(env->FileSize(src, src_size));
  Sidecar sc;
  const bool resumable = LoadSidecar(env, sidecar_path, &sc) && sc.url == src &&
                         sc.length == static_cast<int64_t>(*src_size) && env->FileExists(part_path);
  if (!resumable) {  // the sidecar first: see CheckPartIsOurs
    sc = Sidecar{src, "size=" + std::to_string(*src_size), static_cast<int64_t>(*src_size)};
    DSPIPE_RETURN_IF_ERROR(SaveSidecar(env, sidecar_path, sc));
  }
  std::unique_ptr<WritableFile> part;
  DSPIPE_RETURN_IF_ERROR(env->NewWritableFile(part_path, /*truncate=*/!resumable, &part));
  if (part->size() > *src_size) DSPIPE_RETURN_IF_ERROR(part->Truncate(0));
  if (first_round) res->resumed_from = part->size();
  hash->Reset();
  DSPIPE_RETURN_IF_ERROR(HashPrefix(env, part_path, part->size(), hash));
  DSPIPE_RETURN_IF_ERROR(part->Allocate(part->size(), *src_size - part->size()));
  std::unique_ptr<RandomAccessFile> in;
  Retrier retrier(o, res);
  std::string buf;
  uint64_t writeback_at = part->size();
  ++res->attempts;
  bool progress = false;
  while (part->size() < *src_size) {
    if (Cancelled(o)) return CancelledError(part_path);
    Status s = in ? Status::OK() : env->NewRandomAccessFile(src, &in);
    size_t got = 0;
    if (s.ok()) {
      buf.resize(static_cast<size_t>(std::min<uint64_t>(kCopyChunk, *src_size - part->size())));
      s = in->Read(part->size(), buf.size(), buf.data(), &got);
      if (s.ok() && got == 0)
        s = Status::IOError(src + ": shorter than its size " + std::to_string(*src_size));
    }
    if (!s.ok()) {  // a read error: retry at the same offset (reopening the file)
      in.reset();
      if (!retrier.Wait(progress, -1, part->size(), *src_size)) {
        if (retrier.cancelled()) return CancelledError(part_path);
        return s.WithContext("gave up after " + std::to_string(res->attempts) + " attempts; " +
                             part_path + " is kept: run again to resume");
      }
      ++res->attempts;
      progress = false;
      continue;
    }
    buf.resize(got);
    DSPIPE_RETURN_IF_ERROR(part->Append(buf));
    MaybeStartWriteback(part.get(), &writeback_at);
    hash->Submit(&buf);  // hashed while the next chunk is read and written
    res->downloaded += got;
    progress = true;
    if (o.progress) {
      FetchProgress p;
      p.bytes = part->size();
      p.total = *src_size;
      p.start_bytes = res->resumed_from;
      o.progress(p);
    }
  }
  return part->Close();
}

bool IsHex64(const std::string& s) {
  return s.size() == 64 && std::all_of(s.begin(), s.end(), [](char c) {
           return std::isxdigit(static_cast<unsigned char>(c));
         });
}

// Size and sha256 of path against what is expected. Corruption names both values.
// hash: the sha256 of the bytes as they were written, used when it covers the whole file (no
// second read); nullptr or partial = read the file.
Status Verify(Env* env, const std::string& path, const std::string& what, int64_t want_size,
              const std::string& want_sha, FetchResult* res, HashThread* hash = nullptr) {
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

// DEST.part is ours when its sidecar DEST.part.json is beside it (always written first). A
// DEST.part with bytes and no sidecar is someone else's file: it is never truncated, resumed or
// removed. (An empty one holds nothing to lose.)
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

// After a failure: a DEST.part that holds nothing to resume goes, with its sidecar (both ours).
void RemoveEmptyPart(Env* env, const std::string& part, const std::string& sidecar) {
  uint64_t size = 0;
  if (env->FileExists(part) && !(env->FileSize(part, &size).ok() && size == 0)) return;
  (void)env->RemoveFile(part);  // best effort: the fetch's error is what matters
  (void)env->RemoveFile(sidecar);
}

Status FetchUnlocked(const std::string& url, const std::string& dest, const FetchOptions& o,
                     Env* env, FetchResult* res);

Status FetchLocked(const std::string& url, const std::string& dest, const FetchOptions& o, Env* env,
                   FetchResult* res) {
  Status s = FetchUnlocked(url, dest, o, env, res);
  if (!s.ok() && s.code() != Status::Code::kAlreadyExists) {
    RemoveEmptyPart(env, dest + ".part", dest + ".part.json");
  }
  return s;
}

Status FetchUnlocked(const std::string& url, const std::string& dest, const FetchOptions& o,
                     Env* env, FetchResult* res) {
  const UrlScheme scheme = ClassifyUrl(url);
  const bool http =
      scheme == UrlScheme::kHttp || scheme == UrlScheme::kHttps || scheme == UrlScheme::kS3;
  if (scheme == UrlScheme::kOther) {
    return Status::InvalidArgument(RedactUrl(url) +
                                   ": not a URL dspipe fetches (http://, https://, s3://, file:// "
                                   "or a path)");
  }
  std::string src = url;
  if (scheme == UrlScheme::kFile) src = url.substr(7);
  if (env->FileExists(dest)) {
    // Another process (or an earlier run) finished it. Check it when we know what to expect.
    Status s = Verify(env, dest, dest, o.size, o.sha256, res);
    if (!s.ok())
      return Status::AlreadyExists(dest + " exists and does not match: " + s.message() +
                                   "; remove it to fetch again");
    res->already_present = true;
    return Status::OK();
  }
  const std::string part = dest + ".part", sidecar = dest + ".part.json";
  DSPIPE_RETURN_IF_ERROR(CheckPartIsOurs(env, dest, part, sidecar));
  for (int round = 0;; ++round) {
    uint64_t local_size = 0;
    HashThread hash(/*enabled=*/!o.sha256.empty());
    DSPIPE_RETURN_IF_ERROR(
        http ? DownloadHttp(url, part, sidecar, o, env, res, round == 0, &hash)
             : CopyLocal(src, part, sidecar, o, env, res, round == 0, &local_size, &hash));
    if (o.progress) {
      FetchProgress p;
      p.phase = FetchProgress::Phase::kVerifying;
      o.progress(p);
    }
    Sidecar sc;
    int64_t want_size = o.size;
    if (want_size < 0 && LoadSidecar(env, sidecar, &sc)) want_size = sc.length;
    Status v = Verify(env, part, RedactUrl(url), want_size, o.sha256, res, &hash);
    if (v.ok()) break;
    if (v.code() != Status::Code::kCorruption) return v;
    DSPIPE_RETURN_IF_ERROR(env->RemoveFile(part));
    DSPIPE_RETURN_IF_ERROR(env->RemoveFile(sidecar));
    if (round == 1) return v.WithContext("verification failed twice (deleted " + part + ")");
    ++res->refetches;
  }
  {  // durable before it gets the final name
    std::unique_ptr<WritableFile> f;
    DSPIPE_RETURN_IF_ERROR(env->NewWritableFile(part, /*truncate=*/false, &f));
    DSPIPE_RETURN_IF_ERROR(f->Sync());
    DSPIPE_RETURN_IF_ERROR(f->Close());
  }
  DSPIPE_RETURN_IF_ERROR(env->RenameFile(part, dest));
  DSPIPE_RETURN_IF_ERROR(env->SyncDir(std::filesystem::path(dest).parent_path().string()));
  return env->RemoveFile(sidecar);
}

}  // namespace

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

void ReleaseFetchLock(Env* env, const std::string& lock_path, std::unique_ptr<FileLock>* lock) {
  if (!*lock) return;
  // Removed while held (a waiter then takes the lock on the file next at that name); only an
  // empty regular file, as every lock file dspipe makes is: anything else there is not ours.
  FileKind kind = FileKind::kMissing;
  uint64_t size = 0;
  if (env->GetFileKind(lock_path, &kind).ok() && kind == FileKind::kRegular &&
      env->FileSize(lock_path, &size).ok() && size == 0) {
    (void)env->RemoveFile(lock_path);  // best effort: a lock file left behind harms nothing
  }
  lock->reset();
}

Status LockForFetch(Env* env, const std::string& lock_path, const FetchOptions& o,
                    std::unique_ptr<FileLock>* lock) {
  Status s = env->LockFile(lock_path, /*wait=*/false, lock);
  if (s.code() != Status::Code::kAborted) return s;
  if (o.progress) {
    FetchProgress p;
    p.phase = FetchProgress::Phase::kWaitingForLock;
    o.progress(p);
  }
  if (!o.cancelled) return env->LockFile(lock_path, /*wait=*/true, lock);
  // Cancellable: a blocking flock cannot be interrupted, so poll it.
  for (;;) {
    if (!SleepUnlessCancelled(o, 0.1)) {
      return Status::Aborted("cancelled while waiting for " + lock_path);
    }
    s = env->LockFile(lock_path, /*wait=*/false, lock);
    if (s.code() != Status::Code::kAborted) return s;
  }
}

Status Sha256File(const std::string& path, std::string* hex, Env* env) {
  if (env == nullptr) env = Env::Default();
  std::unique_ptr<RandomAccessFile> f;
  DSPIPE_RETURN_IF_ERROR(env->NewRandomAccessFile(path, &f));
  Sha256 h;
  std::string buf(kCopyChunk, '\0');
  uint64_t off = 0;
  for (;;) {
    size_t got = 0;
    DSPIPE_RETURN_IF_ERROR(f->Read(off, buf.size(), buf.data(), &got));
    if (got == 0) break;
    h.Update(buf.data(), got);
    off += got;
  }
  *hex = h.HexDigest();
  return Status::OK();
}

Status Fetch(const std::string& url, const std::string& dest, const FetchOptions& options,
             FetchResult* result) {
  FetchResult local;
  FetchResult* res = result ? result : &local;
  *res = FetchResult{};
  Env* env = options.env ? options.env : Env::Default();
  if (url.empty() || dest.empty()) return Status::InvalidArgument("fetch: empty URL or DEST");
  if (!options.sha256.empty() && !IsHex64(options.sha256))
    return Status::InvalidArgument("fetch: --sha256 must be 64 hex digits, got '" + options.sha256 +
                                   "'");
  if (options.retries < 0) return Status::InvalidArgument("fetch: retries must be >= 0");
  const std::string ctx = "fetch " + RedactUrl(url) + " -> " + dest;
  const std::string parent = std::filesystem::path(dest).parent_path().string();
  if (!parent.empty()) DSPIPE_RETURN_IF_ERROR(env->CreateDirs(parent).WithContext(ctx));
  std::unique_ptr<FileLock> lock;
  if (options.lock) {
    DSPIPE_RETURN_IF_ERROR(LockForFetch(env, dest + ".lock", options, &lock).WithContext(ctx));
  }
  Status s = FetchLocked(url, dest, options, env, res).WithContext(ctx);
  ReleaseFetchLock(env, dest + ".lock", &lock);
  return s;
}

}  // namespace dspipe
