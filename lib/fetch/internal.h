// Shared by fetch.cc (one file) and dataset.cc (a dataset): waits that honour
// FetchOptions::cancelled, and the DEST.lock / DEST_DIR.lock protocol (taken, and removed by
// its holder when done). Internal.
#pragma once

#include <memory>
#include <string>

#include "dspipe/env.h"
#include "dspipe/fetch.h"

namespace dspipe {

// Sleeps `seconds`, polling o.cancelled every 0.1 s; false when it said stop.
bool SleepUnlessCancelled(const FetchOptions& o, double seconds);

// Takes the exclusive lock at lock_path: at once when free; otherwise reports kWaitingForLock
// through o.progress and waits (blocking, or polling o.cancelled when it is set: then Aborted).
Status LockForFetch(Env* env, const std::string& lock_path, const FetchOptions& o,
                    std::unique_ptr<FileLock>* lock);

// Removes the lock file the caller holds (when it is an empty regular file: dspipe's), then
// releases the lock: no DEST.lock is left beside the user's files.
void ReleaseFetchLock(Env* env, const std::string& lock_path, std::unique_ptr<FileLock>* lock);

}  // namespace dspipe
