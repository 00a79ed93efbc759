// SPDX-License-Identifier: Apache-2.0
// Plain LMDBs as users have them, written by python-lmdb inside each test: masks beside the
// images (suffix / prefix keys), masks in a second LMDB, labels from a CSV. Each loads with the
// right image/mask pairs (the mask is derived from its image, so a wrong pair shows) and
// converts (`dsconvert build PLAIN OUT`) to a dspipe LMDB equal to the build of the same files.
// Also: the warnings when keys look like masks but are not paired, refusal of mixed keys, the
// dense-key fast path and its fallback, --on-error naming keys, the CLI flags.
#include <cstdlib>
#include <cstring>
#include <opencv2/imgcodecs.hpp>

#include "convert/test_support.h"
#include "dspipe/loader.h"
#include "format/plain_lmdb.h"

namespace dspipe {
namespace {

using namespace dspipe::testing;

constexpr int kCount = 12;  // > 10, so "10" and "11" come after "2" only in numeric order

// The mask every test image carries: its blue channel mod 4 (pixels as OpenCV reads them).
cv::Mat MaskOf(const cv::Mat& bgr) {
  std::vector<cv::Mat> ch;
  cv::split(bgr, ch);
  cv::Mat m;
  ch[0].convertTo(m, CV_8U);
  for (int y = 0; y < m.rows; ++y) {
    for (int x = 0; x < m.cols; ++x) m.at<uint8_t>(y, x) %= 4;
  }
  return m;
}

cv::Mat Decode(const std::string& bytes, int flags) {
  return cv::imdecode(
      cv::Mat(1, static_cast<int>(bytes.size()), CV_8U, const_cast<char*>(bytes.data())), flags);
}

bool SameMat(const cv::Mat& a, const cv::Mat& b) {
  return a.size() == b.size() && a.type() == b.type() && cv::countNonZero(a != b) == 0;
}

class PlainSourceTest : public ::testing::Test {
 protected:
  void SetUp() override {
    // src/images/NN.png + src/masks/NN.png: zero-padded names, so the folder's (bytewise)
    // order is the plain LMDB's numeric order.
    fs::create_directories(t_ / "src/images");
    fs::create_directories(t_ / "src/masks");
    cv::RNG rng(7);
    for (int i = 0; i < kCount; ++i) {
      cv::Mat img(12 + i % 3, 16, CV_8UC3);
      rng.fill(img, cv::RNG::UNIFORM, 0, 256);
      char name[16];
      std::snprintf(name, sizeof name, "%02d.png", i);
      images_.push_back(t_ / (std::string("src/images/") + name));
      masks_.push_back(t_ / (std::string("src/masks/") + name));
      ASSERT_TRUE(cv::imwrite(images_.back(), img));
      ASSERT_TRUE(cv::imwrite(masks_.back(), MaskOf(img)));
    }
  }

  // Writes LMDBs with python-lmdb: each entry puts the bytes of `file` under `key` in `db`.
  struct Put {
    std::string db, key, file;
  };
  void WriteWithPython(const std::vector<Put>& puts) {
    std::string list;
    for (const Put& p : puts) list += p.db + "\t" + p.key + "\t" + p.file + "\n";
    WriteAll(t_ / "puts.tsv", list);
    WriteAll(t_ / "write.py", R"(import collections, sys
import lmdb
puts = collections.OrderedDict()
for line in open(sys.argv[1]):
    db, key, path = line.rstrip("\n").split("\t")
    puts.setdefault(db, []).append((key, path))
for db, entries in puts.items():
    env = lmdb.open(db, map_size=1 << 26)
    with env.begin(write=True) as txn:
        for key, path in entries:
            txn.put(key.encode(), open(path, "rb").read())
    env.close()
)");
    const std::string cmd = "/usr/bin/python3 " + (t_ / "write.py") + " " + (t_ / "puts.tsv");
    ASSERT_EQ(std::system(cmd.c_str()), 0) << cmd << " (needs Debian's python3-lmdb)";
  }

