// The RAM-disk cache: budget, one copy per machine under a file lock, leases, LRU eviction
// (see dspipe/cache.h for the rules).
#include "dspipe/cache.h"

#include <linux/magic.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/vfs.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <map>
#include <set>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <sstream>
#include <thread>

#include "cache/populate.h"
#include "core/files.h"
#include "format/manifest.h"
#include "dspipe/fetch.h"
#include "dspipe/log.h"

namespace dspipe {
namespace {

namespace fs = std::filesystem;

constexpr const char* kAutoRoot = "/dev/shm/dspipe-cache";

std::string Bytes(uint64_t b) {
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

bool IsTmpfs(const std::string& path) {
  struct statfs st;
  if (::statfs(path.c_str(), &st) != 0) return false;
  return st.f_type == TMPFS_MAGIC || st.f_type == RAMFS_MAGIC;
}

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

class Lease final : public CacheLease {
 public:
  explicit Lease(std::unique_ptr<FileLock> lock) : lock_(std::move(lock)) {}

 private:
  std::unique_ptr<FileLock> lock_;
};

struct EntryUse {
  std::string name;
  int64_t used_ns = 0;
  uint64_t bytes = 0;
};

int64_t NowNs() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

// ENTRY.used holds "<last use, ns since the epoch> <bytes>": the LRU order and the entry's size.
Status WriteUse(Env* env, const std::string& entry, uint64_t bytes) {
  return env->WriteFileAtomic(entry + ".used",
                              std::to_string(NowNs()) + " " + std::to_string(bytes) + "\n");
}

// The entries under root that have a use record (complete ones), except `self`.
Status ListEntries(Env* env, const std::string& root, const std::string& self,
                   std::vector<EntryUse>* out) {
  out->clear();
  std::vector<std::string> names;
  DSPIPE_RETURN_IF_ERROR(env->ListDir(root, &names));
  for (const std::string& n : names) {
    if (!n.ends_with(".used")) continue;
    EntryUse e;
    e.name = n.substr(0, n.size() - 5);
    if (e.name == self || !env->FileExists(root + "/" + e.name)) continue;
    std::string text;
    if (!env->ReadFile(root + "/" + n, &text).ok()) continue;  // evicted meanwhile
    std::istringstream in(text);
    if (!(in >> e.used_ns >> e.bytes)) continue;
    out->push_back(std::move(e));
  }
  std::sort(out->begin(), out->end(), [](const EntryUse& a, const EntryUse& b) {
    return a.used_ns != b.used_ns ? a.used_ns < b.used_ns : a.name < b.name;
  });
  return Status::OK();
}

// Evicts root/name unless a process holds its lock (being made or opened) or its lease (being
// read). The entry is renamed to a temp dir first, so a crash mid-delete leaves an orphan that
// the next start removes, never a partial entry.
Status TryEvict(Env* env, const std::string& root, const std::string& name, bool* evicted) {
  *evicted = false;
  const std::string entry = root + "/" + name;
  std::unique_ptr<FileLock> lock, lease;
  if (!env->LockFile(entry + ".lock", false, &lock).ok()) return Status::OK();
  if (!env->LockFile(entry + ".lease", false, &lease).ok()) return Status::OK();
  if (!env->FileExists(entry)) return Status::OK();
  DSPIPE_RETURN_IF_ERROR(env->RemoveTree(entry + ".tmp"));
  DSPIPE_RETURN_IF_ERROR(env->RenameFile(entry, entry + ".tmp"));
  DSPIPE_RETURN_IF_ERROR(env->RemoveFile(entry + ".used"));
  DSPIPE_RETURN_IF_ERROR(env->SyncDir(root));
  DSPIPE_RETURN_IF_ERROR(env->RemoveTree(entry + ".tmp"));
  *evicted = true;
  Log(LogLevel::kInfo, "dspipe cache: evicted " + entry + " (least recently used)");
  return Status::OK();
}

struct Budget {
  uint64_t bytes = 0;
  std::string text;  // how it was computed, for the reason line
};

Status ComputeBudget(Env* env, const std::string& root, const CacheOptions& o, Budget* b) {
  uint64_t free_space = 0;
  DSPIPE_RETURN_IF_ERROR(env->FreeSpace(root, &free_space));
  uint64_t raw = free_space;
  std::string text = "free on " + root + " " + Bytes(free_space);
  uint64_t avail = 0;
  if (IsTmpfs(root) && MemAvailable(&avail)) {
    const uint64_t ram_left = avail > o.reserved_ram ? avail - o.reserved_ram : 0;
    raw = std::min(raw, ram_left);
    text = "min(" + text + ", RAM left " + Bytes(ram_left) + " = MemAvailable " + Bytes(avail) +
           " - pipeline " + Bytes(o.reserved_ram) + ")";
  }
  b->bytes = raw > o.margin ? raw - o.margin : 0;
  b->text = text + " - margin " + Bytes(o.margin);
  return Status::OK();
}

// Evicts LRU entries nobody holds until `need` fits both the budget and cache_limit. *why says
// why it cannot when *fits is false.
Status MakeRoom(Env* env, const std::string& root, const std::string& self, uint64_t need,
                const CacheOptions& o, CacheResult* result, bool* fits, std::string* why) {
  *fits = false;
  for (;;) {
    Budget budget;
    DSPIPE_RETURN_IF_ERROR(ComputeBudget(env, root, o, &budget));
    result->budget = budget.bytes;
    std::vector<EntryUse> entries;
    DSPIPE_RETURN_IF_ERROR(ListEntries(env, root, self, &entries));
    uint64_t in_entries = 0;
    for (const EntryUse& e : entries) in_entries += e.bytes;
    const bool budget_ok = need <= budget.bytes;
    const bool limit_ok = o.cache_limit == 0 || in_entries + need <= o.cache_limit;
    if (budget_ok && limit_ok) {
      *fits = true;
      return Status::OK();
    }
    bool evicted = false;
    for (const EntryUse& e : entries) {
      DSPIPE_RETURN_IF_ERROR(TryEvict(env, root, e.name, &evicted));
      if (evicted) {
        result->evicted.push_back(root + "/" + e.name);
        break;
      }
    }
    if (evicted) continue;
    const std::string held =
        entries.empty() ? ""
                        : "; " + std::to_string(entries.size()) + " other entr" +
                              (entries.size() == 1 ? "y" : "ies") + " (" + Bytes(in_entries) +
                              ") held by live processes";
    if (!budget_ok) {
      *why = "needs " + Bytes(need) + ", budget " + Bytes(budget.bytes) + " = " + budget.text +
             held;
    } else {
      *why = "needs " + Bytes(need) + ", cache_limit " + Bytes(o.cache_limit) + " has " +
             Bytes(in_entries) + " in other entries" + held;
    }
    return Status::OK();
  }
}

void LogDecision(const std::string& source, const CacheResult& r) {
  Log(LogLevel::kInfo, "dspipe cache: " + RedactUrl(source) + ": " + r.Describe());
}

}  // namespace

std::string CacheResult::Describe() const {
  if (!cached) return "in place: " + reason;
  if (!copied) return "cached at " + entry + " (already there)";
  char buf[64];
  std::snprintf(buf, sizeof buf, " in %.2f s)", copy_seconds);
  return "cached at " + entry + " (copied " + Bytes(bytes) + buf;
}

std::string CacheRoot(const std::string& mode, std::string* why) {
  std::string ignored;
  std::string& w = why ? *why : ignored;
  if (mode == "off" || mode.empty()) {
    w = "cache off";
    return "";
  }
  if (mode == "auto") {
    // DSPIPE_CACHE_DIR names the directory "auto" uses (a machine's own RAM disk, or a test's).
    if (const char* dir = std::getenv("DSPIPE_CACHE_DIR"); dir != nullptr && *dir != '\0') {
      return dir;
    }
    if (!IsTmpfs("/dev/shm")) {
      w = "cache auto: /dev/shm is not a tmpfs";
      return "";
    }
    return kAutoRoot;
  }
  return mode;
}

namespace {

// CleanCacheOrphans, keeping `keep` (a name under root, "" = none): the temp dir of a URL entry
// being opened again, whose partial fetch it resumes.
Status CleanOrphans(const std::string& root, Env* env, int* removed, const std::string& keep) {
  if (env == nullptr) env = Env::Default();
  if (removed) *removed = 0;
  std::vector<std::string> names;
  DSPIPE_RETURN_IF_ERROR(env->ListDir(root, &names));
  for (const std::string& n : names) {
    // A use record's temp file (Env::WriteFileAtomic writes E.used.tmp.<pid>, then renames it)
    // left by a process killed mid-write. Every use record is written under E.lock, so the
    // file is an orphan exactly when E.lock can be taken: no writer, whatever PID namespace it
    // ran in (containers sharing /dev/shm, as with `docker --ipc=host`, see other namespaces'
    // pids, so <pid> is not asked about).
    if (const size_t at = n.rfind(".used.tmp."); at != std::string::npos) {
      const std::string digits = n.substr(at + 10);
      if (at == 0 || digits.empty() ||
          digits.find_first_not_of("0123456789") != std::string::npos) {
        continue;
      }
      std::unique_ptr<FileLock> writer;
      if (!env->LockFile(root + "/" + n.substr(0, at) + ".lock", false, &writer).ok()) continue;
      DSPIPE_RETURN_IF_ERROR(env->RemoveFile(root + "/" + n));
      if (removed) ++*removed;
      Log(LogLevel::kInfo, "dspipe cache: removed " + root + "/" + n +
                               " (a use record whose process died while writing it)");
      continue;
    }
    if (!n.ends_with(".tmp") || n == keep) continue;
    const std::string entry = root + "/" + n.substr(0, n.size() - 4);
    std::unique_ptr<FileLock> lock;
    if (!env->LockFile(entry + ".lock", false, &lock).ok()) continue;  // its creator is alive
    DSPIPE_RETURN_IF_ERROR(env->RemoveTree(root + "/" + n));
    if (removed) ++*removed;
    Log(LogLevel::kInfo, "dspipe cache: removed " + root + "/" + n +
                             " (a copy whose process died before it finished)");
  }
  return Status::OK();
}

}  // namespace

Status CleanCacheOrphans(const std::string& root, Env* env, int* removed) {
  return CleanOrphans(root, env, removed, "");
}

namespace {

// Lists a local source and, with CacheOptions::masks, the masks LMDB as its side (same entry:
// identity and bytes cover both).
Status ListLocalSource(const std::string& source, const CacheOptions& options,
                       cache::SourceListing* out) {
  DSPIPE_RETURN_IF_ERROR(cache::ListSource(source, out));
  if (!options.masks.empty()) {
    cache::SourceListing side;
    Status s = cache::ListSource(options.masks, &side);
    if (!s.ok()) return s.WithContext("cache: the masks LMDB of " + source);
    out->bytes += side.bytes;
    out->sides.push_back(std::move(side));
  }
  return Status::OK();
}

// AcquireCache's body. `prelisted` (optional): the source's listing, made by the caller (a URL's
// manifest is fetched once per open). A URL that is not cached comes back OK with !cached and the
// reason, like a local source: the caller turns that into the error (UrlNotCachedError).
// `cancel` (optional): a background copy's token; waiting for another process's lock then polls
// it, and the copy stops when it is requested (CancelledError, no entry).
Status AcquireImpl(const std::string& source, const CacheOptions& options,
                   const cache::SourceListing* prelisted, CacheResult* result,
                   std::unique_ptr<CacheLease>* lease,
                   const cache::CancelToken* cancel = nullptr) {
  *result = CacheResult();
  result->path = source;
  lease->reset();
  Env* env = options.env ? options.env : Env::Default();
  const bool url = cache::IsUrl(source);
  // A URL cannot be read in place: "off" (the Loader's default) means "auto" for it.
  const std::string mode = url && (options.mode == "off" || options.mode.empty()) ? "auto"
                                                                                  : options.mode;
  // A URL not cached is the caller's error (it carries the reason): no "in place" line for it.
  const auto log_in_place = [&] {
    if (!url) LogDecision(source, *result);
  };
  const std::string root = CacheRoot(mode, &result->reason);
  if (root.empty()) {
    if (mode != "off" && !mode.empty()) log_in_place();
    return Status::OK();
  }
  cache::SourceListing listing;
  if (prelisted != nullptr) {
    listing = *prelisted;
  } else if (url) {
    DSPIPE_RETURN_IF_ERROR(cache::ListUrlSource(source, env, &listing));
  } else {
    DSPIPE_RETURN_IF_ERROR(ListLocalSource(source, options, &listing));
  }
  result->bytes = listing.bytes;
  if (options.cache_limit > 0 && listing.bytes > options.cache_limit) {
    result->reason =
        std::string(listing.sides.empty() ? "the dataset" : "the dataset with its masks LMDB") +
        " (" + Bytes(listing.bytes) + ") is larger than cache_limit (" +
        Bytes(options.cache_limit) + ")";
    log_in_place();
    return Status::OK();
  }
  Status s = env->CreateDirs(root);
  if (s.ok() && mode == "auto") {
    // "auto" picked the directory, not the user: one this user cannot write (made by another
    // user, read-only) means "in place", not a failed open. A directory named by the user fails.
    std::unique_ptr<FileLock> probe;
    s = env->LockFile(root + "/.dspipe-probe.lock", false, &probe);
    if (s.code() == Status::Code::kAborted) s = Status::OK();  // held by another process: fine
  }
  if (!s.ok()) {
    if (mode == "auto") {
      result->reason = "the cache dir " + root + " is not usable (" + s.ToString() + ")";
      log_in_place();
      return Status::OK();
    }
    return s.WithContext("cache: making the cache dir " + root);
  }
  const std::string name = cache::EntryName(listing);
  // A URL's temp dir left by a kill mid-fetch is resumed, not removed (FetchDataset keeps the
  // finished files and the FILE.part, and resumes with a Range request); another entry's is
  // removed as an orphan.
  DSPIPE_RETURN_IF_ERROR(CleanOrphans(root, env, nullptr, url ? name + ".tmp" : ""));

  const std::string entry = root + "/" + name;
  const std::string base = fs::path(listing.source).filename().string();
  std::unique_ptr<FileLock> lock;
  s = env->LockFile(entry + ".lock", false, &lock);
  if (s.code() == Status::Code::kAborted) {
    Log(LogLevel::kInfo, "dspipe cache: " + RedactUrl(source) +
                             ": waiting for the process that holds " + entry +
                             ".lock (copying it, most likely)");
    if (cancel == nullptr) {
      s = env->LockFile(entry + ".lock", true, &lock);
    } else {
      // A background copy: a blocking flock could not be cancelled, so it polls (the first
      // epoch goes on in place meanwhile; 50 ms is nothing against a copy).
      while ((s = env->LockFile(entry + ".lock", false, &lock)).code() ==
             Status::Code::kAborted) {
        if (cancel->WaitFor(std::chrono::milliseconds(50))) {
          return cache::CancelledError("waiting for " + entry + ".lock");
        }
      }
    }
  }
  DSPIPE_RETURN_IF_ERROR(s);

  if (!env->FileExists(entry)) {
    bool fits = false;
    DSPIPE_RETURN_IF_ERROR(
        MakeRoom(env, root, name, listing.bytes, options, result, &fits, &result->reason));
    if (!fits) {
      log_in_place();
      return Status::OK();
    }
    const std::string tmp = entry + ".tmp";
    const auto t0 = std::chrono::steady_clock::now();
    // Left by a dead creator (we hold the lock): removed, or, for a URL whose fetch did not
    // finish (only FetchDataset's BASE.part/ there), resumed.
    if (!url || env->FileExists(tmp + "/" + base)) s = env->RemoveTree(tmp);
    if (s.ok()) s = env->CreateDirs(tmp);
    if (s.ok()) s = cache::PopulateFromSource(listing, tmp + "/" + base, env, cancel);
    // With a masks LMDB (CacheOptions::masks, listing.sides) it lands in the same temp dir
    // (tmp/masks/...), reserved with the images: one entry, committed by the one rename below,
    // so the images never exist cached without their masks.
    if (s.ok()) s = env->SyncDir(tmp);
    // The use record goes first: an entry without one would be invisible to eviction.
    if (s.ok()) s = WriteUse(env, entry, listing.bytes);
    if (s.ok()) s = env->RenameFile(tmp, entry);
    if (s.ok()) s = env->SyncDir(root);
    if (!s.ok()) {
      // Best effort; an orphan left here is cleaned at the next start. A URL's partial fetch
      // is kept for the next open of the same URL to resume (any other open removes it).
      if (!url || env->FileExists(tmp + "/" + base)) (void)env->RemoveTree(tmp);
      (void)env->RemoveFile(entry + ".used");
      return s.WithContext("cache: copying " + RedactUrl(source) + " into " + root);
    }
    result->copied = true;
    result->copy_seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  }
  std::unique_ptr<FileLock> held;
  DSPIPE_RETURN_IF_ERROR(env->LockFileShared(entry + ".lease", true, &held));
  DSPIPE_RETURN_IF_ERROR(WriteUse(env, entry, listing.bytes));
  lock.reset();  // the lease now keeps the entry; others may open it
  result->cached = true;
  result->entry = entry;
  result->path = entry + "/" + base;
  if (!listing.sides.empty()) result->masks_path = entry + "/" + cache::SideRel(listing.sides[0]);
  result->reason.clear();
  *lease = std::make_unique<Lease>(std::move(held));
  LogDecision(source, *result);
  return Status::OK();
}

// The error for a URL the cache did not take (see cache.h): the URL, the reason, the way out.
Status UrlNotCachedError(const std::string& url, const CacheResult& r) {
  const std::string shown = RedactUrl(url);  // the query may be a secret
  return Status::Unsupported(
      "cache: the dataset at " + shown + " cannot be cached (" + r.reason +
      "), and a URL cannot be read in place: fetch it once with `dsconvert fetch " + shown +
      " DIR`" + (UrlHasQuery(url) ? " (with your URL's query for '...')" : "") +
      " and open DIR, or make room (raise cache_limit, free RAM, or point cache= / "
      "DSPIPE_CACHE_DIR at a directory with space)");
}

// Opens the copy a committed CacheResult names; the lease lives as long as the dataset.
Status OpenCopy(const std::string& source, const CacheResult& r,
                const DatasetOpenOptions& open_options, std::unique_ptr<CacheLease> lease,
                std::shared_ptr<const Dataset>* out) {
  std::unique_ptr<Dataset> copy;
  DatasetOpenOptions o = open_options;
  if (!r.masks_path.empty()) o.plain.masks = r.masks_path;  // the masks from the same entry
  Status s = Dataset::Open(r.path, o, &copy);
  if (!s.ok()) return s.WithContext("cache: opening the copy of " + RedactUrl(source));
  std::shared_ptr<CacheLease> held(std::move(lease));
  *out = std::shared_ptr<const Dataset>(copy.release(), [held](const Dataset* d) { delete d; });
  return Status::OK();
}

// Below the decode workers: the background copy takes what they leave. nice +10 (per thread on
// Linux) by default; DSPIPE_CACHE_COPY_SCHED=normal|idle (SCHED_IDLE) is for the bench
// (bench/cache/cache_bench.sh --sched) to compare. Lowering one's own priority needs no
// privilege, and a refusal changes nothing.
void LowerCopyPriority() {
  const char* v = std::getenv("DSPIPE_CACHE_COPY_SCHED");
  const std::string how = v ? v : "nice";
  if (how == "normal") return;
  if (how == "idle") {
    sched_param p{};
    p.sched_priority = 0;
    (void)::pthread_setschedparam(::pthread_self(), SCHED_IDLE, &p);
    return;
  }
  (void)::setpriority(PRIO_PROCESS, static_cast<id_t>(::gettid()), 10);
}

// CacheOptions::overlap: AcquireImpl + opening the copy, on a thread of its own.
class BackgroundCopy final : public CacheCopy {
 public:
  BackgroundCopy(std::string source, CacheOptions options, cache::SourceListing listing,
                 DatasetOpenOptions open_options)
      : source_(std::move(source)),
        options_(std::move(options)),
        listing_(std::move(listing)),
        open_options_(std::move(open_options)) {
    result_.path = source_;
    result_.bytes = listing_.bytes;
    result_.reason = "copying into the cache in the background";
  }
  void Start() { thread_ = std::thread([this] { Run(); }); }
  ~BackgroundCopy() override {
    cancel_.Request();
    if (thread_.joinable()) thread_.join();
  }

