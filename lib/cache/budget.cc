// SPDX-License-Identifier: Apache-2.0
// The cache's budget and the cross-process room check + reservation (see budget.h).
#include "cache/budget.h"

#include <algorithm>
#include <cinttypes>
#include <cstdio>
#include <fstream>

#include "cache/entries.h"
#include "cache/test_hooks.h"
#include "dspipe/log.h"

namespace dspipe::cache {

std::string FormatBytes(uint64_t b) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double v = static_cast<double>(b);
  int u = 0;
  while (v >= 1024 && u < 4) {
    v /= 1024;
    ++u;
  }
  char buf[32];
  std::snprintf(buf, sizeof buf, u == 0 ? "%.0f %s" : "%.1f %s", v, units[u]);
  return buf;
}

namespace {

std::string Bytes(uint64_t b) { return FormatBytes(b); }

// MemAvailable from /proc/meminfo in bytes; false when it cannot be read.
bool MemAvailable(uint64_t* bytes) {
  std::ifstream f("/proc/meminfo");
  std::string key;
  uint64_t kib = 0;
  std::string unit;
  while (f >> key >> kib) {
    std::getline(f, unit);
    if (key == "MemAvailable:") {
      *bytes = kib * 1024;
      return true;
    }
  }
  return false;
}

// Bytes of storage the tree `name` holds (a reservation without its record: counted as held).
uint64_t TreeAllocated(Directory& d, const std::string& name) {
  FileInfo info;
  if (!d.Stat(name, &info).ok()) return 0;
  if (info.kind != FileKind::kDirectory) return info.allocated;
  std::unique_ptr<Directory> sub;
  std::vector<std::string> names;
  if (!d.OpenDir(name, false, 0, &sub).ok() || !sub->List(&names).ok()) return 0;
  uint64_t total = 0;
  for (const std::string& n : names) total += TreeAllocated(*sub, n);
  return total;
}

// The bytes other live processes have reserved (their E.tmp/ under a held E.lock). A dead one's
// E.tmp/ (its E.lock free) is removed here: it holds space no process will use.
Status Reserved(CacheDir& cd, const std::string& self, uint64_t* bytes, int* copies) {
  *bytes = 0;
  *copies = 0;
  Directory& d = cd.dir();
  std::vector<std::string> names;
  DSPIPE_RETURN_IF_ERROR(d.List(&names));
  for (const std::string& n : names) {
    const ParsedName p = ParseName(n);
    if (p.kind != NameKind::kTemp || p.entry == self) continue;
    std::unique_ptr<FileLock> lock;
    if (d.Lock(p.entry + ".lock", true, false, &lock).ok()) {
      DSPIPE_RETURN_IF_ERROR(d.RemoveTree(n));
      Log(LogLevel::kInfo, "dspipe cache: removed " + cd.PathOf(n) +
                               " (a copy whose process died before it finished)");
      RunStepHook(Step::kOrphanRemoved, p.entry);
      continue;
    }
    std::unique_ptr<Directory> tmp;
    std::string text;
    uint64_t v = 0;
    if (d.OpenDir(n, false, 0, &tmp).ok() && tmp->ReadFile(kReservationName, &text).ok() &&
        std::sscanf(text.c_str(), "%" SCNu64, &v) == 1) {
      *bytes += v;
    } else {
      *bytes += TreeAllocated(d, n);
    }
    ++*copies;
  }
  return Status::OK();
}

std::string Copies(int n, uint64_t bytes) {
  return n == 0 ? ""
                : "; " + std::to_string(n) + " cop" + (n == 1 ? "y" : "ies") +
                      " in progress in other processes reserve " + Bytes(bytes);
}

}  // namespace

Status ComputeBudget(CacheDir& cd, const CacheOptions& o, Budget* b) {
  uint64_t free_space = 0;
  DSPIPE_RETURN_IF_ERROR(cd.dir().FreeSpace(&free_space));
  uint64_t raw = free_space;
  std::string text = "free on " + cd.root() + " " + Bytes(free_space);
  uint64_t avail = 0;
  if (cd.dir().OnTmpfs() && MemAvailable(&avail)) {
    const uint64_t ram_left = avail > o.reserved_ram ? avail - o.reserved_ram : 0;
    raw = std::min(raw, ram_left);
    text = "min(" + text + ", RAM left " + Bytes(ram_left) + " = MemAvailable " + Bytes(avail) +
           " - pipeline " + Bytes(o.reserved_ram) + ")";
  }
  b->bytes = raw > o.margin ? raw - o.margin : 0;
  b->text = text + " - margin " + Bytes(o.margin);
  return Status::OK();
}

