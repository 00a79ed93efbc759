// SPDX-License-Identifier: Apache-2.0
// Build planning (builder.h): the output checks (inside the source? exists? resumable?), the
// ordered source list — scanned, shuffled and stored in the state shard's meta "build" on a
// fresh build, reloaded on --resume — and the checks that a resumed build's source is still
// what the plan was made from.
#include <oneapi/tbb/parallel_for.h>
#include <oneapi/tbb/task_arena.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <filesystem>
#include <mutex>
#include <random>
#include <vector>

#include "convert/builder.h"
#include "convert/volume_slices.h"
#include "core/checksum.h"
#include "dspipe/cpus.h"
#include "dspipe/limits.h"
#include "dspipe/log.h"
#include "format/manifest.h"

namespace dspipe::convert {

namespace fs = std::filesystem;

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

// "shard-NNNNN.lmdb": a shard a sharded build writes (ShardDirName).
bool IsShardDirName(const std::string& name) {
  const std::string prefix = format::kShardPrefix, suffix = ".lmdb";
  if (name.size() != prefix.size() + 5 + suffix.size() || name.rfind(prefix, 0) != 0 ||
      name.compare(name.size() - suffix.size(), suffix.size(), suffix) != 0) {
    return false;
  }
  return std::all_of(name.begin() + static_cast<ptrdiff_t>(prefix.size()),
                     name.end() - static_cast<ptrdiff_t>(suffix.size()),
                     [](char c) { return c >= '0' && c <= '9'; });
}

bool IsBuildFile(const std::string& name) {
  std::string of;
  if (IsAtomicTempName(name, &of)) return of == format::kTopManifestFile || of == "rejected.tsv";
  return name == "data.mdb" || name == "lock.mdb" || name == format::kTopManifestFile ||
         name == "rejected.tsv";
}

Status CheckOwnManifest(Env* env, const std::string& dir) {
  const std::string path = dir + "/" + format::kTopManifestFile;
  if (!env->FileExists(path)) return Status::OK();
  std::string text;
  DSPIPE_RETURN_IF_ERROR(env->ReadFile(path, &text));
  const json m = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (!m.is_object() || !m.contains("format") || m.at("format") != "dspipe") {
    return Status::AlreadyExists(
        dir + " holds a " + format::kTopManifestFile +
        " that is not a dspipe manifest (no \"format\": \"dspipe\"), so it is not a dspipe "
        "dataset; refusing to delete anything in it: choose another output directory");
  }
  return Status::OK();
}

Status RemoveBuildFiles(Env* env, const std::string& dir, std::vector<std::string>* kept) {
  std::unique_ptr<Directory> d;
  DSPIPE_RETURN_IF_ERROR(env->OpenDirectory(dir, &d));
  std::vector<std::string> names;
  DSPIPE_RETURN_IF_ERROR(d->List(&names));
  std::sort(names.begin(), names.end());
  for (const std::string& name : names) {
    FileInfo info;
    DSPIPE_RETURN_IF_ERROR(d->Stat(name, &info));
    if (info.kind == FileKind::kRegular && IsBuildFile(name)) {
      DSPIPE_RETURN_IF_ERROR(d->Remove(name));
    } else if (info.kind == FileKind::kDirectory && IsShardDirName(name)) {
      std::vector<std::string> inside;
      DSPIPE_RETURN_IF_ERROR(RemoveBuildFiles(env, dir + "/" + name, &inside));
      for (const std::string& k : inside) kept->push_back(name + "/" + k);
      if (inside.empty()) DSPIPE_RETURN_IF_ERROR(d->RemoveTree(name));  // empty now
    } else {
      kept->push_back(name);
    }
  }
  return d->Sync();
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
      DSPIPE_RETURN_IF_ERROR(CheckOwnManifest(env_, o_.output));
      // A joined manifest would describe the shard about to be (re)written: drop it first, so
      // that the dataset reads as unfinished until `dsconvert assemble` runs again.
      DSPIPE_RETURN_IF_ERROR(env_->RemoveFile(o_.output + "/" + format::kTopManifestFile));
    }
  }
  if (!non_empty) return Status::OK();
  if (o_.overwrite) {
    if (kind != FileKind::kDirectory || !LooksLikeOutput(env_, target)) {
      return Status::AlreadyExists(target +
                                   " exists and is not a dspipe dataset; refusing to delete it");
    }
    DSPIPE_RETURN_IF_ERROR(CheckOwnManifest(env_, target));
    std::vector<std::string> kept;
    DSPIPE_RETURN_IF_ERROR(RemoveBuildFiles(env_, target, &kept));
    if (!kept.empty()) {
      std::string names;
      for (size_t i = 0; i < kept.size() && i < 5; ++i) names += (i ? ", " : "") + kept[i];
      Log(LogLevel::kInfo, target + ": --overwrite kept " + std::to_string(kept.size()) +
                               " entries a build does not write (" + names +
                               (kept.size() > 5 ? ", ..." : "") + ")");
    }
    return Status::OK();
  }
  if (!o_.resume) {
    return Status::AlreadyExists(
        target + " already exists; pass " + Opt("BuildOptions::resume", "true") +
        " to continue an interrupted build (with the options it was started with; " +
        Opt("BuildOptions::on_error") + " may change) or " +
        Opt("BuildOptions::overwrite", "true") + " to replace it");
  }
  if (!LooksLikeOutput(env_, target)) {
    return Status::AlreadyExists(target + " exists and is not a dspipe dataset to resume");
  }
  *fresh = false;
  return Status::OK();
}

