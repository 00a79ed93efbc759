// SPDX-License-Identifier: Apache-2.0
// Env::Default() against a real temp directory, and every fault FaultEnv injects, seen through
// the Env helpers (an atomic write never leaves a torn file under any of them).
#include "dspipe/env.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>

#include "core/fault_env.h"

namespace dspipe {
namespace {

namespace fs = std::filesystem;

bool Contains(const std::string& s, const std::string& part) {
  return s.find(part) != std::string::npos;
}

class EnvTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/dspipe-env-XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
  }
  void TearDown() override {
    std::error_code ec;
    fs::remove_all(dir_, ec);
  }
  std::string P(const std::string& name) const { return dir_ + "/" + name; }
  std::string dir_;
  Env* env_ = Env::Default();
};

TEST_F(EnvTest, WriteReadSizeListRenameRemove) {
  ASSERT_TRUE(env_->CreateDirs(P("a/b")).ok());
  ASSERT_TRUE(env_->WriteFileAtomic(P("a/b/x"), "hello world").ok());
  std::string s;
  ASSERT_TRUE(env_->ReadFile(P("a/b/x"), &s).ok());
  EXPECT_EQ(s, "hello world");
  uint64_t size = 0;
  ASSERT_TRUE(env_->FileSize(P("a/b/x"), &size).ok());
  EXPECT_EQ(size, 11u);
  std::vector<std::string> names;
  ASSERT_TRUE(env_->ListDir(P("a/b"), &names).ok());
  EXPECT_EQ(names, std::vector<std::string>{"x"}) << "no temp file left behind";
  ASSERT_TRUE(env_->RenameFile(P("a/b/x"), P("a/y")).ok());
  EXPECT_FALSE(env_->FileExists(P("a/b/x")));
  EXPECT_TRUE(env_->FileExists(P("a/y")));
  ASSERT_TRUE(env_->RemoveFile(P("a/y")).ok());
  EXPECT_TRUE(env_->RemoveFile(P("a/y")).ok()) << "removing a missing file is not an error";
  Status st = env_->FileSize(P("a/y"), &size);
  EXPECT_EQ(st.code(), Status::Code::kNotFound);
  EXPECT_NE(st.message().find(P("a/y")), std::string::npos) << st.ToString();
  st = env_->ReadFile(P("nope"), &s);
  EXPECT_FALSE(st.ok());
  EXPECT_EQ(st.code(), Status::Code::kNotFound) << st.ToString();
  EXPECT_NE(st.message().find(P("nope")), std::string::npos) << st.ToString();
  EXPECT_EQ(env_->ReadFile(dir_, &s).code(), Status::Code::kBadInput) << "a directory";
}

TEST_F(EnvTest, AppendResumesAfterExistingBytesTruncateAndPread) {
  std::unique_ptr<WritableFile> w;
  ASSERT_TRUE(env_->NewWritableFile(P("f"), true, &w).ok());
  ASSERT_TRUE(w->Append("0123").ok());
  ASSERT_TRUE(w->Close().ok());
  ASSERT_TRUE(env_->NewWritableFile(P("f"), false, &w).ok());
  EXPECT_EQ(w->size(), 4u);
  ASSERT_TRUE(w->Append("4567").ok());
  ASSERT_TRUE(w->Truncate(6).ok());
  ASSERT_TRUE(w->Append("xy").ok());
  ASSERT_TRUE(w->Allocate(0, 4096).ok());
  ASSERT_TRUE(w->Sync().ok());
  ASSERT_TRUE(w->Close().ok());
  std::unique_ptr<RandomAccessFile> r;
  ASSERT_TRUE(env_->NewRandomAccessFile(P("f"), &r).ok());
  char buf[16];
  size_t got = 0;
  ASSERT_TRUE(r->Read(2, 6, buf, &got).ok());
  EXPECT_EQ(std::string(buf, got), "2345xy");
  ASSERT_TRUE(r->Read(8, 6, buf, &got).ok());
  EXPECT_EQ(got, 0u) << "fallocate keeps the size";
  uint64_t size = 0;
  ASSERT_TRUE(env_->FileSize(P("f"), &size).ok());
  EXPECT_EQ(size, 8u);
  ASSERT_TRUE(env_->NewWritableFile(P("f"), true, &w).ok());
  EXPECT_EQ(w->size(), 0u);
}

