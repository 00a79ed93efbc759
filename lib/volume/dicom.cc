// SPDX-License-Identifier: Apache-2.0
// DICOM series (volume.h) through Debian's DCMTK: one folder of one-frame files, ordered by
// ImagePositionPatient along the slice normal, checked to be one evenly spaced stack, with each
// slice's rescale applied. DCMTK parses the files and decodes compressed pixels (RLE, JPEG,
// JPEG-LS); dspipe orders, checks and places them. (GDCM was tried first: Debian builds it with
// assertions, and the DICOM fuzzer aborted the process through one within 20 inputs.)
#include <dcmtk/config/osconfig.h>  // first, as DCMTK requires
#include <dcmtk/dcmdata/dcdeftag.h>
#include <dcmtk/dcmdata/dcfilefo.h>
#include <dcmtk/dcmdata/dcrledrg.h>
#include <dcmtk/dcmdata/dcxfer.h>
#include <dcmtk/dcmjpeg/djdecode.h>
#include <dcmtk/dcmjpls/djdecode.h>
#include <dcmtk/oflog/oflog.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <map>
#include <mutex>
#include <set>

#include "volume/volume.h"

namespace dspipe::volume {

namespace {

namespace fs = std::filesystem;

// DCMTK logs on stderr unless told otherwise (dspipe's errors say it instead), and decodes
// compressed pixels once its decoders are registered: both once per process.
void Init() {
  static std::once_flag once;
  std::call_once(once, [] {
    OFLog::configure(OFLogger::OFF_LOG_LEVEL);
    DcmRLEDecoderRegistration::registerCodecs();
    DJDecoderRegistration::registerCodecs();
    DJLSDecoderRegistration::registerCodecs();
  });
}

// One file of a series: what its header says (and its pixels once read).
struct DicomSlice {
  std::string file;
  std::string name;    // the file's name in its folder (messages name the folder, then it)
  std::string series;  // SeriesInstanceUID
  int rows = 0, cols = 0, samples = 1, frames = 1;
  int bits_allocated = 0, bits_stored = 0, pixel_representation = 0;
  bool has_iop = false, has_ipp = false, has_spacing = false;
  double iop[6] = {1, 0, 0, 0, 1, 0};
  double ipp[3] = {0, 0, 0};
  double spacing[2] = {1, 1};  // PixelSpacing: between rows, between columns (mm)
  double thickness = 0;        // SpacingBetweenSlices, else SliceThickness (one-slice series)
  double slope = 1, inter = 0;
  double position = 0;  // ImagePositionPatient along the slice normal
  std::vector<char> pixels;
};

std::string Trim(std::string s) {
  while (!s.empty() && (s.back() == ' ' || s.back() == '\0')) s.pop_back();
  size_t b = 0;
  while (b < s.size() && s[b] == ' ') ++b;
  return s.substr(b);
}

// A decimal string's values (DS, IS: backslash-separated); false when one is not a finite
// number.
bool Numbers(const std::string& text, std::vector<double>* out) {
  out->clear();
  size_t start = 0;
  while (start <= text.size()) {
    const size_t end = std::min(text.find('\\', start), text.size());
    const std::string t = Trim(text.substr(start, end - start));
    char* stop = nullptr;
    errno = 0;
    const double v = std::strtod(t.c_str(), &stop);
    if (t.empty() || *stop != '\0' || errno == ERANGE || !std::isfinite(v)) return false;
    out->push_back(v);
    start = end + 1;
  }
  return true;
}

std::string Num(double v) {
  char b[64];
  std::snprintf(b, sizeof b, "%.6g", v);
  return b;
}

// Reads the header of `s.file` (and its pixels when `pixels`). kBadInput naming the folder and
// the file when it is not a one-frame grey DICOM image DCMTK can read.
Status ReadSlice(const std::string& dir, bool pixels, DicomSlice* s) {
  const std::string where = dir + ": " + s->name + ": ";
  Init();
  try {
    // The header: values longer than 4 KiB (the pixels) are left in the file unless asked for.
    DcmFileFormat file;
    const OFCondition loaded = file.loadFile(s->file.c_str(), EXS_Unknown, EGL_noChange,
                                             pixels ? DCM_MaxReadLength : 4096);
    if (loaded.bad()) {
      return Status::BadInput(where + "not a DICOM file DCMTK can read (" +
                              std::string(loaded.text()) + ": corrupt, truncated or not DICOM)");
    }
    DcmDataset* ds = file.getDataset();
    auto text = [&](const DcmTagKey& key) {
      OFString value;
      return ds->findAndGetOFStringArray(key, value).good() ? Trim(value.c_str()) : std::string();
    };
    std::vector<double> v;
    // A number (or numbers) the header may hold: `need` values when present.
    auto numbers = [&](const DcmTagKey& key, const char* name, size_t need, bool* has,
                       double* dst) -> Status {
      const std::string t = text(key);
      if (t.empty()) return Status::OK();
      if (!Numbers(t, &v) || v.size() != need) {
        return Status::BadInput(where + name + " is '" + t + "', not " + std::to_string(need) +
                                " number" + (need > 1 ? "s" : ""));
      }
      std::copy(v.begin(), v.end(), dst);
      if (has != nullptr) *has = true;
      return Status::OK();
    };
    // An integer field (US or IS) within lo..hi.
    auto integer = [&](const DcmTagKey& key, const char* name, int lo, int hi, bool* has,
                       int* dst) -> Status {
      double d = *dst;
      DSPIPE_RETURN_IF_ERROR(numbers(key, name, 1, has, &d));
      if (d != std::floor(d) || d < lo || d > hi) {
        return Status::BadInput(where + name + " is " + Num(d) + ", not an integer " +
                                std::to_string(lo) + ".." + std::to_string(hi));
      }
      *dst = static_cast<int>(d);
      return Status::OK();
    };
    bool has_rows = false, has_cols = false;
    DSPIPE_RETURN_IF_ERROR(integer(DCM_Rows, "Rows", 0, 65535, &has_rows, &s->rows));
    DSPIPE_RETURN_IF_ERROR(integer(DCM_Columns, "Columns", 0, 65535, &has_cols, &s->cols));
    if (!has_rows || !has_cols || s->rows < 1 || s->cols < 1) {
      return Status::BadInput(where +
                              "not a DICOM image (no Rows/Columns: a DICOMDIR, a report or "
                              "another non-image object); keep only the series' image files "
                              "in its folder");
    }
    DSPIPE_RETURN_IF_ERROR(
        integer(DCM_SamplesPerPixel, "SamplesPerPixel", 1, 4, nullptr, &s->samples));
    DSPIPE_RETURN_IF_ERROR(
        integer(DCM_NumberOfFrames, "NumberOfFrames", 1, INT32_MAX, nullptr, &s->frames));
    DSPIPE_RETURN_IF_ERROR(
        integer(DCM_BitsAllocated, "BitsAllocated", 0, 64, nullptr, &s->bits_allocated));
    s->bits_stored = s->bits_allocated;
    DSPIPE_RETURN_IF_ERROR(integer(DCM_BitsStored, "BitsStored", 0, 64, nullptr, &s->bits_stored));
    DSPIPE_RETURN_IF_ERROR(integer(DCM_PixelRepresentation, "PixelRepresentation", 0, 1, nullptr,
                                   &s->pixel_representation));
    DSPIPE_RETURN_IF_ERROR(
        numbers(DCM_ImageOrientationPatient, "ImageOrientationPatient", 6, &s->has_iop, s->iop));
    DSPIPE_RETURN_IF_ERROR(
        numbers(DCM_ImagePositionPatient, "ImagePositionPatient", 3, &s->has_ipp, s->ipp));
    DSPIPE_RETURN_IF_ERROR(
        numbers(DCM_PixelSpacing, "PixelSpacing", 2, &s->has_spacing, s->spacing));
    DSPIPE_RETURN_IF_ERROR(
        numbers(DCM_SliceThickness, "SliceThickness", 1, nullptr, &s->thickness));
    DSPIPE_RETURN_IF_ERROR(
        numbers(DCM_SpacingBetweenSlices, "SpacingBetweenSlices", 1, nullptr, &s->thickness));
    DSPIPE_RETURN_IF_ERROR(numbers(DCM_RescaleSlope, "RescaleSlope", 1, nullptr, &s->slope));
    DSPIPE_RETURN_IF_ERROR(
        numbers(DCM_RescaleIntercept, "RescaleIntercept", 1, nullptr, &s->inter));
    s->series = text(DCM_SeriesInstanceUID);
    if (s->samples != 1) {
      return Status::BadInput(where + "SamplesPerPixel is " + std::to_string(s->samples) + " (" +
                              text(DCM_PhotometricInterpretation) +
                              "): a colour image; dspipe reads grey (CT, MR) series");
    }
    if (s->frames != 1) {
      return Status::BadInput(where + "a multi-frame file (NumberOfFrames " +
                              std::to_string(s->frames) +
                              "); dspipe reads series of one-frame files (convert an enhanced "
                              "multi-frame object to NIfTI first, e.g. with dcm2niix)");
    }
    if (s->bits_allocated != 8 && s->bits_allocated != 16 && s->bits_allocated != 32) {
      return Status::BadInput(where + "BitsAllocated is " + std::to_string(s->bits_allocated) +
                              "; dspipe reads 8-, 16- and 32-bit integer pixels");
    }
    if (s->bits_stored < 1 || s->bits_stored > s->bits_allocated) {
      return Status::BadInput(where + "BitsStored " + std::to_string(s->bits_stored) +
                              " does not fit BitsAllocated " + std::to_string(s->bits_allocated));
    }
    if (!s->has_ipp || !s->has_iop) {
      return Status::BadInput(where +
                              "no ImagePositionPatient or ImageOrientationPatient: its place in "
                              "the volume is unknown (a localizer or secondary capture?)");
    }
    if (s->slope == 0) return Status::BadInput(where + "RescaleSlope is 0");
    if (s->has_spacing && (s->spacing[0] <= 0 || s->spacing[1] <= 0)) {
      return Status::BadInput(where + "PixelSpacing is not positive");
    }
    const uint64_t plane = static_cast<uint64_t>(s->rows) * static_cast<uint64_t>(s->cols);
    if (plane > kMaxVolumeVoxels) {
      return Status::BadInput(where + std::to_string(s->cols) + "x" + std::to_string(s->rows) +
                              " pixels: more than the " + std::to_string(kMaxVolumeVoxels) +
                              " voxels a volume may hold");
    }
    const uint64_t bytes = plane * static_cast<uint64_t>(s->bits_allocated / 8);
    DcmElement* pixel_data = nullptr;
    if (ds->findAndGetElement(DCM_PixelData, pixel_data).bad() || pixel_data == nullptr) {
      return Status::BadInput(where + "no pixel data (a DICOM object that is not an image)");
    }
    const DcmXfer xfer(ds->getOriginalXfer());
    // Uncompressed pixels are exactly the image (padded to an even length); compressed ones
    // are checked once decoded.
    if (!xfer.isEncapsulated() && pixel_data->getLength() != bytes + (bytes & 1)) {
      return Status::BadInput(where + "its pixel data holds " +
                              std::to_string(pixel_data->getLength()) + " bytes, not the " +
                              std::to_string(bytes) + " its " + std::to_string(s->cols) + "x" +
                              std::to_string(s->rows) + " " + std::to_string(s->bits_allocated) +
                              "-bit header describes");
    }
    if (!pixels) return Status::OK();
    if (xfer.isEncapsulated()) {
      const OFCondition c = ds->chooseRepresentation(EXS_LittleEndianExplicit, nullptr);
      if (c.bad() || !ds->canWriteXfer(EXS_LittleEndianExplicit)) {
        return Status::BadInput(where + "its pixels could not be decoded (transfer syntax " +
                                xfer.getXferName() + ": " + c.text() +
                                "; DCMTK decodes RLE, JPEG and JPEG-LS, not JPEG 2000)");
      }
    }
    // The samples as bytes, little endian (DCMTK holds OW data in the host's order: x86 and
    // arm64 are little endian).
    const Uint8* p = nullptr;
    unsigned long count = 0;
    const OFCondition got = ds->findAndGetUint8Array(DCM_PixelData, p, &count);
    if (got.bad() || p == nullptr || count < bytes) {
      return Status::BadInput(where + "its pixel data holds " + std::to_string(count) +
                              " bytes once read, not the " + std::to_string(bytes) +
                              " its header describes (" + got.text() + ")");
    }
    s->pixels.assign(reinterpret_cast<const char*>(p), reinterpret_cast<const char*>(p) + bytes);
  } catch (const std::exception& e) {
    return Status::BadInput(where + "DCMTK failed reading it: " + e.what());
  }
  return Status::OK();
}

// The series' files, in name order: every regular file whose name does not start with '.',
// except DICOMDIR.
Status ListSeries(const std::string& dir, std::vector<std::string>* out) {
  std::error_code ec;
  fs::directory_iterator it(dir, ec);
  if (ec) return Status::IOError("list " + dir + ": " + ec.message());
  for (const fs::directory_entry& e : it) {
    const std::string name = e.path().filename().string();
    if (name.empty() || name[0] == '.' || name == "DICOMDIR") continue;
    if (e.is_regular_file(ec)) out->push_back(e.path().string());
  }
  std::sort(out->begin(), out->end());
  if (out->empty()) return Status::BadInput(dir + ": a DICOM series folder with no files");
  return Status::OK();
}

double Dot(const double* a, const double* b) { return a[0] * b[0] + a[1] * b[1] + a[2] * b[2]; }

// Reads every file of the series (headers, or headers and pixels), checks that they make one
// evenly spaced stack and orders them along the slice normal; fills `info`.
Status ReadSeries(const std::string& dir, bool pixels, std::vector<DicomSlice>* slices,
                  VolumeInfo* info) {
  *info = VolumeInfo{};
  info->path = dir;
  info->dicom = true;
  std::vector<std::string> files;
  DSPIPE_RETURN_IF_ERROR(ListSeries(dir, &files));
  slices->assign(files.size(), DicomSlice{});
  const std::string where = dir + ": ";
  for (size_t i = 0; i < files.size(); ++i) {
    (*slices)[i].file = files[i];
    (*slices)[i].name = fs::path(files[i]).filename().string();
    DSPIPE_RETURN_IF_ERROR(ReadSlice(dir, pixels, &(*slices)[i]));
    const DicomSlice& s = (*slices)[i];
    const uint64_t voxels = static_cast<uint64_t>(s.rows) * static_cast<uint64_t>(s.cols) *
                            static_cast<uint64_t>(files.size());
    if (voxels > kMaxVolumeVoxels) {
      return Status::BadInput(where + std::to_string(files.size()) + " slices of " +
                              std::to_string(s.cols) + "x" + std::to_string(s.rows) +
                              " pixels: more than the " + std::to_string(kMaxVolumeVoxels) +
                              " voxels a volume may hold");
    }
  }
  // One series, one grid, one pixel format.
  const DicomSlice& first = slices->front();
  std::map<std::string, std::vector<std::string>> by_series;
  for (const DicomSlice& s : *slices) by_series[s.series].push_back(s.name);
  if (by_series.size() > 1) {
    std::string list;
    for (const auto& [uid, f] : by_series) {
      list += (list.empty() ? "" : "; ") + std::string("'") + uid +
              "': " + std::to_string(f.size()) + (f.size() == 1 ? " file" : " files") + ", e.g. " +
              f[0];
    }
    return Status::BadInput(where + "holds " + std::to_string(by_series.size()) +
                            " series (SeriesInstanceUID " + list +
                            "); put each series in its own folder");
  }
  for (const DicomSlice& s : *slices) {
    auto differ = [&](const std::string& what, const std::string& a, const std::string& b) {
      return Status::BadInput(where + "its slices differ in " + what + ": " + a + " in " +
                              first.name + ", " + b + " in " + s.name +
                              " (one series folder holds one stack of equal slices)");
    };
    if (s.rows != first.rows || s.cols != first.cols) {
      return differ("size", std::to_string(first.cols) + "x" + std::to_string(first.rows),
                    std::to_string(s.cols) + "x" + std::to_string(s.rows));
    }
    for (int k = 0; k < 6; ++k) {
      if (std::fabs(s.iop[k] - first.iop[k]) > 1e-4) {
        auto iop = [](const DicomSlice& x) {
          std::string t;
          for (int m = 0; m < 6; ++m) t += (m ? "\\" : "") + Num(x.iop[m]);
          return t;
        };
        return differ("orientation (ImageOrientationPatient)", iop(first), iop(s));
      }
    }
    for (int k = 0; k < 2; ++k) {
      if (s.has_spacing != first.has_spacing ||
          std::fabs(s.spacing[k] - first.spacing[k]) > 1e-4 * first.spacing[k]) {
        return differ("PixelSpacing", Num(first.spacing[0]) + "\\" + Num(first.spacing[1]),
                      Num(s.spacing[0]) + "\\" + Num(s.spacing[1]));
      }
    }
    if (s.bits_allocated != first.bits_allocated ||
        s.pixel_representation != first.pixel_representation) {
      auto pf = [](const DicomSlice& x) {
        return std::to_string(x.bits_allocated) + "-bit " +
               (x.pixel_representation ? "signed" : "unsigned");
      };
      return differ("pixel format", pf(first), pf(s));
    }
  }
  // The slice normal: the cross product of the row and column cosines, which must be unit
  // and orthogonal.
  const double* r = first.iop;
  const double* c = first.iop + 3;
  if (std::fabs(Dot(r, r) - 1) > 1e-3 || std::fabs(Dot(c, c) - 1) > 1e-3 ||
      std::fabs(Dot(r, c)) > 1e-3) {
    return Status::BadInput(where + "ImageOrientationPatient in " + first.name +
                            " is not two orthogonal unit vectors");
  }
  const double n[3] = {r[1] * c[2] - r[2] * c[1], r[2] * c[0] - r[0] * c[2],
                       r[0] * c[1] - r[1] * c[0]};
  for (DicomSlice& s : *slices) s.position = Dot(n, s.ipp);
  std::stable_sort(slices->begin(), slices->end(), [](const DicomSlice& a, const DicomSlice& b) {
    return a.position < b.position;
  });
  const size_t count = slices->size();
  const DicomSlice& lo = slices->front();
  const DicomSlice& hi = slices->back();
  double step[3] = {0, 0, 0};
  if (count > 1) {
    for (int k = 0; k < 3; ++k) step[k] = (hi.ipp[k] - lo.ipp[k]) / static_cast<double>(count - 1);
  } else {
    const double t = lo.thickness > 0 ? lo.thickness : 1.0;
    for (int k = 0; k < 3; ++k) step[k] = n[k] * t;
  }
  // Evenly spaced: the gaps between neighbours all within 5% (or 0.01 mm) of their median; the
  // widest other one names a missing slice by the files on either side of it.
  std::vector<double> gaps;
  for (size_t i = 1; i < count; ++i) {
    const DicomSlice& a = (*slices)[i - 1];
    const DicomSlice& b = (*slices)[i];
    gaps.push_back(b.position - a.position);
    if (gaps.back() < 1e-3) {
      return Status::BadInput(where + a.name + " and " + b.name + " are at the same position (" +
                              Num(a.position) +
                              " mm along the slice normal): a duplicate slice, or two "
                              "acquisitions in one folder");
    }
  }
  if (count > 2) {
    std::vector<double> sorted = gaps;
    // The lower median: a missing slice widens a gap, so of two the narrower is the spacing.
    const size_t mid = (sorted.size() - 1) / 2;
    std::nth_element(sorted.begin(), sorted.begin() + static_cast<std::ptrdiff_t>(mid),
                     sorted.end());
    const double median = sorted[mid];
    size_t worst = 0;
    for (size_t i = 1; i < gaps.size(); ++i) {
      if (std::fabs(gaps[i] - median) > std::fabs(gaps[worst] - median)) worst = i;
    }
    if (std::fabs(gaps[worst] - median) > std::max(1e-2, 0.05 * median)) {
      return Status::BadInput(where + "its slices are not evenly spaced: " + (*slices)[worst].name +
                              " and " + (*slices)[worst + 1].name + " are " + Num(gaps[worst]) +
                              " mm apart along the slice normal, " + Num(median) +
                              " mm elsewhere (a missing slice, or a series with varying "
                              "spacing, which dspipe does not resample)");
    }
  }
  // Every slice on the line from the first to the last (a gantry tilt shears the stack evenly;
  // positions that wander off the line do not make one grid).
  const double gap = std::sqrt(Dot(step, step));
  for (size_t i = 1; i + 1 < count; ++i) {
    const DicomSlice& s = (*slices)[i];
    double off = 0;
    for (int k = 0; k < 3; ++k) {
      const double e = s.ipp[k] - (lo.ipp[k] + step[k] * static_cast<double>(i));
      off += e * e;
    }
    if (std::sqrt(off) > std::max(1e-2, 0.05 * gap)) {
      return Status::BadInput(where + "the position of " + s.name + " is " + Num(std::sqrt(off)) +
                              " mm off the line through the first and last slices (" + lo.name +
                              ", " + hi.name + "): its slices do not make one grid");
    }
  }
  // The affine (LPS, then RAS): i along the row cosine, j along the column cosine, k along
  // the stack.
  const double col_mm = first.has_spacing ? first.spacing[1] : 1.0;
  const double row_mm = first.has_spacing ? first.spacing[0] : 1.0;
  Affine& a = info->affine;
  a = Affine{};
  for (int k = 0; k < 3; ++k) {
    const double sign = k < 2 ? -1.0 : 1.0;  // LPS -> RAS
    a[k][0] = sign * r[k] * col_mm;
    a[k][1] = sign * c[k] * row_mm;
    a[k][2] = sign * step[k];
    a[k][3] = sign * lo.ipp[k];
  }
  a[3][3] = 1;
  info->dim[0] = first.cols;
  info->dim[1] = first.rows;
  info->dim[2] = static_cast<int64_t>(count);
  info->channels = 1;
  return SetCanonical(info);
}

// A slice's stored values as integers, as the header says: the low BitsStored bits,
// sign-extended when PixelRepresentation is 1 (the bits above are not pixel data).
template <class T>
void DecodeAs(const DicomSlice& s, size_t n, int64_t* dst) {
  const int shift = 64 - s.bits_stored;
  const bool is_signed = s.pixel_representation == 1;
  const char* p = s.pixels.data();
  for (size_t i = 0; i < n; ++i) {
    T raw;
    std::memcpy(&raw, p + i * sizeof(T), sizeof(T));
    const uint64_t u = static_cast<uint64_t>(raw) << shift;  // the stored bits at the top
    dst[i] = is_signed ? static_cast<int64_t>(u) >> shift : static_cast<int64_t>(u >> shift);
  }
}

void Decode(const DicomSlice& s, size_t n, int64_t* dst) {
  switch (s.bits_allocated) {
    case 8:
      return DecodeAs<uint8_t>(s, n, dst);
    case 16:
      return DecodeAs<uint16_t>(s, n, dst);
    default:
      return DecodeAs<uint32_t>(s, n, dst);
  }
}

// Every slice's values, rescaled, as T: integer arithmetic when `integral` (an integer slope
// and intercept), else double.
template <class T>
void Fill(const std::vector<DicomSlice>& slices, size_t plane, bool integral,
          std::vector<int64_t>* scratch, std::vector<uint8_t>* out) {
  out->resize(plane * slices.size() * sizeof(T));
  T* dst = reinterpret_cast<T*>(out->data());
  int64_t* v = scratch->data();
  for (const DicomSlice& s : slices) {
    Decode(s, plane, v);
    if (integral) {
      const int64_t slope = static_cast<int64_t>(s.slope), inter = static_cast<int64_t>(s.inter);
      for (size_t i = 0; i < plane; ++i) dst[i] = static_cast<T>(v[i] * slope + inter);
    } else {
      for (size_t i = 0; i < plane; ++i) {
        dst[i] = static_cast<T>(static_cast<double>(v[i]) * s.slope + s.inter);
      }
    }
    dst += plane;
  }
}

}  // namespace

Status DicomSeriesFiles(const std::string& dir, std::vector<std::string>* out) {
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) return Status::InvalidArgument(dir + ": not a folder");
  out->clear();
  return ListSeries(dir, out);
}

