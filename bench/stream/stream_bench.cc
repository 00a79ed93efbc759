// SPDX-License-Identifier: Apache-2.0
// stream_bench: the loader over a sharded dataset streamed from an S3 server (stream_bench.sh
// starts SeaweedFS on 127.0.0.1 and pushes the dataset) against the same loader over the same
// shards on local disk, side by side in one run, interleaved by round (docs/STORAGE.md
// "Streaming", issue 23's targets).
//
//   stream_bench LOCAL_DIR s3://bkt/prefix/ CACHE_DIR [--rounds 3] [--epochs 3] [--threads 2]
//                [--batch 8] [--ahead 2] [--server-pid PID] [--json OUT]
//
// Each round, in this order (every configuration once, so load from elsewhere hits all alike):
//   local    LOCAL_DIR read in place: epoch 1 after posix_fadvise(DONTNEED) of every data.mdb
//            (cold page cache), epochs 2.. warm
//   stream   the URL through an empty CACHE_DIR with no limit: epoch 1 fetches every shard from
//            the server while it reads, epochs 2.. read the cached shards
//   quarter  the URL through an empty CACHE_DIR with cache_limit = 25% of the shards' bytes,
//            stream_ahead 1: every epoch streams again. Checked: every epoch's indices are each
//            sample once; the cache directory's data files (sampled after every batch) and the
//            stream's peak never exceed the limit; bytes fetched per epoch / dataset bytes.
// Every loader: order "blocks" with block_size = the shard size (shard after shard, shuffled),
// seed 1, THREADS threads, batch BATCH, decode + hflip(p=0.5) + normalize to float32 (CPU).
// Prints images/s per configuration and epoch (median and min-max over rounds) and the ratios;
// epoch 1's CPU-seconds of this process (CpuSeconds, ../cpu_time.h) and of the server
// (--server-pid: /proc/PID/stat), and the cores they kept busy. --json: the ratios, and per
// round the streamed loader's open seconds and images/s per epoch (stream_bench.sh --compare
// reads them).
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <numeric>
#include <sstream>
#include <string>
#include <vector>

#include "../cpu_time.h"
#include "../series.h"
#include "cache/cached_dataset.h"
#include "core/files.h"
#include "dspipe/loader.h"
#include "format/manifest.h"

namespace fs = std::filesystem;
using namespace dspipe;