namespace {

// A volume's kept slices (1 per slice with foreground) as half-open ranges [start, stop).
json KeptRanges(const std::vector<uint8_t>& fg) {
  json ranges = json::array();
  for (size_t k = 0; k < fg.size();) {
    if (!fg[k]) {
      ++k;
      continue;
    }
    size_t stop = k;
    while (stop < fg.size() && fg[stop]) ++stop;
    ranges.push_back({k, stop});
    k = stop;
  }
  return ranges;
}

}  // namespace

// The volumes in plan order (their slices' order in the dataset): files, slices, and the
// canonical grid, for putting predictions back (docs/VOLUMES.md). Builder::Manifest adds the
// records each holds.
json Builder::VolumeTable(volume::SliceAxis axis, const std::vector<std::string>& order,
                          const std::map<std::string, std::vector<uint8_t>>& kept) const {
  std::map<std::string, const VolumeSource*> by_image;
  for (const VolumeSource& v : sources_.volumes) by_image[v.image] = &v;
  json list = json::array();
  for (const std::string& image : order) {
    const VolumeSource& v = *by_image.at(image);
    const volume::VolumeInfo& in = v.info;
    json e = {{"image", v.image}, {"label", v.label}, {"slices", v.slices}};
    if (!v.channels.empty()) e["channel_files"] = v.channels;
    if (v.error.empty()) {
      json affine = json::array();
      for (const auto& row : in.canon_affine)
        affine.push_back(std::vector<double>(row.begin(), row.end()));
      const std::array<double, 2> sp = volume::SliceSpacing(in, axis);
      e["shape"] = {in.canon_dim[0], in.canon_dim[1], in.canon_dim[2]};
      e["channels"] = in.channels;
      e["spacing"] = {in.canon_spacing[0], in.canon_spacing[1], in.canon_spacing[2]};
      e["slice_spacing"] = {sp[0], sp[1]};
      e["affine"] = affine;
      int row = 0, col = 0;
      volume::PlaneAxes(axis, &row, &col);
      const size_t r_ax = static_cast<size_t>(row), c_ax = static_cast<size_t>(col);
      // The grid the records are on, step by step: the canonical one, resampled, sized.
      std::vector<std::vector<double>> grid;
      for (const auto& r : in.canon_affine) grid.emplace_back(r.begin(), r.end());
      std::array<int64_t, 2> hw = {in.canon_dim[row], in.canon_dim[col]};
      if (o_.spacing_rows > 0) {
        // After resampling: the in-plane axes' affine columns scaled by target / own
        // spacing, the first voxel centre (the translation) unchanged.
        const double scale_r = o_.spacing_rows / sp[0], scale_c = o_.spacing_cols / sp[1];
        for (std::vector<double>& r : grid) {
          r[r_ax] *= scale_r;
          r[c_ax] *= scale_c;
        }
        hw = ResampledSliceShape(in, axis);
        e["resampled"] = {{"slice_shape", {hw[0], hw[1]}},
                          {"slice_spacing", {o_.spacing_rows, o_.spacing_cols}},
                          {"affine", grid}};
      }
      if (o_.slice_height > 0) {
        // After padding or cropping: record pixel (i, j) is pixel (i + offset[0],
        // j + offset[1]) of the grid before, so the origin moves by the offset.
        const int64_t off_r = volume::PadCropStart(hw[0], o_.slice_height);
        const int64_t off_c = volume::PadCropStart(hw[1], o_.slice_width);
        for (std::vector<double>& r : grid) {
          r[3] += r[r_ax] * static_cast<double>(off_r) + r[c_ax] * static_cast<double>(off_c);
        }
        e["sized"] = {{"slice_shape", {o_.slice_height, o_.slice_width}},
                      {"offset", {off_r, off_c}},
                      {"affine", grid}};
      }
    }
    auto k = kept.find(image);
    if (k != kept.end()) e["kept"] = KeptRanges(k->second);
    list.push_back(e);
  }
  json table = {{"slice_axis", volume::SliceAxisName(axis)},
                {"orientation", "RAS"},
                {"context", o_.context},
                {"list", list}};
  if (!sources_.channel_names.empty()) table["channel_names"] = sources_.channel_names;
  if (o_.skip_empty) table["skip_empty"] = true;
  if (o_.spacing_rows > 0) table["resampled_spacing"] = {o_.spacing_rows, o_.spacing_cols};
  if (o_.slice_height > 0) table["slice_size"] = {o_.slice_height, o_.slice_width};
  // Every record of a build with labels has its class counts in the foreground table.
  if (sources_.has_masks) table["foreground"] = true;
  return table;
}

