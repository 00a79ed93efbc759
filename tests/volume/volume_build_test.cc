// SPDX-License-Identifier: Apache-2.0
// Building a dataset from a folder of NIfTI volumes (BuildDataset on imagesTr/ + labelsTr/):
// one record per slice, pixels and labels equal to the reader's slices, the manifest's volume
// table, and bad volumes named.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "codec/image.h"
#include "convert/test_support.h"
#include "volume/nifti_writer.h"
#include "volume/volume.h"

namespace dspipe::volume {
namespace {

using dspipe::testing::NiftiSpec;
using dspipe::testing::TempDir;
using dspipe::testing::WriteNifti;
using json = nlohmann::json;
namespace fs = std::filesystem;

#define ASSERT_OK(e)                       \
  do {                                     \
    const ::dspipe::Status _s = (e);       \
    ASSERT_TRUE(_s.ok()) << _s.ToString(); \
  } while (0)

// A record's image or mask decoded with its own type and channels.
cv::Mat DecodeTypedPayload(const dspipe::testing::Rec& r, bool mask) {
  codec::DecodeRequest q;
  q.codec = mask ? r.header.mask_codec : r.header.image_codec;
  const std::string& bytes = mask ? r.mask : r.image;
  q.payload = {reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size()};
  q.type = mask ? r.header.mask_type : r.header.image_type;
  q.channels = mask ? 1 : r.header.channels;
  q.is_mask = mask;
  q.height = static_cast<int>(r.header.height);
  q.width = static_cast<int>(r.header.width);
  cv::Mat scratch;
  codec::DecodedImage out;
  const Status s = codec::DecodePayload(q, &scratch, &out);
  EXPECT_TRUE(s.ok()) << s.ToString();
  return out.image.clone();
}

bool Equal(const cv::Mat& a, const cv::Mat& b) {
  if (a.size() != b.size() || a.type() != b.type()) return false;
  cv::Mat d;
  cv::absdiff(a.reshape(1), b.reshape(1), d);
  return cv::countNonZero(d) == 0;
}

struct Task {
  TempDir dir;
  std::string src = dir / "Task01";
  Task() {
    fs::create_directories(src + "/imagesTr");
    fs::create_directories(src + "/labelsTr");
    // a: LPS int16 6x5x4; b: RAS, scaled uint16 (HU by an intercept) 6x5x3.
    NiftiSpec s;
    s.nx = 6, s.ny = 5, s.nz = 4;
    const double lps[4][4] = {{-0.8, 0, 0, 0}, {0, -0.8, 0, 0}, {0, 0, 2.5, 0}, {0, 0, 0, 1}};
    std::memcpy(s.affine, lps, sizeof lps);
    std::vector<int16_t> a(6 * 5 * 4);
    std::vector<uint8_t> la(a.size());
    for (size_t i = 0; i < a.size(); ++i) {
      a[i] = static_cast<int16_t>(static_cast<int>(i * 37 % 2000) - 1000);
      la[i] = static_cast<uint8_t>(i % 7 == 0 ? 2 : i % 3 == 0 ? 1 : 0);
    }
    EXPECT_TRUE(WriteNifti(src + "/imagesTr/a.nii.gz", s, a.data()));
    NiftiSpec l = s;
    l.datatype = DT_UINT8;
    EXPECT_TRUE(WriteNifti(src + "/labelsTr/a.nii.gz", l, la.data()));
    NiftiSpec sb = s;
    sb.nz = 3;
    const double ras[4][4] = {{0.8, 0, 0, 0}, {0, 0.8, 0, 0}, {0, 0, 2.5, 0}, {0, 0, 0, 1}};
    std::memcpy(sb.affine, ras, sizeof ras);
    sb.datatype = DT_UINT16;
    sb.scl_slope = 1, sb.scl_inter = -1024;
    std::vector<uint16_t> b(6 * 5 * 3);
    for (size_t i = 0; i < b.size(); ++i) b[i] = static_cast<uint16_t>(i * 53 % 3000);
    EXPECT_TRUE(WriteNifti(src + "/imagesTr/b.nii.gz", sb, b.data()));
    NiftiSpec lb = sb;
    lb.datatype = DT_FLOAT32, lb.scl_slope = 0, lb.scl_inter = 0;
    std::vector<float> fb(b.size());
    for (size_t i = 0; i < fb.size(); ++i) fb[i] = static_cast<float>(i % 2);
    EXPECT_TRUE(WriteNifti(src + "/labelsTr/b.nii.gz", lb, fb.data()));
    dspipe::testing::WriteAll(src + "/dataset.json",
                              R"({"name": "Test", "labels": {"0": "background", "1": "organ",
                                  "2": "tumour"}, "modality": {"0": "CT"}})");
    dspipe::testing::WriteAll(src + "/imagesTr/._a.nii.gz", "macOS metadata");
  }
};