// ENOENT is NotFound whichever call meets it (it was IOError from an open and NotFound from a
// stat), with the path and errno's text in the message.
TEST_F(EnvTest, AMissingFileIsNotFoundFromEveryCall) {
  const std::string missing = P("missing");
  std::vector<Status> got;
  std::unique_ptr<RandomAccessFile> r;
  got.push_back(env_->NewRandomAccessFile(missing, &r));
  std::string bytes;
  got.push_back(env_->ReadFile(missing, &bytes));
  uint64_t size = 0;
  got.push_back(env_->FileSize(missing, &size));
  std::vector<std::string> names;
  got.push_back(env_->ListDir(missing, &names));
  std::unique_ptr<Directory> d;
  got.push_back(env_->OpenDirectory(missing, &d));
  std::unique_ptr<WritableFile> w;
  got.push_back(env_->NewWritableFile(missing + "/in-a-missing-dir", true, &w));
  std::unique_ptr<Directory> dir;
  ASSERT_TRUE(env_->OpenDirectory(dir_, &dir).ok());
  got.push_back(dir->OpenFile("missing", &r));
  got.push_back(dir->OpenDir("missing", false, 0755, &d));
  for (size_t i = 0; i < got.size(); ++i) {
    EXPECT_EQ(got[i].code(), Status::Code::kNotFound) << i << ": " << got[i].ToString();
    EXPECT_NE(got[i].message().find("missing"), std::string::npos) << got[i].ToString();
  }
}

TEST_F(EnvTest, AllocateBeyondFreeSpaceIsAnImmediateEnospc) {
  uint64_t free_bytes = 0;
  ASSERT_TRUE(env_->FreeSpace(dir_, &free_bytes).ok());
  ASSERT_GT(free_bytes, 0u);
  std::unique_ptr<WritableFile> w;
  ASSERT_TRUE(env_->NewWritableFile(P("big"), true, &w).ok());
  Status s = w->Allocate(0, free_bytes + (uint64_t{1} << 40));
  EXPECT_EQ(s.code(), Status::Code::kIOError);
  EXPECT_NE(s.message().find("No space left"), std::string::npos) << s.ToString();
  EXPECT_NE(s.message().find(P("big")), std::string::npos) << s.ToString();
}

TEST_F(EnvTest, LockExcludesOtherProcessesAndDiesWithItsHolder) {
  std::unique_ptr<FileLock> lock;
  ASSERT_TRUE(env_->LockFile(P("l"), false, &lock).ok());
  // Another process cannot take it while we hold it...
  int fds[2];
  ASSERT_EQ(::pipe(fds), 0);
  pid_t pid = ::fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    std::unique_ptr<FileLock> l2;
    Status s = Env::Default()->LockFile(P("l"), false, &l2);
    ::_exit(s.code() == Status::Code::kAborted ? 0 : 1);
  }
  int status = 0;
  ASSERT_EQ(::waitpid(pid, &status, 0), pid);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "lock not exclusive";
  // ...and a holder that is SIGKILLed leaves no stale lock.
  lock.reset();
  pid = ::fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    std::unique_ptr<FileLock> l2;
    if (!Env::Default()->LockFile(P("l"), true, &l2).ok()) ::_exit(1);
    char c = 'L';
    if (::write(fds[1], &c, 1) != 1) ::_exit(1);
    ::pause();
    ::_exit(0);
  }
  char c = 0;
  ASSERT_EQ(::read(fds[0], &c, 1), 1);  // the child holds the lock now
  Status s = env_->LockFile(P("l"), false, &lock);
  EXPECT_EQ(s.code(), Status::Code::kAborted) << s.ToString();
  EXPECT_NE(s.message().find(P("l")), std::string::npos) << s.ToString();
  ::kill(pid, SIGKILL);
  ASSERT_EQ(::waitpid(pid, &status, 0), pid);
  EXPECT_TRUE(env_->LockFile(P("l"), false, &lock).ok());
  ::close(fds[0]);
  ::close(fds[1]);
}

