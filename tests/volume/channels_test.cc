// SPDX-License-Identifier: Apache-2.0
// Images kept as one file per channel (nnU-Net's CASE_0000.nii.gz, CASE_0001.nii.gz, ...; labels
// CASE.nii.gz): the reader (ReadChannels), the source scan that groups them into cases, and a
// build whose records hold every channel. tests/python/test_volume_channels.py checks the same
// against nibabel.
#include <gtest/gtest.h>

#include <filesystem>
#include <nlohmann/json.hpp>

#include "convert/test_support.h"
#include "dspipe/convert.h"
#include "volume/nifti_writer.h"
#include "volume/volume.h"

namespace dspipe::volume {
namespace {

using dspipe::testing::NiftiSpec;
using dspipe::testing::TempDir;
using dspipe::testing::WriteNifti;
namespace fs = std::filesystem;

#define ASSERT_OK(e)                       \
  do {                                     \
    const ::dspipe::Status _s = (e);       \
    ASSERT_TRUE(_s.ok()) << _s.ToString(); \
  } while (0)

bool Has(const Status& s, const std::string& what) {
  return s.message().find(what) != std::string::npos;
}

// A 4x3x2 int16 channel whose voxels are base + index.
void WriteChannel(const std::string& path, int base, int datatype = DT_INT16, int nz = 2) {
  NiftiSpec s;
  s.nx = 4, s.ny = 3, s.nz = nz;
  s.datatype = datatype;
  std::vector<int16_t> v(static_cast<size_t>(12 * nz));
  std::vector<float> f(v.size());
  for (size_t i = 0; i < v.size(); ++i) v[i] = static_cast<int16_t>(base + i), f[i] = base + i;
  ASSERT_TRUE(WriteNifti(path, s,
                         datatype == DT_FLOAT32 ? static_cast<const void*>(f.data())
                                                : static_cast<const void*>(v.data())));
}

void WriteLabel(const std::string& path) {
  NiftiSpec s;
  s.nx = 4, s.ny = 3, s.nz = 2;
  s.datatype = DT_UINT8;
  std::vector<uint8_t> v(24);
  for (size_t i = 0; i < v.size(); ++i) v[i] = static_cast<uint8_t>(i % 3);
  ASSERT_TRUE(WriteNifti(path, s, v.data()));
}

TEST(Channels, OneFilePerChannelReadsAsOneVolume) {
  TempDir tmp;
  const std::vector<std::string> files = {tmp / "c_0000.nii.gz", tmp / "c_0001.nii.gz",
                                          tmp / "c_0002.nii.gz"};
  for (int c = 0; c < 3; ++c) WriteChannel(files[c], 1000 * c);
  Volume v;
  ASSERT_OK(ReadChannels(files, &v));
  EXPECT_EQ(v.info.channels, 3);
  ASSERT_EQ(v.type, SampleType::kInt16);
  cv::Mat s;
  ASSERT_OK(ExtractSlice(v, SliceAxis::kAxial, 1, &s));
  ASSERT_EQ(s.channels(), 3);
  // Canonical (RAS: the identity affine) slice 1 at row 2, column 1 is voxel (2, 1, 1).
  for (int c = 0; c < 3; ++c) EXPECT_EQ(s.ptr<int16_t>(2)[1 * 3 + c], 1000 * c + 2 + 4 * 1 + 12);

  // A channel on another grid, of another type, or 4D: named.
  WriteChannel(tmp / "short.nii.gz", 0, DT_INT16, 3);
  Status st = ReadChannels({files[0], tmp / "short.nii.gz"}, &v);
  EXPECT_TRUE(Has(st, "short.nii.gz is not on the grid of its first channel")) << st.ToString();
  WriteChannel(tmp / "float.nii.gz", 0, DT_FLOAT32);
  st = ReadChannels({files[0], tmp / "float.nii.gz"}, &v);
  EXPECT_TRUE(Has(st, "float.nii.gz: its voxels read as float32 and the case's first channel"))
      << st.ToString();
}

struct Task {
  TempDir dir;
  std::string src = dir / "Dataset001";
  Task() {
    fs::create_directories(src + "/imagesTr");
    fs::create_directories(src + "/labelsTr");
    for (const char* c : {"BRATS_001", "BRATS_002"}) {
      for (int m = 0; m < 2; ++m) {
        WriteChannel(src + "/imagesTr/" + c + "_000" + std::to_string(m) + ".nii.gz", 100 * m);
      }
      WriteLabel(src + "/labelsTr/" + std::string(c) + ".nii.gz");
    }
    dspipe::testing::WriteAll(src + "/dataset.json",
                              R"({"channel_names": {"0": "T1", "1": "FLAIR"},
                                  "labels": {"background": 0, "edema": 1, "tumour": 2}})");
  }
};

TEST(Channels, AnNnUnetFolderBuildsOneRecordPerSliceWithEveryChannel) {
  Task t;
  BuildOptions o = dspipe::testing::Options(t.src, t.dir / "out");
  BuildResult r;
  ASSERT_OK(BuildDataset(o, &r));
  EXPECT_EQ(r.records, 4u);
  std::vector<dspipe::testing::Rec> recs;
  ASSERT_OK(dspipe::testing::ReadRecords(t.dir / "out", &recs));
  ASSERT_EQ(recs.size(), 4u);
  EXPECT_EQ(recs[0].header.channels, 2);
  const nlohmann::json m =
      nlohmann::json::parse(dspipe::testing::ReadAll(t.dir / "out/manifest.json"));
  const nlohmann::json& mf = m.contains("manifest") ? m.at("manifest") : m;
  EXPECT_EQ(mf.at("class_names"), nlohmann::json::array({"background", "edema", "tumour"}));
  const nlohmann::json& vol = mf.at("volumes");
  EXPECT_EQ(vol.at("channel_names"), nlohmann::json::array({"T1", "FLAIR"}));
  ASSERT_EQ(vol.at("list").size(), 2u);
  EXPECT_EQ(vol.at("list")[1].at("image"), t.src + "/imagesTr/BRATS_002_0000.nii.gz");
  EXPECT_EQ(vol.at("list")[1].at("label"), t.src + "/labelsTr/BRATS_002.nii.gz");
  EXPECT_EQ(vol.at("list")[1].at("channel_files"),
            nlohmann::json::array({t.src + "/imagesTr/BRATS_002_0000.nii.gz",
                                   t.src + "/imagesTr/BRATS_002_0001.nii.gz"}));

  std::string text;
  ASSERT_OK(DescribeDataset(t.dir / "out", &text));
  EXPECT_NE(text.find("volumes:     2 (4 axial slices, RAS); in-plane spacing 1 x 1 mm\n"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("channels:    0=T1, 1=FLAIR\n"), std::string::npos) << text;

  // A resumed build reads the channels again (the plan names the first file only), and
  // notices a channel file that changed.
  o.resume = true;
  ASSERT_OK(BuildDataset(o, &r));
  EXPECT_TRUE(r.already_complete);
  WriteChannel(t.src + "/imagesTr/BRATS_001_0001.nii.gz", 7);
  const Status st = BuildDataset(o, &r);
  EXPECT_TRUE(Has(st, "imagesTr/BRATS_001_0001.nii.gz")) << st.ToString();
}

TEST(Channels, AMissingChannelIsNamedAndOtherFoldersAreNotGrouped) {
  Task t;
  fs::remove(t.src + "/imagesTr/BRATS_002_0001.nii.gz");
  WriteChannel(t.src + "/imagesTr/BRATS_002_0002.nii.gz", 0);
  BuildOptions o = dspipe::testing::Options(t.src, t.dir / "out");
  BuildResult r;
  Status st = BuildDataset(o, &r);
  EXPECT_EQ(st.code(), Status::Code::kBadInput) << st.ToString();
  EXPECT_TRUE(Has(st, "channel 1 (BRATS_002_0001.nii[.gz]) is missing")) << st.ToString();
  fs::remove(t.src + "/imagesTr/BRATS_002_0002.nii.gz");
  o.overwrite = true;
  st = BuildDataset(o, &r);
  EXPECT_TRUE(Has(st, "it has 1 channel file and the dataset 2")) << st.ToString();

  // Case numbers that happen to be four digits, labels named as the images: a volume each.
  TempDir tmp;
  const std::string src = tmp / "plain";
  fs::create_directories(src + "/images");
  fs::create_directories(src + "/labels");
  for (const char* n : {"img_0001", "img_0002"}) {
    WriteChannel(src + "/images/" + n + ".nii.gz", 0);
    WriteLabel(src + "/labels/" + std::string(n) + ".nii.gz");
  }
  ASSERT_OK(BuildDataset(dspipe::testing::Options(src, tmp / "out"), &r));
  EXPECT_EQ(r.records, 4u);
  std::vector<dspipe::testing::Rec> recs;
  ASSERT_OK(dspipe::testing::ReadRecords(tmp / "out", &recs));
  EXPECT_EQ(recs[0].header.channels, 1);
}

}  // namespace
}  // namespace dspipe::volume