Status Builder::CheckEmptyClasses() {
  const auto& empty = sources_.empty_classes;
  if (empty.empty()) return Status::OK();
  const auto& [label, folder] = empty.front();
  const std::string name = sources_.class_names[static_cast<size_t>(label)];
  if (!o_.allow_empty_classes) {
    // torchvision's ImageFolder refuses it too, unless allow_empty=True.
    return Status::BadInput(
        folder + ": an empty class folder" +
        (empty.size() > 1 ? " (and " + std::to_string(empty.size() - 1) + " more)" : "") +
        ": it would be label " + std::to_string(label) + " (" + name +
        ") with no samples, so a model sized from the labels would have a class it never "
        "sees; remove the folder, put its images in it, or pass " +
        Opt("BuildOptions::allow_empty_classes", "true") +
        " to keep it as a class with no samples (torchvision's allow_empty=True)");
  }
  std::string names;
  for (const auto& [l, f] : empty) {
    names += (names.empty() ? "" : ", ") + std::to_string(l) + " (" +
             sources_.class_names[static_cast<size_t>(l)] + ")";
  }
  plan_warnings_.push_back(o_.source + ": " + std::to_string(empty.size()) +
                           " empty class folder(s) kept as labels with no samples "
                           "(allow_empty_classes): " +
                           names);
  Log(LogLevel::kWarn, plan_warnings_.back());
  return Status::OK();
}

