// SPDX-License-Identifier: Apache-2.0
// Getting a mapped record's bytes into memory at the right time. Internal to dspipe::format.
//
// Why: LMDB readers map the file with MDB_NORDAHEAD (MADV_RANDOM), so a cold record's pages
// would otherwise fault in 4 KiB at a time while the decoder touches them: the I/O would be
// timed as `decode`, and each 4 KiB fault is a separate disk round trip. Measured with
// bench/cold/fault_bench.cc (docs/LOADER.md, "Cold reads"): MADV_WILLNEED (one readahead
// request for the whole range) followed by MADV_POPULATE_READ (wait for it and map the pages)
// is 10-20x faster than faulting page by page and as fast as a pread copy, while keeping the
// zero-copy view.
#pragma once

#include <cstddef>
#include <string>

namespace dspipe::format {

// Starts reading [data, data + size) of a file mapping into the page cache without waiting.
// Best effort (errors ignored): only the pages overlapping the range are requested.
void AdviseWillNeed(const void* data, size_t size);

// Makes [data, data + size) resident before returning: MADV_WILLNEED, then
// MADV_POPULATE_READ; on kernels without it (before Linux 5.14: EINVAL, remembered for the
// process) it reads one byte per page instead. Best effort: an I/O error surfaces later as the
// usual SIGBUS/EIO of the mapping, exactly as without this call.
void FaultIn(const void* data, size_t size);

// The fraction (0..1) of `path`'s pages in the page cache (mmap + mincore), or -1 when it cannot
// be told (missing file, mincore unsupported). Tests and benches use it to check that a cache drop
// (posix_fadvise DONTNEED, which filesystems may ignore) really happened.
double ResidentFraction(const std::string& path);

// Whether FaultIn uses MADV_POPULATE_READ (false after it reported EINVAL once).
bool PopulateReadSupported();

}  // namespace dspipe::format
