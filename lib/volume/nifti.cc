// SPDX-License-Identifier: Apache-2.0
// NIfTI-1/2 volumes: header checks, nibabel's best affine, the closest canonical (RAS)
// orientation, and the voxels as one sample type. dspipe checks a header's fields first and
// reads the voxels itself (libdeflate for .nii.gz); nifti_clib (Debian's libnifti2-dev), which
// trusts what it reads, parses only headers that passed those checks (the affine, orientation).
#include <fcntl.h>
#include <libdeflate.h>
#include <nifti2_io.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <memory>
#include <mutex>

#include "volume/volume.h"

namespace dspipe::volume {

namespace {

struct NiftiFree {
  void operator()(nifti_image* n) const { nifti_image_free(n); }
};
using NiftiPtr = std::unique_ptr<nifti_image, NiftiFree>;

// nifti_clib reports on stderr unless told otherwise; dspipe's errors say it instead.
void Quiet() {
  static std::once_flag once;
  std::call_once(once, [] { nifti_set_debug_level(0); });
}

std::string TypeName(int dt) {
  const char* s = nifti_datatype_string(dt);
  return s != nullptr ? s : "DT_" + std::to_string(dt);
}

bool Supported(int dt) {
  switch (dt) {
    case DT_UINT8:
    case DT_INT8:
    case DT_UINT16:
    case DT_INT16:
    case DT_INT32:
    case DT_UINT32:
    case DT_FLOAT32:
    case DT_FLOAT64:
      return true;
    default:
      return false;
  }
}

Affine FromMat(const nifti_dmat44& m) {
  Affine a{};
  for (int r = 0; r < 4; ++r)
    for (int c = 0; c < 4; ++c) a[r][c] = m.m[r][c];
  return a;
}

// nibabel's Nifti1Header.get_best_affine: sform, else qform, else the base affine (pixdim
// scaling with x flipped, the origin at the array's centre).
Affine BestAffine(const nifti_image& n) {
  if (n.sform_code > 0) return FromMat(n.sto_xyz);
  if (n.qform_code > 0) return FromMat(n.qto_xyz);
  Affine a{};
  const double zoom[3] = {-n.pixdim[1], n.pixdim[2], n.pixdim[3]};
  const int64_t shape[3] = {n.nx, n.ny, n.nz};
  for (int i = 0; i < 3; ++i) {
    const double z = n.ndim > i ? zoom[i] : (i == 0 ? -1.0 : 1.0);
    const double s = n.ndim > i ? static_cast<double>(shape[i]) : 1.0;
    a[i][i] = z;
    a[i][3] = -(s - 1) / 2.0 * z;
  }
  a[3][3] = 1;
  return a;
}

std::string Where(const std::string& path) { return path + ": "; }

}  // namespace

bool IsNiftiName(const std::string& name) {
  std::string l = name;
  std::transform(l.begin(), l.end(), l.begin(), [](unsigned char c) { return std::tolower(c); });
  auto ends = [&](const char* s) {
    const size_t n = std::strlen(s);
    return l.size() > n && l.compare(l.size() - n, n, s) == 0;
  };
  return ends(".nii") || ends(".nii.gz");
}

namespace {

// The fields of a NIfTI-1/2 header that decide whether nifti_clib may see it and where its voxels
// are, read by dspipe from the file's first bytes (nifti1.h / nifti2.h layouts).
struct RawHeader {
  int version = 0;          // 1 or 2
  bool swap = false;        // the file's byte order is not this machine's
  int64_t header_size = 0;  // 348 or 540
  int64_t dim[8] = {};
  int datatype = 0;
  double vox_offset = 0, scl_slope = 0, scl_inter = 0;
  int64_t data_offset = 0;  // where the voxels start (nifti_clib's rule: vox_offset, at least
                            // past the header)
  uint64_t holds = 0;       // the most bytes the file can hold once decompressed
  bool gzip = false;        // a gzip stream (a .gz name and the gzip magic)
};

template <class T>
T Field(const std::string& b, size_t at, bool swap) {
  T v;
  char tmp[sizeof(T)];
  std::memcpy(tmp, b.data() + at, sizeof(T));
  if (swap) std::reverse(tmp, tmp + sizeof(T));
  std::memcpy(&v, tmp, sizeof(T));
  return v;
}

// DEFLATE's largest expansion is 1032:1 (258-byte matches of a code at most 2 bits long), so a
// gzip file of N bytes cannot hold more than this many.
uint64_t GzipCanHold(uint64_t compressed) { return compressed * 1032 + (uint64_t{1} << 16); }

// Reads the header bytes as nifti_clib does (zlib for a .gz name, which passes plain bytes
// through) and checks every field nifti_clib would trust: the header size and magic, dim[0]
// and the dimensions, the data type, vox_offset and the scaling. Nothing is allocated from a
// header's numbers here or later before they are checked against what the file can hold.
Status ReadRawHeader(const std::string& path, RawHeader* h) {
  const std::string bad = Where(path) +
                          "not a readable NIfTI-1/2 header (a truncated or corrupt file, or not "
                          "NIfTI)";
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) return Status::IOErrorErrno("stat", path, errno);
  const bool gz_name = nifti_is_gzfile(path.c_str()) != 0;
  std::string head(544, '\0');
  int64_t got = 0;
  {
    FILE* f = std::fopen(path.c_str(), "rb");
    if (f == nullptr) return Status::IOErrorErrno("open", path, errno);
    unsigned char magic[2] = {0, 0};
    h->gzip = gz_name && std::fread(magic, 1, 2, f) == 2 && magic[0] == 0x1f && magic[1] == 0x8b;
    std::fclose(f);
  }
  if (h->gzip) {
    gzFile g = gzopen(path.c_str(), "rb");
    if (g == nullptr) return Status::IOErrorErrno("open", path, errno);
    got = gzread(g, head.data(), static_cast<unsigned>(head.size()));
    gzclose(g);
  } else {
    FILE* f = std::fopen(path.c_str(), "rb");
    if (f == nullptr) return Status::IOErrorErrno("open", path, errno);
    got = static_cast<int64_t>(std::fread(head.data(), 1, head.size(), f));
    std::fclose(f);
  }
  if (got < 348) return Status::BadInput(bad);
  head.resize(static_cast<size_t>(got));
  const int32_t size = Field<int32_t>(head, 0, false);
  const int32_t swapped = Field<int32_t>(head, 0, true);
  if (size == 348 || swapped == 348) {
    h->version = 1;
    h->swap = size != 348;
    h->header_size = 348;
  } else if (size == 540 || swapped == 540) {
    h->version = 2;
    h->swap = size != 540;
    h->header_size = 540;
  } else {
    return Status::BadInput(bad);
  }
  if (got < h->header_size) return Status::BadInput(bad);
  const bool v1 = h->version == 1;
  const char* magic = head.data() + (v1 ? 344 : 4);
  if (std::memcmp(magic, v1 ? "n+1" : "n+2", 4) != 0) {
    if (std::memcmp(magic, v1 ? "ni1" : "ni2", 4) == 0) {
      return Status::BadInput(Where(path) +
                              "a two-file NIfTI header (its voxels in a separate .img file); "
                              "dspipe reads single-file .nii and .nii.gz volumes");
    }
    return Status::BadInput(Where(path) + "no NIfTI-" + std::to_string(h->version) + " magic ('n+" +
                            std::to_string(h->version) +
                            "'): an Analyze 7.5 header or a corrupt file; dspipe reads "
                            "single-file NIfTI-1/2 (.nii, .nii.gz) volumes");
  }
  const bool sw = h->swap;
  for (int i = 0; i < 8; ++i) {
    h->dim[i] = v1 ? Field<int16_t>(head, 40 + 2 * i, sw) : Field<int64_t>(head, 16 + 8 * i, sw);
  }
  h->datatype = Field<int16_t>(head, v1 ? 70 : 12, sw);
  if (v1) {
    h->vox_offset = Field<float>(head, 108, sw);
    h->scl_slope = Field<float>(head, 112, sw);
    h->scl_inter = Field<float>(head, 116, sw);
  } else {
    h->vox_offset = static_cast<double>(Field<int64_t>(head, 168, sw));
    h->scl_slope = Field<double>(head, 176, sw);
    h->scl_inter = Field<double>(head, 184, sw);
  }
  const int64_t* d = h->dim;
  if (d[0] < 1 || d[0] > 7) {
    return Status::BadInput(Where(path) + "dim[0] is " + std::to_string(d[0]) + ", not 1 to 7");
  }
  for (int i = 1; i <= d[0]; ++i) {
    if (d[i] < 1) {
      return Status::BadInput(Where(path) + "dim[" + std::to_string(i) + "] is " +
                              std::to_string(d[i]));
    }
  }
  // The sizes past dim[0] are not dimensions (they may hold anything).
  auto dsize = [&](int i) { return i <= d[0] ? d[i] : int64_t{1}; };
  const int64_t nx = dsize(1), ny = dsize(2), nz = dsize(3), nt = dsize(4);
  if (dsize(5) > 1 || dsize(6) > 1 || dsize(7) > 1) {
    return Status::BadInput(Where(path) + "a " + std::to_string(d[0]) +
                            "-dimensional volume: dspipe reads 2D, 3D and 4D (channels) NIfTI "
                            "files");
  }
  if (nt > kMaxVolumeChannels) {
    return Status::BadInput(Where(path) + "its 4th dimension holds " + std::to_string(nt) +
                            " volumes; dspipe reads them as channels, at most " +
                            std::to_string(kMaxVolumeChannels) +
                            " (a time series is not a multi-modal image)");
  }
  if (!Supported(h->datatype)) {
    return Status::BadInput(Where(path) + "data type " + TypeName(h->datatype) +
                            " is not one dspipe reads (uint8, int8, uint16, int16, int32, "
                            "uint32, float32, float64); convert the file, e.g. with nibabel");
  }
  // The product without overflow: each factor is at least 1, so stopping past the cap keeps
  // every partial product below 2^61 (fuzz_nifti: a wrapped 64-bit product passed as small).
  uint64_t voxels = 1;
  for (const int64_t f : {nx, ny, nz, nt}) {
    if (f > (int64_t{1} << 31) || voxels > kMaxVolumeVoxels) {
      voxels = kMaxVolumeVoxels + 1;
      break;
    }
    voxels *= static_cast<uint64_t>(f);
  }
  if (voxels > kMaxVolumeVoxels) {
    return Status::BadInput(Where(path) + "the header claims " + std::to_string(nx) + "x" +
                            std::to_string(ny) + "x" + std::to_string(nz) + "x" +
                            std::to_string(nt) + " voxels, more than the " +
                            std::to_string(kMaxVolumeVoxels) + " a volume may hold");
  }
  // nifti_clib casts vox_offset to an integer and reads any extensions up to it, setting
  // aside memory for them: it must be a number, and within what the file can hold.
  h->holds =
      h->gzip ? GzipCanHold(static_cast<uint64_t>(st.st_size)) : static_cast<uint64_t>(st.st_size);
  if (!(h->vox_offset >= 0) || h->vox_offset > static_cast<double>(h->holds) ||
      h->vox_offset > static_cast<double>(INT32_MAX)) {
    return Status::BadInput(Where(path) + "its vox_offset (" + std::to_string(h->vox_offset) +
                            ") is negative, not a number, or past the " + std::to_string(h->holds) +
                            " bytes the file can hold" + (h->gzip ? " decompressed" : "") +
                            ": a corrupt header");
  }
  h->data_offset = std::max(static_cast<int64_t>(h->vox_offset), h->header_size);
  // nifti_clib reads a non-finite scale as 0 (no scaling), as nibabel does; a header that says
  // NaN or infinity is corrupt here, not silently unscaled.
  if (!std::isfinite(h->scl_slope) || (h->scl_slope != 0 && !std::isfinite(h->scl_inter))) {
    return Status::BadInput(Where(path) + "its intensity scaling is not a number (scl_slope " +
                            std::to_string(h->scl_slope) + ", scl_inter " +
                            std::to_string(h->scl_inter) + "): a corrupt header");
  }
  return Status::OK();
}

// The header as dspipe checked it (ReadRawHeader), then as nifti_clib reads it (the affine).
Status ReadInfo(const std::string& path, VolumeInfo* out, RawHeader* raw) {
  Quiet();
  *out = VolumeInfo{};
  out->path = path;
  DSPIPE_RETURN_IF_ERROR(ReadRawHeader(path, raw));
  NiftiPtr n(nifti_image_read(path.c_str(), /*read_data=*/0));
  if (n == nullptr) {
    return Status::BadInput(Where(path) +
                            "not a readable NIfTI-1/2 header (nifti_clib refused it: a truncated "
                            "or corrupt file, or not NIfTI)");
  }
  auto dsize = [&](int i) { return i <= raw->dim[0] ? raw->dim[i] : int64_t{1}; };
  const int64_t nx = dsize(1), ny = dsize(2), nz = dsize(3), nt = dsize(4);
  if (n->datatype != raw->datatype || n->dim[0] != raw->dim[0] ||
      static_cast<uint64_t>(n->nvox) != static_cast<uint64_t>(nx) * static_cast<uint64_t>(ny) *
                                            static_cast<uint64_t>(nz) * static_cast<uint64_t>(nt)) {
    return Status::BadInput(Where(path) +
                            "nifti_clib reads its header differently from dspipe "
                            "(data type or dimensions): a corrupt header");
  }
  out->dim[0] = nx;
  out->dim[1] = ny;
  out->dim[2] = nz;
  out->channels = static_cast<int>(nt);
  out->nifti_datatype = n->datatype;
  out->scl_slope = n->scl_slope;
  out->scl_inter = n->scl_inter;
  out->affine = BestAffine(*n);
  return SetCanonical(out);
}

// The file's voxels (native byte order) as doubles, one at a time.
template <class Fn>
void ForEachValue(int datatype, const uint8_t* data, uint64_t count, Fn&& fn) {
  auto run = [&](const auto* p) {
    for (uint64_t i = 0; i < count; ++i) fn(i, static_cast<double>(p[i]));
  };
  switch (datatype) {
    case DT_UINT8:
      run(data);
      break;
    case DT_INT8:
      run(reinterpret_cast<const int8_t*>(data));
      break;
    case DT_UINT16:
      run(reinterpret_cast<const uint16_t*>(data));
      break;
    case DT_INT16:
      run(reinterpret_cast<const int16_t*>(data));
      break;
    case DT_INT32:
      run(reinterpret_cast<const int32_t*>(data));
      break;
    case DT_UINT32:
      run(reinterpret_cast<const uint32_t*>(data));
      break;
    case DT_FLOAT32:
      run(reinterpret_cast<const float*>(data));
      break;
    case DT_FLOAT64:
      run(reinterpret_cast<const double*>(data));
      break;
    default:
      break;
  }
}

// The smallest and largest value of an integer-typed buffer (no scaling: every value is an
// exact integer), in its own type: one pass the compiler vectorizes.
template <class T>
void IntRange(const T* p, uint64_t count, double* lo, double* hi) {
  T a = std::numeric_limits<T>::max(), b = std::numeric_limits<T>::lowest();
  for (uint64_t i = 0; i < count; ++i) {
    a = p[i] < a ? p[i] : a;
    b = p[i] > b ? p[i] : b;
  }
  *lo = static_cast<double>(a);
  *hi = static_cast<double>(b);
}

void IntRange(int datatype, const uint8_t* data, uint64_t count, double* lo, double* hi) {
  switch (datatype) {
    case DT_UINT8:
      IntRange(data, count, lo, hi);
      break;
    case DT_INT8:
      IntRange(reinterpret_cast<const int8_t*>(data), count, lo, hi);
      break;
    case DT_UINT16:
      IntRange(reinterpret_cast<const uint16_t*>(data), count, lo, hi);
      break;
    case DT_INT16:
      IntRange(reinterpret_cast<const int16_t*>(data), count, lo, hi);
      break;
    case DT_INT32:
      IntRange(reinterpret_cast<const int32_t*>(data), count, lo, hi);
      break;
    case DT_UINT32:
      IntRange(reinterpret_cast<const uint32_t*>(data), count, lo, hi);
      break;
    default:
      break;
  }
}

template <class T>
void Store(int datatype, const uint8_t* data, uint64_t count, double slope, double inter,
           bool scale, std::vector<uint8_t>* out) {
  out->resize(count * sizeof(T));
  T* dst = reinterpret_cast<T*>(out->data());
  if (!scale) {
    ForEachValue(datatype, data, count, [&](uint64_t i, double v) { dst[i] = static_cast<T>(v); });
  } else {
    ForEachValue(datatype, data, count,
                 [&](uint64_t i, double v) { dst[i] = static_cast<T>(v * slope + inter); });
  }
}

bool IsIntegerType(int dt) { return dt != DT_FLOAT32 && dt != DT_FLOAT64; }

int BytesPer(int dt) {
  int nbyper = 0, swapsize = 0;
  nifti_datatype_sizes(dt, &nbyper, &swapsize);
  return nbyper;
}

// 9 significant digits: a float32 header field as it is.
std::string Num9(double v) {
  char b[64];
  std::snprintf(b, sizeof b, "%.9g", v);
  return b;
}

// A file mapped read-only (the compressed bytes of a .nii.gz).
class Mapped {
 public:
  ~Mapped() {
    if (p_ != nullptr) ::munmap(p_, n_);
  }
  Status Open(const std::string& path) {
    const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) return Status::IOErrorErrno("open", path, errno);
    struct stat st {};
    if (::fstat(fd, &st) != 0) {
      const int e = errno;
      ::close(fd);
      return Status::IOErrorErrno("stat", path, e);
    }
    n_ = static_cast<size_t>(st.st_size);
    if (n_ > 0) {
      void* p = ::mmap(nullptr, n_, PROT_READ, MAP_PRIVATE, fd, 0);
      if (p == MAP_FAILED) {
        const int e = errno;
        ::close(fd);
        return Status::IOErrorErrno("mmap", path, e);
      }
      p_ = p;
      ::madvise(p_, n_, MADV_SEQUENTIAL);
    }
    ::close(fd);
    return Status::OK();
  }
  const uint8_t* data() const { return static_cast<const uint8_t*>(p_); }
  size_t size() const { return n_; }

