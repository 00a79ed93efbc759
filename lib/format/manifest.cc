// SPDX-License-Identifier: Apache-2.0
#include "format/manifest.h"

#include <cctype>
#include <cstdio>
#include <limits>
#include <nlohmann/json.hpp>
#include <set>
#include <stdexcept>
#include <string>
#include <type_traits>

#include "core/checksum.h"

namespace dspipe::format {
namespace {

using nlohmann::json;

struct BadField : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// An integer field, which must be a JSON integer in T's range. nlohmann's get<int>() of a
// float is a plain cast, undefined when out of range (1e80: found by tests/fuzz/fuzz_manifest).
template <typename T>
T IntField(const json& j, const char* key) {
  const json& v = j.at(key);
  const std::string name = std::string("'") + key + "'";
  if (!v.is_number_integer()) throw BadField(name + " is not an integer");
  if (v.is_number_unsigned()) {
    if (v.get<uint64_t>() > static_cast<uint64_t>(std::numeric_limits<T>::max())) {
      throw BadField(name + " is out of range");
    }
    return static_cast<T>(v.get<uint64_t>());
  }
  const int64_t i = v.get<int64_t>();
  if constexpr (std::is_unsigned_v<T>) {
    if (i < 0) throw BadField(name + " is negative");
  } else {
    if (i < static_cast<int64_t>(std::numeric_limits<T>::min()) ||
        i > static_cast<int64_t>(std::numeric_limits<T>::max())) {
      throw BadField(name + " is out of range");
    }
  }
  return static_cast<T>(i);
}

template <typename T>
T IntField(const json& j, const char* key, T fallback) {
  return j.contains(key) ? IntField<T>(j, key) : fallback;
}

}  // namespace

std::string ShardDirName(int index) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%s%05d.lmdb", kShardPrefix, index);
  return buf;
}

Status ParseManifest(const std::string& text, const std::string& where, DatasetInfo* info,
                     std::vector<ShardRange>* ranges) {
  json j = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) {
    return Status::Corruption(where + ": manifest is not valid JSON");
  }
  try {
    if (j.value("format", "") != "dspipe") {
      return Status::Corruption(where + ": manifest 'format' is not \"dspipe\"");
    }
    const int version = IntField<int>(j, "format_version");
    if (version < 1 || version > kManifestVersion) {
      return Status::Unsupported(where + ": manifest format_version " + std::to_string(version) +
                                 " (this dspipe reads 1 to " + std::to_string(kManifestVersion) +
                                 ": a newer dspipe wrote it)");
    }
    if (!j.value("complete", false)) {
      return Status::Corruption(where + ": manifest says the build is not complete");
    }
    info->count = IntField<uint64_t>(j, "count");
    info->store = j.at("store").get<std::string>();
    info->channels = IntField<int>(j, "channels");
    info->height = IntField<int>(j, "height", 0);
    info->width = IntField<int>(j, "width", 0);
    for (auto [field, type] :
         {std::pair{"sample_type", &info->sample_type}, std::pair{"mask_type", &info->mask_type}}) {
      const std::string name = j.value(field, "uint8");
      if (!ParseSampleType(name, type)) {
        return Status::Corruption(where + ": manifest '" + field + "' is \"" + name +
                                  "\", not uint8, uint16, int16 or float32");
      }
    }
    if (info->mask_type != SampleType::kUint8 && info->mask_type != SampleType::kUint16) {
      return Status::Corruption(where + ": manifest 'mask_type' is not uint8 or uint16");
    }
    if (info->channels < 1 || info->channels > kMaxChannels ||
        (info->sample_type == SampleType::kUint8 && (info->channels == 2 || info->channels == 4))) {
      return Status::Corruption(where + ": manifest 'channels' is " +
                                std::to_string(info->channels));
    }
    info->has_masks = j.value("has_masks", false);
    info->has_labels = j.value("has_labels", false);
    info->num_classes = IntField<int>(j, "num_classes", 0);
    info->class_names = j.value("class_names", std::vector<std::string>{});
    if (j.contains("stats") && j["stats"].is_object()) {
      info->mean = j["stats"].at("mean").get<std::vector<double>>();
      info->std = j["stats"].at("std").get<std::vector<double>>();
      info->has_stats = info->mean.size() == static_cast<size_t>(info->channels) &&
                        info->std.size() == static_cast<size_t>(info->channels);
      const json& st = j["stats"];
      for (auto [field, out] : {std::pair{"min", &info->min}, std::pair{"max", &info->max},
                                std::pair{"percentile_00_5", &info->percentile_00_5},
                                std::pair{"percentile_99_5", &info->percentile_99_5}}) {
        if (st.contains(field)) *out = st.at(field).get<std::vector<double>>();
        if (out->size() != static_cast<size_t>(info->channels)) out->clear();
      }
    }
    info->manifest_json = text;
    ranges->clear();
    if (j.contains("shards")) {
      if (!j["shards"].is_array() || j["shards"].empty()) {
        return Status::Corruption(where + ": manifest 'shards' is not a non-empty list");
      }
      for (const json& s : j["shards"]) {
        const std::string name = s.at("name").get<std::string>();
        // A shard lives directly inside the dataset directory: a name that is a path (or
        // "..") could make a reader open something outside it.
        if (name.empty() || name == "." || name == ".." ||
            name.find_first_of(std::string("/\\\0", 3)) != std::string::npos) {
          return Status::Corruption(where + ": shard name \"" + name +
                                    "\" is not a directory name inside the dataset");
        }
        const uint64_t begin = IntField<uint64_t>(s, "begin");
        ranges->push_back(
            {name, begin, IntField<uint64_t>(s, "end"), IntField<uint64_t>(s, "key_begin", begin)});
      }
    } else if (j.contains("shard")) {
      const json& s = j["shard"];
      const uint64_t begin = IntField<uint64_t>(s, "begin");
      ranges->push_back({"", begin, IntField<uint64_t>(s, "end"), begin});
    } else {
      ranges->push_back({"", 0, info->count, 0});
    }
    if (ranges->empty()) return Status::Corruption(where + ": manifest lists no shards");
    uint64_t expect = ranges->front().begin;  // one shard of a set starts past 0
    for (const ShardRange& r : *ranges) {
      if (r.begin != expect || r.end < r.begin) {
        return Status::Corruption(where + ": shard ranges are not contiguous");
      }
      expect = r.end;
    }
    if (!j.contains("shard") && expect != info->count) {
      return Status::Corruption(where + ": shard ranges cover " + std::to_string(expect) +
                                " records, count is " + std::to_string(info->count));
    }
  } catch (const nlohmann::json::exception& e) {
    return Status::Corruption(where + ": bad manifest field: " + e.what());
  } catch (const BadField& e) {
    return Status::Corruption(where + ": bad manifest field: " + e.what());
  }
  return Status::OK();
}

