// SPDX-License-Identifier: Apache-2.0
// S3 requests over fetch's libcurl machinery: s3://bucket/key URLs, the HTTP URL they map to
// (path-style or virtual-host), canonical query strings, SigV4 signing by libcurl itself
// (CURLOPT_AWS_SIGV4), S3's error bodies turned into messages that name the object, and the
// requests the loader, the cache and `dsconvert push` need: HEAD, GET (whole or a byte range,
// checked against an ETag), ListObjectsV2 (every page), PUT, DELETE and multipart uploads.
// Internal to lib/ (docs/STORAGE.md is the user's view).
//
//   std::unique_ptr<s3::Client> c;
//   DSPIPE_RETURN_IF_ERROR(s3::Client::Make(FetchOptions(), &c));
//   s3::ObjectInfo info;
//   DSPIPE_RETURN_IF_ERROR(c->Head("s3://bkt/train/shard-00000.lmdb/data.mdb", &info));
//   std::string bytes;
//   DSPIPE_RETURN_IF_ERROR(c->GetRange(url, 0, 1 << 20, info.etag, &bytes));
//
// Every request retries what Fetch retries (cut connections, timeouts, 408, 429, 5xx such as
// 503 SlowDown), with FetchOptions' budget, backoff and Retry-After, and stops when
// FetchOptions::cancelled says so. Messages show s3:// URLs (no secret is ever in one) and S3's
// error code; the secret key and the session token appear in no message and no log line.
// Thread-safety: a Client is immutable after Make; its calls may run on several threads at once
// (each request has its own libcurl handle).
#pragma once

#include <curl/curl.h>

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "dspipe/fetch.h"
#include "dspipe/status.h"
#include "fetch/s3_config.h"

namespace dspipe::fetch::s3 {

// sha256 of the empty string: the payload hash of a request without a body.
inline constexpr const char* kEmptySha256 =
    "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855";

// True for "s3://..." (the scheme in any case).
bool IsS3Url(const std::string& url);

struct Location {
  std::string bucket;
  // "" = the bucket itself; taken literally (no percent-decoding; '?', '#', '.' and '..'
  // segments are key characters, sent as given)
  std::string key;
};

// "s3://bucket/key" -> {bucket, key}: everything after the bucket's '/' is the key, literally
// ('?' and '#' included: an s3:// URL has no query or fragment). InvalidArgument naming url when
// it is not s3://, has no bucket, or the bucket holds '?', '#' or '@'.
Status ParseUrl(const std::string& url, Location* loc);

// RFC 3986 percent-encoding of every byte but the unreserved A-Z a-z 0-9 - _ . ~ ('/' kept when
// keep_slash): what SigV4's canonical URI and query need.
std::string UriEncode(std::string_view s, bool keep_slash);

// "name=value&..." sorted by name, then value, each part UriEncoded; an empty value is "name=".
// libcurl 7.88 signs the query exactly as it is sent, so it must be canonical already.
std::string CanonicalQuery(std::vector<std::pair<std::string, std::string>> params);

// The http(s) URL of loc under cfg: path-style "E/bucket/key" or virtual-host "bucket.E/key"
// (kAuto: virtual-host on AWS's own endpoint when the bucket name is a valid host label, else
// path-style), the key UriEncoded with '/' kept, then "?" + canonical_query when given.
std::string HttpUrl(const Config& cfg, const Location& loc,
                    const std::string& canonical_query = "");

// Makes h send its URL's path as given (CURLOPT_PATH_AS_IS: "." and ".." segments of a key are
// kept) and sign its request with SigV4 (CURLOPT_AWS_SIGV4 "aws:amz:<region>:s3", the key pair as
// CURLOPT_USERNAME/PASSWORD) and appends x-amz-content-sha256 (payload_sha256: the body's hex
// sha256, kEmptySha256 or "UNSIGNED-PAYLOAD") and, with a session token, x-amz-security-token to
// *headers. The caller sets CURLOPT_HTTPHEADER to *headers afterwards.
void Sign(CURL* h, const Config& cfg, const std::string& payload_sha256, curl_slist** headers);

// The <Code> and <Message> of an S3 error body (pugixml); both "" when it is not one.
void ParseError(const std::string& body, std::string* code, std::string* message);

// The error for a refused request about `what` (an s3:// URL): the status, S3's code and
// message, and what to do (ExpiredToken: fresh credentials; SignatureDoesNotMatch: the secret
// key of cfg.credentials_source; InvalidAccessKeyId; AccessDenied; a wrong region). NotFound for
// 404 (NoSuchKey, NoSuchBucket), IOError otherwise. Never a secret in it.
Status RequestError(const std::string& what, long status, const std::string& body,
                    const Config& cfg);

// The error for an S3 request about `what` answered with a redirect (3xx) to `location`: a
// signed request carries the signature and the session token (x-amz-security-token), which are
// bound to the endpoint, so S3 requests follow no redirect. Names the status, the host the
// endpoint pointed to (never the Location's query or userinfo) and the setting that fixes it.
Status RedirectError(const std::string& what, long status, const std::string& location,
                     const Config& cfg);

// The error of a listing (`what`) whose server named a continuation marker (a ListObjectsV2
// token, a ListMultipartUploads key/upload-id marker, a ListParts part number) it named before,
// or one that does not advance, after `pages` pages: every listing loop stops there.
Status RepeatedMarker(const std::string& what, const std::string& marker, size_t pages);

// A redirect status that a request may answer with (300-399 but 304).
inline bool IsRedirect(long status) { return status >= 300 && status < 400 && status != 304; }

struct ObjectInfo {
  std::string key;            // the object's key (List); Head leaves it as asked
  uint64_t size = 0;          // bytes
  std::string etag;           // with its quotes, as the server sent it
  std::string last_modified;  // as the server sent it
};

struct PartInfo {
  int number = 0;  // 1-based
  uint64_t size = 0;
  std::string etag;  // with its quotes
};

// One HTTP exchange's answer (of the last attempt).
struct Response {
  long status = 0;
  std::string body;                                          // capped: see Request::max_body
  std::vector<std::pair<std::string, std::string>> headers;  // names lower-cased
  std::string Header(const std::string& lower_name) const;   // "" when absent
};

struct Request {
  std::string method = "GET";                              // GET, HEAD, PUT, POST, DELETE
  std::vector<std::pair<std::string, std::string>> query;  // made canonical by Call
  std::vector<std::string> headers;                        // "Name: value"
  std::string_view body;                                   // PUT/POST payload
  uint64_t max_body = uint64_t{1} << 20;                   // response bytes kept (more: error)
};

class Client {
 public:
  // Resolves the configuration from the environment and the AWS files (ResolveConfig).
  // options: retries, backoff, timeouts, cancelled (sha256, size, lock, env, progress unused).
  static Status Make(const FetchOptions& options, std::unique_ptr<Client>* out);
  Client(Config config, const FetchOptions& options);

