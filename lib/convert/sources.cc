// SPDX-License-Identifier: Apache-2.0
#include "convert/sources.h"

#include <csv.h>

#include <algorithm>
#include <cctype>
#include <filesystem>
#include <functional>
#include <map>

#include "convert/sources_archive.h"
#include "volume/volume.h"

namespace dspipe::convert {
namespace {

namespace fs = std::filesystem;

bool Hidden(const std::string& name) { return name.empty() || name[0] == '.'; }

std::string Join(const std::string& dir, const std::string& name) {
  return dir.empty() ? name : dir + "/" + name;
}

// Where the samples are listed from: a directory walk or an archive's member list. The layout
// rules below (pairing, labels, errors) see only this, so folders and archives share them.
// Paths are relative to the tree's root ("" is the root), '/'-separated.
class SourceTree {
 public:
  virtual ~SourceTree() = default;
  // Regular, non-hidden files directly inside dir, sorted by name (bytewise).
  virtual Status Files(const std::string& dir, std::vector<std::string>* out) const = 0;
  // Non-hidden directories directly inside dir, sorted by name.
  virtual Status Dirs(const std::string& dir, std::vector<std::string>* out) const = 0;
  virtual bool IsDir(const std::string& dir) const = 0;
  // What items and messages call rel.
  virtual std::string Name(const std::string& rel) const = 0;
  // The archive entry number of file rel; -1 for folders.
  virtual int64_t Ordinal(const std::string&) const { return -1; }
};

// A folder on disk, walked through the Env (so tests can inject faults into the walk).
class DirTree : public SourceTree {
 public:
  DirTree(Env* env, fs::path root) : env_(env), root_(std::move(root)) {}
  Status Files(const std::string& dir, std::vector<std::string>* out) const override {
    return List(dir, FileKind::kRegular, out);
  }
  Status Dirs(const std::string& dir, std::vector<std::string>* out) const override {
    return List(dir, FileKind::kDirectory, out);
  }
  bool IsDir(const std::string& dir) const override {
    FileKind kind = FileKind::kMissing;
    return env_->GetFileKind(Name(dir), &kind).ok() && kind == FileKind::kDirectory;
  }
  std::string Name(const std::string& rel) const override { return Path(rel).string(); }

 private:
  fs::path Path(const std::string& rel) const { return rel.empty() ? root_ : root_ / rel; }
  // The non-hidden entries of dir of the given kind (symlinks followed, as before the Env).
  Status List(const std::string& dir, FileKind want, std::vector<std::string>* out) const {
    std::vector<std::string> names, found;
    Status s = env_->ListDir(Name(dir), &names);
    if (!s.ok()) return s.WithContext("list " + Name(dir));
    for (const std::string& n : names) {
      if (Hidden(n)) continue;
      FileKind kind = FileKind::kMissing;
      DSPIPE_RETURN_IF_ERROR(env_->GetFileKind((Path(dir) / n).string(), &kind));
      if (kind == want) found.push_back(n);
    }
    std::sort(found.begin(), found.end());
    for (const std::string& n : found) out->push_back(Join(dir, n));
    return Status::OK();
  }
  Env* env_;
  fs::path root_;
};

// An archive's members below `root` (its single top-level folder, or "").
class ArchiveTree : public SourceTree {
 public:
  ArchiveTree(const ArchiveSource& ar, std::string root) : ar_(ar), root_(std::move(root)) {}
  Status Files(const std::string& dir, std::vector<std::string>* out) const override {
    Children(ar_.files(), dir, out);
    return Status::OK();
  }
  Status Dirs(const std::string& dir, std::vector<std::string>* out) const override {
    Children(ar_.dirs(), dir, out);
    return Status::OK();
  }
  bool IsDir(const std::string& dir) const override { return ar_.IsDir(Full(dir)); }
  std::string Name(const std::string& rel) const override {
    const std::string full = Full(rel);
    return full.empty() ? ar_.source() : ar_.Name(full);
  }
  int64_t Ordinal(const std::string& rel) const override {
    auto it = ar_.files().find(Full(rel));
    return it == ar_.files().end() ? -1 : it->second.ordinal;
  }
  std::string Full(const std::string& rel) const { return Join(root_, rel); }

