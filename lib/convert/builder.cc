// dsconvert build: sources → records → LMDB shard(s) → manifest, resumable.
//
// Crash safety: records are committed in batches together with a "cursor" (how far the plan
// got, the running statistics, the rejected files) in the same LMDB transaction, so after a
// kill the environment holds a consistent prefix. The manifest — the only thing readers accept
// as "complete" — is written after everything else. --resume reloads the plan (the ordered
// source list, stored at the start) and continues from the cursor.
#include <oneapi/tbb/global_control.h>
#include <oneapi/tbb/parallel_pipeline.h>
#include <oneapi/tbb/task_arena.h>
#include <sched.h>
#include <signal.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <map>
#include <thread>
#include <filesystem>
#include <future>
#include <numeric>
#include <nlohmann/json.hpp>
#include <random>
#include <stdexcept>

#include "convert/dataset_files.h"
#include "convert/record_maker.h"
#include "convert/shards.h"
#include "convert/sources.h"
#include "convert/sources_archive.h"
#include "core/checksum.h"
#include "core/files.h"
#include "dspipe/convert.h"
#include "dspipe/log.h"
#include "format/lmdb_env.h"
#include "format/manifest.h"

namespace dspipe {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

constexpr const char* kCursorKey = "cursor";

// Test hook: with DSPIPE_TEST_STOP_AFTER_COMMITS=N in the environment, the process stops itself
// (SIGSTOP) right after its N-th record commit is durable. A test waits for that stop with
// waitpid(WUNTRACED) and kills the process there: the kill lands at a known committed state
// instead of a guessed one (a file size or a sleep).
void MaybeStopForTest() {
  static const long stop_after = [] {
    const char* v = std::getenv("DSPIPE_TEST_STOP_AFTER_COMMITS");
    return v ? std::strtol(v, nullptr, 10) : 0L;
  }();
  static std::atomic<long> commits{0};
  if (stop_after > 0 && commits.fetch_add(1) + 1 == stop_after) ::raise(SIGSTOP);
}

int DefaultThreads() {
  cpu_set_t set;
  if (sched_getaffinity(0, sizeof set, &set) == 0) return std::max(1, CPU_COUNT(&set));
  return std::max(1u, std::thread::hardware_concurrency());
}

// Running totals, persisted with every commit so a resumed build ends with the same manifest.
struct Accum {
  uint64_t next_pos = 0;    // plan position to process next
  uint64_t next_index = 0;  // record index to write next
  double sum[3] = {0, 0, 0}, sumsq[3] = {0, 0, 0};
  uint64_t pixels = 0, stat_images = 0;
  int mask_max = -1;
  int64_t height = -1, width = -1;  // -1 unset, 0 varies
  uint64_t image_bytes = 0, mask_bytes = 0;
  std::map<std::string, uint64_t> codecs;
  std::vector<std::pair<std::string, std::string>> rejected;  // file, reason

  json ToJson() const {
    return {{"next_pos", next_pos}, {"next_index", next_index},
            {"sum", std::vector<double>(sum, sum + 3)},
            {"sumsq", std::vector<double>(sumsq, sumsq + 3)},
            {"pixels", pixels}, {"stat_images", stat_images}, {"mask_max", mask_max},
            {"height", height}, {"width", width}, {"image_bytes", image_bytes},
            {"mask_bytes", mask_bytes}, {"codecs", codecs}, {"rejected", rejected}};
  }
  // Throws json::exception on a missing or mistyped field; use ParseAccum.
  // Integers only: nlohmann converts a float (1e80) to an integer with a plain cast, which is
  // undefined out of range (the fuzz_manifest finding, same reader shape). Throws
  // json::type_error on anything else; the callers turn that into a Corruption.
  static int64_t Int(const json& v) {
    if (!v.is_number_integer()) {
      throw json::type_error::create(302, "expected an integer, got " + v.dump(), &v);
    }
    return v.get<int64_t>();
  }
  static Accum FromJson(const json& j) {
    Accum a;
    a.next_pos = Int(j.at("next_pos"));
    a.next_index = Int(j.at("next_index"));
    auto s = j.at("sum").get<std::vector<double>>(), q = j.at("sumsq").get<std::vector<double>>();
    for (int k = 0; k < 3; ++k) a.sum[k] = s.at(k), a.sumsq[k] = q.at(k);
    a.pixels = Int(j.at("pixels"));
    a.stat_images = Int(j.at("stat_images"));
    a.mask_max = Int(j.at("mask_max"));
    a.height = Int(j.at("height"));
    a.width = Int(j.at("width"));
    a.image_bytes = Int(j.at("image_bytes"));
    a.mask_bytes = Int(j.at("mask_bytes"));
    for (const auto& [codec, n] : j.at("codecs").items()) a.codecs[codec] = Int(n);
    a.rejected = j.at("rejected").get<std::vector<std::pair<std::string, std::string>>>();
    return a;
  }
  void Add(const MadeRecord& r) {
    if (r.has_stats) {
      for (int k = 0; k < 3; ++k) sum[k] += r.sum[k], sumsq[k] += r.sumsq[k];
      pixels += r.pixels;
      ++stat_images;
    }
    mask_max = std::max(mask_max, r.mask_max);
    auto merge = [](int64_t cur, uint32_t v) -> int64_t {
      return cur == -1 ? int64_t{v} : (cur == int64_t{v} ? cur : 0);
    };
    height = merge(height, r.header.height);
    width = merge(width, r.header.width);
    image_bytes += r.header.image_size;
    mask_bytes += r.header.mask_size;
    ++codecs[CodecName(r.header.image_codec)];
  }
};

// The manifest's "stats" from running sums (one formula for builds and AssembleDataset).
json StatsJson(const Accum& acc, int channels, uint64_t count) {
  std::vector<double> mean(channels), sd(channels);
  for (int k = 0; k < channels; ++k) {
    mean[k] = acc.sum[k] / static_cast<double>(acc.pixels);
    sd[k] = std::sqrt(
        std::max(0.0, acc.sumsq[k] / static_cast<double>(acc.pixels) - mean[k] * mean[k]));
  }
  return {{"mean", mean}, {"std", sd}, {"units", "pixel values 0-255"},
          {"images", acc.stat_images}, {"sampled", acc.stat_images < count}};
}

const char* StoreName(StoreMode m) { return m == StoreMode::kRaw ? "raw" : "encoded"; }

// Parses JSON stored by an earlier build (meta db); a hand-edited or corrupt value is a
// Corruption naming `where`, never an exception.
Status ParseStored(const std::string& text, const std::string& where, json* out) {
  *out = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (out->is_discarded() || !out->is_object()) {
    return Status::Corruption(where + ": stored build state is not a JSON object");
  }
  return Status::OK();
}

Status ParseAccum(const json& j, const std::string& where, Accum* out) {
  try {
    *out = Accum::FromJson(j);
  } catch (const json::exception& e) {
    return Status::Corruption(where + ": bad build cursor: " + e.what());
  }
  return Status::OK();
}

// --resume requires the options that decide the output's content unchanged, whether the
// output is finished or not. The message lists each field that differs.
Status CheckSameOptions(const json& stored, const json& want, const std::string& output) {
  if (stored == want) return Status::OK();
  std::string diff;
  for (const auto& [key, value] : want.items()) {
    const json was = stored.is_object() && stored.contains(key) ? stored.at(key) : json();
    if (was != value) {
      diff += (diff.empty() ? "" : "; ") + key + " was " + was.dump() + ", now " + value.dump();
    }
  }
  if (diff.empty()) diff = "stored " + stored.dump() + ", now " + want.dump();
  return Status::InvalidArgument(Opt("BuildOptions::resume", "true") +
                                 ": options differ from the build of " + output + ": " + diff +
                                 " (rerun with the same options, or with " +
                                 Opt("BuildOptions::overwrite", "true") + ")");
}

// The source stamps in the stored build state: [[name, size, mtime_ns(, members)], ...].
json StampsJson(const std::vector<SourceStamp>& stamps) {
  json a = json::array();
  for (const SourceStamp& s : stamps) {
    json e = {s.name, s.size, s.mtime_ns};
    if (!s.members.empty()) e.push_back(s.members);
    a.push_back(std::move(e));
  }
  return a;
}

std::vector<SourceStamp> StampsFromJson(const json& a) {
  std::vector<SourceStamp> out;
  for (const json& e : a) {
    SourceStamp s;
    s.name = e.at(0).get<std::string>();
    s.size = e.at(1).get<uint64_t>();
    s.mtime_ns = e.at(2).get<int64_t>();
    if (e.size() > 3) s.members = e.at(3).get<std::string>();
    out.push_back(std::move(s));
  }
  return out;
}

// Options that decide the content of the output; --resume requires them unchanged.
json Fingerprint(const BuildOptions& o, const std::string& source_abs) {
  const bool raw = o.store == StoreMode::kRaw;
  const bool zstd = o.compression == Compression::kZstd;
  json f = {{"source", source_abs}, {"store", StoreName(o.store)},
          {"zstd_level", raw && zstd ? o.zstd_level : 0},
          {"resize", {o.resize_width, o.resize_height}}, {"gray", o.gray},
          {"shuffle", o.shuffle}, {"seed", o.shuffle ? o.seed : 0}, {"shards", o.shards},
          {"on_error", o.on_error == OnError::kSkip ? "skip" : "fail"},
          {"check", o.check == CheckLevel::kDecode ? "decode" : "header"},
          {"stats_sample", o.stats_sample}};
  // Only uncompressed raw builds carry the key, so fingerprints of earlier builds still match.
  if (raw && !zstd) f["compression"] = "none";
  // Likewise --max-side and --jpeg-quality only when set (they change the records' pixels).
  if (o.max_side > 0) f["max_side"] = o.max_side;
  if (o.jpeg_quality > 0) f["jpeg_quality"] = o.jpeg_quality;
  // An archive source is identified by its size too: a replaced or truncated archive is a
  // different source (its entry numbers are in the stored plan).
  if (IsArchiveSource(o.source)) {
    std::error_code ec;
    f["archive_bytes"] = static_cast<uint64_t>(fs::file_size(o.source, ec));
  }
  // Only one-shard builds (--shard-index) carry it; AssembleDataset drops it again, so the
  // joined manifest's options are those of the equivalent --shards N build.
  if (o.shard_index >= 0) f["shard_index"] = o.shard_index;
  if (PlainOptionsSet(o.plain)) {
    f["plain"] = {{"image_key", o.plain.image_key}, {"mask_key", o.plain.mask_key},
                  {"masks", o.plain.masks}, {"labels", o.plain.labels},
                  {"detect_masks", o.plain.detect_masks}};
  }
  return f;
}

bool LooksLikeOutput(Env* env, const std::string& out) {
  return env->FileExists(out + "/data.mdb") || env->FileExists(out + "/" + kTopManifestFile) ||
         env->FileExists(out + "/" + ShardDirName(0));
}

class Builder {
 public:
  Builder(const BuildOptions& o, BuildResult* r)
      : o_(o), result_(r), env_(o.env != nullptr ? o.env : Env::Default()) {}

