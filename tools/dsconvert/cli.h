// SPDX-License-Identifier: Apache-2.0
// dsconvert's command line (cli.cc), apart from main() (main.cc) so that a test build of
// dsconvert (tests/convert/dsconvert_hooked.cc) runs the very same commands with the builder's
// test seam installed.
#pragma once

namespace dspipe::cli {

// Runs `dsconvert argv[1..]` and returns its exit code: 0 ok, 1 failure (message on stderr), 2
// bad usage, 3 verify found bad records. An exception is reported and exits 1.
int DsconvertMain(int argc, char** argv);

}  // namespace dspipe::cli