bool IsDicomFile(const std::string& path) {
  std::string ext = fs::path(path).extension().string();
  std::transform(ext.begin(), ext.end(), ext.begin(),
                 [](unsigned char ch) { return std::tolower(ch); });
  if (ext == ".dcm" || ext == ".dicom") return true;
  char head[132] = {};
  std::ifstream in(path, std::ios::binary);
  return in.read(head, sizeof head) && std::memcmp(head + 128, "DICM", 4) == 0;
}

bool IsDicomSeriesDir(const std::string& path) {
  std::error_code ec;
  if (!fs::is_directory(path, ec)) return false;
  std::vector<std::string> files;
  return ListSeries(path, &files).ok() && IsDicomFile(files.front());
}

Status ReadDicomInfo(const std::string& dir, VolumeInfo* out) {
  std::vector<DicomSlice> slices;
  return ReadSeries(dir, /*pixels=*/false, &slices, out);
}

Status ReadDicom(const std::string& dir, Volume* out) {
  *out = Volume{};
  std::vector<DicomSlice> slices;
  DSPIPE_RETURN_IF_ERROR(ReadSeries(dir, /*pixels=*/true, &slices, &out->info));
  const DicomSlice& first = slices.front();
  const size_t plane = static_cast<size_t>(first.rows) * static_cast<size_t>(first.cols);
  bool scaled = false, integral = true;
  double lo = std::numeric_limits<double>::infinity(), hi = -lo;
  std::vector<int64_t> values(plane);
  for (const DicomSlice& s : slices) {
    const bool mine = s.slope != 1 || s.inter != 0;
    scaled = scaled || mine;
    if (s.slope != std::floor(s.slope) || s.inter != std::floor(s.inter) ||
        std::fabs(s.slope) > 1e9 || std::fabs(s.inter) > 1e15) {
      integral = false;
    }
    // The rescaled range from the stored one: slope * v + inter is monotonic in v.
    Decode(s, plane, values.data());
    const auto [mn, mx] = std::minmax_element(values.begin(), values.end());
    for (const int64_t v : {*mn, *mx}) {
      const double x = static_cast<double>(v) * s.slope + s.inter;
      lo = std::min(lo, x);
      hi = std::max(hi, x);
    }
  }
  // As ReadNifti: stored types kept when nothing is rescaled; integers scaled by integers as
  // the narrowest exact type; anything else float32.
  SampleType t = SampleType::kFloat32;
  const bool is_signed = first.pixel_representation == 1;
  if (!scaled && first.bits_allocated == 8 && !is_signed) {
    t = SampleType::kUint8;
  } else if (!scaled && first.bits_allocated == 16 && !is_signed) {
    t = SampleType::kUint16;
  } else if (!scaled && first.bits_allocated <= 16 && is_signed) {
    t = SampleType::kInt16;
  } else if (integral) {
    DSPIPE_RETURN_IF_ERROR(ExactIntegerType(dir, lo, hi, &t));
  }
  out->type = t;
  const bool exact = integral && t != SampleType::kFloat32;  // else through double
  switch (t) {
    case SampleType::kUint8:
      Fill<uint8_t>(slices, plane, exact, &values, &out->data);
      break;
    case SampleType::kUint16:
      Fill<uint16_t>(slices, plane, exact, &values, &out->data);
      break;
    case SampleType::kInt16:
      Fill<int16_t>(slices, plane, exact, &values, &out->data);
      break;
    case SampleType::kFloat32:
      Fill<float>(slices, plane, exact, &values, &out->data);
      break;
  }
  return Status::OK();
}

Status ReadVolumeInfo(const std::string& path, VolumeInfo* out) {
  if (IsDicomSeriesDir(path)) return ReadDicomInfo(path, out);
  return ReadNiftiInfo(path, out);
}

Status ReadVolume(const std::string& path, bool label, Volume* out) {
  if (IsDicomSeriesDir(path)) {
    if (label) {
      return Status::BadInput(path +
                              ": a DICOM series as a label volume; label maps are read from "
                              "NIfTI files (convert a DICOM SEG, e.g. with dcmqi, first)");
    }
    return ReadDicom(path, out);
  }
  return ReadNifti(path, label, out);
}

}  // namespace dspipe::volume