  std::unique_ptr<Dataset> Open(const std::string& path, const PlainLmdbOptions& p,
                                Status* status = nullptr) {
    DatasetOpenOptions o;
    o.plain = p;
    std::unique_ptr<Dataset> ds;
    Status s = Dataset::Open(path, o, &ds);
    if (status) {
      *status = s;
    } else {
      EXPECT_TRUE(s.ok()) << s.ToString();
    }
    return ds;
  }

  // Every record is image i with its own mask (and label i % 3 when labelled).
  void ExpectPairs(const Dataset& ds, bool masks, bool labels) {
    ASSERT_EQ(ds.size(), static_cast<uint64_t>(kCount));
    EXPECT_EQ(ds.info().has_masks, masks);
    EXPECT_EQ(ds.info().has_labels, labels);
    for (int i = 0; i < kCount; ++i) {
      Status s = ds.Read(i, [&](const RecordView& r) {
        const std::string img(r.image.begin(), r.image.end());
        EXPECT_EQ(img, ReadAll(images_[i])) << "record " << i << " is not image " << i;
        EXPECT_EQ(r.header.label, labels ? i % 3 : -1);
        if (masks) {
          const cv::Mat m = Decode(std::string(r.mask.begin(), r.mask.end()), cv::IMREAD_UNCHANGED);
          EXPECT_TRUE(SameMat(m, MaskOf(Decode(img, cv::IMREAD_COLOR))))
              << "record " << i << ": the mask is not its image's";
        } else {
          EXPECT_TRUE(r.mask.empty());
        }
        return Status::OK();
      });
      ASSERT_TRUE(s.ok()) << s.ToString();
    }
  }

  // Builds `src` (with `plain`) and `files` and expects equal records and dataset facts.
  void ExpectSameBuild(const std::string& src, const PlainLmdbOptions& plain,
                       const std::string& files) {
    BuildOptions a = Options(src, t_ / "from-plain.lmdb");
    a.plain = plain;
    BuildResult ra, rb;
    Status s = BuildDataset(a, &ra);
    ASSERT_TRUE(s.ok()) << s.ToString();
    s = BuildDataset(Options(files, t_ / "from-files.lmdb"), &rb);
    ASSERT_TRUE(s.ok()) << s.ToString();
    std::vector<Rec> pa, pb;
    std::unique_ptr<Dataset> da, db;
    ASSERT_TRUE(ReadRecords(a.output, &pa, &da).ok());
    ASSERT_TRUE(ReadRecords(t_ / "from-files.lmdb", &pb, &db).ok());
    ASSERT_EQ(pa.size(), pb.size());
    for (size_t i = 0; i < pa.size(); ++i) {
      EXPECT_EQ(pa[i].image, pb[i].image) << i;
      EXPECT_EQ(pa[i].mask, pb[i].mask) << i;
      EXPECT_EQ(pa[i].header.label, pb[i].header.label) << i;
      EXPECT_EQ(pa[i].header.height, pb[i].header.height) << i;
      EXPECT_EQ(pa[i].header.image_codec, pb[i].header.image_codec) << i;
      EXPECT_EQ(pa[i].header.mask_codec, pb[i].header.mask_codec) << i;
    }
    const DatasetInfo &ia = da->info(), &ib = db->info();
    EXPECT_EQ(ia.has_masks, ib.has_masks);
    EXPECT_EQ(ia.has_labels, ib.has_labels);
    EXPECT_EQ(ia.num_classes, ib.num_classes);
    EXPECT_EQ(ia.mean, ib.mean);
    EXPECT_EQ(ia.std, ib.std);
  }

