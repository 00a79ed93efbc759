// SPDX-License-Identifier: Apache-2.0
// Holding an archive source whole in memory (sources_archive.h): WholeBuffer (huge-page
// anonymous memory, or a read-only mapping of the file), MapsArchivesOn (which filesystems are
// safe to map) and ArchiveSource::LoadWhole (a .tar or .zip read in or mapped, a .tar.gz
// inflated with libdeflate, a .tar.zst with libzstd).
#include <fcntl.h>
#include <libdeflate.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <unistd.h>
#include <zstd.h>

#include <algorithm>
#include <cstring>
#include <limits>
#include <utility>

#include "convert/sources_archive.h"
#include "dspipe/env.h"

namespace dspipe::convert {

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

}  // namespace dspipe::convert
