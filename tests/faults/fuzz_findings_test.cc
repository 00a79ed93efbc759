// SPDX-License-Identifier: Apache-2.0
// Regression tests for what the libFuzzer harnesses (tests/fuzz) found. Each test names its
// harness; the inputs are the minimized findings, written out as readable literals.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "convert/test_support.h"
#include "format/lmdb_env.h"
#include "format/manifest.h"

namespace dspipe::testing {
namespace {

using json = nlohmann::json;

// fuzz_build_state: an interrupted output whose stored build state or cursor is not what the
// builder wrote made `dsconvert build --resume` throw out of BuildDataset (std::terminate:
// nlohmann::json parse_error / type_error, std::vector::at out_of_range).
class BadBuildState : public ::testing::Test {
 protected:
  void SetUp() override {
    Synth(src_, 3, 32, 24);
    BuildResult r;
    const BuildOptions o = Options(src_, tmp_ / "done");
    ASSERT_TRUE(BuildDataset(o, &r).ok());
    std::unique_ptr<format::LmdbEnv> env;
    std::string manifest;
    bool found = false;
    ASSERT_TRUE(format::LmdbEnv::OpenReadOnly(o.output, 4, false, &env).ok());
    ASSERT_TRUE(env->GetMeta(kManifestKey, &manifest, &found).ok() && found);
    options_ = json::parse(manifest).at("build").at("options");
  }

  json ValidState() const {
    return {{"options", options_},
            {"plan", json::array({json::array({src_ + "/images/000000.png", "", -1, ""})})},
            {"meta", {{"kind", "folder"}, {"has_masks", false}, {"has_labels", false},
                      {"class_names", json::array()}}}};
  }

  // An interrupted output holding `state` (and `cursor` unless empty); resumes it.
  Status Resume(const std::string& name, const std::string& state, const std::string& cursor) {
    const std::string out = tmp_ / name;
    {
      std::unique_ptr<format::LmdbEnv> env;
      EXPECT_TRUE(format::LmdbEnv::OpenForWrite(out, &env).ok());
      format::LmdbEnv::Writer w(env.get());
      w.PutMeta(kBuildStateKey, state);
      if (!cursor.empty()) w.PutMeta("cursor", cursor);
      EXPECT_TRUE(w.Commit().ok());
    }
    BuildOptions o = Options(src_, out);
    o.resume = true;
    BuildResult r;
    records_ = 0;
    const Status s = BuildDataset(o, &r);
    records_ = r.records;
    return s;
  }

  void ExpectCorrupt(const Status& s, const std::string& name) {
    EXPECT_EQ(s.code(), Status::Code::kCorruption) << s.ToString();
    EXPECT_TRUE(Contains(s.message(), tmp_ / name)) << s.ToString();
    // Which stored item is bad: the meta key (build state or cursor) is named where the
    // reader caught it, or BuildDataset's last-resort catch says so.
    EXPECT_TRUE(Contains(s.message(), "(meta ") ||
                Contains(s.message(), "bad build state or cursor"))
        << s.ToString();
    std::unique_ptr<Dataset> ds;
    EXPECT_FALSE(Dataset::Open(tmp_ / name, {}, &ds).ok()) << name << " opens as complete";
  }