  TempDir t_;
  std::vector<std::string> images_, masks_;
};

TEST_F(PlainSourceTest, SuffixKeysPairAutomaticallyAndConvertLikeTheFolder) {
  const std::string db = t_ / "suffix.lmdb";
  std::vector<Put> puts;
  for (int i = 0; i < kCount; ++i) {
    puts.push_back({db, std::to_string(i), images_[i]});
    puts.push_back({db, std::to_string(i) + "_mask", masks_[i]});
  }
  WriteWithPython(puts);
  auto ds = Open(db, {});
  ExpectPairs(*ds, true, false);
  EXPECT_TRUE(Contains(ds->info().pairing, "suffix '_mask'")) << ds->info().pairing;
  EXPECT_TRUE(ds->info().warnings.empty());
  EXPECT_TRUE(static_cast<const format::PlainLmdbDataset&>(*ds).dense())
      << "0..N-1: no key listing";
  PlainLmdbOptions scan;
  scan.scan_keys = true;  // the listing path pairs the same way
  auto listed = Open(db, scan);
  EXPECT_FALSE(static_cast<const format::PlainLmdbDataset&>(*listed).dense());
  ExpectPairs(*listed, true, false);
  PlainLmdbOptions given;
  given.mask_key = "{key}_mask";
  ExpectPairs(*Open(db, given), true, false);
  ExpectSameBuild(db, {}, t_ / "src");
}

TEST_F(PlainSourceTest, LoaderBatchesCarryEachImagesOwnMask) {
  // The images of one size only (i % 3 == 0), so the batches need no resize.
  const std::string db = t_ / "seg.lmdb";
  std::vector<Put> puts;
  std::vector<int> src;
  for (int i = 0; i < kCount; i += 3) {
    const std::string key = std::to_string(src.size());
    puts.push_back({db, key, images_[i]});
    puts.push_back({db, key + "_mask", masks_[i]});
    src.push_back(i);
  }
  WriteWithPython(puts);
  LoaderOptions o;
  o.batch_size = static_cast<int>(src.size());
  o.threads = 2;
  o.sampler.shuffle = false;
  std::unique_ptr<Loader> loader;
  Status s = Loader::Open(db, o, &loader);
  ASSERT_TRUE(s.ok()) << s.ToString();
  EXPECT_TRUE(loader->shape().masks);
  Batch b;
  s = loader->Next(&b);
  ASSERT_TRUE(s.ok()) << s.ToString();
  ASSERT_EQ(b.size(), static_cast<int>(src.size()));
  for (int k = 0; k < b.size(); ++k) {
    const cv::Mat bgr = cv::imread(images_[src[k]], cv::IMREAD_COLOR);
    cv::Mat rgb;
    cv::cvtColor(bgr, rgb, cv::COLOR_BGR2RGB);
    const cv::Mat mask = MaskOf(bgr);
    ASSERT_EQ(b.image(k).size(), rgb.total() * 3);
    ASSERT_EQ(b.mask(k).size(), mask.total());
    EXPECT_EQ(std::memcmp(b.image(k).data(), rgb.data, rgb.total() * 3), 0) << k;
    EXPECT_EQ(std::memcmp(b.mask(k).data(), mask.data, mask.total()), 0)
        << "sample " << k << " has another mask";
  }
}

TEST_F(PlainSourceTest, PrefixKeysPairAutomaticallyAndConvertLikeTheFolder) {
  const std::string db = t_ / "prefix.lmdb";
  std::vector<Put> puts;
  for (int i = 0; i < kCount; ++i) {
    puts.push_back({db, "img_" + std::to_string(i), images_[i]});
    puts.push_back({db, "mask_" + std::to_string(i), masks_[i]});
  }
  WriteWithPython(puts);
  auto ds = Open(db, {});
  ExpectPairs(*ds, true, false);
  EXPECT_TRUE(Contains(ds->info().pairing, "prefix 'mask_'")) << ds->info().pairing;
  EXPECT_EQ(ds->KeyName(2), "img_2") << "numeric order: img_2 before img_10";
  PlainLmdbOptions given;
  given.image_key = "img_{id}";
  given.mask_key = "mask_{id}";
  auto explicit_ds = Open(db, given);
  ExpectPairs(*explicit_ds, true, false);
  EXPECT_TRUE(static_cast<const format::PlainLmdbDataset&>(*explicit_ds).dense());
  ExpectSameBuild(db, given, t_ / "src");
}

TEST_F(PlainSourceTest, MasksInASecondLmdbAndConvertLikeTheFolder) {
  const std::string db = t_ / "images.lmdb", mdb = t_ / "masks.lmdb";
  std::vector<Put> puts;
  for (int i = 0; i < kCount; ++i) {
    puts.push_back({db, std::to_string(i), images_[i]});
    puts.push_back({mdb, std::to_string(i), masks_[i]});
  }
  WriteWithPython(puts);
  EXPECT_FALSE(Open(db, {})->info().has_masks) << "without `masks` there are none";
  PlainLmdbOptions p;
  p.masks = mdb;
  auto ds = Open(db, p);
  ExpectPairs(*ds, true, false);
  EXPECT_TRUE(Contains(ds->info().pairing, mdb)) << ds->info().pairing;
  p.scan_keys = true;
  ExpectPairs(*Open(db, p), true, false);
  p.scan_keys = false;
  ExpectSameBuild(db, p, t_ / "src");
}

// folder2lmdb-style LMDBs carry "__len__" and "__keys__" beside the samples (issue 40, item 12):
// they are skipped with one info line; other non-sample keys are refused naming ignore_keys,
// which skips them by glob.
TEST_F(PlainSourceTest, MetadataKeysAreSkippedAndIgnoreKeysSkipsOthers) {
  WriteAll(t_ / "meta.bin", "12");
  const std::string db = t_ / "f2l.lmdb", paired = t_ / "f2l-masks.lmdb", other = t_ / "o.lmdb";
  std::vector<Put> puts;
  for (int i = 0; i < kCount; ++i) {
    puts.push_back({db, std::to_string(i), images_[i]});
    puts.push_back({paired, std::to_string(i), images_[i]});
    puts.push_back({paired, std::to_string(i) + "_mask", masks_[i]});
    puts.push_back({other, std::to_string(i), images_[i]});
  }
  for (const char* k : {"__len__", "__keys__"}) {
    puts.push_back({db, k, t_ / "meta.bin"});
    puts.push_back({paired, k, t_ / "meta.bin"});
  }
  puts.push_back({other, "meta_info", t_ / "meta.bin"});
  puts.push_back({other, "meta_classes", t_ / "meta.bin"});
  WriteWithPython(puts);

  Status s;
  auto ds = Open(db, {});
  ExpectPairs(*ds, false, false);
  EXPECT_TRUE(Contains(ds->info().pairing, "skipped 2 keys that are not samples"))
      << ds->info().pairing;
  EXPECT_TRUE(Contains(ds->info().pairing, "'__keys__'")) << ds->info().pairing;
  ExpectPairs(*Open(paired, {}), true, false);
  BuildResult r;
  s = BuildDataset(Options(db, t_ / "f2l-built.lmdb"), &r);
  ASSERT_TRUE(s.ok()) << s.ToString();
  EXPECT_EQ(r.records, static_cast<uint64_t>(kCount));

  EXPECT_EQ(Open(other, {}, &s), nullptr);
  EXPECT_EQ(s.code(), Status::Code::kBadInput) << s.ToString();
  EXPECT_TRUE(Contains(s.message(), "meta_")) << s.ToString();
  EXPECT_TRUE(Contains(s.message(), "PlainLmdbOptions::ignore_keys = meta_")) << s.ToString();
  PlainLmdbOptions p;
  p.ignore_keys = "meta_*, other";
  ds = Open(other, p);
  ExpectPairs(*ds, false, false);
  EXPECT_TRUE(Contains(ds->info().pairing, "skipped 2 keys")) << ds->info().pairing;
  p.scan_keys = true;
  ExpectPairs(*Open(other, p), false, false);
}

TEST_F(PlainSourceTest, LabelsFromCsvAndConvertLikeTheCsvSource) {
  const std::string db = t_ / "cls.lmdb";
  std::vector<Put> puts;
  std::string labels = "key,label\n", files = "image,mask,label\n";
  for (int i = 0; i < kCount; ++i) {
    puts.push_back({db, std::to_string(i), images_[i]});
    labels += std::to_string(kCount - 1 - i) + "," + std::to_string((kCount - 1 - i) % 3) + "\n";
    files += images_[i] + ",," + std::to_string(i % 3) + "\n";
  }
  WriteWithPython(puts);
  WriteAll(t_ / "labels.csv", labels);
  WriteAll(t_ / "files.csv", files);
  PlainLmdbOptions p;
  p.labels = t_ / "labels.csv";
  ExpectPairs(*Open(db, p), false, true);
  ExpectSameBuild(db, p, t_ / "files.csv");

  // A key without a label, and a label for a key that is not there, are refused by name.
  WriteAll(t_ / "short.csv", "0,1\n1,1\n");
  p.labels = t_ / "short.csv";
  Status s;
  EXPECT_EQ(Open(db, p, &s), nullptr);
  EXPECT_EQ(s.code(), Status::Code::kBadInput);
  EXPECT_TRUE(Contains(s.message(), "no label for image key '2'")) << s.ToString();
  WriteAll(t_ / "extra.csv", labels + "12,0\n");
  p.labels = t_ / "extra.csv";
  EXPECT_EQ(Open(db, p, &s), nullptr);
  EXPECT_TRUE(Contains(s.message(), "extra.csv:14: key '12' is not an image key")) << s.ToString();
}

TEST_F(PlainSourceTest, WarnsWhenKeysLookLikeMasksButAreNotPaired) {
  // Detection off: the masks would load as images; the warning names the keys and the option.
  const std::string db = t_ / "prefix.lmdb";
  std::vector<Put> puts;
  for (int i = 0; i < kCount; ++i) {
    puts.push_back({db, "img_" + std::to_string(i), images_[i]});
    puts.push_back({db, "mask_" + std::to_string(i), masks_[i]});
  }
  // Detection on, but only two images have a mask: images only, and a warning.
  const std::string few = t_ / "few.lmdb";
  for (int i = 0; i < kCount; ++i) puts.push_back({few, std::to_string(i), images_[i]});
  for (int i = 0; i < 2; ++i) puts.push_back({few, std::to_string(i) + "_mask", masks_[i]});
  WriteWithPython(puts);

  PlainLmdbOptions off;
  off.detect_masks = false;
  auto ds = Open(db, off);
  EXPECT_EQ(ds->size(), 2u * kCount);
  EXPECT_FALSE(ds->info().has_masks);
  ASSERT_EQ(ds->info().warnings.size(), 1u);
  EXPECT_TRUE(Contains(ds->info().warnings[0], "12 keys look like masks (e.g. 'mask_0')"))
      << ds->info().warnings[0];
  EXPECT_TRUE(Contains(ds->info().warnings[0], "mask_key")) << ds->info().warnings[0];

  auto partial = Open(few, {});
  EXPECT_EQ(partial->size(), static_cast<uint64_t>(kCount)) << "the 2 masks are not images";
  EXPECT_FALSE(partial->info().has_masks);
  ASSERT_EQ(partial->info().warnings.size(), 1u);
  EXPECT_TRUE(Contains(partial->info().warnings[0], "only 2 of 12 images have one"))
      << partial->info().warnings[0];
  EXPECT_TRUE(Contains(partial->info().warnings[0], "mask_key")) << partial->info().warnings[0];
  for (int i = 0; i < kCount; ++i) EXPECT_EQ(partial->KeyName(i), std::to_string(i));
}

TEST_F(PlainSourceTest, MixedKeysAreRefusedNamingTheKey) {
  const std::string db = t_ / "mixed.lmdb", suffix = t_ / "suffix.lmdb";
  std::vector<Put> puts;
  for (int i = 0; i < kCount; ++i) puts.push_back({db, std::to_string(i), images_[i]});
  puts.push_back({db, "cat", images_[0]});
  for (int i = 0; i < kCount; ++i) {
    puts.push_back({suffix, std::to_string(i), images_[i]});
    puts.push_back({suffix, std::to_string(i) + "_mask", masks_[i]});
  }
  WriteWithPython(puts);
  Status s;
  EXPECT_EQ(Open(db, {}, &s), nullptr);
  EXPECT_EQ(s.code(), Status::Code::kBadInput);
  EXPECT_TRUE(Contains(s.message(), "key 'cat' is not a decimal number")) << s.ToString();
  EXPECT_TRUE(Contains(s.message(), db)) << s.ToString();

  // Masks with detection off are mixed keys too; the message says which option pairs them.
  PlainLmdbOptions off;
  off.detect_masks = false;
  EXPECT_EQ(Open(suffix, off, &s), nullptr);
  EXPECT_TRUE(Contains(s.message(), "'0_mask' looks like a mask: set PlainLmdbOptions::mask_key"))
      << s.ToString();

  // The same number spelled twice has no numeric order.
  const std::string twice = t_ / "twice.lmdb";
  WriteWithPython({{twice, "7", images_[0]}, {twice, "07", images_[1]}});
  EXPECT_EQ(Open(twice, {}, &s), nullptr);
  EXPECT_TRUE(Contains(s.message(), "keys '07' and '7' are the same number")) << s.ToString();
}

TEST_F(PlainSourceTest, DenseProbesFallBackToTheListingWhenAKeyIsMissing) {
  // 0..11 with '7' written as '7a': the entry count fits 0..11, the probes find the hole, and
  // the listing refuses the odd key by name (never a dataset with a missing record).
  const std::string db = t_ / "hole.lmdb";
  std::vector<Put> puts;
  for (int i = 0; i < kCount; ++i) {
    puts.push_back({db, std::to_string(i) + (i == 7 ? "a" : ""), images_[i]});
  }
  WriteWithPython(puts);
  Status s;
  EXPECT_EQ(Open(db, {}, &s), nullptr);
  EXPECT_TRUE(Contains(s.message(), "key '7a' is not a decimal number")) << s.ToString();
}

TEST_F(PlainSourceTest, UndecodableValuesFollowOnErrorNamedByKey) {
  const std::string db = t_ / "bad.lmdb";
  WriteAll(t_ / "junk.png", std::string("\x89PNG\r\n\x1a\n", 8) + "truncated");
  std::vector<Put> puts;
  for (int i = 0; i < kCount; ++i) {
    puts.push_back({db, std::to_string(i), i == 3 ? t_ / "junk.png" : images_[i]});
    puts.push_back({db, std::to_string(i) + "_mask", masks_[i]});
  }
  WriteWithPython(puts);
  BuildOptions o = Options(db, t_ / "fail.lmdb");
  BuildResult r;
  Status s = BuildDataset(o, &r);
  EXPECT_EQ(s.code(), Status::Code::kBadInput);
  EXPECT_TRUE(Contains(s.message(), db + " key 3")) << s.ToString();

  o = Options(db, t_ / "skip.lmdb");
  o.on_error = OnError::kSkip;
  s = BuildDataset(o, &r);
  ASSERT_TRUE(s.ok()) << s.ToString();
  EXPECT_EQ(r.records, static_cast<uint64_t>(kCount - 1));
  EXPECT_EQ(r.skipped, 1u);
  EXPECT_TRUE(Contains(ReadAll(r.report_path), db + " key 3")) << ReadAll(r.report_path);
}

TEST_F(PlainSourceTest, DsconvertBuildTakesThePairingFlags) {
  const std::string db = t_ / "prefix.lmdb";
  std::vector<Put> puts;
  for (int i = 0; i < kCount; ++i) {
    puts.push_back({db, "im" + std::to_string(i), images_[i]});
    puts.push_back({db, "seg" + std::to_string(i), masks_[i]});
  }
  puts.push_back({db, "zz_info", images_[0]});
  WriteWithPython(puts);
  RunResult r = RunTool(
      {"build", db, t_ / "out.lmdb", "-q", "--image-key", "im{id}", "--mask-key", "seg{id}"},
      t_.path());
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_TRUE(Contains(r.output, "--ignore-keys zz_info")) << r.output;
  r = RunTool({"build", db, t_ / "out.lmdb", "-q", "--image-key", "im{id}", "--mask-key", "seg{id}",
               "--ignore-keys", "zz_*", "--overwrite"},
              t_.path());
  ASSERT_EQ(r.exit_code, 0) << r.output;
  std::vector<Rec> recs;
  ASSERT_TRUE(ReadRecords(t_ / "out.lmdb", &recs).ok());
  ASSERT_EQ(recs.size(), static_cast<size_t>(kCount));
  for (int i = 0; i < kCount; ++i) EXPECT_EQ(recs[i].mask, ReadAll(masks_[i])) << i;

  r = RunTool({"build", t_ / "src", t_ / "out2.lmdb", "-q", "--mask-key", "{key}_mask"}, t_.path());
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_TRUE(Contains(r.output, "apply to plain LMDB sources only")) << r.output;
}

}  // namespace
}  // namespace dspipe
