// SPDX-License-Identifier: Apache-2.0
// A plain LMDB as a dsconvert build source: its records, paired and ordered by
// format/plain_lmdb (the same rules as Dataset::Open), become the build's plan.
#include <filesystem>

#include "convert/sources.h"
#include "format/plain_lmdb.h"

namespace dspipe::convert {

bool IsLmdbSource(const std::string& source) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (fs::is_directory(source, ec)) return fs::exists(fs::path(source) / "data.mdb", ec);
  return fs::is_regular_file(source, ec) && fs::path(source).extension() == ".mdb";
}

bool PlainOptionsSet(const PlainLmdbOptions& p) {
  const PlainLmdbOptions d;
  return p.image_key != d.image_key || p.mask_key != d.mask_key || p.masks != d.masks ||
         p.labels != d.labels || p.detect_masks != d.detect_masks || p.ignore_keys != d.ignore_keys;
}

Status OpenPlainSource(const std::string& source, const PlainLmdbOptions& plain,
                       std::shared_ptr<const Dataset>* out) {
  DatasetOpenOptions o;
  o.plain = plain;
  o.max_readers = 1024;
  std::unique_ptr<format::PlainLmdbDataset> ds;
  Status s = format::OpenPlainLmdb(source, o, &ds);
  if (!s.ok()) return s.WithContext("source " + source);
  *out = std::move(ds);
  return Status::OK();
}

Status ScanPlainLmdb(const std::string& source, const PlainLmdbOptions& plain, SourceList* out) {
  out->kind = "plain-lmdb";
  DSPIPE_RETURN_IF_ERROR(OpenPlainSource(source, plain, &out->plain));
  const auto& ds = static_cast<const format::PlainLmdbDataset&>(*out->plain);
  const DatasetInfo& info = ds.info();
  out->has_masks = info.has_masks;
  out->has_labels = info.has_labels;
  // Warnings were logged at open; the builder logs these again for its own output.
  out->items.reserve(info.count);
  for (uint64_t i = 0; i < info.count; ++i) {
    SourceItem item;
    item.image = source + " key " + ds.ImageKey(i);
    if (info.has_masks) item.mask = ds.mask_path() + " key " + ds.MaskKey(i);
    item.plain_index = static_cast<int64_t>(i);
    out->items.push_back(std::move(item));
  }
  return Status::OK();
}

Status ReadPlainItem(const Dataset& plain, const SourceItem& item, std::string* image,
                     std::string* mask, int* label) {
  Status s = plain.Read(static_cast<uint64_t>(item.plain_index), [&](const RecordView& r) {
    image->assign(reinterpret_cast<const char*>(r.image.data()), r.image.size());
    mask->assign(reinterpret_cast<const char*>(r.mask.data()), r.mask.size());
    *label = r.header.label;
    return Status::OK();
  });
  if (s.ok() || s.code() == Status::Code::kIOError) return s;
  return Status::BadInput(s.message());  // missing/empty values: bad data, named by key
}

}  // namespace dspipe::convert
