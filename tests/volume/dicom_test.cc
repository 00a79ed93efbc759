// SPDX-License-Identifier: Apache-2.0
// DICOM series (lib/volume/dicom.cc, read by DCMTK): slices ordered by position along the normal,
// the LPS->RAS affine, rescale and type rules, stored-bit handling, and every bad series refused
// naming its folder and files. The files are written here by a minimal writer
// (volume/dicom_writer.h); tests/python/test_dicom.py checks pydicom-written series against
// nibabel.
#include <dcmtk/config/osconfig.h>  // first, as DCMTK requires
#include <dcmtk/dcmdata/dcfilefo.h>
#include <dcmtk/dcmdata/dcxfer.h>
#include <dcmtk/dcmjpeg/djencode.h>
#include <dcmtk/dcmjpeg/djrplol.h>
#include <dcmtk/dcmjpls/djencode.h>
#include <dcmtk/dcmjpls/djrparam.h>
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <nlohmann/json.hpp>

#include "convert/test_support.h"
#include "dspipe/convert.h"
#include "volume/dicom_writer.h"
#include "volume/nifti_writer.h"
#include "volume/volume.h"

namespace dspipe::volume {
namespace {

using dspipe::testing::DicomPixels16;
using dspipe::testing::DicomSpec;
using dspipe::testing::TempDir;
using dspipe::testing::WriteDicom;

#define ASSERT_OK(e)                       \
  do {                                     \
    const ::dspipe::Status _s = (e);       \
    ASSERT_TRUE(_s.ok()) << _s.ToString(); \
  } while (0)

bool Has(const Status& s, const std::string& what) {
  return s.message().find(what) != std::string::npos;
}

// Stored value of slice k (in stack order) at row r, column c.
int Stored(int k, int r, int c) { return 1000 + 100 * k + 10 * r + c; }

// Three 3x4 axial slices 2.5 mm apart, PixelSpacing 0.5 (rows) x 0.7 (columns), named against
// their stack order: c.dcm is the lowest (k = 0), a.dcm the middle, b.dcm the top. 12-bit
// stored values with RescaleIntercept -1024 (CT).
std::string WriteSeries(const std::string& dir,
                        const std::function<void(int, DicomSpec*)>& edit = nullptr) {
  std::filesystem::create_directories(dir);
  const char* names[3] = {"c.dcm", "a.dcm", "b.dcm"};
  for (int k = 0; k < 3; ++k) {
    DicomSpec d;
    d.ipp[0] = 5, d.ipp[1] = -7, d.ipp[2] = 10 + 2.5 * k;
    d.spacing[0] = 0.5, d.spacing[1] = 0.7;
    d.bits_stored = 12;
    d.inter = -1024;
    std::vector<int> v;
    for (int r = 0; r < d.rows; ++r)
      for (int c = 0; c < d.cols; ++c) v.push_back(Stored(k, r, c));
    d.pixels = DicomPixels16(v);
    if (edit) edit(k, &d);
    WriteDicom(dir + "/" + names[k], d);
  }
  return dir;
}

TEST(Dicom, SlicesAreOrderedByPositionAndPlacedInRas) {
  TempDir tmp;
  const std::string dir = WriteSeries(tmp / "ct");
  ASSERT_TRUE(IsDicomSeriesDir(dir));
  VolumeInfo info;
  ASSERT_OK(ReadDicomInfo(dir, &info));
  EXPECT_TRUE(info.dicom);
  EXPECT_EQ(info.dim[0], 4);  // columns
  EXPECT_EQ(info.dim[1], 3);  // rows
  EXPECT_EQ(info.dim[2], 3);
  // LPS -> RAS: i (along a row, +L) and j (down the columns, +P) flip sign.
  EXPECT_NEAR(info.affine[0][0], -0.7, 1e-12);
  EXPECT_NEAR(info.affine[1][1], -0.5, 1e-12);
  EXPECT_NEAR(info.affine[2][2], 2.5, 1e-12);
  EXPECT_NEAR(info.affine[0][3], -5, 1e-12);
  EXPECT_NEAR(info.affine[1][3], 7, 1e-12);
  EXPECT_NEAR(info.affine[2][3], 10, 1e-12);
  EXPECT_TRUE(info.flip[0] && info.flip[1] && !info.flip[2]);
  EXPECT_NEAR(info.canon_spacing[0], 0.7, 1e-12);
  EXPECT_NEAR(info.canon_spacing[1], 0.5, 1e-12);

  Volume v;
  ASSERT_OK(ReadDicom(dir, &v));
  ASSERT_EQ(v.type, SampleType::kInt16);  // Hounsfield units
  const int16_t* p = reinterpret_cast<const int16_t*>(v.data.data());
  for (int k = 0; k < 3; ++k)
    for (int r = 0; r < 3; ++r)
      for (int c = 0; c < 4; ++c) ASSERT_EQ(p[c + 4 * (r + 3 * k)], Stored(k, r, c) - 1024);
  // Axial slice 1, canonical (R, A): row x is file column 3 - x, column y is file row 2 - y.
  cv::Mat s;
  ASSERT_OK(ExtractSlice(v, SliceAxis::kAxial, 1, &s));
  ASSERT_EQ(s.rows, 4);
  ASSERT_EQ(s.cols, 3);
  EXPECT_EQ(s.at<int16_t>(0, 0), Stored(1, 2, 3) - 1024);
  EXPECT_EQ(s.at<int16_t>(3, 2), Stored(1, 0, 0) - 1024);

  Volume label;
  const Status st = ReadVolume(dir, /*label=*/true, &label);
  EXPECT_TRUE(Has(st, "label maps are read from NIfTI")) << st.ToString();
  ASSERT_OK(ReadVolume(dir, false, &label));  // the dispatcher reads the series
}

TEST(Dicom, StoredBitsAreMaskedAndSignExtendedAndTypesFollowTheRescale) {
  TempDir tmp;
  // Signed 12-bit in 16: 0x0FFF is -1 and 0x07FF is 2047, whatever the bits above hold.
  const std::string s12 = WriteSeries(tmp / "s12", [](int, DicomSpec* d) {
    d->pixel_representation = 1;
    d->inter = 0;
    std::vector<int> v(12, 0x07FF);
    v[0] = 0x0FFF;
    v[1] = 0xF800;
    d->pixels = DicomPixels16(v);
  });
  Volume v;
  ASSERT_OK(ReadDicom(s12, &v));
  ASSERT_EQ(v.type, SampleType::kInt16);
  const int16_t* p = reinterpret_cast<const int16_t*>(v.data.data());
  EXPECT_EQ(p[0], -1);
  EXPECT_EQ(p[1], -2048);
  EXPECT_EQ(p[2], 2047);
  // Unsigned 12-bit with bits above set: they are not pixel data.
  const std::string u12 = WriteSeries(tmp / "u12", [](int, DicomSpec* d) {
    d->inter = 0;
    d->pixels = DicomPixels16(std::vector<int>(12, 0xF123));
  });
  ASSERT_OK(ReadDicom(u12, &v));
  ASSERT_EQ(v.type, SampleType::kUint16);
  EXPECT_EQ(reinterpret_cast<const uint16_t*>(v.data.data())[0], 0x123);
  // A fractional slope: float32.
  const std::string frac = WriteSeries(tmp / "frac", [](int, DicomSpec* d) {
    d->slope = 0.5;
    d->inter = 0.25;
  });
  ASSERT_OK(ReadDicom(frac, &v));
  ASSERT_EQ(v.type, SampleType::kFloat32);
  EXPECT_FLOAT_EQ(reinterpret_cast<const float*>(v.data.data())[5], Stored(0, 1, 1) * 0.5f + 0.25f);
  // An integer rescale past int16 (stored 16-bit up to 60000, slope 1, intercept 1): uint16.
  const std::string wide = WriteSeries(tmp / "wide", [](int, DicomSpec* d) {
    d->bits_stored = 16;
    d->inter = 1;
    d->pixels = DicomPixels16(std::vector<int>(12, 60000));
  });
  ASSERT_OK(ReadDicom(wide, &v));
  ASSERT_EQ(v.type, SampleType::kUint16);
  EXPECT_EQ(reinterpret_cast<const uint16_t*>(v.data.data())[0], 60001);
  // Varying per-slice rescale (each slice's own applied).
  const std::string per = WriteSeries(tmp / "per", [](int k, DicomSpec* d) {
    d->slope = k + 1;
    d->inter = -k;
  });
  ASSERT_OK(ReadDicom(per, &v));
  ASSERT_EQ(v.type, SampleType::kInt16);
  p = reinterpret_cast<const int16_t*>(v.data.data());
  EXPECT_EQ(p[12 * 2], Stored(2, 0, 0) * 3 - 2);
}

// Re-encodes every file of `dir` to `xfer` with DCMTK's own encoders (JPEG lossless, JPEG-LS).
void Recompress(const std::string& dir, E_TransferSyntax xfer) {
  static std::once_flag once;
  std::call_once(once, [] {
    DJEncoderRegistration::registerCodecs();
    DJLSEncoderRegistration::registerCodecs();
  });
  for (const auto& e : std::filesystem::directory_iterator(dir)) {
    DcmFileFormat ff;
    ASSERT_TRUE(ff.loadFile(e.path().c_str()).good()) << e.path();
    DcmDataset* ds = ff.getDataset();
    DJ_RPLossless jpeg;
    DJLSRepresentationParameter jpeg_ls(0, OFTrue);
    const DcmRepresentationParameter* param =
        xfer == EXS_JPEGProcess14SV1 ? static_cast<const DcmRepresentationParameter*>(&jpeg)
                                     : &jpeg_ls;
    ASSERT_TRUE(ds->chooseRepresentation(xfer, param).good()) << DcmXfer(xfer).getXferName();
    ASSERT_TRUE(ds->canWriteXfer(xfer));
    ASSERT_TRUE(ff.saveFile(e.path().c_str(), xfer).good());
  }
}

TEST(Dicom, CompressedSeriesDecodeToTheSamePixels) {
  TempDir tmp;
  Volume native;
  ASSERT_OK(ReadDicom(WriteSeries(tmp / "native"), &native));
  for (E_TransferSyntax xfer : {EXS_JPEGProcess14SV1, EXS_JPEGLSLossless}) {
    SCOPED_TRACE(DcmXfer(xfer).getXferName());
    const std::string dir = WriteSeries(tmp / std::to_string(static_cast<int>(xfer)));
    Recompress(dir, xfer);
    DcmFileFormat check;
    ASSERT_TRUE(check.loadFile((dir + "/a.dcm").c_str()).good());
    ASSERT_EQ(check.getDataset()->getOriginalXfer(), xfer);  // really compressed on disk
    Volume v;
    ASSERT_OK(ReadDicom(dir, &v));
    EXPECT_EQ(v.type, native.type);
    EXPECT_EQ(v.data, native.data);
  }
  // JPEG 2000: DCMTK has no decoder; the header reads, the pixels are refused by name.
  const std::string j2k = WriteSeries(tmp / "j2k", [](int, DicomSpec* d) {
    d->transfer_syntax = "1.2.840.10008.1.2.4.90";
    d->fragments = {"\xff\x4f\xff\x51 not really a codestream"};
  });
  VolumeInfo info;
  ASSERT_OK(ReadDicomInfo(j2k, &info));
  Volume v;
  const Status st = ReadDicom(j2k, &v);
  EXPECT_EQ(st.code(), Status::Code::kBadInput);
  EXPECT_TRUE(Has(st, "its pixels could not be decoded (transfer syntax JPEG 2000"))
      << st.ToString();
  EXPECT_TRUE(Has(st, "not JPEG 2000")) << st.ToString();
}

// A series written with one edit (to slice k's spec), then read: the error must hold every
// needle.
void ExpectRefused(const std::string& case_name, const std::function<void(int, DicomSpec*)>& edit,
                   const std::vector<std::string>& needles) {
  TempDir tmp;
  const std::string dir = WriteSeries(tmp / case_name, edit);
  Volume v;
  const Status st = ReadDicom(dir, &v);
  ASSERT_EQ(st.code(), Status::Code::kBadInput) << case_name << ": " << st.ToString();
  EXPECT_TRUE(Has(st, dir + ": ")) << st.ToString();
  for (const std::string& n : needles)
    EXPECT_TRUE(Has(st, n)) << case_name << ": " << st.ToString();
  VolumeInfo info;
  EXPECT_FALSE(ReadDicomInfo(dir, &info).ok()) << case_name;
}

TEST(Dicom, BadSeriesAreRefusedNamingTheFiles) {
  ExpectRefused("gap",
                [](int k, DicomSpec* d) {
                  if (k == 2) d->ipp[2] += 2.5;
                },
                {"not evenly spaced", "a.dcm and b.dcm are 5 mm apart", "2.5 mm elsewhere"});
  ExpectRefused("dup",
                [](int k, DicomSpec* d) {
                  if (k == 2) d->ipp[2] = 12.5;
                },
                {"at the same position", "a.dcm", "b.dcm"});
  ExpectRefused("size",
                [](int k, DicomSpec* d) {
                  if (k == 1) d->rows = 2, d->pixels.resize(16);
                },
                {"differ in size", "4x2 in a.dcm, 4x3 in b.dcm"});
  ExpectRefused("orientation",
                [](int k, DicomSpec* d) {
                  if (k == 1) d->iop[4] = -1;
                },
                {"differ in orientation", "a.dcm"});
  ExpectRefused("spacing",
                [](int k, DicomSpec* d) {
                  if (k == 0) d->spacing[0] = 0.6;
                },
                {"differ in PixelSpacing"});
  ExpectRefused("series",
                [](int k, DicomSpec* d) {
                  if (k == 2) d->series = "9.9";
                },
                {"holds 2 series", "'9.9': 1 file, e.g. b.dcm", "own folder"});
  ExpectRefused("colour",
                [](int k, DicomSpec* d) {
                  if (k == 0) d->text[0x00280002] = "3";
                },
                {"c.dcm: SamplesPerPixel is 3", "colour"});
  ExpectRefused("frames",
                [](int k, DicomSpec* d) {
                  if (k == 0) d->text[0x00280008] = "2";
                },
                {"multi-frame", "NumberOfFrames 2"});
  ExpectRefused("no-position",
                [](int k, DicomSpec* d) {
                  if (k == 1) d->omit.insert(0x00200032);
                },
                {"a.dcm: no ImagePositionPatient"});
  ExpectRefused("slope0",
                [](int k, DicomSpec* d) {
                  if (k == 1) d->slope = 0;
                },
                {"a.dcm: RescaleSlope is 0"});
  ExpectRefused("bad-number",
                [](int k, DicomSpec* d) {
                  if (k == 1) d->text[0x00200032] = "1\\abc\\3";
                },
                {"a.dcm: ImagePositionPatient is '1\\abc\\3', not 3 numbers"});
  ExpectRefused("skew", [](int, DicomSpec* d) { d->iop[0] = 1, d->iop[1] = 0.2, d->iop[2] = 0; },
                {"not two orthogonal unit vectors"});
  ExpectRefused("truncated",
                [](int k, DicomSpec* d) {
                  if (k == 1) d->cut = 7;
                },
                {"a.dcm: not a DICOM file DCMTK can read", "truncated"});
  ExpectRefused("pixels-short",
                [](int k, DicomSpec* d) {
                  if (k == 1) d->pixels.resize(10);
                },
                {"a.dcm", "bytes"});
  ExpectRefused("no-pixels",
                [](int k, DicomSpec* d) {
                  if (k == 1) d->omit.insert(0x7fe00010);
                },
                {"a.dcm: no pixel data"});
  ExpectRefused("bits",
                [](int k, DicomSpec* d) {
                  if (k == 1) d->bits_stored = 17;
                },
                {"a.dcm: BitsStored 17 does not fit BitsAllocated 16"});
  ExpectRefused("huge",
                [](int k, DicomSpec* d) {
                  if (k == 0) d->text[0x00280010] = "65535", d->text[0x00280011] = "65535";
                },
                {"more than the 1073741824 voxels"});
}

TEST(Dicom, FoldersThatAreNotSeries) {
  TempDir tmp;
  const std::string empty = tmp / "empty";
  std::filesystem::create_directories(empty);
  EXPECT_FALSE(IsDicomSeriesDir(empty));
  VolumeInfo info;
  EXPECT_TRUE(Has(ReadDicomInfo(empty, &info), "a DICOM series folder with no files"));
  // A stray file among the slices is named.
  const std::string dir = WriteSeries(tmp / "stray");
  std::ofstream(dir + "/notes.txt") << "not an image";
  ASSERT_TRUE(IsDicomSeriesDir(dir));
  const Status st = ReadDicomInfo(dir, &info);
  EXPECT_TRUE(Has(st, dir + ": notes.txt: ")) << st.ToString();
  // Hidden files and DICOMDIR are not slices.
  std::filesystem::remove(dir + "/notes.txt");
  std::ofstream(dir + "/.DS_Store") << "x";
  std::ofstream(dir + "/DICOMDIR") << "x";
  ASSERT_OK(ReadDicomInfo(dir, &info));
  EXPECT_EQ(info.dim[2], 3);
  // A folder of PNGs is not a series; a NIfTI path goes to the NIfTI reader.
  const std::string png = tmp / "png";
  std::filesystem::create_directories(png);
  std::ofstream(png + "/a.png") << "x";
  EXPECT_FALSE(IsDicomSeriesDir(png));
  EXPECT_TRUE(Has(ReadVolumeInfo(tmp / "missing.nii", &info), "missing.nii"));
}

// A build from images/<series>/ with a NIfTI label map named after the series: one record per
// slice, the label aligned, the series folder in the volumes table; a label on another grid is
// named with both paths.
TEST(DicomBuild, ASeriesWithANiftiLabelBuildsOneRecordPerSlice) {
  TempDir tmp;
  const std::string src = tmp / "ct";
  const std::string series = WriteSeries(src + "/images/case7");
  VolumeInfo info;
  ASSERT_OK(ReadDicomInfo(series, &info));
  dspipe::testing::NiftiSpec ls;
  ls.nx = 4, ls.ny = 3, ls.nz = 3;
  ls.datatype = DT_UINT8;
  for (int r = 0; r < 4; ++r)
    for (int c = 0; c < 4; ++c) ls.affine[r][c] = info.affine[r][c];
  std::vector<uint8_t> lab(36);
  for (size_t i = 0; i < lab.size(); ++i) lab[i] = static_cast<uint8_t>(i % 3);
  std::filesystem::create_directories(src + "/labels");
  ASSERT_TRUE(dspipe::testing::WriteNifti(src + "/labels/case7.nii.gz", ls, lab.data()));

  BuildOptions o = dspipe::testing::Options(src, tmp / "out");
  BuildResult r;
  ASSERT_OK(BuildDataset(o, &r));
  EXPECT_EQ(r.records, 3u);
  std::vector<dspipe::testing::Rec> recs;
  ASSERT_OK(dspipe::testing::ReadRecords(tmp / "out", &recs));
  ASSERT_EQ(recs.size(), 3u);
  EXPECT_EQ(recs[0].header.image_type, SampleType::kInt16);
  EXPECT_EQ(recs[0].header.height, 4u);  // canonical R rows (the file's columns)
  EXPECT_EQ(recs[0].header.width, 3u);
  const nlohmann::json m =
      nlohmann::json::parse(dspipe::testing::ReadAll(tmp / "out/manifest.json"));
  const nlohmann::json& mf = m.contains("manifest") ? m.at("manifest") : m;
  const nlohmann::json& v = mf.at("volumes").at("list").at(0);
  EXPECT_EQ(v.at("image"), series);
  EXPECT_EQ(v.at("label"), src + "/labels/case7.nii.gz");
  EXPECT_EQ(v.at("records"), nlohmann::json::array({0, 3}));
  EXPECT_NEAR(v.at("spacing")[2].get<double>(), 2.5, 1e-9);

  std::string text;
  ASSERT_OK(DescribeDataset(tmp / "out", &text));
  EXPECT_NE(text.find("volumes:     1 (3 axial slices, RAS); in-plane spacing 0.7 x 0.5 mm\n"),
            std::string::npos)
      << text;

  // A resumed build notices a slice rewritten in place (the folder's own stat does not change).
  o.resume = true;
  ASSERT_OK(BuildDataset(o, &r));
  EXPECT_TRUE(r.already_complete);
  const std::string slice = series + "/a.dcm";
  std::filesystem::last_write_time(
      slice, std::filesystem::last_write_time(slice) + std::chrono::seconds(5));
  Status resumed = BuildDataset(o, &r);
  EXPECT_EQ(resumed.code(), Status::Code::kInvalidArgument) << resumed.ToString();
  EXPECT_TRUE(Has(resumed, "the source changed")) << resumed.ToString();
  EXPECT_TRUE(Has(resumed, "images/case7/a.dcm")) << resumed.ToString();
  o.resume = false;

  // The label one slice short: named with the series.
  ls.nz = 2;
  ASSERT_TRUE(dspipe::testing::WriteNifti(src + "/labels/case7.nii.gz", ls, lab.data()));
  o.overwrite = true;
  const Status st = BuildDataset(o, &r);
  EXPECT_EQ(st.code(), Status::Code::kBadInput) << st.ToString();
  EXPECT_TRUE(Has(st, "labels/case7.nii.gz does not match its image " + series)) << st.ToString();
}

}  // namespace
}  // namespace dspipe::volume
