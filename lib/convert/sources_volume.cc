// SPDX-License-Identifier: Apache-2.0
// Volume sources (sources.h): a folder of NIfTI images or DICOM series with their label
// volumes, one item per slice.
#include <algorithm>
#include <cctype>
#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>

#include "convert/sources.h"

namespace dspipe::convert {

namespace fs = std::filesystem;
using json = nlohmann::json;

namespace {

// The name without .nii / .nii.gz (any case): what images and labels pair by.
std::string VolumeStem(const std::string& name) {
  std::string l = name;
  std::transform(l.begin(), l.end(), l.begin(), [](unsigned char c) { return std::tolower(c); });
  for (const char* ext : {".nii.gz", ".nii"}) {
    const size_t n = std::string(ext).size();
    if (l.size() > n && l.compare(l.size() - n, n, ext) == 0)
      return name.substr(0, name.size() - n);
  }
  return name;
}

// The regular, non-hidden files of dir (and its folders, with `folders`), sorted. (Decathlon
// archives carry "._x.nii.gz" macOS metadata files beside each volume: hidden, skipped.)
Status ListFiles(Env* env, const fs::path& dir, std::vector<std::string>* out,
                 bool folders = false) {
  std::vector<std::string> names;
  Status s = env->ListDir(dir.string(), &names);
  if (!s.ok()) return s.WithContext("list " + dir.string());
  for (const std::string& n : names) {
    if (n.empty() || n[0] == '.') continue;
    FileKind kind = FileKind::kMissing;
    DSPIPE_RETURN_IF_ERROR(env->GetFileKind((dir / n).string(), &kind));
    if (kind == FileKind::kRegular || (folders && kind == FileKind::kDirectory)) {
      out->push_back(n);
    }
  }
  std::sort(out->begin(), out->end());
  return Status::OK();
}

// SRC/dataset.json parsed into *j (discarded when it is not JSON); *present false, and *j
// untouched, when there is no such file.
Status ParseDatasetJson(Env* env, const fs::path& src, json* j, bool* present) {
  const fs::path file = src / "dataset.json";
  FileKind kind = FileKind::kMissing;
  DSPIPE_RETURN_IF_ERROR(env->GetFileKind(file.string(), &kind));
  *present = kind == FileKind::kRegular;
  if (!*present) return Status::OK();
  std::string text;
  DSPIPE_RETURN_IF_ERROR(env->ReadFile(file.string(), &text));
  *j = json::parse(text, nullptr, /*allow_exceptions=*/false);
  return Status::OK();
}

// A Decathlon dataset.json's "labels" ({"0": "background", "1": "tumour"}, or nnU-Net v2's
// {"background": 0, "tumour": 1}) as class names by id; an absent file gives none; a present
// one that is not that is an error naming it.
Status ReadClassNames(Env* env, const fs::path& src, std::vector<std::string>* out,
                      std::vector<std::string>* warnings) {
  const fs::path file = src / "dataset.json";
  json j;
  bool present = false;
  DSPIPE_RETURN_IF_ERROR(ParseDatasetJson(env, src, &j, &present));
  if (!present) return Status::OK();
  if (j.is_discarded() || !j.is_object()) {
    return Status::BadInput(file.string() + ": not a JSON object (the Decathlon dataset.json)");
  }
  if (!j.contains("labels")) return Status::OK();
  const json& labels = j.at("labels");
  if (!labels.is_object()) {
    return Status::BadInput(file.string() + ": \"labels\" is not an object of id: name");
  }
  std::map<int, std::string> by_id;
  // nnU-Net v2 writes them the other way round: {"background": 0, "tumour": 1}; region-based
  // training lists ids ({"whole tumour": [1, 2, 3]}), which name no class.
  bool by_name = !labels.empty();
  for (const auto& [k, v] : labels.items())
    by_name = by_name && (v.is_number_integer() || v.is_array());
  if (by_name) {
    for (const auto& [k, v] : labels.items()) {
      if (v.is_array()) {
        warnings->push_back(file.string() + ": \"labels\" has regions (\"" + k +
                            "\": a list of ids), which name no class; the dataset keeps no "
                            "class names");
        return Status::OK();
      }
      const int64_t id = v.get<int64_t>();
      if (id < 0 || id > 65535 || by_id.count(static_cast<int>(id))) {
        return Status::BadInput(file.string() + ": \"labels\" entry \"" + k + "\": " +
                                std::to_string(id) + " is not a class id (0..65535) of its own");
      }
      by_id[static_cast<int>(id)] = k;
    }
  }
  for (const auto& [k, v] : labels.items()) {
    if (by_name) break;
    char* end = nullptr;
    const long id = std::strtol(k.c_str(), &end, 10);
    if (k.empty() || *end != '\0' || id < 0 || id > 65535 || !v.is_string()) {
      return Status::BadInput(file.string() + ": \"labels\" entry \"" + k +
                              "\" is not a class id (0..65535) with a name, nor a name with a "
                              "class id (nnU-Net's way)");
    }
    by_id[static_cast<int>(id)] = v.get<std::string>();
  }
  if (by_id.empty()) return Status::OK();
  out->assign(static_cast<size_t>(by_id.rbegin()->first) + 1, "");
  for (const auto& [id, name] : by_id) (*out)[static_cast<size_t>(id)] = name;
  for (size_t i = 0; i < out->size(); ++i) {
    if ((*out)[i].empty()) {
      return Status::BadInput(file.string() + ": \"labels\" names no class " + std::to_string(i) +
                              " (ids must run 0..N-1)");
    }
  }
  return Status::OK();
}

// nnU-Net's names for the channels of a case: CASE_XXXX.nii[.gz], XXXX four digits (the channel).
bool ChannelName(const std::string& name, std::string* case_stem, int* channel) {
  if (!volume::IsNiftiName(name)) return false;
  const std::string stem = VolumeStem(name);
  if (stem.size() < 6 || stem[stem.size() - 5] != '_') return false;
  int c = 0;
  for (size_t i = stem.size() - 4; i < stem.size(); ++i) {
    if (!std::isdigit(static_cast<unsigned char>(stem[i]))) return false;
    c = c * 10 + (stem[i] - '0');
  }
  *case_stem = stem.substr(0, stem.size() - 5);
  *channel = c;
  return true;
}

// A case of a volume source: its name (what its label is named after), its image files in
// channel order, and what is wrong with it.
struct Case {
  std::string stem;
  std::vector<std::string> files;
  std::string error;
};

// The cases when the images are named as nnU-Net names channels (CASE_0000.nii.gz,
// CASE_0001.nii.gz, ...; labels CASE.nii.gz): every image is so named, and either a label is
// named after a case and none after a whole image name, or there are no labels and
// dataset.json names `named_channels` channels, each case having that many. Empty otherwise
// (each file is then a volume of its own). A case whose channels do not run 0000..N-1, with one
// N for all cases, carries the error.
std::vector<Case> ChannelCases(const std::vector<std::string>& images,
                               const std::map<std::string, std::vector<std::string>>& labels,
                               size_t named_channels) {
  std::map<std::string, std::map<int, std::string>> by_case;
  for (const std::string& f : images) {
    std::string stem;
    int channel = 0;
    if (!ChannelName(f, &stem, &channel)) return {};
    if (!by_case[stem].emplace(channel, f).second) return {};  // x_0000.nii and x_0000.nii.gz
  }
  if (by_case.empty()) return {};
  if (!labels.empty()) {
    bool named_after_a_case = false;
    for (const auto& [stem, files] : labels) named_after_a_case |= by_case.count(stem) > 0;
    if (!named_after_a_case) return {};
    for (const std::string& f : images) {
      if (labels.count(VolumeStem(f))) return {};
    }
  } else if (named_channels == 0) {
    return {};
  }
  size_t want = named_channels;
  if (want == 0) {  // the most common count
    std::map<size_t, int> counts;
    for (const auto& [stem, ch] : by_case) ++counts[ch.size()];
    for (const auto& [n, k] : counts) {
      if (want == 0 || k > counts[want]) want = n;
    }
  }
  std::vector<Case> out;
  for (const auto& [stem, ch] : by_case) {
    Case c{stem, {}, ""};
    for (const auto& [channel, f] : ch) c.files.push_back(f);
    int expect = 0;
    for (const auto& [channel, f] : ch) {
      if (channel != expect) {
        char name[32];
        std::snprintf(name, sizeof name, "_%04d", expect);
        c.error = "channel " + std::to_string(expect) + " (" + stem + name +
                  ".nii[.gz]) is missing among its channel files";
        break;
      }
      ++expect;
    }
    if (c.error.empty() && ch.size() != want) {
      c.error = "it has " + std::to_string(ch.size()) +
                (ch.size() == 1 ? " channel file" : " channel files") + " and the dataset " +
                std::to_string(want) + (named_channels ? " (dataset.json's channel names)" : "");
    }
    out.push_back(std::move(c));
  }
  return out;
}

// dataset.json's channel names (nnU-Net v2 "channel_names", Decathlon / nnU-Net v1 "modality":
// {"0": "T1", "1": "T2"}), ids 0..N-1; none when absent.
Status ReadChannelNames(Env* env, const fs::path& src, std::vector<std::string>* out) {
  const fs::path file = src / "dataset.json";
  json j;
  bool present = false;
  DSPIPE_RETURN_IF_ERROR(ParseDatasetJson(env, src, &j, &present));
  if (!present || j.is_discarded() || !j.is_object())
    return Status::OK();  // ReadClassNames says so
  const char* key = j.contains("channel_names") ? "channel_names" : "modality";
  if (!j.contains(key)) return Status::OK();
  const json& names = j.at(key);
  std::map<long, std::string> by_id;
  if (names.is_object()) {
    for (const auto& [k, v] : names.items()) {
      char* end = nullptr;
      const long id = std::strtol(k.c_str(), &end, 10);
      if (k.empty() || *end != '\0' || id < 0 || id >= kMaxChannels || !v.is_string()) {
        by_id.clear();
        break;
      }
      by_id[id] = v.get<std::string>();
    }
  }
  if (by_id.empty() || by_id.rbegin()->first + 1 != static_cast<long>(by_id.size())) {
    return Status::BadInput(file.string() + ": \"" + key +
                            "\" is not an object of channel id: name with ids 0..N-1");
  }
  for (const auto& [id, name] : by_id) out->push_back(name);
  return Status::OK();
}
}  // namespace

bool HasVolumes(Env* env, const std::string& source) {
  for (const char* d : {"images", "imagesTr"}) {
    std::vector<std::string> files;
    const fs::path dir = fs::path(source) / d;
    if (!ListFiles(env, dir, &files, /*folders=*/true).ok()) continue;
    for (const std::string& f : files) {
      if (volume::IsNiftiName(f) || volume::IsDicomSeriesDir((dir / f).string())) return true;
    }
  }
  return false;
}

Status ScanVolumes(Env* env, const std::string& source, volume::SliceAxis axis, SourceList* out) {
  out->kind = "volumes";
  const fs::path src(source);
  auto is_dir = [&](const char* d) {
    FileKind k = FileKind::kMissing;
    return env->GetFileKind((src / d).string(), &k).ok() && k == FileKind::kDirectory;
  };
  const std::string images_dir = is_dir("images") ? "images" : "imagesTr";
  std::string labels_dir;
  for (const char* d : {"labelsTr", "labels", "masks"}) {
    if (is_dir(d)) {
      labels_dir = d;
      break;
    }
  }
  std::vector<std::string> images, labels;
  DSPIPE_RETURN_IF_ERROR(ListFiles(env, src / images_dir, &images, /*folders=*/true));
  for (const std::string& f : images) {
    const std::string path = (src / images_dir / f).string();
    if (volume::IsNiftiName(f) || volume::IsDicomSeriesDir(path)) continue;
    FileKind kind = FileKind::kMissing;
    DSPIPE_RETURN_IF_ERROR(env->GetFileKind(path, &kind));
    if (kind == FileKind::kDirectory) {
      return Status::BadInput(path +
                              ": a folder that is not a DICOM series (its first file is not "
                              "DICOM) in a folder of volumes; each folder under " +
                              images_dir + "/ holds one DICOM series");
    }
    if (volume::IsDicomFile(path)) {
      return Status::BadInput(path + ": a DICOM file directly in " + images_dir +
                              "/; put each series' files in a folder of its own (" + images_dir +
                              "/<case>/*.dcm), which is read as one volume");
    }
    return Status::BadInput(path +
                            ": not a NIfTI volume (.nii, .nii.gz) or a DICOM series folder in a "
                            "folder of volumes; volumes and 2D images are built as separate "
                            "datasets");
  }
  std::map<std::string, std::vector<std::string>> label_by_stem;
  if (!labels_dir.empty()) {
    DSPIPE_RETURN_IF_ERROR(ListFiles(env, src / labels_dir, &labels));
    for (const std::string& f : labels) {
      if (volume::IsNiftiName(f)) label_by_stem[VolumeStem(f)].push_back(f);
    }
  }
  DSPIPE_RETURN_IF_ERROR(ReadClassNames(env, src, &out->class_names, &out->warnings));
  DSPIPE_RETURN_IF_ERROR(ReadChannelNames(env, src, &out->channel_names));
  out->has_masks = !labels_dir.empty();
  // The volumes: one per file or series folder, or one per case when the files are named as
  // nnU-Net names the channels of a case (ChannelCases).
  std::vector<Case> cases = ChannelCases(images, label_by_stem, out->channel_names.size());
  const bool by_channel = !cases.empty();
  if (!by_channel) {
    for (const std::string& f : images) cases.push_back({VolumeStem(f), {f}, ""});
  }
  std::map<std::string, int> stems;
  for (const Case& c : cases) ++stems[c.stem];
  for (const Case& c : cases) {
    VolumeSource v;
    v.image = (src / images_dir / c.files[0]).string();
    if (by_channel) {
      for (const std::string& f : c.files) v.channels.push_back((src / images_dir / f).string());
    }
    const std::string& stem = c.stem;
    if (!c.error.empty()) {
      v.error = c.error;
    } else if (stems[stem] > 1) {
      v.error = "several volumes share the name '" + stem + "' (.nii and .nii.gz)";
    } else if (!labels_dir.empty()) {
      auto it = label_by_stem.find(stem);
      if (it == label_by_stem.end()) {
        v.error = "no label volume named '" + stem + ".nii[.gz]' in " + (src / labels_dir).string();
      } else if (it->second.size() > 1) {
        v.error =
            "several label volumes named '" + stem + ".nii[.gz]' in " + (src / labels_dir).string();
      } else {
        v.label = (src / labels_dir / it->second[0]).string();
      }
    }
    if (v.error.empty()) {
      Status s = v.channels.empty() ? volume::ReadVolumeInfo(v.image, &v.info)
                                    : volume::ReadChannelsInfo(v.channels, &v.info);
      if (s.ok() && !v.label.empty()) {
        volume::VolumeInfo li;
        s = volume::ReadNiftiInfo(v.label, &li);
        if (s.ok()) s = volume::CheckLabelMatches(v.info, li);
      }
      if (s.code() == Status::Code::kIOError) return s;
      if (!s.ok()) {
        v.error = s.message();  // the item names the image: its own name is not said twice
        if (v.error.rfind(v.image + ": ", 0) == 0) v.error.erase(0, v.image.size() + 2);
      }
    }
    v.slices = v.error.empty() ? volume::SliceCount(v.info, axis) : 0;
    // One item per slice; a volume known bad is one item carrying the reason.
    for (int64_t k = 0; k < std::max<int64_t>(v.slices, 1); ++k) {
      SourceItem item;
      item.image = v.image;
      item.mask = v.label;
      item.error = v.error;
      item.slice = k;
      out->items.push_back(std::move(item));
    }
    out->volumes.push_back(std::move(v));
  }
  for (const auto& [stem, files] : label_by_stem) {
    if (!stems.count(stem)) {
      out->warnings.push_back("label volume " + (src / labels_dir / files[0]).string() +
                              " has no image; ignored");
    }
  }
  return Status::OK();
}

}  // namespace dspipe::convert