  State state() const override {
    std::lock_guard<std::mutex> lock(mu_);
    return state_;
  }
  std::shared_ptr<const Dataset> cached() const override {
    std::lock_guard<std::mutex> lock(mu_);
    return cached_;
  }
  CacheResult result() const override {
    std::lock_guard<std::mutex> lock(mu_);
    return result_;
  }
  State Wait() const override {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait(lock, [this] { return state_ != State::kCopying; });
    return state_;
  }

 private:
  void Run() {
    LowerCopyPriority();
    CacheResult r;
    std::unique_ptr<CacheLease> lease;
    std::shared_ptr<const Dataset> ds;
    Status s = AcquireImpl(source_, options_, &listing_, &r, &lease, &cancel_);
    if (s.ok() && r.cached) s = OpenCopy(source_, r, open_options_, std::move(lease), &ds);
    if (!s.ok()) {
      const bool cancelled = cache::IsCancelled(s);
      r = CacheResult();
      r.path = source_;
      r.bytes = listing_.bytes;
      r.reason = cancelled ? "the copy was cancelled" : "the copy failed: " + s.ToString();
      // The loader goes on in place; this line is all the cache says about it.
      if (!cancelled) {
        Log(LogLevel::kWarn, "dspipe cache: " + RedactUrl(source_) + ": in place: " + r.reason);
      }
    }
    {
      std::lock_guard<std::mutex> lock(mu_);
      result_ = std::move(r);
      cached_ = std::move(ds);
      state_ = cached_ ? State::kCached : State::kInPlace;
    }
    cv_.notify_all();
  }