TEST_F(EnvTest, SharedLocksCoexistAndExcludeAnExclusiveOne) {
  // flock locks belong to open file descriptions, so two locks taken here conflict exactly as
  // two processes' would.
  std::unique_ptr<FileLock> r1, r2, w;
  ASSERT_TRUE(env_->LockFileShared(P("lease"), false, &r1).ok());
  ASSERT_TRUE(env_->LockFileShared(P("lease"), false, &r2).ok());
  Status s = env_->LockFile(P("lease"), false, &w);
  EXPECT_EQ(s.code(), Status::Code::kAborted) << s.ToString();
  r1.reset();
  s = env_->LockFile(P("lease"), false, &w);
  EXPECT_EQ(s.code(), Status::Code::kAborted) << "one shared holder is left: " << s.ToString();
  r2.reset();
  ASSERT_TRUE(env_->LockFile(P("lease"), false, &w).ok());
  s = env_->LockFileShared(P("lease"), false, &r1);
  EXPECT_EQ(s.code(), Status::Code::kAborted) << s.ToString();
  // Through a FaultEnv too (it forwards).
  core::FaultEnv fe;
  s = fe.LockFileShared(P("lease"), false, &r1);
  EXPECT_EQ(s.code(), Status::Code::kAborted) << s.ToString();
  w.reset();
  EXPECT_TRUE(fe.LockFileShared(P("lease"), false, &r1).ok());
}

TEST_F(EnvTest, RemoveTreeRemovesEverythingAndAcceptsMissing) {
  ASSERT_TRUE(env_->CreateDirs(P("t/a/b")).ok());
  ASSERT_TRUE(env_->WriteFileAtomic(P("t/a/b/f"), "x").ok());
  ASSERT_TRUE(env_->WriteFileAtomic(P("t/g"), "y").ok());
  ASSERT_TRUE(env_->RemoveTree(P("t")).ok());
  EXPECT_FALSE(env_->FileExists(P("t")));
  EXPECT_TRUE(env_->RemoveTree(P("t")).ok());
  core::FaultEnv fe;
  ASSERT_TRUE(fe.CreateDirs(P("u/v")).ok());
  EXPECT_TRUE(fe.RemoveTree(P("u")).ok());
  EXPECT_FALSE(env_->FileExists(P("u")));
}

TEST_F(EnvTest, GetFileKindFollowsSymlinksAndReportsMissing) {
  ASSERT_TRUE(env_->CreateDirs(P("d")).ok());
  ASSERT_TRUE(env_->WriteFileAtomic(P("f"), "x").ok());
  fs::create_symlink(P("d"), P("link-to-d"));
  fs::create_symlink(P("gone"), P("dangling"));
  ASSERT_EQ(::mkfifo(P("fifo").c_str(), 0600), 0);
  core::FaultEnv fe;  // forwards to the default Env
  for (Env* e : {env_, static_cast<Env*>(&fe)}) {
    FileKind k = FileKind::kOther;
    ASSERT_TRUE(e->GetFileKind(P("d"), &k).ok());
    EXPECT_EQ(k, FileKind::kDirectory);
    ASSERT_TRUE(e->GetFileKind(P("link-to-d"), &k).ok());
    EXPECT_EQ(k, FileKind::kDirectory);
    ASSERT_TRUE(e->GetFileKind(P("f"), &k).ok());
    EXPECT_EQ(k, FileKind::kRegular);
    ASSERT_TRUE(e->GetFileKind(P("fifo"), &k).ok());
    EXPECT_EQ(k, FileKind::kOther);
    k = FileKind::kOther;
    ASSERT_TRUE(e->GetFileKind(P("dangling"), &k).ok());
    EXPECT_EQ(k, FileKind::kMissing);
    k = FileKind::kOther;
    ASSERT_TRUE(e->GetFileKind(P("f/below-a-file"), &k).ok());
    EXPECT_EQ(k, FileKind::kMissing);
  }
}

TEST_F(EnvTest, FaultEnvEnospcAtNthWrite) {
  core::FaultEnv fenv;
  std::unique_ptr<WritableFile> w;
  ASSERT_TRUE(fenv.NewWritableFile(P("f"), true, &w).ok());
  fenv.FailWriteWithEnospc(2);
  EXPECT_TRUE(w->Append("aa").ok());
  Status s = w->Append("bb");
  EXPECT_NE(s.message().find("No space left on device"), std::string::npos) << s.ToString();
  EXPECT_NE(s.message().find(P("f")), std::string::npos) << s.ToString();
  EXPECT_TRUE(w->Append("cc").ok()) << "a fault fires once";
  EXPECT_EQ(w->size(), 4u);
  // Through the atomic write: the old file stays, no temp file is left.
  ASSERT_TRUE(fenv.WriteFileAtomic(P("g"), "old").ok());
  fenv.FailWriteWithEnospc(1);
  EXPECT_FALSE(fenv.WriteFileAtomic(P("g"), "new content").ok());
  std::string got;
  ASSERT_TRUE(fenv.ReadFile(P("g"), &got).ok());
  EXPECT_EQ(got, "old");
  std::vector<std::string> names;
  ASSERT_TRUE(fenv.ListDir(dir_, &names).ok());
  EXPECT_EQ(names.size(), 2u) << "f and g only";
}

