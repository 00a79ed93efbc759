// SPDX-License-Identifier: Apache-2.0
// Bad source files: with --on-error fail the build stops with a message naming the file and
// the reason and leaves an output no reader takes for complete; with skip the file is listed
// in rejected.tsv, counted, and every other record is intact.
#include <gtest/gtest.h>

#include <functional>

#include "convert/test_support.h"
#include "format/lmdb_env.h"

namespace dspipe::testing {
namespace {

constexpr int kCount = 6, kBad = 3, kW = 64, kH = 48;

struct BadCase {
  const char* name;
  // Breaks sample kBad of the source at `src`; returns the file to blame.
  std::function<std::string(const std::string& src)> apply;
  const char* reason;
};
void PrintTo(const BadCase& c, std::ostream* os) { *os << c.name; }

std::string Img(const std::string& src) { return src + "/images/000003.png"; }
std::string Mask(const std::string& src) { return src + "/masks/000003.png"; }

const BadCase kCases[] = {
    {"TruncatedPng",
     [](const std::string& s) {
       const std::string b = ReadAll(Img(s));
       WriteAll(Img(s), b.substr(0, b.size() / 2));
       return Img(s);
     },
     "truncated PNG"},
    {"TruncatedJpeg",
     [](const std::string& s) {
       const std::string jpg = Encode(ImreadRgb(Img(s)), ".jpg");
       fs::remove(Img(s));
       WriteAll(s + "/images/000003.jpg", jpg.substr(0, jpg.size() * 6 / 10));
       return s + "/images/000003.jpg";
     },
     "truncated JPEG"},
    {"ZeroBytes",
     [](const std::string& s) {
       WriteAll(Img(s), "");
       return Img(s);
     },
     "empty file"},
    {"TextNamedPng",
     [](const std::string& s) {
       WriteAll(Img(s), "just some notes, not an image\n");
       return Img(s);
     },
     "not a decodable image"},
    {"UnsupportedFormatNamedPng",  // Sun raster: OpenCV reads it, dspipe refuses it by name
     [](const std::string& s) {
       WriteAll(Img(s), Encode(ImreadRgb(Img(s)), ".ras"));
       return Img(s);
     },
     "Sun raster files are not supported; dspipe reads PNG, JPEG, BMP, TIFF, WebP and PNM"},
    {"CorruptPngData",
     [](const std::string& s) {
       std::string b = ReadAll(Img(s));
       for (size_t i = b.size() / 2; i < b.size() / 2 + 16; ++i) b[i] = static_cast<char>(~b[i]);
       WriteAll(Img(s), b);
       return Img(s);
     },
     "PNG"},
    {"ImageWithoutMask",
     [](const std::string& s) {
       fs::remove(Mask(s));
       return Img(s);
     },
     "no mask named '000003.*'"},
    {"MaskSizeDiffers",
     [](const std::string& s) {
       WriteAll(Mask(s), Encode(cv::Mat(kH / 2, kW / 2, CV_8UC1, cv::Scalar(1)), ".png"));
       return Mask(s);
     },
     "mask is 32x24 but its image"},
    {"MultiChannelMask",
     [](const std::string& s) {
       cv::Mat m(kH, kW, CV_8UC3, cv::Scalar(0, 1, 2));
       WriteAll(Mask(s), Encode(m, ".png"));
       return Mask(s);
     },
     "multi-channel mask"},
    // (A 16-bit mask with ids above 255 is an instance map, kept as uint16: typed_test.cc.)
    {"FloatMask",
     [](const std::string& s) {
       cv::Mat m(kH, kW, CV_32FC1, cv::Scalar(1.5));
       WriteAll(Mask(s), Encode(m, ".tiff"));
       return Mask(s);
     },
     "mask pixel type is neither 8- nor 16-bit"},
    {"TruncatedMask",
     [](const std::string& s) {
       const std::string b = ReadAll(Mask(s));
       WriteAll(Mask(s), b.substr(0, b.size() - 20));
       return Mask(s);
     },
     "truncated"},
};

class BadInput : public ::testing::TestWithParam<BadCase> {
 protected:
  void SetUp() override {
    Synth(src_, kCount, kW, kH);
    good_ = ListDir(src_ + "/images");
    good_.erase(good_.begin() + kBad);
    bad_file_ = GetParam().apply(src_);
  }
  TempDir tmp_;
  std::string src_ = tmp_ / "src";
  std::vector<std::string> good_;  // images of the good samples, in order
  std::string bad_file_;
};

TEST_P(BadInput, FailStopsWithTheFileAndReason) {
  BuildOptions o = Options(src_, tmp_ / "out.lmdb");
  o.threads = 1;
  BuildResult r;
  Status s = BuildDataset(o, &r);
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.code(), Status::Code::kBadInput) << s.ToString();
  EXPECT_TRUE(Contains(s.message(), bad_file_)) << s.ToString();
  EXPECT_TRUE(Contains(s.message(), GetParam().reason)) << s.ToString();
  EXPECT_TRUE(Contains(s.message(), "BuildOptions::resume")) << s.ToString();
  EXPECT_TRUE(Contains(bad_file_, s.path()) && !s.path().empty())
      << "the file apart from the text (Python: CorruptRecord.path): " << s.path();
  // Not openable as complete; the records before the bad one were kept (whole).
  std::unique_ptr<Dataset> ds;
  Status open = Dataset::Open(o.output, {}, &ds);
  EXPECT_EQ(open.code(), Status::Code::kCorruption) << open.ToString();
  EXPECT_TRUE(Contains(open.message(), "interrupted")) << open.ToString();
  EXPECT_TRUE(Contains(open.message(), "BuildOptions::resume")) << open.ToString();
  std::unique_ptr<format::LmdbEnv> env;
  ASSERT_TRUE(format::LmdbEnv::OpenReadOnly(o.output, 8, false, &env).ok());
  uint64_t n = 0;
  ASSERT_TRUE(env->RecordCount(&n).ok());
  EXPECT_EQ(n, static_cast<uint64_t>(kBad));
  EXPECT_FALSE(fs::exists(o.output + "/rejected.tsv"));
}

TEST_P(BadInput, SkipListsTheFileAndKeepsTheRest) {
  for (StoreMode store : {StoreMode::kEncoded, StoreMode::kRaw}) {
    BuildOptions o = Options(src_, tmp_ / (store == StoreMode::kRaw ? "raw" : "enc"));
    o.on_error = OnError::kSkip;
    o.store = store;
    BuildResult r;
    Status s = BuildDataset(o, &r);
    ASSERT_TRUE(s.ok()) << s.ToString();
    EXPECT_EQ(r.sources, static_cast<uint64_t>(kCount));
    EXPECT_EQ(r.records, static_cast<uint64_t>(kCount - 1));
    EXPECT_EQ(r.skipped, 1u);
    EXPECT_EQ(r.report_path, o.output + "/rejected.tsv");
    const std::string tsv = ReadAll(o.output + "/rejected.tsv");
    EXPECT_EQ(tsv.rfind("file\treason\n", 0), 0u) << tsv;
    EXPECT_EQ(std::count(tsv.begin(), tsv.end(), '\n'), 2) << tsv;
    EXPECT_TRUE(Contains(tsv, bad_file_)) << tsv;
    EXPECT_TRUE(Contains(tsv, GetParam().reason)) << tsv;
    std::vector<Rec> recs;
    std::unique_ptr<Dataset> ds;
    s = ReadRecords(o.output, &recs, &ds);
    ASSERT_TRUE(s.ok()) << s.ToString();
    ASSERT_EQ(recs.size(), good_.size());
    for (size_t i = 0; i < recs.size(); ++i) {
      EXPECT_EQ(CountDiff(DecodedImage(recs[i]), ImreadRgb(good_[i])), 0) << good_[i];
      const std::string mask = src_ + "/masks/" + fs::path(good_[i]).stem().string() + ".png";
      EXPECT_EQ(CountDiff(DecodedMask(recs[i]), ImreadMask(mask)), 0) << mask;
    }
    EXPECT_TRUE(Contains(ds->info().manifest_json, "\"rejected\": 1")) << ds->info().manifest_json;
    VerifyResult vr;
    ASSERT_TRUE(VerifyDataset(o.output, {}, &vr).ok());
    EXPECT_EQ(vr.bad, 0u);
  }
}

INSTANTIATE_TEST_SUITE_P(Files, BadInput, ::testing::ValuesIn(kCases),
                         [](const auto& p) { return std::string(p.param.name); });

TEST(BadInputAll, EverySampleRejectedIsAnError) {
  TempDir tmp;
  Synth(tmp / "src", 2, 32, 32);
  for (const auto& f : ListDir(tmp / "src/images")) WriteAll(f, "");
  BuildOptions o = Options(tmp / "src", tmp / "out");
  o.on_error = OnError::kSkip;
  BuildResult r;
  Status s = BuildDataset(o, &r);
  EXPECT_EQ(s.code(), Status::Code::kBadInput) << s.ToString();
  EXPECT_TRUE(Contains(s.message(), "every sample was rejected")) << s.ToString();
  std::unique_ptr<Dataset> ds;
  EXPECT_FALSE(Dataset::Open(o.output, {}, &ds).ok());
}

// Issue 40 item 11: the message of a failed build names the call that continues it, and that
// call works: on_error may change on resume (records already written stay as they are).
TEST(BadInputAll, AFailedBuildContinuesWithResumeAndOnErrorSkip) {
  TempDir tmp;
  Synth(tmp / "src", kCount, kW, kH);
  WriteAll(Img(tmp / "src"), "");  // sample 3: an empty file
  BuildOptions o = Options(tmp / "src", tmp / "out");
  o.threads = 1;
  BuildResult r;
  Status s = BuildDataset(o, &r);
  ASSERT_EQ(s.code(), Status::Code::kBadInput) << s.ToString();
  EXPECT_TRUE(Contains(s.message(),
                       "build stopped after 3 records (kept); to skip such files, rerun with "
                       "BuildOptions::resume = true, BuildOptions::on_error = skip and the "
                       "same options (they are listed in rejected.tsv); or fix the input and "
                       "rerun with BuildOptions::resume = true and the same options"))
      << s.ToString();
  // What the user tried next: on_error=skip alone finds the output there, and says what to pass.
  o.on_error = OnError::kSkip;
  s = BuildDataset(o, &r);
  EXPECT_EQ(s.code(), Status::Code::kAlreadyExists) << s.ToString();
  EXPECT_TRUE(Contains(s.message(),
                       "pass BuildOptions::resume = true to continue an "
                       "interrupted build (with the options it was started with; "
                       "BuildOptions::on_error may change)"))
      << s.ToString();
  // Another option that changes records is still refused, naming the call for each choice.
  o.resume = true;
  o.gray = true;
  s = BuildDataset(o, &r);
  EXPECT_EQ(s.code(), Status::Code::kInvalidArgument) << s.ToString();
  EXPECT_TRUE(Contains(s.message(), "gray was false, now true")) << s.ToString();
  EXPECT_FALSE(Contains(s.message(), "on_error was")) << s.ToString();
  EXPECT_TRUE(Contains(s.message(), "only BuildOptions::on_error may change")) << s.ToString();
  // The call the first message named: resume=true, on_error=skip, the other options the same.
  o.gray = false;
  r = BuildResult{};
  s = BuildDataset(o, &r);
  ASSERT_TRUE(s.ok()) << s.ToString();
  EXPECT_EQ(r.records, static_cast<uint64_t>(kCount - 1));
  EXPECT_EQ(r.skipped, 1u);
  EXPECT_TRUE(Contains(ReadAll(o.output + "/rejected.tsv"), Img(tmp / "src")));
  std::unique_ptr<Dataset> ds;
  ASSERT_TRUE(Dataset::Open(o.output, {}, &ds).ok());
  EXPECT_EQ(ds->size(), static_cast<uint64_t>(kCount - 1));
  // Finished: resume with either on_error is "already complete", not "options differ".
  o.on_error = OnError::kFail;
  r = BuildResult{};
  ds.reset();
  s = BuildDataset(o, &r);
  EXPECT_TRUE(s.ok()) << s.ToString();
  EXPECT_TRUE(r.already_complete);
}

TEST(BadInputAll, MissingOrEmptySourceLeavesNoOutput) {
  TempDir tmp;
  BuildResult r;
  Status s = BuildDataset(Options(tmp / "nope", tmp / "out1"), &r);
  EXPECT_EQ(s.code(), Status::Code::kNotFound) << s.ToString();
  EXPECT_TRUE(Contains(s.message(), tmp / "nope")) << s.ToString();
  fs::create_directories(tmp / "empty/images");
  s = BuildDataset(Options(tmp / "empty", tmp / "out2"), &r);
  EXPECT_EQ(s.code(), Status::Code::kBadInput) << s.ToString();
  EXPECT_TRUE(Contains(s.message(), "no images found")) << s.ToString();
  // Nothing was built, so nothing may be left behind that the rerun (with the source fixed)
  // would then refuse as "already exists".
  EXPECT_FALSE(fs::exists(tmp / "out1")) << "a build of a missing source left an output";
  EXPECT_FALSE(fs::exists(tmp / "out2")) << "a build of an empty source left an output";
  Synth(tmp / "empty", 2, 16, 16);
  s = BuildDataset(Options(tmp / "empty", tmp / "out2"), &r);
  EXPECT_TRUE(s.ok()) << s.ToString();
  // Output inside the source is refused before anything is written.
  s = BuildDataset(Options(tmp / "empty", tmp / "empty/out.lmdb"), &r);
  EXPECT_EQ(s.code(), Status::Code::kInvalidArgument) << s.ToString();
  EXPECT_FALSE(fs::exists(tmp / "empty/out.lmdb"));
}

// Options that exclude each other are refused before the output is created: no directory is
// left that a corrected rerun would refuse as "already exists" (or be told to resume). The
// message names both options; dsconvert refuses them the same way (exit 2), from the same check.
TEST(BadInputAll, BadOptionsAreRefusedBeforeAnythingIsWritten) {
  TempDir tmp;
  Synth(tmp / "src", 2, 16, 16);
  struct Case {
    const char* name;
    std::function<void(BuildOptions*)> set;
    std::vector<std::string> named;  // the options the message must name
    std::vector<std::string> flags;  // the same build as dsconvert flags
    std::vector<std::string> cli_named;
  };
  const Case cases[] = {
      {"jpeg_quality+raw",
       [](BuildOptions* o) {
         o->store = StoreMode::kRaw;
         o->jpeg_quality = 90;
       },
       {"BuildOptions::jpeg_quality", "BuildOptions::store = raw"},
       {"--store", "raw", "--jpeg-quality", "90"},
       {"--jpeg-quality", "--store raw"}},
      {"max_side+resize",
       [](BuildOptions* o) {
         o->max_side = 64;
         o->resize_width = o->resize_height = 32;
       },
       {"BuildOptions::max_side", "BuildOptions::resize_width"},
       {"--max-side", "64", "--resize", "32x32"},
       {"--max-side", "--resize"}},
      {"jpeg_restarts+raw",
       [](BuildOptions* o) {
         o->store = StoreMode::kRaw;
         o->jpeg_restarts = true;
       },
       {"BuildOptions::jpeg_restarts", "BuildOptions::store = raw"},
       {"--store", "raw", "--jpeg-restarts"},
       {"--jpeg-restarts", "--store raw"}},
      {"jpeg_quality out of range",
       [](BuildOptions* o) { o->jpeg_quality = 101; },
       {"BuildOptions::jpeg_quality"},
       {"--jpeg-quality", "101"},
       {"--jpeg-quality"}},
  };
  int index = 0;
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    const std::string out = tmp / ("out" + std::to_string(index++) + ".lmdb");
    BuildOptions o = Options(tmp / "src", out);
    c.set(&o);
    const Status v = ValidateBuildOptions(o);
    EXPECT_EQ(v.code(), Status::Code::kInvalidArgument) << v.ToString();
    BuildResult r;
    const Status s = BuildDataset(o, &r);
    EXPECT_EQ(s.code(), Status::Code::kInvalidArgument) << s.ToString();
    EXPECT_EQ(s.message(), v.message());
    for (const std::string& n : c.named) EXPECT_TRUE(Contains(s.message(), n)) << s.ToString();
    EXPECT_FALSE(Contains(s.message(), "resume")) << s.ToString();
    EXPECT_FALSE(fs::exists(out)) << "refused options left " << out;

    std::vector<std::string> args = {"build", tmp / "src", out, "-q"};
    args.insert(args.end(), c.flags.begin(), c.flags.end());
    const RunResult run = RunTool(args, tmp.path());
    EXPECT_EQ(run.exit_code, 2) << run.output;
    for (const std::string& n : c.cli_named) EXPECT_TRUE(Contains(run.output, n)) << run.output;
    EXPECT_FALSE(fs::exists(out)) << "dsconvert left " << out;
  }
}

