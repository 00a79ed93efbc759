// SPDX-License-Identifier: Apache-2.0
// Archive sources (.tar, .tar.gz, .tar.zst, .zip): `dsconvert build SRC.tar.gz OUT` reads the
// same layouts as a folder, streaming with libarchive. The archives are written by the test
// with libarchive's writer, from files the test synthesizes.
#include <archive.h>
#include <archive_entry.h>
#include <signal.h>
#include <sys/statfs.h>
#include <sys/wait.h>

#include <nlohmann/json.hpp>
#include <thread>

#include "convert/sources_archive.h"
#include "test_support.h"

namespace dspipe::testing {
namespace {

using dspipe::convert::ArchiveSource;
using dspipe::convert::MapsArchivesOn;

struct Member {
  Member(std::string p, std::string d, mode_t t = AE_IFREG, std::string l = "")
      : path(std::move(p)), data(std::move(d)), type(t), link(std::move(l)) {}
  std::string path;
  std::string data;
  mode_t type;
  std::string link;  // symlink target
};

// Writes `members` in this order. kind: "tar", "tar.gz", "tar.zst", "zip".
void WriteArchive(const std::string& path, const std::string& kind,
                  const std::vector<Member>& members) {
  archive* a = archive_write_new();
  if (kind == "zip") {
    archive_write_set_format_zip(a);
  } else {
    archive_write_set_format_pax_restricted(a);
    if (kind == "tar.gz") archive_write_add_filter_gzip(a);
    if (kind == "tar.zst") archive_write_add_filter_zstd(a);
  }
  ASSERT_EQ(archive_write_open_filename(a, path.c_str()), ARCHIVE_OK) << archive_error_string(a);
  for (const Member& m : members) {
    archive_entry* e = archive_entry_new();
    archive_entry_set_pathname(e, m.path.c_str());
    archive_entry_set_filetype(e, m.type);
    archive_entry_set_perm(e, m.type == AE_IFDIR ? 0755 : 0644);
    if (m.type == AE_IFLNK) archive_entry_set_symlink(e, m.link.c_str());
    archive_entry_set_size(e, m.type == AE_IFREG ? static_cast<la_int64_t>(m.data.size()) : 0);
    ASSERT_EQ(archive_write_header(a, e), ARCHIVE_OK) << m.path << ": " << archive_error_string(a);
    if (m.type == AE_IFREG && !m.data.empty()) {
      ASSERT_EQ(archive_write_data(a, m.data.data(), m.data.size()),
                static_cast<la_ssize_t>(m.data.size()));
    }
    archive_entry_free(e);
  }
  ASSERT_EQ(archive_write_close(a), ARCHIVE_OK);
  archive_write_free(a);
}

// The files under dir (recursively), sorted, as members named relative to dir (with prefix).
std::vector<Member> FilesOf(const std::string& dir, const std::string& prefix = "") {
  std::vector<std::string> paths;
  for (const auto& e : fs::recursive_directory_iterator(dir)) {
    if (e.is_regular_file()) paths.push_back(fs::relative(e.path(), dir).generic_string());
  }
  std::sort(paths.begin(), paths.end());  // images/... before masks/...: two readers
  std::vector<Member> out;
  for (const std::string& p : paths) out.push_back({prefix + p, ReadAll(dir + "/" + p)});
  return out;
}

nlohmann::json ManifestOf(const std::string& path) {
  std::unique_ptr<Dataset> ds;
  Status s = Dataset::Open(path, DatasetOpenOptions{}, &ds);
  EXPECT_TRUE(s.ok()) << s.ToString();
  return ds ? nlohmann::json::parse(ds->info().manifest_json) : nlohmann::json();
}

Status Build(const std::string& src, const std::string& out, BuildResult* r = nullptr,
             BuildOptions* opts = nullptr) {
  BuildOptions o = opts ? *opts : Options(src, out);
  o.source = src;
  o.output = out;
  BuildResult local;
  return BuildDataset(o, r ? r : &local);
}

// Whether archives under /tmp are mapped (MapsArchivesOn its filesystem).
bool TmpIsLocal() {
  struct statfs st {};
  return ::statfs("/tmp", &st) == 0 && MapsArchivesOn(static_cast<int64_t>(st.f_type));
}

class ArchiveKinds : public ::testing::TestWithParam<std::string> {};

TEST_P(ArchiveKinds, SameRecordsAsTheExtractedFolder) {
  TempDir tmp;
  const std::string src = tmp / "src";
  Synth(src, 40, 48, 32);
  const std::string arc = tmp / ("data." + GetParam());
  WriteArchive(arc, GetParam(), FilesOf(src));
  // The default buffer holds the archive whole (a .tar read in, a .tar.gz inflated by
  // libdeflate, a .tar.zst by libzstd, a .zip read in and inflated by the build threads).
  const std::map<std::string, std::string> held = {
      {"tar", "tar"}, {"tar.gz", "tar"}, {"tar.zst", "tar"}, {"zip", "zip"}};
  const uint64_t arc_size = fs::file_size(arc);
  for (uint64_t buffer : {BuildOptions{}.archive_buffer_bytes, arc_size - 1}) {
    std::shared_ptr<ArchiveSource> a;
    Status s = ArchiveSource::Open(arc, buffer, &a);
    ASSERT_TRUE(s.ok()) << s.ToString();
    EXPECT_EQ(a->held(), buffer >= arc_size ? held.at(GetParam()) : "") << buffer;
    EXPECT_EQ(a->ConcurrentReads(), std::string(a->held()) != "");
    EXPECT_GT(a->buffered_members(), 0u);  // whole, or while listing
    // A .tar or .zip held whole is the file mapped (no copy) on a local filesystem.
    EXPECT_EQ(a->mapped(),
              buffer >= arc_size && TmpIsLocal() && (GetParam() == "tar" || GetParam() == "zip"))
        << buffer;
  }
  // Members from memory (held whole; or buffered while listing: a buffer of half the archive;
  // the members past it streamed) and streamed by two readers (no buffer: images, then masks
  // stored after all images).
  for (int mode = 0; mode < 4; ++mode) {
    const bool raw = mode == 1;
    BuildOptions o = Options(src, "");
    if (raw) o.store = StoreMode::kRaw;
    if (mode == 2) o.archive_buffer_bytes = 0;
    if (mode == 3) o.archive_buffer_bytes = arc_size / 2;
    const std::string sfx = std::to_string(mode);
    Status s = Build(src, tmp / ("folder." + sfx), nullptr, &o);
    ASSERT_TRUE(s.ok()) << s.ToString();
    BuildResult r;
    s = Build(arc, tmp / ("archive." + sfx), &r, &o);
    ASSERT_TRUE(s.ok()) << s.ToString();
    EXPECT_EQ(r.records, 40u);
    ExpectSameRecords(tmp / ("folder." + sfx), tmp / ("archive." + sfx));
    const nlohmann::json mf = ManifestOf(tmp / ("folder." + sfx));
    const nlohmann::json ma = ManifestOf(tmp / ("archive." + sfx));
    EXPECT_EQ(mf["stats"], ma["stats"]);
    EXPECT_EQ(mf["num_classes"], ma["num_classes"]);
    EXPECT_EQ(ma["has_masks"], true);
    EXPECT_EQ(ma["build"]["source_kind"], "folder");
  }
}

INSTANTIATE_TEST_SUITE_P(All, ArchiveKinds, ::testing::Values("tar", "tar.gz", "tar.zst", "zip"),
                         [](const auto& param_info) {
                           std::string n = param_info.param;
                           std::replace(n.begin(), n.end(), '.', '_');
                           return n;
                         });

// Network and FUSE mounts (Drive in Colab is FUSE) are read in, never mapped: there a page that
// cannot be read is a SIGBUS, not an error. Local filesystems are mapped.
TEST(Archive, NetworkAndFuseArchivesAreReadInNotMapped) {
  for (int64_t t : std::initializer_list<int64_t>{0x6969, 0x65735546, 0xFF534D42, 0xFE534D42,
                                                  0x517B, 0x01021997, 0x00C36400}) {
    EXPECT_FALSE(MapsArchivesOn(t)) << std::hex << t;
  }
  // ext4, tmpfs, xfs, btrfs, overlayfs
  for (int64_t t :
       std::initializer_list<int64_t>{0xEF53, 0x01021994, 0x58465342, 0x9123683E, 0x794C7630}) {
    EXPECT_TRUE(MapsArchivesOn(t)) << std::hex << t;
  }
}

// A mapped .tar serves members from the file's pages. Truncated underneath by another process
// during the build, a read past the new end kills the process with SIGBUS (documented: the
// output stays incomplete, --resume continues it): never a record of other bytes.
TEST(ArchiveDeathTest, MappedTarTruncatedUnderneathKillsTheReadNotWrongBytes) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  if (!TmpIsLocal()) GTEST_SKIP() << "/tmp is a network or FUSE mount: archives are read in";
  TempDir tmp;
  const std::string src = tmp / "src";
  Synth(src, 4, 48, 32);
  const std::string arc = tmp / "data.tar";
  WriteArchive(arc, "tar", FilesOf(src));
  std::shared_ptr<ArchiveSource> a;
  Status s = ArchiveSource::Open(arc, BuildOptions{}.archive_buffer_bytes, &a);
  ASSERT_TRUE(s.ok()) << s.ToString();
  ASSERT_TRUE(a->mapped());
  const ArchiveSource::Member last = a->files().rbegin()->second;  // masks/ sort last
  std::string out;
  ASSERT_TRUE(a->Read(last.ordinal, a->Name(last.path), &out).ok());
  EXPECT_EQ(out, ReadAll(src + "/" + last.path));
  EXPECT_DEATH(
      {
        fs::resize_file(arc, 512);
        std::string bytes;
        Status r = a->Read(last.ordinal, a->Name(last.path), &bytes);
        std::fprintf(stderr, "read returned %s, %zu bytes\n", r.ToString().c_str(), bytes.size());
      },
      "");
}

TEST(Archive, SingleTopLevelFolderAndInterleavedMembers) {
  TempDir tmp;
  const std::string src = tmp / "src";
  Synth(src, 12, 32, 32);
  // `tar czf data.tar.gz data/` with directory entries, members image/mask interleaved.
  std::vector<Member> files = FilesOf(src, "data/"), members = {{"data/", "", AE_IFDIR}};
  std::vector<Member> images(files.begin(), files.begin() + 12),
      masks(files.begin() + 12, files.end());
  for (size_t i = 0; i < images.size(); ++i) {
    members.push_back(images[i]);
    members.push_back(masks[i]);
  }
  WriteArchive(tmp / "data.tar.gz", "tar.gz", members);
  ASSERT_TRUE(Build(src, tmp / "folder").ok());
  Status s = Build(tmp / "data.tar.gz", tmp / "archive");
  ASSERT_TRUE(s.ok()) << s.ToString();
  ExpectSameRecords(tmp / "folder", tmp / "archive");
}

// A CSV at the archive's root (and no images/ folder there: images/ means the folder layout,
// as for a folder SRC) lists the samples; its paths are relative to the CSV.
TEST(Archive, CsvLayout) {
  TempDir tmp;
  const std::string src = tmp / "src";
  Synth(src, 10, 32, 32);
  std::string csv = "image,mask,label\n";
  std::vector<Member> files;
  for (int i = 9; i >= 0; --i) {  // rows in reverse: the CSV's order is the records' order
    char n[32];
    std::snprintf(n, sizeof n, "%06d", i);
    const std::string img = std::string("img/") + n + ".png",
                      msk = std::string("msk/") + n + ".png";
    csv += img + "," + msk + "," + std::to_string(i % 3) + "\n";
    // Members in the CSV's order, so one reader serves them.
    files.push_back({img, ReadAll(src + "/images/" + n + ".png")});
    files.push_back({msk, ReadAll(src + "/masks/" + n + ".png")});
  }
  std::vector<Member> members = {{"list.csv", csv}};
  for (const Member& m : files) {
    WriteAll(tmp / ("csvsrc/" + m.path), m.data);
    members.push_back(m);
  }
  WriteAll(tmp / "csvsrc/list.csv", csv);
  ASSERT_TRUE(Build(tmp / "csvsrc/list.csv", tmp / "folder").ok());
  WriteArchive(tmp / "csv.zip", "zip", members);
  Status s = Build(tmp / "csv.zip", tmp / "archive");
  ASSERT_TRUE(s.ok()) << s.ToString();
  ExpectSameRecords(tmp / "folder", tmp / "archive");
  EXPECT_EQ(ManifestOf(tmp / "archive")["build"]["source_kind"], "csv");
  EXPECT_EQ(ManifestOf(tmp / "archive")["has_labels"], true);
}

TEST(Archive, CsvRowNamingAMissingOrEscapingMemberIsNamed) {
  TempDir tmp;
  const std::string src = tmp / "src";
  Synth(src, 2, 32, 32);
  const std::string csv = "s/images/000000.png,s/masks/000000.png\n../x.png,s/masks/000001.png\n";
  std::vector<Member> members = {{"list.csv", csv}};
  for (const Member& m : FilesOf(src, "s/")) members.push_back(m);
  WriteArchive(tmp / "csv.tar", "tar", members);
  Status s = Build(tmp / "csv.tar", tmp / "out");
  EXPECT_EQ(s.code(), Status::Code::kBadInput) << s.ToString();
  EXPECT_TRUE(Contains(s.message(), "csv.tar:../x.png")) << s.ToString();
  EXPECT_TRUE(Contains(s.message(), "leaves the archive")) << s.ToString();
}

TEST(Archive, ImageFolderLayout) {
  TempDir tmp;
  const std::string src = tmp / "src";
  Synth(src, 6, 32, 32);
  const std::vector<std::string> imgs = ListDir(src + "/images");
  // cat/ gets 4 images, dog/ 2, in folders and in the archive.
  std::vector<Member> members;
  for (size_t i = 0; i < imgs.size(); ++i) {
    const std::string rel =
        std::string(i < 4 ? "cat/" : "dog/") + fs::path(imgs[i]).filename().string();
    WriteAll(tmp / ("tree/" + rel), ReadAll(imgs[i]));
    members.push_back({rel, ReadAll(imgs[i])});
  }
  WriteArchive(tmp / "tree.tar.zst", "tar.zst", members);
  ASSERT_TRUE(Build(tmp / "tree", tmp / "folder").ok());
  Status s = Build(tmp / "tree.tar.zst", tmp / "archive");
  ASSERT_TRUE(s.ok()) << s.ToString();
  ExpectSameRecords(tmp / "folder", tmp / "archive");
  const nlohmann::json m = ManifestOf(tmp / "archive");
  EXPECT_EQ(m["class_names"], nlohmann::json({"cat", "dog"}));
  std::vector<Rec> recs;
  ASSERT_TRUE(ReadRecords(tmp / "archive", &recs).ok());
  ASSERT_EQ(recs.size(), 6u);
  EXPECT_EQ(recs[0].header.label, 0);
  EXPECT_EQ(recs[5].header.label, 1);
}

// A truncated archive is found by the listing pass, before any output exists; the message
// names the archive and the member where it breaks.
TEST(Archive, TruncatedArchiveNamesTheMember) {
  TempDir tmp;
  const std::string src = tmp / "src";
  Synth(src, 24, 256, 256);  // archives of a few MB: the cut lies past libarchive's first block
  for (const std::string kind : {"tar", "tar.gz", "tar.zst", "zip"}) {
    const std::string arc = tmp / ("cut." + kind);
    WriteArchive(arc, kind, FilesOf(src));
    const std::string all = ReadAll(arc);
    WriteAll(arc, all.substr(0, all.size() / 2));
    const std::string out = tmp / ("out-" + kind);
    Status s = Build(arc, out);
    ASSERT_FALSE(s.ok()) << kind;
    EXPECT_TRUE(Contains(s.message(), "cut." + kind)) << s.ToString();
    if (kind != "zip") {  // zip's directory is at the end: it names no member, just the cut
      EXPECT_TRUE(Contains(s.message(), "images/0000")) << s.ToString();
    }
    EXPECT_TRUE(Contains(s.message(), "truncated") || Contains(s.message(), "not a readable"))
        << s.ToString();
    EXPECT_FALSE(fs::exists(out)) << kind;
  }
}

TEST(Archive, CorruptMemberImageIsNamedByItsPathInTheArchive) {
  TempDir tmp;
  const std::string src = tmp / "src";
  Synth(src, 10, 32, 32);
  std::vector<Member> members = FilesOf(src);
  members[7].data = members[7].data.substr(0, members[7].data.size() / 2);  // images/000007.png
  ASSERT_EQ(members[7].path, "images/000007.png");
  WriteArchive(tmp / "bad.tar.gz", "tar.gz", members);
  Status s = Build(tmp / "bad.tar.gz", tmp / "out");
  EXPECT_EQ(s.code(), Status::Code::kBadInput) << s.ToString();
  EXPECT_TRUE(Contains(s.message(), tmp / "bad.tar.gz:images/000007.png: ")) << s.ToString();
  // --on-error skip keeps the rest and lists the member.
  BuildOptions o = Options("", "");
  o.on_error = OnError::kSkip;
  BuildResult r;
  s = Build(tmp / "bad.tar.gz", tmp / "skip", &r, &o);
  ASSERT_TRUE(s.ok()) << s.ToString();
  EXPECT_EQ(r.records, 9u);
  EXPECT_TRUE(Contains(ReadAll(r.report_path), "bad.tar.gz:images/000007.png\t"));
}

// An archive held whole serves reads from several threads at once, in any order (the build's
// parallel stage reads members so): the same bytes as one reader in archive order. Plain
// std::threads, so that TSan sees every synchronization (the build's TBB pipeline is not
// instrumented).
TEST(Archive, HeldArchiveServesReadsFromSeveralThreads) {
  TempDir tmp;
  const std::string src = tmp / "src";
  Synth(src, 16, 32, 32);
  for (const std::string kind : {"tar", "tar.gz", "zip"}) {
    const std::string arc = tmp / ("data." + kind);
    WriteArchive(arc, kind, FilesOf(src));
    std::shared_ptr<ArchiveSource> a;
    Status s = ArchiveSource::Open(arc, BuildOptions{}.archive_buffer_bytes, &a);
    ASSERT_TRUE(s.ok()) << s.ToString();
    ASSERT_TRUE(a->ConcurrentReads()) << kind;
    std::vector<const ArchiveSource::Member*> members;
    for (const auto& [path, m] : a->files()) members.push_back(&m);
    ASSERT_EQ(members.size(), 32u);
    std::vector<std::string> got(members.size());
    std::vector<Status> status(members.size());
    std::vector<std::thread> threads;
    for (size_t t = 0; t < 4; ++t) {
      threads.emplace_back([&, t] {
        // Thread t reads every 4th member, from the back: far from archive order.
        for (size_t i = members.size() - 1 - t; i < members.size(); i -= 4) {
          status[i] = a->Read(members[i]->ordinal, a->Name(members[i]->path), &got[i]);
          if (i < 4) break;
        }
      });
    }
    for (std::thread& t : threads) t.join();
    for (size_t i = 0; i < members.size(); ++i) {
      ASSERT_TRUE(status[i].ok()) << status[i].ToString();
      EXPECT_EQ(got[i], ReadAll(src + "/" + members[i]->path)) << kind << " " << i;
    }
  }
}

// A .tar.gz held whole is inflated by libdeflate, which checks the CRC-32 and size in the gzip
// trailer (libarchive's streaming reader does not): bad data is refused before any output.
// Several gzip members or bytes after the stream are read as libarchive reads them.
TEST(Archive, GzipCrcIsCheckedAndOddStreamsStillBuild) {
  TempDir tmp;
  const std::string src = tmp / "src";
  Synth(src, 6, 32, 32);
  WriteArchive(tmp / "plain.tar", "tar", FilesOf(src));
  WriteArchive(tmp / "ok.tar.gz", "tar.gz", FilesOf(src));
  const std::string gz = ReadAll(tmp / "ok.tar.gz");
  std::string bad = gz;
  bad[bad.size() - 8] ^= 0x5a;  // the trailer's CRC-32
  WriteAll(tmp / "bad.tar.gz", bad);
  Status s = Build(tmp / "bad.tar.gz", tmp / "out");
  EXPECT_EQ(s.code(), Status::Code::kCorruption) << s.ToString();
  EXPECT_TRUE(Contains(s.message(), tmp / "bad.tar.gz: corrupt gzip data")) << s.ToString();
  EXPECT_FALSE(fs::exists(tmp / "out"));

  // Two gzip members (as `cat a.gz b.gz` or bgzip write): libdeflate inflates one member per
  // call, so these stream; and an archive with bytes after its gzip stream.
  const std::string tar = ReadAll(tmp / "plain.tar");
  std::string two;
  for (const std::string& part : {tar.substr(0, tar.size() / 2), tar.substr(tar.size() / 2)}) {
    archive* a = archive_write_new();  // one gzip member of `part`
    archive_write_set_format_raw(a);
    archive_write_add_filter_gzip(a);
    ASSERT_EQ(archive_write_open_filename(a, (tmp / "part.gz").c_str()), ARCHIVE_OK);
    archive_entry* e = archive_entry_new();
    archive_entry_set_pathname(e, "part");
    archive_entry_set_filetype(e, AE_IFREG);
    archive_entry_set_size(e, static_cast<la_int64_t>(part.size()));
    ASSERT_EQ(archive_write_header(a, e), ARCHIVE_OK) << archive_error_string(a);
    ASSERT_EQ(archive_write_data(a, part.data(), part.size()),
              static_cast<la_ssize_t>(part.size()));
    archive_entry_free(e);
    ASSERT_EQ(archive_write_close(a), ARCHIVE_OK);
    archive_write_free(a);
    two += ReadAll(tmp / "part.gz");
  }
  WriteAll(tmp / "two.tar.gz", two);
  WriteAll(tmp / "trailing.tar.gz", gz + "not gzip data after the stream");
  ASSERT_TRUE(Build(src, tmp / "folder").ok());
  for (const char* name : {"ok.tar.gz", "two.tar.gz", "trailing.tar.gz"}) {
    std::shared_ptr<ArchiveSource> a;
    s = ArchiveSource::Open(tmp / name, BuildOptions{}.archive_buffer_bytes, &a);
    ASSERT_TRUE(s.ok()) << name << ": " << s.ToString();
    EXPECT_EQ(a->held(), std::string(name) == "ok.tar.gz" ? "tar" : "") << name;
    s = Build(tmp / name, tmp / (std::string("out-") + name));
    ASSERT_TRUE(s.ok()) << name << ": " << s.ToString();
    ExpectSameRecords(tmp / "folder", tmp / (std::string("out-") + name));
  }
}

// A zip held whole is inflated member by member by the build threads: a member whose deflate
// data or CRC is bad stops the build naming archive:member, like a corrupt file of a folder
// (the records before it are committed; --resume continues once the archive is fixed).
TEST(Archive, CorruptZipMemberIsNamed) {
  TempDir tmp;
  const std::string src = tmp / "src";
  Synth(src, 8, 64, 64);
  WriteArchive(tmp / "ok.zip", "zip", FilesOf(src));
  std::string zip = ReadAll(tmp / "ok.zip");
  const std::string member = "images/000003.png";
  const size_t at = zip.find(member);  // its local header's name; the data follows the extras
  ASSERT_NE(at, std::string::npos);
  for (size_t i = at + member.size() + 64; i < at + member.size() + 96; ++i) zip[i] ^= 0x5a;
  WriteAll(tmp / "bad.zip", zip);
  for (int threads : {1, 2}) {
    BuildOptions o = Options("", "");
    o.threads = threads;
    const std::string out = tmp / ("out" + std::to_string(threads));
    Status s = Build(tmp / "bad.zip", out, nullptr, &o);
    EXPECT_EQ(s.code(), Status::Code::kIOError) << s.ToString();
    EXPECT_TRUE(Contains(s.message(), tmp / ("bad.zip:" + member + ": "))) << s.ToString();
    EXPECT_TRUE(Contains(s.message(), "corrupt")) << s.ToString();
  }
}

// Members with unsafe paths and non-regular members never become samples.
TEST(Archive, UnsafePathsAndNonRegularMembersAreIgnored) {
  TempDir tmp;
  const std::string src = tmp / "src";
  Synth(src, 4, 32, 32);
  std::vector<Member> members = {{"images/", "", AE_IFDIR}, {"masks/", "", AE_IFDIR}};
  for (const Member& m : FilesOf(src)) members.push_back(m);
  const std::string png = members[2].data;
  members.push_back({"../images/escape.png", png});
  members.push_back({"/images/absolute.png", png});
  members.push_back({"images/../../up.png", png});
  members.push_back({"images/link.png", "", AE_IFLNK, "/etc/passwd"});
  members.push_back({"images/sub/", "", AE_IFDIR});
  members.push_back({"images/sub/deeper.png", png});
  members.push_back({"images/.hidden.png", png});
  for (const std::string kind : {"tar", "zip"}) {
    WriteArchive(tmp / ("odd." + kind), kind, members);
    BuildResult r;
    Status s = Build(tmp / ("odd." + kind), tmp / ("out-" + kind), &r);
    ASSERT_TRUE(s.ok()) << s.ToString();
    EXPECT_EQ(r.records, 4u);
    ExpectSameRecords(tmp / ("out-" + kind), tmp / ("out-" + kind));
  }
  ASSERT_TRUE(Build(src, tmp / "folder").ok());
  ExpectSameRecords(tmp / "folder", tmp / "out-tar");
  // The warnings name each ignored member.
  RunResult run = RunTool({"build", tmp / "odd.tar", tmp / "cli"}, tmp.path());
  ASSERT_EQ(run.exit_code, 0) << run.output;
  for (const char* w : {"odd.tar:../images/escape.png: path leaves the archive",
                        "odd.tar:/images/absolute.png: absolute path",
                        "odd.tar:images/link.png: a symbolic link"}) {
    EXPECT_TRUE(Contains(run.output, w)) << w << "\n" << run.output;
  }
}

// Masks stored in another order than their images would need a pass per jump: refused before
// any output exists, with the way out. So is --shuffle.
TEST(Archive, MemberOrderThatNeedsManyPassesIsRefused) {
  TempDir tmp;
  const std::string src = tmp / "src";
  Synth(src, 20, 32, 32);
  std::vector<Member> files = FilesOf(src);
  std::reverse(files.begin() + 20, files.end());  // masks newest first
  // Directory entries first, as tar and tarfile write them: they do not end the buffer.
  files.insert(files.begin(), {{"images/", "", AE_IFDIR}, {"masks/", "", AE_IFDIR}});
  WriteArchive(tmp / "rev.tar", "tar", files);
  BuildOptions stream = Options("", "");
  stream.archive_buffer_bytes = 0;
  Status s = Build(tmp / "rev.tar", tmp / "out", nullptr, &stream);
  EXPECT_EQ(s.code(), Status::Code::kBadInput) << s.ToString();
  EXPECT_TRUE(Contains(s.message(), "passes over the archive")) << s.ToString();
  EXPECT_TRUE(Contains(s.message(), "tar --sort=name")) << s.ToString();
  EXPECT_FALSE(fs::exists(tmp / "out"));
  WriteArchive(tmp / "ok.tar", "tar", FilesOf(src));
  BuildOptions o = stream;
  o.shuffle = true;
  o.seed = 3;
  s = Build(tmp / "ok.tar", tmp / "out", nullptr, &o);
  EXPECT_EQ(s.code(), Status::Code::kBadInput) << s.ToString();
  EXPECT_TRUE(Contains(s.message(), "BuildOptions::shuffle = true")) << s.ToString();
  EXPECT_FALSE(fs::exists(tmp / "out"));
  // Members held in memory need no pass: the same builds succeed with the buffer.
  ASSERT_TRUE(Build(src, tmp / "folder").ok());
  s = Build(tmp / "rev.tar", tmp / "rev");
  ASSERT_TRUE(s.ok()) << s.ToString();
  ExpectSameRecords(tmp / "folder", tmp / "rev");
  o.archive_buffer_bytes = BuildOptions{}.archive_buffer_bytes;
  BuildOptions fo = Options("", "");
  fo.shuffle = true;
  fo.seed = 3;
  ASSERT_TRUE(Build(src, tmp / "folder-shuffled", nullptr, &fo).ok());
  s = Build(tmp / "ok.tar", tmp / "shuffled", nullptr, &o);
  ASSERT_TRUE(s.ok()) << s.ToString();
  ExpectSameRecords(tmp / "folder-shuffled", tmp / "shuffled");
  // Resuming that build without the buffer is refused too (the check runs on resume).
  const std::string part = tmp / "part";
  const std::vector<std::string> args = {"build", tmp / "ok.tar", part,    "--shuffle", "--seed",
                                         "3",     "--commit-mb",  "0.001", "-q"};
  const pid_t pid = SpawnStopping(args, tmp / "kill.log");
  ASSERT_TRUE(WaitStopped(pid)) << ReadAll(tmp / "kill.log");
  ::kill(pid, SIGKILL);
  ASSERT_EQ(Wait(pid, tmp / "kill.log").signal, SIGKILL);
  std::vector<std::string> resume = args;
  resume.insert(resume.end(), {"--resume", "--archive-buffer-mb", "0"});
  RunResult refused = RunTool(resume, tmp.path());
  EXPECT_EQ(refused.exit_code, 1) << refused.output;
  EXPECT_TRUE(Contains(refused.output, "passes over the archive")) << refused.output;
  resume.resize(resume.size() - 2);
  RunResult done = RunTool(resume, tmp.path());
  ASSERT_EQ(done.exit_code, 0) << done.output;
  ExpectSameRecords(tmp / "folder-shuffled", part);
}

TEST(Archive, Kill9ThenResumeContinuesFromTheArchive) {
  TempDir tmp;
  const std::string src = tmp / "src";
  Synth(src, 120, 96, 96);
  const std::string arc = tmp / "data.tar.gz", out = tmp / "out.lmdb";
  WriteArchive(arc, "tar.gz", FilesOf(src));
  const std::vector<std::string> args = {
      "build",       arc,   out,         "--store", "raw",
      "--commit-mb", "0.1", "--threads", "1",       "--archive-buffer-mb",
      "0",           "-q"};
  const pid_t pid = SpawnStopping(args, tmp / "kill.log");
  if (!WaitStopped(pid)) {
    FAIL() << "dsconvert ended before its first commit: " << ReadAll(tmp / "kill.log");
  }
  ::kill(pid, SIGKILL);
  RunResult killed = Wait(pid, tmp / "kill.log");
  ASSERT_EQ(killed.signal, SIGKILL) << killed.output;
  std::vector<std::string> resume = args;
  resume.push_back("--resume");
  RunResult done = RunTool(resume, tmp.path());
  ASSERT_EQ(done.exit_code, 0) << done.output;
  EXPECT_TRUE(Contains(done.output, "(resumed at ")) << done.output;
  BuildOptions o = Options("", "");
  o.store = StoreMode::kRaw;
  ASSERT_TRUE(Build(src, tmp / "ref", nullptr, &o).ok());
  ExpectSameRecords(tmp / "ref", out);
  // Another archive at the same path (here: a shorter one) is another source.
  const std::string out2 = tmp / "out2.lmdb";
  const std::vector<std::string> args2 = {"build", arc, out2, "--commit-mb", "0.01", "-q"};
  const pid_t pid2 = SpawnStopping(args2, tmp / "kill2.log");
  ASSERT_TRUE(WaitStopped(pid2)) << ReadAll(tmp / "kill2.log");
  ::kill(pid2, SIGKILL);
  ASSERT_EQ(Wait(pid2, tmp / "kill2.log").signal, SIGKILL);
  std::vector<Member> fewer = FilesOf(src);
  fewer.pop_back();
  WriteArchive(arc, "tar.gz", fewer);
  std::vector<std::string> resume2 = args2;
  resume2.push_back("--resume");
  RunResult refused = RunTool(resume2, tmp.path());
  EXPECT_EQ(refused.exit_code, 1) << refused.output;
  EXPECT_TRUE(Contains(refused.output, "archive_bytes")) << refused.output;
}

TEST(Archive, NotAnArchiveIsAClearError) {
  TempDir tmp;
  WriteAll(tmp / "junk.tar.gz", std::string(4096, 'x'));
  Status s = Build(tmp / "junk.tar.gz", tmp / "out");
  ASSERT_FALSE(s.ok());
  EXPECT_TRUE(Contains(s.message(), "junk.tar.gz")) << s.ToString();
  EXPECT_FALSE(fs::exists(tmp / "out"));
  WriteArchive(tmp / "empty.tar", "tar", {{"readme.txt", "hello"}});
  s = Build(tmp / "empty.tar", tmp / "out");
  EXPECT_EQ(s.code(), Status::Code::kBadInput) << s.ToString();
  EXPECT_TRUE(Contains(s.message(), "not a dataset")) << s.ToString();
}

// A Decathlon task ships as a tar of NIfTI volumes (and hospitals zip DICOM series): refused
// naming the first volume member and the command that extracts it, not read as class folders
// (imagesTr/ used to be "an empty class folder"). Hidden ._x.nii.gz macOS files do not count.
TEST(Archive, VolumesInsideAnArchiveAreRefusedNamingTheExtraction) {
  TempDir tmp;
  WriteArchive(tmp / "Task09.tar", "tar",
               {{"Task09/dataset.json", "{}"},
                {"Task09/imagesTr/._a.nii.gz", "junk"},
                {"Task09/imagesTr/a.nii.gz", "not read"},
                {"Task09/labelsTr/a.nii.gz", "not read"}});
  Status s = Build(tmp / "Task09.tar", tmp / "out");
  EXPECT_EQ(s.code(), Status::Code::kBadInput) << s.ToString();
  EXPECT_TRUE(Contains(s.message(), "Task09.tar:Task09/imagesTr/a.nii.gz: a NIfTI volume inside "
                                    "an archive"))
      << s.ToString();
  EXPECT_TRUE(Contains(s.message(), "tar xf " + (tmp / "Task09.tar"))) << s.ToString();
  EXPECT_FALSE(fs::exists(tmp / "out"));
  WriteArchive(tmp / "ct.zip", "zip", {{"images/ct/IM0001.DCM", "x"}, {"images/b.png", "x"}});
  s = Build(tmp / "ct.zip", tmp / "out");
  EXPECT_EQ(s.code(), Status::Code::kBadInput) << s.ToString();
  EXPECT_TRUE(Contains(s.message(), "ct.zip:images/ct/IM0001.DCM: a DICOM file")) << s.ToString();
  EXPECT_TRUE(Contains(s.message(), "unzip ")) << s.ToString();
}

// Runs dsconvert to completion and reports the peak resident memory of its own address space
// (VmHWM, read while it is stopped right after its first record commit, SpawnStopping: the
// listing and every read up to it done by then). Not ru_maxrss: a child spawned from this process
// starts in this process's address space, and its ru_maxrss includes this test's own memory.
// A measured figure of what the build held, not a timing.
RunResult RunMeasured(const std::vector<std::string>& args, const std::string& log,
                      uint64_t* peak) {
  *peak = 0;
  const pid_t pid = SpawnStopping(args, log);
  if (WaitStopped(pid)) {
    std::ifstream status("/proc/" + std::to_string(pid) + "/status");
    for (std::string line; std::getline(status, line);) {
      if (line.rfind("VmHWM:", 0) == 0) *peak = std::stoull(line.substr(6)) * 1024;  // kB
    }
    ::kill(pid, SIGCONT);
    return Wait(pid, log);
  }
  RunResult r;  // it ended before a commit (WaitStopped reaped it)
  r.output = ReadAll(log);
  return r;
}

// Issue 19, item 8: a sparse member (GNU tar --sparse) declares a size its data does not hold.
// Its holes used to be filled with zeros in memory while listing (a 20 KB archive cost 610 MB);
// it is refused by name, and the build holds no more than a normal one.
TEST(ArchiveLimits, ASparseMemberIsRefusedByNameAndItsHolesNeverFillMemory) {
  TempDir tmp;
  const std::string src = tmp / "src";
  Synth(src, 4, 32, 24);
  const std::string holes = src + "/images/000004.png";
  {
    const std::string png = ReadAll(src + "/images/000000.png");
    // A PNG signature, 600 MB of holes, and one byte at the end (data at both ends: the
    // member's data blocks span its whole declared size).
    WriteAll(holes, png.substr(0, 8));
    fs::resize_file(holes, (uint64_t{600} << 20) - 1);
    std::ofstream(holes, std::ios::app | std::ios::binary) << 'x';
    fs::copy_file(src + "/masks/000000.png", src + "/masks/000004.png");
  }
  const std::string tar = tmp / "sparse.tar";
  const std::string cmd = "tar --sparse -cf " + tar + " -C " + src + " images masks";
  ASSERT_EQ(std::system(cmd.c_str()), 0) << cmd;
  ASSERT_LT(fs::file_size(tar), uint64_t{1} << 20) << "the archive must be small";
  uint64_t rss = 0;
  RunResult r = RunMeasured({"build", tar, tmp / "out", "--on-error", "skip", "--threads", "1"},
                            tmp / "log", &rss);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_TRUE(Contains(r.output, tar + ":images/000004.png: a sparse member")) << r.output;
  EXPECT_TRUE(Contains(r.output, "4 records")) << r.output;
  EXPECT_GT(rss, 0u);
  EXPECT_LT(rss, uint64_t{200} << 20) << "peak RSS " << (rss >> 20) << " MiB";
}

// Item 8: a member is read (inflated) up to a bound derived from DecodeLimits: an image at
// max_pixels, 8 bytes a pixel, + 1 MiB. Over it, declared or found while inflating, the member
// is refused naming it and the limit, before its bytes are all in memory (a zip or tar.gz of
// zeros inflated 4 GiB per member, whatever --max-image-pixels said).
TEST(ArchiveLimits, AMemberOverTheLimitIsRefusedNamingItAndTheLimit) {
  TempDir tmp;
  const std::string src = tmp / "src";
  Synth(src, 4, 32, 24);
  std::vector<Member> members = FilesOf(src);
  members.push_back({"images/000004.png", std::string(size_t{64} << 20, '\0')});
  members.push_back({"masks/000004.png", ReadAll(src + "/masks/000000.png")});
  std::sort(members.begin(), members.end(),
            [](const Member& a, const Member& b) { return a.path < b.path; });
  const uint64_t limit = 1000000 * 8 + (1 << 20);
  for (const std::string kind : {"zip", "tar.gz"}) {
    SCOPED_TRACE(kind);
    const std::string arc = tmp / ("zeros." + kind);
    WriteArchive(arc, kind, members);
    ASSERT_LT(fs::file_size(arc), uint64_t{4} << 20);
    uint64_t rss = 0;
    RunResult r = RunMeasured({"build", arc, tmp / ("out-" + kind), "--on-error", "skip",
                               "--max-image-pixels", "1000000", "--threads", "1"},
                              tmp / "log", &rss);
    ASSERT_EQ(r.exit_code, 0) << r.output;
    EXPECT_TRUE(Contains(r.output, arc + ":images/000004.png: member")) << r.output;
    EXPECT_TRUE(Contains(r.output, "over the limit of " + std::to_string(limit) + " bytes"))
        << r.output;
    EXPECT_TRUE(Contains(r.output, "--max-image-pixels")) << r.output;
    EXPECT_TRUE(Contains(r.output, "4 records")) << r.output;
  }
}

}  // namespace
}  // namespace dspipe::testing