TEST_F(EnvTest, FaultEnvShortWriteIsAnErrorAndNeverATornFile) {
  core::FaultEnv fenv;
  ASSERT_TRUE(fenv.WriteFileAtomic(P("g"), "old").ok());
  fenv.ShortWrite(1);
  Status s = fenv.WriteFileAtomic(P("g"), "0123456789");
  EXPECT_EQ(s.code(), Status::Code::kIOError) << s.ToString();
  std::string got;
  ASSERT_TRUE(fenv.ReadFile(P("g"), &got).ok());
  EXPECT_EQ(got, "old");
  // The torn bytes are really written (what a caller that ignored the error would keep).
  std::unique_ptr<WritableFile> w;
  ASSERT_TRUE(fenv.NewWritableFile(P("t"), true, &w).ok());
  fenv.ShortWrite(1);
  EXPECT_FALSE(w->Append("0123456789").ok());
  EXPECT_EQ(w->size(), 5u);
}

TEST_F(EnvTest, FaultEnvFailingFsyncKeepsTheOldFile) {
  core::FaultEnv fenv;
  ASSERT_TRUE(fenv.WriteFileAtomic(P("g"), "old").ok());
  fenv.FailSync(true);
  Status s = fenv.WriteFileAtomic(P("g"), "new");
  EXPECT_NE(s.message().find("fsync"), std::string::npos) << s.ToString();
  std::string got;
  ASSERT_TRUE(fenv.ReadFile(P("g"), &got).ok());
  EXPECT_EQ(got, "old");
  EXPECT_FALSE(fenv.SyncDir(dir_).ok());
  fenv.FailSync(false);
  EXPECT_TRUE(fenv.WriteFileAtomic(P("g"), "new").ok());
}

TEST_F(EnvTest, FaultEnvEioOnReadThenRecovers) {
  core::FaultEnv fenv;
  ASSERT_TRUE(fenv.WriteFileAtomic(P("g"), "abcdef").ok());
  std::unique_ptr<RandomAccessFile> r;
  ASSERT_TRUE(fenv.NewRandomAccessFile(P("g"), &r).ok());
  fenv.FailReadWithEio(2);
  char buf[8];
  size_t got = 0;
  ASSERT_TRUE(r->Read(0, 3, buf, &got).ok());
  Status s = r->Read(3, 3, buf, &got);
  EXPECT_NE(s.message().find("Input/output error"), std::string::npos) << s.ToString();
  EXPECT_NE(s.message().find(P("g")), std::string::npos) << s.ToString();
  ASSERT_TRUE(r->Read(3, 3, buf, &got).ok()) << "the retry at the same offset succeeds";
  EXPECT_EQ(std::string(buf, got), "def");
  uint64_t free_bytes = 0;
  fenv.SetFreeSpace(100);
  ASSERT_TRUE(fenv.FreeSpace(dir_, &free_bytes).ok());
  EXPECT_EQ(free_bytes, 100u);
  std::unique_ptr<WritableFile> w;
  ASSERT_TRUE(fenv.NewWritableFile(P("h"), true, &w).ok());
  EXPECT_FALSE(w->Allocate(0, 101).ok());
  EXPECT_TRUE(w->Allocate(0, 100).ok());
}

// ---- the safe file primitives (issue 19): Directory, links never followed, exclusive
// creation, locks released in a forked child, lock files a holder may remove.

