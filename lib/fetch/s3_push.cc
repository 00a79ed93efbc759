// SPDX-License-Identifier: Apache-2.0
// PushDataset: a dataset directory to s3://bucket/prefix/, file by file (single PUT or a
// multipart upload resumed from the server's ListParts), every byte checked by MD5 (Content-MD5,
// the answered ETags) and each file's sha256 against the manifest, manifest.json last.
#include <algorithm>
#include <cstdio>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>

#include "dspipe/log.h"
#include "dspipe/push.h"
#include "fetch/internal.h"
#include "fetch/s3.h"
#include "format/manifest.h"

namespace dspipe {
namespace {

using nlohmann::json;

constexpr uint64_t kMinPart = uint64_t{5} << 20;  // S3's minimum part (but the last)
constexpr uint64_t kMaxParts = 10000;

// The part size for a file of `size` bytes: options' (at least 5 MiB), raised to a whole MiB
// that keeps the count within S3's 10000 parts.
uint64_t PartSize(uint64_t requested, uint64_t size) {
  uint64_t ps = std::max(requested, kMinPart);
  if ((size + ps - 1) / ps > kMaxParts) {
    ps = (size + kMaxParts - 1) / kMaxParts;
    ps = (ps + (uint64_t{1} << 20) - 1) & ~((uint64_t{1} << 20) - 1);
  }
  return ps;
}

// Reads [off, off + n) of f into *buf, exactly.
Status ReadExact(const RandomAccessFile& f, uint64_t off, uint64_t n, std::string* buf) {
  buf->resize(static_cast<size_t>(n));
  for (uint64_t got_all = 0; got_all < n;) {
    size_t got = 0;
    DSPIPE_RETURN_IF_ERROR(
        f.Read(off + got_all, static_cast<size_t>(n - got_all), buf->data() + got_all, &got));
    if (got == 0) {
      return Status::Corruption(f.path() + ": ended at " + std::to_string(off + got_all) +
                                " bytes, the manifest lists " + std::to_string(off + n) +
                                " or more (the file changed)");
    }
    got_all += got;
  }
  return Status::OK();
}

class Pusher {
 public:
  Pusher(const std::string& dir, const std::string& prefix, const PushOptions& o, Env* env,
         const fetch::s3::Client& client, PushResult* res)
      : dir_(dir), prefix_(prefix), o_(o), env_(env), client_(client), res_(res) {}

  // The ETag the file has at PREFIX when it holds exactly the local bytes (also checks the
  // file's sha256 against the manifest on the way).
  Status LocalEtag(const format::ManifestFile& f, std::string* etag) {
    std::unique_ptr<RandomAccessFile> in;
    DSPIPE_RETURN_IF_ERROR(env_->NewRandomAccessFile(dir_ + "/" + f.path, &in));
    const uint64_t ps = PartSize(o_.part_size, f.size);
    core::Sha256 sha;
    std::vector<std::string> md5s;
    std::string buf;
    uint64_t off = 0;
    do {  // an empty file is one empty part
      DSPIPE_RETURN_IF_ERROR(ReadExact(*in, off, std::min(ps, f.size - off), &buf));
      sha.Update(buf.data(), buf.size());
      md5s.push_back(fetch::s3::Md5Hex(buf));
      off += ps;
    } while (off < f.size);
    DSPIPE_RETURN_IF_ERROR(CheckSha(f, sha.HexDigest()));
    *etag = f.size <= ps ? "\"" + md5s[0] + "\"" : fetch::s3::MultipartEtag(md5s);
    return Status::OK();
  }

  Status CheckSha(const format::ManifestFile& f, const std::string& got) {
    if (got == f.sha256) return Status::OK();
    return Status::Corruption(dir_ + "/" + f.path + ": sha256 " + got + ", the manifest says " +
                              f.sha256 +
                              " (the local dataset is damaged or changed: run "
                              "`dsconvert verify`); nothing of it was made visible at " +
                              prefix_);
  }