  Status Run();

 private:
  Status Validate();
  Status PrepareOutput(bool* fresh);
  Status Plan(bool fresh);
  Status BuildShard(int shard, Accum* acc);
  Status Finish(const Accum& acc);
  // Writes manifest.json: manifest + the "files" list of reader_files (hashed now).
  Status WriteFileList(const std::string& manifest, const std::vector<std::string>& reader_files);
  Status CheckArchiveOrder() const;
  // --resume: the source must still be what the build read (the stamps stored in its state; a
  // state without them, from an older dspipe, is not checked). No file may be new or gone, and
  // no file may have changed that a committed record was made from (finished: any file). A
  // changed file the build has not reached yet is what "fix the input and rerun with --resume"
  // asks for: allowed, and the stored stamps are brought up to date. `current`: the source as
  // scanned now, when the caller has it. An error names the first file that differs.
  Status CheckSourceUnchanged(const json& state, const SourceList* current, bool finished);
  // The same for a finished output: the state is read from its state shard (closed by then).
  Status CheckFinishedSourceUnchanged();
  // The plan position up to which shard s has committed records (its end when finished).
  Status CommittedEnd(int shard, uint64_t* end);
  // An archive item's bytes, read in plan order by the pipeline's serial first stage.
  Status ReadArchiveItem(const SourceItem& item, SourceBytes* out);
  json Manifest(const Accum& acc, uint64_t count) const;
  std::string ShardPath(int s) const {
    return o_.shards == 1 ? o_.output : o_.output + "/" + ShardDirName(s);
  }
  bool OneShard() const { return o_.shard_index >= 0; }
  // The shard whose meta db holds the build state (plan): shard 0, or the one being built.
  int StateShard() const { return OneShard() ? o_.shard_index : 0; }
  // What this run writes: the whole output, or its one shard.
  std::string Target() const { return OneShard() ? ShardPath(o_.shard_index) : o_.output; }
  std::string PlanDigest() const;
  uint64_t ShardBegin(int s) const { return plan_.size() * s / o_.shards; }
  bool WantStats(uint64_t pos) const {
    if (o_.store == StoreMode::kRaw || o_.check == CheckLevel::kDecode) return true;
    const uint64_t every = std::max<uint64_t>(1, plan_.size() / std::max(1, o_.stats_sample));
    return pos % every == 0;
  }