// Every record is its volume's slice as the reader cuts it (after a, b's slices), in both
// storage modes; the manifest lists the volumes with their records and the class names.
TEST(VolumeBuild, EveryRecordIsItsSliceAndTheManifestMapsThemBack) {
  Task t;
  for (StoreMode store : {StoreMode::kEncoded, StoreMode::kRaw}) {
    SCOPED_TRACE(store == StoreMode::kRaw ? "raw" : "encoded");
    const std::string out = t.dir / (store == StoreMode::kRaw ? "raw" : "enc");
    BuildOptions o = dspipe::testing::Options(t.src, out);
    o.store = store;
    BuildResult r;
    ASSERT_OK(BuildDataset(o, &r));
    EXPECT_EQ(r.records, 7u);
    std::vector<dspipe::testing::Rec> recs;
    ASSERT_OK(dspipe::testing::ReadRecords(out, &recs));
    ASSERT_EQ(recs.size(), 7u);
    Volume a, la, b, lb;
    ASSERT_OK(ReadNifti(t.src + "/imagesTr/a.nii.gz", false, &a));
    ASSERT_OK(ReadNifti(t.src + "/labelsTr/a.nii.gz", true, &la));
    ASSERT_OK(ReadNifti(t.src + "/imagesTr/b.nii.gz", false, &b));
    ASSERT_OK(ReadNifti(t.src + "/labelsTr/b.nii.gz", true, &lb));
    ASSERT_EQ(b.type, SampleType::kInt16);
    for (int i = 0; i < 7; ++i) {
      const Volume& img = i < 4 ? a : b;
      const Volume& lab = i < 4 ? la : lb;
      const int k = i < 4 ? i : i - 4;
      cv::Mat want, want_mask;
      ASSERT_OK(ExtractSlice(img, SliceAxis::kAxial, k, &want));
      ASSERT_OK(ExtractSlice(lab, SliceAxis::kAxial, k, &want_mask));
      EXPECT_EQ(recs[i].header.image_type, SampleType::kInt16);
      EXPECT_EQ(recs[i].header.height, 6u);
      EXPECT_EQ(recs[i].header.width, 5u);
      EXPECT_TRUE(Equal(DecodeTypedPayload(recs[i], false), want)) << "record " << i;
      EXPECT_TRUE(Equal(DecodeTypedPayload(recs[i], true), want_mask)) << "record " << i;
    }
    const json m = json::parse(dspipe::testing::ReadAll(out + "/manifest.json"));
    const json& mf = m.contains("manifest") ? m.at("manifest") : m;
    ASSERT_TRUE(mf.contains("volumes")) << mf.dump(1);
    const json& v = mf.at("volumes");
    EXPECT_EQ(v.at("slice_axis"), "axial");
    ASSERT_EQ(v.at("list").size(), 2u);
    EXPECT_EQ(v.at("list")[0].at("records"), json::array({0, 4}));
    EXPECT_EQ(v.at("list")[1].at("records"), json::array({4, 3}));
    EXPECT_EQ(v.at("list")[0].at("shape"), json::array({6, 5, 4}));
    EXPECT_NEAR(v.at("list")[0].at("affine")[0][0].get<double>(), 0.8, 1e-6);  // RAS now (float32 srow)
    EXPECT_EQ(mf.at("class_names"), json::array({"background", "organ", "tumour"}));
    EXPECT_EQ(mf.at("num_classes"), 3);
    EXPECT_EQ(mf.at("sample_type"), "int16");
  }
}