  // What at PREFIX is not this dataset's, as the end of a sentence starting with PREFIX (""
  // when nothing is): a manifest that is not dspipe's or is another dataset's (`remote`, null
  // when there is none), an object at one of the dataset's names that does not hold its bytes,
  // an object at any other name. Objects a killed push of this dataset completed hold its
  // bytes: they are ours.
  Status Foreign(const std::vector<format::ManifestFile>& files, const std::string* remote,
                 std::string* foreign) {
    foreign->clear();
    if (remote != nullptr) {
      const json m = json::parse(*remote, nullptr, /*allow_exceptions=*/false);
      const bool dspipe = m.is_object() && m.contains("format") && m.at("format") == "dspipe";
      *foreign = dspipe ? "holds another dspipe dataset (its manifest.json differs from this one)"
                        : "holds a manifest.json that is not a dspipe manifest";
      return Status::OK();
    }
    std::vector<fetch::s3::ObjectInfo> objects;
    const Status listed = client_.List(prefix_, &objects);
    // No bucket: nothing is there to be foreign (a server that makes buckets on the first PUT
    // makes it; one that does not answers the first upload with NoSuchBucket).
    if (listed.code() == Status::Code::kNotFound) return Status::OK();
    DSPIPE_RETURN_IF_ERROR(listed);
    std::map<std::string, const format::ManifestFile*> ours;
    for (const format::ManifestFile& f : files) ours[f.path] = &f;
    size_t others = 0;
    std::string first;
    for (const fetch::s3::ObjectInfo& o : objects) {
      const std::string name = RelativeKey(o.key);
      const auto it = ours.find(name);
      bool mine = false;
      if (it != ours.end() && o.size == it->second->size) {
        std::string want;
        DSPIPE_RETURN_IF_ERROR(LocalEtag(*it->second, &want));
        mine = o.etag == want;
      }
      if (mine) continue;
      if (others++ == 0) first = name;
    }
    if (others > 0) {
      *foreign = "holds " + std::to_string(others) + " object" + (others > 1 ? "s" : "") +
                 " that " + (others > 1 ? "are" : "is") + " not this dataset's (first: " + prefix_ +
                 first + ")";
    }
    return Status::OK();
  }

  // An object's key relative to PREFIX's key.
  std::string RelativeKey(const std::string& key) const {
    const size_t slash = prefix_.find('/', 5);  // after "s3://bucket"
    const std::string prefix_key = slash == std::string::npos ? "" : prefix_.substr(slash + 1);
    return key.rfind(prefix_key, 0) == 0 ? key.substr(prefix_key.size()) : key;
  }

  // Uploads f unless PREFIX already holds exactly its bytes.
  Status File(const format::ManifestFile& f) {
    const std::string url = prefix_ + f.path;
    fetch::s3::ObjectInfo info;
    Status h = client_.Head(url, &info);
    if (!h.ok() && h.code() != Status::Code::kNotFound) return h;
    if (h.ok() && info.size == f.size) {
      std::string want;
      DSPIPE_RETURN_IF_ERROR(LocalEtag(f, &want));
      if (info.etag == want) {
        ++res_->files_in_place;
        Progress(f.size);
        return Status::OK();
      }
    }
    ++res_->files_uploaded;
    return f.size <= PartSize(o_.part_size, f.size) ? Single(f, url) : Multipart(f, url);
  }

  Status Single(const format::ManifestFile& f, const std::string& url) {
    std::unique_ptr<RandomAccessFile> in;
    DSPIPE_RETURN_IF_ERROR(env_->NewRandomAccessFile(dir_ + "/" + f.path, &in));
    std::string buf;
    DSPIPE_RETURN_IF_ERROR(ReadExact(*in, 0, f.size, &buf));
    core::Sha256 sha;
    sha.Update(buf.data(), buf.size());
    DSPIPE_RETURN_IF_ERROR(CheckSha(f, sha.HexDigest()));
    DSPIPE_RETURN_IF_ERROR(client_.Put(url, buf));
    ++res_->parts_uploaded;
    res_->bytes_uploaded += f.size;
    Progress(f.size);
    return Verify(f, url, "\"" + fetch::s3::Md5Hex(buf) + "\"");
  }