 private:
  void* p_ = nullptr;
  size_t n_ = 0;
};

struct DeflateFree {
  void operator()(libdeflate_decompressor* d) const { libdeflate_free_decompressor(d); }
};

// Inflates gzip members from `in` into out[0, want): libdeflate (whole members at a time, about
// twice zlib's speed), member after member; zlib for a member that holds more than is wanted
// (bytes after the voxels). Bytes after the last member that are not gzip are ignored, as zlib's
// gzread does. Returns the bytes produced (fewer than `want`: the stream holds fewer or is
// corrupt).
size_t Gunzip(const uint8_t* in, size_t in_size, uint8_t* out, size_t want) {
  std::unique_ptr<libdeflate_decompressor, DeflateFree> d(libdeflate_alloc_decompressor());
  if (d == nullptr) return 0;
  size_t in_pos = 0, out_pos = 0;
  while (out_pos < want && in_pos < in_size) {
    size_t used = 0, made = 0;
    const libdeflate_result r = libdeflate_gzip_decompress_ex(
        d.get(), in + in_pos, in_size - in_pos, out + out_pos, want - out_pos, &used, &made);
    if (r == LIBDEFLATE_SUCCESS) {
      in_pos += used;
      out_pos += made;
      continue;
    }
    if (r != LIBDEFLATE_INSUFFICIENT_SPACE) break;  // corrupt, or not gzip (trailing bytes)
    // This member holds more than is wanted: zlib stops where asked.
    z_stream z{};
    if (inflateInit2(&z, 15 + 16) != Z_OK) break;
    z.next_in = const_cast<uint8_t*>(in + in_pos);
    z.next_out = out + out_pos;
    size_t left_in = in_size - in_pos, left_out = want - out_pos;
    int zr = Z_OK;
    while (zr == Z_OK && left_out > 0) {
      const uInt ai = static_cast<uInt>(std::min<size_t>(left_in, 1u << 30));
      const uInt ao = static_cast<uInt>(std::min<size_t>(left_out, 1u << 30));
      z.avail_in = ai;
      z.avail_out = ao;
      zr = inflate(&z, Z_NO_FLUSH);
      left_in -= ai - z.avail_in;
      left_out -= ao - z.avail_out;
      if (zr == Z_BUF_ERROR && left_in == 0) break;
    }
    inflateEnd(&z);
    out_pos = want - left_out;
    break;
  }
  return out_pos;
}

