// SPDX-License-Identifier: Apache-2.0
// Internal to lib/convert: what the files of BuildDataset and AssembleDataset share.
//
//   build_state.cc   the build's stored state: running totals (Accum), the options fingerprint,
//                    source stamps, and reading them back (a damaged value is a Corruption)
//   build_plan.cc    planning: output checks, the ordered source list (stored, or reloaded on
//                    --resume) and the checks that the source is unchanged since
//   build_commit.cc  the commit loop: one shard's records, made in parallel, committed in
//                    batches with their cursor (resumable after a kill)
//   build_finish.cc  finishing: the manifest (LMDB meta and manifest.json, one writer each)
//   builder.cc       BuildDataset: options validation and the order of the steps above
//   assemble.cc      AssembleDataset (joining shards built one at a time) and the diagnosis of
//                    shards not joined yet
//
// Crash safety: records are committed in batches together with a "cursor" (how far the plan
// got, the running statistics, the rejected files) in the same LMDB transaction, so after a
// kill the environment holds a consistent prefix. The manifest — the only thing readers accept
// as "complete" — is written after everything else. --resume reloads the plan (the ordered
// source list, stored at the start) and continues from the cursor.
#pragma once

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

#include "convert/record_maker.h"
#include "convert/sources.h"
#include "convert/sources_archive.h"
#include "dspipe/convert.h"
#include "dspipe/env.h"
#include "dspipe/status.h"
#include "format/lmdb_env.h"
#include "format/manifest.h"

namespace dspipe::convert {

using json = nlohmann::json;

inline constexpr const char* kCursorKey = "cursor";

// Running totals, persisted with every commit so a resumed build ends with the same manifest.
struct Accum {
  uint64_t next_pos = 0;    // plan position to process next
  uint64_t next_index = 0;  // record index to write next
  double sum[kMaxChannels] = {}, sumsq[kMaxChannels] = {};
  double min[kMaxChannels] = {}, max[kMaxChannels] = {};  // valid where stat_images > 0
  // Integer samples: per channel, the count of each value v at hist[k][v - kHistOffset]
  // (kHistSize entries, int16's -32768 to uint16's 65535, once a record brought counts; empty
  // for float32). The percentiles come from them.
  static constexpr int kHistOffset = -32768;
  static constexpr size_t kHistSize = 32768 + 65536;
  std::vector<uint64_t> hist[kMaxChannels];
  // Adds a record's counts (MadeRecord::hist, from value `lo` on) to channel k.
  void AddHistogram(int k, int lo, const std::vector<uint32_t>& counts);
  // Float32 samples: per channel, the values' bins (FloatBin, record_maker.h) by bin number;
  // empty for integer samples. The percentiles come from them.
  std::map<uint32_t, FloatBin> fhist[kMaxChannels];
  void AddFloatBins(int k, const std::vector<FloatBin>& bins);
  uint64_t pixels = 0, stat_images = 0;
  // The images' sample type and channel count (SampleType as an int; -1 until the first
  // record), and the file that set them: every later record must agree (Check).
  int image_type = -1, channels = -1;
  std::string type_from;
  int mask_type = 0;  // SampleType: uint16 once some mask holds an id above 255
  int mask_max = -1;
  uint64_t mask_ids[4] = {0, 0, 0, 0};  // bit i: some mask holds id i (after mask_map)
  uint64_t jpeg_masks = 0;              // masks whose source file is a JPEG
  uint64_t gray_images = 0;             // gray source images stored in a 3-channel dataset
  int64_t height = -1, width = -1;      // -1 unset, 0 varies
  uint64_t image_bytes = 0, mask_bytes = 0;
  std::map<std::string, uint64_t> codecs;
  std::vector<std::pair<std::string, std::string>> rejected;  // file, reason

