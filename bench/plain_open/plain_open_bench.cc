// SPDX-License-Identifier: Apache-2.0
// plain_open_bench: how long Dataset::Open takes on a plain LMDB with many decimal keys.
//
//   plain_open_bench [--dir DIR] [--keys N] [--repeats R]
//
// Writes DIR/plain-N.lmdb (reused when present): keys "0".."N-1" (as Python's str(i)), each an
// 8-byte value (the open never reads values), in one LMDB file the way python-lmdb writes it.
// Then opens it R times each way and prints the median and spread (min..max) in seconds:
//   dense  default options: the keys are checked as 0..N-1 by O(log N) probes, never listed
//   scan   PlainLmdbOptions::scan_keys: every key listed, classified and sorted numerically
// each warm (page cache kept) and cold (data.mdb dropped from the page cache before each open),
// plus the process's peak RSS after each series (the scan holds every key in memory).
#include <lmdb.h>
#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <functional>
#include <string>
#include <vector>

#include "core/files.h"
#include "dspipe/dataset.h"

namespace {

using namespace dspipe;
namespace fs = std::filesystem;

struct Args {
  std::string dir = "/tmp/dspipe-plain-open-bench";
  uint64_t keys = 10'000'000;
  int repeats = 5;
};

[[noreturn]] void Die(const std::string& m) {
  std::fprintf(stderr, "plain_open_bench: %s\n", m.c_str());
  std::exit(1);
}
void Check(int rc, const char* what) {
  if (rc != 0) Die(std::string(what) + ": " + mdb_strerror(rc));
}

// Visits "0".."n-1" in LMDB's (bytewise) key order: a pre-order walk of the decimal digit tree.
void BytewiseOrder(uint64_t n, const std::function<void(uint64_t)>& fn) {
  if (n == 0) return;
  fn(0);
  std::function<void(uint64_t)> walk = [&](uint64_t v) {
    fn(v);
    for (uint64_t d = 0; d < 10 && v * 10 + d < n; ++d) walk(v * 10 + d);
  };
  for (uint64_t d = 1; d < 10 && d < n; ++d) walk(d);
}

void Write(const std::string& path, uint64_t n) {
  fs::create_directories(path);
  MDB_env* env = nullptr;
  Check(mdb_env_create(&env), "mdb_env_create");
  Check(mdb_env_set_mapsize(env, uint64_t{8} << 30), "mdb_env_set_mapsize");
  Check(mdb_env_open(env, path.c_str(), MDB_NOSYNC, 0644), "mdb_env_open");
  MDB_txn* txn = nullptr;
  MDB_dbi dbi;
  Check(mdb_txn_begin(env, nullptr, 0, &txn), "mdb_txn_begin");
  Check(mdb_dbi_open(txn, nullptr, 0, &dbi), "mdb_dbi_open");
  uint64_t written = 0;
  BytewiseOrder(n, [&](uint64_t i) {
    const std::string k = std::to_string(i);
    const uint64_t v = i;
    MDB_val mk{k.size(), const_cast<char*>(k.data())}, mv{sizeof v, const_cast<uint64_t*>(&v)};
    Check(mdb_put(txn, dbi, &mk, &mv, MDB_APPEND), "mdb_put");
    if (++written % 1'000'000 == 0) {
      Check(mdb_txn_commit(txn), "mdb_txn_commit");
      Check(mdb_txn_begin(env, nullptr, 0, &txn), "mdb_txn_begin");
    }
  });
  Check(mdb_txn_commit(txn), "mdb_txn_commit");
  Check(mdb_env_sync(env, 1), "mdb_env_sync");
  mdb_env_close(env);
  if (written != n) Die("wrote " + std::to_string(written) + " keys, wanted " + std::to_string(n));
}

struct Spread {
  double median = 0, min = 0, max = 0;
};
Spread Summarize(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return {n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2, v.front(), v.back()};
}

double PeakRssMiB() {
  rusage ru{};
  getrusage(RUSAGE_SELF, &ru);
  return static_cast<double>(ru.ru_maxrss) / 1024.0;
}

}  // namespace

int main(int argc, char** argv) {
  Args a;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string f = argv[i], v = argv[i + 1];
    if (f == "--dir") {
      a.dir = v;
    } else if (f == "--keys") {
      a.keys = std::stoull(v);
    } else if (f == "--repeats") {
      a.repeats = std::stoi(v);
    } else {
      Die("unknown flag " + f + " (--dir DIR --keys N --repeats R)");
    }
  }
  if (a.keys == 0 || a.repeats < 1) Die("--keys and --repeats must be >= 1");
  const std::string path = a.dir + "/plain-" + std::to_string(a.keys) + ".lmdb";
  if (!fs::exists(path + "/data.mdb")) {
    const auto t0 = std::chrono::steady_clock::now();
    Write(path, a.keys);
    std::printf("wrote %s (%llu keys) in %.1f s\n", path.c_str(),
                static_cast<unsigned long long>(a.keys),
                std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  std::printf("%s: %.0f MiB, %llu keys, %d repeats\n", path.c_str(),
              static_cast<double>(fs::file_size(path + "/data.mdb")) / (1 << 20),
              static_cast<unsigned long long>(a.keys), a.repeats);
  std::printf("%-6s %-5s %10s %22s %14s\n", "path", "cache", "median s", "spread (min..max) s",
              "peak RSS MiB");
  for (bool scan : {false, true}) {
    for (bool cold : {false, true}) {
      std::vector<double> secs;
      for (int r = 0; r < a.repeats; ++r) {
        if (cold && !core::DropFileCache(path + "/data.mdb")) {
          Die("could not drop " + path + "/data.mdb from the page cache");
        }
        DatasetOpenOptions o;
        o.plain.scan_keys = scan;
        std::unique_ptr<Dataset> ds;
        const auto t0 = std::chrono::steady_clock::now();
        Status s = Dataset::Open(path, o, &ds);
        secs.push_back(
            std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
        if (!s.ok()) Die(s.ToString());
        if (ds->size() != a.keys) Die("opened " + std::to_string(ds->size()) + " records");
        if (ds->KeyName(a.keys - 1) != "'" + std::to_string(a.keys - 1) + "'") {
          Die("last record is " + ds->KeyName(a.keys - 1));
        }
      }
      const Spread sp = Summarize(secs);
      std::printf("%-6s %-5s %10.4f %10.4f..%-10.4f %14.0f\n", scan ? "scan" : "dense",
                  cold ? "cold" : "warm", sp.median, sp.min, sp.max, PeakRssMiB());
      std::fflush(stdout);
    }
  }
  return 0;
}
