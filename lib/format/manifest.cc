#include "format/manifest.h"

#include <cstdio>
#include <nlohmann/json.hpp>

namespace dspipe {

std::string ShardDirName(int index) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%s%05d.lmdb", kShardPrefix, index);
  return buf;
}

Status ParseManifest(const std::string& text, const std::string& where, DatasetInfo* info,
                     std::vector<ShardRange>* ranges) {
  using nlohmann::json;
  json j = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) {
    return Status::Corruption(where + ": manifest is not valid JSON");
  }
  try {
    if (j.value("format", "") != "dspipe") {
      return Status::Corruption(where + ": manifest 'format' is not \"dspipe\"");
    }
    const int version = j.at("format_version").get<int>();
    if (version != kManifestVersion) {
      return Status::Unsupported(where + ": manifest format_version " + std::to_string(version) +
                                 " (this dspipe reads " + std::to_string(kManifestVersion) + ")");
    }
    if (!j.value("complete", false)) {
      return Status::Corruption(where + ": manifest says the build is not complete");
    }
    info->count = j.at("count").get<uint64_t>();
    info->store = j.at("store").get<std::string>();
    info->channels = j.at("channels").get<int>();
    info->height = j.value("height", 0);
    info->width = j.value("width", 0);
    info->has_masks = j.value("has_masks", false);
    info->has_labels = j.value("has_labels", false);
    info->num_classes = j.value("num_classes", 0);
    info->class_names = j.value("class_names", std::vector<std::string>{});
    if (j.contains("stats") && j["stats"].is_object()) {
      info->mean = j["stats"].at("mean").get<std::vector<double>>();
      info->std = j["stats"].at("std").get<std::vector<double>>();
      info->has_stats = info->mean.size() == static_cast<size_t>(info->channels) &&
                        info->std.size() == static_cast<size_t>(info->channels);
    }
    info->manifest_json = text;
    ranges->clear();
    if (j.contains("shards")) {
      for (const json& s : j["shards"]) {
        ranges->push_back({s.at("name").get<std::string>(), s.at("begin").get<uint64_t>(),
                           s.at("end").get<uint64_t>()});
      }
    } else if (j.contains("shard")) {
      const json& s = j["shard"];
      ranges->push_back({"", s.at("begin").get<uint64_t>(), s.at("end").get<uint64_t>()});
    } else {
      ranges->push_back({"", 0, info->count});
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
  }
  return Status::OK();
}

}  // namespace dspipe
