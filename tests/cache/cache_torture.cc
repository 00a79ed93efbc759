// SPDX-License-Identifier: Apache-2.0
// The cache's torture test (issue 19): rounds of N processes (cache_tool, one AcquireCache
// each) opening the same and different datasets, plain and symlinked, through one cache dir
// with a cache_limit, while this driver SIGKILLs random ones at random durable steps (every
// step a worker reaches is reported on its stdout and waits for the driver's byte on stdin:
// cache/test_hooks.h). After every round it checks:
//   1. every source file is byte-identical to before (and every link in the sources too);
//   2. no entry is half-committed: every E/ in the cache's own dir has a completion record whose
//      files are all there with their sizes and crc32, and it holds its source's bytes;
//   3. every surviving open either read the cache (the copy's bytes equal the source's) or read
//      in place with a reason; none failed;
//   4. the limit held: the cache's usage, sampled at every step of every worker, never went
//      above cache_limit (plus each file's rounding to a page);
//   5. nothing outside the cache's own directory changed: a listing of the whole parent
//      directory (sources, link targets, the user's files beside the cache) equals the first.
// Bounded form in ctest (tests/cache/CMakeLists.txt); full size: bench/cache/torture.sh.
//
//   cache_torture --tool PATH [--rounds 20] [--workers 5] [--seed 1] [--kill-permille 600]
//                 [--min-kills 0] [--json FILE]
// Exit 0 when there was no violation and at least --min-kills kill points; prints the figures
// (rounds, processes, kill points by step, cached / in place, peak usage, violations).
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "cache/entries.h"
#include "cache_checks.h"
#include "dspipe/convert.h"
#include "dspipe/env.h"
#include "dspipe/synth.h"
#include "tool_process.h"