TEST(VolumeBuild, AMismatchedLabelIsNamedOrSkipped) {
  Task t;
  NiftiSpec s;
  s.nx = 6, s.ny = 5, s.nz = 2;  // a's label now has 2 slices, its image 4
  s.datatype = DT_UINT8;
  std::vector<uint8_t> z(60);
  ASSERT_TRUE(WriteNifti(t.src + "/labelsTr/a.nii.gz", s, z.data()));
  BuildOptions o = dspipe::testing::Options(t.src, t.dir / "out");
  BuildResult r;
  Status st = BuildDataset(o, &r);
  EXPECT_EQ(st.code(), Status::Code::kBadInput) << st.ToString();
  EXPECT_TRUE(dspipe::testing::Contains(st.message(), "labelsTr/a.nii.gz does not match its image"))
      << st.ToString();
  EXPECT_FALSE(fs::exists(t.dir / "out/manifest.json"));
  o.on_error = OnError::kSkip;
  o.overwrite = true;
  ASSERT_OK(BuildDataset(o, &r));
  EXPECT_EQ(r.records, 3u);
  const std::string tsv = dspipe::testing::ReadAll(t.dir / "out/rejected.tsv");
  EXPECT_TRUE(dspipe::testing::Contains(tsv, "imagesTr/a.nii.gz")) << tsv;
  const json m = json::parse(dspipe::testing::ReadAll(t.dir / "out/manifest.json"));
  const json& mf = m.contains("manifest") ? m.at("manifest") : m;
  EXPECT_EQ(mf.at("volumes").at("list")[0].at("records"), json::array({0, 0}));
  EXPECT_EQ(mf.at("volumes").at("list")[1].at("records"), json::array({0, 3}));
}

// Shards built one at a time (a Ray task each) and assembled give the same volumes table as one
// sharded build: each shard's manifest keeps the plan's list, the join numbers the records (a
// shard boundary cuts volume a's slices: 7 records in 3 shards). A rejected volume in the
// middle shard moves the later volumes' records in both.
TEST(VolumeBuild, ShardsBuiltAloneAssembleTheVolumesTable) {
  Task t;
  for (bool reject : {false, true}) {
    SCOPED_TRACE(reject ? "b rejected" : "all kept");
    if (reject) {
      NiftiSpec s;
      s.nx = 6, s.ny = 5, s.nz = 2;  // b's label: 2 slices for 3
      s.datatype = DT_UINT8;
      std::vector<uint8_t> z(60);
      ASSERT_TRUE(WriteNifti(t.src + "/labelsTr/b.nii.gz", s, z.data()));
    }
    const std::string tag = reject ? "rej" : "ok";
    BuildOptions o = dspipe::testing::Options(t.src, t.dir / ("whole-" + tag));
    o.shards = 3;
    o.on_error = OnError::kSkip;
    BuildResult r;
    ASSERT_OK(BuildDataset(o, &r));
    const std::string parts = t.dir / ("parts-" + tag);
    for (int i : {2, 0, 1}) {
      BuildOptions oi = o;
      oi.output = parts;
      oi.shard_index = i;
      ASSERT_OK(BuildDataset(oi, &r));
    }
    AssembleResult a;
    ASSERT_OK(AssembleDataset(parts, &a));
    auto volumes = [](const std::string& dir) {
      const json m = json::parse(dspipe::testing::ReadAll(dir + "/manifest.json"));
      const json& mf = m.contains("manifest") ? m.at("manifest") : m;
      EXPECT_TRUE(mf.contains("volumes")) << dir;
      return mf.value("volumes", json());
    };
    const json whole = volumes(o.output), joined = volumes(parts);
    EXPECT_EQ(joined, whole);
    EXPECT_EQ(joined.at("list")[0].at("records"), json::array({0, 4}));
    EXPECT_EQ(joined.at("list")[1].at("records"),
              reject ? json::array({4, 0}) : json::array({4, 3}));
  }
}

TEST(VolumeBuild, OptionsThatWouldChangeSlicesAreRefused) {
  Task t;
  BuildOptions o = dspipe::testing::Options(t.src, t.dir / "out");
  o.resize_width = o.resize_height = 8;
  BuildResult r;
  Status st = BuildDataset(o, &r);
  EXPECT_EQ(st.code(), Status::Code::kInvalidArgument) << st.ToString();
  EXPECT_TRUE(dspipe::testing::Contains(st.message(), "a folder of volumes")) << st.ToString();
  EXPECT_FALSE(fs::exists(t.dir / "out"));
  o = dspipe::testing::Options(t.src, t.dir / "out");
  o.slice_axis = "sideways";
  st = BuildDataset(o, &r);
  EXPECT_EQ(st.code(), Status::Code::kInvalidArgument) << st.ToString();
  // Sagittal: 6 slices per volume (the R axis), each 5x4 (A x S) for a.
  o.slice_axis = "sagittal";
  ASSERT_OK(BuildDataset(o, &r));
  EXPECT_EQ(r.records, 12u);
  std::vector<dspipe::testing::Rec> recs;
  ASSERT_OK(dspipe::testing::ReadRecords(t.dir / "out", &recs));
  EXPECT_EQ(recs[0].header.height, 5u);
  EXPECT_EQ(recs[0].header.width, 4u);
}

}  // namespace
}  // namespace dspipe::volume
