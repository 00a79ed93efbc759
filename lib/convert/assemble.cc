// SPDX-License-Identifier: Apache-2.0
// AssembleDataset: joining the shards of a build made one shard at a time
// (BuildOptions::shard_index) into one dataset (their combined totals, manifest.json), and
// DiagnoseUnassembled (shards.h): naming each missing or unfinished shard of such a build, for
// verify and info on a dataset not joined yet.
#include <algorithm>
#include <cstdio>
#include <filesystem>

#include "convert/builder.h"
#include "convert/shards.h"
#include "core/files.h"
#include "format/manifest.h"

namespace dspipe {
namespace {

namespace fs = std::filesystem;
using convert::Accum;
using convert::CheckSameOptions;
using convert::json;
using convert::ParseAccum;
using convert::ParseStored;
using convert::StatsJson;

struct ShardState {
  std::string name, path;
  bool present = false;    // the directory exists
  bool finished = false;   // its manifest (sealed shard) is there
  uint64_t records = 0;    // records committed so far
  json manifest;           // when finished
  json options;            // the build options stored at its start (meta "build"), if any
  std::string unreadable;  // why it could not be read, if so
};

void ReadShard(const std::string& dir, int index, ShardState* st) {
  std::error_code ec;
  st->name = format::ShardDirName(index);
  st->path = dir + "/" + st->name;
  st->present = fs::exists(st->path, ec);
  if (!st->present || !fs::exists(st->path + "/data.mdb", ec)) return;
  std::unique_ptr<format::LmdbEnv> env;
  Status s = format::LmdbEnv::OpenReadOnly(st->path, 16, false, &env);
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
    if (n.size() == format::ShardDirName(0).size() &&
        std::sscanf(n.c_str(), "shard-%5d%7s", &i, tail) == 2 && std::string(tail) == ".lmdb" &&
        i >= 0 && format::ShardDirName(i) == n) {
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

// Errors: the shards' images differ in sample type or channels (BadInput naming both files).
Status MergeAccum(const Accum& a, const std::string& where, Accum* total) {
  if (a.image_type >= 0 && total->image_type >= 0 &&
      (a.image_type != total->image_type || a.channels != total->channels)) {
    convert::MadeRecord r;
    r.header.image_type = static_cast<SampleType>(a.image_type);
    r.header.channels = static_cast<uint8_t>(a.channels);
    return total->Check(r, a.type_from).WithContext(where + ": its first image " + a.type_from);
  }
  if (total->image_type < 0) {
    total->image_type = a.image_type;
    total->channels = a.channels;
    total->type_from = a.type_from;
  }
  total->mask_type = std::max(total->mask_type, a.mask_type);
  for (int k = 0; k < kMaxChannels; ++k) {
    if (a.stat_images == 0) break;
    total->min[k] = total->stat_images == 0 ? a.min[k] : std::min(total->min[k], a.min[k]);
    total->max[k] = total->stat_images == 0 ? a.max[k] : std::max(total->max[k], a.max[k]);
  }
  for (int k = 0; k < kMaxChannels; ++k) {
    total->sum[k] += a.sum[k], total->sumsq[k] += a.sumsq[k];
    if (!a.fhist[k].empty()) {
      std::vector<convert::FloatBin> bins;
      for (const auto& [b, f] : a.fhist[k]) bins.push_back(f);
      total->AddFloatBins(k, bins);
    }
    if (a.hist[k].empty()) continue;
    if (total->hist[k].empty()) total->hist[k].assign(a.hist[k].size(), 0);
    for (size_t i = 0; i < a.hist[k].size(); ++i) total->hist[k][i] += a.hist[k][i];
  }
  total->pixels += a.pixels;
  total->stat_images += a.stat_images;
  total->mask_max = std::max(total->mask_max, a.mask_max);
  for (int k = 0; k < 4; ++k) total->mask_ids[k] |= a.mask_ids[k];
  total->jpeg_masks += a.jpeg_masks;
  total->gray_images += a.gray_images;
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
  return Status::OK();
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
    DSPIPE_RETURN_IF_ERROR(MergeAccum(a, where, &total));
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
  SetTypeFields(total, &m);
  if (total.pixels > 0) m["stats"] = StatsJson(total, m.at("channels").get<int>(), first);
  if (m.contains("volumes")) m["volumes"] = VolumeRecords(m.at("volumes"), total);
  m["shards"] = ranges;
  result->shards = n;
  result->records = first;
  result->skipped = total.rejected.size();
  const std::string top = dir + "/" + format::kTopManifestFile;
  // Like a whole --shards N build's manifest.json: every shard's data.mdb with size + sha256
  // (FetchDataset and verify need the list; docs/FORMAT.md "files").
  std::vector<std::string> reader_files;
  for (const ShardState& st : shards) reader_files.push_back(st.name + "/data.mdb");
  std::string text;
  DSPIPE_RETURN_IF_ERROR(convert::TopManifestText(dir, m.dump(2), reader_files, nullptr, &text));
  std::string existing;
  if (fs::exists(top, ec) && core::ReadFile(top, &existing).ok() && existing == text) {
    result->already_complete = true;
    if (!total.rejected.empty()) result->report_path = dir + "/rejected.tsv";
    return Status::OK();
  }
  if (!total.rejected.empty()) {
    result->report_path = dir + "/rejected.tsv";
    DSPIPE_RETURN_IF_ERROR(
        core::WriteFileAtomic(result->report_path, convert::RejectedReport(total.rejected)));
  }
  return core::WriteFileAtomic(top, text);  // last: the dataset is complete from here on
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

Status convert::DiagnoseUnassembled(const std::string& path) {
  std::error_code ec;
  if (!fs::is_directory(path, ec) || fs::exists(path + "/data.mdb", ec) ||
      fs::exists(path + "/" + format::kTopManifestFile, ec)) {
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
                            " shards are finished but not joined: run `dsconvert assemble " + path +
                            "`");
}

}  // namespace dspipe