  const BuildOptions& o_;
  BuildResult* result_;
  Env* env_;  // the file system for everything but LMDB's own files (BuildOptions::env)
  std::string source_abs_;
  SourceList sources_;            // fresh builds only (for class names, warnings)
  std::vector<SourceItem> plan_;  // ordered samples
  std::shared_ptr<const Dataset> plain_;  // a plain LMDB source, open
  std::shared_ptr<ArchiveSource> archive_;  // an archive source, listed
  json plan_meta_;                // has_masks, has_labels, class_names, kind
  std::unique_ptr<LmdbEnv> env0_;
  std::atomic<uint64_t> done_{0};
  bool resuming_ = false;  // set once the first shard that still has work is reached
};

Status Builder::Validate() {
  DSPIPE_RETURN_IF_ERROR(ValidateBuildOptions(o_));
  std::error_code ec;
  source_abs_ = fs::absolute(o_.source, ec).lexically_normal().string();
  const std::string out_abs = fs::absolute(o_.output, ec).lexically_normal().string();
  if (out_abs == source_abs_ || out_abs.rfind(source_abs_ + "/", 0) == 0) {
    return Status::InvalidArgument("output " + o_.output + " must not be inside the source");
  }
  return Status::OK();
}

Status Builder::PrepareOutput(bool* fresh) {
  *fresh = true;
  const std::string target = Target();
  FileKind kind = FileKind::kMissing;
  DSPIPE_RETURN_IF_ERROR(env_->GetFileKind(target, &kind));
  bool non_empty = kind != FileKind::kMissing;
  if (kind == FileKind::kDirectory) {
    std::vector<std::string> names;
    DSPIPE_RETURN_IF_ERROR(env_->ListDir(target, &names));
    non_empty = !names.empty();
  }
  if (!non_empty || o_.overwrite) {
    if (OneShard()) {
      // A joined manifest would describe the shard about to be (re)written: drop it first, so
      // that the dataset reads as unfinished until `dsconvert assemble` runs again.
      DSPIPE_RETURN_IF_ERROR(env_->RemoveFile(o_.output + "/" + kTopManifestFile));
    }
  }
  if (!non_empty) return Status::OK();
  if (o_.overwrite) {
    if (!LooksLikeOutput(env_, target)) {
      return Status::AlreadyExists(target +
                                   " exists and is not a dspipe dataset; refusing to delete it");
    }
    return env_->RemoveTree(target);
  }
  if (!o_.resume) {
    return Status::AlreadyExists(target + " already exists; pass " +
                                 Opt("BuildOptions::resume", "true") +
                                 " to continue an interrupted build or " +
                                 Opt("BuildOptions::overwrite", "true") + " to replace it");
  }
  if (!LooksLikeOutput(env_, target)) {
    return Status::AlreadyExists(target + " exists and is not a dspipe dataset to resume");
  }
  *fresh = false;
  return Status::OK();
}

std::string Builder::PlanDigest() const {
  uint32_t crc = 0;
  auto add = [&crc](const std::string& v) {
    crc = Crc32({reinterpret_cast<const uint8_t*>(v.data()), v.size() + 1}, crc);  // with NUL
  };
  for (const SourceItem& it : plan_) {
    add(it.image);
    add(it.mask);
    add(std::to_string(it.label) + "," + std::to_string(it.plain_index));
    add(it.error);
  }
  char hex[16];
  std::snprintf(hex, sizeof hex, "%08x", crc);
  return std::to_string(plan_.size()) + ":" + hex;
}

Status Builder::Plan(bool fresh) {
  const json want = Fingerprint(o_, source_abs_);
  std::string text;
  bool found = false;
  if (!fresh) {
    DSPIPE_RETURN_IF_ERROR(LmdbEnv::OpenForWrite(ShardPath(StateShard()), &env0_));
    DSPIPE_RETURN_IF_ERROR(env0_->GetMeta(kBuildStateKey, &text, &found));
  }
  if (!fresh && found) {
    const std::string where = ShardPath(StateShard()) + " (meta " + kBuildStateKey + ")";
    json state;
    DSPIPE_RETURN_IF_ERROR(ParseStored(text, where, &state));
    try {
      DSPIPE_RETURN_IF_ERROR(CheckSameOptions(state.at("options"), want, o_.output));
      for (const json& p : state.at("plan")) {
        plan_.push_back({p.at(0).get<std::string>(), p.at(1).get<std::string>(),
                         static_cast<int>(Accum::Int(p.at(2))), p.at(3).get<std::string>(),
                         p.size() > 4 ? Accum::Int(p.at(4)) : -1,
                         p.size() > 6 ? Accum::Int(p.at(5)) : -1,
                         p.size() > 6 ? Accum::Int(p.at(6)) : -1});
      }
      plan_meta_ = state.at("meta");
      for (const char* k : {"kind", "has_masks", "has_labels", "class_names"}) {
        (void)plan_meta_.at(k);
      }
    } catch (const json::exception& e) {
      return Status::Corruption(where + ": bad build state: " + e.what());
    }
    if (plan_meta_.at("kind") == "plain-lmdb") {
      DSPIPE_RETURN_IF_ERROR(OpenPlainSource(o_.source, o_.plain, &plain_));
    } else if (IsArchiveSource(o_.source)) {
      DSPIPE_RETURN_IF_ERROR(ArchiveSource::Open(o_.source, o_.archive_buffer_bytes, &archive_));
      // --archive-buffer-mb is not part of the options check (it does not change the records):
      // a smaller buffer than the first run's must not turn the rest into a pass per member.
      DSPIPE_RETURN_IF_ERROR(CheckArchiveOrder());
    }
    // The plan is the stored one: the source must still be what it was made from.
    SourceList now;
    now.archive = archive_;
    if (archive_ == nullptr && plan_meta_.at("kind") == "plain-lmdb") now.kind = "plain-lmdb";
    return CheckSourceUnchanged(state, archive_ != nullptr || !now.kind.empty() ? &now : nullptr,
                                /*finished=*/false);
  }
  if (!fresh) {
    // The output exists but the plan never got committed: nothing was written, start over.
    Log(LogLevel::kInfo, o_.output + ": no build state found; starting the build afresh");
  }
  // Scan before creating anything: a bad SRC leaves no output behind.
  DSPIPE_RETURN_IF_ERROR(
      ScanSources(o_.source, o_.plain, &sources_, o_.archive_buffer_bytes, env_));
  plain_ = sources_.plain;  // its pairing line and warnings were logged when it was opened
  archive_ = sources_.archive;
  for (const std::string& w : sources_.warnings) Log(LogLevel::kWarn, w);
  plan_ = sources_.items;
  if (o_.shuffle) {
    std::mt19937_64 rng(o_.seed);
    for (size_t i = plan_.size(); i > 1; --i) {
      std::swap(plan_[i - 1], plan_[std::uniform_int_distribution<size_t>(0, i - 1)(rng)]);
    }
  }
  if (archive_ != nullptr) DSPIPE_RETURN_IF_ERROR(CheckArchiveOrder());
  if (env0_ == nullptr) DSPIPE_RETURN_IF_ERROR(LmdbEnv::OpenForWrite(ShardPath(StateShard()), &env0_));
  plan_meta_ = {{"kind", sources_.kind}, {"has_masks", sources_.has_masks},
                {"has_labels", sources_.has_labels}, {"class_names", sources_.class_names}};
  json p = json::array();
  for (const SourceItem& it : plan_) {
    p.push_back(it.archive_image >= 0
                    ? json{it.image, it.mask, it.label, it.error, -1, it.archive_image,
                           it.archive_mask}
                : it.plain_index >= 0
                    ? json{it.image, it.mask, it.label, it.error, it.plain_index}
                    : json{it.image, it.mask, it.label, it.error});
  }
  // What was read from SRC, so that a later --resume can tell whether it changed since.
  std::vector<SourceStamp> stamps;
  DSPIPE_RETURN_IF_ERROR(StampSources(o_.source, o_.plain, sources_, &stamps));
  LmdbEnv::Writer w(env0_.get());
  w.PutMeta(kBuildStateKey, json{{"options", want},
                                 {"plan", p},
                                 {"meta", plan_meta_},
                                 {"sources", StampsJson(stamps)}}
                                .dump());
  return w.Commit();
}

Status Builder::CheckSourceUnchanged(const json& state, const SourceList* current,
                                     bool finished) {
  if (!state.is_object() || !state.contains("sources")) {
    Log(LogLevel::kInfo, o_.output + ": built by an older dspipe, which did not record what it "
                                     "read from the source; --resume does not check it");
    return Status::OK();
  }
  std::vector<SourceStamp> was, now;
  try {
    was = StampsFromJson(state.at("sources"));
  } catch (const json::exception& e) {
    return Status::Corruption(ShardPath(StateShard()) + " (meta " + kBuildStateKey +
                              "): bad source stamps: " + e.what());
  }
  SourceList scanned;
  if (current == nullptr) {
    if (IsArchiveSource(o_.source)) {
      DSPIPE_RETURN_IF_ERROR(ArchiveSource::Open(o_.source, 0, &scanned.archive));
    } else if (IsLmdbSource(o_.source)) {
      scanned.kind = "plain-lmdb";
    } else {
      DSPIPE_RETURN_IF_ERROR(ScanSources(o_.source, o_.plain, &scanned, 0, env_));
    }
    current = &scanned;
  }
  Status s = StampSources(o_.source, o_.plain, *current, &now);
  const SourceChanges changes =
      s.ok() ? CompareSourceStamps(o_.source, was, now) : SourceChanges{s.message(), {}};
  if (changes.empty()) return Status::OK();
  auto refuse = [&](const std::string& what) {
    return Status::InvalidArgument(
        Opt("BuildOptions::resume", "true") + ": the source changed since the build of " +
        o_.output + " started: " + what + " (" + std::to_string(was.size()) +
        " files were read then, " + std::to_string(s.ok() ? now.size() : 0) +
        " now); the output would not match it: rerun with " +
        Opt("BuildOptions::overwrite", "true") + " to build it anew");
  };
  // Files new or gone change the plan; an archive, a plain LMDB or the CSV listing the samples
  // is read as a whole: any change to them is refused.
  const bool per_file = current->archive == nullptr && current->kind != "plain-lmdb";
  if (finished || !changes.added_or_removed.empty() || !per_file ||
      changes.changed.count(o_.source)) {
    return refuse(changes.First());
  }
  // Files changed since: refused when a committed record was made from one.
  for (int sh = 0; sh < o_.shards; ++sh) {
    if (OneShard() && sh != o_.shard_index) continue;
    uint64_t end = 0;
    DSPIPE_RETURN_IF_ERROR(CommittedEnd(sh, &end));
    for (uint64_t pos = ShardBegin(sh); pos < end; ++pos) {
      for (const std::string* f : {&plan_[pos].image, &plan_[pos].mask}) {
        auto it = changes.changed.find(*f);
        if (it != changes.changed.end()) {
          return refuse(it->second + ", and sample " + std::to_string(pos) +
                        " was already built from it");
        }
      }
    }
  }
  // Not built from yet: the new bytes will be. The stored stamps become today's.
  json updated = state;
  updated["sources"] = StampsJson(now);
  LmdbEnv::Writer w(env0_.get());
  w.PutMeta(kBuildStateKey, updated.dump());
  return w.Commit();
}

Status Builder::CommittedEnd(int shard, uint64_t* end) {
  *end = ShardBegin(shard);
  std::unique_ptr<LmdbEnv> own;
  LmdbEnv* env = env0_.get();
  if (shard != StateShard()) {
    if (!env_->FileExists(ShardPath(shard) + "/data.mdb")) return Status::OK();  // not begun
    DSPIPE_RETURN_IF_ERROR(LmdbEnv::OpenReadOnly(ShardPath(shard), 16, false, &own));
    if (!own->has_dspipe_dbs()) return Status::OK();
    env = own.get();
  }
  std::string text;
  bool found = false;
  DSPIPE_RETURN_IF_ERROR(env->GetMeta(kManifestKey, &text, &found));
  if (found) {
    *end = ShardBegin(shard + 1);
    return Status::OK();
  }
  DSPIPE_RETURN_IF_ERROR(env->GetMeta(kCursorKey, &text, &found));
  if (!found) return Status::OK();
  const std::string where = env->path() + " (meta " + kCursorKey + ")";
  json cursor;
  Accum acc;
  DSPIPE_RETURN_IF_ERROR(ParseStored(text, where, &cursor));
  DSPIPE_RETURN_IF_ERROR(ParseAccum(cursor, where, &acc));
  *end = std::min<uint64_t>(acc.next_pos, plan_.size());
  return Status::OK();
}

Status Builder::CheckFinishedSourceUnchanged() {
  FileKind kind = FileKind::kMissing;
  DSPIPE_RETURN_IF_ERROR(env_->GetFileKind(o_.source, &kind));
  if (kind == FileKind::kMissing) {
    // Nothing to compare with (the source was removed after the build): the output stands.
    Log(LogLevel::kWarn, o_.output + ": complete; its source " + o_.source +
                             " is gone, so --resume could not check it unchanged");
    return Status::OK();
  }
  std::unique_ptr<LmdbEnv> env;
  DSPIPE_RETURN_IF_ERROR(LmdbEnv::OpenReadOnly(ShardPath(StateShard()), 16, false, &env));
  std::string text;
  bool found = false;
  DSPIPE_RETURN_IF_ERROR(env->GetMeta(kBuildStateKey, &text, &found));
  env.reset();
  if (!found) return CheckSourceUnchanged(json(), nullptr, true);
  json state;
  DSPIPE_RETURN_IF_ERROR(
      ParseStored(text, ShardPath(StateShard()) + " (meta " + kBuildStateKey + ")", &state));
  return CheckSourceUnchanged(state, nullptr, /*finished=*/true);
}

// Members are streamed: reading them in an order far from the archive's own order would
// reread the archive once per jump. Refused before anything is written, with the way out.
Status Builder::CheckArchiveOrder() const {
  std::vector<int64_t> order;
  order.reserve(plan_.size() * 2);
  for (const SourceItem& it : plan_) {
    if (!it.error.empty()) continue;
    order.push_back(it.archive_image);
    order.push_back(it.archive_mask);
  }
  const int passes = archive_->Passes(order);
  if (passes <= kMaxArchivePasses) return Status::OK();
  return Status::BadInput(
      o_.source + ": reading its members in the build's order would take " +
      std::to_string(passes) + " passes over the archive (at most " +
      std::to_string(kMaxArchivePasses) + "): " +
      (o_.shuffle ? Opt("BuildOptions::shuffle", "true") +
                        " reorders the samples and the archive's members do not fit " +
                        Opt("BuildOptions::archive_buffer_bytes") +
                        "; build without it (the loader shuffles), raise the buffer, or "
                        "extract the archive"
                  : "the archive stores masks (or CSV rows' files) in another order than "
                    "their images; recreate it sorted (tar --sort=name, or Python's "
                    "tarfile/zipfile over sorted names), raise " +
                        Opt("BuildOptions::archive_buffer_bytes") + ", or extract it"));
}

Status Builder::ReadArchiveItem(const SourceItem& item, SourceBytes* out) {
  DSPIPE_RETURN_IF_ERROR(archive_->Read(item.archive_image, item.image, &out->image));
  if (item.archive_mask >= 0) {
    DSPIPE_RETURN_IF_ERROR(archive_->Read(item.archive_mask, item.mask, &out->mask));
  }
  return Status::OK();
}

json Builder::Manifest(const Accum& acc, uint64_t count) const {
  const int channels = o_.gray ? 1 : 3;
  json m = {{"format", "dspipe"}, {"format_version", kManifestVersion}, {"complete", true},
            {"count", count}, {"store", StoreName(o_.store)}, {"channels", channels},
            {"compression", o_.store != StoreMode::kRaw                ? "none"
                            : o_.compression == Compression::kZstd ? "zstd"
                                                                   : "none"},
            {"height", std::max<int64_t>(acc.height, 0)},
            {"width", std::max<int64_t>(acc.width, 0)},
            {"has_masks", plan_meta_.at("has_masks")},
            {"has_labels", plan_meta_.at("has_labels")},
            {"num_classes", acc.mask_max + 1},
            {"class_names", plan_meta_.at("class_names")},
            {"bytes", {{"image", acc.image_bytes}, {"mask", acc.mask_bytes}}},
            {"codecs", acc.codecs},
            {"build", {{"options", Fingerprint(o_, source_abs_)},
                       {"source_kind", plan_meta_.at("kind")},
                       {"sources", plan_.size()},
                       {"rejected", acc.rejected.size()}}}};
  if (acc.pixels > 0) m["stats"] = StatsJson(acc, channels, count);
  return m;
}

Status Builder::BuildShard(int shard, Accum* acc) {
  std::unique_ptr<LmdbEnv> own;
  LmdbEnv* env = env0_.get();
  if (shard != StateShard()) {
    DSPIPE_RETURN_IF_ERROR(LmdbEnv::OpenForWrite(ShardPath(shard), &own));
    env = own.get();
  }
  const uint64_t begin = ShardBegin(shard), end = ShardBegin(shard + 1);
  std::string text;
  bool found = false;
  DSPIPE_RETURN_IF_ERROR(env->GetMeta(kManifestKey, &text, &found));
  if (found) {  // shard finished earlier: carry its totals forward
    const std::string where = env->path() + " (meta " + kManifestKey + ")";
    json m;
    DSPIPE_RETURN_IF_ERROR(ParseStored(text, where, &m));
    if (!m.contains("accum")) return Status::Corruption(where + ": no \"accum\" field");
    DSPIPE_RETURN_IF_ERROR(ParseAccum(m["accum"], where, acc));
    done_ = acc->next_pos;
    return Status::OK();
  }
  DSPIPE_RETURN_IF_ERROR(env->GetMeta(kCursorKey, &text, &found));
  if (found) {
    const std::string where = env->path() + " (meta " + kCursorKey + ")";
    json cursor;
    DSPIPE_RETURN_IF_ERROR(ParseStored(text, where, &cursor));
    DSPIPE_RETURN_IF_ERROR(ParseAccum(cursor, where, acc));
  } else {
    acc->next_pos = begin;
    // Built alone, a shard cannot know what earlier shards rejected: its keys start at its
    // first plan position (the global index when nothing is rejected; AssembleDataset records
    // the offset otherwise).
    if (OneShard()) acc->next_index = begin;
  }
  if (acc->next_pos < begin || acc->next_pos > end) {
    return Status::Corruption(env->path() + ": cursor outside the shard's range");
  }
  // Records beyond the cursor cannot exist (they commit with it); check anyway.
  uint64_t next_key = 0;
  DSPIPE_RETURN_IF_ERROR(env->NextIndex(&next_key));
  if (next_key > acc->next_index) {
    return Status::Corruption(env->path() + ": holds records past its build cursor");
  }
  if (resuming_ && result_->resumed_from == 0) result_->resumed_from = acc->next_pos;
  resuming_ = false;
  done_ = acc->next_pos;
  // One shard built alone counts its own samples; a whole build counts the whole plan.
  const uint64_t shown_from = OneShard() ? begin : 0;
  const uint64_t shown_total = OneShard() ? end - begin : plan_.size();
  if (o_.progress) o_.progress(done_.load() - shown_from, shown_total);  // the starting point

  const int threads = o_.threads > 0 ? o_.threads : DefaultThreads();
  tbb::task_arena arena(threads);
  LmdbEnv::Writer writer(env);
  std::atomic<bool> stop{false};
  Status failure;
  bool write_failed = false;
  uint64_t committed_index = acc->next_index;
  uint64_t pos = acc->next_pos;
  struct Work {
    uint64_t pos;
    MadeRecord rec;
    Status status;
    // Archive sources: `bytes` read by the first stage (by the parallel one for an archive held
    // whole in memory, whose members are read in any order by several threads).
    bool have_bytes = false;
    SourceBytes bytes;
  };
  // Commits run on a background thread while the pipeline fills the next transaction (writing
  // the pages is a large share of an encoded build). At most one commit is in flight; each
  // carries the cursor of exactly the records in it, so any committed prefix is resumable.
  std::future<Status> inflight;
  uint64_t inflight_index = 0;
  auto wait_inflight = [&]() -> Status {
    if (!inflight.valid()) return Status::OK();
    Status s = inflight.get();
    if (s.ok()) committed_index = inflight_index;
    return s;
  };
  auto commit_async = [&]() -> Status {
    writer.PutMeta(kCursorKey, acc->ToJson().dump());
    DSPIPE_RETURN_IF_ERROR(wait_inflight());
    inflight_index = acc->next_index;
    inflight = std::async(std::launch::async, [w = std::move(writer), env, this]() mutable {
      Status s = w.Commit();
      if (s.ok() && o_.sync) env->StartWriteback();  // overlap the disk with the next batch
      if (s.ok()) MaybeStopForTest();
      return s;
    });
    writer = LmdbEnv::Writer(env);
    return Status::OK();
  };
  auto commit = [&]() -> Status {
    DSPIPE_RETURN_IF_ERROR(commit_async());
    return wait_inflight();
  };
  arena.execute([&] {
    tbb::parallel_pipeline(
        static_cast<size_t>(threads) * 4,
        tbb::make_filter<void, std::shared_ptr<Work>>(
            tbb::filter_mode::serial_in_order,
            [&](tbb::flow_control& fc) -> std::shared_ptr<Work> {
              if (pos >= end || stop.load()) {
                fc.stop();
                return nullptr;
              }
              auto w = std::make_shared<Work>();
              w->pos = pos++;
              // Archive members stream in order: read here, one item at a time (unless the
              // archive is held in memory: then the parallel stage reads them).
              const SourceItem& item = plan_[w->pos];
              if (archive_ != nullptr && !archive_->ConcurrentReads() &&
                  item.archive_image >= 0 && item.error.empty()) {
                w->status = ReadArchiveItem(item, &w->bytes);
                w->have_bytes = true;
              }
              return w;
            }) &
            tbb::make_filter<std::shared_ptr<Work>, std::shared_ptr<Work>>(
                tbb::filter_mode::parallel,
                [&](std::shared_ptr<Work> w) {
                  const uint64_t p = w->pos;
                  const SourceItem& item = plan_[p];
                  if (archive_ != nullptr && archive_->ConcurrentReads() && !stop.load() &&
                      item.archive_image >= 0 && item.error.empty()) {
                    w->status = ReadArchiveItem(item, &w->bytes);  // a zip member inflates here
                    w->have_bytes = true;
                  }
                  if (!stop.load() && w->status.ok()) {
                    w->status = MakeRecord(plan_[p], o_, WantStats(p), &w->rec, plain_.get(),
                                           w->have_bytes ? &w->bytes : nullptr);
                  }
                  return w;
                }) &
            tbb::make_filter<std::shared_ptr<Work>, void>(
                tbb::filter_mode::serial_in_order, [&](std::shared_ptr<Work> w) {
                  if (stop.load()) return;
                  result_->bytes_read += w->rec.bytes_read;
                  if (!w->status.ok()) {
                    if (o_.on_error == OnError::kFail || w->status.code() != Status::Code::kBadInput) {
                      failure = w->status;
                      stop = true;
                      return;
                    }
                    acc->rejected.emplace_back(plan_[w->pos].image, w->status.message());
                    Log(LogLevel::kWarn, "skipped: " + w->status.message());
                  } else {
                    uint8_t key[kKeySize];
                    EncodeKey(acc->next_index++, key);
                    acc->Add(w->rec);
                    writer.PutRecord(std::string(reinterpret_cast<char*>(key), kKeySize),
                                     std::move(w->rec.value));
                  }
                  acc->next_pos = w->pos + 1;
                  ++done_;
                  if (o_.progress) o_.progress(done_.load() - shown_from, shown_total);
                  if (writer.pending_bytes() >= o_.commit_bytes) {
                    Status s = commit_async();
                    if (!s.ok()) {
                      failure = s;
                      write_failed = true;
                      stop = true;
                    }
                  }
                }));
  });
  if (!failure.ok()) {
    if (!write_failed) {
      Status s = wait_inflight();
      if (!s.ok()) {
        failure = s;
        write_failed = true;
      }
    }
    // Keep what is complete: commit the records before the failing one with their cursor
    // (unless writing itself failed: then the last committed cursor stands).
    if (!write_failed) {
      Status s = commit();
      if (!s.ok()) return s.WithContext("build stopped at " + plan_[acc->next_pos].image);
    }
    const uint64_t written = write_failed ? committed_index : acc->next_index;
    const std::string resume = Opt("BuildOptions::resume", "true");
    return failure.Append(" — build stopped after " + std::to_string(written) + " records; " +
                          (failure.code() == Status::Code::kBadInput
                               ? "fix the input and rerun with " + resume +
                                     (o_.on_error == OnError::kFail
                                          ? " (or " + Opt("BuildOptions::on_error", "skip") + ")"
                                          : std::string())
                               : "fix the cause and rerun with " + resume));
  }
  DSPIPE_RETURN_IF_ERROR(commit());
  if (o_.sync) DSPIPE_RETURN_IF_ERROR(env->Sync());
  // Seal the shard: its manifest (with the totals so far, for the next shard) replaces the cursor.
  uint64_t count = 0;
  DSPIPE_RETURN_IF_ERROR(env->RecordCount(&count));
  if (o_.shards > 1) {
    const uint64_t first = acc->next_index - count;
    json m = Manifest(*acc, count);
    m["shard"] = {{"index", shard}, {"of", o_.shards}, {"begin", first}, {"end", acc->next_index}};
    m["accum"] = acc->ToJson();
    if (OneShard()) m["build"]["plan"] = PlanDigest();  // AssembleDataset: one source list
    writer.PutMeta(kManifestKey, m.dump(2));
    writer.DeleteMeta(kCursorKey);
    DSPIPE_RETURN_IF_ERROR(writer.Commit());
    if (o_.sync) DSPIPE_RETURN_IF_ERROR(env->Sync());
  }
  return Status::OK();
}

Status Builder::WriteFileList(const std::string& manifest,
                              const std::vector<std::string>& reader_files) {
  std::vector<ManifestFile> files;
  DSPIPE_RETURN_IF_ERROR(DescribeDatasetFiles(o_.output, reader_files, &files, env_));
  std::string text;
  DSPIPE_RETURN_IF_ERROR(SetManifestFiles(manifest, files, &text));
  return env_->WriteFileAtomic(o_.output + "/" + kTopManifestFile, text);
}

Status Builder::Finish(const Accum& acc) {
  if (OneShard()) {  // sealed by BuildShard; AssembleDataset writes the dataset's manifest
    result_->records = acc.next_index - ShardBegin(o_.shard_index);
    result_->skipped = acc.rejected.size();
    return Status::OK();
  }
  if (acc.next_index == 0) {
    return Status::BadInput(o_.source + ": every sample was rejected; nothing to write");
  }
  if (!acc.rejected.empty()) {
    std::string report = "file\treason\n";
    for (const auto& [file, reason] : acc.rejected) report += file + "\t" + reason + "\n";
    result_->report_path = o_.output + "/rejected.tsv";
    DSPIPE_RETURN_IF_ERROR(env_->WriteFileAtomic(result_->report_path, report));
  }
  json m = Manifest(acc, acc.next_index);
  std::vector<std::string> reader_files;  // what a reader needs: listed with size + sha256
  if (o_.shards == 1) {
    LmdbEnv::Writer w(env0_.get());
    w.PutMeta(kManifestKey, m.dump(2));
    w.DeleteMeta(kCursorKey);
    DSPIPE_RETURN_IF_ERROR(w.Commit());
    if (o_.sync) DSPIPE_RETURN_IF_ERROR(env0_->Sync());
    reader_files.push_back("data.mdb");
  } else {
    json shards = json::array();
    uint64_t first = 0;
    for (int s = 0; s < o_.shards; ++s) {
      // Shard 0 is still open for writing here; LMDB forbids a second open in this process.
      std::unique_ptr<LmdbEnv> env;
      if (s > 0) DSPIPE_RETURN_IF_ERROR(LmdbEnv::OpenReadOnly(ShardPath(s), 16, false, &env));
      uint64_t n = 0;
      DSPIPE_RETURN_IF_ERROR((s == 0 ? env0_.get() : env.get())->RecordCount(&n));
      shards.push_back({{"name", ShardDirName(s)}, {"begin", first}, {"end", first + n}});
      first += n;
    }
    m["shards"] = shards;
    for (int s = 0; s < o_.shards; ++s) reader_files.push_back(ShardDirName(s) + "/data.mdb");
  }
  // manifest.json (a sharded dataset's top manifest; beside a lone LMDB's data.mdb, which cannot
  // hold its own hash) lists every file with its size and sha256, hashed once the LMDBs are
  // closed. Written last: a sharded dataset is complete only with it.
  env0_.reset();
  DSPIPE_RETURN_IF_ERROR(WriteFileList(m.dump(2), reader_files));
  result_->records = acc.next_index;
  result_->skipped = acc.rejected.size();
  return Status::OK();
}

Status Builder::Run() {
  const auto t0 = std::chrono::steady_clock::now();
  DSPIPE_RETURN_IF_ERROR(Validate());
  bool fresh = true;
  DSPIPE_RETURN_IF_ERROR(PrepareOutput(&fresh));
  if (!fresh) {
    std::unique_ptr<Dataset> ds;
    if (Dataset::Open(Target(), DatasetOpenOptions{}, &ds).ok()) {
      // Finished: still refuse other options (a different SRC, --gray, --store, --resize ...)
      // rather than report success for a build that was not asked for.
      const json m = json::parse(ds->info().manifest_json, nullptr, false);
      const json stored = m.is_object() && m.contains("build") && m["build"].is_object() &&
                                  m["build"].contains("options")
                              ? m["build"]["options"]
                              : json();
      DSPIPE_RETURN_IF_ERROR(CheckSameOptions(stored, Fingerprint(o_, source_abs_), o_.output));
      const uint64_t records = ds->size();
      const bool one_lmdb = o_.shards == 1 && ds->info().kind == DatasetKind::kDspipe;
      const std::string manifest = ds->info().manifest_json;
      ds.reset();  // the state shard is opened next (LMDB: one open per process)
      // Finished from another source is no more this build than one with other options.
      DSPIPE_RETURN_IF_ERROR(CheckFinishedSourceUnchanged());
      result_->already_complete = true;
      result_->records = records;
      // One shard, killed after its final commit but before manifest.json: write it now. (Not
      // a shard built alone with --shard-index: assemble writes the dataset's manifest.json.)
      if (one_lmdb && !env_->FileExists(o_.output + "/" + kTopManifestFile)) {
        DSPIPE_RETURN_IF_ERROR(WriteFileList(manifest, {"data.mdb"}));
      }
      return Status::OK();
    }
  }
  DSPIPE_RETURN_IF_ERROR(Plan(fresh));
  resuming_ = !fresh;
  result_->sources = plan_.size();
  Accum acc;
  for (int s = 0; s < o_.shards; ++s) {
    if (OneShard() && s != o_.shard_index) continue;
    DSPIPE_RETURN_IF_ERROR(BuildShard(s, &acc));
  }
  DSPIPE_RETURN_IF_ERROR(Finish(acc));
  result_->seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return Status::OK();
}

}  // namespace