TEST(BadInputAll, CheckDecodeCatchesCorruptPixelDataTheHeaderCheckMisses) {
  TempDir tmp;
  Synth(tmp / "src", 6, 64, 48);
  const std::string bad = tmp / "src/images/000003.png";
  std::string b = ReadAll(bad);
  for (size_t i = b.size() / 2; i < b.size() / 2 + 16; ++i) b[i] = static_cast<char>(~b[i]);
  WriteAll(bad, b);  // complete (IEND present), but the pixel data is corrupt
  BuildOptions o = Options(tmp / "src", tmp / "header");
  o.stats_sample = 1;  // only sample 0 is decoded for statistics
  BuildResult r;
  Status s = BuildDataset(o, &r);
  ASSERT_TRUE(s.ok()) << "--check header reads headers only: " << s.ToString();
  EXPECT_EQ(r.records, 6u);
  // ...so the stored record is bad, and verify (which decodes) says which one.
  VerifyResult vr;
  ASSERT_TRUE(VerifyDataset(o.output, {}, &vr).ok());
  EXPECT_EQ(vr.bad, 1u);
  ASSERT_EQ(vr.problems.size(), 1u);
  EXPECT_TRUE(Contains(vr.problems[0], KeyName(3))) << vr.problems[0];
  o.output = tmp / "decode";
  o.check = CheckLevel::kDecode;
  s = BuildDataset(o, &r);
  EXPECT_EQ(s.code(), Status::Code::kBadInput) << s.ToString();
  EXPECT_TRUE(Contains(s.message(), bad)) << s.ToString();
}

}  // namespace
}  // namespace dspipe::testing