namespace {

namespace fs = std::filesystem;
using dspipe::cachetest::DatasetDigest;
using dspipe::cachetest::DatasetFileUsage;
using dspipe::cachetest::IsLmdbReaderTable;

struct Args {
  std::string tool;
  int rounds = 20, workers = 5;
  uint64_t seed = 1;
  int kill_permille = 600;
  int min_kills = 0;
  std::string json;
};

std::vector<std::string> violations;

void Violation(const std::string& what) {
  violations.push_back(what);
  std::fprintf(stderr, "VIOLATION: %s\n", what.c_str());
}

std::string ReadAll(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

// Every name below dir (links not followed) with its kind, size and crc32; `skip` (a path
// relative to dir) left out with everything below it. LMDB reader tables are left out: a
// reader in place writes them (the workers never open LMDB, but the check must not depend on
// that).
std::map<std::string, std::string> Listing(const std::string& dir, const std::string& skip) {
  std::map<std::string, std::string> out;
  std::error_code ec;
  for (auto it = fs::recursive_directory_iterator(dir, ec);
       !ec && it != fs::recursive_directory_iterator(); it.increment(ec)) {
    const std::string rel = it->path().lexically_relative(dir).string();
    if (rel == skip) {
      it.disable_recursion_pending();
      continue;
    }
    if (IsLmdbReaderTable(it->path().filename().string())) continue;
    const fs::file_status st = it->symlink_status(ec);
    if (fs::is_symlink(st)) {
      out[rel] = "link " + fs::read_symlink(it->path(), ec).string();
    } else if (fs::is_directory(st)) {
      out[rel] = "dir";
    } else {
      const std::string b = ReadAll(it->path().string());
      out[rel] = "file " + std::to_string(b.size()) + " " +
                 std::to_string(
                     dspipe::core::Crc32({reinterpret_cast<const uint8_t*>(b.data()), b.size()}));
    }
  }
  return out;
}

std::string Changed(const std::map<std::string, std::string>& a,
                    const std::map<std::string, std::string>& b) {
  for (const auto& [k, v] : a) {
    auto it = b.find(k);
    if (it == b.end()) return "removed " + k;
    if (it->second != v) return "changed " + k;
  }
  for (const auto& [k, v] : b) {
    if (!a.count(k)) return "added " + k;
  }
  return "";
}

// What each top-level name of the cache's own dir holds, for a violation's message.
std::string Breakdown(const std::string& own) {
  std::string out;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(own, ec)) {
    const std::string n = e.path().filename().string();
    int files = 0;
    const uint64_t u = e.is_directory(ec) ? DatasetFileUsage(e.path().string(), &files) : 0;
    out += "\n    " + n + (u ? " " + std::to_string(u) : "");
    if (n.ends_with(".used") || n.ends_with(".dspipe-reserved"))
      out += " [" + ReadAll(e.path()) + "]";
    if (e.is_directory(ec) && fs::exists(e.path() / ".dspipe-reserved", ec)) {
      out += " reserved " + ReadAll((e.path() / ".dspipe-reserved").string());
    }
  }
  return out;
}

struct Worker {
  pid_t pid = -1;
  int out = -1, in = -1;
  std::string source;
  int kill_at = -1;  // the step number (1-based) it is killed at; -1 never
  int steps = 0;
  std::string buf, output;
  bool done = false, killed = false;
};

Worker Start(const std::string& tool, const std::string& src, const std::string& root,
             uint64_t limit) {
  Worker w;
  const dspipe::cachetest::Child c = dspipe::cachetest::StartToolAt(
      tool, {src, root, "--steps", "--digest", "--limit", std::to_string(limit)}, {}, &w.in);
  w.pid = c.pid;
  w.out = c.out;
  w.source = src;
  return w;
}

// A dataset built by dsconvert's library from synthetic images (n samples, `shards`).
std::string MakeDataset(const std::string& dir, const std::string& name, int n, int shards,
                        uint64_t seed) {
  dspipe::SynthOptions so;
  so.out_dir = dir + "/" + name + "-src";
  so.count = n;
  so.width = 48;
  so.height = 32;
  so.seed = seed;
  so.threads = 2;
  if (!dspipe::Synthesize(so).ok()) std::abort();
  dspipe::BuildOptions bo;
  bo.source = so.out_dir;
  bo.output = dir + "/" + name;
  bo.shards = shards;
  bo.threads = 2;
  dspipe::BuildResult br;
  dspipe::Status s = dspipe::BuildDataset(bo, &br);
  if (!s.ok()) {
    std::fprintf(stderr, "build: %s\n", s.ToString().c_str());
    std::exit(2);
  }
  fs::remove_all(so.out_dir);
  return bo.output;
}

uint64_t DatasetBytes(const std::string& path) {
  uint64_t b = 0;
  std::error_code ec;
  for (auto it = fs::recursive_directory_iterator(
           path, fs::directory_options::follow_directory_symlink, ec);
       !ec && it != fs::recursive_directory_iterator(); it.increment(ec)) {
    if (it->is_regular_file(ec) && !IsLmdbReaderTable(it->path().filename().string())) {
      b += it->file_size(ec);
    }
  }
  return b;
}

int Run(const Args& args) {
  char tmpl[] = "/dev/shm/dspipe-torture-XXXXXX";
  if (::mkdtemp(tmpl) == nullptr) return 2;
  const std::string work = tmpl;
  // The sources: plain (one LMDB; three shards) and symlinked (a data.mdb linked to a file near
  // the top of the tree from deep below, where a path computed from the link climbed out of
  // the entry onto it; shard folders linked to a store).
  const std::string data = work + "/data", store = work + "/store";
  fs::create_directories(data);
  fs::create_directories(store);
  const std::string plain1 = MakeDataset(data, "plain1", 12, 1, 1);
  const std::string plain3 = MakeDataset(data, "plain3", 18, 3, 2);
  const std::string built1 = MakeDataset(work, "tmp-linked1", 12, 1, 3);
  const std::string built3 = MakeDataset(work, "tmp-linked3", 18, 3, 4);
  const std::string linked1 = data + "/deep/a/b/c/d/e/f/linked1";
  fs::create_directories(linked1);
  fs::rename(built1 + "/data.mdb", store + "/linked1-data.mdb");
  fs::rename(built1 + "/manifest.json", linked1 + "/manifest.json");
  fs::create_symlink(store + "/linked1-data.mdb", linked1 + "/data.mdb");
  const std::string linked3 = data + "/linked3";
  fs::create_directories(linked3);
  fs::rename(built3 + "/manifest.json", linked3 + "/manifest.json");
  for (int i = 0; i < 3; ++i) {
    char shard[32];
    std::snprintf(shard, sizeof shard, "shard-%05d.lmdb", i);
    fs::rename(built3 + "/" + shard, store + "/linked3-" + shard);
    fs::create_symlink(store + "/linked3-" + shard, linked3 + "/" + shard);
  }
  fs::remove_all(built1);
  fs::remove_all(built3);
  const std::vector<std::string> sources = {plain1, plain3, linked1, linked3};
  std::map<std::string, uint32_t> digest;
  uint64_t all = 0;
  for (const std::string& s : sources) {
    digest[s] = DatasetDigest(s);
    all += DatasetBytes(s);
  }
  // The cache root holds files of the user's, named like the cache's: never touched.
  const std::string root = work + "/cache";
  fs::create_directories(root + "/build.tmp/objects");
  std::ofstream(root + "/build.tmp/objects/a.o") << "object";
  std::ofstream(root + "/report.tmp") << "report";
  std::ofstream(root + "/notes.lock") << "notes";
  fs::create_directories(root + "/plain1-0123456789abcdef.tmp");
  std::ofstream(root + "/plain1-0123456789abcdef.tmp/keep") << "keep";
  const std::string own_rel = "cache/dspipe-cache-v1";
  const std::string own = work + "/" + own_rel;
  const auto before = Listing(work, own_rel);
  const uint64_t limit = all * 6 / 10;  // room for some of the four, never all

  std::mt19937_64 rng(args.seed);
  std::map<std::string, int> kills_by_step;
  int kills = 0, processes = 0, cached = 0, in_place = 0, samples = 0;
  uint64_t peak = 0;
  for (int round = 0; round < args.rounds; ++round) {
    std::vector<Worker> ws;
    for (int i = 0; i < args.workers; ++i) {
      Worker w = Start(args.tool, sources[rng() % sources.size()], root, limit);
      if (static_cast<int>(rng() % 1000) < args.kill_permille) {
        w.kill_at = 1 + static_cast<int>(rng() % 8);
      }
      ws.push_back(std::move(w));
      ++processes;
    }
    auto sample = [&](const std::string& when) {
      int files = 0;
      const uint64_t u = DatasetFileUsage(own, &files);
      ++samples;
      peak = std::max(peak, u);
      if (u > limit + 4096u * files) {
        Violation("round " + std::to_string(round) + ", " + when + ": usage " + std::to_string(u) +
                  " > limit " + std::to_string(limit) + " + " + std::to_string(files) +
                  " pages, in " + Breakdown(own));
      }
    };
    for (;;) {
      std::vector<pollfd> fds;
      std::vector<size_t> who;
      for (size_t i = 0; i < ws.size(); ++i) {
        if (!ws[i].done) {
          fds.push_back({ws[i].out, POLLIN, 0});
          who.push_back(i);
        }
      }
      if (fds.empty()) break;
      if (::poll(fds.data(), fds.size(), -1) < 0) continue;
      for (size_t k = 0; k < fds.size(); ++k) {
        if (!(fds[k].revents & (POLLIN | POLLHUP | POLLERR))) continue;
        Worker& w = ws[who[k]];
        char b[4096];
        const ssize_t n = ::read(w.out, b, sizeof b);
        if (n <= 0) {
          w.done = true;
          continue;
        }
        w.buf.append(b, static_cast<size_t>(n));
        size_t nl;
        while (!w.killed && (nl = w.buf.find('\n')) != std::string::npos) {
          const std::string line = w.buf.substr(0, nl);
          w.buf.erase(0, nl + 1);
          w.output += line + "\n";
          if (line.rfind("step ", 0) != 0) continue;
          ++w.steps;
          sample(line);  // the worker waits at a durable step: sample the usage now
          if (w.steps == w.kill_at) {
            ::kill(w.pid, SIGKILL);
            w.killed = true;
            ++kills;
            std::istringstream in(line.substr(5));
            std::string step;
            in >> step;
            ++kills_by_step[step];
          } else {
            const char c = 'g';
            if (::write(w.in, &c, 1) != 1) Violation("a worker died: " + w.output);
          }
        }
      }
    }
    for (Worker& w : ws) {
      ::close(w.out);
      ::close(w.in);
      int st = 0;
      ::waitpid(w.pid, &st, 0);
      w.output += w.buf;
      if (w.killed) continue;
      if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) {
        Violation("round " + std::to_string(round) + ": an open failed: " + w.output);
        continue;
      }
      const bool is_cached = w.output.find("result cached=1") != std::string::npos;
      const size_t r = w.output.find("\nreason ");
      const size_t d = w.output.find("digest ");
      if (d == std::string::npos ||
          std::strtoul(w.output.c_str() + d + 7, nullptr, 16) != digest[w.source]) {
        Violation("round " + std::to_string(round) + ": " + w.source +
                  " read other bytes: " + w.output);
      }
      if (is_cached) {
        ++cached;
      } else if (r == std::string::npos || w.output.compare(r + 8, 1, "\n") == 0) {
        Violation("round " + std::to_string(round) + ": in place without a reason: " + w.output);
      } else {
        ++in_place;
      }
    }
    sample("after round " + std::to_string(round));
    // 1 + 5: the sources, the link targets and the user's files beside the cache.
    const std::string changed = Changed(before, Listing(work, own_rel));
    if (!changed.empty()) Violation("round " + std::to_string(round) + ": " + changed);
    // 2: every committed entry complete, holding its source's bytes.
    std::unique_ptr<dspipe::Directory> dir;
    if (dspipe::Env::Default()->OpenDirectory(own, &dir).ok()) {
      std::vector<std::string> names;
      (void)dir->List(&names);
      for (const std::string& n : names) {
        if (dspipe::cache::ParseName(n).kind != dspipe::cache::NameKind::kEntry) continue;
        dspipe::FileInfo info;
        if (!dir->Stat(n, &info).ok() || info.kind != dspipe::FileKind::kDirectory) continue;
        dspipe::Status s = dspipe::cache::VerifyEntryAgainstRecord(*dir, n, true);
        if (!s.ok()) Violation("round " + std::to_string(round) + ": " + s.ToString());
        const std::string base = n.substr(0, n.size() - 17);
        bool known = false;
        for (const std::string& src : sources) {
          if (fs::path(src).filename() != base) continue;
          known = true;
          if (DatasetDigest(own + "/" + n + "/" + base) != digest[src]) {
            Violation("round " + std::to_string(round) + ": entry " + n +
                      " does not hold its source's bytes");
          }
        }
        if (!known) Violation("round " + std::to_string(round) + ": an entry of nothing: " + n);
      }
    }
  }
  std::string steps;
  for (const auto& [k, v] : kills_by_step) {
    steps += (steps.empty() ? "" : ", ") + std::string("\"") + k + "\": " + std::to_string(v);
  }
  char figures[1024];
  std::snprintf(figures, sizeof figures,
                "{\"rounds\": %d, \"workers_per_round\": %d, \"processes\": %d, \"seed\": %lu, "
                "\"kill_points\": %d, \"kills_by_step\": {%s}, \"cached\": %d, "
                "\"in_place\": %d, \"usage_samples\": %d, \"peak_usage\": %lu, \"limit\": %lu, "
                "\"violations\": %zu}",
                args.rounds, args.workers, processes, static_cast<unsigned long>(args.seed), kills,
                steps.c_str(), cached, in_place, samples, static_cast<unsigned long>(peak),
                static_cast<unsigned long>(limit), violations.size());
  std::printf("%s\n", figures);
  if (!args.json.empty()) std::ofstream(args.json) << figures << "\n";
  std::error_code ec;
  fs::remove_all(work, ec);
  if (!violations.empty()) return 1;
  if (kills < args.min_kills) {
    std::fprintf(stderr, "only %d kill points (wanted %d)\n", kills, args.min_kills);
    return 1;
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  Args a;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string k = argv[i], v = argv[i + 1];
    if (k == "--tool")
      a.tool = v;
    else if (k == "--rounds")
      a.rounds = std::atoi(v.c_str());
    else if (k == "--workers")
      a.workers = std::atoi(v.c_str());
    else if (k == "--seed")
      a.seed = std::strtoull(v.c_str(), nullptr, 10);
    else if (k == "--kill-permille")
      a.kill_permille = std::atoi(v.c_str());
    else if (k == "--min-kills")
      a.min_kills = std::atoi(v.c_str());
    else if (k == "--json")
      a.json = v;
    else {
      std::fprintf(stderr, "unknown argument %s\n", k.c_str());
      return 2;
    }
  }
  if (a.tool.empty()) {
    std::fprintf(stderr, "usage: cache_torture --tool PATH/cache_tool [--rounds N] ...\n");
    return 2;
  }
  signal(SIGPIPE, SIG_IGN);
  return Run(a);
}