// What a volume source cannot do (yet): each refused up front, naming the option.
Status Builder::CheckVolumeOptions() const {
  auto refuse = [&](const std::string& opt, const std::string& why) {
    return Status::InvalidArgument(o_.source + ": a folder of volumes: " + opt + " " + why);
  };
  if (o_.resize_width > 0 || o_.max_side > 0) {
    return refuse(Opt("BuildOptions::resize_width") + " / " + Opt("BuildOptions::max_side"),
                  "would resample slices without their spacing; build at the volumes' own "
                  "size (the loader's transforms crop and resize)");
  }
  if (o_.depth == 8) {
    return refuse(Opt("BuildOptions::depth", "8"),
                  "would keep the high byte of CT and MR intensities; volumes keep their type");
  }
  if (o_.jpeg_quality > 0 || o_.jpeg_restarts) {
    return refuse(Opt("BuildOptions::jpeg_quality") + " / " + Opt("BuildOptions::jpeg_restarts"),
                  "would store slices lossily; they are stored losslessly");
  }
  if (o_.gray) {
    return refuse(Opt("BuildOptions::gray"),
                  "has no meaning for volumes: their channels are modalities, not colours");
  }
  if (o_.skip_empty && !sources_.has_masks) {
    return refuse(Opt("BuildOptions::skip_empty"),
                  "needs label volumes (a labelsTr/, labels/ or masks/ folder beside the "
                  "images): it leaves out the slices whose label is all 0; drop it to build "
                  "every slice");
  }
  volume::SliceAxis axis = volume::SliceAxis::kAxial;
  DSPIPE_RETURN_IF_ERROR(volume::ParseSliceAxis(o_.slice_axis, &axis));
  const DecodeLimits lim = GetDecodeLimits();
  for (const VolumeSource& v : sources_.volumes) {
    if (!v.error.empty()) continue;
    DSPIPE_RETURN_IF_ERROR(CheckContextChannels(v.image, o_.context, v.info.channels));
    if (o_.spacing_rows > 0) {
      const std::array<int64_t, 2> hw = ResampledSliceShape(v.info, axis);
      if (hw[0] > lim.max_side || hw[1] > lim.max_side ||
          static_cast<uint64_t>(hw[0]) * static_cast<uint64_t>(hw[1]) > lim.max_pixels) {
        const std::array<double, 2> sp = volume::SliceSpacing(v.info, axis);
        char from[64];
        std::snprintf(from, sizeof from, "%gx%g mm", sp[0], sp[1]);
        return Status::BadInput(
            v.image + ": its " + volume::SliceAxisName(axis) + " slices at " + from + " become " +
            std::to_string(hw[0]) + "x" + std::to_string(hw[1]) + " at " +
            Opt("BuildOptions::spacing_rows,BuildOptions::spacing_cols") +
            ", beyond the decode limits (--max-image-side " + std::to_string(lim.max_side) +
            ", --max-image-pixels " + std::to_string(lim.max_pixels) + "): ask for a coarser "
            "spacing");
      }
    }
  }
  return Status::OK();
}

std::array<int64_t, 2> Builder::ResampledSliceShape(const volume::VolumeInfo& info,
                                                    volume::SliceAxis axis) const {
  const std::array<double, 2> sp = volume::SliceSpacing(info, axis);
  int row = 0, col = 0;
  volume::PlaneAxes(axis, &row, &col);
  return {volume::ResampledLength(info.canon_dim[row], sp[0], o_.spacing_rows),
          volume::ResampledLength(info.canon_dim[col], sp[1], o_.spacing_cols)};
}