// Every check here reads the options alone (no file), so BuildDataset refuses bad ones before
// it creates the output, and a front end (dsconvert) can call it as its own up-front check.
Status ValidateBuildOptions(const BuildOptions& o) {
  if (o.source.empty() || o.output.empty()) {
    return Status::InvalidArgument("source and output are required");
  }
  if (o.shards < 1 || o.shards > 4096) {
    return Status::InvalidArgument(Opt("BuildOptions::shards") + " must be 1..4096");
  }
  if (o.shard_index < -1 || o.shard_index >= o.shards || (o.shard_index >= 0 && o.shards < 2)) {
    return Status::InvalidArgument(
        Opt("BuildOptions::shard_index") + " must be 0.." + std::to_string(o.shards - 1) +
        " and needs " + Opt("BuildOptions::shards") + " > 1, got " + std::to_string(o.shard_index));
  }
  if ((o.resize_width > 0) != (o.resize_height > 0) || o.resize_width < 0 || o.resize_height < 0) {
    return Status::InvalidArgument(Opt("BuildOptions::resize_width") + " and " +
                                   Opt("BuildOptions::resize_height") +
                                   " must both be positive, or both 0 (keep the size)");
  }
  if (o.max_side < 0) {
    return Status::InvalidArgument(Opt("BuildOptions::max_side") + " must be >= 0 (0 = off), got " +
                                   std::to_string(o.max_side));
  }
  if (o.max_side > 0 && o.resize_width > 0) {
    return Status::InvalidArgument(
        Opt("BuildOptions::max_side") + " excludes " + Opt("BuildOptions::resize_width") + " (" +
        Opt("BuildOptions::resize_width") + " sets the size; pass one of them)");
  }
  if (o.jpeg_quality < 0 || o.jpeg_quality > 100) {
    return Status::InvalidArgument(Opt("BuildOptions::jpeg_quality") +
                                   " must be 1..100, or 0 (keep the bytes), got " +
                                   std::to_string(o.jpeg_quality));
  }
  if (o.jpeg_quality > 0 && o.store == StoreMode::kRaw) {
    return Status::InvalidArgument(Opt("BuildOptions::jpeg_quality") +
                                   " stores JPEGs; it excludes " +
                                   Opt("BuildOptions::store", "raw"));
  }
  if (o.compression == Compression::kNone && o.store != StoreMode::kRaw) {
    return Status::InvalidArgument(Opt("BuildOptions::compression", "none") + " applies to " +
                                   Opt("BuildOptions::store", "raw") +
                                   " (encoded records keep the file's bytes)");
  }
  if (o.zstd_level < 1 || o.zstd_level > 22) {
    return Status::InvalidArgument(Opt("BuildOptions::zstd_level") + " must be 1..22");
  }
  if (o.resume && o.overwrite) {
    return Status::InvalidArgument(Opt("BuildOptions::resume") + " and " +
                                   Opt("BuildOptions::overwrite") + " exclude each other");
  }
  if (o.threads < 0) {
    return Status::InvalidArgument(Opt("BuildOptions::threads") + " must be >= 0");
  }
  return Status::OK();
}

