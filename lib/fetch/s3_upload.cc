// SPDX-License-Identifier: Apache-2.0
// s3::Client's multipart uploads (create, upload a part, list parts, list uploads, complete,
// abort) and the MD5 helpers their checks use (OpenSSL libcrypto).
#include <openssl/evp.h>

#include <algorithm>
#include <cstdio>
#include <pugixml.hpp>
#include <set>

#include "fetch/internal.h"
#include "fetch/s3.h"

namespace dspipe::fetch::s3 {
namespace {

std::string Text(const pugi::xml_node& node, const char* name) {
  return Trim(node.child(name).text().as_string());
}

std::string Md5Raw(std::string_view data) {
  unsigned char md[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  EVP_Digest(data.data(), data.size(), md, &len, EVP_md5(), nullptr);
  return std::string(reinterpret_cast<const char*>(md), len);
}

std::string Hex(const std::string& raw) {
  std::string hex(2 * raw.size(), '0');
  for (size_t i = 0; i < raw.size(); ++i) {
    std::snprintf(&hex[2 * i], 3, "%02x", static_cast<unsigned char>(raw[i]));
  }
  return hex;
}

// The root element `root` of an XML answer; IOError naming what when it is not there. S3 may
// answer CompleteMultipartUpload with 200 and an <Error> body: that is an error too.
Status Root(const std::string& body, const std::string& what, const char* root,
            pugi::xml_document* doc, pugi::xml_node* out) {
  if (!doc->load_buffer(body.data(), body.size())) {
    return Status::IOError(what + ": the server's answer is not XML");
  }
  if (pugi::xml_node e = doc->child("Error")) {
    return Status::IOError(what + ": " + Text(e, "Code") + " (" + Text(e, "Message") + ")");
  }
  *out = doc->child(root);
  if (!*out) return Status::IOError(what + ": no " + std::string(root) + " in the answer");
  return Status::OK();
}

}  // namespace

std::string Md5Hex(std::string_view data) { return Hex(Md5Raw(data)); }

std::string Md5Base64(std::string_view data) {
  const std::string raw = Md5Raw(data);
  unsigned char out[64];
  const int n = EVP_EncodeBlock(out, reinterpret_cast<const unsigned char*>(raw.data()),
                                static_cast<int>(raw.size()));
  return std::string(reinterpret_cast<const char*>(out), static_cast<size_t>(n));
}

std::string MultipartEtag(const std::vector<std::string>& part_md5_hex) {
  std::string raw;
  for (const std::string& h : part_md5_hex) {
    for (size_t i = 0; i + 1 < h.size(); i += 2) {
      raw += static_cast<char>(std::stoi(h.substr(i, 2), nullptr, 16));
    }
  }
  return "\"" + Md5Hex(raw) + "-" + std::to_string(part_md5_hex.size()) + "\"";
}

Status Client::CreateMultipart(const std::string& url, std::string* upload_id) const {
  Location loc;
  DSPIPE_RETURN_IF_ERROR(ParseUrl(url, &loc));
  Request rq;
  rq.method = "POST";
  rq.query = {{"uploads", ""}};
  Response r;
  const std::string what = "starting a multipart upload of " + url;
  DSPIPE_RETURN_IF_ERROR(Call(loc, rq, &r));
  DSPIPE_RETURN_IF_ERROR(Expect2xx(what, r));
  pugi::xml_document doc;
  pugi::xml_node root;
  DSPIPE_RETURN_IF_ERROR(Root(r.body, what, "InitiateMultipartUploadResult", &doc, &root));
  *upload_id = Text(root, "UploadId");
  if (upload_id->empty()) return Status::IOError(what + ": no UploadId in the answer");
  return Status::OK();
}

Status Client::UploadPart(const std::string& url, const std::string& upload_id, int number,
                          std::string_view body, std::string* etag) const {
  Location loc;
  DSPIPE_RETURN_IF_ERROR(ParseUrl(url, &loc));
  const std::string what = url + " part " + std::to_string(number);
  Request rq;
  rq.method = "PUT";
  rq.query = {{"partNumber", std::to_string(number)}, {"uploadId", upload_id}};
  rq.body = body;
  const std::string md5 = Md5Hex(body);
  rq.headers.push_back("Content-MD5: " + Md5Base64(body));
  Response r;
  DSPIPE_RETURN_IF_ERROR(Call(loc, rq, &r));
  DSPIPE_RETURN_IF_ERROR(Expect2xx(what, r));
  *etag = r.Header("etag");
  if (etag->size() == 34 && *etag != "\"" + md5 + "\"") {
    return Status::Corruption(what + ": the server stored other bytes (ETag " + *etag +
                              ", the MD5 of what was sent is " + md5 + ")");
  }
  return Status::OK();
}

Status Client::ListParts(const std::string& url, const std::string& upload_id,
                         std::vector<PartInfo>* out) const {
  out->clear();
  Location loc;
  DSPIPE_RETURN_IF_ERROR(ParseUrl(url, &loc));
  const std::string what = "listing the uploaded parts of " + url;
  std::string marker;
  size_t pages = 0;
  for (;;) {
    Request rq;
    rq.query = {{"uploadId", upload_id}};
    if (!marker.empty()) rq.query.emplace_back("part-number-marker", marker);
    rq.max_body = uint64_t{16} << 20;
    Response r;
    DSPIPE_RETURN_IF_ERROR(Call(loc, rq, &r));
    DSPIPE_RETURN_IF_ERROR(Expect2xx(what, r));
    pugi::xml_document doc;
    pugi::xml_node root;
    DSPIPE_RETURN_IF_ERROR(Root(r.body, what, "ListPartsResult", &doc, &root));
    for (pugi::xml_node p = root.child("Part"); p; p = p.next_sibling("Part")) {
      PartInfo part;
      part.number = std::atoi(Text(p, "PartNumber").c_str());
      part.size = std::strtoull(Text(p, "Size").c_str(), nullptr, 10);
      part.etag = Text(p, "ETag");
      out->push_back(std::move(part));
    }
    if (Text(root, "IsTruncated") != "true") break;
    const std::string next = Text(root, "NextPartNumberMarker");
    if (next.empty()) return Status::IOError(what + ": truncated answer without a marker");
    ++pages;
    // Part numbers only go up: a marker at or below the last one would list forever.
    if (std::strtoll(next.c_str(), nullptr, 10) <=
        (marker.empty() ? 0 : std::strtoll(marker.c_str(), nullptr, 10))) {
      return RepeatedMarker(what, next, pages);
    }
    marker = next;
  }
  std::sort(out->begin(), out->end(),
            [](const PartInfo& a, const PartInfo& b) { return a.number < b.number; });
  return Status::OK();
}

Status Client::ListUploads(const std::string& url, std::vector<std::string>* upload_ids) const {
  upload_ids->clear();
  Location loc;
  DSPIPE_RETURN_IF_ERROR(ParseUrl(url, &loc));
  const Location bucket{loc.bucket, ""};
  const std::string what = "listing the multipart uploads of " + url;
  std::vector<std::pair<std::string, std::string>> found;  // (initiated, id)
  std::string key_marker, id_marker;
  std::set<std::pair<std::string, std::string>> seen;  // every (key, upload id) marker named
  for (;;) {
    Request rq;
    rq.query = {{"uploads", ""}, {"prefix", loc.key}};
    if (!key_marker.empty()) rq.query.emplace_back("key-marker", key_marker);
    if (!id_marker.empty()) rq.query.emplace_back("upload-id-marker", id_marker);
    rq.max_body = uint64_t{16} << 20;
    Response r;
    DSPIPE_RETURN_IF_ERROR(Call(bucket, rq, &r));
    DSPIPE_RETURN_IF_ERROR(Expect2xx(what, r));
    pugi::xml_document doc;
    pugi::xml_node root;
    DSPIPE_RETURN_IF_ERROR(Root(r.body, what, "ListMultipartUploadsResult", &doc, &root));
    for (pugi::xml_node u = root.child("Upload"); u; u = u.next_sibling("Upload")) {
      if (Text(u, "Key") == loc.key) found.emplace_back(Text(u, "Initiated"), Text(u, "UploadId"));
    }
    if (Text(root, "IsTruncated") != "true") break;
    key_marker = Text(root, "NextKeyMarker");
    id_marker = Text(root, "NextUploadIdMarker");
    if (key_marker.empty()) return Status::IOError(what + ": truncated answer without a marker");
    // A marker pair named before would be asked for forever.
    if (!seen.emplace(key_marker, id_marker).second) {
      return RepeatedMarker(what, key_marker + "' / '" + id_marker, seen.size());
    }
  }
  std::stable_sort(found.begin(), found.end());  // ISO 8601 times sort as text
  for (auto& [when, id] : found) upload_ids->push_back(std::move(id));
  return Status::OK();
}

Status Client::CompleteMultipart(const std::string& url, const std::string& upload_id,
                                 const std::vector<PartInfo>& parts, std::string* etag) const {
  Location loc;
  DSPIPE_RETURN_IF_ERROR(ParseUrl(url, &loc));
  const std::string what = "completing the multipart upload of " + url;
  std::string body = "<CompleteMultipartUpload>";
  for (const PartInfo& p : parts) {
    body += "<Part><PartNumber>" + std::to_string(p.number) + "</PartNumber><ETag>" + p.etag +
            "</ETag></Part>";
  }
  body += "</CompleteMultipartUpload>";
  Request rq;
  rq.method = "POST";
  rq.query = {{"uploadId", upload_id}};
  rq.body = body;
  Response r;
  DSPIPE_RETURN_IF_ERROR(Call(loc, rq, &r));
  DSPIPE_RETURN_IF_ERROR(Expect2xx(what, r));
  pugi::xml_document doc;
  pugi::xml_node root;
  DSPIPE_RETURN_IF_ERROR(Root(r.body, what, "CompleteMultipartUploadResult", &doc, &root));
  if (etag != nullptr) *etag = Text(root, "ETag");
  return Status::OK();
}

Status Client::AbortMultipart(const std::string& url, const std::string& upload_id) const {
  Location loc;
  DSPIPE_RETURN_IF_ERROR(ParseUrl(url, &loc));
  Request rq;
  rq.method = "DELETE";
  rq.query = {{"uploadId", upload_id}};
  Response r;
  DSPIPE_RETURN_IF_ERROR(Call(loc, rq, &r));
  if (r.status == 404) return Status::OK();  // already gone
  return Expect2xx("aborting the multipart upload of " + url, r);
}

}  // namespace dspipe::fetch::s3