// `n` bytes in *b whose contents are about to be overwritten: its memory reused when its capacity
// is enough (only growth beyond its size is zeroed), else a new buffer (the old contents are not
// copied).
void SizeForOverwrite(uint64_t n, std::vector<uint8_t>* b) {
  if (b->capacity() < n) std::vector<uint8_t>().swap(*b);
  b->resize(n);
}

// The voxels' bytes (need of them, from the header's data offset) in the machine's byte order,
// with non-finite floats as 0 (nifti_clib's nifti_read_buffer rule, kept). Nothing is allocated
// for a header whose voxels the file cannot hold.
Status ReadVoxels(const std::string& path, const RawHeader& h, uint64_t need,
                  std::vector<uint8_t>* out) {
  const uint64_t off = static_cast<uint64_t>(h.data_offset);
  const Status shortfall = Status::BadInput(
      Where(path) + "its voxels could not be read: the header claims " + std::to_string(need) +
      " bytes of data and the file (or its gzip stream) holds fewer or is corrupt");
  if (off > h.holds || need > h.holds - off) return shortfall;
  if (h.gzip) {
    Mapped m;
    DSPIPE_RETURN_IF_ERROR(m.Open(path));
    if (off + need > GzipCanHold(m.size())) return shortfall;
    SizeForOverwrite(off + need, out);
    if (Gunzip(m.data(), m.size(), out->data(), out->size()) != out->size()) return shortfall;
    out->erase(out->begin(), out->begin() + static_cast<std::ptrdiff_t>(off));
  } else {
    const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) return Status::IOErrorErrno("open", path, errno);
    struct stat st {};
    if (::fstat(fd, &st) != 0 || static_cast<uint64_t>(st.st_size) < off + need) {
      ::close(fd);
      return shortfall;
    }
    SizeForOverwrite(need, out);
    uint64_t done = 0;
    while (done < need) {
      const ssize_t r = ::pread(fd, out->data() + done, std::min<uint64_t>(need - done, 1u << 30),
                                static_cast<off_t>(off + done));
      if (r < 0 && errno == EINTR) continue;
      if (r <= 0) break;
      done += static_cast<uint64_t>(r);
    }
    ::close(fd);
    if (done != need) return shortfall;
  }
  const int per = BytesPer(h.datatype);
  if (h.swap && per > 1) {
    for (uint64_t i = 0; i + per <= need; i += per) std::reverse(&(*out)[i], &(*out)[i] + per);
  }
  if (h.datatype == DT_FLOAT32) {
    float* f = reinterpret_cast<float*>(out->data());
    for (uint64_t i = 0; i < need / 4; ++i) f[i] = std::isfinite(f[i]) ? f[i] : 0.0f;
  } else if (h.datatype == DT_FLOAT64) {
    double* f = reinterpret_cast<double*>(out->data());
    for (uint64_t i = 0; i < need / 8; ++i) f[i] = std::isfinite(f[i]) ? f[i] : 0.0;
  }
  return Status::OK();
}

}  // namespace