namespace {

struct Args {
  std::string local, url, cache, json;
  int rounds = 3, epochs = 3, threads = 2, batch = 8, ahead = 2;
  int server_pid = 0;  // --server-pid: the S3 server, whose CPU time each epoch is counted
};

int g_server_pid = 0;

// CPU seconds the server process has used (/proc/PID/stat utime + stime), 0 without one.
double ServerCpuSeconds() {
  if (g_server_pid <= 0) return 0;
  std::ifstream f("/proc/" + std::to_string(g_server_pid) + "/stat");
  std::string stat((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  const size_t close = stat.rfind(')');  // the command name may hold spaces
  if (close == std::string::npos) return 0;
  std::istringstream rest(stat.substr(close + 2));
  std::string field;
  unsigned long long utime = 0, stime = 0;
  for (int i = 3; i <= 15 && rest >> field; ++i) {  // fields 14 and 15 (1-based)
    if (i == 14) utime = std::stoull(field);
    if (i == 15) stime = std::stoull(field);
  }
  return static_cast<double>(utime + stime) / static_cast<double>(::sysconf(_SC_CLK_TCK));
}

[[noreturn]] void Die(const std::string& m) {
  std::fprintf(stderr, "stream_bench: %s\n", m.c_str());
  std::exit(1);
}

void Check(const Status& s, const std::string& what) {
  if (!s.ok()) Die(what + ": " + s.ToString());
}

std::vector<std::string> DataFiles(const std::string& dir) {
  std::vector<std::string> v;
  for (const auto& e : fs::directory_iterator(dir)) {
    if (e.is_directory() && fs::exists(e.path() / "data.mdb")) {
      v.push_back((e.path() / "data.mdb").string());
    }
  }
  std::sort(v.begin(), v.end());
  return v;
}

void DropPageCache(const std::vector<std::string>& files) {
  for (const std::string& f : files) {
    const int fd = ::open(f.c_str(), O_RDONLY);
    if (fd < 0) Die("open " + f);
    (void)::fdatasync(fd);
    if (::posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED) != 0) Die("fadvise " + f);
    ::close(fd);
  }
}

uint64_t CacheDataBytes(const std::string& root) {  // as s3_stream_test: data files only
  uint64_t n = 0;
  std::error_code ec;
  for (auto it = fs::directory_iterator(fs::path(root) / "dspipe-cache-v1", ec);
       !ec && it != fs::directory_iterator(); it.increment(ec)) {
    if (!it->is_directory(ec)) continue;
    for (auto f = fs::recursive_directory_iterator(it->path(), ec);
         !ec && f != fs::recursive_directory_iterator(); f.increment(ec)) {
      if (f->is_regular_file(ec) && f->path().filename() != "lock.mdb") n += f->file_size(ec);
    }
  }
  return n;
}

struct EpochRun {
  double images_per_s = 0;
  uint64_t fetched = 0;                             // stream: bytes fetched during the epoch
  double wait_s = 0;                                // stream: reads waiting on the network
  double seconds = 0, cpu_s = 0, server_cpu_s = 0;  // wall; this process's and the server's CPU
  bool exactly_once = false;
};

// Opens the loader and runs `epochs` whole epochs; `sample` (optional) after every batch.
// `open_s` (optional): the seconds Loader::Open took (for a URL: the manifest's fetch).
std::vector<EpochRun> Run(const std::string& path, LoaderOptions o, int epochs, uint64_t count,
                          const std::function<void()>& sample = nullptr,
                          cache::StreamStats* final_stats = nullptr, double* open_s = nullptr) {
  std::unique_ptr<Loader> loader;
  const auto t_open = std::chrono::steady_clock::now();
  Check(Loader::Open(path, o, &loader), "open " + path);
  if (open_s) {
    *open_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t_open).count();
  }
  std::shared_ptr<cache::ShardStream> stream = cache::CacheStateOf(loader->dataset()).stream;
  if (o.cache != "off" && !stream) Die(path + ": not streamed (" + loader->reading_from() + ")");
  std::vector<EpochRun> out;
  cache::StreamStats before = stream ? stream->stats() : cache::StreamStats();
  for (int e = 0; e < epochs; ++e) {
    std::vector<uint64_t> seen;
    const auto t0 = std::chrono::steady_clock::now();
    const double cpu0 = CpuSeconds(), server0 = ServerCpuSeconds();
    uint64_t images = 0;
    for (;;) {
      Batch b;
      Check(loader->Next(&b), "next " + path);
      if (!b) break;
      images += static_cast<uint64_t>(b.size());
      seen.insert(seen.end(), b.indices(), b.indices() + b.size());
      if (sample) sample();
    }
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    EpochRun r;
    r.seconds = s;
    r.cpu_s = CpuSeconds() - cpu0;
    r.server_cpu_s = ServerCpuSeconds() - server0;
    r.images_per_s = static_cast<double>(images) / s;
    std::sort(seen.begin(), seen.end());
    r.exactly_once = seen.size() == count;
    for (uint64_t i = 0; r.exactly_once && i < count; ++i) r.exactly_once = seen[i] == i;
    if (stream) {
      const cache::StreamStats now = stream->stats();
      r.fetched = now.fetched_bytes - before.fetched_bytes;
      r.wait_s = now.wait_seconds - before.wait_seconds;
      before = now;
    }
    out.push_back(r);
  }
  if (final_stats && stream) *final_stats = stream->stats();
  return out;
}

std::string Row(const Series& s) {
  char buf[96];
  std::snprintf(buf, sizeof buf, "%8.1f (%.1f-%.1f)", s.Median(), s.Min(), s.Max());
  return buf;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 4) Die("usage: stream_bench LOCAL_DIR s3://bkt/prefix/ CACHE_DIR [options]");
  Args a;
  a.local = argv[1];
  a.url = argv[2];
  a.cache = argv[3];
  for (int i = 4; i + 1 < argc; i += 2) {
    const std::string k = argv[i];
    const std::string v = argv[i + 1];
    if (k == "--rounds")
      a.rounds = std::stoi(v);
    else if (k == "--epochs")
      a.epochs = std::stoi(v);
    else if (k == "--threads")
      a.threads = std::stoi(v);
    else if (k == "--batch")
      a.batch = std::stoi(v);
    else if (k == "--ahead")
      a.ahead = std::stoi(v);
    else if (k == "--json")
      a.json = v;
    else if (k == "--server-pid")
      a.server_pid = std::stoi(v);
    else
      Die("unknown option " + k);
  }
  if (a.epochs < 2) Die("--epochs must be >= 2 (a first epoch and cached ones)");
  g_server_pid = a.server_pid;
  std::string text;
  DatasetInfo info;
  std::vector<format::ShardRange> ranges;
  Check(core::ReadFile(a.local + "/manifest.json", &text), "manifest");
  Check(format::ParseManifest(text, a.local, &info, &ranges), "manifest");
  const std::vector<std::string> files = DataFiles(a.local);
  uint64_t total = 0;
  for (const std::string& f : files) total += fs::file_size(f);
  const uint64_t per_shard = ranges.at(0).end - ranges.at(0).begin;

