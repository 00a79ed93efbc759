// SPDX-License-Identifier: Apache-2.0
// URLs whose query is a secret (pre-signed S3/GCS URLs, ?token=...): the one redaction used by
// every message, the identity a resume and the cache match on, the file name a URL names, and
// a dataset's sibling URLs. Parsing is libcurl's URL API (CURLU); percent-decoding is libcurl's.
#include <curl/curl.h>

#include <filesystem>
#include <memory>
#include <string>

#include "dspipe/fetch.h"

namespace dspipe {
namespace {

// "scheme://..." with an RFC 3986 scheme: letter, then letters, digits, '+', '-', '.'.
// Returns the index of "://", or npos.
size_t SchemeEnd(std::string_view s) {
  const size_t p = s.find("://");
  if (p == std::string::npos || p == 0) return std::string::npos;
  auto alpha = [](char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z'); };
  if (!alpha(s[0])) return std::string::npos;
  for (size_t i = 1; i < p; ++i) {
    const char c = s[i];
    if (!alpha(c) && !(c >= '0' && c <= '9') && c != '+' && c != '-' && c != '.') {
      return std::string::npos;
    }
  }
  return p;
}

bool IsHttp(const std::string& url) { return IsHttpUrl(url); }

struct UrlDeleter {
  void operator()(CURLU* u) const { curl_url_cleanup(u); }
};
using UrlPtr = std::unique_ptr<CURLU, UrlDeleter>;

// libcurl's parse of url; nullptr when it does not parse. s3:// is not a scheme libcurl knows:
// it is parsed by the generic syntax.
UrlPtr Parse(const std::string& url) {
  UrlPtr u(curl_url());
  const bool s3 = ClassifyUrl(url) == UrlScheme::kS3;
  const unsigned flags = s3 ? CURLU_NON_SUPPORT_SCHEME : 0;
  if (!u || curl_url_set(u.get(), CURLUPART_URL, url.c_str(), flags) != CURLUE_OK) return nullptr;
  return u;
}

// One part of a parsed URL ("" when absent).
std::string Part(CURLU* u, CURLUPart part, unsigned flags = 0) {
  char* v = nullptr;
  if (curl_url_get(u, part, &v, flags) != CURLUE_OK || v == nullptr) return "";
  std::string s(v);
  curl_free(v);
  return s;
}

// url up to (not including) its query or fragment.
std::string BeforeQuery(const std::string& url) { return url.substr(0, url.find_first_of("?#")); }

}  // namespace

UrlScheme ClassifyUrl(std::string_view url) {
  const size_t p = SchemeEnd(url);
  if (p == std::string::npos) return UrlScheme::kPath;
  std::string scheme(url.substr(0, p));
  for (char& c : scheme) c = static_cast<char>(c >= 'A' && c <= 'Z' ? c - 'A' + 'a' : c);
  if (scheme == "http") return UrlScheme::kHttp;
  if (scheme == "https") return UrlScheme::kHttps;
  if (scheme == "file") return UrlScheme::kFile;
  if (scheme == "s3") return UrlScheme::kS3;
  return UrlScheme::kOther;
}

bool IsHttpUrl(std::string_view url) {
  const UrlScheme s = ClassifyUrl(url);
  return s == UrlScheme::kHttp || s == UrlScheme::kHttps;
}

bool IsRemoteUrl(std::string_view url) {
  const UrlScheme s = ClassifyUrl(url);
  return s == UrlScheme::kHttp || s == UrlScheme::kHttps || s == UrlScheme::kS3;
}

bool UrlHasQuery(const std::string& url) {
  // s3://: '?' and '#' are characters of the key.
  if (SchemeEnd(url) == std::string::npos || ClassifyUrl(url) == UrlScheme::kS3) return false;
  const size_t q = url.find_first_of("?#");
  return q != std::string::npos && url[q] == '?';
}

std::string RedactUrl(const std::string& url) {
  const size_t scheme = SchemeEnd(url);
  if (scheme == std::string::npos) return url;  // a path: nothing secret in its syntax
  std::string out = url;
  // The query (with the fragment after it) or, without one, the fragment. An s3:// URL has
  // neither: its '?' and '#' are characters of the key, shown as they are.
  const size_t q = ClassifyUrl(url) == UrlScheme::kS3 ? std::string::npos : out.find_first_of("?#");
  if (q != std::string::npos) out = out.substr(0, q) + (out[q] == '?' ? "?..." : "#...");
  // user:password@ in the authority.
  const size_t auth = scheme + 3;
  const size_t auth_end = std::min(out.find_first_of("/?#", auth), out.size());
  const size_t at = out.rfind('@', auth_end == 0 ? 0 : auth_end - 1);
  if (at != std::string::npos && at >= auth && at < auth_end) out.replace(auth, at - auth, "...");
  return out;
}

std::string UrlIdentity(const std::string& url) {
  if (!IsHttp(url)) return url;
  UrlPtr u = Parse(url);
  if (!u) return RedactUrl(BeforeQuery(url));
  curl_url_set(u.get(), CURLUPART_USER, nullptr, 0);
  curl_url_set(u.get(), CURLUPART_PASSWORD, nullptr, 0);
  curl_url_set(u.get(), CURLUPART_QUERY, nullptr, 0);
  curl_url_set(u.get(), CURLUPART_FRAGMENT, nullptr, 0);
  const std::string id = Part(u.get(), CURLUPART_URL);
  return id.empty() ? RedactUrl(BeforeQuery(url)) : id;
}

std::string UrlAppendPath(const std::string& url, const std::string& rel) {
  auto join = [&rel](const std::string& base) {
    return !base.empty() && base.back() == '/' ? base + rel : base + "/" + rel;
  };
  if (!IsHttp(url)) return join(url);
  // The path ends at the query or the fragment; the query is kept, the fragment dropped.
  const size_t q = url.find_first_of("?#");
  if (q == std::string::npos) return join(url);
  std::string query;
  if (url[q] == '?') query = url.substr(q, url.find('#', q) - q);
  return join(url.substr(0, q)) + query;
}

Status UrlFileName(const std::string& url, std::string* name) {
  name->clear();
  // An s3:// key is literal (no query, no percent-decoding): named like a path.
  const bool is_url = SchemeEnd(url) != std::string::npos && ClassifyUrl(url) != UrlScheme::kS3;
  std::string path = url;
  if (is_url) {
    UrlPtr u = Parse(url);
    if (!u) {
      return Status::InvalidArgument("cannot name a file after " + RedactUrl(url) +
                                     ": not a URL libcurl can parse; give DEST");
    }
    path = Part(u.get(), CURLUPART_PATH);
  }
  while (!path.empty() && path.back() == '/') path.pop_back();
  const size_t slash = path.rfind('/');
  const std::string segment = slash == std::string::npos ? path : path.substr(slash + 1);
  std::string decoded = segment;
  if (is_url) {
    int len = 0;
    // libcurl >= 7.82 ignores the handle argument.
    char* d = curl_easy_unescape(nullptr, segment.data(), static_cast<int>(segment.size()), &len);
    if (d == nullptr) return Status::Internal("curl_easy_unescape failed");
    decoded.assign(d, static_cast<size_t>(len));
    curl_free(d);
  }
  auto refuse = [&](const std::string& why) {
    return Status::InvalidArgument("cannot name a file after " + RedactUrl(url) + ": " + why +
                                   "; give DEST");
  };
  if (decoded.empty()) return refuse("its path has no file name");
  if (decoded == "." || decoded == "..")
    return refuse("its last path segment is '" + segment + "'");
  for (char c : decoded) {
    const auto b = static_cast<unsigned char>(c);
    if (c == '/' || b < 0x20 || b == 0x7f) {
      return refuse("its last path segment '" + segment +
                    "' decodes to a name with a '/' or a control character");
    }
  }
  *name = decoded;
  return Status::OK();
}

}  // namespace dspipe
