// SPDX-License-Identifier: Apache-2.0
// Internal to the archive source (sources_archive.h), shared by its files:
//   sources_archive.cc        listing: IsArchiveSource, Open (one pass over the headers,
//                             member paths made safe), the readers libarchive opens
//   sources_archive_whole.cc  holding an archive whole in memory (WholeBuffer, LoadWhole)
//   sources_archive_read.cc   reading members: the reader pool, Passes, Read
#pragma once

#include <cstdint>
#include <string>

struct archive;

namespace dspipe::convert::archive_internal {

bool EndsWith(const std::string& s, const std::string& suffix);

// Reads the current entry's data into out. The declared size only sizes the first allocation
// (at most 16 MiB: a corrupt header's size is never trusted with memory); the data decides.
// Returns false on a read error or when more than `limit` bytes arrive (*over set).
bool ReadEntry(::archive* a, uint64_t declared, uint64_t limit, std::string* out, bool* over);

}  // namespace dspipe::convert::archive_internal
