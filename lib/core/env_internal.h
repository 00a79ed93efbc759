// SPDX-License-Identifier: Apache-2.0
// Internal to lib/core: pieces PosixEnv (env.cc) and its Directory (env_dir.cc) share.
#pragma once

#include <dirent.h>

#include <memory>
#include <string>
#include <vector>

#include "dspipe/env.h"

namespace dspipe::core {

// Opens (creating it, mode 0644, never through a symlink) and flocks the lock file `name`
// relative to `dirfd` (AT_FDCWD: name is a path). When the file at `name` was removed or
// replaced while the lock was waited for (its holder removed it), the lock is taken again on the
// file now there. Exclusive locks are registered with the atfork handler (closed in a forked
// child); shared ones are inherited. `shown` names the file in errors and in FileLock::path().
Status LockAt(int dirfd, const std::string& name, const std::string& shown, bool exclusive,
              bool wait, std::unique_ptr<FileLock>* out);

// The POSIX Directory over an open directory descriptor (taken over: closed with it).
std::unique_ptr<Directory> NewPosixDirectory(int fd, std::string path);

// Reads the names of open directory stream d (less "." and "..") into *names and closes d;
// `shown` names the directory in a readdir error.
Status ReadNamesAndClose(DIR* d, const std::string& shown, std::vector<std::string>* names);

// An open(2)-like failure of `op` on `shown`: NotFound when err is ENOENT (a missing file or
// directory, as Env::FileSize and OpenDirectory say it), else IOError; the message is
// IOErrorErrno's either way ("open PATH: No such file or directory").
Status OpenErrno(const char* op, const std::string& shown, int err);

// The 16 lowercase hex digits of 64 random bits (std::random_device).
std::string RandomHex16();

}  // namespace dspipe::core
