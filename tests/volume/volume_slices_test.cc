// SPDX-License-Identifier: Apache-2.0
// Volume builds beyond one slice per record (issue 36): the per-slice foreground table,
// skip_empty (slices with an all-0 label left out, the kept ones listed so every record maps
// back to its slice) and 2.5D context (neighbouring slices as channels). Every record is checked
// against the reader's own slices (ExtractSlice, which tests/python/test_volumes.py checks
// against nibabel), and the table against counts made here from those slices.
#include "convert/volume_slices.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <nlohmann/json.hpp>

#include "codec/image.h"
#include "convert/record_maker.h"
#include "convert/test_support.h"
#include "dspipe/limits.h"
#include "dspipe/loader.h"
#include "volume/nifti_writer.h"
#include "volume/volume.h"

namespace dspipe::volume {
namespace {

using dspipe::convert::CheckContextChannels;
using dspipe::convert::ClassCounts;
using dspipe::convert::ForegroundSlices;
using dspipe::convert::MaskHistogram;
using dspipe::convert::ParseClassCounts;
using dspipe::convert::ParseMaskMap;
using dspipe::convert::StackSlices;
using dspipe::testing::Contains;
using dspipe::testing::NiftiSpec;
using dspipe::testing::Options;
using dspipe::testing::ReadAll;
using dspipe::testing::Rec;
using dspipe::testing::TempDir;
using dspipe::testing::WriteNifti;
using json = nlohmann::json;
namespace fs = std::filesystem;

#define ASSERT_OK(e)                       \
  do {                                     \
    const ::dspipe::Status _s = (e);       \
    ASSERT_TRUE(_s.ok()) << _s.ToString(); \
  } while (0)

cv::Mat Decode(const Rec& r, bool mask) {
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

json Manifest(const std::string& out) {
  const json m = json::parse(ReadAll(out + "/manifest.json"));
  return m.contains("manifest") ? m.at("manifest") : m;
}

// The class counts of a label slice, counted here: id -> pixels.
std::map<uint32_t, uint32_t> Count(const cv::Mat& mask) {
  std::map<uint32_t, uint32_t> n;
  for (int y = 0; y < mask.rows; ++y) {
    for (int x = 0; x < mask.cols; ++x) {
      ++n[mask.depth() == CV_16U ? mask.at<uint16_t>(y, x) : mask.at<uint8_t>(y, x)];
    }
  }
  return n;
}

// imagesTr/ + labelsTr/ of int16 volumes 6x5xZ with uint8 labels whose foreground sits in known
// axial slices:
//   a: LPI (every axis flipped: canonical slice k is the file's slice 5-k), 6 slices; the file's
//      slices 1, 2 hold class 1 and slice 4 class 2, so canonical slices 1 (class 2), 3, 4
//      (class 1) have foreground: kept [[1, 2], [3, 5]].
//   b: RAS, 4 slices; only slice 3 has foreground (class 2, one voxel).
//   c: RAS, 3 slices, an all-0 label: nothing kept.
struct Task {
  TempDir dir;
  std::string src = dir / "Task05";
  explicit Task(bool labels = true) {
    fs::create_directories(src + "/imagesTr");
    if (labels) fs::create_directories(src + "/labelsTr");
    Add(
        "a", 6, {{-0.8, 0, 0, 4}, {0, -0.8, 0, 3}, {0, 0, -2.5, 12}, {0, 0, 0, 1}},
        [](int64_t i, int64_t j, int64_t k) -> uint8_t {
          if ((k == 1 || k == 2) && i >= 1 && i < 4 && j >= 2) return 1;
          return k == 4 && i == 5 && j == 0 ? 2 : 0;
        },
        labels);
    Add(
        "b", 4, {{0.8, 0, 0, 0}, {0, 0.8, 0, 0}, {0, 0, 2.5, 0}, {0, 0, 0, 1}},
        [](int64_t i, int64_t j, int64_t k) -> uint8_t {
          return k == 3 && i == 2 && j == 1 ? 2 : 0;
        },
        labels);
    Add(
        "c", 3, {{0.8, 0, 0, 0}, {0, 0.8, 0, 0}, {0, 0, 2.5, 0}, {0, 0, 0, 1}},
        [](int64_t, int64_t, int64_t) -> uint8_t { return 0; }, labels);
  }
  template <class F>
  void Add(const std::string& name, int64_t nz, const std::vector<std::vector<double>>& affine,
           F label_of, bool labels) {
    NiftiSpec s;
    s.nx = 6, s.ny = 5, s.nz = nz;
    for (int r = 0; r < 4; ++r)
      for (int c = 0; c < 4; ++c) s.affine[r][c] = affine[r][c];
    std::vector<int16_t> img(static_cast<size_t>(6 * 5 * nz));
    std::vector<uint8_t> lab(img.size());
    for (int64_t k = 0; k < nz; ++k)
      for (int64_t j = 0; j < 5; ++j)
        for (int64_t i = 0; i < 6; ++i) {
          const size_t at = static_cast<size_t>(i + 6 * (j + 5 * k));
          img[at] = static_cast<int16_t>(i + 10 * j + 100 * k + 1000 * name[0] - 97000);
          lab[at] = label_of(i, j, k);
        }
    EXPECT_TRUE(WriteNifti(src + "/imagesTr/" + name + ".nii.gz", s, img.data()));
    if (!labels) return;
    NiftiSpec l = s;
    l.datatype = DT_UINT8;
    EXPECT_TRUE(WriteNifti(src + "/labelsTr/" + name + ".nii.gz", l, lab.data()));
  }
  std::string Image(const std::string& n) const { return src + "/imagesTr/" + n + ".nii.gz"; }
  std::string Label(const std::string& n) const { return src + "/labelsTr/" + n + ".nii.gz"; }
};

// The slice `k` with `context` neighbours, made here from ExtractSlice one channel at a time.
cv::Mat Stacked(const Volume& v, int64_t k, int context) {
  std::vector<cv::Mat> channels;
  const int64_t n = SliceCount(v.info, SliceAxis::kAxial);
  for (int j = -context; j <= context; ++j) {
    cv::Mat s;
    EXPECT_TRUE(ExtractSlice(v, SliceAxis::kAxial, std::clamp<int64_t>(k + j, 0, n - 1), &s).ok());
    std::vector<cv::Mat> parts;
    cv::split(s, parts);
    channels.insert(channels.end(), parts.begin(), parts.end());
  }
  cv::Mat out;
  cv::merge(channels, out);
  return out;
}

// Every record of `out` is the slice the slice table says, with `context` neighbours, its mask
// that slice's label, and its foreground row that label's class counts.
void ExpectRecordsAreTheirSlices(const Task& t, const std::string& out, int context,
                                 const std::vector<std::pair<std::string, int64_t>>& want) {
  SliceTable table;
  ASSERT_OK(ReadSliceTable(out, &table));
  std::vector<Rec> recs;
  ASSERT_OK(dspipe::testing::ReadRecords(out, &recs));
  ASSERT_EQ(recs.size(), want.size());
  ASSERT_EQ(table.volume.size(), want.size());
  ASSERT_TRUE(table.has_foreground);
  EXPECT_EQ(table.num_classes, 3);
  ASSERT_EQ(table.foreground.size(), want.size() * 3);
  EXPECT_EQ(table.context, context);
  std::map<std::string, Volume> images, labels;
  for (size_t i = 0; i < recs.size(); ++i) {
    SCOPED_TRACE("record " + std::to_string(i));
    const std::string image = table.images.at(static_cast<size_t>(table.volume[i]));
    const std::string name = fs::path(image).filename().string().substr(0, 1);
    EXPECT_EQ(name, want[i].first);
    EXPECT_EQ(table.slice[i], want[i].second);
    if (!images.count(name)) {
      ASSERT_OK(ReadNifti(t.Image(name), false, &images[name]));
      ASSERT_OK(ReadNifti(t.Label(name), true, &labels[name]));
    }
    EXPECT_EQ(recs[i].header.channels, 2 * context + 1);
    EXPECT_TRUE(Equal(Decode(recs[i], false), Stacked(images[name], table.slice[i], context)));
    cv::Mat label;
    ASSERT_OK(ExtractSlice(labels[name], SliceAxis::kAxial, table.slice[i], &label));
    EXPECT_TRUE(Equal(Decode(recs[i], true), label));
    const std::map<uint32_t, uint32_t> n = Count(label);
    for (uint32_t c = 0; c < 3; ++c) {
      EXPECT_EQ(table.foreground[i * 3 + c], n.count(c) ? n.at(c) : 0u) << "class " << c;
    }
  }
}

// Every record of a 13-record build of `t` at `out` against its source: want(slice, label,
// own spacing, &image, &mask) makes what record i should hold from the canonical slice and
// label the slice table names (ExtractSlice; each volume read once); the record's image and
// mask must equal them, its size be h x w, and its foreground row count that mask.
template <class Want>
void ExpectRecordsAre(const Task& t, const std::string& out, int h, int w, Want want) {
  SliceTable table;
  ASSERT_OK(ReadSliceTable(out, &table));
  std::vector<Rec> recs;
  ASSERT_OK(dspipe::testing::ReadRecords(out, &recs));
  ASSERT_EQ(recs.size(), 13u);
  std::map<std::string, Volume> images, labels;
  for (size_t i = 0; i < recs.size(); ++i) {
    SCOPED_TRACE("record " + std::to_string(i));
    const std::string image = table.images.at(static_cast<size_t>(table.volume[i]));
    const std::string name = fs::path(image).filename().string().substr(0, 1);
    if (!images.count(name)) {
      ASSERT_OK(ReadNifti(t.Image(name), false, &images[name]));
      ASSERT_OK(ReadNifti(t.Label(name), true, &labels[name]));
    }
    ASSERT_EQ(recs[i].header.height, static_cast<uint32_t>(h));
    ASSERT_EQ(recs[i].header.width, static_cast<uint32_t>(w));
    cv::Mat slice, label, want_image, want_label;
    ASSERT_OK(ExtractSlice(images[name], SliceAxis::kAxial, table.slice[i], &slice));
    ASSERT_OK(ExtractSlice(labels[name], SliceAxis::kAxial, table.slice[i], &label));
    want(slice, label, SliceSpacing(images[name].info, SliceAxis::kAxial), &want_image,
         &want_label);
    EXPECT_TRUE(Equal(Decode(recs[i], false), want_image));
    EXPECT_TRUE(Equal(Decode(recs[i], true), want_label));
    const std::map<uint32_t, uint32_t> n = Count(want_label);
    for (uint32_t c = 0; c < 3; ++c) {
      EXPECT_EQ(table.foreground[i * 3 + c], n.count(c) ? n.at(c) : 0u) << "class " << c;
    }
  }
}

// Builds `o` one record per commit, cancelled once `records` are committed: its output is left
// resumable, and `o` (resume set, no progress or cancel hook) resumes it.
void BuildCancelledAfter(uint64_t records, BuildOptions* o) {
  o->commit_bytes = 1;
  uint64_t done = 0;
  o->progress = [&](uint64_t d, uint64_t) { done = d; };
  o->cancelled = [&] { return done >= records; };
  BuildResult r;
  const Status st = BuildDataset(*o, &r);
  ASSERT_EQ(st.code(), Status::Code::kCancelled) << st.ToString();
  o->progress = nullptr;
  o->cancelled = nullptr;
  o->resume = true;
}

// A build of `t` with `o` cancelled after its first commit, then resumed with `change`
// applied: refused, the message naming `what`; resumed as it began: all 13 records.
template <class Change>
void ExpectResumeRefusesAChange(const Task& t, BuildOptions o, Change change,
                                const std::string& what) {
  o.output = t.dir / "resume";
  ASSERT_NO_FATAL_FAILURE(BuildCancelledAfter(1, &o));
  BuildResult r;
  BuildOptions changed = o;
  change(&changed);
  const Status st = BuildDataset(changed, &r);
  EXPECT_FALSE(st.ok());
  EXPECT_TRUE(Contains(st.message(), what)) << st.ToString();
  ASSERT_OK(BuildDataset(o, &r));
  EXPECT_EQ(r.records, 13u);
}

// dsconvert build takes `flag good` (dsconvert info then says `said`), refuses each of `bad`
// with the flag's own parse error `parse_error`, and `out_of_range` with the library's
// `range_error`, both exit 2.
void ExpectVolumeFlag(const Task& t, const std::string& flag, const std::string& good,
                      const std::string& said, const std::vector<std::string>& bad,
                      const std::string& parse_error, const std::string& out_of_range,
                      const std::string& range_error) {
  using dspipe::testing::RunTool;
  auto run = RunTool({"build", t.src, t.dir / "flag", flag, good, "-q"}, t.dir.path());
  EXPECT_EQ(run.exit_code, 0) << run.output;
  run = RunTool({"info", t.dir / "flag"}, t.dir.path());
  EXPECT_TRUE(Contains(run.output, said)) << run.output;
  for (const std::string& b : bad) {
    run = RunTool({"build", t.src, t.dir / "flagbad", flag, b}, t.dir.path());
    EXPECT_EQ(run.exit_code, 2) << b << ": " << run.output;
    EXPECT_TRUE(Contains(run.output, parse_error)) << run.output;
  }
  run = RunTool({"build", t.src, t.dir / "flagbad", flag, out_of_range}, t.dir.path());
  EXPECT_EQ(run.exit_code, 2) << run.output;
  EXPECT_TRUE(Contains(run.output, range_error)) << run.output;
}

// A build of a folder of 2D images with a volume-only option, set by `set`: refused before
// anything is written, naming `option` (and saying `also`, when given).
template <class Set>
void ExpectRefusedFor2DImages(Set set, const std::string& option, const std::string& also = "") {
  TempDir tmp;
  dspipe::testing::Synth(tmp / "src", 2, 16, 16);
  BuildOptions o = Options(tmp / "src", tmp / "out");
  set(&o);
  BuildResult r;
  const Status st = BuildDataset(o, &r);
  EXPECT_EQ(st.code(), Status::Code::kInvalidArgument) << st.ToString();
  EXPECT_TRUE(Contains(st.message(), option)) << st.ToString();
  EXPECT_TRUE(Contains(st.message(), "applies to volume sources")) << st.ToString();
  EXPECT_TRUE(Contains(st.message(), also)) << st.ToString();
  EXPECT_FALSE(fs::exists(o.output));
}

// ---- the pieces

// StackSlices: slice-major channels k-K..k+K, clamped (the edge slice repeated), for 1 and 2
// channels; context 0 is the slice itself.
TEST(VolumeSlices, ContextStacksNeighboursSliceMajorClampedAtTheEnds) {
  TempDir dir;
  NiftiSpec s;
  s.nx = 4, s.ny = 3, s.nz = 5, s.nt = 2;
  std::vector<int16_t> v(static_cast<size_t>(4 * 3 * 5 * 2));
  for (size_t i = 0; i < v.size(); ++i) v[i] = static_cast<int16_t>(i * 7 % 1001);
  ASSERT_TRUE(WriteNifti(dir / "m.nii", s, v.data()));
  Volume vol;
  ASSERT_OK(ReadNifti(dir / "m.nii", false, &vol));
  ASSERT_EQ(vol.info.channels, 2);
  for (int context : {0, 1, 2}) {
    for (int64_t k = 0; k < 5; ++k) {
      SCOPED_TRACE("context " + std::to_string(context) + " slice " + std::to_string(k));
      cv::Mat got;
      ASSERT_OK(StackSlices(vol, SliceAxis::kAxial, k, context, &got));
      ASSERT_EQ(got.channels(), (2 * context + 1) * 2);
      for (int j = 0; j <= 2 * context; ++j) {
        cv::Mat slice;
        ASSERT_OK(ExtractSlice(vol, SliceAxis::kAxial, std::clamp<int64_t>(k - context + j, 0, 4),
                               &slice));
        for (int m = 0; m < 2; ++m) {
          cv::Mat a, b;
          cv::extractChannel(got, a, j * 2 + m);
          cv::extractChannel(slice, b, m);
          EXPECT_TRUE(Equal(a, b)) << "channel " << j * 2 + m;
        }
      }
    }
  }
  cv::Mat out;
  EXPECT_FALSE(StackSlices(vol, SliceAxis::kAxial, 5, 1, &out).ok());
  // 5 slices x 4 channels: 20 channels, more than a record holds; the error names the option
  // and the largest context that fits.
  Status st = CheckContextChannels("x.nii", 2, 4);
  EXPECT_EQ(st.code(), Status::Code::kInvalidArgument);
  EXPECT_TRUE(Contains(st.message(), "x.nii")) << st.ToString();
  EXPECT_TRUE(Contains(st.message(), "BuildOptions::context = 1")) << st.ToString();
  EXPECT_TRUE(CheckContextChannels("x.nii", 1, 4).ok());
  EXPECT_TRUE(Contains(CheckContextChannels("x.nii", 1, 16).message(), "take no context"));
}

// ForegroundSlices along each axis of a flipped, permuted label equals "some voxel of
// ExtractSlice is not 0 after the map", for uint8 and uint16 labels (ids above 255 are never
// mapped).
TEST(VolumeSlices, ForegroundSlicesFollowTheCanonicalAxesAndTheMaskMap) {
  TempDir dir;
  for (int dt : {DT_UINT8, DT_UINT16}) {
    NiftiSpec s;
    s.nx = 7, s.ny = 6, s.nz = 5;
    s.datatype = dt;
    // PSR-like: i runs Posterior, j Superior, k Right (permuted and flipped).
    const double a[4][4] = {{0, 0, 1.5, 0}, {-0.8, 0, 0, 0}, {0, 2, 0, 0}, {0, 0, 0, 1}};
    std::memcpy(s.affine, a, sizeof a);
    std::vector<uint16_t> w(7 * 6 * 5, 0);
    w[1 + 7 * (2 + 6 * 3)] = 2;    // a class 2 voxel
    w[5 + 7 * (0 + 6 * 1)] = 300;  // an id above 255 (uint16 only)
    w[6 + 7 * (5 + 6 * 4)] = 1;
    std::vector<uint8_t> n(w.begin(), w.end());
    if (dt == DT_UINT8) n[5 + 7 * (0 + 6 * 1)] = 0;
    const std::string path = dir / ("l" + std::to_string(dt) + ".nii.gz");
    ASSERT_TRUE(WriteNifti(path, s, dt == DT_UINT8 ? static_cast<void*>(n.data()) : w.data()));
    Volume label;
    ASSERT_OK(ReadNifti(path, true, &label));
    for (const char* map : {"", "2:0", "2:0,1:0"}) {
      uint8_t lut[256];
      for (int i = 0; i < 256; ++i) lut[i] = static_cast<uint8_t>(i);
      if (*map) ASSERT_OK(ParseMaskMap(map, lut));
      for (SliceAxis axis : {SliceAxis::kAxial, SliceAxis::kCoronal, SliceAxis::kSagittal}) {
        SCOPED_TRACE(std::string(SliceAxisName(axis)) + " map '" + map + "' type " +
                     std::to_string(dt));
        std::vector<uint8_t> fg;
        ForegroundSlices(label, axis, lut, &fg);
        ASSERT_EQ(static_cast<int64_t>(fg.size()), SliceCount(label.info, axis));
        int any = 0;
        for (int64_t k = 0; k < SliceCount(label.info, axis); ++k) {
          cv::Mat m;
          ASSERT_OK(ExtractSlice(label, axis, k, &m));
          bool want = false;
          for (const auto& [id, pixels] : Count(m)) want |= (id < 256 ? lut[id] : id) != 0;
          EXPECT_EQ(fg[static_cast<size_t>(k)] != 0, want) << "slice " << k;
          any += want;
        }
        // uint8 with 1 and 2 mapped to 0 has no foreground left; uint16 keeps its id 300.
        if (dt == DT_UINT8 && std::string(map) == "2:0,1:0") {
          EXPECT_EQ(any, 0);
        } else {
          EXPECT_GT(any, 0);
        }
      }
    }
  }
}

TEST(VolumeSlices, ClassCountsRoundTrip) {
  cv::Mat m(4, 5, CV_16UC1, cv::Scalar(0));
  m.at<uint16_t>(1, 1) = 7;
  m.at<uint16_t>(2, 3) = 7;
  m.at<uint16_t>(3, 4) = 4000;
  std::vector<std::pair<uint32_t, uint32_t>> got;
  ASSERT_TRUE(ParseClassCounts(ClassCounts(m), &got));
  using P = std::pair<uint32_t, uint32_t>;
  EXPECT_EQ(got, (std::vector<P>{{0, 17}, {7, 2}, {4000, 1}}));
  EXPECT_FALSE(ParseClassCounts(std::string(7, '\0'), &got));  // not whole pairs
  std::string twice = ClassCounts(cv::Mat(2, 2, CV_8UC1, cv::Scalar(3)));
  EXPECT_FALSE(ParseClassCounts(twice + twice, &got));  // ids not ascending
}

// The 8-bit histogram's four partial counts and its tail (widths not a multiple of 4), against
// a plain count, on runs and on noise; a view into a larger image (not continuous).
TEST(VolumeSlices, MaskHistogramCountsEveryPixelOnce) {
  for (int width : {1, 3, 4, 7, 13}) {
    cv::Mat big(6, width + 2, CV_8UC1, cv::Scalar(9));
    cv::Mat m = big(cv::Rect(1, 0, width, 6));
    for (int y = 0; y < m.rows; ++y)
      for (int x = 0; x < m.cols; ++x) m.at<uint8_t>(y, x) = y < 2 ? 0 : (x * 37 + y * 11) % 251;
    const std::map<uint32_t, uint32_t> want = Count(m);
    const std::vector<uint32_t> got = MaskHistogram(m);
    ASSERT_EQ(got.size(), 256u);
    for (uint32_t id = 0; id < 256; ++id) {
      EXPECT_EQ(got[id], want.count(id) ? want.at(id) : 0u) << "width " << width << " id " << id;
    }
  }
}

// ---- builds

// Without skip_empty every slice is a record and has its row in the foreground table; the
// volumes table says context 0 and has no kept lists.
TEST(VolumeSlices, EveryRecordHasItsClassCounts) {
  Task t;
  BuildOptions o = Options(t.src, t.dir / "all");
  o.store = StoreMode::kRaw;
  BuildResult r;
  ASSERT_OK(BuildDataset(o, &r));
  EXPECT_EQ(r.records, 13u);
  EXPECT_EQ(r.empty_slices, 0u);
  std::vector<std::pair<std::string, int64_t>> want;
  for (const auto& [name, n] :
       std::vector<std::pair<std::string, int>>{{"a", 6}, {"b", 4}, {"c", 3}})
    for (int k = 0; k < n; ++k) want.emplace_back(name, k);
  ExpectRecordsAreTheirSlices(t, o.output, 0, want);
  const json v = Manifest(o.output).at("volumes");
  EXPECT_EQ(v.at("context"), 0);
  EXPECT_TRUE(v.at("foreground").get<bool>());
  EXPECT_FALSE(v.contains("skip_empty"));
  EXPECT_FALSE(v.at("list")[0].contains("kept"));
}

// skip_empty keeps the slices with foreground only: the kept lists, the records of each volume
// (c keeps none and stays listed), the count left out; in both stores, with context 1.
TEST(VolumeSlices, SkipEmptyKeepsTheSlicesWithForegroundAndMapsThemBack) {
  Task t;
  for (StoreMode store : {StoreMode::kEncoded, StoreMode::kRaw}) {
    SCOPED_TRACE(store == StoreMode::kRaw ? "raw" : "encoded");
    BuildOptions o = Options(t.src, t.dir / (store == StoreMode::kRaw ? "raw" : "enc"));
    o.store = store;
    o.skip_empty = true;
    o.context = 1;
    BuildResult r;
    ASSERT_OK(BuildDataset(o, &r));
    EXPECT_EQ(r.records, 4u);
    EXPECT_EQ(r.empty_slices, 9u);
    EXPECT_EQ(r.skipped, 0u);  // not errors
    EXPECT_FALSE(fs::exists(o.output + "/rejected.tsv"));
    ExpectRecordsAreTheirSlices(t, o.output, 1, {{"a", 1}, {"a", 3}, {"a", 4}, {"b", 3}});
    const json m = Manifest(o.output);
    const json& v = m.at("volumes");
    EXPECT_EQ(v.at("context"), 1);
    EXPECT_TRUE(v.at("skip_empty").get<bool>());
    ASSERT_EQ(v.at("list").size(), 3u);
    EXPECT_EQ(v.at("list")[0].at("kept"), json::parse("[[1, 2], [3, 5]]"));
    EXPECT_EQ(v.at("list")[0].at("records"), json::array({0, 3}));
    EXPECT_EQ(v.at("list")[0].at("slices"), 6);
    EXPECT_EQ(v.at("list")[1].at("kept"), json::parse("[[3, 4]]"));
    EXPECT_EQ(v.at("list")[1].at("records"), json::array({3, 1}));
    EXPECT_EQ(v.at("list")[2].at("kept"), json::array());
    EXPECT_EQ(v.at("list")[2].at("records"), json::array({4, 0}));
    EXPECT_EQ(m.at("build").at("empty_slices"), 9);
    EXPECT_EQ(m.at("channels"), 3);  // 3 slices of 1 channel
    std::string text;
    ASSERT_OK(DescribeDataset(o.output, &text));
    EXPECT_NE(text.find("volumes:     3 (4 axial slices, RAS); in-plane spacing"),
              std::string::npos)
        << text;
    EXPECT_NE(text.find("; 9 slices with an empty label left out (--skip-empty); 2.5D context 1 "
                        "(each record holds 3 slices)\n"),
              std::string::npos)
        << text;
    EXPECT_EQ(text.find("skipped (rejected.tsv)"), std::string::npos) << text;
  }
}

// The mask map decides what is foreground: with 2:0 only a's class 1 slices stay.
TEST(VolumeSlices, SkipEmptyJudgesTheLabelAfterTheMaskMap) {
  Task t;
  BuildOptions o = Options(t.src, t.dir / "mapped");
  o.skip_empty = true;
  o.mask_map = "2:0";
  BuildResult r;
  ASSERT_OK(BuildDataset(o, &r));
  EXPECT_EQ(r.records, 2u);
  EXPECT_EQ(r.empty_slices, 11u);
  SliceTable table;
  ASSERT_OK(ReadSliceTable(o.output, &table));
  EXPECT_EQ(table.slice, (std::vector<int64_t>{3, 4}));
  EXPECT_EQ(table.num_classes, 2);
  // The counts are of the mapped label: a's slice 4 has no class 2 left.
  EXPECT_EQ(table.foreground, (std::vector<uint32_t>{21, 9, 21, 9}));
  o.mask_map = "1:0,2:0";
  o.overwrite = true;
  Status st = BuildDataset(o, &r);
  EXPECT_EQ(st.code(), Status::Code::kBadInput) << st.ToString();
  EXPECT_TRUE(Contains(st.message(), "every label slice is empty")) << st.ToString();
  EXPECT_TRUE(Contains(st.message(), "BuildOptions::skip_empty")) << st.ToString();
}

// A build stopped part-way and resumed, a --shards build and shards built one at a time and
// assembled all give the records and tables of one uninterrupted build.
TEST(VolumeSlices, TheTablesSurviveResumeShardsAndAssembly) {
  Task t;
  BuildOptions base = Options(t.src, t.dir / "whole");
  base.skip_empty = true;
  base.context = 2;
  BuildResult r;
  ASSERT_OK(BuildDataset(base, &r));
  SliceTable want;
  ASSERT_OK(ReadSliceTable(base.output, &want));
  ASSERT_EQ(want.volume.size(), 4u);
  auto expect_same = [&](const std::string& out) {
    SCOPED_TRACE(out);
    dspipe::testing::ExpectSameRecords(base.output, out);
    SliceTable got;
    ASSERT_OK(ReadSliceTable(out, &got));
    EXPECT_EQ(got.volume, want.volume);
    EXPECT_EQ(got.slice, want.slice);
    EXPECT_EQ(got.foreground, want.foreground);
    EXPECT_EQ(got.volumes_json, want.volumes_json);
    EXPECT_EQ(Manifest(out).at("build").at("empty_slices"), 9);
  };

  BuildOptions o = base;
  o.output = t.dir / "resumed";
  ASSERT_NO_FATAL_FAILURE(BuildCancelledAfter(2, &o));
  ASSERT_OK(BuildDataset(o, &r));
  EXPECT_EQ(r.resumed_from, 2u);
  EXPECT_EQ(r.empty_slices, 9u);
  expect_same(o.output);
  ASSERT_OK(BuildDataset(o, &r));  // finished: nothing to do, the same count
  EXPECT_TRUE(r.already_complete);
  EXPECT_EQ(r.empty_slices, 9u);

  o = base;
  o.output = t.dir / "sharded";
  o.shards = 3;
  ASSERT_OK(BuildDataset(o, &r));
  expect_same(o.output);

  o.output = t.dir / "parts";
  for (int i : {1, 2, 0}) {
    o.shard_index = i;
    ASSERT_OK(BuildDataset(o, &r));
    EXPECT_EQ(r.empty_slices, 9u);
  }
  AssembleResult a;
  ASSERT_OK(AssembleDataset(o.output, &a));
  expect_same(o.output);
}

// A shard built alone after an earlier shard rejected a volume: its keys start at its plan
// position (key_begin), and the table still finds each record's entry.
TEST(VolumeSlices, TheForegroundTableFollowsShardKeyOffsets) {
  Task t;
  dspipe::testing::WriteAll(t.Image("a"), "not a NIfTI file");
  BuildOptions o = Options(t.src, t.dir / "parts");
  o.shards = 2;
  o.on_error = OnError::kSkip;
  BuildResult r;
  for (int i : {0, 1}) {
    o.shard_index = i;
    ASSERT_OK(BuildDataset(o, &r));
  }
  AssembleResult a;
  ASSERT_OK(AssembleDataset(o.output, &a));
  const json m = Manifest(o.output);
  ASSERT_TRUE(m.at("shards")[1].contains("key_begin")) << m.at("shards").dump();
  SliceTable table;
  ASSERT_OK(ReadSliceTable(o.output, &table));
  EXPECT_EQ(table.slice, (std::vector<int64_t>{0, 1, 2, 3, 0, 1, 2}));
  ASSERT_TRUE(table.has_foreground);
  // b's slice 3: one voxel of class 2, 29 of background.
  EXPECT_EQ(table.foreground[3 * 3 + 0], 29u);
  EXPECT_EQ(table.foreground[3 * 3 + 2], 1u);
}

// Misuse is refused before anything is written, naming the option and what to do.
TEST(VolumeSlices, MisuseIsRefusedNamingTheOption) {
  BuildResult r;
  {
    Task t(/*labels=*/false);
    BuildOptions o = Options(t.src, t.dir / "out");
    o.skip_empty = true;
    Status st = BuildDataset(o, &r);
    EXPECT_EQ(st.code(), Status::Code::kInvalidArgument) << st.ToString();
    EXPECT_TRUE(Contains(st.message(), "BuildOptions::skip_empty")) << st.ToString();
    EXPECT_TRUE(Contains(st.message(), "needs label volumes")) << st.ToString();
    EXPECT_FALSE(fs::exists(o.output));
    // Without labels there is no foreground table.
    o.skip_empty = false;
    ASSERT_OK(BuildDataset(o, &r));
    SliceTable table;
    ASSERT_OK(ReadSliceTable(o.output, &table));
    EXPECT_FALSE(table.has_foreground);
    EXPECT_EQ(table.volume.size(), 13u);
  }
  ExpectRefusedFor2DImages([](BuildOptions* o) { o->skip_empty = true; },
                           "BuildOptions::skip_empty");
  ExpectRefusedFor2DImages([](BuildOptions* o) { o->context = 1; }, "BuildOptions::context");
  TempDir tmp;
  dspipe::testing::Synth(tmp / "src", 4, 16, 16);
  BuildOptions o = Options(tmp / "src", tmp / "out");
  o.context = 8;
  Status st = ValidateBuildOptions(o);
  EXPECT_EQ(st.code(), Status::Code::kInvalidArgument);
  EXPECT_TRUE(Contains(st.message(), "BuildOptions::context")) << st.ToString();
  EXPECT_TRUE(Contains(st.message(), "0..7")) << st.ToString();
  // Not a volume dataset: no slice table.
  o.context = 0;
  ASSERT_OK(BuildDataset(o, &r));
  SliceTable table;
  st = ReadSliceTable(o.output, &table);
  EXPECT_EQ(st.code(), Status::Code::kInvalidArgument) << st.ToString();
  EXPECT_TRUE(Contains(st.message(), "not built from volumes")) << st.ToString();

  // 4 modalities with context 2: 20 channels, refused naming the volume and the context that fits.
  TempDir mm;
  fs::create_directories(mm / "T/imagesTr");
  NiftiSpec s;
  s.nx = 4, s.ny = 3, s.nz = 2, s.nt = 4;
  std::vector<int16_t> v(4 * 3 * 2 * 4, 1);
  ASSERT_TRUE(WriteNifti(mm / "T/imagesTr/m.nii.gz", s, v.data()));
  o = Options(mm / "T", mm / "out");
  o.context = 2;
  st = BuildDataset(o, &r);
  EXPECT_EQ(st.code(), Status::Code::kInvalidArgument) << st.ToString();
  EXPECT_TRUE(Contains(st.message(), "m.nii.gz")) << st.ToString();
  EXPECT_TRUE(Contains(st.message(), "20 channels")) << st.ToString();
  EXPECT_TRUE(Contains(st.message(), "BuildOptions::context = 1")) << st.ToString();
  EXPECT_FALSE(fs::exists(o.output));
  o.context = 1;
  ASSERT_OK(BuildDataset(o, &r));
  std::vector<Rec> recs;
  ASSERT_OK(dspipe::testing::ReadRecords(o.output, &recs));
  EXPECT_EQ(recs[0].header.channels, 12);
}

// A label whose header reads but whose voxels are no class ids (found when skip_empty reads it
// while planning) makes its volume a rejected one (named in rejected.tsv with on_error skip, an
// error naming both files otherwise); the others build.
TEST(VolumeSlices, AnUnreadableLabelRejectsItsVolume) {
  Task t;
  NiftiSpec l;
  l.nx = 6, l.ny = 5, l.nz = 4;
  l.datatype = DT_FLOAT32;
  const double ras[4][4] = {{0.8, 0, 0, 0}, {0, 0.8, 0, 0}, {0, 0, 2.5, 0}, {0, 0, 0, 1}};
  std::memcpy(l.affine, ras, sizeof ras);
  std::vector<float> f(6 * 5 * 4, 0.0f);
  f[7] = 1.5f;  // not a class id
  ASSERT_TRUE(WriteNifti(t.Label("b"), l, f.data()));
  BuildOptions o = Options(t.src, t.dir / "out");
  o.skip_empty = true;
  BuildResult r;
  Status st = BuildDataset(o, &r);
  EXPECT_EQ(st.code(), Status::Code::kBadInput) << st.ToString();
  EXPECT_TRUE(Contains(st.message(), t.Image("b"))) << st.ToString();
  EXPECT_TRUE(Contains(st.message(), t.Label("b"))) << st.ToString();
  EXPECT_TRUE(Contains(st.message(), "not an integer")) << st.ToString();
  o.resume = true;
  o.on_error = OnError::kSkip;
  ASSERT_OK(BuildDataset(o, &r));
  EXPECT_EQ(r.records, 3u);
  EXPECT_EQ(r.skipped, 1u);
  EXPECT_TRUE(Contains(ReadAll(o.output + "/rejected.tsv"), t.Image("b")));
  const json v = Manifest(o.output).at("volumes");
  EXPECT_EQ(v.at("list")[1].at("records"), json::array({3, 0}));
  EXPECT_FALSE(v.at("list")[1].contains("kept"));
  EXPECT_EQ(v.at("list")[2].at("records"), json::array({3, 0}));
  SliceTable table;
  ASSERT_OK(ReadSliceTable(o.output, &table));
  EXPECT_EQ(table.slice, (std::vector<int64_t>{1, 3, 4}));
}

// With skip_empty the plan was made from the labels' contents: resuming after any source file
// changed is refused (without it, a file not built from yet may change).
TEST(VolumeSlices, ResumeRefusesAChangedLabelWithSkipEmpty) {
  Task t;
  BuildOptions o = Options(t.src, t.dir / "out");
  o.skip_empty = true;
  ASSERT_NO_FATAL_FAILURE(BuildCancelledAfter(1, &o));
  // c's label now has foreground everywhere: the stored plan would leave those slices out.
  NiftiSpec l;
  l.nx = 6, l.ny = 5, l.nz = 3;
  l.datatype = DT_UINT8;
  const double ras[4][4] = {{0.8, 0, 0, 0}, {0, 0.8, 0, 0}, {0, 0, 2.5, 0}, {0, 0, 0, 1}};
  std::memcpy(l.affine, ras, sizeof ras);
  std::vector<uint8_t> ones(6 * 5 * 3, 1);
  ASSERT_TRUE(WriteNifti(t.Label("c"), l, ones.data()));
  BuildResult r;
  Status st = BuildDataset(o, &r);
  EXPECT_EQ(st.code(), Status::Code::kInvalidArgument) << st.ToString();
  EXPECT_TRUE(Contains(st.message(), "labelsTr/c.nii.gz")) << st.ToString();
  EXPECT_TRUE(Contains(st.message(), "skip_empty")) << st.ToString();
}

// The loader reads a stack of more than the 4 channels its uint8 kernels take: context 2 gives
// 5 int16 channels, each normalized with its own mean and std ((x - mean) * (1 / std), the
// typed path's float formula).
TEST(VolumeSlices, TheLoaderNormalizesEveryChannelOfAFiveSliceStack) {
  Task t;
  BuildOptions o = Options(t.src, t.dir / "ctx2");
  o.context = 2;
  BuildResult r;
  ASSERT_OK(BuildDataset(o, &r));
  LoaderOptions lo;
  lo.batch_size = 13;
  lo.threads = 2;
  lo.sampler.shuffle = false;
  lo.mean = {1, -2, 30, 4.5, -500};
  lo.std = {2, 4, 0.5, 8, 250};
  std::unique_ptr<Loader> loader;
  ASSERT_OK(Loader::Open(o.output, lo, &loader));
  Batch b;
  ASSERT_OK(loader->Next(&b));
  ASSERT_EQ(b.size(), 13);
  ASSERT_EQ(b.channels(), 5);
  SliceTable table;
  ASSERT_OK(ReadSliceTable(o.output, &table));
  std::map<int64_t, Volume> vols;
  const size_t plane = static_cast<size_t>(b.height()) * b.width();
  for (int i = 0; i < 13; ++i) {
    const int64_t v = table.volume[i];
    if (!vols.count(v)) ASSERT_OK(ReadNifti(table.images[v], false, &vols[v]));
    const cv::Mat want = Stacked(vols[v], table.slice[i], 2);
    for (int c = 0; c < 5; ++c) {
      const float* got = b.normalized() + (static_cast<size_t>(i) * 5 + c) * plane;
      const float mean = static_cast<float>(lo.mean[c]), inv = 1.0f / static_cast<float>(lo.std[c]);
      for (int y = 0; y < b.height(); ++y) {
        for (int x = 0; x < b.width(); ++x) {
          const float px = static_cast<float>(want.ptr<int16_t>(y)[x * 5 + c]);
          ASSERT_EQ(got[y * b.width() + x], (px - mean) * inv)
              << "record " << i << " channel " << c << " at " << y << "," << x;
        }
      }
    }
  }
}

// dsconvert: the flags, the summary line, and the errors in its own spelling.
TEST(VolumeSlices, DsconvertTakesTheFlagsAndSaysWhatItLeftOut) {
  Task t;
  using dspipe::testing::RunTool;
  auto run = RunTool({"build", t.src, t.dir / "cli", "--skip-empty", "--context", "1", "-q"},
                     t.dir.path());
  EXPECT_EQ(run.exit_code, 0) << run.output;
  EXPECT_TRUE(Contains(run.output, ": 4 records from 4 sources")) << run.output;
  EXPECT_TRUE(Contains(run.output, "left out 9 slices whose label is empty (--skip-empty)"))
      << run.output;
  run = RunTool({"build", t.src, t.dir / "cli8", "--context", "8"}, t.dir.path());
  EXPECT_EQ(run.exit_code, 2) << run.output;
  EXPECT_TRUE(Contains(run.output, "--context must be 0..7")) << run.output;
  Task bare(/*labels=*/false);
  run = RunTool({"build", bare.src, bare.dir / "out", "--skip-empty"}, bare.dir.path());
  EXPECT_EQ(run.exit_code, 1) << run.output;
  EXPECT_TRUE(Contains(run.output, "--skip-empty needs label volumes")) << run.output;
  // --spacing RxC (or one number), named as the flag in the library's refusals.
  ExpectVolumeFlag(t, "--spacing", "0.5x1.2", "resampled to 0.5 x 1.2 mm",
                   {"0.5x", "x1", "1x1x1", "-1x1", "axb"}, "--spacing must be RxC", "0.001",
                   "--spacing (rows, columns) must be both 0");
}

// ---- in-plane resampling (BuildOptions::spacing_*)

// Worked by hand: bilinear midpoints, the last sample clamped when the length rounds up,
// nearest ties to the even voxel (torch.grid_sample's nearbyint), types and channels.
TEST(VolumeSlices, ResampleSliceIsBilinearForImagesAndNearestForLabels) {
  EXPECT_EQ(ResampledLength(3, 1, 0.5), 5);
  EXPECT_EQ(ResampledLength(512, 0.7, 1.0), 359);  // round(511 * 0.7 = 357.7) + 1
  EXPECT_EQ(ResampledLength(4, 1, 1.2), 3);        // round(2.5) = 2: half to even
  EXPECT_EQ(ResampledLength(3, 1, 0.7), 4);        // round(2.857) = 3: samples 0, .7, 1.4, 2.1
  EXPECT_EQ(ResampledLength(1, 0.8, 0.3), 1);

  const uint8_t g[9] = {0, 10, 20, 30, 40, 50, 60, 70, 80};
  const cv::Mat in(3, 3, CV_8UC1, const_cast<uint8_t*>(g));
  cv::Mat out;
  ResampleSlice(in, {1, 1}, {0.5, 0.5}, /*nearest=*/false, &out);
  ASSERT_EQ(out.type(), CV_32FC1);
  ASSERT_EQ(out.size(), cv::Size(5, 5));
  EXPECT_FLOAT_EQ(out.at<float>(0, 0), 0);
  EXPECT_FLOAT_EQ(out.at<float>(0, 1), 5);
  EXPECT_FLOAT_EQ(out.at<float>(1, 0), 15);
  EXPECT_FLOAT_EQ(out.at<float>(1, 1), 20);
  EXPECT_FLOAT_EQ(out.at<float>(3, 3), 60);
  EXPECT_FLOAT_EQ(out.at<float>(4, 4), 80);
  // Rows 1 -> 0.7 mm: rows at 0, 0.7, 1.4, 2.1 (clamped to 2); columns kept.
  ResampleSlice(in, {1, 1}, {0.7, 1}, false, &out);
  ASSERT_EQ(out.size(), cv::Size(3, 4));
  EXPECT_NEAR(out.at<float>(1, 0), 21, 1e-4);  // 0.3 * 0 + 0.7 * 30
  EXPECT_NEAR(out.at<float>(2, 2), 20 + 0.4 * 30 + 30, 1e-4);
  EXPECT_FLOAT_EQ(out.at<float>(3, 1), 70);
  // int16 with 2 channels, downsampled: every other voxel, signs kept.
  cv::Mat hu(4, 4, CV_16SC2);
  for (int y = 0; y < 4; ++y)
    for (int x = 0; x < 4; ++x) hu.at<cv::Vec2s>(y, x) = cv::Vec2s(-1000 + 10 * y + x, 7 * x);
  ResampleSlice(hu, {0.5, 0.5}, {1.5, 1.5}, false, &out);
  ASSERT_EQ(out.type(), CV_32FC2);
  ASSERT_EQ(out.size(), cv::Size(2, 2));
  EXPECT_FLOAT_EQ(out.at<cv::Vec2f>(1, 1)[0], -1000 + 30 + 3);
  EXPECT_FLOAT_EQ(out.at<cv::Vec2f>(1, 1)[1], 21);
  // Labels: ids and type kept; x = 0.5 and 1.5 go to voxels 0 and 2.
  const uint16_t ids[3] = {1, 500, 3};
  const cv::Mat lab(1, 3, CV_16UC1, const_cast<uint16_t*>(ids));
  ResampleSlice(lab, {1, 1}, {1, 0.5}, /*nearest=*/true, &out);
  ASSERT_EQ(out.type(), CV_16UC1);
  ASSERT_EQ(out.size(), cv::Size(5, 1));
  const std::vector<uint16_t> want = {1, 1, 500, 3, 3};
  for (int x = 0; x < 5; ++x) EXPECT_EQ(out.at<uint16_t>(0, x), want[static_cast<size_t>(x)]);
}

// A build with spacing: every record is its slice resampled (float32) and its mask the label
// slice resampled by nearest neighbour, in both stores; the foreground table counts the
// resampled label; the volumes table gives the resampled grid; info says so.
TEST(VolumeSlices, SpacingResamplesEveryRecordAndItsLabel) {
  Task t;
  for (StoreMode store : {StoreMode::kEncoded, StoreMode::kRaw}) {
    SCOPED_TRACE(store == StoreMode::kRaw ? "raw" : "encoded");
    BuildOptions o = Options(t.src, t.dir / (store == StoreMode::kRaw ? "raw" : "enc"));
    o.store = store;
    o.spacing_rows = 0.5;  // 6 rows at 0.8 mm: round(5 * 1.6) + 1 = 9
    o.spacing_cols = 1.2;  // 5 columns at 0.8 mm: round(2.67) + 1 = 4
    BuildResult r;
    ASSERT_OK(BuildDataset(o, &r));
    ASSERT_EQ(r.records, 13u);
    ExpectRecordsAre(t, o.output, 9, 4,
                     [](const cv::Mat& slice, const cv::Mat& label,
                        const std::array<double, 2>& own, cv::Mat* image, cv::Mat* mask) {
                       EXPECT_NEAR(own[0], 0.8, 1e-6);  // as the header holds it (float32)
                       ResampleSlice(slice, own, {0.5, 1.2}, false, image);
                       ASSERT_EQ(image->type(), CV_32FC1);
                       ResampleSlice(label, own, {0.5, 1.2}, true, mask);
                       ASSERT_EQ(mask->type(), CV_8UC1);
                     });
    const json v = Manifest(o.output).at("volumes");
    EXPECT_EQ(v.at("resampled_spacing"), json::array({0.5, 1.2}));
    const json& a = v.at("list")[0];
    const double own_r = a.at("slice_spacing")[0].get<double>();  // the volume's own, kept
    const double own_c = a.at("slice_spacing")[1].get<double>();
    EXPECT_NEAR(own_r, 0.8, 1e-6);
    EXPECT_NEAR(own_c, 0.8, 1e-6);
    EXPECT_EQ(a.at("resampled").at("slice_shape"), json::array({9, 4}));
    EXPECT_EQ(a.at("resampled").at("slice_spacing"), json::array({0.5, 1.2}));
    // a's canonical affine (LPI flipped to RAS) with columns 0 and 1 scaled; the origin kept.
    const json& ca = a.at("affine");
    const json& ra = a.at("resampled").at("affine");
    for (int row = 0; row < 4; ++row) {
      EXPECT_NEAR(ra[row][0].get<double>(), ca[row][0].get<double>() * 0.5 / own_r, 1e-12);
      EXPECT_NEAR(ra[row][1].get<double>(), ca[row][1].get<double>() * 1.2 / own_c, 1e-12);
      EXPECT_EQ(ra[row][2], ca[row][2]);
      EXPECT_EQ(ra[row][3], ca[row][3]);
    }
    std::string text;
    ASSERT_OK(DescribeDataset(o.output, &text));
    EXPECT_TRUE(Contains(text, "resampled to 0.5 x 1.2 mm")) << text;
  }
}

// Refused up front, naming the option: a bad value, a 2D source, slices that resampling would
// make larger than the decode limits; and a resume asking for another spacing.
TEST(VolumeSlices, SpacingMisuseIsRefused) {
  BuildOptions bad = Options("src", "out");
  for (std::pair<double, double> sp : {std::pair<double, double>{0.5, 0},
                                       {-1, -1},
                                       {0.001, 1},
                                       {std::nan(""), 1}}) {
    bad.spacing_rows = sp.first, bad.spacing_cols = sp.second;
    const Status st = ValidateBuildOptions(bad);
    EXPECT_EQ(st.code(), Status::Code::kInvalidArgument) << sp.first << " " << sp.second;
    EXPECT_TRUE(Contains(st.message(), "BuildOptions::spacing_rows")) << st.ToString();
  }
  ExpectRefusedFor2DImages([](BuildOptions* o) { o->spacing_rows = o->spacing_cols = 1; },
                           "BuildOptions::spacing_rows");

  Task t;
  BuildOptions o = Options(t.src, t.dir / "huge");
  o.spacing_rows = o.spacing_cols = 0.01;  // 6x5 at 0.8 mm -> 401x321: beyond 300 pixels a side
  const DecodeLimits before = GetDecodeLimits();
  DecodeLimits small = before;
  small.max_side = 300;
  SetDecodeLimits(small);
  BuildResult r;
  const Status st = BuildDataset(o, &r);
  SetDecodeLimits(before);
  EXPECT_EQ(st.code(), Status::Code::kBadInput) << st.ToString();
  EXPECT_TRUE(Contains(st.message(), "401x321")) << st.ToString();
  EXPECT_TRUE(Contains(st.message(), "coarser")) << st.ToString();
  EXPECT_FALSE(fs::exists(o.output));

  o = Options(t.src, "");
  o.spacing_rows = o.spacing_cols = 1;
  ExpectResumeRefusesAChange(
      t, o, [](BuildOptions* c) { c->spacing_rows = c->spacing_cols = 0.9; }, "spacing");
}

// ---- a fixed slice size (BuildOptions::slice_height / slice_width)

// Worked by hand: MONAI's ResizeWithPadOrCrop crops from n / 2 - want / 2 and pads (want - n)
// / 2 before, per side; values and types are kept, padding is 0.
TEST(VolumeSlices, PadCropSliceCropsAboutTheCentreAndPadsSymmetrically) {
  EXPECT_EQ(PadCropStart(6, 3), 2);  // 3 - 1: voxels 2, 3, 4
  EXPECT_EQ(PadCropStart(5, 2), 1);  // 2 - 1
  EXPECT_EQ(PadCropStart(5, 4), 0);  // 2 - 2: the last voxel dropped
  EXPECT_EQ(PadCropStart(4, 4), 0);
  EXPECT_EQ(PadCropStart(4, 7), -1);  // 3 to pad: 1 before, 2 after
  EXPECT_EQ(PadCropStart(4, 5), 0);   // 1 to pad: after
  EXPECT_EQ(PadCropStart(1, 512), -255);

  cv::Mat in(4, 6, CV_16SC2);
  for (int y = 0; y < 4; ++y)
    for (int x = 0; x < 6; ++x) in.at<cv::Vec2s>(y, x) = cv::Vec2s(-100 * y - x, 10 * y + x);
  cv::Mat out;
  PadCropSlice(in, 7, 3, &out);  // rows padded (1 before, 2 after), columns 2..4 kept
  ASSERT_EQ(out.type(), CV_16SC2);
  ASSERT_EQ(out.size(), cv::Size(3, 7));
  for (int y = 0; y < 7; ++y) {
    for (int x = 0; x < 3; ++x) {
      const int sy = y - 1, sx = x + 2;
      const cv::Vec2s want =
          sy >= 0 && sy < 4 ? cv::Vec2s(-100 * sy - sx, 10 * sy + sx) : cv::Vec2s(0, 0);
      EXPECT_EQ(out.at<cv::Vec2s>(y, x), want) << y << "," << x;
    }
  }
  PadCropSlice(in, 4, 6, &out);  // the same size: the same pixels
  EXPECT_TRUE(Equal(out, in));
  const cv::Mat floats(2, 2, CV_32FC1, cv::Scalar(1.5f));
  PadCropSlice(floats, 1, 5, &out);  // rows cropped to row 1, columns 1 before, 2 after
  ASSERT_EQ(out.type(), CV_32FC1);
  const float want[5] = {0, 1.5f, 1.5f, 0, 0};
  for (int x = 0; x < 5; ++x) EXPECT_EQ(out.at<float>(0, x), want[x]) << x;
}

// A build with a slice size: every record is its slice (and its label) padded or cropped, in
// both stores, with and without spacing; the volumes table gives the offset and the moved
// affine; info says so; and the CLI reads --slice-size height first.
TEST(VolumeSlices, SliceSizePadsOrCropsEveryRecordAndItsLabel) {
  Task t;
  for (bool resample : {false, true}) {
    for (StoreMode store : {StoreMode::kEncoded, StoreMode::kRaw}) {
      SCOPED_TRACE(std::string(resample ? "spacing " : "") +
                   (store == StoreMode::kRaw ? "raw" : "encoded"));
      BuildOptions o = Options(t.src, t.dir / (std::string(resample ? "sp" : "") +
                                               (store == StoreMode::kRaw ? "raw" : "enc")));
      o.store = store;
      o.slice_height = 4;  // 6 rows (9 resampled) cropped
      o.slice_width = 8;   // 5 columns (4 resampled) padded
      if (resample) o.spacing_rows = 0.5, o.spacing_cols = 1.2;
      BuildResult r;
      ASSERT_OK(BuildDataset(o, &r));
      ASSERT_EQ(r.records, 13u);
      ExpectRecordsAre(t, o.output, 4, 8,
                       [&](const cv::Mat& slice, const cv::Mat& label,
                           const std::array<double, 2>& own, cv::Mat* image, cv::Mat* mask) {
                         *image = slice, *mask = label;
                         if (resample) {
                           ResampleSlice(slice, own, {0.5, 1.2}, false, image);
                           ResampleSlice(label, own, {0.5, 1.2}, true, mask);
                         }
                         PadCropSlice(*image, 4, 8, image);
                         PadCropSlice(*mask, 4, 8, mask);
                       });
      const json v = Manifest(o.output).at("volumes");
      EXPECT_EQ(v.at("slice_size"), json::array({4, 8}));
      const json& a = v.at("list")[0];
      const json& sized = a.at("sized");
      EXPECT_EQ(sized.at("slice_shape"), json::array({4, 8}));
      // 6 rows -> 4: from row 1; 5 columns -> 8: 1 before. Resampled, 9 -> 4: from 2; 4 -> 8: 2.
      EXPECT_EQ(sized.at("offset"), resample ? json::array({2, -2}) : json::array({1, -1}));
      const json& before = resample ? a.at("resampled").at("affine") : a.at("affine");
      const std::array<double, 2> off = {sized.at("offset")[0].get<double>(),
                                         sized.at("offset")[1].get<double>()};
      for (int row = 0; row < 4; ++row) {
        for (int col = 0; col < 3; ++col) EXPECT_EQ(sized.at("affine")[row][col], before[row][col]);
        EXPECT_NEAR(sized.at("affine")[row][3].get<double>(),
                    before[row][3].get<double>() + before[row][0].get<double>() * off[0] +
                        before[row][1].get<double>() * off[1],
                    1e-12);
      }
      std::string text;
      ASSERT_OK(DescribeDataset(o.output, &text));
      EXPECT_TRUE(Contains(text, "padded or cropped to 4x8 (HxW)")) << text;
    }
  }
  ExpectVolumeFlag(t, "--slice-size", "4x8", "padded or cropped to 4x8 (HxW)",
                   {"4x", "4", "4x8x1", "-4x8", "0x8"}, "--slice-size must be HxW", "8x40000",
                   "--slice-size (height, width) must be both 0");
}

// Refused up front, naming the option: a bad value, beyond the decode limits, a 2D source;
// and a resume asking for another size.
TEST(VolumeSlices, SliceSizeMisuseIsRefused) {
  BuildOptions bad = Options("src", "out");
  for (std::pair<int, int> hw : {std::pair{4, 0}, {0, 4}, {-1, 4}, {40000, 4}}) {
    bad.slice_height = hw.first, bad.slice_width = hw.second;
    const Status st = ValidateBuildOptions(bad);
    EXPECT_EQ(st.code(), Status::Code::kInvalidArgument) << hw.first << " " << hw.second;
    EXPECT_TRUE(Contains(st.message(), "BuildOptions::slice_height")) << st.ToString();
  }
  bad.slice_height = bad.slice_width = 20000;  // each side within 32768, 4e8 pixels beyond 2^28
  EXPECT_TRUE(Contains(ValidateBuildOptions(bad).message(), "pixels (the decode limits)"));

  ExpectRefusedFor2DImages([](BuildOptions* o) { o->slice_height = o->slice_width = 8; },
                           "BuildOptions::slice_height",
                           "2D images are sized by BuildOptions::resize_height");

  Task t;
  BuildOptions o = Options(t.src, "");
  o.slice_height = o.slice_width = 8;
  ExpectResumeRefusesAChange(
      t, o, [](BuildOptions* c) { c->slice_width = 6; }, "slice_size");
}

}  // namespace
}  // namespace dspipe::volume
