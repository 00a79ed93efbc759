// SPDX-License-Identifier: Apache-2.0
// Listing a local dataset for the cache (symlinks resolved deliberately, names never computed
// from link targets) and the entry name a listing gets (see populate.h).
#include "cache/populate.h"

#include <sys/stat.h>

#include <algorithm>
#include <filesystem>
#include <set>
#include <utility>

#include "core/checksum.h"

namespace dspipe::cache {
namespace {

namespace fs = std::filesystem;

bool IsLmdbLockFile(const std::string& name) {
  return name == "lock.mdb" || (name.size() > 5 && name.ends_with("-lock"));
}

std::string KindOf(mode_t m) {
  if (S_ISFIFO(m)) return "a FIFO";
  if (S_ISSOCK(m)) return "a socket";
  if (S_ISCHR(m) || S_ISBLK(m)) return "a device";
  return "not a regular file or directory";
}

int64_t MtimeNs(const struct stat& st) {
  return static_cast<int64_t>(st.st_mtim.tv_sec) * 1000000000 + st.st_mtim.tv_nsec;
}

// The walk below one directory. `path` is how it was reached (through links, as the walk went);
// `rel` its name relative to the source (made of the names found); `ancestors` the (device,
// inode) of every directory from the source down to here, so a link back up is a loop.
class Walker {
 public:
  explicit Walker(SourceListing* out) : out_(out) {}

  Status Walk(const std::string& path, const std::string& rel,
              std::set<std::pair<dev_t, ino_t>>* ancestors) {
    std::error_code ec;
    std::vector<std::string> names;
    for (fs::directory_iterator it(path, ec), end; !ec && it != end; it.increment(ec)) {
      names.push_back(it->path().filename().string());
    }
    if (ec) return Status::IOError("cache: listing " + path + ": " + ec.message());
    std::sort(names.begin(), names.end());
    for (const std::string& n : names) {
      const std::string full = path + "/" + n;
      const std::string r = rel.empty() ? n : rel + "/" + n;
      struct stat lst, st;
      if (::lstat(full.c_str(), &lst) != 0) return Status::IOErrorErrno("stat", full, errno);
      const bool link = S_ISLNK(lst.st_mode);
      if (::stat(full.c_str(), &st) != 0) {
        if (link && (errno == ENOENT || errno == ELOOP)) {
          return NotCacheable(full + ": a symbolic link to nothing");
        }
        return Status::IOErrorErrno("stat", full, errno);
      }
      if (S_ISDIR(st.st_mode)) {
        const std::pair<dev_t, ino_t> id{st.st_dev, st.st_ino};
        if (ancestors->count(id)) {
          return NotCacheable(full + ": a symbolic link to a directory above it (a loop)");
        }
        out_->dirs.push_back(r);
        ancestors->insert(id);
        DSPIPE_RETURN_IF_ERROR(Walk(full, r, ancestors));
        ancestors->erase(id);
        if (!out_->not_cacheable.empty()) return Status::OK();
      } else if (S_ISREG(st.st_mode)) {
        if (IsLmdbLockFile(n)) continue;
        SourceFile f;
        f.rel = r;
        f.size = static_cast<uint64_t>(st.st_size);
        f.mtime_ns = MtimeNs(st);
        if (link) f.via_link = fs::canonical(full, ec).string();
        out_->bytes += f.size;
        out_->files.push_back(std::move(f));
      } else {
        return NotCacheable(full + ": " + KindOf(st.st_mode) +
                            " (only files and folders are "
                            "copied)");
      }
    }
    return Status::OK();
  }

