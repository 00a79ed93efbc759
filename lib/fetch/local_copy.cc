// SPDX-License-Identifier: Apache-2.0
// A local file (a path or file://PATH) copied into DEST.part through the Env: resumed at
// DEST.part's size when the sidecar names the same source and size, read kCopyChunk at a time,
// a failed read retried at its offset (the file reopened) under the retry policy (Retrier,
// internal.h). DEST.part, its sidecar and hash are part.h's.
#include <algorithm>
#include <memory>
#include <string>

#include "fetch/part.h"

namespace dspipe::fetch {

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
      buf.resize(
          static_cast<size_t>(std::min<uint64_t>(core::kCopyChunk, *src_size - part->size())));
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

}  // namespace dspipe::fetch