TEST_F(EnvTest, ADirectoryTakesOneNameAndNeverFollowsALink) {
  ASSERT_TRUE(env_->CreateDirs(P("d/sub")).ok());
  ASSERT_TRUE(env_->CreateDirs(P("outside")).ok());
  ASSERT_TRUE(env_->WriteFileAtomic(P("outside/precious"), "precious").ok());
  fs::create_symlink(P("outside/precious"), P("d/link"));
  fs::create_symlink(P("outside"), P("d/dirlink"));
  fs::create_symlink(P("outside"), P("d/sub/inner-link"));
  for (Env* e : {env_, static_cast<Env*>(nullptr)}) {
    core::FaultEnv fe;
    Env* env = e ? e : &fe;
    std::unique_ptr<Directory> d;
    ASSERT_TRUE(env->OpenDirectory(P("d"), &d).ok());
    std::unique_ptr<WritableFile> w;
    for (const char* bad : {"", ".", "..", "a/b", "../outside/precious"}) {
      EXPECT_EQ(d->NewFile(bad, &w).code(), Status::Code::kInvalidArgument) << bad;
    }
    Status s = d->NewFile("link", &w);
    EXPECT_EQ(s.code(), Status::Code::kAlreadyExists) << s.ToString();
    std::unique_ptr<RandomAccessFile> r;
    s = d->OpenFile("link", &r);
    EXPECT_TRUE(Contains(s.message(), "a symbolic link (not followed)")) << s.ToString();
    std::unique_ptr<Directory> sub;
    s = d->OpenDir("dirlink", false, 0, &sub);
    EXPECT_TRUE(Contains(s.message(), "a symbolic link (not followed)")) << s.ToString();
    std::unique_ptr<FileLock> lock;
    s = d->Lock("link", true, false, &lock);
    EXPECT_TRUE(Contains(s.message(), "a symbolic link (not followed)")) << s.ToString();
    FileInfo info;
    ASSERT_TRUE(d->Stat("link", &info).ok());
    EXPECT_EQ(info.kind, FileKind::kSymlink);
    ASSERT_TRUE(d->Stat("missing", &info).ok());
    EXPECT_EQ(info.kind, FileKind::kMissing);
    // A new file, written atomically: no temp name left; the temp names are recognised.
    ASSERT_TRUE(d->WriteFileAtomic("new", "bytes").ok());
    std::string text;
    ASSERT_TRUE(d->ReadFile("new", &text).ok());
    EXPECT_EQ(text, "bytes");
    std::vector<std::string> names;
    ASSERT_TRUE(d->List(&names).ok());
    EXPECT_EQ(names.size(), 4u) << "sub, link, dirlink, new";
    ASSERT_TRUE(d->Remove("new").ok());
  }
  std::string target;
  EXPECT_TRUE(IsAtomicTempName("E.used.tmp-0123456789abcdef", &target));
  EXPECT_EQ(target, "E.used");
  EXPECT_FALSE(IsAtomicTempName("E.used.tmp.1234"));
  EXPECT_FALSE(IsAtomicTempName("E.used.tmp-0123456789ABCDEF"));
  // RemoveTree removes links, never what they point to.
  std::unique_ptr<Directory> top;
  ASSERT_TRUE(env_->OpenDirectory(dir_, &top).ok());
  ASSERT_TRUE(top->RemoveTree("d").ok());
  EXPECT_FALSE(fs::exists(P("d")));
  std::string got;
  ASSERT_TRUE(env_->ReadFile(P("outside/precious"), &got).ok());
  EXPECT_EQ(got, "precious");
}

// A planted link at the name a write would use never redirects the write onto its target:
// NewWritableFile refuses a link, and WriteFileAtomic's temp name (once "<path>.tmp.<pid>")
// cannot be guessed (64 random bits) and is created exclusively.
TEST_F(EnvTest, APlantedLinkNeverRedirectsAWrite) {
  ASSERT_TRUE(env_->WriteFileAtomic(P("victim"), "the user's").ok());
  fs::create_symlink(P("victim"), P("out.part"));
  std::unique_ptr<WritableFile> w;
  Status s = env_->NewWritableFile(P("out.part"), true, &w);
  EXPECT_TRUE(Contains(s.message(), "a symbolic link (not followed)")) << s.ToString();
  fs::create_symlink(P("victim"), P("record.tmp." + std::to_string(::getpid())));
  ASSERT_TRUE(env_->WriteFileAtomic(P("record"), "new record").ok());
  std::string got;
  ASSERT_TRUE(env_->ReadFile(P("victim"), &got).ok());
  EXPECT_EQ(got, "the user's");
  ASSERT_TRUE(env_->ReadFile(P("record"), &got).ok());
  EXPECT_EQ(got, "new record");
}

