#include "convert/sources_archive.h"

#include <archive.h>
#include <archive_entry.h>
#include <fcntl.h>
#include <libdeflate.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <unistd.h>
#include <zstd.h>

#include <cstring>
#include <filesystem>
#include <limits>
#include <utility>

#include "dspipe/env.h"
#include "dspipe/limits.h"

namespace dspipe {
namespace {

// Readers kept open at once: one for images and one for masks stored after them.
constexpr size_t kMaxCursors = 2;
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

std::string OverLimit(const std::string& name, const std::string& what, uint64_t limit) {
  return name + ": " + what + ", over the limit of " + std::to_string(limit) +
         " bytes for one member (an image at the pixel limit, 8 bytes a pixel: raise "
         "--max-image-pixels, DecodeLimits::max_pixels, to read larger ones)";
}
// Idle readers kept for a zip held in memory (each costs a parse of the central directory):
// enough for the images and masks readers of every build thread.
constexpr size_t kMaxPool = 16;

bool EndsWith(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() &&
         s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
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

// Reads the current entry's data into out. The declared size only sizes the first allocation
// (at most 16 MiB: a corrupt header's size is never trusted with memory); the data decides.
// Returns false on a read error or when more than `limit` bytes arrive (*over set).
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

}  // namespace

// Anonymous memory for a whole archive, in transparent huge pages where the kernel allows
// (madvise mode, the common default): a 4 KiB page fault per 4 KiB of a 100 MB buffer costs a
// large share of inflating into it. Null when the memory cannot be had.
WholeBuffer WholeBuffer::Allocate(size_t n) {
  WholeBuffer b;
  if (n == 0) return b;
  void* p = mmap(nullptr, n, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) return b;
#ifdef MADV_HUGEPAGE
  (void)madvise(p, n, MADV_HUGEPAGE);  // advice only: regular pages when refused
#endif
  b.data_ = static_cast<char*>(p);
  b.size_ = n;
  return b;
}

WholeBuffer WholeBuffer::MapFile(int fd, size_t size) {
  WholeBuffer b;
  if (size == 0) return b;
  void* p = mmap(nullptr, size, PROT_READ, MAP_PRIVATE, fd, 0);
  if (p == MAP_FAILED) return b;
  // Advice only: aggressive readahead, and the whole file requested now (a cold archive is
  // read while the listing walks its first headers).
  (void)madvise(p, size, MADV_SEQUENTIAL);
  (void)madvise(p, size, MADV_WILLNEED);
  b.data_ = static_cast<char*>(p);
  b.size_ = size;
  return b;
}

bool MapsArchivesOn(int64_t fs_type) {
  // Magic numbers of linux/magic.h (and of the filesystems that define their own).
  switch (static_cast<uint32_t>(fs_type)) {
    case 0x6969u:      // NFS
    case 0x65735546u:  // FUSE (Google Drive in Colab, sshfs, rclone, s3fs, ...)
    case 0x517Bu:      // SMB
    case 0xFF534D42u:  // CIFS
    case 0xFE534D42u:  // SMB2
    case 0x01021997u:  // 9p (v9fs: WSL2's Windows drives, VM shared folders)
    case 0x00C36400u:  // Ceph
    case 0x5346414Fu:  // AFS (kAFS)
    case 0x6B414653u:  // AFS (OpenAFS)
    case 0x73757245u:  // Coda
    case 0x564Cu:      // NCP
    case 0x0BD00BD0u:  // Lustre
    case 0x47504653u:  // GPFS
    case 0x01161970u:  // GFS2
    case 0x786F4256u:  // VirtualBox shared folders (vboxsf)
      return false;
    default:
      return true;
  }
}

WholeBuffer& WholeBuffer::operator=(WholeBuffer&& o) noexcept {
  if (this != &o) {
    if (data_ != nullptr) munmap(data_, size_);
    data_ = std::exchange(o.data_, nullptr);
    size_ = std::exchange(o.size_, 0);
  }
  return *this;
}

WholeBuffer::~WholeBuffer() {
  if (data_ != nullptr) munmap(data_, size_);
}

namespace {

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

Status ArchiveSource::LoadWhole(uint64_t buffer_bytes) {
  if (buffer_bytes == 0) return Status::OK();
  Env* env = Env::Default();
  uint64_t size = 0;
  // Unreadable: OpenReader reports it, as for archives that are not held.
  if (!env->FileSize(source_, &size).ok() || size < 4 || size > buffer_bytes) return Status::OK();
  // On a local filesystem the file is mapped: no copy of the whole archive (a .tar's or a
  // .zip's members are then served from the page cache; a compressed file is inflated from the
  // map). Elsewhere, or when it cannot be mapped, it is read in.
  WholeBuffer data;
  bool mapped = false;
  if (const int fd = ::open(source_.c_str(), O_RDONLY | O_CLOEXEC); fd >= 0) {
    struct statfs fsb {};
    struct stat st {};
    if (::fstatfs(fd, &fsb) == 0 && MapsArchivesOn(static_cast<int64_t>(fsb.f_type)) &&
        ::fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && static_cast<uint64_t>(st.st_size) == size) {
      data = WholeBuffer::MapFile(fd, size);
      mapped = data.get() != nullptr;
    }
    ::close(fd);
  }
  unsigned char magic[263] = {};
  size_t got = 0;
  std::unique_ptr<RandomAccessFile> file;
  if (mapped) {
    got = std::min<size_t>(size, sizeof(magic));
    std::memcpy(magic, data.get(), got);
  } else {
    if (!env->NewRandomAccessFile(source_, &file).ok()) return Status::OK();
    DSPIPE_RETURN_IF_ERROR(file->Read(0, sizeof(magic), reinterpret_cast<char*>(magic), &got));
  }
  const bool gzip = got >= 4 && magic[0] == 0x1f && magic[1] == 0x8b;
  const bool zip = got >= 4 && std::memcmp(magic, "PK\x03\x04", 4) == 0;
  const bool zstd = got >= 4 && std::memcmp(magic, "\x28\xb5\x2f\xfd", 4) == 0;
  // POSIX and GNU tar headers carry "ustar" at offset 257 (a pre-POSIX tar streams).
  const bool tar = got == sizeof(magic) && std::memcmp(magic + 257, "ustar", 5) == 0;
  if (!gzip && !zip && !tar && !zstd) return Status::OK();
  if (!mapped) {
    data = WholeBuffer::Allocate(size);
    if (data.get() == nullptr) return Status::OK();  // no memory for it: stream instead
    for (uint64_t at = 0; at < size; at += got) {
      DSPIPE_RETURN_IF_ERROR(file->Read(at, size - at, data.get() + at, &got));
      if (got == 0) return Status::OK();  // shrunk meanwhile: the streaming path reports it
    }
  }
  if (zip || tar) {
    whole_ = std::move(data);
    whole_size_ = size;
    held_ = zip ? Held::kZip : Held::kTar;
    mapped_ = mapped;
    return Status::OK();
  }
  if (zstd) {
    // The inflated size is not known up front (a streaming writer leaves it out of the frame
    // header): inflate into buffer_bytes of address space, of which only the part written is
    // backed by memory. Bad data or more than buffer_bytes: the streaming path below (which
    // names the member where the data breaks: libarchive checks zstd's checksums too).
    WholeBuffer inflated = WholeBuffer::Allocate(buffer_bytes);
    ZSTD_DCtx* z = inflated.get() != nullptr ? ZSTD_createDCtx() : nullptr;
    if (z == nullptr) return Status::OK();
    ZSTD_inBuffer in = {data.get(), size, 0};
    ZSTD_outBuffer out = {inflated.get(), buffer_bytes, 0};
    size_t left = 1;  // 0 once a frame ends exactly where the input does
    while (in.pos < in.size || left != 0) {
      const size_t before = in.pos + out.pos;
      left = ZSTD_decompressStream(z, &out, &in);
      if (ZSTD_isError(left) || in.pos + out.pos == before) break;  // bad data, or no room
    }
    ZSTD_freeDCtx(z);
    if (ZSTD_isError(left) || left != 0 || in.pos != in.size) return Status::OK();
    whole_ = std::move(inflated);
    whole_size_ = out.pos;
    held_ = Held::kTar;
    return Status::OK();
  }
  // One gzip member: its last 4 bytes are the inflated size mod 2^32 (ISIZE). A larger result,
  // another member, trailing bytes or bad data fail here; the streaming path then handles the
  // archive as before (inflating several members, or naming the member where it breaks).
  uint32_t isize = 0;
  std::memcpy(&isize, data.get() + size - 4, 4);  // little-endian, as the hosts we build for
  if (isize == 0 || isize > buffer_bytes) return Status::OK();
  WholeBuffer inflated = WholeBuffer::Allocate(isize);
  libdeflate_decompressor* d =
      inflated.get() != nullptr ? libdeflate_alloc_decompressor() : nullptr;
  if (d == nullptr) return Status::OK();
  size_t in_used = 0, out_got = 0;
  const libdeflate_result r =
      libdeflate_gzip_decompress_ex(d, data.get(), size, inflated.get(), isize, &in_used, &out_got);
  libdeflate_free_decompressor(d);
  // libarchive's gzip reader does not check the CRC-32: bad data that it would stream without
  // a complaint (a flipped bit in a stored block, a wrong CRC or size in the trailer) is an
  // error after the listing (a truncated or undecodable stream is named there, by member).
  corrupt_gzip_ = r == LIBDEFLATE_BAD_DATA;
  if (r != LIBDEFLATE_SUCCESS || in_used != size || out_got != isize) return Status::OK();
  whole_ = std::move(inflated);
  whole_size_ = isize;
  held_ = Held::kTar;
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

}  // namespace dspipe