  const Config& config() const { return config_; }

  // One request with retries of transient failures. Any final status comes back in *r (2xx or
  // not): the caller decides; OK unless the transfer itself failed or the retries ran out.
  Status Call(const Location& loc, const Request& rq, Response* r) const;

  // Size, ETag and Last-Modified of an object; NotFound when there is none.
  Status Head(const std::string& url, ObjectInfo* info) const;
  // The whole object into *out (at most max_bytes, else Unsupported). info (optional): its size
  // and ETag. NotFound when there is none.
  Status Get(const std::string& url, std::string* out, ObjectInfo* info = nullptr,
             uint64_t max_bytes = uint64_t{64} << 20) const;
  // Bytes [offset, offset + length) of the object into *out, exactly (a short or misplaced 206
  // is retried, then an error). if_match (an ETag, with its quotes; "" = any): the object must
  // still be that version, or Corruption "changed on the server" (412, or a 206 with another
  // ETag): never bytes of two versions.
  Status GetRange(const std::string& url, uint64_t offset, uint64_t length,
                  const std::string& if_match, std::string* out) const;
  // Every object whose key starts with url's key (ListObjectsV2, following continuation tokens;
  // page_size keys per request, at most 1000), in S3's order (by key).
  Status List(const std::string& url, std::vector<ObjectInfo>* out, int page_size = 1000) const;
  // Uploads body as the object (one PUT, Content-MD5 sent: the server checks it) and checks
  // that the ETag it answers is the body's MD5. extra_headers: "Name: value" lines.
  Status Put(const std::string& url, std::string_view body,
             const std::vector<std::string>& extra_headers = {}) const;
  // Deletes the object (absent is fine).
  Status Delete(const std::string& url) const;

  // ---- multipart uploads (each part >= 5 MiB but the last)
  Status CreateMultipart(const std::string& url, std::string* upload_id) const;
  // Uploads one part (Content-MD5 sent) and checks the ETag answered is its MD5; *etag gets it.
  Status UploadPart(const std::string& url, const std::string& upload_id, int number,
                    std::string_view body, std::string* etag) const;
  // The parts uploaded so far, by number (every page).
  Status ListParts(const std::string& url, const std::string& upload_id,
                   std::vector<PartInfo>* out) const;
  // The uploads in progress for exactly this object, oldest first.
  Status ListUploads(const std::string& url, std::vector<std::string>* upload_ids) const;
  // Joins the parts; *etag (optional) gets the object's ETag.
  Status CompleteMultipart(const std::string& url, const std::string& upload_id,
                           const std::vector<PartInfo>& parts, std::string* etag) const;
  Status AbortMultipart(const std::string& url, const std::string& upload_id) const;

 private:
  Status Expect2xx(const std::string& url, const Response& r) const;

  Config config_;
  FetchOptions options_;
};

// Hex MD5 of data (ETag of a single-PUT object or a part), and base64 (Content-MD5).
std::string Md5Hex(std::string_view data);
std::string Md5Base64(std::string_view data);
// The ETag S3 gives an object made of parts with these MD5s: "\"md5(concat)-N\"".
std::string MultipartEtag(const std::vector<std::string>& part_md5_hex);

}  // namespace dspipe::fetch::s3