Status ReadNiftiInfo(const std::string& path, VolumeInfo* out) {
  RawHeader raw;
  return ReadInfo(path, out, &raw);
}

Status ReadNifti(const std::string& path, bool label, Volume* out) {
  std::vector<uint8_t> bytes = std::move(out->data);  // memory to reuse (volume.h)
  *out = Volume{};
  RawHeader raw;
  DSPIPE_RETURN_IF_ERROR(ReadInfo(path, &out->info, &raw));
  const VolumeInfo& info = out->info;
  if (label && info.channels != 1) {
    return Status::BadInput(Where(path) + "a label volume with " + std::to_string(info.channels) +
                            " channels (4D); labels are one 3D map of class ids");
  }
  const uint64_t count = static_cast<uint64_t>(info.dim[0] * info.dim[1] * info.dim[2]) *
                         static_cast<uint64_t>(info.channels);
  DSPIPE_RETURN_IF_ERROR(
      ReadVoxels(path, raw, count * static_cast<uint64_t>(BytesPer(raw.datatype)), &bytes));
  const int dt = raw.datatype;
  const uint8_t* data = bytes.data();
  const bool scale = info.scaled();
  const double slope = info.scl_slope, inter = info.scl_inter;
  // The file's own type kept as it is: the voxels are the sample buffer.
  if (!scale &&
      ((!label && (dt == DT_UINT8 || dt == DT_UINT16 || dt == DT_INT16 || dt == DT_FLOAT32)) ||
       (label && dt == DT_UINT8))) {
    out->type = dt == DT_UINT8    ? SampleType::kUint8
                : dt == DT_UINT16 ? SampleType::kUint16
                : dt == DT_INT16  ? SampleType::kInt16
                                  : SampleType::kFloat32;
    out->data = std::move(bytes);
    return Status::OK();
  }
  double lo = std::numeric_limits<double>::infinity(), hi = -lo;
  bool integral = true;
  uint64_t bad = UINT64_MAX;
  double bad_value = 0;
  if (!scale && IsIntegerType(dt)) {
    IntRange(dt, data, count, &lo, &hi);  // integers, all finite
  } else {
    ForEachValue(dt, data, count, [&](uint64_t i, double v) {
      const double x = scale ? v * slope + inter : v;
      if (std::isnan(x) || std::isinf(x)) {
        if (bad == UINT64_MAX) {
          bad = i;
          bad_value = x;
        }
        integral = false;
        return;
      }
      lo = std::min(lo, x);
      hi = std::max(hi, x);
      if (integral && x != std::floor(x)) {
        integral = false;
        if (label && bad == UINT64_MAX) {
          bad = i;
          bad_value = x;
        }
      }
    });
  }
  if (count == 0) lo = hi = 0;
  auto voxel = [&](uint64_t i) {
    const uint64_t nx = info.dim[0], ny = info.dim[1], nz = info.dim[2];
    std::string s = "voxel (" + std::to_string(i % nx) + ", " + std::to_string(i / nx % ny) + ", " +
                    std::to_string(i / nx / ny % nz);
    if (info.channels > 1) s += ", " + std::to_string(i / nx / ny / nz);
    return s + ")";
  };
  if (label) {
    if (bad != UINT64_MAX || lo < 0 || hi > 65535) {
      std::string what;
      if (bad != UINT64_MAX) {
        what = voxel(bad) + " holds " + Num9(bad_value) + ", not an integer";
      } else {
        what = "its values run from " + Num9(lo) + " to " + Num9(hi) + ", outside 0..65535";
      }
      return Status::BadInput(Where(path) + "not a label map: " + what +
                              " (labels are class ids 0..65535)");
    }
    if (hi <= 255) {
      out->type = SampleType::kUint8;
      Store<uint8_t>(dt, data, count, slope, inter, scale, &out->data);
    } else if (!scale && dt == DT_UINT16) {
      out->type = SampleType::kUint16;
      out->data = std::move(bytes);
    } else {
      out->type = SampleType::kUint16;
      Store<uint16_t>(dt, data, count, slope, inter, scale, &out->data);
    }
    return Status::OK();
  }
  SampleType t = SampleType::kFloat32;
  if (!scale && dt == DT_INT8) {
    t = SampleType::kInt16;
  } else if (!scale && dt == DT_FLOAT64) {
    t = SampleType::kFloat32;
  } else if (IsIntegerType(dt) && integral && bad == UINT64_MAX) {
    // Wider integers, or integers scaled by integers.
    DSPIPE_RETURN_IF_ERROR(ExactIntegerType(path, lo, hi, &t));
  }
  out->type = t;
  switch (t) {
    case SampleType::kUint8:
      Store<uint8_t>(dt, data, count, slope, inter, scale, &out->data);
      break;
    case SampleType::kUint16:
      Store<uint16_t>(dt, data, count, slope, inter, scale, &out->data);
      break;
    case SampleType::kInt16:
      Store<int16_t>(dt, data, count, slope, inter, scale, &out->data);
      break;
    case SampleType::kFloat32:
      Store<float>(dt, data, count, slope, inter, scale, &out->data);
      break;
  }
  return Status::OK();
}

}  // namespace dspipe::volume
