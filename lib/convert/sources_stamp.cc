// SPDX-License-Identifier: Apache-2.0
// The stamps of what a build reads from its source (see sources.h, StampSources): what --resume
// compares against the ones stored when the build started, so that a source changed since is
// refused by name instead of finished (or reported complete) as the old dataset.
#include <sys/stat.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <set>

#include "convert/sources.h"
#include "convert/sources_archive.h"
#include "core/checksum.h"

namespace dspipe::convert {
namespace {

namespace fs = std::filesystem;

Status Stat(const std::string& path, SourceStamp* s) {
  struct stat st;
  if (::stat(path.c_str(), &st) != 0) return Status::IOErrorErrno("stat", path, errno);
  s->name = path;
  s->size = static_cast<uint64_t>(st.st_size);
  s->mtime_ns = static_cast<int64_t>(st.st_mtim.tv_sec) * 1000000000 + st.st_mtim.tv_nsec;
  return Status::OK();
}

// An LMDB given as a directory (its data.mdb) or as its file.
std::string LmdbDataFile(const std::string& path) {
  std::error_code ec;
  return fs::is_directory(path, ec) ? path + "/data.mdb" : path;
}

std::string Shown(const std::string& source, const std::string& name) {
  const std::string prefix = source.empty() || source.back() == '/' ? source : source + "/";
  return name.rfind(prefix, 0) == 0 && name.size() > prefix.size() ? name.substr(prefix.size())
                                                                   : name;
}

}  // namespace

Status StampSources(const std::string& source, const PlainLmdbOptions& plain,
                    const SourceList& list, std::vector<SourceStamp>* out) {
  out->clear();
  if (list.archive != nullptr) {
    const ArchiveSource& ar = *list.archive;
    SourceStamp s;
    DSPIPE_RETURN_IF_ERROR(Stat(source, &s));
    std::string members;
    for (const auto& [path, m] : ar.files()) {
      members += path + "\t" + std::to_string(m.size) + "\t" + std::to_string(m.ordinal) + "\n";
    }
    s.members = core::Sha256Hex(members);
    out->push_back(std::move(s));
    return Status::OK();
  }
  std::set<std::string> files, optional;
  if (list.kind == "plain-lmdb") {
    files.insert(LmdbDataFile(source));
    if (!plain.masks.empty()) files.insert(LmdbDataFile(plain.masks));
    if (!plain.labels.empty()) files.insert(plain.labels);
  } else {
    if (list.kind == "csv") files.insert(source);
    std::set<std::string> volumes;  // volume sources seen
    for (const SourceItem& it : list.items) {
      // An item known bad before reading (no mask, a CSV row naming no file) may name files
      // that are not there: those it names that are there are stamped.
      std::set<std::string>& into = it.error.empty() ? files : optional;
      std::vector<std::string> series;
      if (it.slice < 0) {
        into.insert(it.image);
      } else if (volumes.insert(it.image).second) {  // a volume's first slice
        // A DICOM series: each of its files (a rewritten slice leaves the folder's own size
        // and mtime as they were).
        if (volume::DicomSeriesFiles(it.image, &series).ok()) {
          into.insert(series.begin(), series.end());
        } else {
          into.insert(it.image);
        }
      }
      if (!it.mask.empty()) into.insert(it.mask);
    }
    for (const VolumeSource& v : list.volumes) {  // an image kept as one file per channel
      (v.error.empty() ? files : optional).insert(v.channels.begin(), v.channels.end());
    }
  }
  for (const std::string& f : optional) {
    std::error_code ec;
    if (!files.count(f) && fs::exists(f, ec)) files.insert(f);
  }
  for (const std::string& f : files) {
    SourceStamp s;
    DSPIPE_RETURN_IF_ERROR(Stat(f, &s));
    out->push_back(std::move(s));
  }
  return Status::OK();
}

std::string SourceChanges::First() const {
  if (!added_or_removed.empty()) return added_or_removed;
  return changed.empty() ? "" : changed.begin()->second;
}

SourceChanges CompareSourceStamps(const std::string& source, const std::vector<SourceStamp>& was,
                                  const std::vector<SourceStamp>& now) {
  SourceChanges c;
  size_t i = 0, j = 0;
  while (i < was.size() || j < now.size()) {
    if (j == now.size() || (i < was.size() && was[i].name < now[j].name)) {
      if (c.added_or_removed.empty()) c.added_or_removed = Shown(source, was[i].name) + " is gone";
      ++i;
      continue;
    }
    if (i == was.size() || now[j].name < was[i].name) {
      if (c.added_or_removed.empty()) c.added_or_removed = Shown(source, now[j].name) + " is new";
      ++j;
      continue;
    }
    const SourceStamp& a = was[i];
    const SourceStamp& b = now[j];
    const std::string name = Shown(source, a.name);
    if (a.size != b.size) {
      c.changed[a.name] =
          name + ": " + std::to_string(a.size) + " bytes, now " + std::to_string(b.size);
    } else if (a.members != b.members) {
      c.changed[a.name] = name + ": its member list changed";
    } else if (a.mtime_ns != b.mtime_ns) {
      c.changed[a.name] = name + ": modified since (its mtime changed)";
    }
    ++i;
    ++j;
  }
  return c;
}

}  // namespace dspipe::convert