  json ToJson() const;
  // Integers only: nlohmann converts a float (1e80) to an integer with a plain cast, which is
  // undefined out of range (the fuzz_manifest finding, same reader shape). Throws
  // json::type_error on anything else; the callers turn that into a Corruption.
  static int64_t Int(const json& v);
  // Throws json::exception on a missing or mistyped field; use ParseAccum.
  static Accum FromJson(const json& j);
  void Add(const MadeRecord& r);
  // BadInput naming `file` when the record's sample type or channel count differs from the
  // dataset's (set by the first record), with the options that make them agree.
  Status Check(const MadeRecord& r, const std::string& file) const;
};

// numpy.percentile(values, q) (linear interpolation) of the values counted in `hist`
// (Accum::hist's layout); NaN when it counts nothing.
double PercentileOf(const std::vector<uint64_t>& hist, double q);
// The same from float bins (Accum::fhist): each bin's values taken as spread evenly from its
// smallest to its largest, so the result is exact where the values at the two sorted positions
// are alone in their bins (or equal to their bin's ends) and otherwise within a bin's span.
double PercentileOfBins(const std::map<uint32_t, FloatBin>& bins, double q);
// The manifest's "stats" from running sums (one formula for builds and AssembleDataset).
json StatsJson(const Accum& acc, int channels, uint64_t count);
// The dataset's image sample type and channels from the totals (uint8 and `channels` for a
// dataset of 8-bit images, whose channel count the options decide).
SampleType ImageType(const Accum& acc);
int DatasetChannels(const Accum& acc, int channels);
// Sets the manifest's "channels" (typed datasets: their images'), "sample_type", "mask_type"
// and "format_version" (2 for a dataset of typed samples, which readers before it cannot read;
// 1 otherwise) from the totals.
void SetTypeFields(const Accum& acc, json* manifest);
// The manifest's "volumes" table (the plan's, in plan order) with each volume's "records"
// [first, n] in dataset order: all its slices (its "kept" ones with skip_empty), or none when the
// volume was rejected (one formula for builds and AssembleDataset).
json VolumeRecords(json volumes, const Accum& acc);

const char* StoreName(StoreMode m);

// Parses JSON stored by an earlier build (meta db); a hand-edited or corrupt value is a
// Corruption naming `where`, never an exception.
Status ParseStored(const std::string& text, const std::string& where, json* out);
Status ParseAccum(const json& j, const std::string& where, Accum* out);

// --resume requires the options that decide the output's content unchanged, whether the
// output is finished or not. The message lists each field that differs.
Status CheckSameOptions(const json& stored, const json& want, const std::string& output);
// CheckSameOptions for --resume: on_error may change (it decides what happens to the records
// not yet written, not to any record already written; the manifest keeps the last run's).
Status CheckResumeOptions(json stored, json want, const std::string& output);

// The source stamps in the stored build state: [[name, size, mtime_ns(, members)], ...].
json StampsJson(const std::vector<SourceStamp>& stamps);
std::vector<SourceStamp> StampsFromJson(const json& a);

// Options that decide the content of the output; --resume requires them unchanged.
json Fingerprint(const BuildOptions& o, const std::string& source_abs);

bool LooksLikeOutput(Env* env, const std::string& out);

// --overwrite's checks and removal (build_plan.cc). CheckOwnManifest: AlreadyExists when
// dir/manifest.json exists and is not a dspipe manifest (a web project's, say): nothing in dir
// may be deleted. RemoveBuildFiles: removes from dir only what a build writes there (data.mdb,
// lock.mdb, manifest.json, rejected.tsv, their atomic temp files, and the same inside
// shard-NNNNN.lmdb directories, each removed once empty); every other entry is kept and named
// in *kept (relative to dir). Symlinks are removed as links, never followed.
Status CheckOwnManifest(Env* env, const std::string& dir);
// The names a build writes in a dataset or shard directory (and the temp files a kill can
// leave of the ones written atomically); "shard-NNNNN.lmdb", a sharded build's shard.
bool IsBuildFile(const std::string& name);
bool IsShardDirName(const std::string& name);
// The directory an s3:// output is built in (build_push.cc): `given` (BuildOptions::staging)
// when set, else <temp dir>/dspipe-<uid>/build-<16 hex of the URL's sha256> (so a rerun with
// resume finds it). The private parent is made 0700; every directory it makes is 0700. Refused
// (AlreadyExists, naming the path and staging=) when the staging directory or that parent
// exists and is a symlink, is owned by another user, or (the parent, made by us) is open to
// others: another local user could read the private dataset or replace its files before the
// push.
Status PrepareStaging(Env* env, const std::string& url, const std::string& given,
                      std::string* staging);
Status RemoveBuildFiles(Env* env, const std::string& dir, std::vector<std::string>* kept);

// Seals an LMDB: in one transaction (after what `w` already holds) its meta "manifest" becomes
// `manifest` and the build cursor is deleted; synced when `sync`. The one writer of the meta
// manifest (a whole dataset's lone LMDB, or one shard of a sharded build).
Status SealManifest(format::LmdbEnv* env, format::LmdbEnv::Writer* w, const json& manifest,
                    bool sync);

// The text of dir/manifest.json: `manifest` plus the "files" list of reader_files (relative to
// dir), each with its size and sha256, hashed now through env (nullptr = Env::Default()). The
// one maker of that file's content (builds and AssembleDataset).
Status TopManifestText(const std::string& dir, const std::string& manifest,
                       const std::vector<std::string>& reader_files, Env* env, std::string* text);

// BuildDataset for an s3://bucket/prefix/ output (build_push.cc): builds in the staging
// directory, pushes it, removes staging's dataset files. `options` are validated.
Status BuildAndPush(const BuildOptions& options, BuildResult* result);

// rejected.tsv's text: a header line, then "file<TAB>reason" per rejected sample.
std::string RejectedReport(const std::vector<std::pair<std::string, std::string>>& rejected);

class Builder {
 public:
  Builder(const BuildOptions& o, BuildResult* r)
      : o_(o), result_(r), env_(o.env != nullptr ? o.env : Env::Default()) {}

  Status Run();  // builder.cc

