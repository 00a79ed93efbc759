// SPDX-License-Identifier: Apache-2.0
// Internal to lib/cache: the records of an entry E in the cache's own directory, and taking an
// entry away (eviction).
//
// - E.used: "<last use, ns since the epoch> <bytes>": the LRU order and the entry's size, what
//   the room check counts for E (budget.h). Written atomically under E.lock.
// - E/dspipe-entry.json: the completion record, written last into E.tmp/ (after every file is
//   copied, fsynced and read back), just before the rename that makes E/: the entry's name, its
//   source and every file with its size and crc32. An E/ is used only when its record is there,
//   names it and lists exactly the files the source's listing expects, each a regular file of
//   its size (VerifyEntry); anything else is not an entry we committed and is not read.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "cache/cache_dir.h"
#include "cache/populate.h"
#include "dspipe/env.h"
#include "dspipe/status.h"

namespace dspipe::cache {

inline constexpr const char* kRecordName = "dspipe-entry.json";

// Reads the file f->path (relative to `root`, '/'-separated, no link followed) back: its size
// must be f->size (Corruption otherwise) and f->crc32 becomes its crc32.
Status ReadBack(Directory* root, EntryFile* f);

// Writes E.tmp/dspipe-entry.json (atomically, fsynced) for entry `entry` of `listing` holding
// `files` (their crc32 set).
Status WriteCompletionRecord(Directory* tmp, const std::string& entry, const SourceListing& listing,
                             const std::vector<EntryFile>& files);

// Checks the committed entry own/<entry>/ against its completion record and `expected`
// (ExpectedFiles of the source's listing): OK, or Corruption saying what is wrong. With
// checksums, every file is also read and its crc32 compared (tests; the torture test).
Status VerifyEntry(Directory& own, const std::string& entry, const std::vector<EntryFile>& expected,
                   bool checksums);

// The same check against the record alone (whatever it lists), for the torture test: every
// committed entry in `own` is complete. *files (optional) gets what the record lists.
Status VerifyEntryAgainstRecord(Directory& own, const std::string& entry, bool checksums,
                                std::vector<EntryFile>* files = nullptr);

// An upper bound on the bytes entry `entry` of `listing` puts in the cache's directory beside
// its files: its completion record, its use record, and the reader table LMDB makes beside each
// LMDB file of it (lock.mdb, or NAME-lock) when it is opened with `max_readers` readers
// (64 bytes each). A stream's limit counts it with each shard's files.
uint64_t EntryOverhead(const SourceListing& listing, const std::string& entry,
                       unsigned max_readers);

// Writes E.used with now as the last use.
Status WriteUse(CacheDir& cd, const std::string& entry, uint64_t bytes);

struct EntryUse {
  std::string name;
  int64_t used_ns = 0;
  uint64_t bytes = 0;
};
// The committed entries (E/ and E.used both there) except `self`, least recently used first.
Status ListEntries(CacheDir& cd, const std::string& self, std::vector<EntryUse>* out);

// Takes entry `name` away unless a process holds its E.lock (it is made, checked or opened
// there) or its E.lease (it is read): renamed to E.tmp/ first (a crash mid-delete leaves an
// orphan, never a partial entry), E.used removed, then deleted with its lock and lease files.
// `why` says why in the log line. *evicted tells whether it was.
Status TryEvict(CacheDir& cd, const std::string& name, const std::string& why, bool* evicted);

// The same, for an entry whose E.lock the caller holds (it found the entry not to be trusted):
// only E.lease is taken (without waiting); *evicted false when a reader holds it. E.lock's file
// stays (the caller's lock is on it).
Status EvictHeld(CacheDir& cd, const std::string& name, const std::string& why, bool* evicted);

}  // namespace dspipe::cache