  const std::string source_;
  const CacheOptions options_;
  const cache::SourceListing listing_;
  const DatasetOpenOptions open_options_;
  cache::CancelToken cancel_;
  mutable std::mutex mu_;
  mutable std::condition_variable cv_;
  State state_ = State::kCopying;          // guarded by mu_
  CacheResult result_;                     // guarded by mu_
  std::shared_ptr<const Dataset> cached_;  // guarded by mu_
  std::thread thread_;
};

// The in-place dataset's deleter when a background copy is attached: CacheCopyOf finds it
// (std::get_deleter), and it owns the copy, so the last reference to the dataset cancels it.
// AttachCacheCopy: `owner` holds the wrapper (deleted with the deleter), `copy` its adapter.
struct WithBackgroundCopy {
  std::shared_ptr<CacheCopy> copy;
  std::shared_ptr<const Dataset> owner;  // null: this deleter owns the dataset it is given
  void operator()(const Dataset* d) const {
    if (!owner) delete d;
  }
};


// CacheOptions::per_shard: one entry per shard directory, made on demand on one thread.
class ShardCacheImpl final : public ShardCache,
                             public std::enable_shared_from_this<ShardCacheImpl> {
 public:
  // `resolved`: shard path -> its entry's copy, read by the datasets' resolve_shard.
  struct Map {
    std::mutex mu;
    std::map<std::string, std::string> copies;
  };

  ShardCacheImpl(std::string source, CacheOptions options, DatasetOpenOptions open_options,
                 std::vector<std::string> shard_paths)
      : source_(std::move(source)),
        options_(std::move(options)),
        open_options_(std::move(open_options)),
        shard_paths_(std::move(shard_paths)),
        map_(std::make_shared<Map>()) {
    open_options_.lazy_shards = true;
    open_options_.resolve_shard = [map = map_](const std::string& path) {
      std::lock_guard<std::mutex> lock(map->mu);
      auto it = map->copies.find(path);
      return it == map->copies.end() ? path : it->second;
    };
  }
  ~ShardCacheImpl() override {
    cancel_.Request();
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    if (thread_.joinable()) thread_.join();
  }

  const DatasetOpenOptions& open_options() const { return open_options_; }

  void Want(const std::vector<uint64_t>& shards) override {
    Env* env = options_.env ? options_.env : Env::Default();
    const std::string root = CacheRoot(options_.mode);
    for (uint64_t i : shards) {
      if (i >= shard_paths_.size()) continue;
      {
        std::lock_guard<std::mutex> lock(mu_);
        if (!asked_.insert(i).second) continue;
      }
      // An entry that exists is taken now, so the shard's first read opens it.
      cache::SourceListing listing;
      if (cache::ListSource(shard_paths_[i], &listing).ok() &&
          env->FileExists(root + "/" + cache::EntryName(listing))) {
        Take(i, &listing);
        continue;
      }
      std::lock_guard<std::mutex> lock(mu_);
      queue_.push_back(i);
      if (!thread_.joinable()) thread_ = std::thread([this] { Run(); });
    }
    cv_.notify_all();
  }
  void Wait() const override {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait(lock, [this] { return queue_.empty() && !busy_; });
  }
  size_t cached_count() const override {
    std::lock_guard<std::mutex> lock(mu_);
    return leases_.size();
  }
  Status Reopen(std::shared_ptr<const Dataset>* out) const override;
  std::string Describe() const override {
    std::lock_guard<std::mutex> lock(mu_);
    return std::to_string(leases_.size()) + " of " + std::to_string(shard_paths_.size()) +
           " shards cached (" + std::to_string(asked_.size()) + " asked for)";
  }

 private:
  // Acquires shard i's entry (copying it when missing) and records it; errors are logged.
  void Take(uint64_t i, const cache::SourceListing* listing) {
    const std::string& path = shard_paths_[i];
    CacheResult r;
    std::unique_ptr<CacheLease> lease;
    Status s = AcquireImpl(path, options_, listing, &r, &lease, &cancel_);
    if (!s.ok()) {
      if (!cache::IsCancelled(s)) {
        Log(LogLevel::kWarn, "dspipe cache: " + path + ": in place: the copy failed: " +
                                 s.ToString());
      }
      return;
    }
    if (!r.cached) return;  // AcquireImpl logged why
    {
      std::lock_guard<std::mutex> lock(map_->mu);
      map_->copies[path] = r.path;
    }
    std::lock_guard<std::mutex> lock(mu_);
    leases_.push_back(std::move(lease));
  }

  void Run() {
    LowerCopyPriority();
    std::unique_lock<std::mutex> lock(mu_);
    for (;;) {
      cv_.wait(lock, [this] { return stop_ || !queue_.empty(); });
      if (stop_) return;
      const uint64_t i = queue_.front();
      queue_.pop_front();
      busy_ = true;
      lock.unlock();
      Take(i, nullptr);
      lock.lock();
      busy_ = false;
      cv_.notify_all();
    }
  }

  const std::string source_;
  const CacheOptions options_;
  DatasetOpenOptions open_options_;
  const std::vector<std::string> shard_paths_;
  const std::shared_ptr<Map> map_;
  cache::CancelToken cancel_;
  mutable std::mutex mu_;
  mutable std::condition_variable cv_;
  std::set<uint64_t> asked_;                          // guarded by mu_
  std::deque<uint64_t> queue_;                        // guarded by mu_
  bool busy_ = false, stop_ = false;                  // guarded by mu_
  std::vector<std::unique_ptr<CacheLease>> leases_;   // guarded by mu_
  std::thread thread_;
};

// A dataset reading through a ShardCache owns it (ShardCacheOf finds it).
struct WithShardCache {
  std::shared_ptr<ShardCacheImpl> cache;
  void operator()(const Dataset* d) const { delete d; }
};

Status ShardCacheImpl::Reopen(std::shared_ptr<const Dataset>* out) const {
  std::unique_ptr<Dataset> ds;
  DSPIPE_RETURN_IF_ERROR(Dataset::Open(source_, open_options_, &ds));
  *out = std::shared_ptr<const Dataset>(
      ds.release(),
      WithShardCache{std::const_pointer_cast<ShardCacheImpl>(shared_from_this())});
  return Status::OK();
}

}  // namespace

std::shared_ptr<ShardCache> ShardCacheOf(const std::shared_ptr<const Dataset>& dataset) {
  const auto* d = std::get_deleter<WithShardCache>(dataset);
  return d ? d->cache : nullptr;
}

std::shared_ptr<CacheCopy> CacheCopyOf(const std::shared_ptr<const Dataset>& dataset) {
  const auto* d = std::get_deleter<WithBackgroundCopy>(dataset);
  return d ? d->copy : nullptr;
}

std::shared_ptr<const Dataset> AttachCacheCopy(std::shared_ptr<const Dataset> wrapper,
                                               std::shared_ptr<CacheCopy> copy) {
  const Dataset* raw = wrapper.get();
  return std::shared_ptr<const Dataset>(raw,
                                        WithBackgroundCopy{std::move(copy), std::move(wrapper)});
}

Status AcquireCache(const std::string& source, const CacheOptions& options, CacheResult* result,
                    std::unique_ptr<CacheLease>* lease) {
  DSPIPE_RETURN_IF_ERROR(AcquireImpl(source, options, nullptr, result, lease));
  if (cache::IsUrl(source) && !result->cached) return UrlNotCachedError(source, *result);
  return Status::OK();
}

Status OpenDatasetCached(const std::string& path, const DatasetOpenOptions& open_options,
                         CacheOptions cache_options,
                         const std::function<uint64_t(const DatasetInfo&)>& pipeline_bytes,
                         std::shared_ptr<const Dataset>* out, CacheResult* result) {
  if (cache::IsUrl(path)) {
    // Nothing to open in place: the served manifest sizes the pipeline, the copy is opened.
    Env* env = cache_options.env ? cache_options.env : Env::Default();
    cache::SourceListing listing;
    DSPIPE_RETURN_IF_ERROR(cache::ListUrlSource(path, env, &listing));
    if (pipeline_bytes) cache_options.reserved_ram += pipeline_bytes(listing.info);
    CacheResult r;
    std::unique_ptr<CacheLease> lease;
    DSPIPE_RETURN_IF_ERROR(AcquireImpl(path, cache_options, &listing, &r, &lease));
    if (!r.cached) return UrlNotCachedError(path, r);
    DSPIPE_RETURN_IF_ERROR(OpenCopy(path, r, open_options, std::move(lease), out));
    if (result) *result = std::move(r);
    return Status::OK();
  }
  std::unique_ptr<Dataset> ds;
  DSPIPE_RETURN_IF_ERROR(Dataset::Open(path, open_options, &ds));
  CacheResult r;
  if (cache_options.mode == "off") {
    r.path = path;
    r.reason = "cache off";
    *out = std::shared_ptr<const Dataset>(std::move(ds));
    if (result) *result = std::move(r);
    return Status::OK();
  }
  if (pipeline_bytes) cache_options.reserved_ram += pipeline_bytes(ds->info());
  // A plain LMDB's masks LMDB is cached with it, in the same entry.
  cache_options.masks = ds->info().kind == DatasetKind::kPlain ? open_options.plain.masks : "";
  if (cache_options.per_shard && open_options.lazy_shards &&
      ds->info().kind == DatasetKind::kSharded && !CacheRoot(cache_options.mode).empty()) {
    // One entry per shard, asked for by the reader (ShardCache::Want); nothing copied yet.
    std::string text;
    DatasetInfo info;
    std::vector<ShardRange> ranges;
    const std::string manifest = path + "/" + kTopManifestFile;
    DSPIPE_RETURN_IF_ERROR(ReadFile(manifest, &text));
    DSPIPE_RETURN_IF_ERROR(ParseManifest(text, manifest, &info, &ranges));
    std::vector<std::string> shard_paths;
    for (const ShardRange& range : ranges) shard_paths.push_back(path + "/" + range.name);
    auto sc = std::make_shared<ShardCacheImpl>(path, cache_options, open_options,
                                               std::move(shard_paths));
    DSPIPE_RETURN_IF_ERROR(sc->Reopen(out));
    r.path = path;
    r.reason = "one cache entry per shard, made as the shards are asked for";
    if (result) *result = std::move(r);
    return Status::OK();
  }
  cache::SourceListing listing;
  bool listed = false;
  const std::string root = CacheRoot(cache_options.mode);
  if (cache_options.overlap && !root.empty()) {
    DSPIPE_RETURN_IF_ERROR(ListLocalSource(path, cache_options, &listing));
    listed = true;
    Env* env = cache_options.env ? cache_options.env : Env::Default();
    const bool over_limit =
        cache_options.cache_limit > 0 && listing.bytes > cache_options.cache_limit;
    if (!over_limit && !env->FileExists(root + "/" + cache::EntryName(listing))) {
      // Not in the cache yet: read in place now, copy meanwhile (decided and logged there).
      auto copy = std::make_shared<BackgroundCopy>(path, cache_options, std::move(listing),
                                                   open_options);
      r = copy->result();
      copy->Start();
      *out = std::shared_ptr<const Dataset>(ds.release(), WithBackgroundCopy{std::move(copy), nullptr});
      if (result) *result = std::move(r);
      return Status::OK();
    }
  }
  std::unique_ptr<CacheLease> lease;
  DSPIPE_RETURN_IF_ERROR(
      AcquireImpl(path, cache_options, listed ? &listing : nullptr, &r, &lease));
  if (r.cached) {
    DSPIPE_RETURN_IF_ERROR(OpenCopy(path, r, open_options, std::move(lease), out));
  } else {
    *out = std::shared_ptr<const Dataset>(std::move(ds));
  }
  if (result) *result = std::move(r);
  return Status::OK();
}

}  // namespace dspipe
