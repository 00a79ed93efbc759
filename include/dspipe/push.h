// SPDX-License-Identifier: Apache-2.0
// dspipe::PushDataset: upload a dataset directory (what `dsconvert build` wrote) to object
// storage, `dsconvert push DB s3://bucket/prefix/`. docs/STORAGE.md has the rules and the tests.
//
//   dspipe::PushOptions o;
//   dspipe::PushResult r;
//   dspipe::Status s = dspipe::PushDataset("/data/train", "s3://bkt/train/", o, &r);
//
// Guarantees:
// - Every file the manifest lists is uploaded under PREFIX/<its path>; files larger than
//   part_size go up as a multipart upload. Every PUT carries Content-MD5 (the server refuses
//   bytes that do not match it) and the ETag the server answers must be the MD5 of the bytes
//   sent; each file's sha256 is checked against the manifest while it is read, and a multipart
//   upload whose file does not match is aborted, never completed.
// - manifest.json is written last, after every file is in place and checked (HEAD: size and
//   ETag): a reader (FetchDataset, the cache, Loader) sees the old dataset, no dataset, or the
//   whole new one, never a half-pushed one. A different manifest already at PREFIX is deleted
//   first, so the old dataset disappears before any of its files is replaced.
// - Resumable: after a kill, the next push skips files already uploaded (HEAD: size and the
//   ETag computed from the local bytes) and continues an unfinished multipart upload (S3's
//   ListMultipartUploads + ListParts: parts whose size and ETag match the local part are kept),
//   so no state is kept on the local disk.
// - A re-push of the same dataset uploads nothing: every file is checked (HEAD against the local
//   bytes' ETag) and the manifest compared (already_present). Transient failures (cut
//   connections, 503 SlowDown, timeouts) are retried as Fetch retries them.
// Errors name the file or object and the reason; credentials as for s3:// reads
// (docs/STORAGE.md, "Credentials"); the secret key and session token are never shown.
#pragma once

#include <cstdint>
#include <functional>
#include <string>

#include "dspipe/fetch.h"
#include "dspipe/status.h"

namespace dspipe {

struct PushOptions {
  // Files larger than this are uploaded in parts of this size (the last one smaller). S3's
  // minimum part is 5 MiB and at most 10000 parts are allowed: a larger part size is used for a
  // file that would need more. Default 16 MiB.
  uint64_t part_size = uint64_t{16} << 20;
  // Retries, backoff, timeouts and cancellation of every request (sha256, size, lock, progress
  // and env are not used: see progress and env below).
  FetchOptions fetch;
  // The file system the dataset is read through; nullptr = Env::Default().
  Env* env = nullptr;
  // Called after each part or file: bytes handled so far (uploaded or found in place) and the
  // dataset's total.
  std::function<void(uint64_t done, uint64_t total)> progress;
  // What may be replaced at the prefix. false (default): only what a killed push of this same
  // dataset left there (objects holding exactly its files' bytes); a prefix holding anything
  // else (another dataset, a manifest.json that is not dspipe's, any other object) is refused
  // with AlreadyExists and nothing is changed. true: the dataset's names (manifest.json and the
  // files it lists) are replaced; other objects are left as they are, never deleted.
  bool overwrite = false;
};

struct PushResult {
  uint64_t files = 0;            // files in the manifest (manifest.json not counted)
  uint64_t files_uploaded = 0;   // files (wholly or partly) uploaded by this call
  uint64_t files_in_place = 0;   // files found complete at PREFIX (checked), not uploaded
  uint64_t parts_uploaded = 0;   // parts uploaded by this call (a single PUT counts as one)
  uint64_t parts_resumed = 0;    // parts of an unfinished multipart upload kept (checked)
  uint64_t bytes = 0;            // the dataset's size
  uint64_t bytes_uploaded = 0;   // bytes sent by this call
  bool already_present = false;  // the same manifest and every file were already there
};

// Pushes the dataset directory dir to url ("s3://bucket/prefix/"; a missing trailing '/' is
// added). InvalidArgument for a URL that is not s3://, Unsupported for a manifest without the
// "files" list (rebuild with this dspipe), Corruption for a local file that does not match the
// manifest, NotFound for a bucket that does not exist.
Status PushDataset(const std::string& dir, const std::string& url, const PushOptions& options,
                   PushResult* result = nullptr);

}  // namespace dspipe