Status Builder::PlanSkipEmpty(volume::SliceAxis axis,
                              std::map<std::string, std::vector<uint8_t>>* kept, uint64_t* empty) {
  uint8_t lut[256];
  for (int i = 0; i < 256; ++i) lut[i] = static_cast<uint8_t>(i);
  if (!o_.mask_map.empty()) DSPIPE_RETURN_IF_ERROR(ParseMaskMap(o_.mask_map, lut));
  std::vector<const VolumeSource*> todo;
  for (const VolumeSource& v : sources_.volumes) {
    if (v.error.empty() && !v.label.empty()) todo.push_back(&v);
  }
  Log(LogLevel::kInfo, o_.source + ": reading " + std::to_string(todo.size()) +
                           " label volumes to find the slices without foreground "
                           "(skip_empty, --skip-empty)");
  std::vector<Status> status(todo.size());
  std::vector<std::vector<uint8_t>> fg(todo.size());
  std::mutex cancel_mu;
  std::atomic<bool> cancelled{false};
  // A few at a time: each is a whole label volume in memory.
  tbb::task_arena arena(std::min(o_.threads > 0 ? o_.threads : UsableCpus(), 4));
  arena.execute([&] {
    tbb::parallel_for(size_t{0}, todo.size(), [&](size_t i) {
      if (o_.cancelled) {
        std::lock_guard<std::mutex> lock(cancel_mu);
        if (o_.cancelled()) cancelled = true;
      }
      if (cancelled.load()) return;
      volume::Volume label;
      status[i] = volume::ReadNifti(todo[i]->label, /*label=*/true, &label);
      if (status[i].ok()) ForegroundSlices(label, axis, lut, &fg[i]);
    });
  });
  if (cancelled.load()) {
    return Status::Cancelled("build interrupted while reading the label volumes for " +
                             Opt("BuildOptions::skip_empty") + " (nothing was written)");
  }
  std::map<std::string, std::string> bad;  // image -> why its label could not be read
  for (size_t i = 0; i < todo.size(); ++i) {
    const VolumeSource& v = *todo[i];
    if (status[i].code() == Status::Code::kIOError) return status[i];
    if (!status[i].ok()) {
      bad[v.image] = status[i].message();  // ReadNifti's messages name the label file
    } else if (static_cast<int64_t>(fg[i].size()) != v.slices) {
      bad[v.image] = v.label + ": " + std::to_string(fg[i].size()) + " slices, its image " +
                     std::to_string(v.slices) + " (the file changed while the build was planned)";
    } else {
      (*kept)[v.image] = std::move(fg[i]);
    }
  }
  *empty = 0;
  std::vector<SourceItem> plan;
  plan.reserve(plan_.size());
  for (SourceItem& it : plan_) {
    auto b = bad.find(it.image);
    if (b != bad.end()) {  // one item carries the reason, as for a volume known bad when scanned
      if (!plan.empty() && plan.back().image == it.image) continue;
      it.error = b->second;
      it.slice = 0;
      plan.push_back(std::move(it));
      continue;
    }
    auto k = kept->find(it.image);
    if (k != kept->end() && it.error.empty() && !k->second[static_cast<size_t>(it.slice)]) {
      ++*empty;
      continue;
    }
    plan.push_back(std::move(it));
  }
  plan_ = std::move(plan);
  if (plan_.empty()) {
    return Status::BadInput(o_.source + ": every label slice is empty (all 0" +
                            (o_.mask_map.empty() ? std::string() : " after the mask map") +
                            "), so " + Opt("BuildOptions::skip_empty") +
                            " keeps nothing; drop it to build every slice");
  }
  return Status::OK();
}

void Builder::SetPlanCounts() {
  const json& volumes = plan_meta_.value("volumes", json::object());
  foreground_table_ = volumes.is_object() && volumes.value("foreground", false);
  result_->empty_slices = plan_meta_.contains("empty_slices")
                              ? static_cast<uint64_t>(Accum::Int(plan_meta_.at("empty_slices")))
                              : 0;
}

