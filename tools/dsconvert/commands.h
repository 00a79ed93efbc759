// SPDX-License-Identifier: Apache-2.0
// Internal to dsconvert: its subcommands, one at a time. Each has a struct holding its parsed
// flags, an Add* that declares them on the app (and returns the subcommand) and a Run* that runs
// it once parsed and returns the exit code (cli.h). cli.cc parses and dispatches.
//
//   cli_build.cc     synth, build, assemble (the commands that write a dataset)
//   cli_inspect.cc   verify, info
//   cli_transfer.cc  fetch, push
#pragma once

#include <CLI/CLI.hpp>
#include <cstdint>
#include <string>

#include "dspipe/convert.h"
#include "dspipe/fetch.h"
#include "dspipe/limits.h"
#include "dspipe/push.h"
#include "dspipe/status.h"
#include "dspipe/synth.h"

namespace dspipe::cli::dsconvert {

// "dsconvert: MESSAGE" on stderr; returns 1.
int Fail(const Status& s);

// The push's summary line; `nothing` ends the one for a dataset already there (push, and build
// to an s3:// output). cli_transfer.cc
void PrintPushed(const std::string& db, const std::string& url, const PushResult& r,
                 const char* nothing);

// Decode limits (dspipe/limits.h) as flags of `sub` (build, verify, info): images whose headers
// declare more are refused with a message naming these flags. cli.cc
void AddDecodeLimits(CLI::App* sub, DecodeLimits* limits);

// ---- synth (cli_build.cc)
struct SynthArgs {
  SynthOptions options;
  std::string size = "512x512";
};
CLI::App* AddSynth(CLI::App& app, SynthArgs* a);
int RunSynth(SynthArgs* a);

// ---- build (cli_build.cc)
struct BuildArgs {
  BuildOptions options;
  std::string store = "encoded", size, resize, spacing, slice_size, on_error = "fail",
              check = "header";
  std::string compression = "zstd";
  bool no_detect_masks = false;
  bool quiet = false;
  bool no_sync = false;
  double commit_mb = 64;
  double archive_buffer_mb = static_cast<double>(options.archive_buffer_bytes >> 20);
};
CLI::App* AddBuild(CLI::App& app, BuildArgs* a);
int RunBuild(BuildArgs* a);

// ---- assemble (cli_build.cc)
struct AssembleArgs {
  std::string dir;
};
CLI::App* AddAssemble(CLI::App& app, AssembleArgs* a);
int RunAssemble(const AssembleArgs& a);

// ---- verify (cli_inspect.cc)
struct VerifyArgs {
  std::string db;
  int threads = 0;
  bool no_sha256 = false;
};
CLI::App* AddVerify(CLI::App& app, VerifyArgs* a);
int RunVerify(const VerifyArgs& a);

// ---- info (cli_inspect.cc)
struct InfoArgs {
  std::string db;
};
CLI::App* AddInfo(CLI::App& app, InfoArgs* a);
int RunInfo(const InfoArgs& a);

// ---- push (cli_transfer.cc)
struct PushArgs {
  std::string db, url;
  PushOptions options;
  double part_mb = 16;
  bool quiet = false;
};
CLI::App* AddPush(CLI::App& app, PushArgs* a);
int RunPush(PushArgs* a);

// ---- fetch (cli_transfer.cc)
struct FetchArgs {
  std::string url, dest;
  FetchOptions options;
  bool quiet = false;
  bool dataset = false;
  int64_t size_deprecated = -1;
  CLI::Option* size_opt = nullptr;  // --size (deprecated), to tell whether it was given
};
CLI::App* AddFetch(CLI::App& app, FetchArgs* a);
int RunFetch(FetchArgs* a);

}  // namespace dspipe::cli::dsconvert