 private:
  // build_plan.cc
  Status Validate();
  Status PrepareOutput(bool* fresh);
  Status Plan(bool fresh);
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
  std::string PlanDigest() const;
  // From plan_meta_ (fresh or reloaded): foreground_table_ and BuildResult::empty_slices.
  void SetPlanCounts();
  Status CheckVolumeOptions() const;
  // An ImageFolder's empty class folders: refused unless BuildOptions::allow_empty_classes,
  // then kept as labels with no samples: one warning line, logged now and kept for
  // BuildResult::warnings (plan_warnings_).
  Status CheckEmptyClasses();
  // The slice size (rows, columns) of a volume's slices resampled to BuildOptions::spacing_*.
  std::array<int64_t, 2> ResampledSliceShape(const volume::VolumeInfo& info,
                                             volume::SliceAxis axis) const;  // build_plan.cc
  // The volumes table (docs/VOLUMES.md): the volumes in `order` (their images, in plan order),
  // with each one's kept slices where `kept` has them (skip_empty). build_plan.cc
  json VolumeTable(volume::SliceAxis axis, const std::vector<std::string>& order,
                   const std::map<std::string, std::vector<uint8_t>>& kept) const;
  // skip_empty (build_plan.cc): reads every label volume, sets kept[image] (1 per slice with
  // foreground) and leaves the other slices out of plan_, counting them in *empty. A label that
  // cannot be read (kBadInput) turns its volume into one item carrying the reason.
  Status PlanSkipEmpty(volume::SliceAxis axis, std::map<std::string, std::vector<uint8_t>>* kept,
                       uint64_t* empty);

  // build_commit.cc
  // Builds shard `shard` from where its state says it stands: ResumeShard, RunPipeline, SealShard.
  Status BuildShard(int shard, Accum* acc);
  // The resume checks: a finished shard (its manifest there) only carries its totals into *acc
  // and sets *finished; otherwise *acc is its cursor (or the shard's start), checked against the
  // shard's range and the records it holds, and the progress shows the starting point.
  Status ResumeShard(int shard, format::LmdbEnv* env, Accum* acc, bool* finished);
  // The oneTBB pipeline from acc->next_pos to the shard's end (serial read in plan order,
  // parallel MakeRecord, serial in-order append), committed in batches of about
  // BuildOptions::commit_bytes with the cursor, one commit in flight. On a failure the records
  // before it are committed and the error says how to continue (Stopped).
  Status RunPipeline(int shard, format::LmdbEnv* env, Accum* acc);
  // `failure` with what a stopped build kept (`written` records) and the call that continues it.
  Status Stopped(const Status& failure, uint64_t written) const;
  // Syncs the shard (BuildOptions::sync) and, in a sharded build, seals it: its manifest (with
  // the totals so far, for the next shard) replaces the cursor.
  Status SealShard(int shard, format::LmdbEnv* env, const Accum& acc);
  // How the progress counts shard `shard`'s samples: from `from`, of `total`.
  struct ShownProgress {
    uint64_t from, total;
  };
  ShownProgress ShownProgressOf(int shard) const;
  // Volume sources: when plan_[pos] is a volume's first item, starts reading the next volume of
  // the shard (items up to `end`) and its label in the background (VolumeCache::Prefetch).
  void PrefetchNextVolume(uint64_t pos, uint64_t end);
  // An archive item's bytes, read in plan order by the pipeline's serial first stage.
  Status ReadArchiveItem(const SourceItem& item, SourceBytes* out);

  // build_finish.cc
  Status Finish(const Accum& acc);
  // Writes manifest.json: manifest + the "files" list of reader_files (hashed now).
  Status WriteFileList(const std::string& manifest, const std::vector<std::string>& reader_files);
  json Manifest(const Accum& acc, uint64_t count) const;

  std::string ShardPath(int s) const {
    return o_.shards == 1 ? o_.output : o_.output + "/" + format::ShardDirName(s);
  }
  bool OneShard() const { return o_.shard_index >= 0; }
  // The shard whose meta db holds the build state (plan): shard 0, or the one being built.
  int StateShard() const { return OneShard() ? o_.shard_index : 0; }
  // What this run writes: the whole output, or its one shard.
  std::string Target() const { return OneShard() ? ShardPath(o_.shard_index) : o_.output; }
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
  SourceList sources_;                      // fresh builds only (for class names, warnings)
  std::vector<std::string> plan_warnings_;  // logged when planning, BuildResult::warnings too
  std::vector<SourceItem> plan_;            // ordered samples
  std::shared_ptr<const Dataset> plain_;    // a plain LMDB source, open
  std::shared_ptr<ArchiveSource> archive_;  // an archive source, listed
  volume::VolumeCache volumes_;             // volume sources: each volume read once
  json plan_meta_;                          // has_masks, has_labels, class_names, kind
  // Volume builds with labels: each record's class counts go to the foreground table (meta
  // "foreground/KEY", convert/volume_slices.h). Set by the plan (a build begun before the table
  // existed keeps going without it).
  bool foreground_table_ = false;
  std::unique_ptr<format::LmdbEnv> env0_;
  std::atomic<uint64_t> done_{0};
  bool resuming_ = false;  // set once the first shard that still has work is reached
};

}  // namespace dspipe::convert
