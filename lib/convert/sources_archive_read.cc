// SPDX-License-Identifier: Apache-2.0
// Reading an archive source's members (sources_archive.h): the forward-only readers (Pick:
// which one serves an entry, and so how many passes a plan takes), Read (from the listing's
// buffer, the held tar, a pooled zip reader, or a streaming reader) and the per-member limit.
#include <archive.h>
#include <archive_entry.h>

#include <algorithm>
#include <cstring>
#include <limits>
#include <mutex>
#include <utility>

#include "convert/sources_archive.h"
#include "convert/sources_archive_internal.h"

namespace dspipe::convert {
namespace {

using archive_internal::EndsWith;
using archive_internal::ReadEntry;

// Readers kept open at once: one for images and one for masks stored after them.
constexpr size_t kMaxCursors = 2;

std::string OverLimit(const std::string& name, const std::string& what, uint64_t limit) {
  return name + ": " + what + ", over the limit of " + std::to_string(limit) +
         " bytes for one member (an image at the pixel limit, 8 bytes a pixel: raise "
         "--max-image-pixels, DecodeLimits::max_pixels, to read larger ones)";
}
// Idle readers kept for a zip held in memory (each costs a parse of the central directory):
// enough for the images and masks readers of every build thread.
constexpr size_t kMaxPool = 16;

// Which reader serves entry k, given where each reader is (the ordinal of its next header;
// INT64_MAX for a broken one): the one furthest along that has not passed k; else a new one
// while there are fewer than kMaxCursors; else the one furthest along restarts. *fresh is set
// when the chosen reader starts from the first entry. Read() and Passes() share it.
size_t Pick(const std::vector<int64_t>& next, int64_t k, bool* fresh) {
  size_t best = next.size();
  for (size_t c = 0; c < next.size(); ++c) {
    if (next[c] <= k && (best == next.size() || next[c] > next[best])) best = c;
  }
  *fresh = best == next.size();
  if (!*fresh) return best;
  if (next.size() < kMaxCursors) return next.size();
  size_t far = 0;
  for (size_t c = 1; c < next.size(); ++c) {
    if (next[c] > next[far]) far = c;
  }
  return far;
}

}  // namespace

int ArchiveSource::Passes(const std::vector<int64_t>& ordinals) const {
  if (held_ != Held::kNone) return 0;
  std::vector<int64_t> next;
  int passes = 0;
  for (int64_t k : ordinals) {
    if (k < 0 || buffered_.count(k)) continue;
    bool fresh = false;
    const size_t c = Pick(next, k, &fresh);
    if (c == next.size()) next.push_back(0);
    if (fresh) {
      next[c] = 0;
      ++passes;
    }
    next[c] = k + 1;
  }
  return passes;
}

Status ArchiveSource::Read(int64_t k, const std::string& name, std::string* out) {
  out->clear();
  if (k < 0 || k >= static_cast<int64_t>(entry_paths_.size()) || entry_paths_[k].empty() ||
      !EndsWith(name, ":" + entry_paths_[k])) {
    return Status::Corruption(name + ": the archive " + source_ +
                              " changed since the build was planned (no such member at entry " +
                              std::to_string(k) + "); rebuild with " +
                              Opt("BuildOptions::overwrite", "true"));
  }
  if (sparse_.count(k)) {
    return Status::BadInput(name +
                            ": a sparse member (a file with holes, as GNU tar --sparse "
                            "writes): refused, dspipe reads regular members only; recreate "
                            "the archive without --sparse");
  }
  if (held_ == Held::kTar) {  // const after Open(): safe from several threads
    if (auto v = views_.find(k); v != views_.end()) {
      if (v->second.second > member_limit_) {
        return Status::BadInput(OverLimit(
            name, "member of " + std::to_string(v->second.second) + " bytes", member_limit_));
      }
      out->assign(whole_.get() + v->second.first, v->second.second);
      return Status::OK();
    }
    if (auto it = buffered_.find(k); it != buffered_.end()) {
      *out = it->second;
      return Status::OK();
    }
    return Status::Corruption(name + ": not a regular file of " + source_);
  }
  if (held_ == Held::kZip) return ReadFromPool(k, name, out);
  if (auto it = buffered_.find(k); it != buffered_.end()) {
    *out = std::move(it->second);
    buffered_.erase(it);
    return Status::OK();
  }
  std::vector<int64_t> next;
  for (const Cursor& c : cursors_) {
    next.push_back(c.a != nullptr ? c.next : std::numeric_limits<int64_t>::max());
  }
  bool fresh = false;
  const size_t ci = Pick(next, k, &fresh);
  if (ci == cursors_.size()) cursors_.emplace_back();
  Cursor& c = cursors_[ci];
  if (fresh) {
    if (c.a != nullptr) archive_read_free(c.a);
    c.a = nullptr;
    DSPIPE_RETURN_IF_ERROR(OpenReader(&c.a));
    c.next = 0;
    ++passes_made_;
  }
  return ReadWith(&c, k, name, out);
}

Status ArchiveSource::ReadFromPool(int64_t k, const std::string& name, std::string* out) {
  // The idle reader furthest along that has not passed k (moving it is cheap: the zip is in
  // memory and its entries are found through the central directory); else a new one.
  Cursor c;
  {
    std::lock_guard<std::mutex> lock(pool_mu_);
    size_t best = pool_.size();
    for (size_t i = 0; i < pool_.size(); ++i) {
      if (pool_[i].next <= k && (best == pool_.size() || pool_[i].next > pool_[best].next)) {
        best = i;
      }
    }
    if (best < pool_.size()) {
      c = pool_[best];
      pool_[best] = pool_.back();
      pool_.pop_back();
    }
  }
  if (c.a == nullptr) {
    DSPIPE_RETURN_IF_ERROR(OpenReader(&c.a));
    c.next = 0;
    ++passes_made_;
  }
  // ReadWith closes c's reader when the archive is broken; a member it refuses (over the
  // limit) leaves it open: this reader was taken from the pool, so it is freed here.
  if (Status s = ReadWith(&c, k, name, out); !s.ok()) {
    if (c.a != nullptr) archive_read_free(c.a);
    return s;
  }
  std::lock_guard<std::mutex> lock(pool_mu_);
  pool_.push_back(c);
  if (pool_.size() > kMaxPool) {  // drop the one furthest behind
    size_t low = 0;
    for (size_t i = 1; i < pool_.size(); ++i) {
      if (pool_[i].next < pool_[low].next) low = i;
    }
    archive_read_free(pool_[low].a);
    pool_[low] = pool_.back();
    pool_.pop_back();
  }
  return Status::OK();
}

Status ArchiveSource::ReadWith(Cursor* cur, int64_t k, const std::string& name,
                               std::string* out) const {
  Cursor& c = *cur;
  auto broken = [&](const std::string& where, const char* what) {
    Status s = Fail(where, c.a, what);
    archive_read_free(c.a);
    c.a = nullptr;
    return s;
  };
  archive_entry* e = nullptr;
  for (;; ++c.next) {
    const std::string at = Name(entry_paths_[c.next].empty() ? "entry " + std::to_string(c.next)
                                                             : entry_paths_[c.next]);
    if (archive_read_next_header(c.a, &e) < ARCHIVE_WARN) {
      return broken(at, "truncated or corrupt archive");
    }
    if (c.next == k) break;
    if (archive_read_data_skip(c.a) < ARCHIVE_WARN) {
      return broken(at, "truncated or corrupt archive");
    }
  }
  ++c.next;
  const uint64_t size = archive_entry_size_is_set(e) ? archive_entry_size(e) : 0;
  if (size > member_limit_) {
    return Status::BadInput(
        OverLimit(name, "member of " + std::to_string(size) + " bytes", member_limit_));
  }
  // The declared size is not trusted either (a zip member's may be unset or wrong): the bytes
  // inflated stop at the limit.
  bool over = false;
  if (!ReadEntry(c.a, size, member_limit_, out, &over)) {
    if (!over) return broken(name, "truncated or corrupt archive");
    (void)broken(name, "");  // closes the reader; the size is the error to report
    return Status::BadInput(
        OverLimit(name, "member inflating to more than " + std::to_string(member_limit_) + " bytes",
                  member_limit_));
  }
  if (archive_entry_size_is_set(e) && out->size() != size) {
    return broken(name, ("truncated member: " + std::to_string(out->size()) + " of " +
                         std::to_string(size) + " bytes")
                            .c_str());
  }
  return Status::OK();
}

}  // namespace dspipe::convert