namespace {

// A relative path that stays inside the dataset directory.
bool IsInsidePath(const std::string& p) {
  if (p.empty() || p.front() == '/' || p.find('\\') != std::string::npos ||
      p.find('\0') != std::string::npos) {
    return false;
  }
  size_t start = 0;
  for (;;) {
    const size_t slash = p.find('/', start);
    const std::string part = p.substr(start, slash == std::string::npos ? slash : slash - start);
    if (part.empty() || part == "." || part == "..") return false;
    if (slash == std::string::npos) return true;
    start = slash + 1;
  }
}

}  // namespace

Status ParseManifestFiles(const std::string& text, const std::string& where,
                          std::vector<ManifestFile>* files, bool* present) {
  files->clear();
  *present = false;
  json j = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) {
    return Status::Corruption(where + ": manifest is not valid JSON");
  }
  if (!j.contains("files")) return Status::OK();
  try {
    const json& list = j["files"];
    uint64_t total = 0;
    std::set<std::string> seen;
    if (!list.is_array() || list.empty()) {
      return Status::Corruption(where + ": manifest 'files' is not a non-empty list");
    }
    for (const json& f : list) {
      ManifestFile mf;
      mf.path = f.at("path").get<std::string>();
      if (!IsInsidePath(mf.path)) {
        return Status::Corruption(where + ": file path \"" + mf.path +
                                  "\" is not a relative path inside the dataset");
      }
      mf.size = IntField<uint64_t>(f, "size");
      // Sizes become FetchOptions::size (an int64) and are summed into budgets and totals:
      // each below 2^63 and their sum too, never a value that wraps.
      constexpr uint64_t kMax = uint64_t{1} << 63;
      if (mf.size >= kMax || total > kMax - 1 - mf.size) {
        return Status::Corruption(where + ": file \"" + mf.path + "\": size " +
                                  std::to_string(mf.size) +
                                  " makes the dataset's total overflow (sizes must sum below "
                                  "2^63)");
      }
      total += mf.size;
      mf.sha256 = f.at("sha256").get<std::string>();
      if (!core::IsHex64(mf.sha256)) {
        return Status::Corruption(where + ": sha256 of \"" + mf.path + "\" is not 64 hex digits");
      }
      for (char& c : mf.sha256) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
      // A tree, not a hash: a manifest from a server may list any number of files, and a
      // crafted one could collide hashes; n log n whatever the names.
      if (!seen.insert(mf.path).second) {
        return Status::Corruption(where + ": file \"" + mf.path + "\" is listed twice");
      }
      files->push_back(std::move(mf));
    }
  } catch (const nlohmann::json::exception& e) {
    return Status::Corruption(where + ": bad manifest 'files' entry: " + e.what());
  } catch (const BadField& e) {
    return Status::Corruption(where + ": bad manifest 'files' entry: " + e.what());
  }
  *present = true;
  return Status::OK();
}

Status SetManifestFiles(const std::string& manifest_text, const std::vector<ManifestFile>& files,
                        std::string* out) {
  json j = json::parse(manifest_text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) {
    return Status::InvalidArgument("SetManifestFiles: the manifest is not a JSON object");
  }
  json list = json::array();
  for (const ManifestFile& f : files) {
    list.push_back({{"path", f.path}, {"size", f.size}, {"sha256", f.sha256}});
  }
  j["files"] = std::move(list);
  *out = j.dump(2);
  return Status::OK();
}

}  // namespace dspipe::format
