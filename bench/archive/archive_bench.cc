// SPDX-License-Identifier: Apache-2.0
// Side-by-side benchmark: `dsconvert build` from an archive vs from the extracted folder
// (issue 10 target: an archive build >= 0.9x the folder build).
//
//   archive_bench [--count N] [--size HxW] [--repeats R] [--dir D] [--store encoded|raw] [--cold]
//
// Writes the synthetic folder once, then the same files (sorted: images/ then masks/) as
// .tar, .tar.gz, .tar.zst and .zip with libarchive. Each repeat builds from the folder and from
// each archive, in turn, in one run; the ratio is folder seconds / archive seconds of the same
// repeat (> 1: the archive build is faster; the archives' order rotates). Warm page cache
// unless --cold: before each build, its source's pages are dropped (dspipe::core::DropFileCache:
// fdatasync + posix_fadvise DONTNEED on every file of the folder, or on the archive) and the
// drop is checked with mincore (format::ResidentFraction) on the archive, or on every 16th file
// of the folder; the mean resident fraction after the drops is printed per source (a
// filesystem that ignores DONTNEED shows here: near 1 instead of 0). --cold shows the case of a
// dataset just downloaded or on a slow disk: many small files against one archive.
// Prints median and min..max. The
// default --archive-buffer-mb (512) holds each of these archives whole in memory (.tar.gz
// inflated by libdeflate, .tar.zst by libzstd, .zip members inflated by the build threads); the
// "unbuffered" rows stream .tar, .tar.gz and .zip with two readers (--archive-buffer-mb 0).
// Also prints each build's CPU seconds (user + sys of this process, all threads): on a machine
// shared with other work the wall-clock figures spread widely, the CPU seconds much less.
#include <archive.h>
#include <archive_entry.h>
#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include "core/files.h"
#include "format/residency.h"
#include "dspipe/convert.h"
#include "dspipe/synth.h"
#include "../series.h"

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

namespace {

void Check(const dspipe::Status& s) {
  if (!s.ok()) {
    std::fprintf(stderr, "archive_bench: %s\n", s.ToString().c_str());
    std::exit(1);
  }
}

void WriteArchive(const std::string& path, const std::string& kind, const std::string& src,
                  const std::vector<std::string>& rel) {
  archive* a = archive_write_new();
  if (kind == "zip") {
    archive_write_set_format_zip(a);
  } else {
    archive_write_set_format_pax_restricted(a);
    if (kind == "tar.gz") archive_write_add_filter_gzip(a);
    if (kind == "tar.zst") archive_write_add_filter_zstd(a);
  }
  if (archive_write_open_filename(a, path.c_str()) != ARCHIVE_OK) {
    std::fprintf(stderr, "archive_bench: %s\n", archive_error_string(a));
    std::exit(1);
  }
  std::string data;
  for (const std::string& r : rel) {
    Check(dspipe::core::ReadFile(src + "/" + r, &data));
    archive_entry* e = archive_entry_new();
    archive_entry_set_pathname(e, r.c_str());
    archive_entry_set_filetype(e, AE_IFREG);
    archive_entry_set_perm(e, 0644);
    archive_entry_set_size(e, static_cast<la_int64_t>(data.size()));
    if (archive_write_header(a, e) != ARCHIVE_OK ||
        archive_write_data(a, data.data(), data.size()) != static_cast<la_ssize_t>(data.size())) {
      std::fprintf(stderr, "archive_bench: %s: %s\n", r.c_str(), archive_error_string(a));
      std::exit(1);
    }
    archive_entry_free(e);
  }
  archive_write_close(a);
  archive_write_free(a);
}

double CpuSeconds() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return static_cast<double>(u.ru_utime.tv_sec + u.ru_stime.tv_sec) +
         static_cast<double>(u.ru_utime.tv_usec + u.ru_stime.tv_usec) / 1e6;
}

}  // namespace

