// SPDX-License-Identifier: Apache-2.0
// The archive source's listing (sources_archive.h; sources_archive_internal.h maps its files):
// IsArchiveSource, ArchiveSource::Open (one pass over the members' headers, each path made a
// safe relative one, member data buffered up to the budget) and the libarchive readers.
#include "convert/sources_archive.h"

#include <archive.h>
#include <archive_entry.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <limits>
#include <utility>

#include "convert/sources_archive_internal.h"
#include "dspipe/env.h"
#include "dspipe/limits.h"

namespace dspipe::convert {

namespace archive_internal {

bool EndsWith(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() &&
         s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

bool ReadEntry(::archive* a, uint64_t declared, uint64_t limit, std::string* out, bool* over) {
  *over = false;
  out->resize(std::min<uint64_t>(declared, uint64_t{16} << 20));
  size_t got = 0;
  for (;;) {
    if (got == out->size()) out->resize(std::max<size_t>(got * 2, got + (size_t{1} << 16)));
    const la_ssize_t n = archive_read_data(a, out->data() + got, out->size() - got);
    if (n < 0) return false;
    if (n == 0) break;
    got += static_cast<size_t>(n);
    if (got > limit) {
      *over = true;
      return false;
    }
  }
  out->resize(got);
  return true;
}

}  // namespace archive_internal

namespace {

using archive_internal::EndsWith;
using archive_internal::ReadEntry;

// libarchive's read block size: large blocks keep the syscall count low on big archives.
constexpr size_t kBlockSize = size_t{1} << 20;
constexpr uint64_t kMaxMember = UINT32_MAX;  // a record payload's limit (format.h)

// The most bytes one member may hold to be read: an image at DecodeLimits::max_pixels, 8 bytes
// a pixel (16-bit RGBA, uncompressed: the largest an encoded image within the limits can be),
// plus 1 MiB for headers and metadata; never more than a record holds. Default: 2 GiB + 1 MiB.
uint64_t MemberLimit() {
  const uint64_t pixels = GetDecodeLimits().max_pixels;
  const uint64_t bytes = pixels > (kMaxMember >> 3) ? kMaxMember : pixels * 8 + (uint64_t{1} << 20);
  return std::min(bytes, kMaxMember);
}

// A member path as a safe relative path: "./a//b/" -> "a/b". Refuses absolute paths and "..":
// nothing is written to disk, but such a member must never stand for a file of the dataset.
bool Normalize(const std::string& raw, std::string* out, std::string* why) {
  out->clear();
  if (raw.empty()) {
    *why = "empty name";
    return false;
  }
  if (raw[0] == '/') {
    *why = "absolute path";
    return false;
  }
  size_t i = 0;
  while (i <= raw.size()) {
    size_t j = raw.find('/', i);
    if (j == std::string::npos) j = raw.size();
    const std::string part = raw.substr(i, j - i);
    if (part == "..") {
      *why = "path leaves the archive (\"..\")";
      return false;
    }
    if (!part.empty() && part != ".") {
      if (!out->empty()) *out += '/';
      *out += part;
    }
    i = j + 1;
  }
  if (out->empty()) {
    *why = "empty name";
    return false;
  }
  return true;
}

// The current entry's data as one block of `whole` (a held tar: libarchive's tar reader hands
// out pointers into the memory it reads): *offset set, true. False when the data comes in
// several blocks or from elsewhere (a sparse member; an archive inside the gzip that is not a
// tar): *copy then holds the data. A read error: false with *failed set.
bool DataView(::archive* a, const char* whole, size_t whole_size, uint64_t size, size_t* offset,
              std::string* copy, bool* failed) {
  *failed = false;
  copy->clear();
  auto put = [copy](const char* p, uint64_t at, size_t len) {
    if (copy->size() < at + len) copy->resize(at + len);
    if (len > 0) std::memcpy(copy->data() + at, p, len);
  };
  // The first block, when it lies in `whole` (stable: not libarchive's own buffer), is copied
  // only if more blocks follow.
  bool deferred = false;
  size_t first_offset = 0, first_len = 0;
  uint64_t first_at = 0;
  int blocks = 0;
  for (;; ++blocks) {
    const void* block = nullptr;
    size_t len = 0;
    la_int64_t at = 0;
    const int r = archive_read_data_block(a, &block, &len, &at);
    if (r == ARCHIVE_EOF) break;
    if (r < ARCHIVE_WARN || at < 0 || static_cast<uint64_t>(at) + len > kMaxMember) {
      *failed = true;
      return false;
    }
    const char* p = static_cast<const char*>(block);
    const bool in_whole = p != nullptr && p >= whole && len <= whole_size &&
                          static_cast<size_t>(p - whole) <= whole_size - len;
    if (blocks == 0 && in_whole) {
      deferred = true;
      first_offset = static_cast<size_t>(p - whole);
      first_len = len;
      first_at = static_cast<uint64_t>(at);
      continue;
    }
    if (deferred) put(whole + first_offset, first_at, first_len);
    deferred = false;
    put(p, static_cast<uint64_t>(at), len);
  }
  if (deferred && blocks == 1 && first_at == 0 && first_len == size) {
    *offset = first_offset;
    return true;
  }
  if (blocks == 0 && size == 0) {
    *offset = 0;
    return true;
  }
  if (deferred) put(whole + first_offset, first_at, first_len);
  return false;
}

}  // namespace

bool IsArchiveSource(const std::string& source) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (!fs::is_regular_file(source, ec)) return false;
  for (const char* ext :
       {".tar", ".tar.gz", ".tgz", ".tar.zst", ".tzst", ".tar.bz2", ".tar.xz", ".zip"}) {
    if (EndsWith(source, ext)) return true;
  }
  return false;
}

ArchiveSource::~ArchiveSource() {
  for (Cursor& c : cursors_) {
    if (c.a != nullptr) archive_read_free(c.a);
  }
  for (Cursor& c : pool_) archive_read_free(c.a);
}

Status ArchiveSource::Fail(const std::string& where, ::archive* a, const char* what) const {
  const char* err = a != nullptr ? archive_error_string(a) : nullptr;
  return Status::IOError(where + ": " + what +
                         (err != nullptr && *err != '\0' ? std::string(": ") + err : ""));
}

Status ArchiveSource::OpenReader(::archive** out) const {
  ::archive* a = archive_read_new();
  if (a == nullptr) return Status::Internal("archive_read_new failed");
  // Named formats and filters only: archive_read_support_filter_all would also run external
  // programs (lrzip, lzop, ...) for formats libarchive lacks.
  archive_read_support_format_tar(a);
  archive_read_support_format_zip(a);
  archive_read_support_filter_gzip(a);
  archive_read_support_filter_zstd(a);
  archive_read_support_filter_bzip2(a);
  archive_read_support_filter_xz(a);
  const int opened = held_ != Held::kNone
                         ? archive_read_open_memory(a, whole_.get(), whole_size_)
                         : archive_read_open_filename(a, source_.c_str(), kBlockSize);
  if (opened != ARCHIVE_OK) {
    Status s = Fail(source_, a, "cannot open the archive");
    archive_read_free(a);
    return s;
  }
  *out = a;
  return Status::OK();
}

Status ArchiveSource::Open(const std::string& source, uint64_t buffer_bytes,
                           std::shared_ptr<ArchiveSource>* out) {
  std::shared_ptr<ArchiveSource> src(new ArchiveSource(source));
  src->member_limit_ = MemberLimit();
  DSPIPE_RETURN_IF_ERROR(src->LoadWhole(buffer_bytes));
  ::archive* a = nullptr;
  DSPIPE_RETURN_IF_ERROR(src->OpenReader(&a));
  std::unique_ptr<::archive, int (*)(::archive*)> guard(a, archive_read_free);
  src->dirs_[""] = true;
  std::string last;  // the previous entry's path, for messages
  uint64_t buffered = 0;
  // Stops at the first member that does not fit. Off when the archive is held whole.
  bool buffering = buffer_bytes > 0 && src->held_ == Held::kNone;
  for (int64_t ordinal = 0;; ++ordinal) {
    archive_entry* e = nullptr;
    const int r = archive_read_next_header(a, &e);
    if (r == ARCHIVE_EOF) break;
    if (r < ARCHIVE_WARN) {
      if (ordinal == 0) return src->Fail(source, a, "not a readable archive");
      return src->Fail(source, a, ("truncated or corrupt archive after member " + last).c_str());
    }
    const char* name = archive_entry_pathname(e);
    if (name == nullptr) name = archive_entry_pathname_utf8(e);
    const std::string raw = name != nullptr ? name : "";
    std::string path, why;
    const bool safe = Normalize(raw, &path, &why);
    src->entry_paths_.push_back(safe ? path : std::string());
    const bool macos_meta = safe && (path == "__MACOSX" || path.rfind("__MACOSX/", 0) == 0);
    const mode_t type = archive_entry_filetype(e);
    if (!safe) {
      src->warnings_.push_back(src->Name(raw.empty() ? "entry " + std::to_string(ordinal) : raw) +
                               ": " + why + "; ignored");
    } else if (macos_meta) {
      // Finder's resource forks: never part of the dataset.
    } else if (type == AE_IFDIR) {
      for (std::string d = path; !d.empty(); d = std::filesystem::path(d).parent_path().string()) {
        src->dirs_[d] = true;
      }
    } else if (type == AE_IFREG && archive_entry_hardlink(e) == nullptr) {
      const uint64_t size = archive_entry_size_is_set(e) ? archive_entry_size(e) : 0;
      if (auto old = src->files_.find(path); old != src->files_.end()) {
        src->buffered_.erase(old->second.ordinal);  // stored again: the later one counts
        src->views_.erase(old->second.ordinal);
      }
      src->files_[path] = Member{path, ordinal, size};
      for (std::string d = std::filesystem::path(path).parent_path().string(); !d.empty();
           d = std::filesystem::path(d).parent_path().string()) {
        src->dirs_[d] = true;
      }
    } else {
      const char* what = type == AE_IFLNK                       ? "a symbolic link"
                         : archive_entry_hardlink(e) != nullptr ? "a hard link"
                                                                : "not a regular file";
      src->warnings_.push_back(src->Name(path) + ": " + what + "; ignored");
    }
    const bool regular =
        safe && !macos_meta && type == AE_IFREG && archive_entry_hardlink(e) == nullptr;
    const uint64_t size = archive_entry_size_is_set(e) ? archive_entry_size(e) : 0;
    // A sparse member (GNU tar --sparse) declares a size its data does not hold: reading it
    // would fill the holes with zeros in memory (20 KB of archive declared 600 MB). Refused
    // when read (Read), never buffered or copied here.
    const bool sparse = regular && archive_entry_sparse_count(e) > 0;
    if (sparse) src->sparse_.insert(ordinal);
    if (sparse) {
      // Neither held nor buffered: nothing of it is read.
    } else if (regular && src->held_ == Held::kTar) {
      // Served from the inflated tar: no copy, unless the data is not one block there.
      size_t offset = 0;
      std::string copy;
      bool failed = false;
      if (DataView(a, src->whole_.get(), src->whole_size_, size, &offset, &copy, &failed)) {
        src->views_[ordinal] = {offset, static_cast<size_t>(size)};
      } else if (failed || copy.size() != size) {
        return src->Fail(src->Name(path), a, "truncated or corrupt archive");
      } else {
        src->buffered_[ordinal] = std::move(copy);
      }
      ++src->buffered_count_;
    } else if (regular && src->held_ == Held::kZip) {
      ++src->buffered_count_;  // inflated by Read() from the zip held in memory
    }
    // Directories, links and ignored members neither use nor end the buffer; a member over the
    // per-member limit is not read here (Read refuses it, naming it).
    const bool readable = regular && !sparse && size <= src->member_limit_;
    if (readable && src->held_ == Held::kNone) {
      buffering = buffering && archive_entry_size_is_set(e) && size <= buffer_bytes - buffered;
    }
    if (readable && buffering) {
      std::string data;
      bool over = false;
      if (!ReadEntry(a, size, size, &data, &over) || data.size() != size) {
        return src->Fail(src->Name(path), a,
                         over ? "corrupt archive: more data than the member's size"
                              : "truncated or corrupt archive");
      }
      buffered += size;
      src->buffered_[ordinal] = std::move(data);
      ++src->buffered_count_;
    }
    if (archive_read_data_skip(a) < ARCHIVE_WARN) {
      return src->Fail(src->Name(safe ? path : raw), a, "truncated or corrupt archive");
    }
    last = safe ? path : raw;
  }
  if (src->corrupt_gzip_) {
    return Status::Corruption(
        source +
        ": corrupt gzip data: its CRC-32 or size does not match the inflated bytes (one "
        "checksum covers the whole stream, so no member can be named); recreate or "
        "download the archive again");
  }
  // A path stored both as a file and as a directory: the directory wins for layout detection;
  // the file would never be listed as an image of it.
  for (const auto& [d, unused] : src->dirs_) {
    if (auto f = src->files_.find(d); f != src->files_.end()) {
      src->buffered_.erase(f->second.ordinal);
      src->views_.erase(f->second.ordinal);
      src->files_.erase(f);
    }
  }
  *out = std::move(src);
  return Status::OK();
}

}  // namespace dspipe::convert
