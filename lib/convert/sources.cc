#include "convert/sources.h"

#include <csv.h>

#include <algorithm>
#include <filesystem>
#include <map>

#include "core/files.h"

namespace dspipe {
namespace {

namespace fs = std::filesystem;

bool Hidden(const fs::path& p) {
  const std::string n = p.filename().string();
  return n.empty() || n[0] == '.';
}

// Regular, non-hidden files directly inside dir, sorted by name (bytewise).
Status ListFiles(const fs::path& dir, std::vector<fs::path>* out) {
  std::error_code ec;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    if (Hidden(it->path())) continue;
    if (it->is_regular_file(ec)) out->push_back(it->path());
  }
  if (ec) return Status::IOError("list " + dir.string() + ": " + ec.message());
  std::sort(out->begin(), out->end());
  return Status::OK();
}

Status ScanFolder(const fs::path& src, SourceList* out) {
  out->kind = "folder";
  std::vector<fs::path> images, masks;
  DSPIPE_RETURN_IF_ERROR(ListFiles(src / "images", &images));
  std::error_code ec;
  out->has_masks = fs::is_directory(src / "masks", ec);
  std::map<std::string, std::vector<fs::path>> by_stem;
  if (out->has_masks) {
    DSPIPE_RETURN_IF_ERROR(ListFiles(src / "masks", &masks));
    for (const fs::path& m : masks) by_stem[m.stem().string()].push_back(m);
  }
  std::map<std::string, int> image_stems;
  for (const fs::path& img : images) ++image_stems[img.stem().string()];
  for (const fs::path& img : images) {
    SourceItem item;
    item.image = img.string();
    const std::string stem = img.stem().string();
    if (image_stems[stem] > 1) {
      item.error = "several images share the stem '" + stem + "'; masks pair by stem";
    } else if (out->has_masks) {
      auto it = by_stem.find(stem);
      if (it == by_stem.end()) {
        item.error = "no mask named '" + stem + ".*' in " + (src / "masks").string();
      } else if (it->second.size() > 1) {
        item.error = "several masks named '" + stem + ".*' in " + (src / "masks").string();
      } else {
        item.mask = it->second[0].string();
      }
    }
    out->items.push_back(std::move(item));
  }
  for (const auto& [stem, files] : by_stem) {
    if (!image_stems.count(stem)) {
      out->warnings.push_back("mask " + files[0].string() + " has no image; ignored");
    }
  }
  return Status::OK();
}

Status ScanImageFolder(const fs::path& src, SourceList* out) {
  out->kind = "imagefolder";
  out->has_labels = true;
  std::vector<fs::path> classes;
  std::error_code ec;
  for (fs::directory_iterator it(src, ec), end; !ec && it != end; it.increment(ec)) {
    if (!Hidden(it->path()) && it->is_directory(ec)) classes.push_back(it->path());
  }
  if (ec) return Status::IOError("list " + src.string() + ": " + ec.message());
  std::sort(classes.begin(), classes.end());
  if (classes.empty()) {
    return Status::BadInput(src.string() +
                            ": no images/ folder, no class subfolders: not a dataset");
  }
  for (size_t label = 0; label < classes.size(); ++label) {
    out->class_names.push_back(classes[label].filename().string());
    std::vector<fs::path> files;
    DSPIPE_RETURN_IF_ERROR(ListFiles(classes[label], &files));
    for (const fs::path& f : files) {
      SourceItem item;
      item.image = f.string();
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

Status ScanCsv(const fs::path& csv_path, SourceList* out) {
  out->kind = "csv";
  std::string text;
  DSPIPE_RETURN_IF_ERROR(ReadFile(csv_path.string(), &text));
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
  if (!parsed) return Status::BadInput(csv_path.string() + ": CSV parse error: " + err);
  const fs::path base = csv_path.parent_path();
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
      return Status::BadInput(csv_path.string() + ":" + std::to_string(line) +
                              ": expected image,mask[,label], got " +
                              std::to_string(row.size()) + " fields");
    }
    SourceItem item;
    auto resolve = [&](const std::string& s) {
      fs::path q(s);
      return (q.is_absolute() ? q : base / q).string();
    };
    item.image = resolve(row[0]);
    if (row.size() >= 2 && !row[1].empty()) {
      item.mask = resolve(row[1]);
      out->has_masks = true;
    }
    if (row.size() == 3 && !row[2].empty()) {
      try {
        size_t used = 0;
        item.label = std::stoi(row[2], &used);
        if (used != row[2].size() || item.label < 0) throw std::invalid_argument("label");
      } catch (const std::exception&) {
        return Status::BadInput(csv_path.string() + ":" + std::to_string(line) +
                                ": label '" + row[2] + "' is not a non-negative integer");
      }
      out->has_labels = true;
    }
    label_col = label_col || row.size() == 3;
    out->items.push_back(std::move(item));
  }
  if (out->has_masks) {
    for (SourceItem& item : out->items) {
      if (item.mask.empty()) item.error = "no mask given in " + csv_path.string();
    }
  }
  return Status::OK();
}

}  // namespace

Status ScanSources(const std::string& source, const PlainLmdbOptions& plain, SourceList* out) {
  *out = SourceList{};
  std::error_code ec;
  const fs::path src(source);
  if (!fs::exists(src, ec)) return Status::NotFound(source + ": no such file or directory");
  const bool lmdb = IsLmdbSource(source);
  if (!lmdb && PlainOptionsSet(plain)) {
    return Status::InvalidArgument(source +
                                   ": --image-key/--mask-key/--masks/--labels/--no-detect-masks "
                                   "apply to plain LMDB sources only");
  }
  Status s;
  if (lmdb) {
    s = ScanPlainLmdb(source, plain, out);
  } else if (fs::is_regular_file(src, ec)) {
    s = ScanCsv(src, out);
  } else if (fs::is_directory(src / "images", ec)) {
    s = ScanFolder(src, out);
  } else if (fs::is_directory(src, ec)) {
    s = ScanImageFolder(src, out);
  } else {
    return Status::BadInput(source + ": neither a folder nor a CSV file");
  }
  DSPIPE_RETURN_IF_ERROR(s);
  if (out->items.empty()) return Status::BadInput(source + ": no images found");
  return Status::OK();
}

}  // namespace dspipe