int main(int argc, char** argv) {
  int count = 400, w = 256, h = 256, repeats = 5;
  bool cold = false;
  std::string dir = "/tmp/dspipe_archive_bench", store = "encoded";
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto next = [&] { return i + 1 < argc ? std::string(argv[++i]) : std::string(); };
    if (a == "--count") count = std::stoi(next());
    else if (a == "--size") std::sscanf(next().c_str(), "%dx%d", &h, &w);
    else if (a == "--repeats") repeats = std::stoi(next());
    else if (a == "--dir") dir = next();
    else if (a == "--store") store = next();
    else if (a == "--cold") cold = true;
    else { std::fprintf(stderr, "unknown flag %s\n", a.c_str()); return 2; }
  }
  const std::string src = dir + "/src";
  fs::remove_all(dir);
  dspipe::SynthOptions so;
  so.out_dir = src;
  so.count = count;
  so.width = w;
  so.height = h;
  so.seed = 1;
  so.classes = 3;
  Check(dspipe::Synthesize(so));
  std::vector<std::string> rel, files;
  for (const char* sub : {"images", "masks"}) {
    for (auto& e : fs::directory_iterator(src + "/" + sub)) {
      rel.push_back(std::string(sub) + "/" + e.path().filename().string());
    }
  }
  std::sort(rel.begin(), rel.end());
  uint64_t bytes = 0;
  for (const std::string& r : rel) {
    files.push_back(src + "/" + r);
    bytes += fs::file_size(files.back());
  }
  const std::vector<std::string> kinds = {"tar", "tar.gz", "tar.zst", "zip"};
  for (const std::string& k : kinds) WriteArchive(dir + "/data." + k, k, src, rel);
  std::printf("archive_bench: %d samples %dx%d, %.1f MB of files, --store %s, %s cache, "
              "%d repeats\n", count, w, h, bytes / 1e6, store.c_str(),
              cold ? "cold (dropped)" : "warm", repeats);
  for (const std::string& k : kinds) {
    std::printf("  data.%-8s %8.1f MB\n", k.c_str(), fs::file_size(dir + "/data." + k) / 1e6);
  }
  std::map<std::string, Series> cpu;  // CPU seconds by row name ("" for the untimed build)
  // --cold: the resident fraction of each source right after its drop (mincore), by row name.
  std::map<std::string, Series> resident;
  auto build = [&](const std::string& row, const std::string& source,
                   uint64_t buffer = dspipe::BuildOptions{}.archive_buffer_bytes) {
    if (cold) {
      std::vector<std::string> sample;
      if (source == src) {
        for (const std::string& f : files) dspipe::core::DropFileCache(f);
        for (size_t i = 0; i < files.size(); i += 16) sample.push_back(files[i]);
      } else {
        dspipe::core::DropFileCache(source);
        sample.push_back(source);
      }
      double sum = 0;
      for (const std::string& f : sample) sum += dspipe::format::ResidentFraction(f);
      if (!row.empty()) resident[row].v.push_back(sum / static_cast<double>(sample.size()));
    }
    dspipe::BuildOptions bo;
    bo.source = source;
    bo.output = dir + "/out.lmdb";
    bo.overwrite = true;
    bo.archive_buffer_bytes = buffer;
    bo.store = store == "raw" ? dspipe::StoreMode::kRaw : dspipe::StoreMode::kEncoded;
    bo.stats_sample = std::max(1, count / 64);  // as bench/convert: 1.6% of images decoded
    fs::remove_all(bo.output);
    dspipe::BuildResult res;
    const double cpu0 = CpuSeconds();
    const auto t = Clock::now();
    Check(dspipe::BuildDataset(bo, &res));
    if (!row.empty()) cpu[row].v.push_back(CpuSeconds() - cpu0);
    return std::chrono::duration<double>(Clock::now() - t).count();
  };
  Series folder;
  std::map<std::string, Series> secs, ratio;
  build("", src);  // one untimed build: the first run pays for page faults and allocator growth
  for (int r = 0; r < repeats; ++r) {
    const double f = build("folder", src);
    folder.v.push_back(f);
    // Each archive held in memory (the default buffer), then .tar, .tar.gz and .zip streamed by
    // two forward readers (no buffer). The order rotates with the repeat: the build that follows
    // another pays for some of its leftovers (page cache reclaim), so no row always comes first.
    std::vector<std::pair<std::string, uint64_t>> rows;
    for (const std::string& k : kinds) {
      rows.push_back({k, dspipe::BuildOptions{}.archive_buffer_bytes});
    }
    for (const char* k : {"tar", "tar.gz", "zip"}) rows.push_back({k, 0});
    std::rotate(rows.begin(), rows.begin() + r % rows.size(), rows.end());
    for (const auto& [k, buffer] : rows) {
      const std::string row = k + (buffer == 0 ? " unbuffered" : "");
      const double s = build("data." + row, dir + "/data." + k, buffer);
      secs[row].v.push_back(s);
      ratio[row].v.push_back(f / s);
    }
  }
  auto print = [](const std::string& name, const Series& s, const char* unit) {
    std::printf("  %-40s median %7.3f %s  (min %.3f, max %.3f, n=%zu)\n", name.c_str(),
                s.Median(), unit, s.Min(), s.Max(), s.v.size());
  };
  print("folder build", folder, "s");
  for (const auto& [k, s] : secs) print("data." + k + " build", s, "s");
  for (const auto& [k, s] : ratio) print("data." + k + " speed / folder", s, "x");
  for (const auto& [k, s] : cpu) print(k + " CPU (user+sys)", s, "s");
  for (const auto& [k, s] : resident) print(k + " resident after drop", s, "");
  fs::remove_all(dir);
  return 0;
}