  Status Multipart(const format::ManifestFile& f, const std::string& url) {
    const uint64_t ps = PartSize(o_.part_size, f.size);
    const int count = static_cast<int>((f.size + ps - 1) / ps);
    // An unfinished upload of this object (a killed push): the newest one is continued.
    std::vector<std::string> uploads;
    DSPIPE_RETURN_IF_ERROR(client_.ListUploads(url, &uploads));
    std::string id;
    std::map<int, fetch::s3::PartInfo> have;
    if (!uploads.empty()) {
      id = uploads.back();
      std::vector<fetch::s3::PartInfo> parts;
      DSPIPE_RETURN_IF_ERROR(client_.ListParts(url, id, &parts));
      for (fetch::s3::PartInfo& p : parts) have[p.number] = std::move(p);
    } else {
      DSPIPE_RETURN_IF_ERROR(client_.CreateMultipart(url, &id));
    }
    std::unique_ptr<RandomAccessFile> in;
    DSPIPE_RETURN_IF_ERROR(env_->NewRandomAccessFile(dir_ + "/" + f.path, &in));
    core::Sha256 sha;
    std::vector<std::string> md5s;
    std::vector<fetch::s3::PartInfo> done;
    std::string buf;
    for (int n = 1; n <= count; ++n) {
      const uint64_t off = static_cast<uint64_t>(n - 1) * ps;
      const uint64_t len = std::min(ps, f.size - off);
      DSPIPE_RETURN_IF_ERROR(ReadExact(*in, off, len, &buf));
      sha.Update(buf.data(), buf.size());
      const std::string md5 = fetch::s3::Md5Hex(buf);
      md5s.push_back(md5);
      fetch::s3::PartInfo part{n, len, "\"" + md5 + "\""};
      auto it = have.find(n);
      if (it != have.end() && it->second.size == len && it->second.etag == part.etag) {
        ++res_->parts_resumed;  // uploaded by an earlier push, and it is these bytes
      } else {
        DSPIPE_RETURN_IF_ERROR(client_.UploadPart(url, id, n, buf, &part.etag));
        ++res_->parts_uploaded;
        res_->bytes_uploaded += len;
      }
      done.push_back(part);
      Progress(len);
    }
    Status sha_ok = CheckSha(f, sha.HexDigest());
    if (!sha_ok.ok()) {
      (void)client_.AbortMultipart(url, id);  // best effort: the error is what matters
      return sha_ok;
    }
    DSPIPE_RETURN_IF_ERROR(client_.CompleteMultipart(url, id, done, nullptr));
    // Older unfinished uploads of this object are leftovers of killed pushes.
    for (size_t i = 0; i + 1 < uploads.size(); ++i) {
      (void)client_.AbortMultipart(url, uploads[i]);  // best effort: storage, not correctness
    }
    return Verify(f, url, fetch::s3::MultipartEtag(md5s));
  }

  // The object as the server holds it now: the size and the ETag of the bytes sent.
  Status Verify(const format::ManifestFile& f, const std::string& url,
                const std::string& want_etag) {
    fetch::s3::ObjectInfo info;
    DSPIPE_RETURN_IF_ERROR(client_.Head(url, &info).WithContext("checking the upload"));
    if (info.size != f.size) {
      return Status::Corruption(url + ": the server holds " + std::to_string(info.size) +
                                " bytes after the upload, " + std::to_string(f.size) +
                                " were sent");
    }
    // An ETag that is not an MD5 (SSE-KMS) cannot be compared; the MD5s were checked per part.
    const bool md5_like = info.etag.size() >= 34 && info.etag.front() == '"';
    if (md5_like && info.etag != want_etag) {
      return Status::Corruption(url + ": the server's ETag " + info.etag +
                                " is not that of the bytes sent (" + want_etag + ")");
    }
    return Status::OK();
  }

