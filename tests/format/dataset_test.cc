// SPDX-License-Identifier: Apache-2.0
// dspipe/dataset.h on hand-made LMDBs: dspipe records + manifest, interrupted builds, plain
// LMDBs written by other tools, CRC checking, map growth, fork and thread rules.
#include "dspipe/dataset.h"

#include <gtest/gtest.h>
#include <lmdb.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <thread>

#include "format/lmdb_env.h"
#include "format/manifest.h"

namespace dspipe {
namespace {

namespace fs = std::filesystem;

class TempDir {
 public:
  TempDir() {
    char tmpl[] = "/tmp/dspipe-format-XXXXXX";
    path_ = ::mkdtemp(tmpl);
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path_, ec);
  }
  std::string operator/(const std::string& name) const { return path_ + "/" + name; }

 private:
  std::string path_;
};

std::span<const uint8_t> B(const std::string& s) {
  return {reinterpret_cast<const uint8_t*>(s.data()), s.size()};
}
std::string Key(uint64_t i) {
  uint8_t k[kKeySize];
  EncodeKey(i, k);
  return std::string(reinterpret_cast<char*>(k), kKeySize);
}
std::string Value(uint64_t i, bool break_crc = false) {
  RecordHeader h;
  h.image_codec = Codec::kRaw;
  h.channels = 1;
  h.height = 2;
  h.width = 3;
  h.label = static_cast<int32_t>(i);
  std::string v;
  EncodeRecord(h, B(std::string(6, static_cast<char>('a' + i))), {}, &v);
  if (break_crc) v[29] = static_cast<char>(v[29] ^ 1);
  return v;
}
std::string ManifestJson(uint64_t count) {
  return nlohmann::json{{"format", "dspipe"}, {"format_version", 1}, {"complete", true},
                        {"count", count},     {"store", "raw"},      {"channels", 1},
                        {"height", 2},        {"width", 3}}
      .dump();
}

// Writes `n` records (record `bad` with a broken CRC) and, when count >= 0, a manifest.
void WriteDspipe(const std::string& path, uint64_t n, int64_t manifest_count, int64_t bad = -1) {
  std::unique_ptr<format::LmdbEnv> env;
  ASSERT_TRUE(format::LmdbEnv::OpenForWrite(path, &env).ok());
  format::LmdbEnv::Writer w(env.get());
  for (uint64_t i = 0; i < n; ++i) w.PutRecord(Key(i), Value(i, static_cast<int64_t>(i) == bad));
  if (manifest_count >= 0) w.PutMeta(kManifestKey, ManifestJson(manifest_count));
  ASSERT_TRUE(w.Commit().ok());
}

TEST(Dataset, OpensACompleteLmdbAndReadsInIndexOrder) {
  TempDir t;
  WriteDspipe(t / "d.lmdb", 5, 5);
  std::unique_ptr<Dataset> ds;
  ASSERT_TRUE(Dataset::Open(t / "d.lmdb", {}, &ds).ok());
  EXPECT_EQ(ds->info().kind, DatasetKind::kDspipe);
  EXPECT_EQ(ds->size(), 5u);
  EXPECT_EQ(ds->info().store, "raw");
  for (uint64_t i = 0; i < 5; ++i) {
    ASSERT_TRUE(ds->Read(i, [&](const RecordView& r) {
                    EXPECT_EQ(r.header.label, static_cast<int32_t>(i));
                    EXPECT_EQ(r.image[0], 'a' + i);
                    return Status::OK();
                  }).ok());
  }
  EXPECT_EQ(ds->KeyName(4), "0000000000000004");
  Status s = ds->Read(5, [](const RecordView&) { return Status::OK(); });
  EXPECT_EQ(s.code(), Status::Code::kInvalidArgument) << s.ToString();
  // The callback's status is passed through.
  s = ds->Read(1, [](const RecordView&) { return Status::Aborted("stop"); });
  EXPECT_EQ(s.code(), Status::Code::kAborted);
}

TEST(Dataset, RefusesAnInterruptedBuild) {
  TempDir t;
  WriteDspipe(t / "d.lmdb", 3, -1);
  std::unique_ptr<Dataset> ds;
  Status s = Dataset::Open(t / "d.lmdb", {}, &ds);
  EXPECT_EQ(s.code(), Status::Code::kCorruption);
  EXPECT_NE(s.message().find("interrupted"), std::string::npos) << s.ToString();
  EXPECT_NE(s.message().find("3 records"), std::string::npos) << s.ToString();
  EXPECT_NE(s.message().find("BuildOptions::resume"), std::string::npos) << s.ToString();
  // A sharded directory whose manifest.json was never written.
  fs::create_directories(t / "sharded");
  WriteDspipe(t / ("sharded/" + format::ShardDirName(0)), 2, -1);
  s = Dataset::Open(t / "sharded", {}, &ds);
  EXPECT_EQ(s.code(), Status::Code::kCorruption);
  EXPECT_NE(s.message().find("interrupted sharded build"), std::string::npos) << s.ToString();
}

TEST(Dataset, CountMismatchAndMissingPaths) {
  TempDir t;
  WriteDspipe(t / "d.lmdb", 4, 5);
  std::unique_ptr<Dataset> ds;
  Status s = Dataset::Open(t / "d.lmdb", {}, &ds);
  EXPECT_EQ(s.code(), Status::Code::kCorruption);
  EXPECT_NE(s.message().find("manifest says 5"), std::string::npos) << s.ToString();
  s = Dataset::Open(t / "nothing-here", {}, &ds);
  EXPECT_EQ(s.code(), Status::Code::kNotFound) << s.ToString();
  EXPECT_NE(s.message().find("nothing-here"), std::string::npos) << s.ToString();
  fs::create_directories(t / "empty");
  s = Dataset::Open(t / "empty", {}, &ds);
  EXPECT_EQ(s.code(), Status::Code::kNotFound) << s.ToString();
}

// Loader("my_src_folder") names the folder as a source and the build call that converts it
// (issue 40, item 13), for each kind of source a build reads.
TEST(Dataset, ASourceFolderIsNamedAsOneWithTheBuildCall) {
  TempDir t;
  auto touch = [](const fs::path& p) {
    fs::create_directories(p.parent_path());
    std::ofstream(p) << "x";
  };
  touch(t / "seg/images/a.png");
  touch(t / "flat/a.JPG");
  touch(t / "folder/cat/a.jpeg");
  touch(t / "folder/dog/b.png");
  touch(t / "csv/train.csv");
  const std::pair<const char*, const char*> cases[] = {
      {"seg", "it holds an images/ folder"},
      {"flat", "it holds image files"},
      {"folder", "it holds class folders of images"},
      {"csv", "it holds a CSV file"}};
  for (const auto& [name, kind] : cases) {
    std::unique_ptr<Dataset> ds;
    const std::string path = t / name;
    Status s = Dataset::Open(path, {}, &ds);
    EXPECT_EQ(s.code(), Status::Code::kInvalidArgument) << s.ToString();
    EXPECT_NE(s.message().find("this is a source folder (" + std::string(kind) + ")"),
              std::string::npos)
        << s.ToString();
    EXPECT_NE(s.message().find("dspipe.build(\"" + path + "\", OUT)"), std::string::npos)
        << s.ToString();
    EXPECT_NE(s.message().find("`dsconvert build " + path + " OUT`"), std::string::npos)
        << s.ToString();
  }
  // A folder with other files is still "not a dataset", as before.
  touch(t / "other/readme.txt");
  std::unique_ptr<Dataset> ds;
  Status s = Dataset::Open(t / "other", {}, &ds);
  EXPECT_EQ(s.code(), Status::Code::kNotFound) << s.ToString();
  EXPECT_NE(s.message().find("neither an LMDB"), std::string::npos) << s.ToString();
}

TEST(Dataset, VerifyCrcNamesTheKey) {
  TempDir t;
  WriteDspipe(t / "d.lmdb", 5, 5, /*bad=*/3);
  std::unique_ptr<Dataset> fast, checked;
  ASSERT_TRUE(Dataset::Open(t / "d.lmdb", {}, &fast).ok());
  DatasetOpenOptions o;
  o.verify_crc = true;
  ASSERT_TRUE(Dataset::Open(t / "d.lmdb", o, &checked).ok());
  auto nop = [](const RecordView&) { return Status::OK(); };
  EXPECT_TRUE(fast->Read(3, nop).ok());  // header and sizes fine; CRC not checked
  EXPECT_TRUE(checked->Read(2, nop).ok());
  Status s = checked->Read(3, nop);
  EXPECT_EQ(s.code(), Status::Code::kCorruption);
  EXPECT_NE(s.message().find("key 0000000000000003"), std::string::npos) << s.ToString();
  EXPECT_NE(s.message().find("checksum mismatch"), std::string::npos) << s.ToString();
  EXPECT_NE(s.message().find(t / "d.lmdb"), std::string::npos) << s.ToString();
}

TEST(Dataset, PlainLmdbWithDecimalKeysIsReadInNumericOrder) {
  TempDir t;
  const std::string path = t / "plain.lmdb";
  fs::create_directories(path);
  MDB_env* env = nullptr;
  ASSERT_EQ(mdb_env_create(&env), 0);
  ASSERT_EQ(mdb_env_open(env, path.c_str(), 0, 0644), 0);
  MDB_txn* txn = nullptr;
  ASSERT_EQ(mdb_txn_begin(env, nullptr, 0, &txn), 0);
  MDB_dbi dbi;
  ASSERT_EQ(mdb_dbi_open(txn, nullptr, 0, &dbi), 0);
  auto value = [](int i) {
    if (i % 3 == 0) return std::string("\xFF\xD8\xFF") + "jpeg" + std::to_string(i);
    if (i % 3 == 1) return std::string("\x89PNG\r\n\x1a\n", 8) + "png" + std::to_string(i);
    return "other" + std::to_string(i);
  };
  for (int i = 0; i < 12; ++i) {
    std::string k = std::to_string(i), v = value(i);
    MDB_val mk{k.size(), k.data()}, mv{v.size(), v.data()};
    ASSERT_EQ(mdb_put(txn, dbi, &mk, &mv, 0), 0);
  }
  ASSERT_EQ(mdb_txn_commit(txn), 0);
  mdb_env_close(env);

  std::unique_ptr<Dataset> ds;
  ASSERT_TRUE(Dataset::Open(path, {}, &ds).ok());
  EXPECT_EQ(ds->info().kind, DatasetKind::kPlain);
  EXPECT_EQ(ds->info().store, "plain");
  ASSERT_EQ(ds->size(), 12u);
  for (int i = 0; i < 12; ++i) {                   // "2" before "10": numeric, not byte order
    EXPECT_EQ(ds->KeyName(i), std::to_string(i));  // unquoted
    ASSERT_TRUE(ds->Read(i, [&](const RecordView& r) {
                    EXPECT_EQ(std::string(r.image.begin(), r.image.end()), value(i));
                    const Codec want = i % 3 == 0   ? Codec::kJpeg
                                       : i % 3 == 1 ? Codec::kPng
                                                    : Codec::kEncoded;
                    EXPECT_EQ(r.header.image_codec, want) << i;
                    EXPECT_EQ(r.header.label, -1);
                    EXPECT_TRUE(r.mask.empty());
                    return Status::OK();
                  }).ok());
  }
}

// Issue 11 defect 6b: Finish opened shard 0 read-only while it was open for writing. LMDB
// forbids two opens of one environment in a process (closing the second drops the first's
// locks, silently): every second open is refused, naming the path, and a build that tried it
// would fail (convert_test BuildTest.Shards*), not break locking.
TEST(LmdbEnv, SecondOpenOfAnEnvironmentOpenForWritingIsRefused) {
  TempDir t;
  const std::string path = t / "w.lmdb";
  std::unique_ptr<format::LmdbEnv> writer, second;
  ASSERT_TRUE(format::LmdbEnv::OpenForWrite(path, &writer).ok());
  Status s = format::LmdbEnv::OpenReadOnly(path, 4, false, &second);
  EXPECT_EQ(s.code(), Status::Code::kInternal) << s.ToString();
  EXPECT_NE(s.message().find(path), std::string::npos) << s.ToString();
  EXPECT_NE(s.message().find("already open for writing"), std::string::npos) << s.ToString();
  EXPECT_EQ(second, nullptr);
  s = format::LmdbEnv::OpenForWrite(path, &second);
  EXPECT_EQ(s.code(), Status::Code::kInternal) << s.ToString();
  // Closed, it opens again (read-only, then for writing).
  writer.reset();
  ASSERT_TRUE(format::LmdbEnv::OpenReadOnly(path, 4, false, &second).ok());
  second.reset();
  ASSERT_TRUE(format::LmdbEnv::OpenForWrite(path, &writer).ok());
}

TEST(LmdbEnv, MapGrowsPastTheInitialSize) {
  TempDir t;
  const std::string path = t / "big.lmdb";
  std::unique_ptr<format::LmdbEnv> env;
  ASSERT_TRUE(format::LmdbEnv::OpenForWrite(path, &env).ok());
  {
    format::LmdbEnv::Writer w(env.get());
    for (uint64_t i = 0; i < 80; ++i) w.PutRecord(Key(i), std::string(1 << 20, char('A' + i % 26)));
    Status s = w.Commit();  // 80 MiB in one transaction: more than the 64 MiB initial map
    ASSERT_TRUE(s.ok()) << s.ToString();
  }
  uint64_t n = 0;
  ASSERT_TRUE(env->RecordCount(&n).ok());
  EXPECT_EQ(n, 80u);
  env.reset();
  EXPECT_GT(fs::file_size(path + "/data.mdb"), uint64_t{80} << 20);
  // Reopened (map sized from the file), it takes more.
  ASSERT_TRUE(format::LmdbEnv::OpenForWrite(path, &env).ok());
  format::LmdbEnv::Writer w(env.get());
  for (uint64_t i = 80; i < 150; ++i) w.PutRecord(Key(i), std::string(1 << 20, 'z'));
  Status s = w.Commit();
  ASSERT_TRUE(s.ok()) << s.ToString();
  ASSERT_TRUE(env->NextIndex(&n).ok());
  EXPECT_EQ(n, 150u);
}

TEST(Dataset, RefusesUseAfterFork) {
  TempDir t;
  WriteDspipe(t / "d.lmdb", 2, 2);
  std::unique_ptr<Dataset> ds;
  ASSERT_TRUE(Dataset::Open(t / "d.lmdb", {}, &ds).ok());
  const pid_t pid = ::fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    Status s = ds->Read(0, [](const RecordView&) { return Status::OK(); });
    ::_exit(s.code() == Status::Code::kUnsupported ? 0 : 1);
  }
  int st = 0;
  ASSERT_EQ(::waitpid(pid, &st, 0), pid);
  ASSERT_TRUE(WIFEXITED(st));
  EXPECT_EQ(WEXITSTATUS(st), 0) << "a forked child could read through the parent's LMDB handle";
  EXPECT_TRUE(ds->Read(0, [](const RecordView&) { return Status::OK(); }).ok());
}

TEST(Dataset, ConcurrentReadsFromManyThreads) {
  TempDir t;
  WriteDspipe(t / "d.lmdb", 64, 64);
  std::unique_ptr<Dataset> ds;
  DatasetOpenOptions o;
  o.verify_crc = true;
  ASSERT_TRUE(Dataset::Open(t / "d.lmdb", o, &ds).ok());
  std::atomic<int> bad{0};
  std::vector<std::thread> threads;
  for (int k = 0; k < 8; ++k) {
    threads.emplace_back([&, k] {
      for (int rep = 0; rep < 20; ++rep) {
        for (uint64_t i = 0; i < 64; ++i) {
          const uint64_t idx = (i * 7 + k) % 64;
          Status s = ds->Read(idx, [&](const RecordView& r) {
            return r.header.label == static_cast<int32_t>(idx) ? Status::OK()
                                                               : Status::Internal("label");
          });
          if (!s.ok()) ++bad;
        }
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(bad.load(), 0);
}

}  // namespace
}  // namespace dspipe
