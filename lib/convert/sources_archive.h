// SPDX-License-Identifier: Apache-2.0
// One archive (.tar, .tar.gz, .tar.zst, .zip, ...) as a dsconvert build source, read with
// libarchive without extracting anything to disk. Internal.
//
// Open() makes one pass over the members' headers (cheap for .tar and .zip: the data is skipped
// by seeking; a full decompression for .tar.gz/.tar.zst) and keeps the regular files by path.
// The layout (images/+masks/, CSV, ImageFolder) is then found by the same code as for folders
// (sources.cc, through SourceTree). Read() streams a member's bytes through a small pool of
// forward-only readers: reading the members in archive order costs one pass, images stored
// before all masks two (one reader each), and every further pass is a reopen. The builder
// refuses a plan that would need more than kMaxArchivePasses passes (see Passes()).
//
// Held whole in memory (when it fits the buffer; see Open()): a .tar is mapped (or read in), a
// .tar.gz is inflated in one call with libdeflate, a .tar.zst with libzstd, and their members are
// served from that tar without a copy at listing time; a .zip file is read in and its members are
// inflated by the threads that read them. Read() is then safe from several threads, in any order
// (ConcurrentReads()), so the build reads members in parallel as it does files of a folder.
#pragma once

#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <vector>

#include "dspipe/status.h"

struct archive;

namespace dspipe::convert {

// Passes over the archive that a build may make (readers opened from the start).
inline constexpr int kMaxArchivePasses = 4;

// True when SRC names a regular file with an archive extension (.tar, .tar.gz, .tgz,
// .tar.zst, .tzst, .tar.bz2, .tar.xz, .zip).
bool IsArchiveSource(const std::string& source);

// Whether an archive on a filesystem of this statfs f_type is mapped (mmap) rather than read
// in: false for network and FUSE filesystems (NFS, SMB/CIFS, 9p, Ceph, AFS, FUSE: Google
// Drive, sshfs, ...), where a mapped page that cannot be read kills the process with SIGBUS
// instead of returning EIO, and where the server may truncate the file underneath.
bool MapsArchivesOn(int64_t fs_type);

// Memory that holds a whole archive (mmap'd: anonymous memory with huge pages advised, or a
// read-only private mapping of the archive file). Movable, not copyable.
class WholeBuffer {
 public:
  WholeBuffer() = default;
  static WholeBuffer Allocate(size_t n);  // get() is null when it could not be had
  // The first `size` bytes of the file `fd` mapped read-only (MAP_PRIVATE), advised
  // MADV_SEQUENTIAL and MADV_WILLNEED (its reading starts now). Null when it cannot be mapped.
  // Writing through get() faults: the buffer is for reading only.
  static WholeBuffer MapFile(int fd, size_t size);
  WholeBuffer(WholeBuffer&& o) noexcept { *this = std::move(o); }
  WholeBuffer& operator=(WholeBuffer&& o) noexcept;
  ~WholeBuffer();
  char* get() const { return data_; }

 private:
  char* data_ = nullptr;
  size_t size_ = 0;
};

class ArchiveSource {
 public:
  struct Member {
    std::string path;  // normalized: no "./", no empty components
    int64_t ordinal;   // entry number in the archive (all entries count)
    uint64_t size;
  };

  // Lists SRC's members. With buffer_bytes > 0, the archive is first held whole in memory when
  // it fits: a gzip file (.tar.gz, .tgz) whose compressed and inflated sizes are each at most
  // buffer_bytes is inflated with libdeflate (one gzip member, no trailing bytes, CRC and size
  // checked: bad data is an error naming the archive, as libarchive's gzip reader does not
  // check the CRC; several gzip members or trailing bytes take the paths below); a zstd file
  // (.tar.zst) of at most buffer_bytes that inflates to at most buffer_bytes is inflated with
  // libzstd (bad data takes the paths below, which name the member); a POSIX/GNU .tar or a
  // .zip file of at most buffer_bytes is read in (zip members stay deflated until Read()).
  // .tar.bz2 and .tar.xz are not held whole. "Read in" is a read-only mmap of the file (no
  // copy: members are served from the page cache) on local filesystems, and read() into memory
  // on network and FUSE mounts (MapsArchivesOn()). A mapped archive truncated by another process
  // while the build reads it kills the process with SIGBUS (as a truncated data.mdb does to an
  // LMDB reader); the output is then left incomplete and --resume continues it.
  // Otherwise, while listing, the data of the first members (in archive order) is kept in memory
  // up to buffer_bytes (the listing pass reads it anyway for compressed archives): those
  // members are served from memory, once, and need no further pass.
  // Errors name the archive and the member where reading stopped.
  static Status Open(const std::string& source, uint64_t buffer_bytes,
                     std::shared_ptr<ArchiveSource>* out);
  ~ArchiveSource();
  ArchiveSource(const ArchiveSource&) = delete;
  ArchiveSource& operator=(const ArchiveSource&) = delete;

