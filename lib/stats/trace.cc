// SPDX-License-Identifier: Apache-2.0
// Tracing: enabling, and writing the Chrome Trace Event JSON.
#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <system_error>

#include "dspipe/stats.h"
#include "stats/trace_buffer.h"

namespace dspipe {
namespace {

// Closes the FILE and removes the temporary file unless Commit() was called.
class TmpFile {
 public:
  explicit TmpFile(std::string path) : path_(std::move(path)) {
    file_ = std::fopen(path_.c_str(), "wb");
  }
  ~TmpFile() {
    if (file_ != nullptr) std::fclose(file_);
    if (!committed_) std::remove(path_.c_str());
  }
  TmpFile(const TmpFile&) = delete;
  TmpFile& operator=(const TmpFile&) = delete;

  std::FILE* get() const { return file_; }
  // Flushes, closes and returns errno (0 on success).
  int Close() {
    int err = 0;
    if (std::fflush(file_) != 0 || std::ferror(file_) != 0) err = errno != 0 ? errno : EIO;
    if (err == 0 && ::fsync(::fileno(file_)) != 0) err = errno;
    if (std::fclose(file_) != 0 && err == 0) err = errno;
    file_ = nullptr;
    return err;
  }
  void Commit() { committed_ = true; }

 private:
  std::string path_;
  std::FILE* file_ = nullptr;
  bool committed_ = false;
};

}  // namespace

void StageStats::EnableTrace(size_t max_events_per_thread) {
  std::lock_guard<std::mutex> lock(trace_mu_);
  if (trace_enabled_.load(std::memory_order_relaxed)) return;
  trace_capacity_ = max_events_per_thread;
  trace_enabled_.store(true, std::memory_order_release);
}

uint64_t StageStats::dropped_trace_events() const {
  std::lock_guard<std::mutex> lock(trace_mu_);
  uint64_t dropped = 0;
  for (const auto& b : trace_buffers_) dropped += b->dropped.load(std::memory_order_relaxed);
  return dropped;
}

Status StageStats::WriteChromeTrace(const std::string& path) const {
  std::vector<const TraceBuffer*> buffers;
  {
    std::lock_guard<std::mutex> lock(trace_mu_);
    for (const auto& b : trace_buffers_) buffers.push_back(b.get());
  }
  std::sort(buffers.begin(), buffers.end(),
            [](const TraceBuffer* a, const TraceBuffer* b) { return a->tid < b->tid; });

  const std::string tmp = fmt::format("{}.tmp.{}", path, ::getpid());
  TmpFile out(tmp);
  if (out.get() == nullptr) return Status::IOErrorErrno("write Chrome trace", path, errno);
  std::FILE* f = out.get();
  const int pid = static_cast<int>(::getpid());
  uint64_t dropped = 0;

  try {  // fmt::print throws std::system_error when fwrite fails (e.g. ENOSPC)
    fmt::print(f, "{{\"displayTimeUnit\":\"ms\",\"traceEvents\":[\n");
    fmt::print(f,
               "{{\"name\":\"process_name\",\"ph\":\"M\",\"pid\":{},\"tid\":0,"
               "\"args\":{{\"name\":\"dspipe\"}}}}",
               pid);
    for (const TraceBuffer* b : buffers) {
      const nlohmann::json name = stats::ThreadNameOf(b->tid);
      fmt::print(f,
                 ",\n{{\"name\":\"thread_name\",\"ph\":\"M\",\"pid\":{},\"tid\":{},"
                 "\"args\":{{\"name\":{}}}}}",
                 pid, b->tid, name.dump());
      dropped += b->dropped.load(std::memory_order_relaxed);
      const size_t n = b->size.load(std::memory_order_acquire);
      for (size_t i = 0; i < n; ++i) {
        const stats::TraceEvent& e = b->events[i];
        const double ts_us =
            static_cast<double>(static_cast<int64_t>(e.start_ns - origin_ns_)) / 1e3;
        fmt::print(f,
                   ",\n{{\"name\":\"{}\",\"cat\":\"dspipe\",\"ph\":\"X\",\"ts\":{:.3f},"
                   "\"dur\":{:.3f},\"pid\":{},\"tid\":{},\"args\":{{\"id\":{}}}}}",
                   StageName(e.stage), ts_us, static_cast<double>(e.dur_ns) / 1e3, pid, b->tid,
                   e.id);
      }
    }
    fmt::print(f, "\n],\"otherData\":{{\"dropped_events\":{}}}}}\n", dropped);
  } catch (const std::system_error& e) {
    return Status::IOErrorErrno("write Chrome trace", path, e.code().value());
  }

  if (const int err = out.Close(); err != 0) {
    return Status::IOErrorErrno("write Chrome trace", path, err);
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    return Status::IOErrorErrno("rename " + tmp + " to Chrome trace", path, errno);
  }
  out.Commit();
  return Status::OK();
}

}  // namespace dspipe