  TempDir tmp_;
  std::string src_ = tmp_ / "src";
  json options_;
  uint64_t records_ = 0;
};

TEST_F(BadBuildState, CursorThatIsNotJsonIsAnError) {
  // The minimized finding: the seed cursor with bytes inserted after a key.
  ExpectCorrupt(Resume("c1", ValidState().dump(), "{\"next_pos\": 0, \"pixels\"\xff\xff: 0}"),
                "c1");
}

TEST_F(BadBuildState, CursorWithMissingOrShortFieldsIsAnError) {
  ExpectCorrupt(Resume("c2", ValidState().dump(), "{\"next_pos\": 0}"), "c2");
  json cursor = {{"next_pos", 0}, {"next_index", 0}, {"sum", json::array()},
                 {"sumsq", json::array()}};
  ExpectCorrupt(Resume("c3", ValidState().dump(), cursor.dump()), "c3");  // vector::at
}

TEST_F(BadBuildState, IntegersWrittenAsHugeFloatsAreAnError) {
  // Same shape as the fuzz_manifest finding: a float where an integer belongs was a plain
  // (undefined) float-to-int cast in the cursor and plan readers.
  json cursor = {{"next_pos", 1e80}, {"next_index", 0}, {"sum", {0, 0, 0}},
                 {"sumsq", {0, 0, 0}}, {"pixels", 0}, {"stat_images", 0}, {"mask_max", -1},
                 {"height", -1}, {"width", -1}, {"image_bytes", 0}, {"mask_bytes", 0},
                 {"codecs", json::object()}, {"rejected", json::array()}};
  ExpectCorrupt(Resume("f1", ValidState().dump(), cursor.dump()), "f1");
  json bad_plan = ValidState();
  bad_plan["plan"][0][2] = 7.7e79;
  ExpectCorrupt(Resume("f2", bad_plan.dump(), ""), "f2");
}

TEST_F(BadBuildState, StateWithWrongTypesIsAnError) {
  ExpectCorrupt(Resume("s1", "[]", ""), "s1");
  ExpectCorrupt(Resume("s2", json{{"options", options_}}.dump(), ""), "s2");
  json bad_plan = ValidState();
  bad_plan["plan"] = json::array({json::array({1})});
  ExpectCorrupt(Resume("s3", bad_plan.dump(), ""), "s3");
  json no_meta = ValidState();
  no_meta["meta"] = json::object();
  ExpectCorrupt(Resume("s4", no_meta.dump(), ""), "s4");
}

TEST_F(BadBuildState, TheHarnessStateIsValidAndResumes) {
  // The state the harness starts from must be one the builder accepts, or fuzzing it would
  // only ever reach the first check.
  const Status s = Resume("ok", ValidState().dump(), "");
  ASSERT_TRUE(s.ok()) << s.ToString();
  EXPECT_EQ(records_, 1u);
  std::unique_ptr<Dataset> ds;
  EXPECT_TRUE(Dataset::Open(tmp_ / "ok", {}, &ds).ok());
}

// fuzz_manifest: "shards": [] read ranges->front() of an empty vector (UBSan: reference
// binding to null pointer).
TEST(BadManifest, EmptyShardListIsAnError) {
  DatasetInfo info;
  std::vector<format::ShardRange> ranges;
  const Status s = format::ParseManifest(
      R"({"format":"dspipe","format_version":1,"complete":true,"count":0,"store":"raw",)"
      R"("channels":3,"shards":[]})",
      "top/manifest.json", &info, &ranges);
  EXPECT_EQ(s.code(), Status::Code::kCorruption) << s.ToString();
  EXPECT_TRUE(Contains(s.message(), "top/manifest.json: manifest 'shards' is not a non-empty list"))
      << s.ToString();
}

// fuzz_manifest: an integer field written as a huge float ("format_version": 7.7e79) went
// through nlohmann's get<int>(), a plain float-to-int cast (UBSan: outside the range of int).
TEST(BadManifest, IntegerFieldsMustBeIntegersInRange) {
  const std::string head = R"({"format":"dspipe","complete":true,"store":"raw",)";
  for (const std::string& fields :
       {std::string(R"("format_version":7.7e79,"count":1,"channels":3})"),
        std::string(R"("format_version":1,"count":1,"channels":1e300})"),
        std::string(R"("format_version":1,"count":-1,"channels":3})"),
        std::string(R"("format_version":1,"count":1,"channels":3,"height":2.5})"),
        std::string(R"("format_version":1,"count":1,"channels":3,"width":4294967296})"),
        std::string(R"("format_version":1,"count":2,"channels":3,"shard":{"begin":0,"end":1e30}})")}) {
    DatasetInfo info;
    std::vector<format::ShardRange> ranges;
    const Status s = format::ParseManifest(head + fields, "m.json", &info, &ranges);
    EXPECT_EQ(s.code(), Status::Code::kCorruption) << fields << ": " << s.ToString();
    EXPECT_TRUE(Contains(s.message(), "m.json: bad manifest field: '")) << s.ToString();
  }
}

// fuzz_decode / fuzz_record: a corrupt DICOM file (magic "DICM" at offset 128) made OpenCV's
// GDCM reader abort the process (assert) or allocate 2.6 GB; the minimized file follows.
TEST(BadImage, DicomIsRefusedNotHandedToGdcm) {
  const std::vector<uint8_t> file = {
      0x1d, 0x1d, 0x1d, 0xe3, 0xe1, 0x1d, 0x1d, 0x1d, 0x1d, 0x1d, 0x1d, 0x1d, 0x1d, 0x1d,
      0x1d, 0x1d, 0x1d, 0x1d, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
      0x00, 0x00, 0x00, 0x27, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
      0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
      0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
      0x69, 0x00, 0x00, 0x39, 0x00, 0x00, 0x01, 0x01, 0x01, 0x01, 0x01, 0x01, 0x01, 0x01,
      0x01, 0x01, 0x01, 0x01, 0x01, 0x01, 0x01, 0x01, 0x01, 0x01, 0x01, 0x01, 0x01, 0x01,
      0x01, 0x01, 0x01, 0x01, 0x01, 0x01, 0x01, 0x01, 0x04, 0xff, 0xd8, 0xff, 0x81, 0xfe,
      0x01, 0x01, 0x01, 0x01, 0x01, 0x01, 0x01, 0x01, 0x01, 0x01, 0x01, 0x01, 0x01, 0x01,
      0x01, 0x01, 0x44, 0x49, 0x43, 0x4d,
  };
  cv::Mat m;
  Status s = codec::DecodeImage(file, 3, &m);
  EXPECT_EQ(s.code(), Status::Code::kBadInput) << s.ToString();
  EXPECT_TRUE(Contains(s.message(), "DICOM")) << s.ToString();
  codec::ImageProbe probe;
  EXPECT_EQ(codec::Probe(file, &probe).code(), Status::Code::kBadInput);
  EXPECT_FALSE(codec::DecodeMask(file, &m).ok());
}

}  // namespace
}  // namespace dspipe::testing