  const std::string& source() const { return source_; }
  // Regular files by normalized path (a path stored twice: the last one, as extraction would).
  const std::map<std::string, Member>& files() const { return files_; }
  // Directories: explicit entries and the parents of every file, normalized; "" is the root.
  bool IsDir(const std::string& path) const { return dirs_.count(path) > 0; }
  const std::map<std::string, bool>& dirs() const { return dirs_; }
  // Members that are ignored (symlinks, devices, unsafe paths), one line each.
  const std::vector<std::string>& warnings() const { return warnings_; }
  // "SRC:path", the name used for items and in messages.
  std::string Name(const std::string& path) const { return source_ + ":" + path; }

  // The member's bytes. `name` is the item's name for the member (checked against the member
  // found at `ordinal`, so a changed archive is an error, not a wrong record). One caller at a
  // time, unless ConcurrentReads(). Errors: kIOError for a truncated or unreadable archive or
  // member (a zip member's bad deflate data or CRC), kCorruption when the archive no longer
  // holds that member, kBadInput for a sparse member (never read: its holes would be zeros in
  // memory) and for a member over the per-member limit (an image at DecodeLimits::max_pixels, 8
  // bytes a pixel, + 1 MiB; at most 4 GiB), declared or found while inflating (reading stops
  // there); all name SRC:member and the limit.
  //
  // Memory: while listing, at most buffer_bytes of member data is held (or the archive whole,
  // when it fits buffer_bytes); a sparse member's holes are never filled in; a Read holds at
  // most the per-member limit.
  Status Read(int64_t ordinal, const std::string& name, std::string* out);
  // True when the whole archive is held in memory (see Open()): Read() may then be called from
  // several threads at once, in any order, and costs no pass.
  bool ConcurrentReads() const { return held_ != Held::kNone; }
  // Passes (readers started from the first entry) that reading `ordinals` in this order takes
  // (members held in memory take none).
  int Passes(const std::vector<int64_t>& ordinals) const;
  uint64_t buffered_members() const { return buffered_count_; }
  uint64_t passes_made() const { return passes_made_.load(); }
  // What Open() held whole in memory: "" (nothing: members buffered while listing, or
  // streamed), "tar" (a .tar read in, or a .tar.gz or .tar.zst inflated) or "zip" (a .zip
  // file read in).
  const char* held() const {
    return held_ == Held::kTar ? "tar" : held_ == Held::kZip ? "zip" : "";
  }
  // True when the archive file itself is mapped (a .tar or .zip held whole on a local
  // filesystem): members are served from the page cache. The compressed file of a .tar.gz or
  // .tar.zst is mapped only while it is inflated.
  bool mapped() const { return mapped_; }

 private:
  struct Cursor {
    ::archive* a = nullptr;
    int64_t next = 0;  // ordinal of the next header
  };
  enum class Held { kNone, kTar, kZip };
  explicit ArchiveSource(std::string source) : source_(std::move(source)) {}
  // Holds the archive whole in memory when it fits (see Open()); leaves held_ kNone otherwise.
  Status LoadWhole(uint64_t buffer_bytes);
  Status OpenReader(::archive** out) const;
  // Moves c to entry k and reads its data; on failure c's reader is closed.
  Status ReadWith(Cursor* c, int64_t k, const std::string& name, std::string* out) const;
  // A zip held in memory: entry k inflated by the calling thread with a reader from pool_.
  Status ReadFromPool(int64_t k, const std::string& name, std::string* out);
  Status Fail(const std::string& where, ::archive* a, const char* what) const;

  std::string source_;
  std::map<std::string, Member> files_;
  std::map<std::string, bool> dirs_;
  std::vector<std::string> entry_paths_;  // by ordinal: the raw entry path, for checks
  std::vector<std::string> warnings_;
  std::vector<Cursor> cursors_;
  std::map<int64_t, std::string> buffered_;  // entry -> data, until Read() takes it
  uint64_t buffered_count_ = 0;
  std::atomic<uint64_t> passes_made_{0};
  Held held_ = Held::kNone;
  bool mapped_ = false;
  bool corrupt_gzip_ = false;  // libdeflate found bad data: an error if the listing passes
  WholeBuffer whole_;          // the (inflated) tar or the zip file (held_ != kNone)
  size_t whole_size_ = 0;
  // Held tar: entry -> (offset, size) of its data in whole_ (buffered_ holds the rare member
  // whose data is not one contiguous block there; both stay until the source is destroyed).
  std::map<int64_t, std::pair<size_t, size_t>> views_;
  std::mutex pool_mu_;
  std::vector<Cursor> pool_;   // held zip: idle readers, each at its `next` entry
  std::set<int64_t> sparse_;   // sparse members: listed, refused by Read
  uint64_t member_limit_ = 0;  // the most bytes Read gives for one member (Open: from DecodeLimits)
};

}  // namespace dspipe::convert
