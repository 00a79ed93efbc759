// SPDX-License-Identifier: Apache-2.0
// S3 over libcurl: s3:// URLs, canonical queries, SigV4 by CURLOPT_AWS_SIGV4, error bodies
// (pugixml), and Client's reads: Call (one request + fetch's retry policy), HEAD, GET, ranged
// GET, ListObjectsV2, PUT, DELETE. Multipart uploads are in s3_upload.cc.
#include "fetch/s3.h"

#include <algorithm>
#include <cstdio>
#include <pugixml.hpp>
#include <set>

#include "fetch/internal.h"

namespace dspipe::fetch::s3 {
namespace {

// A bucket name that can be the first label of a host name (virtual-host addressing).
bool DnsCompatible(const std::string& b) {
  if (b.size() < 3 || b.size() > 63) return false;
  for (char c : b) {
    if (!((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-')) return false;
  }
  return b.front() != '-' && b.back() != '-';
}

// What one libcurl transfer gathers: status, headers, the body up to a cap.
struct Exchange {
  Response* r = nullptr;
  uint64_t max_body = 0;
  bool overflow = false;
  const FetchOptions* opts = nullptr;
  bool cancelled = false;
};

size_t OnHeader(char* data, size_t size, size_t n, void* user) {
  auto* ex = static_cast<Exchange*>(user);
  const size_t bytes = size * n;
  std::string_view line(data, bytes);
  if (line.rfind("HTTP/", 0) == 0) {  // a new response (after 100-continue or a redirect)
    ex->r->headers.clear();
    ex->r->body.clear();
    return bytes;
  }
  const size_t colon = line.find(':');
  if (colon == std::string_view::npos) return bytes;
  ex->r->headers.emplace_back(Lower(Trim(line.substr(0, colon))), Trim(line.substr(colon + 1)));
  return bytes;
}

size_t OnBody(char* data, size_t size, size_t n, void* user) {
  auto* ex = static_cast<Exchange*>(user);
  const size_t bytes = size * n;
  if (ex->r->body.size() + bytes > ex->max_body) {
    ex->overflow = true;
    return 0;  // aborts the transfer
  }
  ex->r->body.append(data, bytes);
  return bytes;
}

int OnXferInfo(void* user, curl_off_t, curl_off_t, curl_off_t, curl_off_t) {
  auto* ex = static_cast<Exchange*>(user);
  if (Cancelled(*ex->opts)) {
    ex->cancelled = true;
    return 1;
  }
  return 0;
}

// The text of child `name` of node (trimmed).
std::string Text(const pugi::xml_node& node, const char* name) {
  return Trim(node.child(name).text().as_string());
}

Status ParseXml(const std::string& body, const std::string& what, pugi::xml_document* doc) {
  const pugi::xml_parse_result res = doc->load_buffer(body.data(), body.size());
  if (!res) {
    return Status::IOError(what + ": the server's answer is not XML (" +
                           std::string(res.description()) + " at byte " +
                           std::to_string(res.offset) + ")");
  }
  return Status::OK();
}

uint64_t ToU64(const std::string& s) { return std::strtoull(s.c_str(), nullptr, 10); }

}  // namespace

bool IsS3Url(const std::string& url) { return ClassifyUrl(url) == UrlScheme::kS3; }

Status ParseUrl(const std::string& url, Location* loc) {
  *loc = Location();
  if (!IsS3Url(url)) return Status::InvalidArgument("'" + url + "' is not an s3:// URL");
  // Everything after "s3://bucket/" is the key, literally: '?', '#', '%', '.' and '..'
  // segments included (all legal in S3 keys; HttpUrl encodes them, PATH_AS_IS sends them).
  const std::string rest = url.substr(5);
  const size_t slash = rest.find('/');
  loc->bucket = rest.substr(0, slash);
  loc->key = slash == std::string::npos ? "" : rest.substr(slash + 1);
  if (loc->bucket.empty()) return Status::InvalidArgument(url + ": no bucket (s3://BUCKET/KEY)");
  if (loc->bucket.find_first_of("?#@") != std::string::npos) {
    return Status::InvalidArgument(url + ": '" + loc->bucket +
                                   "' is not a bucket name (no '?', '#' or '@' in one)");
  }
  return Status::OK();
}

std::string UriEncode(std::string_view s, bool keep_slash) {
  static const char* kHex = "0123456789ABCDEF";
  std::string out;
  out.reserve(s.size());
  for (char ch : s) {
    const auto c = static_cast<unsigned char>(ch);
    if ((c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-' ||
        c == '_' || c == '.' || c == '~' || (keep_slash && c == '/')) {
      out += ch;
    } else {
      out += '%';
      out += kHex[c >> 4];
      out += kHex[c & 15];
    }
  }
  return out;
}

std::string CanonicalQuery(std::vector<std::pair<std::string, std::string>> params) {
  for (auto& [name, value] : params) {
    name = UriEncode(name, false);
    value = UriEncode(value, false);
  }
  std::sort(params.begin(), params.end());  // by encoded name, then value: SigV4's order
  std::string q;
  for (const auto& [name, value] : params) q += (q.empty() ? "" : "&") + name + "=" + value;
  return q;
}

std::string HttpUrl(const Config& cfg, const Location& loc, const std::string& canonical_query) {
  const bool aws = cfg.endpoint.empty();
  const std::string endpoint = aws ? "https://s3." + cfg.region + ".amazonaws.com" : cfg.endpoint;
  bool virtual_host = cfg.style == AddressingStyle::kVirtual;
  if (cfg.style == AddressingStyle::kAuto) virtual_host = aws && DnsCompatible(loc.bucket);
  std::string url;
  if (virtual_host) {
    const size_t host = endpoint.find("://") + 3;
    url = endpoint.substr(0, host) + loc.bucket + "." + endpoint.substr(host) + "/";
  } else {
    url = endpoint + "/" + UriEncode(loc.bucket, false) + (loc.key.empty() ? "" : "/");
  }
  url += UriEncode(loc.key, true);
  if (!canonical_query.empty()) url += "?" + canonical_query;
  return url;
}

void Sign(CURL* h, const Config& cfg, const std::string& payload_sha256, curl_slist** headers) {
  // The path as HttpUrl encoded it: libcurl would otherwise remove "." and ".." segments (and
  // sign and send another key than the one asked for).
  curl_easy_setopt(h, CURLOPT_PATH_AS_IS, 1L);
  const std::string sigv4 = "aws:amz:" + cfg.region + ":s3";
  curl_easy_setopt(h, CURLOPT_AWS_SIGV4, sigv4.c_str());  // libcurl copies option strings
  curl_easy_setopt(h, CURLOPT_USERNAME, cfg.access_key.c_str());
  curl_easy_setopt(h, CURLOPT_PASSWORD, cfg.secret_key.c_str());
  // libcurl 7.88 takes the payload hash of the canonical request from this header when given.
  *headers = curl_slist_append(*headers, ("x-amz-content-sha256: " + payload_sha256).c_str());
  if (!cfg.session_token.empty()) {
    *headers = curl_slist_append(*headers, ("x-amz-security-token: " + cfg.session_token).c_str());
  }
}

void ParseError(const std::string& body, std::string* code, std::string* message) {
  code->clear();
  message->clear();
  pugi::xml_document doc;
  if (!doc.load_buffer(body.data(), body.size())) return;
  const pugi::xml_node e = doc.child("Error");
  if (!e) return;
  *code = Text(e, "Code");
  *message = Text(e, "Message");
}

Status RequestError(const std::string& what, long status, const std::string& body,
                    const Config& cfg) {
  std::string code, message;
  ParseError(body, &code, &message);
  std::string m = what + ": HTTP " + std::to_string(status);
  if (!code.empty()) m += " " + code;
  if (!message.empty()) m += " (" + message + ")";
  const std::string who = "access key " + cfg.access_key + " from " + cfg.credentials_source;
  if (status == 404 || code == "NoSuchKey" || code == "NoSuchBucket") {
    if (code == "NoSuchBucket") m += ": no such bucket at " + cfg.Describe();
    return Status::NotFound(m);
  }
  if (code == "ExpiredToken" || code == "TokenRefreshRequired" || code == "RequestExpired") {
    m += ": the credentials have expired (" + who +
         (cfg.session_token.empty() ? "" : ", with a session token") +
         "): get fresh ones (AWS_SESSION_TOKEN / aws_session_token) and run again";
  } else if (code == "SignatureDoesNotMatch") {
    m += ": the secret key does not match " + who + " (or the request was altered on the way)";
  } else if (code == "InvalidAccessKeyId") {
    m += ": the server does not know " + who;
  } else if (code == "InvalidToken") {
    m += ": the session token of " + who + " is not valid";
  } else if (code == "AccessDenied" || status == 403) {
    m += ": " + who + " may not do this (or the credentials expired)";
  } else if (code == "AuthorizationHeaderMalformed" || code == "PermanentRedirect" ||
             status == 301) {
    m += ": the bucket is not in region " + cfg.region + " or not at this endpoint (" +
         cfg.Describe() + "): set AWS_REGION or AWS_ENDPOINT_URL_S3";
  }
  return Status::IOError(m);
}

Status RedirectError(const std::string& what, long status, const std::string& location,
                     const Config& cfg) {
  // scheme://host[:port] of the Location (relative: the endpoint's own host).
  std::string host = "another URL";
  if (CURLU* u = curl_url()) {
    if (curl_url_set(u, CURLUPART_URL, location.c_str(), 0) == CURLUE_OK) {
      char *scheme = nullptr, *name = nullptr, *port = nullptr;
      if (curl_url_get(u, CURLUPART_SCHEME, &scheme, 0) == CURLUE_OK &&
          curl_url_get(u, CURLUPART_HOST, &name, 0) == CURLUE_OK) {
        host = std::string(scheme) + "://" + name;
        if (curl_url_get(u, CURLUPART_PORT, &port, 0) == CURLUE_OK) host += ":" + std::string(port);
      }
      curl_free(scheme);
      curl_free(name);
      curl_free(port);
    }
    curl_url_cleanup(u);
  }
  if (location.empty()) host = "an unnamed location (no Location header)";
  return Status::IOError(what + ": HTTP " + std::to_string(status) + ": the endpoint (" +
                         cfg.Describe() + ") redirected to " + host +
                         "; a signed S3 request follows no redirect (its signature and session "
                         "token stay with the endpoint): set AWS_ENDPOINT_URL_S3 (or AWS_REGION) "
                         "to that host");
}

Status RepeatedMarker(const std::string& what, const std::string& marker, size_t pages) {
  return Status::IOError(what + ": the server named the continuation marker '" + marker +
                         "' again after " + std::to_string(pages) +
                         " pages (a listing that does not advance would never end): stopped; "
                         "the endpoint does not list correctly (check AWS_ENDPOINT_URL_S3, or "
                         "report it to the storage's operator)");
}

std::string Response::Header(const std::string& lower_name) const {
  for (const auto& [k, v] : headers) {
    if (k == lower_name) return v;
  }
  return "";
}

Status Client::Make(const FetchOptions& options, std::unique_ptr<Client>* out) {
  Config c;
  DSPIPE_RETURN_IF_ERROR(ResolveConfig(SystemEnv(), &c));
  *out = std::make_unique<Client>(std::move(c), options);
  return Status::OK();
}

Client::Client(Config config, const FetchOptions& options)
    : config_(std::move(config)), options_(options) {
  options_.progress = nullptr;  // the retry waits of small requests are not a transfer to show
}

Status Client::Call(const Location& loc, const Request& rq, Response* r) const {
  GlobalInit();
  const std::string url = HttpUrl(config_, loc, CanonicalQuery(rq.query));
  const std::string shown = rq.method + " s3://" + loc.bucket + "/" + loc.key;
  const std::string payload_sha = rq.body.empty() ? kEmptySha256 : core::Sha256Hex(rq.body);
  FetchResult fr;
  Retrier retrier(options_, &fr);
  std::string last_error;
  int attempts = 0;
  for (;;) {
    ++attempts;
    *r = Response();
    Exchange ex{r, rq.max_body, false, &options_, false};
    CurlHandle c;
    if (c.h == nullptr) return Status::Internal("curl_easy_init failed");
    char errbuf[CURL_ERROR_SIZE] = {0};
    curl_easy_setopt(c.h, CURLOPT_URL, url.c_str());
    curl_easy_setopt(c.h, CURLOPT_ERRORBUFFER, errbuf);
    SetTransferOptions(c.h, options_);
    // Signed: the credentials and the session token never follow a redirect (RedirectError).
    curl_easy_setopt(c.h, CURLOPT_FOLLOWLOCATION, 0L);
    curl_easy_setopt(c.h, CURLOPT_HEADERFUNCTION, OnHeader);
    curl_easy_setopt(c.h, CURLOPT_HEADERDATA, &ex);
    curl_easy_setopt(c.h, CURLOPT_WRITEFUNCTION, OnBody);
    curl_easy_setopt(c.h, CURLOPT_WRITEDATA, &ex);
    curl_easy_setopt(c.h, CURLOPT_XFERINFOFUNCTION, OnXferInfo);
    curl_easy_setopt(c.h, CURLOPT_XFERINFODATA, &ex);
    if (rq.method == "HEAD") {
      curl_easy_setopt(c.h, CURLOPT_NOBODY, 1L);
    } else if (rq.method != "GET") {
      curl_easy_setopt(c.h, CURLOPT_CUSTOMREQUEST, rq.method.c_str());
    }
    if (rq.method == "PUT" || rq.method == "POST") {
      // Never a null pointer (libcurl would then read the body from a callback).
      curl_easy_setopt(c.h, CURLOPT_POSTFIELDS, rq.body.empty() ? "" : rq.body.data());
      curl_easy_setopt(c.h, CURLOPT_POSTFIELDSIZE_LARGE, static_cast<curl_off_t>(rq.body.size()));
      // Not "Expect:" (to skip 100-continue): libcurl 7.88 would sign the header it then drops.
      c.headers = curl_slist_append(c.headers, "Content-Type: application/octet-stream");
    }
    for (const std::string& h : rq.headers) c.headers = curl_slist_append(c.headers, h.c_str());
    Sign(c.h, config_, payload_sha, &c.headers);
    curl_easy_setopt(c.h, CURLOPT_HTTPHEADER, c.headers);
    const CURLcode cc = curl_easy_perform(c.h);
    curl_easy_getinfo(c.h, CURLINFO_RESPONSE_CODE, &r->status);
    if (ex.cancelled) return Status::Cancelled(shown + ": cancelled");
    if (ex.overflow) {
      return Status::Unsupported(shown + ": the answer is larger than the " +
                                 std::to_string(rq.max_body) + " bytes expected");
    }
    double retry_after = -1;
    if (cc != CURLE_OK) {
      if (!TransientCurlError(cc)) {
        return Status::IOError(shown + ": " + curl_easy_strerror(cc) +
                               (errbuf[0] ? std::string(" (") + errbuf + ")" : ""));
      }
      last_error =
          std::string(curl_easy_strerror(cc)) + (errbuf[0] ? std::string(": ") + errbuf : "");
    } else if (IsRedirect(r->status) && !r->Header("location").empty()) {
      return RedirectError(shown, r->status, r->Header("location"), config_);
    } else if (TransientHttp(r->status)) {
      std::string code, message;
      ParseError(r->body, &code, &message);
      last_error = "HTTP " + std::to_string(r->status) + (code.empty() ? "" : " " + code);
      retry_after = ParseRetryAfter(r->Header("retry-after"));
    } else {
      return Status::OK();
    }
    if (!retrier.Wait(false, retry_after, 0, 0)) break;
  }
  if (retrier.cancelled()) return Status::Cancelled(shown + ": cancelled");
  return Status::IOError(shown + ": gave up after " + std::to_string(attempts) + " attempts (" +
                         std::to_string(options_.retries) + " retries); last error: " + last_error);
}

Status Client::Expect2xx(const std::string& url, const Response& r) const {
  if (r.status >= 200 && r.status < 300) return Status::OK();
  return RequestError(url, r.status, r.body, config_);
}

Status Client::Head(const std::string& url, ObjectInfo* info) const {
  Location loc;
  DSPIPE_RETURN_IF_ERROR(ParseUrl(url, &loc));
  Request rq;
  rq.method = "HEAD";
  Response r;
  DSPIPE_RETURN_IF_ERROR(Call(loc, rq, &r));
  if (r.status == 404) return Status::NotFound(url + ": no such object (HTTP 404)");
  DSPIPE_RETURN_IF_ERROR(Expect2xx(url, r));
  *info = ObjectInfo();
  info->key = loc.key;
  info->size = ToU64(r.Header("content-length"));
  info->etag = r.Header("etag");
  info->last_modified = r.Header("last-modified");
  return Status::OK();
}

Status Client::Get(const std::string& url, std::string* out, ObjectInfo* info,
                   uint64_t max_bytes) const {
  Location loc;
  DSPIPE_RETURN_IF_ERROR(ParseUrl(url, &loc));
  Request rq;
  rq.max_body = max_bytes;
  Response r;
  DSPIPE_RETURN_IF_ERROR(Call(loc, rq, &r));
  DSPIPE_RETURN_IF_ERROR(Expect2xx(url, r));
  const std::string length = r.Header("content-length");
  if (!length.empty() && ToU64(length) != r.body.size()) {
    return Status::IOError(url + ": the body ended after " + std::to_string(r.body.size()) +
                           " of " + length + " bytes");
  }
  *out = std::move(r.body);
  if (info != nullptr) {
    *info = ObjectInfo();
    info->key = loc.key;
    info->size = out->size();
    info->etag = r.Header("etag");
    info->last_modified = r.Header("last-modified");
  }
  return Status::OK();
}

Status Client::GetRange(const std::string& url, uint64_t offset, uint64_t length,
                        const std::string& if_match, std::string* out) const {
  out->clear();
  if (length == 0) return Status::OK();
  Location loc;
  DSPIPE_RETURN_IF_ERROR(ParseUrl(url, &loc));
  const uint64_t last = offset + length - 1;
  const std::string what = url + " bytes " + std::to_string(offset) + "-" + std::to_string(last);
  Request rq;
  rq.headers.push_back("Range: bytes=" + std::to_string(offset) + "-" + std::to_string(last));
  if (!if_match.empty()) rq.headers.push_back("If-Match: " + if_match);
  rq.max_body = std::max<uint64_t>(length, 64 << 10);  // room for an error body
  FetchResult fr;
  Retrier retrier(options_, &fr);
  for (;;) {
    Response r;
    DSPIPE_RETURN_IF_ERROR(Call(loc, rq, &r));
    const std::string etag = r.Header("etag");
    if (r.status == 412 || (!if_match.empty() && !etag.empty() && etag != if_match)) {
      return Status::Corruption(what + ": the object changed on the server (ETag " +
                                (etag.empty() ? std::string("?") : etag) + ", expected " +
                                if_match + "): its bytes are not those of the version asked for");
    }
    if (r.status == 416) {
      return Status::InvalidArgument(what + ": beyond the object's end (HTTP 416, " +
                                     r.Header("content-range") + ")");
    }
    DSPIPE_RETURN_IF_ERROR(Expect2xx(what, r));
    long long a = -1, b = -1;
    const std::string cr = r.Header("content-range");
    const bool placed = std::sscanf(cr.c_str(), "bytes %lld-%lld/", &a, &b) == 2 &&
                        a == static_cast<long long>(offset) && b == static_cast<long long>(last);
    if (r.status == 206 && placed && r.body.size() == length) {
      *out = std::move(r.body);
      return Status::OK();
    }
    if (r.status == 200 && offset == 0 && r.body.size() == length) {  // Range ignored, same bytes
      *out = std::move(r.body);
      return Status::OK();
    }
    // A cut body (libcurl saw the end early) or a wrong range: another attempt.
    const std::string why = "HTTP " + std::to_string(r.status) + " with Content-Range '" + cr +
                            "' and " + std::to_string(r.body.size()) + " bytes";
    if (!retrier.Wait(false, -1, 0, 0)) {
      return Status::IOError(what + ": gave up after a wrong answer (" + why + ")");
    }
  }
}

Status Client::List(const std::string& url, std::vector<ObjectInfo>* out, int page_size) const {
  out->clear();
  Location loc;
  DSPIPE_RETURN_IF_ERROR(ParseUrl(url, &loc));
  const Location bucket{loc.bucket, ""};
  std::string token;
  std::set<std::string> seen;  // every continuation token named so far
  for (;;) {
    Request rq;
    rq.query = {{"list-type", "2"},
                {"prefix", loc.key},
                {"max-keys", std::to_string(std::clamp(page_size, 1, 1000))}};
    if (!token.empty()) rq.query.emplace_back("continuation-token", token);
    rq.max_body = uint64_t{16} << 20;
    Response r;
    DSPIPE_RETURN_IF_ERROR(Call(bucket, rq, &r).WithContext("listing " + url));
    DSPIPE_RETURN_IF_ERROR(Expect2xx("listing " + url, r));
    pugi::xml_document doc;
    DSPIPE_RETURN_IF_ERROR(ParseXml(r.body, "listing " + url, &doc));
    const pugi::xml_node root = doc.child("ListBucketResult");
    if (!root) return Status::IOError("listing " + url + ": no ListBucketResult in the answer");
    for (pugi::xml_node c = root.child("Contents"); c; c = c.next_sibling("Contents")) {
      ObjectInfo o;
      o.key = Text(c, "Key");
      o.size = ToU64(Text(c, "Size"));
      o.etag = Text(c, "ETag");
      o.last_modified = Text(c, "LastModified");
      out->push_back(std::move(o));
    }
    const bool truncated = Text(root, "IsTruncated") == "true";
    token = Text(root, "NextContinuationToken");
    if (!truncated) return Status::OK();
    if (token.empty()) {
      return Status::IOError("listing " + url +
                             ": the answer is truncated but has no NextContinuationToken");
    }
    // A server that names a token it named before would be asked forever.
    if (!seen.insert(token).second) return RepeatedMarker("listing " + url, token, seen.size());
  }
}

Status Client::Put(const std::string& url, std::string_view body,
                   const std::vector<std::string>& extra_headers) const {
  Location loc;
  DSPIPE_RETURN_IF_ERROR(ParseUrl(url, &loc));
  Request rq;
  rq.method = "PUT";
  rq.body = body;
  rq.headers = extra_headers;
  rq.headers.push_back("Content-MD5: " + Md5Base64(body));
  Response r;
  DSPIPE_RETURN_IF_ERROR(Call(loc, rq, &r));
  DSPIPE_RETURN_IF_ERROR(Expect2xx(url, r));
  const std::string etag = r.Header("etag");
  const std::string want = "\"" + Md5Hex(body) + "\"";
  // An ETag that is an MD5 must be this one (objects encrypted with SSE-KMS have others; the
  // server checked Content-MD5 for those).
  if (etag.size() == 34 && etag != want) {
    return Status::Corruption(url + ": the server stored other bytes (ETag " + etag +
                              ", the MD5 of what was sent is " + want + ")");
  }
  return Status::OK();
}

Status Client::Delete(const std::string& url) const {
  Location loc;
  DSPIPE_RETURN_IF_ERROR(ParseUrl(url, &loc));
  Request rq;
  rq.method = "DELETE";
  Response r;
  DSPIPE_RETURN_IF_ERROR(Call(loc, rq, &r));
  if (r.status == 404) return Status::OK();
  return Expect2xx(url, r);
}

}  // namespace dspipe::fetch::s3
