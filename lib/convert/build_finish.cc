// SPDX-License-Identifier: Apache-2.0
// Finishing a build (builder.h): the manifest. Its JSON (Builder::Manifest), the one writer of
// an LMDB's meta "manifest" (SealManifest: a lone LMDB here, each shard of a sharded build in
// build_commit.cc), the one maker of manifest.json's text (TopManifestText: here and in
// AssembleDataset), and rejected.tsv.
#include <algorithm>

#include "convert/builder.h"
#include "convert/dataset_files.h"
#include "dspipe/log.h"
#include "format/manifest.h"

namespace dspipe::convert {

Status SealManifest(format::LmdbEnv* env, format::LmdbEnv::Writer* w, const json& manifest,
                    bool sync) {
  w->PutMeta(kManifestKey, manifest.dump(2));
  w->DeleteMeta(kCursorKey);
  DSPIPE_RETURN_IF_ERROR(w->Commit());
  if (sync) DSPIPE_RETURN_IF_ERROR(env->Sync());
  return Status::OK();
}

Status TopManifestText(const std::string& dir, const std::string& manifest,
                       const std::vector<std::string>& reader_files, Env* env, std::string* text) {
  std::vector<format::ManifestFile> files;
  DSPIPE_RETURN_IF_ERROR(DescribeDatasetFiles(dir, reader_files, &files, env));
  return format::SetManifestFiles(manifest, files, text);
}

std::string RejectedReport(const std::vector<std::pair<std::string, std::string>>& rejected) {
  std::string report = "file\treason\n";
  for (const auto& [file, reason] : rejected) report += file + "\t" + reason + "\n";
  return report;
}

std::vector<std::string> MaskWarnings(const Accum& acc, const BuildOptions& o) {
  std::vector<std::string> w;
  const bool has0 = acc.mask_ids[0] & 1, has255 = (acc.mask_ids[3] >> 63) & 1;
  const bool only_0_255 = has255 && (acc.mask_ids[0] & ~uint64_t{1}) == 0 && acc.mask_ids[1] == 0 &&
                          acc.mask_ids[2] == 0 && (acc.mask_ids[3] & ~(uint64_t{1} << 63)) == 0;
  if (only_0_255 && o.mask_map.empty()) {
    w.push_back(o.output + ": the masks hold only the ids " + std::string(has0 ? "0 and " : "") +
                "255 (binary masks saved as 0/255), so num_classes is 256; rebuild with "
                "mask_map={255: 1} in Python (dsconvert build --mask-map 255:1) to store them as "
                "classes 0 and 1");
  }
  if (acc.gray_images > 0) {
    const bool all = acc.gray_images == acc.next_index;
    w.push_back(o.output + ": " + (all ? "all " : "") + std::to_string(acc.gray_images) +
                (all ? "" : " of " + std::to_string(acc.next_index)) +
                " images are gray (1 channel) and the dataset has 3 channels, so the loader "
                "gives each as three equal channels; rebuild with gray=True in Python "
                "(dsconvert build --gray) to keep one channel (a third of the batch memory)");
  }
  if (acc.jpeg_masks > 0) {
    w.push_back(o.output + ": " + std::to_string(acc.jpeg_masks) +
                " masks are JPEG files: JPEG is lossy, so ids near class edges are not the ones "
                "drawn (num_classes is " +
                std::to_string(acc.mask_max + 1) + "); save the masks as PNG");
  }
  return w;
}

json VolumeRecords(json volumes, const Accum& acc) {
  // Each volume's records: its slices in order (the kept ones with skip_empty), all of them or
  // (rejected) none.
  std::map<std::string, uint64_t> rejected;
  for (const auto& [file, why] : acc.rejected) ++rejected[file];
  uint64_t first = 0;
  for (json& e : volumes.at("list")) {
    uint64_t slices = e.at("slices").get<uint64_t>();
    if (e.contains("kept")) {
      slices = 0;
      for (const json& r : e.at("kept"))
        slices += r.at(1).get<uint64_t>() - r.at(0).get<uint64_t>();
    }
    const uint64_t n = rejected.count(e.at("image").get<std::string>()) ? 0 : slices;
    e["records"] = {first, n};
    first += n;
  }
  return volumes;
}

json Builder::Manifest(const Accum& acc, uint64_t count) const {
  const int channels = o_.gray ? 1 : 3;
  json m = {{"format", "dspipe"},
            {"format_version", format::kManifestVersion},
            {"complete", true},
            {"count", count},
            {"store", StoreName(o_.store)},
            {"channels", channels},
            {"compression", o_.store != StoreMode::kRaw            ? "none"
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
            {"build",
             {{"options", Fingerprint(o_, source_abs_)},
              {"source_kind", plan_meta_.at("kind")},
              {"sources", plan_.size()},
              {"rejected", acc.rejected.size()}}}};
  if (plan_meta_.contains("empty_slices")) m["build"]["empty_slices"] = plan_meta_["empty_slices"];
  SetTypeFields(acc, &m);
  if (plan_meta_.contains("volumes")) m["volumes"] = VolumeRecords(plan_meta_.at("volumes"), acc);
  if (acc.pixels > 0) m["stats"] = StatsJson(acc, m.at("channels").get<int>(), count);
  return m;
}

Status Builder::WriteFileList(const std::string& manifest,
                              const std::vector<std::string>& reader_files) {
  std::string text;
  DSPIPE_RETURN_IF_ERROR(TopManifestText(o_.output, manifest, reader_files, env_, &text));
  return env_->WriteFileAtomic(o_.output + "/" + format::kTopManifestFile, text);
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
    result_->report_path = o_.output + "/rejected.tsv";
    DSPIPE_RETURN_IF_ERROR(
        env_->WriteFileAtomic(result_->report_path, RejectedReport(acc.rejected)));
  }
  json m = Manifest(acc, acc.next_index);
  std::vector<std::string> reader_files;  // what a reader needs: listed with size + sha256
  if (o_.shards == 1) {
    format::LmdbEnv::Writer w(env0_.get());
    DSPIPE_RETURN_IF_ERROR(SealManifest(env0_.get(), &w, m, o_.sync));
    reader_files.push_back("data.mdb");
  } else {
    json shards = json::array();
    uint64_t first = 0;
    for (int s = 0; s < o_.shards; ++s) {
      // Shard 0 is still open for writing here; LMDB forbids a second open in this process.
      std::unique_ptr<format::LmdbEnv> env;
      if (s > 0)
        DSPIPE_RETURN_IF_ERROR(format::LmdbEnv::OpenReadOnly(ShardPath(s), 16, false, &env));
      uint64_t n = 0;
      DSPIPE_RETURN_IF_ERROR((s == 0 ? env0_.get() : env.get())->RecordCount(&n));
      shards.push_back({{"name", format::ShardDirName(s)}, {"begin", first}, {"end", first + n}});
      first += n;
    }
    m["shards"] = shards;
    for (int s = 0; s < o_.shards; ++s)
      reader_files.push_back(format::ShardDirName(s) + "/data.mdb");
  }
  // manifest.json (a sharded dataset's top manifest; beside a lone LMDB's data.mdb, which cannot
  // hold its own hash) lists every file with its size and sha256, hashed once the LMDBs are
  // closed. Written last: a sharded dataset is complete only with it.
  env0_.reset();
  DSPIPE_RETURN_IF_ERROR(WriteFileList(m.dump(2), reader_files));
  result_->records = acc.next_index;
  result_->skipped = acc.rejected.size();
  result_->warnings = MaskWarnings(acc, o_);
  for (const std::string& line : result_->warnings) Log(LogLevel::kWarn, line);
  // Logged when the plan was made (a fresh build; a resumed one was planned before).
  result_->warnings.insert(result_->warnings.end(), plan_warnings_.begin(), plan_warnings_.end());
  return Status::OK();
}

}  // namespace dspipe::convert
