// SPDX-License-Identifier: Apache-2.0
// Helpers for the dsconvert tests: temp directories, files, synthetic sources, reading a
// built dataset back, and running the real dsconvert binary. Header-only.
#pragma once

#include <fcntl.h>
#include <gtest/gtest.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <memory>
#include <opencv2/core.hpp>
#include <opencv2/imgcodecs.hpp>
#include <opencv2/imgproc.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "codec/image.h"
#include "codec/test_images.h"
#include "dspipe/convert.h"
#include "dspipe/dataset.h"
#include "dspipe/synth.h"

extern char** environ;

namespace dspipe::testing {

namespace fs = std::filesystem;

// A fresh directory under /tmp, removed with everything in it at scope exit.
class TempDir {
 public:
  TempDir() {
    char tmpl[] = "/tmp/dspipe-convert-XXXXXX";
    const char* p = ::mkdtemp(tmpl);
    if (p == nullptr) throw std::runtime_error("mkdtemp failed");
    path_ = p;
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path_, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const std::string& path() const { return path_; }
  std::string operator/(const std::string& name) const { return path_ + "/" + name; }

 private:
  std::string path_;
};

inline std::string ReadAll(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

inline void WriteAll(const std::string& path, const std::string& data) {
  fs::create_directories(fs::path(path).parent_path());
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  f.write(data.data(), static_cast<std::streamsize>(data.size()));
  if (!f) throw std::runtime_error("write " + path);
}

inline bool Contains(const std::string& haystack, const std::string& needle) {
  return haystack.find(needle) != std::string::npos;
}

// Synthesizes `count` samples into dir (images/*.png|jpg, masks/*.png).
inline void Synth(const std::string& dir, int count, int width, int height, int classes = 3,
                  const std::string& format = "png", uint64_t seed = 1) {
  SynthOptions o;
  o.out_dir = dir;
  o.count = count;
  o.width = width;
  o.height = height;
  o.classes = classes;
  o.format = format;
  o.seed = seed;
  o.threads = 2;
  Status s = Synthesize(o);
  if (!s.ok()) throw std::runtime_error(s.ToString());
}

// Sorted files of a directory (full paths).
inline std::vector<std::string> ListDir(const std::string& dir) {
  std::vector<std::string> out;
  for (const auto& e : fs::directory_iterator(dir)) out.push_back(e.path().string());
  std::sort(out.begin(), out.end());
  return out;
}

// One record copied out of a dataset.
struct Rec {
  RecordHeader header;
  std::string image, mask;
};

inline Status ReadRecords(const std::string& path, std::vector<Rec>* out,
                          std::unique_ptr<Dataset>* keep = nullptr) {
  std::unique_ptr<Dataset> ds;
  DatasetOpenOptions o;
  o.verify_crc = true;
  DSPIPE_RETURN_IF_ERROR(Dataset::Open(path, o, &ds));
  out->clear();
  for (uint64_t i = 0; i < ds->size(); ++i) {
    Rec r;
    DSPIPE_RETURN_IF_ERROR(ds->Read(i, [&](const RecordView& v) {
      r.header = v.header;
      r.image.assign(v.image.begin(), v.image.end());
      r.mask.assign(v.mask.begin(), v.mask.end());
      return Status::OK();
    }));
    out->push_back(std::move(r));
  }
  if (keep) *keep = std::move(ds);
  return Status::OK();
}

// Every record's CRC-32, in index order (EXPECTs that the dataset reads).
inline std::vector<uint32_t> Crcs(const std::string& path) {
  std::vector<Rec> recs;
  Status s = ReadRecords(path, &recs);
  EXPECT_TRUE(s.ok()) << s.ToString();
  std::vector<uint32_t> out;
  for (const Rec& r : recs) out.push_back(r.header.crc);
  return out;
}

// The two datasets hold the same records in the same order: header CRC and label, payloads.
inline void ExpectSameRecords(const std::string& a, const std::string& b) {
  std::vector<Rec> ra, rb;
  Status s = ReadRecords(a, &ra);
  ASSERT_TRUE(s.ok()) << s.ToString();
  s = ReadRecords(b, &rb);
  ASSERT_TRUE(s.ok()) << s.ToString();
  ASSERT_EQ(ra.size(), rb.size());
  for (size_t i = 0; i < ra.size(); ++i) {
    EXPECT_EQ(ra[i].header.crc, rb[i].header.crc) << "record " << i;
    EXPECT_EQ(ra[i].header.label, rb[i].header.label) << "record " << i;
    EXPECT_EQ(ra[i].image, rb[i].image) << "record " << i;
    EXPECT_EQ(ra[i].mask, rb[i].mask) << "record " << i;
  }
}

// The record's image as the loader decodes it (RGB or gray, uint8).
inline cv::Mat DecodedImage(const Rec& r) {
  const RecordHeader& h = r.header;
  cv::Mat m(static_cast<int>(h.height), static_cast<int>(h.width),
            h.channels == 1 ? CV_8UC1 : CV_8UC3);
  Status s =
      codec::DecodePayloadInto(h.image_codec, AsBytes(r.image), h.channels,
                               static_cast<int>(h.height), static_cast<int>(h.width), m.data);
  EXPECT_TRUE(s.ok()) << s.ToString();
  return m;
}

inline cv::Mat DecodedMask(const Rec& r) {
  const RecordHeader& h = r.header;
  cv::Mat m(static_cast<int>(h.height), static_cast<int>(h.width), CV_8UC1);
  Status s = codec::DecodePayloadInto(h.mask_codec, AsBytes(r.mask), 1, static_cast<int>(h.height),
                                      static_cast<int>(h.width), m.data, /*is_mask=*/true);
  EXPECT_TRUE(s.ok()) << s.ToString();
  return m;
}

// A source file as a user would load it with OpenCV: RGB (or gray) image, class-id mask.
inline cv::Mat ImreadRgb(const std::string& path, bool gray = false) {
  cv::Mat bgr = cv::imread(path, cv::IMREAD_COLOR);
  cv::Mat out;
  if (!bgr.empty()) cv::cvtColor(bgr, out, gray ? cv::COLOR_BGR2GRAY : cv::COLOR_BGR2RGB);
  return out;
}
inline cv::Mat ImreadMask(const std::string& path) {
  return cv::imread(path, cv::IMREAD_UNCHANGED);
}

inline BuildOptions Options(const std::string& src, const std::string& out) {
  BuildOptions o;
  o.source = src;
  o.output = out;
  o.threads = 2;
  return o;
}

// ---- the dsconvert binary

inline std::string Dsconvert() { return DSCONVERT_PATH; }

struct RunResult {
  int exit_code = -1;  // -1 when killed by a signal
  int signal = 0;
  std::string output;  // stdout + stderr
};

// Starts argv (argv[0]: the program's path), stdout+stderr to log_path, and this process's
// environment less the variables starting with one of `drop` (e.g. "LD_PRELOAD=",
// "DSPIPE_FAULT_"), plus `extra_env` ("NAME=value"). Returns the pid.
inline pid_t SpawnArgv(std::vector<std::string> argv_s, const std::string& log_path,
                       const std::vector<std::string>& extra_env = {},
                       const std::vector<std::string>& drop = {}) {
  std::vector<std::string> env_s = extra_env;
  for (char** e = environ; *e != nullptr; ++e) {
    const std::string kv = *e;
    bool dropped = false;
    for (const std::string& d : drop) dropped = dropped || kv.rfind(d, 0) == 0;
    if (!dropped) env_s.push_back(kv);
  }
  std::vector<char*> envp;
  for (auto& e : env_s) envp.push_back(e.data());
  envp.push_back(nullptr);
  std::vector<char*> argv;
  for (auto& a : argv_s) argv.push_back(a.data());
  argv.push_back(nullptr);
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_addopen(&fa, 1, log_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  posix_spawn_file_actions_adddup2(&fa, 1, 2);
  pid_t pid = -1;
  const int rc = posix_spawn(&pid, argv[0], &fa, nullptr, argv.data(), envp.data());
  posix_spawn_file_actions_destroy(&fa);
  if (rc != 0) throw std::runtime_error("posix_spawn " + argv_s[0] + " failed");
  return pid;
}

// Starts dsconvert with args (environment as SpawnArgv). Returns the pid.
inline pid_t Spawn(const std::vector<std::string>& args, const std::string& log_path,
                   const std::vector<std::string>& extra_env = {},
                   const std::vector<std::string>& drop = {}) {
  std::vector<std::string> argv_s = {Dsconvert()};
  argv_s.insert(argv_s.end(), args.begin(), args.end());
  return SpawnArgv(std::move(argv_s), log_path, extra_env, drop);
}

#ifdef DSCONVERT_HOOKED_PATH
// Starts dsconvert with args that stops itself (SIGSTOP) right after its commits-th record
// commit is durable (tests/convert/dsconvert_hooked.cc: the builder's test seam,
// lib/convert/test_hooks.h); wait for that with WaitStopped. Returns the pid.
inline pid_t SpawnStopping(const std::vector<std::string>& args, const std::string& log_path,
                           int commits = 1) {
  std::vector<std::string> argv_s = {DSCONVERT_HOOKED_PATH, "--stop-after-commits",
                                     std::to_string(commits)};
  argv_s.insert(argv_s.end(), args.begin(), args.end());
  return SpawnArgv(std::move(argv_s), log_path);
}
#endif

inline RunResult Wait(pid_t pid, const std::string& log_path) {
  RunResult r;
  int st = 0;
  if (::waitpid(pid, &st, 0) != pid) throw std::runtime_error("waitpid");
  if (WIFEXITED(st)) r.exit_code = WEXITSTATUS(st);
  if (WIFSIGNALED(st)) r.signal = WTERMSIG(st);
  r.output = ReadAll(log_path);
  return r;
}

// Waits until pid stops itself (SIGSTOP, see SpawnStopping). Returns false,
// with the process reaped, if it exited or died instead.
inline bool WaitStopped(pid_t pid) {
  int st = 0;
  if (::waitpid(pid, &st, WUNTRACED) != pid) throw std::runtime_error("waitpid");
  return WIFSTOPPED(st);
}

// Runs dsconvert to completion; log_dir holds the output file.
inline RunResult RunTool(const std::vector<std::string>& args, const std::string& log_dir) {
  const std::string log = log_dir + "/dsconvert.log";
  return Wait(Spawn(args, log), log);
}

}  // namespace dspipe::testing
