// SPDX-License-Identifier: Apache-2.0
// An entry's records (use record, completion record), the trust check of a committed entry, and
// eviction (see entries.h).
#include "cache/entries.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <sstream>

#include "cache/test_hooks.h"
#include "core/checksum.h"
#include "core/files.h"
#include "dspipe/log.h"

namespace dspipe::cache {
namespace {

using json = nlohmann::json;

int64_t NowNs() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

// The directory holding path's file (below root) and the file's name.
Status OpenParent(Directory* root, const std::string& path, std::unique_ptr<Directory>* holder,
                  Directory** dir, std::string* name) {
  const size_t slash = path.rfind('/');
  *name = slash == std::string::npos ? path : path.substr(slash + 1);
  *dir = root;
  if (slash == std::string::npos) return Status::OK();
  DSPIPE_RETURN_IF_ERROR(core::OpenDirPath(root, path.substr(0, slash), false, holder));
  *dir = holder->get();
  return Status::OK();
}

std::string Hex8(uint32_t v) {
  char buf[9];
  std::snprintf(buf, sizeof buf, "%08x", v);
  return buf;
}

// Parses E/dspipe-entry.json into its file list.
Status ReadRecord(Directory* entry_dir, const std::string& entry, std::vector<EntryFile>* files) {
  files->clear();
  std::string text;
  DSPIPE_RETURN_IF_ERROR(entry_dir->ReadFile(kRecordName, &text));
  const std::string where = entry_dir->path() + "/" + kRecordName;
  const json j = json::parse(text, nullptr, /*allow_exceptions=*/false);
  try {
    if (!j.is_object() || j.value("format", "") != "dspipe-cache-entry" ||
        j.value("version", 0) != 1) {
      return Status::Corruption(where + ": not a dspipe cache completion record");
    }
    if (j.at("entry").get<std::string>() != entry) {
      return Status::Corruption(where + ": the record is entry " + j.at("entry").dump() +
                                "'s, not " + entry + "'s");
    }
    for (const json& f : j.at("files")) {
      EntryFile e;
      e.path = f.at("path").get<std::string>();
      e.size = f.at("size").get<uint64_t>();
      e.crc32 = static_cast<uint32_t>(std::stoul(f.at("crc32").get<std::string>(), nullptr, 16));
      files->push_back(std::move(e));
    }
  } catch (const std::exception& e) {
    return Status::Corruption(where + ": bad completion record: " + e.what());
  }
  return Status::OK();
}

// Every file `files` lists, checked in E/: a regular file of its size (and crc32).
Status CheckFiles(Directory* entry_dir, const std::vector<EntryFile>& files, bool checksums) {
  for (const EntryFile& f : files) {
    if (checksums) {
      EntryFile got = f;
      DSPIPE_RETURN_IF_ERROR(ReadBack(entry_dir, &got));
      if (got.crc32 != f.crc32) {
        return Status::Corruption(entry_dir->path() + "/" + f.path + ": crc32 " + Hex8(got.crc32) +
                                  ", the record says " + Hex8(f.crc32));
      }
      continue;
    }
    std::unique_ptr<Directory> holder;
    Directory* dir = nullptr;
    std::string name;
    DSPIPE_RETURN_IF_ERROR(OpenParent(entry_dir, f.path, &holder, &dir, &name));
    FileInfo info;
    DSPIPE_RETURN_IF_ERROR(dir->Stat(name, &info));
    if (info.kind != FileKind::kRegular || info.size != f.size) {
      return Status::Corruption(entry_dir->path() + "/" + f.path +
                                (info.kind == FileKind::kMissing ? ": missing"
                                 : info.kind != FileKind::kRegular
                                     ? ": not a regular file"
                                     : ": size " + std::to_string(info.size) +
                                           ", the record says " + std::to_string(f.size)));
    }
  }
  return Status::OK();
}

}  // namespace

Status ReadBack(Directory* root, EntryFile* f) {
  std::unique_ptr<Directory> holder;
  Directory* dir = nullptr;
  std::string name;
  DSPIPE_RETURN_IF_ERROR(OpenParent(root, f->path, &holder, &dir, &name));
  std::unique_ptr<RandomAccessFile> in;
  DSPIPE_RETURN_IF_ERROR(dir->OpenFile(name, &in));
  std::string buf(size_t{1} << 20, '\0');
  uint32_t crc = 0;
  uint64_t off = 0;
  for (;;) {
    size_t got = 0;
    DSPIPE_RETURN_IF_ERROR(in->Read(off, buf.size(), buf.data(), &got));
    if (got == 0) break;
    crc = core::Crc32({reinterpret_cast<const uint8_t*>(buf.data()), got}, crc);
    off += got;
  }
  if (off != f->size) {
    return Status::Corruption("cache: " + root->path() + "/" + f->path + " has " +
                              std::to_string(off) + " bytes, expected " + std::to_string(f->size));
  }
  f->crc32 = crc;
  return Status::OK();
}

Status WriteCompletionRecord(Directory* tmp, const std::string& entry, const SourceListing& listing,
                             const std::vector<EntryFile>& files) {
  json list = json::array();
  uint64_t bytes = 0;
  for (const EntryFile& f : files) {
    list.push_back({{"path", f.path}, {"size", f.size}, {"crc32", Hex8(f.crc32)}});
    bytes += f.size;
  }
  const json j = {{"format", "dspipe-cache-entry"}, {"version", 1},   {"entry", entry},
                  {"source", listing.source},       {"bytes", bytes}, {"files", list}};
  return tmp->WriteFileAtomic(kRecordName, j.dump(1));
}

Status VerifyEntryAgainstRecord(Directory& own, const std::string& entry, bool checksums,
                                std::vector<EntryFile>* files) {
  std::unique_ptr<Directory> dir;
  DSPIPE_RETURN_IF_ERROR(own.OpenDir(entry, false, 0, &dir));
  std::vector<EntryFile> recorded;
  DSPIPE_RETURN_IF_ERROR(ReadRecord(dir.get(), entry, &recorded));
  DSPIPE_RETURN_IF_ERROR(CheckFiles(dir.get(), recorded, checksums));
  if (files) *files = std::move(recorded);
  return Status::OK();
}

Status VerifyEntry(Directory& own, const std::string& entry, const std::vector<EntryFile>& expected,
                   bool checksums) {
  std::vector<EntryFile> recorded;
  DSPIPE_RETURN_IF_ERROR(VerifyEntryAgainstRecord(own, entry, checksums, &recorded));
  std::sort(recorded.begin(), recorded.end(),
            [](const EntryFile& a, const EntryFile& b) { return a.path < b.path; });
  const std::string where = own.path() + "/" + entry;
  for (size_t i = 0; i < std::max(recorded.size(), expected.size()); ++i) {
    if (i >= recorded.size() || i >= expected.size() || recorded[i].path != expected[i].path ||
        recorded[i].size != expected[i].size) {
      const std::string what = i < expected.size() ? expected[i].path : recorded[i].path;
      return Status::Corruption(where + ": its completion record does not match the source at " +
                                what);
    }
  }
  return Status::OK();
}

uint64_t EntryOverhead(const SourceListing& listing, const std::string& entry,
                       unsigned max_readers) {
  // The record (WriteCompletionRecord, dump(1)): fixed fields, the entry and source, and per
  // file its path, size and crc32; strings at most 6x escaped.
  uint64_t record = 256 + 6 * (entry.size() + listing.source.size());
  uint64_t lmdbs = 0;
  for (const SourceFile& f : listing.files) {
    record += 96 + 6 * f.rel.size();
    const std::string& r = f.rel;
    if (r.size() >= 4 && r.compare(r.size() - 4, 4, ".mdb") == 0) ++lmdbs;
  }
  // LMDB's reader table: (max_readers - 1) x 64 + 192 bytes, rounded up here to a page.
  const uint64_t table = (uint64_t{std::max(max_readers, 1u)} * 64 + 4095) / 4096 * 4096 + 4096;
  constexpr uint64_t kUseRecord = 64;  // "<ns> <bytes>\n"
  return record + lmdbs * table + kUseRecord;
}

Status WriteUse(CacheDir& cd, const std::string& entry, uint64_t bytes) {
  return cd.dir().WriteFileAtomic(entry + ".used",
                                  std::to_string(NowNs()) + " " + std::to_string(bytes) + "\n");
}

Status ListEntries(CacheDir& cd, const std::string& self, std::vector<EntryUse>* out) {
  out->clear();
  std::vector<std::string> names;
  DSPIPE_RETURN_IF_ERROR(cd.dir().List(&names));
  for (const std::string& n : names) {
    const ParsedName p = ParseName(n);
    if (p.kind != NameKind::kUse || p.entry == self) continue;
    FileInfo info;
    if (!cd.dir().Stat(p.entry, &info).ok() || info.kind != FileKind::kDirectory) continue;
    std::string text;
    if (!cd.dir().ReadFile(n, &text).ok()) continue;  // evicted meanwhile
    EntryUse e;
    e.name = p.entry;
    std::istringstream in(text);
    if (!(in >> e.used_ns >> e.bytes)) continue;
    out->push_back(std::move(e));
  }
  std::sort(out->begin(), out->end(), [](const EntryUse& a, const EntryUse& b) {
    return a.used_ns != b.used_ns ? a.used_ns < b.used_ns : a.name < b.name;
  });
  return Status::OK();
}

namespace {

// Renames E/ to E.tmp/, removes E.used, deletes E.tmp/ (with E.lease held exclusively by the
// caller, and E.lock).
Status Evict(CacheDir& cd, const std::string& name, const std::string& why) {
  Directory& d = cd.dir();
  DSPIPE_RETURN_IF_ERROR(d.RemoveTree(name + ".tmp"));
  DSPIPE_RETURN_IF_ERROR(d.Rename(name, name + ".tmp"));
  DSPIPE_RETURN_IF_ERROR(d.Remove(name + ".used"));
  DSPIPE_RETURN_IF_ERROR(d.Sync());
  RunStepHook(Step::kEvictRenamed, name);
  DSPIPE_RETURN_IF_ERROR(d.RemoveTree(name + ".tmp"));
  Log(LogLevel::kInfo, "dspipe cache: evicted " + cd.PathOf(name) + " (" + why + ")");
  return Status::OK();
}

}  // namespace

Status TryEvict(CacheDir& cd, const std::string& name, const std::string& why, bool* evicted) {
  *evicted = false;
  Directory& d = cd.dir();
  std::unique_ptr<FileLock> lock, lease;
  if (!d.Lock(name + ".lock", true, false, &lock).ok()) return Status::OK();
  if (!d.Lock(name + ".lease", true, false, &lease).ok()) return Status::OK();
  FileInfo info;
  DSPIPE_RETURN_IF_ERROR(d.Stat(name, &info));
  if (info.kind != FileKind::kDirectory) return Status::OK();
  DSPIPE_RETURN_IF_ERROR(Evict(cd, name, why));
  // Removed while held: a process that waits for them takes the new files at these names.
  DSPIPE_RETURN_IF_ERROR(d.Remove(name + ".lease"));
  DSPIPE_RETURN_IF_ERROR(d.Remove(name + ".lock"));
  *evicted = true;
  return Status::OK();
}

Status EvictHeld(CacheDir& cd, const std::string& name, const std::string& why, bool* evicted) {
  *evicted = false;
  std::unique_ptr<FileLock> lease;
  if (!cd.dir().Lock(name + ".lease", true, false, &lease).ok()) return Status::OK();
  DSPIPE_RETURN_IF_ERROR(Evict(cd, name, why));
  DSPIPE_RETURN_IF_ERROR(cd.dir().Remove(name + ".lease"));
  *evicted = true;
  return Status::OK();
}

}  // namespace dspipe::cache