 private:
  Status NotCacheable(const std::string& why) {
    out_->not_cacheable = "not cacheable: " + why;
    return Status::OK();
  }
  SourceListing* out_;
};

}  // namespace

Status ListSource(const std::string& source, SourceListing* out) {
  *out = SourceListing();
  std::error_code ec;
  const fs::path canon = fs::canonical(source, ec);
  if (ec) return Status::NotFound("cache: dataset " + source + ": " + ec.message());
  out->source = canon.string();
  struct stat st;
  if (::stat(out->source.c_str(), &st) != 0) {
    return Status::IOErrorErrno("cache: stat", source, errno);
  }
  if (S_ISREG(st.st_mode)) {
    SourceFile f;
    f.size = static_cast<uint64_t>(st.st_size);
    f.mtime_ns = MtimeNs(st);
    out->bytes = f.size;
    out->files.push_back(std::move(f));
    return Status::OK();
  }
  if (!S_ISDIR(st.st_mode)) {
    out->not_cacheable = "not cacheable: " + source + ": " + KindOf(st.st_mode);
    return Status::OK();
  }
  out->is_dir = true;
  Walker w(out);
  std::set<std::pair<dev_t, ino_t>> ancestors{{st.st_dev, st.st_ino}};
  DSPIPE_RETURN_IF_ERROR(w.Walk(out->source, "", &ancestors));
  if (!out->not_cacheable.empty()) return Status::OK();
  std::sort(out->dirs.begin(), out->dirs.end());  // a parent sorts before its children
  std::sort(out->files.begin(), out->files.end(),
            [](const SourceFile& a, const SourceFile& b) { return a.rel < b.rel; });
  return Status::OK();
}

std::string SideRel(const SourceListing& side) {
  std::string base = fs::path(side.source).filename().string();
  if (base.empty() || base == "." || base == "..") base = "masks.lmdb";
  return "masks/" + base;
}

std::string CopyBase(const SourceListing& listing) {
  std::string base = listing.url.empty() ? fs::path(listing.source).filename().string()
                                         : UrlBaseName(listing.source);
  for (char& c : base) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                    c == '-' || c == '_' || c == '.';
    if (!ok) c = '_';
  }
  if (base.size() > 64) base.resize(64);
  if (base.empty() || base[0] == '.') base = "dataset" + base;
  if (base.size() > 64) base.resize(64);
  return base;
}

namespace {

std::string FileLine(const SourceFile& f) {
  std::string line = f.rel + "\t" + std::to_string(f.size) + "\t" + std::to_string(f.mtime_ns);
  if (!f.via_link.empty()) line += "\t-> " + f.via_link;  // none: the names entries always had
  return line + "\n";
}

}  // namespace

std::string EntryName(const SourceListing& listing) {
  std::string id;
  if (!listing.url.empty()) {
    // The URL + the served manifest: a dataset rebuilt on the server gets a new entry.
    id = "dspipe-cache-url-v1\n" + listing.source + "\n" + listing.manifest_sha256 + "\n";
  } else {
    id = "dspipe-cache-v1\n" + listing.source + "\n";
    for (const SourceFile& f : listing.files) id += FileLine(f);
    // Sides (a plain LMDB's masks LMDB): none keeps the names entries had before sides existed.
    for (const SourceListing& side : listing.sides) {
      id += "side\t" + SideRel(side) + "\t" + side.source + "\n";
      for (const SourceFile& f : side.files) id += FileLine(f);
    }
  }
  return CopyBase(listing) + "-" + core::Sha256Hex(id).substr(0, 16);
}

std::vector<EntryFile> ExpectedFiles(const SourceListing& listing, const std::string& base) {
  std::vector<EntryFile> out;
  auto add = [&out](const SourceListing& l, const std::string& at) {
    for (const SourceFile& f : l.files) {
      EntryFile e;
      e.path = f.rel.empty() ? at : at + "/" + f.rel;
      e.size = f.size;
      out.push_back(std::move(e));
    }
  };
  add(listing, base);
  if (listing.url.empty()) {
    for (const SourceListing& side : listing.sides) add(side, SideRel(side));
  }
  std::sort(out.begin(), out.end(),
            [](const EntryFile& a, const EntryFile& b) { return a.path < b.path; });
  return out;
}

}  // namespace dspipe::cache
