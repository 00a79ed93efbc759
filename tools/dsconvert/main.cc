// SPDX-License-Identifier: Apache-2.0
// dsconvert: synth | build | assemble | verify | info | fetch | push (the commands: cli.cc).
#include "cli.h"

int main(int argc, char** argv) { return dspipe::cli::DsconvertMain(argc, argv); }