  void Progress(uint64_t n) {
    done_ += n;
    if (o_.progress) o_.progress(done_, res_->bytes);
  }

 private:
  const std::string dir_, prefix_;
  const PushOptions& o_;
  Env* env_;
  const fetch::s3::Client& client_;
  PushResult* res_;
  uint64_t done_ = 0;
};

}  // namespace

Status PushDataset(const std::string& dir, const std::string& url, const PushOptions& options,
                   PushResult* result) {
  PushResult local;
  PushResult* res = result ? result : &local;
  *res = PushResult();
  Env* env = options.env ? options.env : Env::Default();
  const std::string ctx = "push " + dir + " -> " + url;
  if (!fetch::s3::IsS3Url(url)) {
    return Status::InvalidArgument(ctx + ": the destination must be an s3://bucket/prefix/ URL");
  }
  std::string prefix = url;
  if (prefix.back() != '/') prefix += '/';
  fetch::s3::Location loc;
  DSPIPE_RETURN_IF_ERROR(fetch::s3::ParseUrl(prefix, &loc).WithContext(ctx));
  const std::string manifest_path = dir + "/" + format::kTopManifestFile;
  std::string text;
  DSPIPE_RETURN_IF_ERROR(env->ReadFile(manifest_path, &text).WithContext(ctx));
  std::vector<format::ManifestFile> files;
  bool present = false;
  DSPIPE_RETURN_IF_ERROR(
      format::ParseManifestFiles(text, manifest_path, &files, &present).WithContext(ctx));
  if (!present) {
    return Status::Unsupported(ctx + ": " + manifest_path +
                               " has no \"files\" list (each file's size and sha256), so its "
                               "files cannot be pushed and checked; rebuild the dataset with this "
                               "dspipe's `dsconvert build`");
  }
  res->files = files.size();
  for (const format::ManifestFile& f : files) res->bytes += f.size;

  std::unique_ptr<fetch::s3::Client> client;
  DSPIPE_RETURN_IF_ERROR(fetch::s3::Client::Make(options.fetch, &client).WithContext(ctx));
  const std::string manifest_url = prefix + format::kTopManifestFile;
  std::string remote;
  Status g = client->Get(manifest_url, &remote);
  if (!g.ok() && g.code() != Status::Code::kNotFound) return g.WithContext(ctx);
  const bool same = g.ok() && remote == text;
  Pusher pusher(dir, prefix, options, env, *client, res);
  if (!same) {
    // What is at PREFIX must be ours to replace: nothing, or what a killed push of this dataset
    // left (objects holding exactly its files' bytes); anything else only with overwrite.
    std::string foreign;
    DSPIPE_RETURN_IF_ERROR(
        pusher.Foreign(files, g.ok() ? &remote : nullptr, &foreign).WithContext(ctx));
    if (!foreign.empty() && !options.overwrite) {
      return Status::AlreadyExists(
          ctx + ": " + prefix + " " + foreign + "; nothing was changed: pass " +
          Opt("PushOptions::overwrite", "true") +
          " to replace the dataset's names there (other objects are left as they are), or "
          "push to another prefix");
    }
  }
  if (g.ok() && !same) {
    // Another dataset's manifest is there (overwrite): it disappears before any of its files is
    // replaced, so no reader pairs it with our files.
    Log(LogLevel::kInfo,
        "dsconvert push: " + manifest_url + " holds another manifest: deleting it first");
    DSPIPE_RETURN_IF_ERROR(client->Delete(manifest_url).WithContext(ctx));
  }
  for (const format::ManifestFile& f : files) {
    DSPIPE_RETURN_IF_ERROR(pusher.File(f).WithContext(ctx + ": file " + f.path));
  }
  if (same && res->files_uploaded == 0) {
    res->already_present = true;
    return Status::OK();
  }
  // Last: from now on a reader sees the whole dataset.
  return client->Put(manifest_url, text).WithContext(ctx);
}

}  // namespace dspipe