std::string Builder::PlanDigest() const {
  uint32_t crc = 0;
  auto add = [&crc](const std::string& v) {
    crc = core::Crc32({reinterpret_cast<const uint8_t*>(v.data()), v.size() + 1}, crc);  // with NUL
  };
  for (const SourceItem& it : plan_) {
    add(it.image);
    add(it.mask);
    add(std::to_string(it.label) + "," + std::to_string(it.plain_index) +
        (it.slice >= 0 ? "," + std::to_string(it.slice) : ""));
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
    DSPIPE_RETURN_IF_ERROR(format::LmdbEnv::OpenForWrite(ShardPath(StateShard()), &env0_));
    DSPIPE_RETURN_IF_ERROR(env0_->GetMeta(kBuildStateKey, &text, &found));
  }
  if (!fresh && found) {
    const std::string where = ShardPath(StateShard()) + " (meta " + kBuildStateKey + ")";
    json state;
    DSPIPE_RETURN_IF_ERROR(ParseStored(text, where, &state));
    try {
      DSPIPE_RETURN_IF_ERROR(CheckResumeOptions(state.at("options"), want, o_.output));
      for (const json& p : state.at("plan")) {
        plan_.push_back(
            {p.at(0).get<std::string>(), p.at(1).get<std::string>(),
             static_cast<int>(Accum::Int(p.at(2))), p.at(3).get<std::string>(),
             p.size() > 4 ? Accum::Int(p.at(4)) : -1, p.size() > 6 ? Accum::Int(p.at(5)) : -1,
             p.size() > 6 ? Accum::Int(p.at(6)) : -1, p.size() > 7 ? Accum::Int(p.at(7)) : -1});
      }
      plan_meta_ = state.at("meta");
      for (const char* k : {"kind", "has_masks", "has_labels", "class_names"}) {
        (void)plan_meta_.at(k);
      }
    } catch (const json::exception& e) {
      return Status::Corruption(where + ": bad build state: " + e.what());
    }
    SetPlanCounts();
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
  volume::SliceAxis axis = volume::SliceAxis::kAxial;
  DSPIPE_RETURN_IF_ERROR(volume::ParseSliceAxis(o_.slice_axis, &axis));
  DSPIPE_RETURN_IF_ERROR(
      ScanSources(o_.source, o_.plain, &sources_, o_.archive_buffer_bytes, env_, axis));
  if (sources_.kind == "volumes") {
    DSPIPE_RETURN_IF_ERROR(CheckVolumeOptions());
  } else if (o_.skip_empty || o_.context > 0 || o_.spacing_rows > 0 || o_.slice_height > 0) {
    return Status::InvalidArgument(
        o_.source + ": " +
        (o_.skip_empty         ? Opt("BuildOptions::skip_empty")
         : o_.context > 0      ? Opt("BuildOptions::context")
         : o_.spacing_rows > 0 ? Opt("BuildOptions::spacing_rows,BuildOptions::spacing_cols")
                               : Opt("BuildOptions::slice_height,BuildOptions::slice_width")) +
        " applies to volume sources (a folder of NIfTI volumes, docs/VOLUMES.md), and this is a " +
        sources_.kind + " source of 2D images: drop it" +
        (o_.slice_height > 0 ? "; 2D images are sized by " +
                                   Opt("BuildOptions::resize_height,BuildOptions::resize_width")
                             : std::string()));
  }
  DSPIPE_RETURN_IF_ERROR(CheckEmptyClasses());
  plain_ = sources_.plain;  // its pairing line and warnings were logged when it was opened
  archive_ = sources_.archive;
  for (const std::string& w : sources_.warnings) Log(LogLevel::kWarn, w);
  plan_ = sources_.items;
  if (o_.shuffle && sources_.kind == "volumes") {
    // The volumes' order is shuffled; a volume's slices stay together, so each is read once.
    std::vector<std::vector<SourceItem>> groups;
    for (SourceItem& it : plan_) {
      if (groups.empty() || groups.back().front().image != it.image) groups.emplace_back();
      groups.back().push_back(std::move(it));
    }
    std::mt19937_64 rng(o_.seed);
    for (size_t i = groups.size(); i > 1; --i) {
      std::swap(groups[i - 1], groups[std::uniform_int_distribution<size_t>(0, i - 1)(rng)]);
    }
    plan_.clear();
    for (auto& g : groups) {
      for (SourceItem& it : g) plan_.push_back(std::move(it));
    }
  } else if (o_.shuffle) {
    std::mt19937_64 rng(o_.seed);
    for (size_t i = plan_.size(); i > 1; --i) {
      std::swap(plan_[i - 1], plan_[std::uniform_int_distribution<size_t>(0, i - 1)(rng)]);
    }
  }
  // The volumes in plan order, before skip_empty leaves slices out (a volume may keep none).
  std::vector<std::string> volume_order;
  std::map<std::string, std::vector<uint8_t>> kept;
  uint64_t empty = 0;
  if (sources_.kind == "volumes") {
    for (size_t i = 0; i < plan_.size(); ++i) {
      if (i == 0 || plan_[i].image != plan_[i - 1].image) volume_order.push_back(plan_[i].image);
    }
    if (o_.skip_empty) DSPIPE_RETURN_IF_ERROR(PlanSkipEmpty(axis, &kept, &empty));
  }
  if (archive_ != nullptr) DSPIPE_RETURN_IF_ERROR(CheckArchiveOrder());
  if (env0_ == nullptr)
    DSPIPE_RETURN_IF_ERROR(format::LmdbEnv::OpenForWrite(ShardPath(StateShard()), &env0_));
  plan_meta_ = {{"kind", sources_.kind},
                {"has_masks", sources_.has_masks},
                {"has_labels", sources_.has_labels},
                {"class_names", sources_.class_names}};
  if (sources_.kind == "volumes") plan_meta_["volumes"] = VolumeTable(axis, volume_order, kept);
  if (o_.skip_empty) plan_meta_["empty_slices"] = empty;
  SetPlanCounts();
  json p = json::array();
  for (const SourceItem& it : plan_) {
    p.push_back(it.slice >= 0 ? json{it.image, it.mask, it.label, it.error, -1, -1, -1, it.slice}
                : it.archive_image >= 0 ? json{it.image, it.mask, it.label, it.error, -1,
                                               it.archive_image, it.archive_mask}
                : it.plain_index >= 0 ? json{it.image, it.mask, it.label, it.error, it.plain_index}
                                      : json{it.image, it.mask, it.label, it.error});
  }
  // What was read from SRC, so that a later --resume can tell whether it changed since.
  std::vector<SourceStamp> stamps;
  DSPIPE_RETURN_IF_ERROR(StampSources(o_.source, o_.plain, sources_, &stamps));
  format::LmdbEnv::Writer w(env0_.get());
  w.PutMeta(
      kBuildStateKey,
      json{{"options", want}, {"plan", p}, {"meta", plan_meta_}, {"sources", StampsJson(stamps)}}
          .dump());
  return w.Commit();
}

Status Builder::CheckSourceUnchanged(const json& state, const SourceList* current, bool finished) {
  if (!state.is_object() || !state.contains("sources")) {
    Log(LogLevel::kInfo, o_.output +
                             ": built by an older dspipe, which did not record what it "
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
  // is read as a whole: any change to them is refused. So is any with skip_empty: the plan was
  // made from the label volumes' contents.
  const bool per_file = current->archive == nullptr && current->kind != "plain-lmdb";
  if (finished || !changes.added_or_removed.empty() || !per_file ||
      changes.changed.count(o_.source)) {
    return refuse(changes.First());
  }
  if (o_.skip_empty) {
    return refuse(changes.First() + "; with " + Opt("BuildOptions::skip_empty") +
                  " the slices to build were chosen from the label volumes as they were");
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
  format::LmdbEnv::Writer w(env0_.get());
  w.PutMeta(kBuildStateKey, updated.dump());
  return w.Commit();
}

Status Builder::CommittedEnd(int shard, uint64_t* end) {
  *end = ShardBegin(shard);
  std::unique_ptr<format::LmdbEnv> own;
  format::LmdbEnv* env = env0_.get();
  if (shard != StateShard()) {
    if (!env_->FileExists(ShardPath(shard) + "/data.mdb")) return Status::OK();  // not begun
    DSPIPE_RETURN_IF_ERROR(format::LmdbEnv::OpenReadOnly(ShardPath(shard), 16, false, &own));
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
  std::unique_ptr<format::LmdbEnv> env;
  DSPIPE_RETURN_IF_ERROR(format::LmdbEnv::OpenReadOnly(ShardPath(StateShard()), 16, false, &env));
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

}  // namespace dspipe::convert