  LoaderOptions base;
  base.batch_size = a.batch;
  base.threads = a.threads;
  base.sampler.order = SampleOrder::kBlocks;
  base.sampler.block_size = per_shard;
  base.sampler.seed = 1;
  base.augment.hflip = 0.5;
  base.normalize = NormalizeMode::kCpuFloat32;
  base.stream_ahead = a.ahead;

  std::vector<Series> local(a.epochs), stream(a.epochs), quarter(a.epochs);
  Series quarter_fetched_ratio, first_ratio, later_ratio, stream_open;
  // Epoch 1's CPU: the local loader's, the streamed loader's and the server's (CPU-seconds), and
  // how many of the machine's cores the streamed epoch kept busy (all CPU / wall seconds).
  Series local_cpu, stream_cpu, server_cpu, local_busy, stream_busy;
  std::vector<std::vector<EpochRun>> stream_rounds;  // for --json
  bool all_once = true, within = true;
  uint64_t quarter_limit = total / 4, most = 0, peak = 0;
  for (int r = 0; r < a.rounds; ++r) {
    std::printf("== round %d/%d\n", r + 1, a.rounds);
    std::fflush(stdout);
    DropPageCache(files);
    const std::vector<EpochRun> l = Run(a.local, base, a.epochs, info.count);
    fs::remove_all(a.cache);
    LoaderOptions s = base;
    s.cache = a.cache;
    double open_s = 0;
    const std::vector<EpochRun> st = Run(a.url, s, a.epochs, info.count, nullptr, nullptr, &open_s);
    stream_open.v.push_back(open_s);
    stream_rounds.push_back(st);
    fs::remove_all(a.cache);
    LoaderOptions q = s;
    q.cache_limit = quarter_limit;
    q.stream_ahead = 1;
    cache::StreamStats qs;
    const std::vector<EpochRun> qr = Run(
        a.url, q, a.epochs, info.count, [&] { most = std::max(most, CacheDataBytes(a.cache)); },
        &qs);
    peak = std::max(peak, qs.peak_held_bytes);
    fs::remove_all(a.cache);
    for (int e = 0; e < a.epochs; ++e) {
      local[e].v.push_back(l[e].images_per_s);
      stream[e].v.push_back(st[e].images_per_s);
      quarter[e].v.push_back(qr[e].images_per_s);
      quarter_fetched_ratio.v.push_back(static_cast<double>(qr[e].fetched) / total);
      all_once = all_once && l[e].exactly_once && st[e].exactly_once && qr[e].exactly_once;
      if (e > 0) later_ratio.v.push_back(st[e].images_per_s / l[e].images_per_s);
    }
    first_ratio.v.push_back(st[0].images_per_s / l[0].images_per_s);
    local_cpu.v.push_back(l[0].cpu_s);
    stream_cpu.v.push_back(st[0].cpu_s);
    server_cpu.v.push_back(st[0].server_cpu_s);
    local_busy.v.push_back(l[0].cpu_s / l[0].seconds);
    stream_busy.v.push_back((st[0].cpu_s + st[0].server_cpu_s) / st[0].seconds);
  }
  within = most <= quarter_limit && peak <= quarter_limit;
  std::printf("\n%u samples, %zu shards, %.1f MiB of shards; %d threads, batch %d, %d rounds\n",
              static_cast<unsigned>(info.count), files.size(), total / 1048576.0, a.threads,
              a.batch, a.rounds);
  std::printf("images/s, median (min-max)   %-24s %-24s %-24s\n", "local (epoch 1 cold)",
              "stream (no limit)", "stream (25% limit)");
  for (int e = 0; e < a.epochs; ++e) {
    std::printf("epoch %d                      %-24s %-24s %-24s\n", e + 1, Row(local[e]).c_str(),
                Row(stream[e]).c_str(), Row(quarter[e]).c_str());
  }
  std::printf("first epoch from the server / local cold: %.3f (per round %.3f-%.3f)\n",
              first_ratio.Median(), first_ratio.Min(), first_ratio.Max());
  std::printf(
      "epoch 1 CPU-seconds, median: local cold %.2f (cores busy %.2f); streamed %.2f loader + "
      "%.2f server (cores busy %.2f of %ld)\n",
      local_cpu.Median(), local_busy.Median(), stream_cpu.Median(), server_cpu.Median(),
      stream_busy.Median(), ::sysconf(_SC_NPROCESSORS_ONLN));
  std::printf("stream open (the manifest from the server): median %.3f s (%.3f-%.3f)\n",
              stream_open.Median(), stream_open.Min(), stream_open.Max());
  std::printf("cached epochs / local warm:               %.3f (per epoch and round %.3f-%.3f)\n",
              later_ratio.Median(), later_ratio.Min(), later_ratio.Max());
  std::printf(
      "25%% limit: bytes fetched per epoch / dataset: median %.3f (%.3f-%.3f); "
      "cache data sampled at most %.1f KiB, stream peak %.1f KiB, limit %.1f KiB: %s\n",
      quarter_fetched_ratio.Median(), quarter_fetched_ratio.Min(), quarter_fetched_ratio.Max(),
      most / 1024.0, peak / 1024.0, quarter_limit / 1024.0, within ? "within" : "EXCEEDED");
  std::printf("every epoch of every loader saw every sample exactly once: %s\n",
              all_once ? "yes" : "NO");
  if (!a.json.empty()) {
    std::ofstream j(a.json);
    j << "{\"first_ratio\": " << first_ratio.Median()
      << ", \"later_ratio\": " << later_ratio.Median()
      << ", \"quarter_fetched_ratio_max\": " << quarter_fetched_ratio.Max()
      << ", \"within_limit\": " << (within ? "true" : "false")
      << ", \"exactly_once\": " << (all_once ? "true" : "false") << ", \"count\": " << info.count
      << ", \"stream_rounds\": [";
    // Per round: the streamed loader's open seconds and images/s per epoch (stream_bench.sh
    // --compare puts them beside LitData's and MosaicML Streaming's).
    for (size_t r = 0; r < stream_rounds.size(); ++r) {
      j << (r ? ", " : "") << "{\"open_s\": " << stream_open.v[r] << ", \"images_per_s\": [";
      for (size_t e = 0; e < stream_rounds[r].size(); ++e) {
        j << (e ? ", " : "") << stream_rounds[r][e].images_per_s;
      }
      j << "]}";
    }
    j << "]}\n";
  }
  return all_once && within ? 0 : 1;
}
