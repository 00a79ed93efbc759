// SPDX-License-Identifier: Apache-2.0
// Medical volumes as stacks of 2D slices: NIfTI-1/2 files (read by Debian's nifti_clib) and
// DICOM series, one folder of one-frame files each (read by Debian's DCMTK). Internal.
//
// Convention (docs/VOLUMES.md): a volume is brought to the closest canonical RAS orientation
// (nibabel's as_closest_canonical: axis 0 runs to the Right, 1 Anterior, 2 Superior) without
// resampling, by permuting and flipping its voxel axes. A slice is then the canonical array
// with one axis fixed, its two other axes as rows and columns in order: axial slice k is
// canon[:, :, k] (rows = the R axis, columns = the A axis), coronal canon[:, k, :], sagittal
// canon[k, :, :]. A 4D volume's 4th axis is the channels (modalities).
//
// The affine is nibabel's "best affine": the sform when sform_code > 0, else the qform when
// qform_code > 0, else the Analyze-style one (pixdim scaling with x flipped, centred).
#pragma once

#include <opencv2/core.hpp>

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "dspipe/format.h"
#include "dspipe/status.h"

namespace dspipe::volume {

enum class SliceAxis { kAxial = 2, kCoronal = 1, kSagittal = 0 };  // the canonical axis fixed
// "axial", "coronal", "sagittal".
const char* SliceAxisName(SliceAxis a);
Status ParseSliceAxis(const std::string& text, SliceAxis* out);

// The most voxels (all channels) one volume may hold: 2^30 (2 GiB as int16). Each slice is
// also bounded by DecodeLimits (max_side, max_pixels).
inline constexpr uint64_t kMaxVolumeVoxels = uint64_t{1} << 30;
inline constexpr int kMaxVolumeChannels = kMaxChannels;

using Affine = std::array<std::array<double, 4>, 4>;

// What a volume's header says, and its canonical orientation.
struct VolumeInfo {
  std::string path;               // the NIfTI file, or the DICOM series' folder
  bool dicom = false;             // a DICOM series (else NIfTI)
  int64_t dim[3] = {1, 1, 1};     // voxels along the file's axes i, j, k
  int channels = 1;               // the 4th dimension (1 for a 3D volume)
  int nifti_datatype = 0;         // the file's DT_* code (NIfTI)
  double scl_slope = 0, scl_inter = 0;  // as stored; applied when the slope is not 0 (NIfTI)
  Affine affine{};                // the file's best affine (voxel i,j,k -> RAS mm)
  // Canonical axis a is the file's axis perm[a], reversed when flip[a].
  int perm[3] = {0, 1, 2};
  bool flip[3] = {false, false, false};
  int64_t canon_dim[3] = {1, 1, 1};
  double canon_spacing[3] = {1, 1, 1};  // voxel size (mm) along the canonical axes
  Affine canon_affine{};                // the canonical array's affine (as nibabel's)
  bool scaled() const { return scl_slope != 0 && (scl_slope != 1 || scl_inter != 0); }
};

// A volume's voxels, as one sample type, in the file's own axis order (i fastest, then j, k,
// channel), with its info.
struct Volume {
  VolumeInfo info;
  SampleType type = SampleType::kUint8;
  std::vector<uint8_t> data;  // dim[0]*dim[1]*dim[2]*channels samples of `type`
};

// Reads a NIfTI header (.nii, .nii.gz; NIfTI-1 or -2) and checks it: 2 to 4 dimensions, at most
// kMaxVolumeChannels channels and kMaxVolumeVoxels voxels, a data type dspipe keeps (uint8,
// int8, uint16, int16, int32, uint32, float32, float64), finite scaling. kBadInput naming the
// file and the reason otherwise; kIOError when it cannot be read.
Status ReadNiftiInfo(const std::string& path, VolumeInfo* out);

// Reads a whole NIfTI volume. Images: scaling applied (exactly: an integer slope and intercept
// whose results fit int16 give int16, anything else float32); uint8, uint16, int16 and float32
// kept; int8 widened to int16; other integers narrowed to int16/uint16 when every value fits
// (else float32 when exact, else an error); float64 to float32 (the one reduction, as
// nibabel's get_fdata(dtype=float32)). Labels (`label` true): one channel of integer class ids
// 0..65535 (uint8 when every id fits) in any data type, including floats holding integers;
// anything else is an error naming the file and the first offending value.
// The memory of out->data on entry is reused for the voxels when it is large enough (a volume a
// build has finished with, VolumeCache): its pages are mapped already, where a new buffer of
// tens of MB would be faulted in and zeroed by the kernel page by page.
Status ReadNifti(const std::string& path, bool label, Volume* out);

// A DICOM series: the one-frame DICOM files of `dir` (every regular file whose name does not
// start with '.', except DICOMDIR), one slice each, ordered by ImagePositionPatient along the
// slice normal (not by name). The slices must share the series, size, orientation, pixel
// spacing and pixel format, and be evenly spaced: a missing or duplicate position, a mixed
// size or orientation, a second series, a file that is not a DICOM image, a multi-frame file
// or a colour image is kBadInput naming the folder and the files.
Status ReadDicomInfo(const std::string& dir, VolumeInfo* out);
// Reads the series' pixels (uncompressed, or any compressed transfer syntax DCMTK decodes:
// RLE, JPEG baseline/extended/lossless, JPEG-LS; not JPEG 2000) with each slice's
// RescaleSlope/RescaleIntercept applied, as one sample type chosen as ReadNifti does for a
// scaled file: uint8, uint16 and int16 kept when no slice is rescaled; integer results as
// int16, else uint16, else float32 (CT in Hounsfield units as int16); fractional results as
// float32. Images only: a label volume is read from NIfTI.
Status ReadDicom(const std::string& dir, Volume* out);
// The files ReadDicomInfo reads as the series in `dir`, in name order (what a resumed build
// stamps). kInvalidArgument when `dir` is not a folder; kBadInput when it holds no file.
Status DicomSeriesFiles(const std::string& dir, std::vector<std::string>* out);
// True for a file named .dcm or .dicom (any case), or holding the "DICM" mark after the
// 128-byte preamble.
bool IsDicomFile(const std::string& path);
// True when `path` is a folder whose first file (in name order, as ReadDicomInfo lists them)
// is a DICOM file.
bool IsDicomSeriesDir(const std::string& path);

// A multi-modal image kept as one 3D NIfTI file per channel, in channel order (nnU-Net's
// CASE_0000.nii.gz, CASE_0001.nii.gz, ...): the files must share one voxel grid (as a label
// must: CheckLabelMatches) and, once read, one sample type; the info is the first file's with
// `channels` the file count, the voxels each file's in turn (channel-major, as a 4D file's).
// kBadInput naming the file that differs.
Status ReadChannelsInfo(const std::vector<std::string>& files, VolumeInfo* out);
Status ReadChannels(const std::vector<std::string>& files, Volume* out);

// A NIfTI file or a DICOM series folder (IsDicomSeriesDir): ReadNiftiInfo or ReadDicomInfo.
Status ReadVolumeInfo(const std::string& path, VolumeInfo* out);
// ReadNifti or ReadDicom (a label from a DICOM folder is refused).
Status ReadVolume(const std::string& path, bool label, Volume* out);

// Fills the orientation fields (perm, flip, canon_*) from info->affine and dim: the closest
// canonical orientation as nifti_clib (nifti_dmat44_to_orientation) and nibabel find it.
// kBadInput naming info->path for an affine that is not finite or has no orientation.
Status SetCanonical(VolumeInfo* info);
// The narrowest type holding integer values lo..hi exactly: int16, else uint16, else float32
// (up to 2^24 in magnitude); else kBadInput naming `path`.
Status ExactIntegerType(const std::string& path, double lo, double hi, SampleType* out);

// The two canonical axes of a slice along `axis`, as its rows and columns.
void PlaneAxes(SliceAxis axis, int* row, int* col);
// Slices along `axis` (the canonical dimension).
int64_t SliceCount(const VolumeInfo& info, SliceAxis axis);
// Slice `index` of the canonical volume along `axis` as an HxWxC cv::Mat of the volume's type
// (rows and columns as the file comment says).
Status ExtractSlice(const Volume& v, SliceAxis axis, int64_t index, cv::Mat* out);
// The slice's in-plane spacing (rows, columns) in mm.
std::array<double, 2> SliceSpacing(const VolumeInfo& info, SliceAxis axis);

// In-plane resampling to another voxel size, as MONAI's Spacingd does it with its defaults
// (scale_extent false, padding "border"): the first voxel centre stays in place, a side of n
// voxels at spacing `from` becomes ResampledLength(n, from, to) = round((n - 1) * from / to) + 1
// (round half to even, as numpy), and output voxel i samples the input at i * to / from,
// clamped to the last voxel.
int64_t ResampledLength(int64_t n, double from, double to);
// Resamples an HxWxC slice (uint8, uint16, int16 or float32) from spacing (rows, columns)
// `from` to `to`. Linear (bilinear, per channel): the output is float32. Nearest (labels):
// the input's type; a coordinate halfway between two voxels takes the even one, as
// torch.grid_sample's nearest mode does.
void ResampleSlice(const cv::Mat& in, const std::array<double, 2>& from,
                   const std::array<double, 2>& to, bool nearest, cv::Mat* out);

// A fixed slice size, as MONAI's ResizeWithPadOrCrop with its defaults (CenterSpatialCrop,
// then SpatialPad "symmetric" with constant 0): along a side of n voxels made `want` long,
// output voxel i is input voxel i + PadCropStart(n, want); voxels that fall outside are 0.
// Cropping starts at n / 2 - want / 2 (integer halves); padding puts (want - n) / 2 before.
int64_t PadCropStart(int64_t n, int64_t want);
// An HxWxC slice of any type padded or cropped to rows x cols by PadCropStart on each side.
void PadCropSlice(const cv::Mat& in, int rows, int cols, cv::Mat* out);

// Image and label agree: the same canonical shape, and affines equal within 1e-3 mm (+1e-4 per
// mm of scale). Else kBadInput naming both files and the first difference.
Status CheckLabelMatches(const VolumeInfo& image, const VolumeInfo& label);

// True for a name ending in .nii or .nii.gz (any case).
bool IsNiftiName(const std::string& name);

}  // namespace dspipe::volume