Status LockBudget(CacheDir& cd, std::unique_ptr<FileLock>* lock) {
  return cd.dir().Lock(kBudgetLockName, true, true, lock);
}

namespace {

// True when no process holds entry `name`'s E.lease or E.lock (nobody reads, opens or evicts it).
bool Idle(Directory& d, const std::string& name) {
  std::unique_ptr<FileLock> lock, lease;
  return d.Lock(name + ".lock", true, false, &lock).ok() &&
         d.Lock(name + ".lease", true, false, &lease).ok();
}

}  // namespace

Status ReserveRoom(CacheDir& cd, const std::string& self, uint64_t need, const CacheOptions& o,
                   bool keep_partial, Room* room, const StreamRoom* stream) {
  *room = Room();
  Directory& d = cd.dir();
  std::unique_ptr<FileLock> root_lock;
  DSPIPE_RETURN_IF_ERROR(LockBudget(cd, &root_lock));
  int idle_retries = 0;
  for (;;) {
    Budget budget;
    DSPIPE_RETURN_IF_ERROR(ComputeBudget(cd, o, &budget));
    room->budget = budget.bytes;
    std::vector<EntryUse> entries;
    DSPIPE_RETURN_IF_ERROR(ListEntries(cd, self, &entries));
    uint64_t reserved = 0;
    int copies = 0;
    DSPIPE_RETURN_IF_ERROR(Reserved(cd, self, &reserved, &copies));
    uint64_t in_entries = 0;
    for (const EntryUse& e : entries) in_entries += e.bytes;
    const bool budget_ok = need <= budget.bytes && reserved <= budget.bytes - need;
    bool limit_ok = o.cache_limit == 0 || in_entries + reserved + need <= o.cache_limit;
    std::vector<EntryUse> idle;  // a stream's: the entries nobody uses, least recently used first
    uint64_t idle_bytes = 0, own = 0;
    if (stream != nullptr) {
      for (const EntryUse& e : entries) {
        if (!Idle(d, e.name)) continue;
        idle.push_back(e);
        idle_bytes += e.bytes + stream->entry_overhead;
      }
      // The stream keeps its own bytes within its limit itself (a pick may count a shard it
      // evicted until its files are gone, a moment above it): here they bound the idle entries.
      own = std::min(stream->held(), stream->limit);
      limit_ok = idle_bytes <= stream->limit - own;
    }
    if (budget_ok && limit_ok) {
      room->fits = true;
      break;
    }
    bool evicted = false;
    for (const EntryUse& e : stream != nullptr && budget_ok ? idle : entries) {
      DSPIPE_RETURN_IF_ERROR(TryEvict(cd, e.name, "least recently used", &evicted));
      if (evicted) {
        room->evicted.push_back(cd.PathOf(e.name));
        break;
      }
    }
    if (evicted) continue;
    // An idle entry a process took between the look and the eviction (it opens it now) is no
    // longer idle: look again, a few times.
    if (stream != nullptr && budget_ok && !idle.empty() && ++idle_retries <= 3) continue;
    const std::string held = entries.empty()
                                 ? ""
                                 : "; " + std::to_string(entries.size()) + " other entr" +
                                       (entries.size() == 1 ? "y" : "ies") + " (" +
                                       Bytes(in_entries) + ") held by live processes";
    if (stream != nullptr && budget_ok) {
      room->why = "needs " + Bytes(need) + ": the stream's limit " + Bytes(stream->limit) +
                  " has " + Bytes(own) + " of its own shards and " + Bytes(idle_bytes) +
                  " in entries no process uses that could not be evicted";
    } else if (!budget_ok) {
      room->why = "needs " + Bytes(need) + ", budget " + Bytes(budget.bytes) + " = " + budget.text +
                  held + Copies(copies, reserved);
    } else {
      room->why = "needs " + Bytes(need) + ", cache_limit " + Bytes(o.cache_limit) + " has " +
                  Bytes(in_entries) + " in other entries" + held + Copies(copies, reserved);
    }
    return Status::OK();
  }
  // The reservation, before the lock goes: from here the other processes count it.
  const std::string tmp = self + ".tmp";
  if (!keep_partial) DSPIPE_RETURN_IF_ERROR(d.RemoveTree(tmp));
  std::unique_ptr<Directory> t;
  DSPIPE_RETURN_IF_ERROR(d.OpenDir(tmp, true, 0700, &t));
  DSPIPE_RETURN_IF_ERROR(t->WriteFileAtomic(kReservationName, std::to_string(need) + "\n"));
  return d.Sync();
}

}  // namespace dspipe::cache