 private:
  // The direct, non-hidden children of dir among the keys of `m` (sorted: map order).
  template <typename Map>
  void Children(const Map& m, const std::string& dir, std::vector<std::string>* out) const {
    const std::string full = Full(dir);
    const std::string prefix = full.empty() ? "" : full + "/";
    for (auto it = m.lower_bound(prefix); it != m.end(); ++it) {
      const std::string& p = it->first;
      if (p.compare(0, prefix.size(), prefix) != 0) break;
      const std::string name = p.substr(prefix.size());
      if (name.empty() || name.find('/') != std::string::npos || Hidden(name)) continue;
      out->push_back(Join(dir, name));
    }
  }
  const ArchiveSource& ar_;
  std::string root_;
};

std::string Stem(const std::string& rel) { return fs::path(rel).stem().string(); }

void SetImage(const SourceTree& t, const std::string& rel, SourceItem* item) {
  item->image = t.Name(rel);
  item->archive_image = t.Ordinal(rel);
}

Status ScanFolder(const SourceTree& t, SourceList* out) {
  out->kind = "folder";
  std::vector<std::string> images, masks;
  DSPIPE_RETURN_IF_ERROR(t.Files("images", &images));
  out->has_masks = t.IsDir("masks");
  std::map<std::string, std::vector<std::string>> by_stem;
  if (out->has_masks) {
    DSPIPE_RETURN_IF_ERROR(t.Files("masks", &masks));
    for (const std::string& m : masks) by_stem[Stem(m)].push_back(m);
  }
  std::map<std::string, int> image_stems;
  for (const std::string& img : images) ++image_stems[Stem(img)];
  for (const std::string& img : images) {
    SourceItem item;
    SetImage(t, img, &item);
    const std::string stem = Stem(img);
    if (image_stems[stem] > 1) {
      item.error = "several images share the stem '" + stem + "'; masks pair by stem";
    } else if (out->has_masks) {
      auto it = by_stem.find(stem);
      if (it == by_stem.end()) {
        item.error = "no mask named '" + stem + ".*' in " + t.Name("masks");
      } else if (it->second.size() > 1) {
        item.error = "several masks named '" + stem + ".*' in " + t.Name("masks");
      } else {
        item.mask = t.Name(it->second[0]);
        item.archive_mask = t.Ordinal(it->second[0]);
      }
    }
    out->items.push_back(std::move(item));
  }
  for (const auto& [stem, files] : by_stem) {
    if (!image_stems.count(stem)) {
      out->warnings.push_back("mask " + t.Name(files[0]) + " has no image; ignored");
    }
  }
  return Status::OK();
}

Status ScanImageFolder(const SourceTree& t, SourceList* out) {
  out->kind = "imagefolder";
  out->has_labels = true;
  std::vector<std::string> classes;
  DSPIPE_RETURN_IF_ERROR(t.Dirs("", &classes));
  if (classes.empty()) {
    return Status::BadInput(t.Name("") +
                            ": no images/ folder, no class subfolders: not a dataset");
  }
  for (size_t label = 0; label < classes.size(); ++label) {
    out->class_names.push_back(fs::path(classes[label]).filename().string());
    std::vector<std::string> files;
    DSPIPE_RETURN_IF_ERROR(t.Files(classes[label], &files));
    // torchvision's ImageFolder refuses it unless allow_empty=True; so does the build
    // (BuildPlan, BuildOptions::allow_empty_classes).
    if (files.empty()) {
      out->empty_classes.emplace_back(static_cast<int>(label), t.Name(classes[label]));
    }
    for (const std::string& f : files) {
      SourceItem item;
      SetImage(t, f, &item);
      item.label = static_cast<int>(label);
      out->items.push_back(std::move(item));
    }
  }
  return Status::OK();
}

struct CsvState {
  std::vector<std::string> row;
  std::vector<std::vector<std::string>> rows;
};

// A CSV cell's path as an item's name (+ archive entry), or the reason it names no file.
using CsvResolve = std::function<void(const std::string& cell, std::string* name,
                                      int64_t* ordinal, std::string* error)>;

// csv_name names the CSV in messages; text is its content.
Status ScanCsv(const std::string& csv_name, const std::string& text, const CsvResolve& resolve,
               SourceList* out) {
  out->kind = "csv";
  csv_parser p;
  if (csv_init(&p, CSV_STRICT | CSV_STRICT_FINI | CSV_APPEND_NULL) != 0) {
    return Status::Internal("csv_init failed");
  }
  CsvState st;
  auto on_field = [](void* s, size_t n, void* d) {
    static_cast<CsvState*>(d)->row.emplace_back(static_cast<const char*>(s), n);
  };
  auto on_row = [](int, void* d) {
    auto* state = static_cast<CsvState*>(d);
    state->rows.push_back(std::move(state->row));
    state->row.clear();
  };
  const bool parsed = csv_parse(&p, text.data(), text.size(), on_field, on_row, &st) ==
                          text.size() &&
                      csv_fini(&p, on_field, on_row, &st) == 0;
  const std::string err = csv_strerror(csv_error(&p));
  csv_free(&p);
  if (!parsed) return Status::BadInput(csv_name + ": CSV parse error: " + err);
  size_t line = 0;
  bool label_col = false;
  for (auto& row : st.rows) {
    ++line;
    if (row.empty() || (row.size() == 1 && row[0].empty())) continue;
    if (line == 1 && row[0] == "image") {  // header row
      label_col = row.size() >= 3;
      continue;
    }
    if (row.size() < 1 || row.size() > 3) {
      return Status::BadInput(csv_name + ":" + std::to_string(line) +
                              ": expected image,mask[,label], got " +
                              std::to_string(row.size()) + " fields");
    }
    SourceItem item;
    std::string error;
    resolve(row[0], &item.image, &item.archive_image, &error);
    if (row.size() >= 2 && !row[1].empty()) {
      resolve(row[1], &item.mask, &item.archive_mask, &error);
      out->has_masks = true;
    }
    item.error = error;
    if (row.size() == 3 && !row[2].empty()) {
      try {
        size_t used = 0;
        item.label = std::stoi(row[2], &used);
        if (used != row[2].size() || item.label < 0) throw std::invalid_argument("label");
      } catch (const std::exception&) {
        return Status::BadInput(csv_name + ":" + std::to_string(line) +
                                ": label '" + row[2] + "' is not a non-negative integer");
      }
      out->has_labels = true;
    }
    label_col = label_col || row.size() == 3;
    out->items.push_back(std::move(item));
  }
  if (out->has_masks) {
    for (SourceItem& item : out->items) {
      if (item.mask.empty() && item.error.empty()) item.error = "no mask given in " + csv_name;
    }
  }
  return Status::OK();
}

Status ScanCsvFile(Env* env, const fs::path& csv_path, SourceList* out) {
  std::string text;
  DSPIPE_RETURN_IF_ERROR(env->ReadFile(csv_path.string(), &text));
  const fs::path base = csv_path.parent_path();
  return ScanCsv(csv_path.string(), text,
                 [&](const std::string& cell, std::string* name, int64_t*, std::string*) {
                   fs::path q(cell);
                   *name = (q.is_absolute() ? q : base / q).string();
                 },
                 out);
}

// The CSV files directly in dir.
std::vector<std::string> CsvFiles(const SourceTree& t, const std::string& dir) {
  std::vector<std::string> files, csvs;
  if (!t.Files(dir, &files).ok()) return csvs;
  for (const std::string& f : files) {
    if (fs::path(f).extension() == ".csv") csvs.push_back(f);
  }
  return csvs;
}

Status ScanArchive(const std::string& source, uint64_t buffer_bytes, SourceList* out) {
  DSPIPE_RETURN_IF_ERROR(ArchiveSource::Open(source, buffer_bytes, &out->archive));
  const ArchiveSource& ar = *out->archive;
  out->warnings = ar.warnings();
  // Volumes (a Decathlon task ships as Task03_Liver.tar) are read from folders: say so, instead
  // of reading imagesTr/ as a class folder.
  for (const auto& [path, member] : ar.files()) {
    const std::string base = fs::path(path).filename().string();
    std::string lower = base;
    std::transform(lower.begin(), lower.end(), lower.begin(),
                   [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
    const bool nifti = volume::IsNiftiName(base);
    const bool dicom = lower.size() > 4 && lower.compare(lower.size() - 4, 4, ".dcm") == 0;
    if (Hidden(base) || (!nifti && !dicom)) continue;
    const bool zip = source.size() > 4 && (source.compare(source.size() - 4, 4, ".zip") == 0 ||
                                           source.compare(source.size() - 4, 4, ".ZIP") == 0);
    return Status::BadInput(
        ar.Name(path) + ": " + (nifti ? "a NIfTI volume" : "a DICOM file") +
        " inside an archive: volume sources are read from a folder (docs/VOLUMES.md); extract "
        "the archive first (" + (zip ? "unzip " : "tar xf ") + source +
        ") and build the folder it makes");
  }
  // `tar czf data.tar.gz data/`: the dataset is the single top-level folder.
  std::string root;
  {
    ArchiveTree top(ar, "");
    std::vector<std::string> dirs, files;
    DSPIPE_RETURN_IF_ERROR(top.Dirs("", &dirs));
    DSPIPE_RETURN_IF_ERROR(top.Files("", &files));
    if (!top.IsDir("images") && files.empty() && dirs.size() == 1) {
      ArchiveTree inner(ar, dirs[0]);
      if (inner.IsDir("images") || !CsvFiles(inner, "").empty()) root = dirs[0];
    }
  }
  ArchiveTree t(ar, root);
  if (t.IsDir("images")) {
    DSPIPE_RETURN_IF_ERROR(ScanFolder(t, out));
  } else if (const std::vector<std::string> csvs = CsvFiles(t, ""); !csvs.empty()) {
    if (csvs.size() > 1) {
      return Status::BadInput(t.Name("") + ": several CSV files (" + csvs[0] + ", " + csvs[1] +
                              "); an archive source holds one");
    }
    const std::string csv_full = t.Full(csvs[0]);
    std::string text;
    DSPIPE_RETURN_IF_ERROR(ar.files().count(csv_full)
                               ? out->archive->Read(t.Ordinal(csvs[0]), ar.Name(csv_full), &text)
                               : Status::Internal("CSV member vanished"));
    const fs::path base = fs::path(csv_full).parent_path();
    DSPIPE_RETURN_IF_ERROR(ScanCsv(
        ar.Name(csv_full), text,
        [&](const std::string& cell, std::string* name, int64_t* ordinal, std::string* error) {
          const fs::path q(cell);
          const std::string path = (base / q).lexically_normal().generic_string();
          *name = ar.Name(q.is_absolute() ? cell : path);
          std::string why;
          if (q.is_absolute()) {
            why = "absolute path in a CSV inside an archive";
          } else if (path == ".." || path.rfind("../", 0) == 0) {
            why = "path leaves the archive (\"..\")";
          } else if (auto it = ar.files().find(path); it == ar.files().end()) {
            why = "no such member in the archive";
          } else {
            *ordinal = it->second.ordinal;
          }
          if (!why.empty() && error->empty()) *error = "'" + cell + "': " + why;
        },
        out));
  } else {
    DSPIPE_RETURN_IF_ERROR(ScanImageFolder(t, out));
  }
  // Folder layouts follow the archive: one pass reads the images in order (and masks stored
  // in the same order, with a second reader). Sorted archives keep the sorted-path order.
  if (out->kind != "csv") {
    std::stable_sort(out->items.begin(), out->items.end(),
                     [](const SourceItem& a, const SourceItem& b) {
                       return a.archive_image < b.archive_image;
                     });
  }
  return Status::OK();
}

}  // namespace

Status ScanSources(const std::string& source, const PlainLmdbOptions& plain, SourceList* out,
                   uint64_t archive_buffer_bytes, Env* env, volume::SliceAxis axis) {
  *out = SourceList{};
  if (env == nullptr) env = Env::Default();
  const fs::path src(source);
  FileKind kind = FileKind::kMissing, images = FileKind::kMissing;
  DSPIPE_RETURN_IF_ERROR(env->GetFileKind(source, &kind));
  if (kind == FileKind::kMissing) return Status::NotFound(source + ": no such file or directory");
  const bool lmdb = IsLmdbSource(source);
  if (!lmdb && PlainOptionsSet(plain)) {
    return Status::InvalidArgument(
        source + ": " + Opt("PlainLmdbOptions::image_key") + ", " +
        Opt("PlainLmdbOptions::mask_key") + ", " + Opt("PlainLmdbOptions::masks") + ", " +
        Opt("PlainLmdbOptions::labels") + " and " + Opt("PlainLmdbOptions::detect_masks", "false") +
        " apply to plain LMDB sources only");
  }
  if (kind == FileKind::kDirectory) {
    DSPIPE_RETURN_IF_ERROR(env->GetFileKind((src / "images").string(), &images));
  }
  Status s;
  if (lmdb) {
    s = ScanPlainLmdb(source, plain, out);
  } else if (IsArchiveSource(source)) {
    s = ScanArchive(source, archive_buffer_bytes, out);
  } else if (kind == FileKind::kRegular) {
    s = ScanCsvFile(env, src, out);
  } else if (HasVolumes(env, source)) {
    s = ScanVolumes(env, source, axis, out);
  } else if (images == FileKind::kDirectory) {
    s = ScanFolder(DirTree(env, src), out);
  } else if (kind == FileKind::kDirectory) {
    s = ScanImageFolder(DirTree(env, src), out);
  } else {
    return Status::BadInput(source + ": neither a folder nor a CSV file");
  }
  DSPIPE_RETURN_IF_ERROR(s);
  if (out->items.empty()) return Status::BadInput(source + ": no images found");
  return Status::OK();
}

}  // namespace dspipe::convert
