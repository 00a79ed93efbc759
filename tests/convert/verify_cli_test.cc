// SPDX-License-Identifier: Apache-2.0
// VerifyDataset / DescribeDataset, and the dsconvert command line end to end.
#include <gtest/gtest.h>

#include <atomic>
#include <cstdio>
#include <nlohmann/json.hpp>

#include "convert/test_support.h"
#include "dspipe/format.h"
#include "format/lmdb_env.h"

namespace dspipe::testing {
namespace {

class VerifyTest : public ::testing::Test {
 protected:
  void SetUp() override {
    Synth(src_, 6, 64, 48);
    BuildResult r;
    ASSERT_TRUE(BuildDataset(Options(src_, out_), &r).ok());
  }
  TempDir tmp_;
  std::string src_ = tmp_ / "src", out_ = tmp_ / "out.lmdb";
};

// Flips one byte of record `index`'s image payload inside data.mdb, found by searching the file
// for a snippet of the source image (encoded store keeps the bytes). Returns the occurrences.
int FlipPayloadByte(const std::string& mdb, const std::string& image_file) {
  const std::string img = ReadAll(image_file);
  const std::string snippet = img.substr(img.size() / 2, 64);
  std::string data = ReadAll(mdb);
  int found = 0;
  for (size_t pos = data.find(snippet); pos != std::string::npos;
       pos = data.find(snippet, pos + 1)) {
    data[pos + 32] = static_cast<char>(data[pos + 32] ^ 0x5A);
    ++found;
  }
  // Rewrite in place (same size, same inode), as a bad disk would.
  std::FILE* f = std::fopen(mdb.c_str(), "r+b");
  std::fwrite(data.data(), 1, data.size(), f);
  std::fclose(f);
  return found;
}

TEST_F(VerifyTest, CleanDatasetPasses) {
  VerifyResult vr;
  ASSERT_TRUE(VerifyDataset(out_, {}, &vr).ok());
  EXPECT_EQ(vr.records, 6u);
  EXPECT_EQ(vr.bad, 0u);
  EXPECT_TRUE(vr.problems.empty());
}

// Issue 40 item 8: VerifyOptions::cancelled (Python's Ctrl-C) stops the check between records
// with Status::Cancelled saying how far it got.
TEST_F(VerifyTest, ACancelledVerifyStopsBetweenRecords) {
  VerifyOptions o;
  o.threads = 1;
  std::atomic<int> polls{0};
  o.cancelled = [&] { return ++polls > 2; };
  VerifyResult vr;
  const Status s = VerifyDataset(out_, o, &vr);
  ASSERT_EQ(s.code(), Status::Code::kCancelled) << s.ToString();
  EXPECT_NE(s.message().find("verify of " + out_ + " interrupted after 2 of 6 records"),
            std::string::npos)
      << s.ToString();
}

TEST_F(VerifyTest, FlippedByteIsReportedByKey) {
  const auto images = ListDir(src_ + "/images");
  ASSERT_GE(FlipPayloadByte(out_ + "/data.mdb", images[2]), 1) << "payload not found in data.mdb";
  VerifyResult vr;
  VerifyOptions vo;
  vo.threads = 2;
  ASSERT_TRUE(VerifyDataset(out_, vo, &vr).ok());
  EXPECT_EQ(vr.records, 6u);
  EXPECT_EQ(vr.bad, 1u);
  // The manifest's sha256 of data.mdb sees the flip too (file problems come first).
  EXPECT_EQ(vr.bad_files, 1u);
  ASSERT_EQ(vr.problems.size(), 2u);
  EXPECT_TRUE(Contains(vr.problems[0], "file data.mdb: sha256")) << vr.problems[0];
  EXPECT_TRUE(Contains(vr.problems[1], "key " + KeyName(2))) << vr.problems[1];
  EXPECT_TRUE(Contains(vr.problems[1], "checksum mismatch")) << vr.problems[1];

  RunResult cli = RunTool({"verify", out_}, tmp_.path());
  EXPECT_EQ(cli.exit_code, 3) << cli.output;
  EXPECT_TRUE(Contains(cli.output, "BAD key " + KeyName(2))) << cli.output;
  EXPECT_TRUE(Contains(cli.output, "checksum mismatch")) << cli.output;
  EXPECT_TRUE(Contains(cli.output, "6 records, 1 bad")) << cli.output;
}

// A data.mdb cut short (a partial copy, a full disk) used to die with SIGBUS on the first
// page past the end; now open refuses it, naming the file, in verify and in info.
TEST_F(VerifyTest, TruncatedDataFileIsAClearErrorAtOpen) {
  const std::string mdb = out_ + "/data.mdb";
  ASSERT_GT(fs::file_size(mdb), 20u * 1024) << "the test needs a larger dataset";
  fs::resize_file(mdb, 20 * 1024);
  VerifyResult vr;
  Status s = VerifyDataset(out_, {}, &vr);
  EXPECT_EQ(s.code(), Status::Code::kCorruption) << s.ToString();
  EXPECT_TRUE(Contains(s.message(), mdb)) << s.ToString();
  EXPECT_TRUE(Contains(s.message(), "truncated")) << s.ToString();
  for (const char* cmd : {"verify", "info"}) {
    RunResult cli = RunTool({cmd, out_}, tmp_.path());
    EXPECT_EQ(cli.signal, 0) << cmd << " died by signal " << cli.signal << ": " << cli.output;
    EXPECT_EQ(cli.exit_code, 1) << cmd << ": " << cli.output;
    EXPECT_TRUE(Contains(cli.output, "truncated")) << cmd << ": " << cli.output;
  }
  // Resuming into it is refused the same way, not a crash.
  BuildOptions o = Options(src_, out_);
  o.resume = true;
  BuildResult r;
  EXPECT_EQ(BuildDataset(o, &r).code(), Status::Code::kCorruption);
}

TEST_F(VerifyTest, RandomBytesAreNotAnLmdb) {
  const std::string mdb = out_ + "/data.mdb";
  std::string noise(64 * 1024, '\0');
  uint32_t x = 12345;
  for (char& c : noise) {
    x = x * 1664525u + 1013904223u;
    c = static_cast<char>(x >> 24);
  }
  WriteAll(mdb, noise);
  VerifyResult vr;
  Status s = VerifyDataset(out_, {}, &vr);
  EXPECT_FALSE(s.ok());
  EXPECT_TRUE(Contains(s.message(), out_)) << s.ToString();
  RunResult cli = RunTool({"verify", out_}, tmp_.path());
  EXPECT_EQ(cli.signal, 0) << cli.output;
  EXPECT_EQ(cli.exit_code, 1) << cli.output;
}

TEST(Verify, UndecodablePayloadWithAValidChecksum) {
  // A record that is internally consistent (CRC right) but whose PNG cannot be decoded, and
  // one whose raw payload size disagrees with its shape: verify decodes, so both are found.
  TempDir tmp;
  const std::string path = tmp / "hand.lmdb";
  std::unique_ptr<format::LmdbEnv> env;
  ASSERT_TRUE(format::LmdbEnv::OpenForWrite(path, &env).ok());
  format::LmdbEnv::Writer w(env.get());
  for (uint64_t i = 0; i < 4; ++i) {
    RecordHeader h;
    h.channels = 3;
    h.height = 4;
    h.width = 5;
    std::string payload, value;
    if (i == 1) {
      h.image_codec = Codec::kPng;
      payload = std::string("\x89PNG\r\n\x1a\n", 8) + "garbage garbage garbage";
    } else {
      h.image_codec = Codec::kRaw;
      payload.assign(i == 3 ? 59 : 60, 'p');
    }
    EncodeRecord(h, AsBytes(payload), {}, &value);
    uint8_t k[kKeySize];
    EncodeKey(i, k);
    w.PutRecord(std::string(reinterpret_cast<char*>(k), kKeySize), value);
  }
  w.PutMeta(kManifestKey, nlohmann::json{{"format", "dspipe"},
                                         {"format_version", 1},
                                         {"complete", true},
                                         {"count", 4},
                                         {"store", "raw"},
                                         {"channels", 3}}
                              .dump());
  ASSERT_TRUE(w.Commit().ok());
  env.reset();
  VerifyResult vr;
  ASSERT_TRUE(VerifyDataset(path, {}, &vr).ok());
  EXPECT_EQ(vr.records, 4u);
  EXPECT_EQ(vr.bad, 2u);
  ASSERT_EQ(vr.problems.size(), 2u);
  EXPECT_TRUE(Contains(vr.problems[0], KeyName(1))) << vr.problems[0];
  EXPECT_TRUE(Contains(vr.problems[0], "image")) << vr.problems[0];
  EXPECT_TRUE(Contains(vr.problems[1], KeyName(3))) << vr.problems[1];
  EXPECT_TRUE(Contains(vr.problems[1], "59 bytes")) << vr.problems[1];
  // max_listed caps the list, not the count.
  VerifyOptions vo;
  vo.max_listed = 1;
  ASSERT_TRUE(VerifyDataset(path, vo, &vr).ok());
  EXPECT_EQ(vr.bad, 2u);
  EXPECT_EQ(vr.problems.size(), 1u);
}

TEST_F(VerifyTest, InfoDescribesCountShapeStorageAndStats) {
  std::string text;
  ASSERT_TRUE(DescribeDataset(out_, &text).ok());
  std::unique_ptr<Dataset> ds;
  ASSERT_TRUE(Dataset::Open(out_, {}, &ds).ok());
  const DatasetInfo& i = ds->info();
  EXPECT_TRUE(Contains(text, "records:     6\n")) << text;
  EXPECT_TRUE(Contains(text, "48x64x3")) << text;
  EXPECT_TRUE(Contains(text, "storage:     encoded")) << text;
  EXPECT_TRUE(Contains(text, "masks:       yes (" + std::to_string(i.num_classes) + " classes"))
      << text;
  ASSERT_TRUE(i.has_stats);
  for (int k = 0; k < 3; ++k) {
    char mean[32], sd[32];
    std::snprintf(mean, sizeof mean, "%.2f", i.mean[k]);
    std::snprintf(sd, sizeof sd, "%.2f", i.std[k]);
    EXPECT_TRUE(Contains(text, mean)) << mean << " not in\n" << text;
    EXPECT_TRUE(Contains(text, sd)) << sd << " not in\n" << text;
  }
  EXPECT_TRUE(Contains(text, "mean:")) << text;
  EXPECT_TRUE(Contains(text, "std:")) << text;
  EXPECT_TRUE(Contains(text, "MiB")) << text;
  // Describing an unfinished build fails the same way opening it does.
  WriteAll(src_ + "/images/000004.png", "");
  BuildResult r;
  ASSERT_FALSE(BuildDataset(Options(src_, tmp_ / "partial"), &r).ok());
  Status s = DescribeDataset(tmp_ / "partial", &text);
  EXPECT_EQ(s.code(), Status::Code::kCorruption) << s.ToString();
}

TEST(Cli, DecodeLimitFlagsAreNamedInTheRefusalAndApplied) {
  TempDir tmp;
  Synth(tmp / "src", 2, 64, 48);
  RunResult r = RunTool({"build", tmp / "src", tmp / "out", "--max-image-side", "32"}, tmp.path());
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_TRUE(Contains(r.output, "64x48 pixels; the limit is 32 per side")) << r.output;
  EXPECT_TRUE(Contains(r.output, "--max-image-side")) << r.output;
  r = RunTool({"build", tmp / "src", tmp / "out2", "--max-image-pixels", "3000"}, tmp.path());
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_TRUE(Contains(r.output, "--max-image-pixels")) << r.output;
  r = RunTool({"build", tmp / "src", tmp / "out3", "--max-image-side", "64", "-q"}, tmp.path());
  EXPECT_EQ(r.exit_code, 0) << r.output;
}

TEST(Cli, BadUsageExits2) {
  TempDir tmp;
  Synth(tmp / "src", 2, 32, 32);
  const std::string src = tmp / "src", out = tmp / "out";
  const std::vector<std::vector<std::string>> cases = {
      {},
      {"frobnicate"},
      {"build"},
      {"build", src},
      {"build", src, out, "--store", "bogus"},
      {"build", src, out, "--on-error", "ignore"},
      {"build", src, out, "--resize", "12"},
      {"build", src, out, "--resize", "0x10"},
      {"build", src, out, "--size", "12"},
      {"build", src, out, "--size", "0x10"},
      {"build", src, out, "--size", "8x8", "--resize", "8x8"},
      {"build", src, out, "--size", "8x8", "--max-side", "8"},
      {"build", src, out, "--threads", "many"},
      {"build", src, out, "--no-such-flag"},
      {"synth", tmp / "s2", "--size", "axb"},
      {"synth", tmp / "s2", "--format", "gif"},
      {"verify"},
  };
  for (const auto& args : cases) {
    std::string joined;
    for (const auto& a : args) joined += a + " ";
    RunResult r = RunTool(args, tmp.path());
    EXPECT_EQ(r.exit_code, 2) << joined << "\n" << r.output;
    EXPECT_FALSE(r.output.empty()) << joined << ": no message";
  }
  EXPECT_FALSE(fs::exists(out)) << "a bad command line created the output";
  EXPECT_FALSE(fs::exists(tmp / "s2/images"));
}

TEST(Cli, SynthBuildVerifyInfo) {
  TempDir tmp;
  const std::string src = tmp / "src", out = tmp / "out.lmdb";
  RunResult r =
      RunTool({"synth", src, "--count", "8", "--size", "48x32", "--seed", "3", "--classes", "4"},
              tmp.path());
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(ListDir(src + "/images").size(), 8u);
  EXPECT_EQ(ListDir(src + "/masks").size(), 8u);
  r = RunTool({"build", src, out, "--store", "raw", "--size", "16x24", "--shuffle", "--seed", "5",
               "--threads", "2"},
              tmp.path());
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_TRUE(Contains(r.output, "8 records from 8 sources")) << r.output;
  r = RunTool({"verify", out}, tmp.path());
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_TRUE(Contains(r.output, "8 records, 0 bad")) << r.output;
  r = RunTool({"info", out}, tmp.path());
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_TRUE(Contains(r.output, "records:     8")) << r.output;
  EXPECT_TRUE(Contains(r.output, "16x24x3")) << r.output;
  EXPECT_TRUE(Contains(r.output, "storage:     raw")) << r.output;
  EXPECT_TRUE(Contains(r.output, "mean:")) << r.output;
  // A failing build: exit 1, the message names the file and the reason.
  WriteAll(src + "/images/000005.png", "");
  r = RunTool({"build", src, tmp / "out2"}, tmp.path());
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_TRUE(Contains(r.output, src + "/images/000005.png")) << r.output;
  EXPECT_TRUE(Contains(r.output, "empty file")) << r.output;
  r = RunTool({"build", src, tmp / "out3", "--on-error", "skip", "-q"}, tmp.path());
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_TRUE(Contains(r.output, "skipped 1 bad files")) << r.output;
  EXPECT_TRUE(Contains(r.output, "rejected.tsv")) << r.output;
  r = RunTool({"info", tmp / "out2"}, tmp.path());
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_TRUE(Contains(r.output, "interrupted")) << r.output;
}

// Sizes are HxW in every tool: synth --size, build --size and build --resize read the height
// first, as dsbench --size and Python's (height, width) do; --resize, which read width first
// before, says the rows and columns a non-square size makes. fetch's byte count is --bytes, its
// old --size still works and names it.
TEST(Cli, SizesAreHeightByWidthInEveryToolAndOldSpellingsSaySo) {
  TempDir tmp;
  const std::string src = tmp / "src";
  RunResult r =
      RunTool({"synth", src, "--count", "2", "--size", "40x24", "--seed", "1"}, tmp.path());
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_TRUE(Contains(r.output, "40 rows x 24 columns")) << r.output;
  EXPECT_TRUE(Contains(r.output, "(40x24 png")) << r.output;
  r = RunTool({"build", src, tmp / "a", "-q"}, tmp.path());
  ASSERT_EQ(r.exit_code, 0) << r.output;
  r = RunTool({"info", tmp / "a"}, tmp.path());
  EXPECT_TRUE(Contains(r.output, "40x24x3 (HxWxC")) << r.output;

  r = RunTool({"build", src, tmp / "b", "--size", "16x8", "-q"}, tmp.path());
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_FALSE(Contains(r.output, "deprecated")) << r.output;
  r = RunTool({"info", tmp / "b"}, tmp.path());
  EXPECT_TRUE(Contains(r.output, "16x8x3 (HxWxC")) << r.output;

  r = RunTool({"build", src, tmp / "c", "--resize", "512x256", "-q"}, tmp.path());
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_TRUE(Contains(r.output, "--resize 512x256 is 512 rows x 256 columns (HxW")) << r.output;
  r = RunTool({"info", tmp / "c"}, tmp.path());
  EXPECT_TRUE(Contains(r.output, "512x256x3 (HxWxC")) << r.output;
  r = RunTool({"build", src, tmp / "d", "--resize", "16x16", "-q"}, tmp.path());
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_FALSE(Contains(r.output, "rows x")) << r.output;  // a square size says nothing

  WriteAll(tmp / "five", "12345");
  r = RunTool({"fetch", tmp / "five", tmp / "f1", "--bytes", "5", "-q"}, tmp.path());
  EXPECT_EQ(r.exit_code, 0) << r.output;
  r = RunTool({"fetch", tmp / "five", tmp / "f2", "--bytes", "6", "-q"}, tmp.path());
  EXPECT_EQ(r.exit_code, 1) << r.output;
  r = RunTool({"fetch", tmp / "five", tmp / "f3", "--size", "5", "-q"}, tmp.path());
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_TRUE(Contains(r.output, "write --bytes 5")) << r.output;
}

// --store raw --compression none: uncompressed pixels (Codec::kRaw) equal to what the zstd build
// decodes to, verified (CRC catches a flipped pixel) and described by info.
TEST(Cli, UncompressedRawRoundTripVerifyAndInfo) {
  TempDir tmp;
  const std::string src = tmp / "src", zstd = tmp / "zstd.lmdb", none = tmp / "none.lmdb";
  Synth(src, 6, 48, 32);
  RunResult r = RunTool({"build", src, zstd, "--store", "raw", "-q"}, tmp.path());
  ASSERT_EQ(r.exit_code, 0) << r.output;
  r = RunTool({"build", src, none, "--store", "raw", "--compression", "none", "-q"}, tmp.path());
  ASSERT_EQ(r.exit_code, 0) << r.output;
  std::vector<Rec> a, b;
  ASSERT_TRUE(ReadRecords(zstd, &a).ok());
  ASSERT_TRUE(ReadRecords(none, &b).ok());
  ASSERT_EQ(a.size(), 6u);
  ASSERT_EQ(b.size(), 6u);
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_EQ(a[i].header.image_codec, Codec::kRawZstd);
    EXPECT_EQ(b[i].header.image_codec, Codec::kRaw);
    EXPECT_EQ(b[i].header.mask_codec, Codec::kRaw);
    EXPECT_EQ(b[i].image.size(), 48u * 32u * 3u);
    EXPECT_EQ(b[i].mask.size(), 48u * 32u);
    const cv::Mat ia = DecodedImage(a[i]), ib = DecodedImage(b[i]);
    EXPECT_EQ(cv::norm(ia, ib, cv::NORM_INF), 0) << i;
    EXPECT_EQ(cv::norm(DecodedMask(a[i]), DecodedMask(b[i]), cv::NORM_INF), 0) << i;
    EXPECT_EQ(b[i].header.label, a[i].header.label);
  }
  r = RunTool({"verify", none}, tmp.path());
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_TRUE(Contains(r.output, "6 records, 0 bad")) << r.output;
  r = RunTool({"info", none}, tmp.path());
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_TRUE(Contains(r.output, "storage:     raw (uncompressed pixels)")) << r.output;
  EXPECT_TRUE(Contains(r.output, "\"raw\"")) << r.output;  // codecs: {"raw": 6}
  r = RunTool({"info", zstd}, tmp.path());
  EXPECT_TRUE(Contains(r.output, "storage:     raw (zstd-compressed pixels)")) << r.output;
  // A changed pixel in an uncompressed payload decodes fine: only the CRC catches it.
  const std::string mdb = none + "/data.mdb";
  std::string data = ReadAll(mdb);
  const size_t at = data.find(b[2].image.substr(100, 48));
  ASSERT_NE(at, std::string::npos);
  data[at + 5] = static_cast<char>(data[at + 5] ^ 0x01);
  std::FILE* f = std::fopen(mdb.c_str(), "r+b");
  std::fwrite(data.data(), 1, data.size(), f);
  std::fclose(f);
  r = RunTool({"verify", none}, tmp.path());
  EXPECT_EQ(r.exit_code, 3) << r.output;
  EXPECT_TRUE(Contains(r.output, "1 bad")) << r.output;
  // --compression is for raw records only: a usage error (exit 2, as a bad flag value), refused
  // before the output is created (ValidateBuildOptions).
  r = RunTool({"build", src, tmp / "enc.lmdb", "--compression", "none"}, tmp.path());
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_TRUE(Contains(r.output, "--compression none applies to --store raw")) << r.output;
  EXPECT_FALSE(fs::exists(tmp / "enc.lmdb"));
  r = RunTool({"build", src, tmp / "x.lmdb", "--store", "raw", "--compression", "lz4"}, tmp.path());
  EXPECT_EQ(r.exit_code, 2) << r.output;
}

}  // namespace
}  // namespace dspipe::testing
