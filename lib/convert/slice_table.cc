// SPDX-License-Identifier: Apache-2.0
// ReadSliceTable (dspipe/convert.h): a volume dataset's records as (volume, slice) from the
// manifest's volumes table, and the per-record foreground table (docs/FORMAT.md "Per-record
// tables", written by the build: convert/volume_slices.h).
#include <nlohmann/json.hpp>

#include "convert/volume_slices.h"
#include "dspipe/convert.h"

namespace dspipe {
namespace {

using json = nlohmann::json;

Status ReadTable(const Dataset& ds, SliceTable* out) {
  const std::string& path = ds.info().path;
  const json m = json::parse(ds.info().manifest_json, nullptr, /*allow_exceptions=*/false);
  if (!m.is_object() || !m.contains("volumes")) {
    return Status::InvalidArgument(path +
                                   ": not built from volumes (its manifest has no volumes "
                                   "table; docs/VOLUMES.md)");
  }
  const json& v = m.at("volumes");
  auto bad = [&](const std::string& why) {
    return Status::Corruption(path + ": manifest volumes table: " + why);
  };
  out->slice_axis = v.at("slice_axis").get<std::string>();
  out->context = v.value("context", 0);
  out->skip_empty = v.value("skip_empty", false);
  out->volumes_json = v.at("list").dump();
  const uint64_t count = ds.size();
  out->volume.reserve(count);
  out->slice.reserve(count);
  for (const json& e : v.at("list")) {
    const int64_t vol = static_cast<int64_t>(out->images.size());
    out->images.push_back(e.at("image").get<std::string>());
    const uint64_t first = e.at("records").at(0).get<uint64_t>();
    const uint64_t n = e.at("records").at(1).get<uint64_t>();
    const int64_t slices = e.at("slices").get<int64_t>();
    if (first != out->volume.size()) {
      return bad(out->images.back() + "'s records start at " + std::to_string(first) + ", not " +
                 std::to_string(out->volume.size()));
    }
    if (n == 0) continue;  // rejected, or (skip_empty) no slice with foreground
    std::vector<std::pair<int64_t, int64_t>> ranges;
    if (e.contains("kept")) {
      for (const json& r : e.at("kept"))
        ranges.emplace_back(r.at(0).get<int64_t>(), r.at(1).get<int64_t>());
    } else {
      ranges.emplace_back(0, slices);
    }
    uint64_t listed = 0;
    int64_t last = 0;
    for (const auto& [start, stop] : ranges) {
      if (start < last || stop <= start || stop > slices) {
        return bad(out->images.back() + ": kept slices [" + std::to_string(start) + ", " +
                   std::to_string(stop) + ") out of order or outside its " +
                   std::to_string(slices) + " slices");
      }
      for (int64_t k = start; k < stop; ++k) {
        out->volume.push_back(vol);
        out->slice.push_back(k);
      }
      listed += static_cast<uint64_t>(stop - start);
      last = stop;
    }
    if (listed != n) {
      return bad(out->images.back() + " has " + std::to_string(n) + " records for " +
                 std::to_string(listed) + " slices");
    }
  }
  if (out->volume.size() != count) {
    return bad("it maps " + std::to_string(out->volume.size()) + " records, the dataset holds " +
               std::to_string(count));
  }
  if (!v.value("foreground", false)) return Status::OK();
  out->num_classes = m.at("num_classes").get<int>();
  const uint64_t entries = count * static_cast<uint64_t>(std::max(out->num_classes, 0));
  if (entries > (uint64_t{1} << 30)) {
    return Status::InvalidArgument(path + ": its foreground table as records x classes would be " +
                                   std::to_string(count) + " x " +
                                   std::to_string(out->num_classes) +
                                   " counts (more than 2^30): its masks hold class ids up to " +
                                   std::to_string(out->num_classes - 1) + " (an instance map?)");
  }
  out->foreground.assign(entries, 0);
  std::vector<uint8_t> seen(count, 0);
  std::vector<std::pair<uint32_t, uint32_t>> counts;
  DSPIPE_RETURN_IF_ERROR(ds.ReadRecordTable(
      format::kForegroundTable, [&](uint64_t index, std::string_view value) -> Status {
        if (!convert::ParseClassCounts(value, &counts)) {
          return Status::Corruption(path + ": record " + std::to_string(index) +
                                    "'s foreground entry is malformed (" +
                                    std::to_string(value.size()) + " bytes)");
        }
        for (const auto& [id, pixels] : counts) {
          if (id >= static_cast<uint32_t>(out->num_classes)) {
            return Status::Corruption(path + ": record " + std::to_string(index) +
                                      "'s foreground entry counts class " + std::to_string(id) +
                                      ", beyond the manifest's num_classes " +
                                      std::to_string(out->num_classes));
          }
          out->foreground[index * out->num_classes + id] = pixels;
        }
        seen[index] = 1;
        return Status::OK();
      }));
  for (uint64_t i = 0; i < count; ++i) {
    if (!seen[i]) {
      return Status::Corruption(path + ": record " + std::to_string(i) + " (key " + ds.KeyName(i) +
                                ") has no foreground entry, and the manifest says every record "
                                "has one; rebuild the dataset with " +
                                Opt("BuildOptions::overwrite", "true"));
    }
  }
  out->has_foreground = true;
  return Status::OK();
}

}  // namespace

Status ReadSliceTable(const std::string& path, SliceTable* out) {
  *out = SliceTable{};
  std::unique_ptr<Dataset> ds;
  DSPIPE_RETURN_IF_ERROR(Dataset::Open(path, DatasetOpenOptions{}, &ds));
  try {
    return ReadTable(*ds, out);
  } catch (const json::exception& e) {
    return Status::Corruption(path + ": manifest volumes table: " + e.what());
  }
}

Status ReadRecordSources(const std::string& path, std::vector<std::string>* out) {
  out->clear();
  std::unique_ptr<Dataset> ds;
  DSPIPE_RETURN_IF_ERROR(Dataset::Open(path, DatasetOpenOptions{}, &ds));
  out->assign(ds->info().count, std::string());
  return ds->ReadRecordTable(format::kSourceTable,
                             [&](uint64_t index, std::string_view value) -> Status {
                               (*out)[index] = std::string(value);
                               return Status::OK();
                             });
}

}  // namespace dspipe