Status BuildDataset(const BuildOptions& options, BuildResult* result) {
  *result = BuildResult{};
  Builder b(options, result);
  // The stored build state and cursor are JSON that a crash, a fault or a hand edit may have
  // damaged; their readers throw (nlohmann::json, std::vector::at). Found by
  // tests/fuzz/fuzz_build_state: report it, never terminate.
  try {
    return b.Run();
  } catch (const nlohmann::json::exception& e) {
    return Status::Corruption(options.output + ": bad build state or cursor: " + e.what());
  } catch (const std::out_of_range& e) {
    return Status::Corruption(options.output + ": bad build state or cursor: " + e.what());
  }
}

// ---- AssembleDataset: joining shards built one at a time (BuildOptions::shard_index) ----

namespace {

struct ShardState {
  std::string name, path;
  bool present = false;   // the directory exists
  bool finished = false;  // its manifest (sealed shard) is there
  uint64_t records = 0;   // records committed so far
  json manifest;          // when finished
  json options;           // the build options stored at its start (meta "build"), if any
  std::string unreadable;  // why it could not be read, if so
};

void ReadShard(const std::string& dir, int index, ShardState* st) {
  std::error_code ec;
  st->name = ShardDirName(index);
  st->path = dir + "/" + st->name;
  st->present = fs::exists(st->path, ec);
  if (!st->present || !fs::exists(st->path + "/data.mdb", ec)) return;
  std::unique_ptr<LmdbEnv> env;
  Status s = LmdbEnv::OpenReadOnly(st->path, 16, false, &env);
  if (s.ok() && !env->has_dspipe_dbs()) return;  // created, nothing committed yet
  std::string text;
  bool found = false;
  if (s.ok()) s = env->RecordCount(&st->records);
  if (s.ok()) s = env->GetMeta(kBuildStateKey, &text, &found);
  if (s.ok() && found) {
    json state;
    s = ParseStored(text, st->path + " (meta build)", &state);
    if (s.ok() && state.contains("options")) st->options = state["options"];
  }
  if (s.ok()) s = env->GetMeta(kManifestKey, &text, &found);
  if (s.ok() && found) {
    s = ParseStored(text, st->path + " (meta manifest)", &st->manifest);
    st->finished = s.ok();
  }
  if (!s.ok()) st->unreadable = s.ToString();
}

// The shards of a one-shard-at-a-time build in `dir`, all `of` of them (found or not). Sets
// *is_one_shard_build false (and returns OK) when `dir` holds no such build.
Status InspectShards(const std::string& dir, std::vector<ShardState>* shards,
                     bool* is_one_shard_build) {
  *is_one_shard_build = false;
  shards->clear();
  std::error_code ec;
  std::vector<int> found;
  for (const auto& e : fs::directory_iterator(dir, ec)) {
    const std::string n = e.path().filename().string();
    int i = -1;
    char tail[8] = {0};
    if (n.size() == ShardDirName(0).size() &&
        std::sscanf(n.c_str(), "shard-%5d%7s", &i, tail) == 2 && std::string(tail) == ".lmdb" &&
        i >= 0 && ShardDirName(i) == n) {
      found.push_back(i);
    }
  }
  if (ec) return Status::IOErrorErrno("list", dir, ec.value());
  std::sort(found.begin(), found.end());
  int of = 0;
  for (int i : found) {  // the first shard whose build state says how many there are
    ShardState st;
    ReadShard(dir, i, &st);
    if (st.options.is_object() && st.options.contains("shards")) {
      if (!st.options.contains("shard_index")) return Status::OK();  // a whole --shards build
      of = st.options["shards"].get<int>();
      break;
    }
  }
  if (of < 2 || of > 4096) return Status::OK();
  *is_one_shard_build = true;
  shards->resize(of);
  for (int i = 0; i < of; ++i) ReadShard(dir, i, &(*shards)[i]);
  return Status::OK();
}

// Every missing or unfinished shard, named, in one error (OK when all are finished).
Status ShardProblems(const std::string& dir, const std::vector<ShardState>& shards) {
  std::string problems;
  int bad = 0;
  const std::string n = std::to_string(shards.size());
  for (size_t i = 0; i < shards.size(); ++i) {
    const ShardState& st = shards[i];
    std::string p;
    if (!st.present) {
      p = st.name + " is missing (build it with " + Opt("BuildOptions::shards", n) + " " +
          Opt("BuildOptions::shard_index", std::to_string(i)) + " into " + dir + ")";
    } else if (!st.unreadable.empty()) {
      p = st.name + " cannot be read (" + st.unreadable + ")";
    } else if (!st.finished) {
      p = st.name + " is incomplete (" + std::to_string(st.records) +
          " records committed, not finished; rerun its build with " +
          Opt("BuildOptions::shard_index", std::to_string(i)) + " " +
          Opt("BuildOptions::resume", "true") + ")";
    } else {
      continue;
    }
    problems += (bad++ ? "; " : "") + p;
  }
  if (bad == 0) return Status::OK();
  return Status::Corruption(dir + ": " + std::to_string(bad) + " of " + n +
                            " shards not finished: " + problems);
}

void MergeAccum(const Accum& a, Accum* total) {
  for (int k = 0; k < 3; ++k) total->sum[k] += a.sum[k], total->sumsq[k] += a.sumsq[k];
  total->pixels += a.pixels;
  total->stat_images += a.stat_images;
  total->mask_max = std::max(total->mask_max, a.mask_max);
  auto merge = [](int64_t cur, int64_t v) -> int64_t {
    if (v == -1) return cur;
    return cur == -1 ? v : (cur == v ? cur : 0);
  };
  total->height = merge(total->height, a.height);
  total->width = merge(total->width, a.width);
  total->image_bytes += a.image_bytes;
  total->mask_bytes += a.mask_bytes;
  for (const auto& [codec, n] : a.codecs) total->codecs[codec] += n;
  total->rejected.insert(total->rejected.end(), a.rejected.begin(), a.rejected.end());
}

Status Assemble(const std::string& dir, AssembleResult* result) {
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) return Status::NotFound(dir + ": no such directory");
  std::vector<ShardState> shards;
  bool one_shard_build = false;
  DSPIPE_RETURN_IF_ERROR(InspectShards(dir, &shards, &one_shard_build));
  if (!one_shard_build) {
    return Status::NotFound(dir + ": no shards built one at a time (" +
                            Opt("BuildOptions::shards", "N") + " " +
                            Opt("BuildOptions::shard_index", "I") + "; a whole " +
                            Opt("BuildOptions::shards", "N") + " build joins its own shards)");
  }
  DSPIPE_RETURN_IF_ERROR(ShardProblems(dir, shards));
  const int n = static_cast<int>(shards.size());
  json options = shards[0].manifest.at("build").at("options");
  options.erase("shard_index");
  const json plan = shards[0].manifest.at("build").value("plan", json());
  Accum total;
  uint64_t first = 0;
  json ranges = json::array();
  for (int i = 0; i < n; ++i) {
    const ShardState& st = shards[i];
    const json& m = st.manifest;
    const std::string where = st.path + " (meta manifest)";
    json o = m.at("build").at("options");
    if (o.value("shard_index", -1) != i || m.at("shard").at("index") != i ||
        m.at("shard").at("of") != n) {
      return Status::Corruption(where + ": not shard " + std::to_string(i) + " of " +
                                std::to_string(n) + " (" + m.at("shard").dump() + ")");
    }
    o.erase("shard_index");
    if (o != options) {
      Status s = CheckSameOptions(options, o, st.path);
      return Status::InvalidArgument(st.name + " was built with other options than " +
                                     shards[0].name + ": " + s.message());
    }
    if (m.at("build").value("plan", json()) != plan) {
      return Status::InvalidArgument(
          st.name + " was built from another source list than " + shards[0].name +
          " (samples:" + "crc32 " + m.at("build").value("plan", json()).dump() + " vs " +
          plan.dump() + "): SRC changed between the shard builds; rebuild the shards with " +
          Opt("BuildOptions::overwrite", "true"));
    }
    if (!m.contains("accum")) return Status::Corruption(where + ": no \"accum\" field");
    Accum a;
    DSPIPE_RETURN_IF_ERROR(ParseAccum(m["accum"], where, &a));
    const uint64_t count = m.at("count").get<uint64_t>();
    const uint64_t key_begin = m.at("shard").at("begin").get<uint64_t>();
    if (count != st.records || a.next_index != key_begin + count) {
      return Status::Corruption(where + ": manifest says " + std::to_string(count) +
                                " records, the shard holds " + std::to_string(st.records));
    }
    MergeAccum(a, &total);
    json r = {{"name", st.name}, {"begin", first}, {"end", first + count}};
    if (key_begin != first) r["key_begin"] = key_begin;  // earlier shards rejected samples
    ranges.push_back(r);
    first += count;
  }
  if (first == 0) {
    return Status::BadInput(dir + ": every sample was rejected in every shard; nothing to join");
  }
  // The first shard's manifest carries every field through (also ones added later); the
  // totals are replaced by the combined ones.
  json m = shards[0].manifest;
  m.erase("shard");
  m.erase("accum");
  m["build"].erase("plan");
  m["build"]["options"] = options;
  m["build"]["rejected"] = total.rejected.size();
  m["count"] = first;
  m["height"] = std::max<int64_t>(total.height, 0);
  m["width"] = std::max<int64_t>(total.width, 0);
  m["num_classes"] = total.mask_max + 1;
  m["bytes"] = {{"image", total.image_bytes}, {"mask", total.mask_bytes}};
  m["codecs"] = total.codecs;
  m.erase("stats");
  if (total.pixels > 0) m["stats"] = StatsJson(total, m.at("channels").get<int>(), first);
  m["shards"] = ranges;
  result->shards = n;
  result->records = first;
  result->skipped = total.rejected.size();
  const std::string top = dir + "/" + kTopManifestFile;
  // Like a whole --shards N build's manifest.json: every shard's data.mdb with size + sha256
  // (FetchDataset and verify need the list; docs/FORMAT.md "files").
  std::vector<std::string> reader_files;
  for (const ShardState& st : shards) reader_files.push_back(st.name + "/data.mdb");
  std::vector<ManifestFile> files;
  DSPIPE_RETURN_IF_ERROR(DescribeDatasetFiles(dir, reader_files, &files));
  std::string text;
  DSPIPE_RETURN_IF_ERROR(SetManifestFiles(m.dump(2), files, &text));
  std::string existing;
  if (fs::exists(top, ec) && ReadFile(top, &existing).ok() && existing == text) {
    result->already_complete = true;
    if (!total.rejected.empty()) result->report_path = dir + "/rejected.tsv";
    return Status::OK();
  }
  if (!total.rejected.empty()) {
    std::string report = "file\treason\n";
    for (const auto& [file, reason] : total.rejected) report += file + "\t" + reason + "\n";
    result->report_path = dir + "/rejected.tsv";
    DSPIPE_RETURN_IF_ERROR(WriteFileAtomic(result->report_path, report));
  }
  return WriteFileAtomic(top, text);  // last: the dataset is complete from here on
}

}  // namespace

Status AssembleDataset(const std::string& output, AssembleResult* result) {
  *result = AssembleResult{};
  try {
    return Assemble(output, result);
  } catch (const nlohmann::json::exception& e) {
    return Status::Corruption(output + ": bad shard manifest: " + e.what());
  }
}

Status DiagnoseUnassembled(const std::string& path) {
  std::error_code ec;
  if (!fs::is_directory(path, ec) || fs::exists(path + "/data.mdb", ec) ||
      fs::exists(path + "/" + kTopManifestFile, ec)) {
    return Status::OK();
  }
  std::vector<ShardState> shards;
  bool one_shard_build = false;
  try {
    DSPIPE_RETURN_IF_ERROR(InspectShards(path, &shards, &one_shard_build));
  } catch (const nlohmann::json::exception& e) {
    return Status::OK();  // Dataset::Open reports the damage
  }
  if (!one_shard_build) return Status::OK();
  DSPIPE_RETURN_IF_ERROR(ShardProblems(path, shards));
  return Status::Corruption(path + ": all " + std::to_string(shards.size()) +
                            " shards are finished but not joined: run `dsconvert assemble " +
                            path + "`");
}

}  // namespace dspipe
