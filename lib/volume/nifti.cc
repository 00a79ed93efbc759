// NIfTI-1/2 volumes through nifti_clib (Debian's libnifti2-dev): header checks, nibabel's best
// affine, the closest canonical (RAS) orientation, and the voxels as one sample type.
#include <nifti2_io.h>

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

Status ReadNiftiInfo(const std::string& path, VolumeInfo* out) {
  Quiet();
  *out = VolumeInfo{};
  out->path = path;
  {
    FILE* f = std::fopen(path.c_str(), "rb");
    if (f == nullptr) return Status::IOErrorErrno("open", path, errno);
    std::fclose(f);
  }
  NiftiPtr n(nifti_image_read(path.c_str(), /*read_data=*/0));
  if (n == nullptr) {
    return Status::BadInput(Where(path) +
                            "not a readable NIfTI-1/2 header (nifti_clib refused it: a truncated "
                            "or corrupt file, or not NIfTI)");
  }
  const int64_t* d = n->dim;
  if (d[0] < 1 || d[0] > 7) {
    return Status::BadInput(Where(path) + "dim[0] is " + std::to_string(d[0]) +
                            ", not 1 to 7");
  }
  for (int i = 1; i <= d[0]; ++i) {
    if (d[i] < 1) {
      return Status::BadInput(Where(path) + "dim[" + std::to_string(i) + "] is " +
                              std::to_string(d[i]));
    }
  }
  // The sizes past dim[0] are not dimensions (nifti_clib's nx..nw may hold anything there).
  auto size = [&](int i) { return i <= d[0] ? d[i] : int64_t{1}; };
  const int64_t nx = size(1), ny = size(2), nz = size(3), nt = size(4);
  if (size(5) > 1 || size(6) > 1 || size(7) > 1) {
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
  if (!Supported(n->datatype)) {
    return Status::BadInput(Where(path) + "data type " + TypeName(n->datatype) +
                            " is not one dspipe reads (uint8, int8, uint16, int16, int32, "
                            "uint32, float32, float64); convert the file, e.g. with nibabel");
  }
  const uint64_t voxels = static_cast<uint64_t>(nx) * static_cast<uint64_t>(ny) *
                          static_cast<uint64_t>(nz) * static_cast<uint64_t>(nt);
  if (nx > (int64_t{1} << 31) || ny > (int64_t{1} << 31) || nz > (int64_t{1} << 31) ||
      voxels > kMaxVolumeVoxels) {
    return Status::BadInput(Where(path) + "the header claims " + std::to_string(nx) + "x" +
                            std::to_string(ny) + "x" + std::to_string(nz) + "x" +
                            std::to_string(nt) + " voxels, more than the " +
                            std::to_string(kMaxVolumeVoxels) + " a volume may hold");
  }
  // nifti_clib reads a non-finite scale as 0 (no scaling), as nibabel does; a header that says
  // NaN or infinity is corrupt here, not silently unscaled: the raw header's fields.
  {
    int nver = 0;
    void* raw = nifti_read_header(path.c_str(), &nver, 0);
    double slope = 0, inter = 0;
    if (raw != nullptr && nver == 1) {
      slope = static_cast<const nifti_1_header*>(raw)->scl_slope;
      inter = static_cast<const nifti_1_header*>(raw)->scl_inter;
    } else if (raw != nullptr && nver == 2) {
      slope = static_cast<const nifti_2_header*>(raw)->scl_slope;
      inter = static_cast<const nifti_2_header*>(raw)->scl_inter;
    }
    std::free(raw);
    if (!std::isfinite(slope) || (slope != 0 && !std::isfinite(inter))) {
      return Status::BadInput(Where(path) + "its intensity scaling is not a number (scl_slope " +
                              std::to_string(slope) + ", scl_inter " + std::to_string(inter) +
                              "): a corrupt header");
    }
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

namespace {

// The file's voxels (native byte order after nifti_image_load) as doubles, one at a time.
template <class Fn>
void ForEachValue(const nifti_image& n, uint64_t count, Fn&& fn) {
  auto run = [&](const auto* p) {
    for (uint64_t i = 0; i < count; ++i) fn(i, static_cast<double>(p[i]));
  };
  switch (n.datatype) {
    case DT_UINT8: run(static_cast<const uint8_t*>(n.data)); break;
    case DT_INT8: run(static_cast<const int8_t*>(n.data)); break;
    case DT_UINT16: run(static_cast<const uint16_t*>(n.data)); break;
    case DT_INT16: run(static_cast<const int16_t*>(n.data)); break;
    case DT_INT32: run(static_cast<const int32_t*>(n.data)); break;
    case DT_UINT32: run(static_cast<const uint32_t*>(n.data)); break;
    case DT_FLOAT32: run(static_cast<const float*>(n.data)); break;
    case DT_FLOAT64: run(static_cast<const double*>(n.data)); break;
    default: break;
  }
}

template <class T>
void Store(const nifti_image& n, uint64_t count, double slope, double inter, bool scale,
           std::vector<uint8_t>* out) {
  out->resize(count * sizeof(T));
  T* dst = reinterpret_cast<T*>(out->data());
  ForEachValue(n, count, [&](uint64_t i, double v) {
    dst[i] = static_cast<T>(scale ? v * slope + inter : v);
  });
}

bool IsIntegerType(int dt) { return dt != DT_FLOAT32 && dt != DT_FLOAT64; }

std::string Num(double v) {
  char b[64];
  std::snprintf(b, sizeof b, "%.9g", v);
  return b;
}

}  // namespace

Status ReadNifti(const std::string& path, bool label, Volume* out) {
  *out = Volume{};
  DSPIPE_RETURN_IF_ERROR(ReadNiftiInfo(path, &out->info));
  const VolumeInfo& info = out->info;
  if (label && info.channels != 1) {
    return Status::BadInput(Where(path) + "a label volume with " + std::to_string(info.channels) +
                            " channels (4D); labels are one 3D map of class ids");
  }
  NiftiPtr n(nifti_image_read(path.c_str(), 0));
  if (n == nullptr) return Status::BadInput(Where(path) + "its header could not be read again");
  if (nifti_image_load(n.get()) != 0 || n->data == nullptr) {
    return Status::BadInput(Where(path) + "its voxels could not be read: the header claims " +
                            std::to_string(static_cast<uint64_t>(n->nvox) * n->nbyper) +
                            " bytes of data and the file (or its gzip stream) holds fewer or is "
                            "corrupt");
  }
  const uint64_t count = static_cast<uint64_t>(info.dim[0] * info.dim[1] * info.dim[2]) *
                         static_cast<uint64_t>(info.channels);
  if (static_cast<uint64_t>(n->nvox) != count) {
    return Status::BadInput(Where(path) + "its header's voxel count (" + std::to_string(n->nvox) +
                            ") is not its dimensions' product (" + std::to_string(count) + ")");
  }
  const bool scale = info.scaled();
  const double slope = info.scl_slope, inter = info.scl_inter;
  double lo = std::numeric_limits<double>::infinity(), hi = -lo;
  bool integral = true;
  uint64_t bad = UINT64_MAX;
  double bad_value = 0;
  ForEachValue(*n, count, [&](uint64_t i, double v) {
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
  if (count == 0) lo = hi = 0;
  auto voxel = [&](uint64_t i) {
    const uint64_t nx = info.dim[0], ny = info.dim[1], nz = info.dim[2];
    std::string s = "voxel (" + std::to_string(i % nx) + ", " + std::to_string(i / nx % ny) +
                    ", " + std::to_string(i / nx / ny % nz);
    if (info.channels > 1) s += ", " + std::to_string(i / nx / ny / nz);
    return s + ")";
  };
  if (label) {
    if (bad != UINT64_MAX || lo < 0 || hi > 65535) {
      std::string what;
      if (bad != UINT64_MAX) {
        what = voxel(bad) + " holds " + Num(bad_value) + ", not an integer";
      } else {
        what = "its values run from " + Num(lo) + " to " + Num(hi) + ", outside 0..65535";
      }
      return Status::BadInput(Where(path) + "not a label map: " + what +
                              " (labels are class ids 0..65535)");
    }
    if (hi <= 255) {
      out->type = SampleType::kUint8;
      Store<uint8_t>(*n, count, slope, inter, scale, &out->data);
    } else {
      out->type = SampleType::kUint16;
      Store<uint16_t>(*n, count, slope, inter, scale, &out->data);
    }
    return Status::OK();
  }
  const int dt = n->datatype;
  SampleType t = SampleType::kFloat32;
  if (!scale && dt == DT_UINT8) {
    t = SampleType::kUint8;
  } else if (!scale && dt == DT_UINT16) {
    t = SampleType::kUint16;
  } else if (!scale && (dt == DT_INT16 || dt == DT_INT8)) {
    t = SampleType::kInt16;
  } else if (!scale && (dt == DT_FLOAT32 || dt == DT_FLOAT64)) {
    t = SampleType::kFloat32;
  } else if (IsIntegerType(dt) && integral && bad == UINT64_MAX) {
    // Wider integers, or integers scaled by integers.
    DSPIPE_RETURN_IF_ERROR(ExactIntegerType(path, lo, hi, &t));
  }
  out->type = t;
  switch (t) {
    case SampleType::kUint8: Store<uint8_t>(*n, count, slope, inter, scale, &out->data); break;
    case SampleType::kUint16: Store<uint16_t>(*n, count, slope, inter, scale, &out->data); break;
    case SampleType::kInt16: Store<int16_t>(*n, count, slope, inter, scale, &out->data); break;
    case SampleType::kFloat32: Store<float>(*n, count, slope, inter, scale, &out->data); break;
  }
  return Status::OK();
}

}  // namespace dspipe::volume
