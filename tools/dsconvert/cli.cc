// SPDX-License-Identifier: Apache-2.0
// dsconvert's commands (cli.h): synth | build | assemble | verify | info | fetch | push. Declares
// each subcommand's flags, parses, and runs the one given (commands.h; the commands call the
// library: dspipe/convert.h, dspipe/synth.h, dspipe/fetch.h, dspipe/push.h, dspipe/cache.h).
// Exit codes: 0 ok, 1 failure (message on stderr), 2 bad usage, 3 verify found bad records.
#include "cli.h"

#include <CLI/CLI.hpp>
#include <cstdio>
#include <exception>

#include "../option_names.h"
#include "commands.h"
#include "dspipe/limits.h"

namespace dspipe::cli::dsconvert {

int Fail(const dspipe::Status& s) {
  std::fprintf(stderr, "dsconvert: %s\n", dspipe::cli::Describe(s).c_str());
  return 1;
}

void AddDecodeLimits(CLI::App* sub, DecodeLimits* limits) {
  sub->add_option("--max-image-side", limits->max_side,
                  "refuse images wider or taller than this (pixels)")
      ->capture_default_str();
  sub->add_option("--max-image-pixels", limits->max_pixels,
                  "refuse images with more pixels than this")
      ->capture_default_str();
}

namespace {

int Run(int argc, char** argv) {
  CLI::App app{"dsconvert: turn image/mask datasets into LMDB for dspipe"};
  app.require_subcommand(1);

  SynthArgs synth_args;
  BuildArgs build_args;
  AssembleArgs assemble_args;
  VerifyArgs verify_args;
  InfoArgs info_args;
  PushArgs push_args;
  FetchArgs fetch_args;
  // The subcommands, in the order --help lists them.
  CLI::App* synth = AddSynth(app, &synth_args);
  CLI::App* build = AddBuild(app, &build_args);
  CLI::App* assemble = AddAssemble(app, &assemble_args);
  CLI::App* verify = AddVerify(app, &verify_args);
  CLI::App* info = AddInfo(app, &info_args);

  dspipe::DecodeLimits limits;
  for (CLI::App* sub : {build, verify, info}) AddDecodeLimits(sub, &limits);

  CLI::App* push = AddPush(app, &push_args);
  CLI::App* fetch = AddFetch(app, &fetch_args);

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? 0 : 2;
  }
  dspipe::SetDecodeLimits(limits);

  if (*synth) return RunSynth(&synth_args);
  if (*build) return RunBuild(&build_args);
  if (*assemble) return RunAssemble(assemble_args);
  if (*verify) return RunVerify(verify_args);
  if (*fetch) return RunFetch(&fetch_args);
  if (*push) return RunPush(&push_args);
  if (*info) return RunInfo(info_args);
  return 2;
}

}  // namespace

}  // namespace dspipe::cli::dsconvert

int dspipe::cli::DsconvertMain(int argc, char** argv) {
  // The library reports errors as Status; anything thrown is a dspipe bug, but still an exit 1
  // with a message rather than terminate().
  try {
    return dspipe::cli::dsconvert::Run(argc, argv);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "dsconvert: Internal: unexpected exception: %s\n", e.what());
    return 1;
  }
}
