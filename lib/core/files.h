// SPDX-License-Identifier: Apache-2.0
// Small file helpers with errors that name the path, on Env::Default() (dspipe/env.h). Internal.
// New code that should be testable under faults takes an Env* instead.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "dspipe/env.h"
#include "dspipe/status.h"

namespace dspipe::core {

// The size of one piece of a file copy or a file's hash: a cache copy's kernel copy or
// read/write (a cancel is seen within one), fetch's local copy and resumed-prefix hash, and
// Sha256File. 4 MiB (fetch had 1 MiB, the cache 4 MiB; the larger kept, not measured).
constexpr size_t kCopyChunk = size_t{4} << 20;

// A directory we keep our own files in is used only when it is ours alone: a directory (not a
// link), owned by this process's effective user, not writable by its group or by others (so
// nobody else can plant, rename or remove names in it). OK, or Unsupported saying which of
// these fails ("owned by uid 1001, not us (uid 1000)", "mode 0777: group/world-writable"),
// from an fstat of the open directory (no race with a rename of its path).
Status CheckPrivateDir(Directory* dir);

// Opens the directory at `rel` ("a/b/c": '/'-separated components, each checked and resolved
// by Directory::OpenDir, so no symlink is followed and no ".." accepted) below `dir`; with
// create, each missing component is made (mode 0755). rel must not be empty.
Status OpenDirPath(Directory* dir, const std::string& rel, bool create,
                   std::unique_ptr<Directory>* out);

// path (or URL) without its trailing '/'s; a lone "/" (the root) stays "/".
std::string StripTrailingSlashes(std::string path);

// Reads a whole file into *out (resized). Uses a single pread loop; EINTR-safe.
Status ReadFile(const std::string& path, std::string* out);
// Writes data to path.tmp.<pid>, fsyncs it, renames it over path and fsyncs the directory: the
// file at `path` is either the old one or the complete new one, never a torn one.
Status WriteFileAtomic(const std::string& path, std::string_view data);
// Size of a regular file, or an error naming it.
Status FileSize(const std::string& path, uint64_t* size);
// fsync() a directory so renames and creations in it are durable.
Status FsyncDir(const std::string& dir);
// Tells the kernel to drop this file's cached pages (posix_fadvise DONTNEED). Returns false when
// the pages could not be dropped (e.g. dirty pages, or an unsupported filesystem).
bool DropFileCache(const std::string& path);

}  // namespace dspipe::core
