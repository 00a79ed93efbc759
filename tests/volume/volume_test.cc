// SPDX-License-Identifier: Apache-2.0
// The NIfTI reader (lib/volume): header checks, the canonical (RAS) orientation, slices along
// each axis, scaling and type rules, label maps, and the volume cache. Volumes are written here
// with nifti_clib; tests/python/test_volumes.py compares with nibabel.
#include "volume/volume.h"

#include <gtest/gtest.h>
#include <zlib.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>
#include <thread>

#include "convert/test_support.h"
#include "volume/cache.h"
#include "volume/nifti_writer.h"

namespace dspipe::volume {
namespace {

using dspipe::testing::NiftiSpec;
using dspipe::testing::TempDir;
using dspipe::testing::WriteNifti;

#define ASSERT_OK(e)                             \
  do {                                           \
    const ::dspipe::Status _s = (e);             \
    ASSERT_TRUE(_s.ok()) << _s.ToString();       \
  } while (0)

bool Has(const Status& s, const std::string& what) {
  return s.message().find(what) != std::string::npos;
}

// v(i, j, k) = i + 10 j + 100 k, int16, in the file's axis order.
std::vector<int16_t> Ramp(int64_t nx, int64_t ny, int64_t nz) {
  std::vector<int16_t> v(static_cast<size_t>(nx * ny * nz));
  for (int64_t k = 0; k < nz; ++k)
    for (int64_t j = 0; j < ny; ++j)
      for (int64_t i = 0; i < nx; ++i) v[i + nx * (j + ny * k)] = static_cast<int16_t>(i + 10 * j + 100 * k);
  return v;
}

// LPS (i to the Left, j Posterior, k Superior; DICOM's convention): the canonical array flips
// i and j, so axial slice k at (r, c) is the file's voxel (nx-1-r, ny-1-c, k).
TEST(Nifti, LpsVolumeIsFlippedToRasAndSlicedAlongEachAxis) {
  TempDir dir;
  NiftiSpec s;
  s.nx = 5, s.ny = 4, s.nz = 3;
  const double a[4][4] = {{-2, 0, 0, 10}, {0, -3, 0, 20}, {0, 0, 4, 30}, {0, 0, 0, 1}};
  std::memcpy(s.affine, a, sizeof a);
  const std::vector<int16_t> ramp = Ramp(5, 4, 3);
  const std::string path = dir / "lps.nii.gz";
  ASSERT_TRUE(WriteNifti(path, s, ramp.data()));
  Volume v;
  ASSERT_OK(ReadNifti(path, false, &v));
  EXPECT_EQ(v.type, SampleType::kInt16);
  EXPECT_TRUE(v.info.flip[0] && v.info.flip[1] && !v.info.flip[2]);
  EXPECT_EQ(v.info.canon_dim[0], 5);
  EXPECT_EQ(v.info.canon_dim[2], 3);
  // The canonical affine: positive diagonal, the origin moved to the flipped corner.
  EXPECT_DOUBLE_EQ(v.info.canon_affine[0][0], 2);
  EXPECT_DOUBLE_EQ(v.info.canon_affine[1][1], 3);
  EXPECT_DOUBLE_EQ(v.info.canon_affine[0][3], 10 - 2 * 4);
  EXPECT_DOUBLE_EQ(v.info.canon_affine[1][3], 20 - 3 * 3);
  EXPECT_DOUBLE_EQ(v.info.canon_spacing[2], 4);
  auto file = [&](int64_t i, int64_t j, int64_t k) { return ramp[i + 5 * (j + 4 * k)]; };
  ASSERT_EQ(SliceCount(v.info, SliceAxis::kAxial), 3);
  for (int64_t k = 0; k < 3; ++k) {
    cv::Mat m;
    ASSERT_OK(ExtractSlice(v, SliceAxis::kAxial, k, &m));
    ASSERT_EQ(m.rows, 5);
    ASSERT_EQ(m.cols, 4);
    ASSERT_EQ(m.type(), CV_16SC1);
    for (int r = 0; r < 5; ++r)
      for (int c = 0; c < 4; ++c) ASSERT_EQ(m.at<int16_t>(r, c), file(4 - r, 3 - c, k));
  }
  cv::Mat cor, sag;
  ASSERT_OK(ExtractSlice(v, SliceAxis::kCoronal, 1, &cor));  // canon[:, 1, :]
  ASSERT_EQ(cor.rows, 5);
  ASSERT_EQ(cor.cols, 3);
  for (int r = 0; r < 5; ++r)
    for (int c = 0; c < 3; ++c) ASSERT_EQ(cor.at<int16_t>(r, c), file(4 - r, 4 - 1 - 1, c));
  ASSERT_OK(ExtractSlice(v, SliceAxis::kSagittal, 0, &sag));  // canon[0, :, :]
  ASSERT_EQ(sag.rows, 4);
  ASSERT_EQ(sag.cols, 3);
  for (int r = 0; r < 4; ++r)
    for (int c = 0; c < 3; ++c) ASSERT_EQ(sag.at<int16_t>(r, c), file(4, 3 - r, c));
  EXPECT_EQ(SliceSpacing(v.info, SliceAxis::kAxial), (std::array<double, 2>{2, 3}));
  cv::Mat none;
  EXPECT_FALSE(ExtractSlice(v, SliceAxis::kAxial, 3, &none).ok());
}

// Slices larger than ExtractSlice's 32x32 tiles, with partial tiles at the edges: every pixel
// of every slice along each axis of an LPS volume is its voxel.
// Sizes that are not multiples of the 32x32 tiles nor of the 8x8 blocks the transposes use,
// with each in-plane axis flipped or not (LPS, RAS, LAS, RPS): every sample where volume.h says.
TEST(Nifti, SlicesAcrossTilesAreExact) {
  TempDir dir;
  NiftiSpec s;
  s.nx = 70, s.ny = 45, s.nz = 33;
  std::vector<int16_t> vox(static_cast<size_t>(s.nx * s.ny * s.nz));
  std::iota(vox.begin(), vox.end(), int16_t{-30000});
  auto file = [&](int64_t i, int64_t j, int64_t k) { return vox[i + s.nx * (j + s.ny * k)]; };
  for (const auto& [sx, sy] : {std::pair{-1, -1}, std::pair{1, 1}, std::pair{-1, 1},
                               std::pair{1, -1}}) {
    const double a[4][4] = {{1.0 * sx, 0, 0, 0}, {0, 1.0 * sy, 0, 0}, {0, 0, 2, 0}, {0, 0, 0, 1}};
    std::memcpy(s.affine, a, sizeof a);
    const std::string path = dir / ("big" + std::to_string(sx) + std::to_string(sy) + ".nii");
    ASSERT_TRUE(WriteNifti(path, s, vox.data()));
    Volume v;
    ASSERT_OK(ReadNifti(path, false, &v));
    for (SliceAxis axis : {SliceAxis::kAxial, SliceAxis::kCoronal, SliceAxis::kSagittal}) {
      for (int64_t n = 0; n < SliceCount(v.info, axis); ++n) {
        cv::Mat m;
        ASSERT_OK(ExtractSlice(v, axis, n, &m));
        for (int r = 0; r < m.rows; ++r) {
          for (int c = 0; c < m.cols; ++c) {
            // Canonical (x, y, z) = (i or nx-1-i, j or ny-1-j, k); rows and columns as
            // volume.h says.
            int64_t x = 0, y = 0, z = 0;
            if (axis == SliceAxis::kAxial) x = r, y = c, z = n;
            if (axis == SliceAxis::kCoronal) x = r, y = n, z = c;
            if (axis == SliceAxis::kSagittal) x = n, y = r, z = c;
            ASSERT_EQ(m.at<int16_t>(r, c),
                      file(sx < 0 ? s.nx - 1 - x : x, sy < 0 ? s.ny - 1 - y : y, z))
                << sx << sy << " " << SliceAxisName(axis) << " " << n << " at " << r << "," << c;
          }
        }
      }
    }
  }
}

// Every orientation (the 6 axis orders, each axis flipped or not) of volumes of each sample size
// (uint8, int16, float32), 19x21x10 (partial 8x8 and 4x4 blocks on both in-plane sides) and
// 40x33x3 (whole blocks along one side): every sample of every slice along each axis where
// volume.h says, canonical axis a being the file's axis perm[a], reversed when flip[a].
template <class T>
void ExpectEveryOrientationSlicesExactly(SampleType type, int64_t nx, int64_t ny, int64_t nz) {
  Volume v;
  v.type = type;
  v.info.path = "made-here";
  const int64_t dim[3] = {nx, ny, nz};
  std::copy(dim, dim + 3, v.info.dim);
  const size_t n = static_cast<size_t>(nx * ny * nz);
  v.data.resize(n * sizeof(T));
  T* vox = reinterpret_cast<T*>(v.data.data());
  for (size_t i = 0; i < n; ++i) vox[i] = static_cast<T>(i * 7 + 3);  // wraps for uint8: fine
  int perm[3] = {0, 1, 2};
  do {
    for (int flips = 0; flips < 8; ++flips) {
      for (int a = 0; a < 3; ++a) {
        v.info.perm[a] = perm[a];
        v.info.flip[a] = (flips >> a) & 1;
        v.info.canon_dim[a] = dim[perm[a]];
      }
      for (SliceAxis axis : {SliceAxis::kAxial, SliceAxis::kCoronal, SliceAxis::kSagittal}) {
        const int fixed = static_cast<int>(axis);
        int row = 0, col = 0;
        PlaneAxes(axis, &row, &col);
        for (int64_t k = 0; k < SliceCount(v.info, axis); ++k) {
          cv::Mat m;
          ASSERT_OK(ExtractSlice(v, axis, k, &m));
          ASSERT_EQ(m.rows, v.info.canon_dim[row]);
          ASSERT_EQ(m.cols, v.info.canon_dim[col]);
          for (int r = 0; r < m.rows; ++r) {
            for (int c = 0; c < m.cols; ++c) {
              int64_t canon[3] = {0, 0, 0}, file[3] = {0, 0, 0};
              canon[fixed] = k, canon[row] = r, canon[col] = c;
              for (int a = 0; a < 3; ++a) {
                const int f = perm[a];
                file[f] = v.info.flip[a] ? dim[f] - 1 - canon[a] : canon[a];
              }
              ASSERT_EQ(m.at<T>(r, c), vox[file[0] + nx * (file[1] + ny * file[2])])
                  << "perm " << perm[0] << perm[1] << perm[2] << " flips " << flips << " "
                  << SliceAxisName(axis) << " " << k << " at " << r << "," << c;
            }
          }
        }
      }
    }
  } while (std::next_permutation(perm, perm + 3));
}

TEST(Nifti, EveryOrientationOfEverySampleSizeSlicesExactly) {
  for (const auto& [nx, ny, nz] : {std::array<int64_t, 3>{19, 21, 10}, {40, 33, 3}}) {
    ExpectEveryOrientationSlicesExactly<uint8_t>(SampleType::kUint8, nx, ny, nz);
    ExpectEveryOrientationSlicesExactly<int16_t>(SampleType::kInt16, nx, ny, nz);
    ExpectEveryOrientationSlicesExactly<float>(SampleType::kFloat32, nx, ny, nz);
  }
}

// A permuted acquisition (i runs Superior, j Right, k Anterior): the canonical axes are the
// file's j, k, i.
TEST(Nifti, PermutedAxesAreReordered) {
  TempDir dir;
  NiftiSpec s;
  s.nx = 3, s.ny = 4, s.nz = 2;
  const double a[4][4] = {{0, 1, 0, 0}, {0, 0, 1, 0}, {1, 0, 0, 0}, {0, 0, 0, 1}};
  std::memcpy(s.affine, a, sizeof a);
  const std::vector<int16_t> ramp = Ramp(3, 4, 2);
  const std::string path = dir / "perm.nii";
  ASSERT_TRUE(WriteNifti(path, s, ramp.data()));
  Volume v;
  ASSERT_OK(ReadNifti(path, false, &v));
  EXPECT_EQ(v.info.perm[0], 1);
  EXPECT_EQ(v.info.perm[1], 2);
  EXPECT_EQ(v.info.perm[2], 0);
  ASSERT_EQ(SliceCount(v.info, SliceAxis::kAxial), 3);  // along the file's i
  cv::Mat m;
  ASSERT_OK(ExtractSlice(v, SliceAxis::kAxial, 2, &m));  // canon[:, :, 2] = file(2, r, c)
  ASSERT_EQ(m.rows, 4);
  ASSERT_EQ(m.cols, 2);
  for (int r = 0; r < 4; ++r)
    for (int c = 0; c < 2; ++c) ASSERT_EQ(m.at<int16_t>(r, c), ramp[2 + 3 * (r + 4 * c)]);
}

// No sform and no qform: nibabel's base affine (x flipped), so the canonical array flips i.
TEST(Nifti, NoTransformUsesTheAnalyzeAffineWithXFlipped) {
  TempDir dir;
  NiftiSpec s;
  s.nx = 4, s.ny = 2, s.nz = 1;
  s.sform_code = 0;
  s.pixdim[0] = 0.5;
  const std::vector<int16_t> ramp = Ramp(4, 2, 1);
  const std::string path = dir / "plain.nii";
  ASSERT_TRUE(WriteNifti(path, s, ramp.data()));
  VolumeInfo info;
  ASSERT_OK(ReadNiftiInfo(path, &info));
  EXPECT_DOUBLE_EQ(info.affine[0][0], -0.5);
  EXPECT_DOUBLE_EQ(info.affine[0][3], 0.75);  // -(4-1)/2 * -0.5
  EXPECT_TRUE(info.flip[0]);
  EXPECT_FALSE(info.flip[1]);
}

TEST(Nifti, ScalingGivesExactTypes) {
  TempDir dir;
  NiftiSpec s;
  s.nx = 3, s.ny = 1, s.nz = 1;
  s.datatype = DT_UINT16;
  const uint16_t raw[3] = {0, 1024, 4095};
  // An integer intercept on 12-bit CT values: int16 Hounsfield units, exact.
  s.scl_slope = 1, s.scl_inter = -1024;
  ASSERT_TRUE(WriteNifti(dir / "ct.nii", s, raw));
  Volume v;
  ASSERT_OK(ReadNifti(dir / "ct.nii", false, &v));
  ASSERT_EQ(v.type, SampleType::kInt16);
  const int16_t* hu = reinterpret_cast<const int16_t*>(v.data.data());
  EXPECT_EQ(hu[0], -1024);
  EXPECT_EQ(hu[1], 0);
  EXPECT_EQ(hu[2], 3071);
  // A fractional slope: float32.
  s.scl_slope = 0.5, s.scl_inter = 0;
  ASSERT_TRUE(WriteNifti(dir / "half.nii", s, raw));
  ASSERT_OK(ReadNifti(dir / "half.nii", false, &v));
  ASSERT_EQ(v.type, SampleType::kFloat32);
  EXPECT_EQ(reinterpret_cast<const float*>(v.data.data())[2], 2047.5f);
  // Unscaled uint16 stays uint16; slope 0 means unscaled (NIfTI).
  s.scl_slope = 0;
  ASSERT_TRUE(WriteNifti(dir / "u16.nii", s, raw));
  ASSERT_OK(ReadNifti(dir / "u16.nii", false, &v));
  EXPECT_EQ(v.type, SampleType::kUint16);
  // float64 becomes float32; int32 holding small values becomes int16.
  s.datatype = DT_FLOAT64;
  const double d[3] = {-1.5, 0.25, 1e6};
  ASSERT_TRUE(WriteNifti(dir / "f64.nii", s, d));
  ASSERT_OK(ReadNifti(dir / "f64.nii", false, &v));
  ASSERT_EQ(v.type, SampleType::kFloat32);
  EXPECT_EQ(reinterpret_cast<const float*>(v.data.data())[0], -1.5f);
  s.datatype = DT_INT32;
  const int32_t i32[3] = {-3, 7, 30000};
  ASSERT_TRUE(WriteNifti(dir / "i32.nii", s, i32));
  ASSERT_OK(ReadNifti(dir / "i32.nii", false, &v));
  ASSERT_EQ(v.type, SampleType::kInt16);
  EXPECT_EQ(reinterpret_cast<const int16_t*>(v.data.data())[2], 30000);
  const int32_t odd[3] = {0, 1, (1 << 25) + 1};  // neither 16 bits nor float32 hold it
  ASSERT_TRUE(WriteNifti(dir / "odd.nii", s, odd));
  const Status st = ReadNifti(dir / "odd.nii", false, &v);
  EXPECT_EQ(st.code(), Status::Code::kBadInput) << st.ToString();
  EXPECT_TRUE(Has(st, "holds exactly")) << st.ToString();
}

// A 4D volume's 4th axis is the channels, interleaved in each slice.
TEST(Nifti, FourDimensionsAreChannels) {
  TempDir dir;
  NiftiSpec s;
  s.nx = 2, s.ny = 2, s.nz = 2, s.nt = 3;
  s.datatype = DT_FLOAT32;
  std::vector<float> f(24);
  std::iota(f.begin(), f.end(), 0.5f);
  ASSERT_TRUE(WriteNifti(dir / "mm.nii.gz", s, f.data()));
  Volume v;
  ASSERT_OK(ReadNifti(dir / "mm.nii.gz", false, &v));
  EXPECT_EQ(v.info.channels, 3);
  cv::Mat m;
  ASSERT_OK(ExtractSlice(v, SliceAxis::kAxial, 1, &m));
  ASSERT_EQ(m.type(), CV_32FC3);
  for (int r = 0; r < 2; ++r)
    for (int c = 0; c < 2; ++c)
      for (int t = 0; t < 3; ++t) {
        ASSERT_EQ(m.at<cv::Vec3f>(r, c)[t], f[r + 2 * (c + 2 * (1 + 2 * t))]);
      }
}

TEST(Nifti, LabelsAreIntegerIdsOfTheNarrowestType) {
  TempDir dir;
  NiftiSpec s;
  s.nx = 4, s.ny = 1, s.nz = 1;
  s.datatype = DT_FLOAT64;  // label maps saved as floats are common
  const double small[4] = {0, 1, 2, 3};
  ASSERT_TRUE(WriteNifti(dir / "l.nii", s, small));
  Volume v;
  ASSERT_OK(ReadNifti(dir / "l.nii", true, &v));
  EXPECT_EQ(v.type, SampleType::kUint8);
  EXPECT_EQ(v.data[3], 3);
  const double wide[4] = {0, 1, 300, 3};
  ASSERT_TRUE(WriteNifti(dir / "w.nii", s, wide));
  ASSERT_OK(ReadNifti(dir / "w.nii", true, &v));
  EXPECT_EQ(v.type, SampleType::kUint16);
  const double frac[4] = {0, 1, 2.5, 3};
  ASSERT_TRUE(WriteNifti(dir / "f.nii", s, frac));
  Status st = ReadNifti(dir / "f.nii", true, &v);
  EXPECT_EQ(st.code(), Status::Code::kBadInput);
  EXPECT_TRUE(Has(st, "voxel (2, 0, 0) holds 2.5, not an integer")) << st.ToString();
  EXPECT_TRUE(Has(st, dir / "f.nii")) << st.ToString();
  const double neg[4] = {0, -1, 2, 3};
  ASSERT_TRUE(WriteNifti(dir / "n.nii", s, neg));
  st = ReadNifti(dir / "n.nii", true, &v);
  EXPECT_TRUE(Has(st, "outside 0..65535")) << st.ToString();
  s.nt = 2;
  const double two[8] = {};
  ASSERT_TRUE(WriteNifti(dir / "4d.nii", s, two));
  st = ReadNifti(dir / "4d.nii", true, &v);
  EXPECT_TRUE(Has(st, "labels are one 3D map")) << st.ToString();
}

// Integer label maps of each stored type: narrowed to uint8 when every id fits, uint16 kept,
// negative ids refused with the range.
TEST(Nifti, IntegerLabelsOfEachTypeAreNarrowedOrRefused) {
  TempDir dir;
  NiftiSpec s;
  s.nx = 4, s.ny = 1, s.nz = 1;
  Volume v;
  s.datatype = DT_UINT16;
  const uint16_t u16[4] = {0, 1, 300, 65535};
  ASSERT_TRUE(WriteNifti(dir / "u16.nii", s, u16));
  ASSERT_OK(ReadNifti(dir / "u16.nii", true, &v));
  ASSERT_EQ(v.type, SampleType::kUint16);
  EXPECT_EQ(reinterpret_cast<const uint16_t*>(v.data.data())[3], 65535);
  EXPECT_EQ(reinterpret_cast<const uint16_t*>(v.data.data())[2], 300);
  const uint16_t small16[4] = {0, 1, 2, 255};
  ASSERT_TRUE(WriteNifti(dir / "s16.nii", s, small16));
  ASSERT_OK(ReadNifti(dir / "s16.nii", true, &v));
  ASSERT_EQ(v.type, SampleType::kUint8);
  EXPECT_EQ(v.data, (std::vector<uint8_t>{0, 1, 2, 255}));
  s.datatype = DT_INT16;
  const int16_t i16[4] = {3, 0, 7, 1};
  ASSERT_TRUE(WriteNifti(dir / "i16.nii", s, i16));
  ASSERT_OK(ReadNifti(dir / "i16.nii", true, &v));
  ASSERT_EQ(v.type, SampleType::kUint8);
  EXPECT_EQ(v.data, (std::vector<uint8_t>{3, 0, 7, 1}));
  const int16_t neg[4] = {3, -1, 7, 1};
  ASSERT_TRUE(WriteNifti(dir / "neg.nii", s, neg));
  Status st = ReadNifti(dir / "neg.nii", true, &v);
  EXPECT_TRUE(Has(st, "its values run from -1 to 7, outside 0..65535")) << st.ToString();
  s.datatype = DT_UINT32;
  const uint32_t big[4] = {0, 1, 65536, 2};
  ASSERT_TRUE(WriteNifti(dir / "u32.nii", s, big));
  st = ReadNifti(dir / "u32.nii", true, &v);
  EXPECT_TRUE(Has(st, "its values run from 0 to 65536, outside 0..65535")) << st.ToString();
  s.datatype = DT_UINT8;  // uint8 ids are the file's buffer as it is
  const uint8_t u8[4] = {9, 0, 255, 4};
  ASSERT_TRUE(WriteNifti(dir / "u8.nii.gz", s, u8));
  ASSERT_OK(ReadNifti(dir / "u8.nii.gz", true, &v));
  ASSERT_EQ(v.type, SampleType::kUint8);
  EXPECT_EQ(v.data, (std::vector<uint8_t>{9, 0, 255, 4}));
}

TEST(Nifti, BadFilesAreBadInputNamingTheFile) {
  TempDir dir;
  NiftiSpec s;
  s.nx = 16, s.ny = 16, s.nz = 4;
  const std::vector<int16_t> ramp = Ramp(16, 16, 4);
  ASSERT_TRUE(WriteNifti(dir / "ok.nii", s, ramp.data()));
  ASSERT_TRUE(WriteNifti(dir / "ok.nii.gz", s, ramp.data()));
  const std::string whole = dspipe::testing::ReadAll(dir / "ok.nii");
  const std::string gz = dspipe::testing::ReadAll(dir / "ok.nii.gz");
  struct Case {
    std::string name, bytes, says;
  } cases[] = {
      {"short.nii", whole.substr(0, whole.size() - 100), "holds fewer or is corrupt"},
      {"short.nii.gz", gz.substr(0, gz.size() / 2), "holds fewer or is corrupt"},
      {"junk.nii", std::string(400, 'x'), "not a readable NIfTI-1/2 header"},
      {"empty.nii.gz", "", "not a readable NIfTI-1/2 header"},
  };
  for (const Case& c : cases) {
    dspipe::testing::WriteAll(dir / c.name, c.bytes);
    Volume v;
    const Status st = ReadNifti(dir / c.name, false, &v);
    EXPECT_EQ(st.code(), Status::Code::kBadInput) << c.name << ": " << st.ToString();
    EXPECT_TRUE(Has(st, c.says)) << c.name << ": " << st.ToString();
    EXPECT_TRUE(Has(st, dir / c.name)) << st.ToString();
  }
  // A NaN scale, and a header claiming more voxels than a volume may hold.
  std::string nan = whole;
  const float qnan = std::nanf("");
  std::memcpy(&nan[112], &qnan, 4);  // scl_slope in the NIfTI-1 header
  dspipe::testing::WriteAll(dir / "nan.nii", nan);
  VolumeInfo info;
  Status st = ReadNiftiInfo(dir / "nan.nii", &info);
  EXPECT_TRUE(Has(st, "scaling is not a number (scl_slope nan")) << st.ToString();
  std::string huge = whole;
  const int16_t big = 32767;
  for (int d = 1; d <= 3; ++d) std::memcpy(&huge[40 + 2 * d], &big, 2);  // dim[1..3]
  dspipe::testing::WriteAll(dir / "huge.nii", huge);
  st = ReadNiftiInfo(dir / "huge.nii", &info);
  EXPECT_EQ(st.code(), Status::Code::kBadInput) << st.ToString();
  EXPECT_TRUE(Has(st, "more than the")) << st.ToString();
  st = ReadNiftiInfo(dir / "missing.nii", &info);
  EXPECT_EQ(st.code(), Status::Code::kIOError) << st.ToString();
}

// A single-file NIfTI-1 (big_endian: every field and sample byte-swapped) or NIfTI-2 header
// written byte by byte, so a test can set fields nifti_clib's writer would not.
struct RawNifti {
  int version = 1;
  bool big_endian = false;
  int64_t dim[8] = {3, 2, 2, 2, 1, 1, 1, 1};
  int16_t datatype = DT_INT16, bitpix = 16;
  double vox_offset = -1;  // -1: right after the header and its 4 extension bytes
  double scl_slope = 0, scl_inter = 0;
};

std::string RawNiftiBytes(const RawNifti& h, const std::string& voxels) {
  const bool v1 = h.version == 1;
  std::string b(v1 ? 352 : 544, '\0');
  auto put = [&](size_t at, const auto& value) {
    char tmp[sizeof value];
    std::memcpy(tmp, &value, sizeof value);
    if (h.big_endian) std::reverse(tmp, tmp + sizeof value);
    std::memcpy(&b[at], tmp, sizeof value);
  };
  const double vox = h.vox_offset == -1 ? static_cast<double>(b.size()) : h.vox_offset;
  if (v1) {
    put(0, int32_t{348});
    for (int i = 0; i < 8; ++i) put(40 + 2 * i, static_cast<int16_t>(h.dim[i]));
    put(70, h.datatype);
    put(72, h.bitpix);
    for (int i = 0; i < 8; ++i) put(76 + 4 * i, 1.0f);
    put(108, static_cast<float>(vox));
    put(112, static_cast<float>(h.scl_slope));
    put(116, static_cast<float>(h.scl_inter));
    std::memcpy(&b[344], "n+1", 4);
  } else {
    put(0, int32_t{540});
    std::memcpy(&b[4], "n+2\0\r\n\032\n", 8);
    put(12, h.datatype);
    put(14, h.bitpix);
    for (int i = 0; i < 8; ++i) put(16 + 8 * i, h.dim[i]);
    for (int i = 0; i < 8; ++i) put(104 + 8 * i, 1.0);
    put(168, static_cast<int64_t>(vox));
    put(176, h.scl_slope);
    put(184, h.scl_inter);
  }
  return b + voxels;
}

// Headers that nifti_clib (uninstrumented, trusting its input) would crash on or allocate
// without bound for are refused before it sees them (fuzz_nifti's findings), naming the file.
TEST(Nifti, HeadersNiftiClibWouldMisreadAreRefusedFirst) {
  TempDir dir;
  const std::string voxels(16, '\1');  // 2x2x2 int16
  struct Case {
    std::string name;
    RawNifti h;
    std::string says;
  };
  std::vector<Case> cases;
  RawNifti neg_dim0;  // fuzz_nifti: nifti_convert_n2hdr2nim indexed by a negative dim[0]: SEGV
  neg_dim0.version = 2;
  neg_dim0.dim[0] = static_cast<int64_t>(0xffa75911af000003ull);
  cases.push_back({"neg_dim0.nii", neg_dim0, "dim[0] is -"});
  RawNifti big_dim0 = neg_dim0;
  big_dim0.dim[0] = 8;
  cases.push_back({"dim0_8.nii", big_dim0, "dim[0] is 8, not 1 to 7"});
  RawNifti far = {};  // a float vox_offset past any int: nifti_clib casts it to int
  far.vox_offset = 1e30;
  cases.push_back({"far_v1.nii", far, "vox_offset"});
  RawNifti far2 = {};  // NIfTI-2: the extensions' space (vox_offset - 544) would be allocated
  far2.version = 2;
  far2.vox_offset = static_cast<double>(int64_t{1} << 40);
  cases.push_back({"far_v2.nii.gz", far2, "vox_offset"});
  RawNifti neg_off = far2;
  neg_off.vox_offset = -8;
  cases.push_back({"neg_offset.nii", neg_off, "vox_offset"});
  RawNifti wraps = neg_dim0;  // fuzz_nifti: 2^31 x 2^31 x 4 voxels wrapped to 0 in 64 bits
  wraps.dim[0] = 3;
  wraps.dim[1] = wraps.dim[2] = int64_t{1} << 31;
  wraps.dim[3] = 4;
  cases.push_back({"wraps.nii", wraps, "more than the 1073741824 a volume may hold"});
  RawNifti zero_dim = {};
  zero_dim.dim[2] = 0;
  cases.push_back({"zero_dim.nii", zero_dim, "dim[2] is 0"});
  for (const Case& c : cases) {
    dspipe::testing::WriteAll(dir / c.name, RawNiftiBytes(c.h, voxels));
    VolumeInfo info;
    Status st = ReadNiftiInfo(dir / c.name, &info);
    EXPECT_EQ(st.code(), Status::Code::kBadInput) << c.name << ": " << st.ToString();
    EXPECT_TRUE(Has(st, c.says)) << c.name << ": " << st.ToString();
    EXPECT_TRUE(Has(st, dir / c.name)) << c.name << ": " << st.ToString();
    Volume v;
    st = ReadNifti(dir / c.name, true, &v);
    EXPECT_EQ(st.code(), Status::Code::kBadInput) << c.name << ": " << st.ToString();
  }
  // Voxels a file cannot hold are refused before memory is set aside for them: 2^29 int16
  // voxels (1 GiB) claimed by a 600-byte .nii and by a .nii.gz of the same bytes.
  RawNifti claims;
  claims.dim[1] = claims.dim[2] = 1024;
  claims.dim[3] = 512;
  const std::string bytes = RawNiftiBytes(claims, voxels);
  dspipe::testing::WriteAll(dir / "claims.nii", bytes);
  gzFile gz = gzopen((dir / "claims.nii.gz").c_str(), "wb");
  ASSERT_NE(gz, nullptr);
  ASSERT_EQ(gzwrite(gz, bytes.data(), static_cast<unsigned>(bytes.size())),
            static_cast<int>(bytes.size()));
  ASSERT_EQ(gzclose(gz), Z_OK);
  for (const char* name : {"claims.nii", "claims.nii.gz"}) {
    VolumeInfo info;
    ASSERT_OK(ReadNiftiInfo(dir / name, &info));  // the header alone is fine
    Volume v;
    const Status st = ReadNifti(dir / name, false, &v);
    EXPECT_EQ(st.code(), Status::Code::kBadInput) << name << ": " << st.ToString();
    EXPECT_TRUE(Has(st, "holds fewer")) << name << ": " << st.ToString();
  }
}

// Big-endian files are byte-swapped; NaN and infinite floats read as 0 (nifti_clib's rule,
// kept); the voxels start at vox_offset, after any extension bytes.
TEST(Nifti, ByteOrderNonFiniteFloatsAndOffsets) {
  TempDir dir;
  RawNifti be;
  be.big_endian = true;
  std::string voxels;
  for (int16_t v : {1, -2, 300, -400, 5, 6, 7, 32767}) {
    voxels.push_back(static_cast<char>(static_cast<uint16_t>(v) >> 8));
    voxels.push_back(static_cast<char>(v & 0xff));
  }
  dspipe::testing::WriteAll(dir / "be.nii", RawNiftiBytes(be, voxels));
  Volume v;
  ASSERT_OK(ReadNifti(dir / "be.nii", false, &v));
  ASSERT_EQ(v.type, SampleType::kInt16);
  const int16_t* p = reinterpret_cast<const int16_t*>(v.data.data());
  EXPECT_EQ(p[1], -2);
  EXPECT_EQ(p[3], -400);
  EXPECT_EQ(p[7], 32767);
  // NIfTI-2, float32 with NaN and infinity, 32 bytes of extension before the voxels.
  RawNifti f;
  f.version = 2;
  f.datatype = DT_FLOAT32;
  f.bitpix = 32;
  f.vox_offset = 544 + 32;
  const float fv[8] = {1.5f, std::nanf(""), -2.f, INFINITY, -INFINITY, 0.25f, 7.f, 8.f};
  std::string ext(32, '\0');
  const int32_t esize = 32, ecode = 6;
  std::memcpy(&ext[0], &esize, 4);
  std::memcpy(&ext[4], &ecode, 4);
  std::string bytes = RawNiftiBytes(f, ext + std::string(reinterpret_cast<const char*>(fv), 32));
  bytes[540] = 1;  // the extension flag
  for (const char* name : {"f.nii", "f.nii.gz"}) {
    if (std::string(name) == "f.nii") {
      dspipe::testing::WriteAll(dir / name, bytes);
    } else {
      gzFile gz = gzopen((dir / name).c_str(), "wb");
      ASSERT_NE(gz, nullptr);
      ASSERT_EQ(gzwrite(gz, bytes.data(), static_cast<unsigned>(bytes.size())),
                static_cast<int>(bytes.size()));
      ASSERT_EQ(gzclose(gz), Z_OK);
    }
    ASSERT_OK(ReadNifti(dir / name, false, &v));
    ASSERT_EQ(v.type, SampleType::kFloat32);
    const float* q = reinterpret_cast<const float*>(v.data.data());
    const float want[8] = {1.5f, 0.f, -2.f, 0.f, 0.f, 0.25f, 7.f, 8.f};
    for (int i = 0; i < 8; ++i) EXPECT_EQ(q[i], want[i]) << name << " voxel " << i;
  }
}

// .nii.gz as gzip writers make them: one member, several members (pigz, concatenated files),
// bytes after the voxels inside the stream, bytes after the last member that are not gzip.
TEST(Nifti, GzipMembersAndTrailingBytes) {
  TempDir dir;
  std::string voxels;
  for (int i = 0; i < 8; ++i) voxels += std::string{static_cast<char>(i * 3), '\0'};
  const std::string bytes = RawNiftiBytes(RawNifti{}, voxels);
  auto gz = [](const std::string& data) {
    z_stream z{};
    EXPECT_EQ(deflateInit2(&z, 6, Z_DEFLATED, 15 + 16, 8, Z_DEFAULT_STRATEGY), Z_OK);
    std::string out(deflateBound(&z, data.size()) + 64, '\0');
    z.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(data.data()));
    z.avail_in = static_cast<uInt>(data.size());
    z.next_out = reinterpret_cast<Bytef*>(out.data());
    z.avail_out = static_cast<uInt>(out.size());
    EXPECT_EQ(deflate(&z, Z_FINISH), Z_STREAM_END);
    out.resize(z.total_out);
    deflateEnd(&z);
    return out;
  };
  const struct {
    std::string name, file;
  } ok[] = {
      {"one.nii.gz", gz(bytes)},
      {"members.nii.gz",
       gz(bytes.substr(0, 300)) + gz(bytes.substr(300, 60)) + gz(bytes.substr(360))},
      {"past.nii.gz", gz(bytes + std::string(5000, 'x'))},
      {"trailing.nii.gz", gz(bytes) + "not gzip"},
  };
  for (const auto& c : ok) {
    dspipe::testing::WriteAll(dir / c.name, c.file);
    Volume v;
    ASSERT_OK(ReadNifti(dir / c.name, false, &v));
    ASSERT_EQ(v.data.size(), 16u) << c.name;
    for (int i = 0; i < 8; ++i) {
      EXPECT_EQ(reinterpret_cast<const int16_t*>(v.data.data())[i], i * 3) << c.name;
    }
  }
  const std::string one = gz(bytes);
  dspipe::testing::WriteAll(dir / "cut.nii.gz", one.substr(0, one.size() - 12));
  dspipe::testing::WriteAll(dir / "short.nii.gz", gz(bytes.substr(0, bytes.size() - 2)));
  for (const char* name : {"cut.nii.gz", "short.nii.gz"}) {
    Volume v;
    const Status st = ReadNifti(dir / name, false, &v);
    EXPECT_EQ(st.code(), Status::Code::kBadInput) << name << ": " << st.ToString();
    EXPECT_TRUE(Has(st, "holds fewer or is corrupt")) << name << ": " << st.ToString();
  }
}

TEST(Nifti, LabelMustShareTheImageGrid) {
  TempDir dir;
  NiftiSpec s;
  s.nx = 4, s.ny = 3, s.nz = 2;
  const std::vector<int16_t> ramp = Ramp(4, 3, 2);
  ASSERT_TRUE(WriteNifti(dir / "img.nii", s, ramp.data()));
  // The same grid stored LPS: its canonical array is the image's.
  NiftiSpec flipped = s;
  const double lps[4][4] = {{-1, 0, 0, 3}, {0, -1, 0, 2}, {0, 0, 1, 0}, {0, 0, 0, 1}};
  std::memcpy(flipped.affine, lps, sizeof lps);
  ASSERT_TRUE(WriteNifti(dir / "same.nii", flipped, ramp.data()));
  NiftiSpec moved = s;
  moved.affine[0][3] = 5;
  ASSERT_TRUE(WriteNifti(dir / "moved.nii", moved, ramp.data()));
  NiftiSpec other = s;
  other.nz = 1;
  ASSERT_TRUE(WriteNifti(dir / "other.nii", other, ramp.data()));
  VolumeInfo img, same, mv, ot;
  ASSERT_OK(ReadNiftiInfo(dir / "img.nii", &img));
  ASSERT_OK(ReadNiftiInfo(dir / "same.nii", &same));
  ASSERT_OK(ReadNiftiInfo(dir / "moved.nii", &mv));
  ASSERT_OK(ReadNiftiInfo(dir / "other.nii", &ot));
  EXPECT_TRUE(CheckLabelMatches(img, same).ok()) << CheckLabelMatches(img, same).ToString();
  Status st = CheckLabelMatches(img, mv);
  EXPECT_TRUE(Has(st, "affines differ")) << st.ToString();
  EXPECT_TRUE(Has(st, dir / "moved.nii") && Has(st, dir / "img.nii")) << st.ToString();
  st = CheckLabelMatches(img, ot);
  EXPECT_TRUE(Has(st, "shape 4x3x1 against 4x3x2")) << st.ToString();
}

TEST(VolumeCache, EachVolumeIsReadOnceForConcurrentCallers) {
  TempDir dir;
  NiftiSpec s;
  s.nx = 8, s.ny = 8, s.nz = 8;
  const std::vector<int16_t> ramp = Ramp(8, 8, 8);
  ASSERT_TRUE(WriteNifti(dir / "a.nii.gz", s, ramp.data()));
  VolumeCache cache(2);
  std::shared_ptr<const Volume> got[4];
  Status st[4];
  std::vector<std::thread> t;
  for (int i = 0; i < 4; ++i) t.emplace_back([&, i] { st[i] = cache.Get(dir / "a.nii.gz", false, &got[i]); });
  for (auto& th : t) th.join();
  for (int i = 0; i < 4; ++i) {
    ASSERT_OK(st[i]);
    EXPECT_EQ(got[i].get(), got[0].get()) << "one read, shared";
  }
  std::shared_ptr<const Volume> bad;
  const Status missing = cache.Get(dir / "none.nii", false, &bad);
  EXPECT_EQ(missing.code(), Status::Code::kIOError);
  EXPECT_EQ(bad, nullptr);
}

// ReadNifti reuses the memory out->data holds when it is large enough, and the voxels come out
// exactly as from a new buffer: a larger stale buffer (shrunk, .nii.gz and .nii), a smaller one
// (grown), and none.
TEST(Nifti, ReadIntoAReusedBufferGivesTheSameVoxels) {
  TempDir dir;
  NiftiSpec s;
  s.nx = 9, s.ny = 7, s.nz = 5;
  const std::vector<int16_t> ramp = Ramp(9, 7, 5);
  for (const std::string name : {"r.nii.gz", "r.nii"}) {
    ASSERT_TRUE(WriteNifti(dir / name, s, ramp.data()));
    Volume fresh;
    ASSERT_OK(ReadNifti(dir / name, false, &fresh));
    ASSERT_EQ(fresh.data.size(), ramp.size() * 2);
    EXPECT_EQ(std::memcmp(fresh.data.data(), ramp.data(), fresh.data.size()), 0);
    for (size_t stale : {size_t{100000}, size_t{10}}) {
      Volume v;
      v.data.assign(stale, 0xAB);
      ASSERT_OK(ReadNifti(dir / name, false, &v));
      EXPECT_EQ(v.data, fresh.data) << name << " over " << stale << " stale bytes";
      if (stale > fresh.data.size() + 352) {  // kept, not reallocated: its capacity stays
        EXPECT_EQ(v.data.capacity(), stale) << name << ": the memory is reused";
      }
    }
  }
}

// A volume the cache has evicted and nobody holds leaves its buffer for the next read of its
// kind (image or label): that volume's voxels land in the same memory, and are its own.
TEST(VolumeCache, AReleasedVolumesMemoryHoldsTheNextOneOfItsKind) {
  TempDir dir;
  NiftiSpec s;
  s.nx = 16, s.ny = 16, s.nz = 8;
  const std::vector<int16_t> a = Ramp(16, 16, 8);
  std::vector<int16_t> b = a;
  for (int16_t& x : b) x = static_cast<int16_t>(-x);
  ASSERT_TRUE(WriteNifti(dir / "a.nii.gz", s, a.data()));
  ASSERT_TRUE(WriteNifti(dir / "b.nii.gz", s, b.data()));
  ASSERT_TRUE(WriteNifti(dir / "c.nii.gz", s, a.data()));
  VolumeCache cache(1);
  std::shared_ptr<const Volume> v;
  ASSERT_OK(cache.Get(dir / "a.nii.gz", false, &v));
  const uint8_t* first = v->data.data();
  ASSERT_OK(cache.Get(dir / "c.nii.gz", true, &v));  // evicts a; a label: not a's kind
  EXPECT_NE(v->data.data(), first);
  // Were a's memory freed, this allocation of its size would be the first to take it back.
  const std::vector<uint8_t> elsewhere(a.size() * 2 + 352, 1);
  ASSERT_OK(cache.Get(dir / "b.nii.gz", false, &v));  // evicts the label; a is released
  EXPECT_EQ(v->data.data(), first) << "the image read into the released image's memory";
  EXPECT_EQ(std::memcmp(v->data.data(), b.data(), v->data.size()), 0);
  std::shared_ptr<const Volume> held = v;  // still held after eviction: its memory stays its own
  ASSERT_OK(cache.Get(dir / "c.nii.gz", false, &v));
  EXPECT_NE(v->data.data(), held->data.data());
  EXPECT_EQ(std::memcmp(held->data.data(), b.data(), held->data.size()), 0);
  EXPECT_EQ(std::memcmp(v->data.data(), a.data(), v->data.size()), 0);
}

// The build's pattern: Get the current volume from several threads while the next is prefetched,
// the cache smaller than the run (each volume evicted after use). Every Get sees its own volume;
// run under TSan by scripts/test.sh.
TEST(VolumeCache, PrefetchedVolumesReachConcurrentGetters) {
  TempDir dir;
  NiftiSpec s;
  s.nx = 8, s.ny = 8, s.nz = 4;
  constexpr int kVolumes = 12;
  for (int v = 0; v < kVolumes; ++v) {
    const std::vector<int16_t> fill(8 * 8 * 4, static_cast<int16_t>(100 + v));
    ASSERT_TRUE(WriteNifti(dir / ("v" + std::to_string(v) + ".nii.gz"), s, fill.data()));
  }
  auto path = [&](int v) { return std::string(dir / ("v" + std::to_string(v) + ".nii.gz")); };
  VolumeCache cache(2);
  cache.Prefetch(path(0), false);
  cache.Prefetch(path(0), false);  // held: not queued twice
  for (int v = 0; v < kVolumes; ++v) {
    if (v + 1 < kVolumes) cache.Prefetch(path(v + 1), false);
    std::shared_ptr<const Volume> got[3];
    Status st[3];
    std::vector<std::thread> t;
    for (int i = 0; i < 3; ++i) t.emplace_back([&, i] { st[i] = cache.Get(path(v), false, &got[i]); });
    for (auto& th : t) th.join();
    for (int i = 0; i < 3; ++i) {
      ASSERT_OK(st[i]);
      ASSERT_EQ(got[i]->type, SampleType::kInt16);
      int16_t first;
      std::memcpy(&first, got[i]->data.data(), sizeof first);
      EXPECT_EQ(first, 100 + v) << path(v);
      EXPECT_EQ(got[i].get(), got[0].get()) << "one read, shared";
    }
  }
  // A prefetched file that cannot be read: the getter gets the reader's error.
  cache.Prefetch(dir / "none.nii", false);
  std::shared_ptr<const Volume> bad;
  EXPECT_EQ(cache.Get(dir / "none.nii", false, &bad).code(), Status::Code::kIOError);
  EXPECT_EQ(bad, nullptr);
}

TEST(VolumeCache, DestroyedWithPrefetchesQueued) {
  TempDir dir;
  NiftiSpec s;
  s.nx = 64, s.ny = 64, s.nz = 16;
  const std::vector<int16_t> ramp = Ramp(64, 64, 16);
  for (int v = 0; v < 4; ++v) {
    ASSERT_TRUE(WriteNifti(dir / ("v" + std::to_string(v) + ".nii.gz"), s, ramp.data()));
  }
  for (int round = 0; round < 3; ++round) {  // returns: the thread stops, queued reads dropped
    VolumeCache cache(8);
    for (int v = 0; v < 4; ++v) cache.Prefetch(dir / ("v" + std::to_string(v) + ".nii.gz"), false);
  }
}

}  // namespace
}  // namespace dspipe::volume