// An exclusive lock is not held by a child made by fork(): once the parent lets it go, another
// process takes it while the child lives (a forked DataLoader worker used to keep it until it
// exited). A shared lock (a lease) is the child's too: it reads what the lease protects.
TEST_F(EnvTest, AForkedChildDoesNotHoldItsParentsExclusiveLock) {
  std::unique_ptr<FileLock> ex, lease;
  ASSERT_TRUE(env_->LockFile(P("e.lock"), false, &ex).ok());
  ASSERT_TRUE(env_->LockFileShared(P("e.lease"), false, &lease).ok());
  int to_child[2], from_child[2];
  ASSERT_EQ(::pipe(to_child), 0);
  ASSERT_EQ(::pipe(from_child), 0);
  const pid_t pid = ::fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    char c = 'r';
    if (::write(from_child[1], &c, 1) != 1) ::_exit(2);
    if (::read(to_child[0], &c, 1) != 1) ::_exit(2);
    ex.reset();  // the child's copy of the lock object: must not close a reused descriptor
    lease.reset();
    ::_exit(0);
  }
  char c = 0;
  ASSERT_EQ(::read(from_child[0], &c, 1), 1);
  ex.reset();
  lease.reset();
  // Another process (a third one: flock conflicts between processes as between descriptions).
  const pid_t other = ::fork();
  ASSERT_GE(other, 0);
  if (other == 0) {
    std::unique_ptr<FileLock> l;
    const bool got_ex = Env::Default()->LockFile(P("e.lock"), false, &l).ok();
    l.reset();
    const bool lease_held =
        Env::Default()->LockFile(P("e.lease"), false, &l).code() == Status::Code::kAborted;
    ::_exit(got_ex && lease_held ? 0 : got_ex ? 3 : 4);
  }
  int st = 0;
  ASSERT_EQ(::waitpid(other, &st, 0), other);
  EXPECT_TRUE(WIFEXITED(st)) << st;
  EXPECT_NE(WEXITSTATUS(st), 4) << "the forked child kept its parent's exclusive lock";
  EXPECT_NE(WEXITSTATUS(st), 3) << "the forked child did not keep the shared lock";
  c = 'q';
  ASSERT_EQ(::write(to_child[1], &c, 1), 1);
  ASSERT_EQ(::waitpid(pid, &st, 0), pid);
  EXPECT_TRUE(WIFEXITED(st) && WEXITSTATUS(st) == 0) << st;
  for (int fd : {to_child[0], to_child[1], from_child[0], from_child[1]}) ::close(fd);
}

// True when /proc/locks shows a process waiting for an flock on the file with this inode.
bool SomeoneWaitsFor(uint64_t inode) {
  std::ifstream f("/proc/locks");
  std::string line;
  const std::string suffix = ":" + std::to_string(inode) + " ";
  while (std::getline(f, line)) {
    if (line.find("-> FLOCK") != std::string::npos && line.find(suffix) != std::string::npos) {
      return true;
    }
  }
  return false;
}

// A holder may remove its lock file (fetch does, so that no DEST.lock is left): a process that
// was waiting for the lock on the removed file takes it again on the file now at the name, so
// two processes never both hold "the" lock.
TEST_F(EnvTest, AWaiterTakesTheLockOnTheFileNowAtTheNameWhenTheHolderRemovedIt) {
  std::unique_ptr<FileLock> a;
  ASSERT_TRUE(env_->LockFile(P("x.lock"), false, &a).ok());
  struct stat st;
  ASSERT_EQ(::stat(P("x.lock").c_str(), &st), 0);
  const uint64_t inode = st.st_ino;
  std::unique_ptr<FileLock> b;
  Status bs;
  std::thread waiter([&] { bs = env_->LockFile(P("x.lock"), true, &b); });
  while (!SomeoneWaitsFor(inode)) std::this_thread::yield();  // b waits on the old file
  ASSERT_TRUE(env_->RemoveFile(P("x.lock")).ok());
  a.reset();
  waiter.join();
  ASSERT_TRUE(bs.ok()) << bs.ToString();
  std::unique_ptr<FileLock> c;
  Status s = env_->LockFile(P("x.lock"), false, &c);
  EXPECT_EQ(s.code(), Status::Code::kAborted) << "two holders of x.lock: " << s.ToString();
  b.reset();
  EXPECT_TRUE(env_->LockFile(P("x.lock"), false, &c).ok());
}

}  // namespace
}  // namespace dspipe
