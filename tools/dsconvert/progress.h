// SPDX-License-Identifier: Apache-2.0
// Progress display for long CLI jobs: a redrawn bar with rate and ETA on a terminal, a plain
// line every few seconds otherwise (logs, notebooks, CI). Counts records (build) or bytes
// (fetch); a total of 0 means "not known yet" (no bar, no ETA).
#pragma once

#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <string>

namespace dspipe::cli {

class Progress {
 public:
  enum class Unit { kCount, kBytes };
  explicit Progress(std::string what, Unit unit = Unit::kCount)
      : what_(std::move(what)), unit_(unit), tty_(::isatty(2)) {}

  void Update(uint64_t done, uint64_t total) {
    if (first_done_ == UINT64_MAX) {  // the starting point (resumed jobs start past 0)
      first_done_ = done;
      start_ = last_ = std::chrono::steady_clock::now();
      return;
    }
    const auto now = std::chrono::steady_clock::now();
    const double since_print = std::chrono::duration<double>(now - last_).count();
    const bool finished = total > 0 && done >= total;
    if (!finished && since_print < (tty_ ? 0.2 : 5.0)) return;
    last_ = now;
    const double secs = std::chrono::duration<double>(now - start_).count();
    const double rate =
        secs > 0 && done >= first_done_ ? static_cast<double>(done - first_done_) / secs : 0;
    const double eta = rate > 0 && total > done ? static_cast<double>(total - done) / rate : 0;
    const double frac = total ? static_cast<double>(done) / static_cast<double>(total) : 0;
    const std::string amount = Amount(done, total, rate, eta);
    if (tty_) {
      const int width = 30, filled = static_cast<int>(frac * width);
      std::fprintf(stderr, "\r%s [%.*s%*s] %s   ", what_.c_str(), filled,
                   "##############################", width - filled, "", amount.c_str());
      if (finished) std::fputc('\n', stderr);
    } else {
      std::fprintf(stderr, "%s: %s\n", what_.c_str(), amount.c_str());
    }
    std::fflush(stderr);
  }

  // A one-line message between updates (ends a redrawn bar line first).
  void Note(const std::string& msg) {
    std::fprintf(stderr, "%s%s: %s\n", tty_ && first_done_ != UINT64_MAX ? "\n" : "",
                 what_.c_str(), msg.c_str());
    std::fflush(stderr);
  }

 private:
  std::string Amount(uint64_t done, uint64_t total, double rate, double eta) const {
    char buf[160];
    const double pct = total ? 100.0 * static_cast<double>(done) / static_cast<double>(total) : 0;
    if (unit_ == Unit::kBytes) {
      constexpr double kMiB = 1 << 20;
      if (total)
        std::snprintf(buf, sizeof buf, "%.1f/%.1f MiB (%.1f%%) %.1f MiB/s ETA %.0fs",
                      static_cast<double>(done) / kMiB, static_cast<double>(total) / kMiB, pct,
                      rate / kMiB, eta);
      else
        std::snprintf(buf, sizeof buf, "%.1f MiB %.1f MiB/s", static_cast<double>(done) / kMiB,
                      rate / kMiB);
    } else {
      std::snprintf(buf, sizeof buf, "%llu/%llu (%.1f%%) %.0f/s ETA %.0fs",
                    static_cast<unsigned long long>(done), static_cast<unsigned long long>(total),
                    pct, rate, eta);
    }
    return buf;
  }

  std::string what_;
  Unit unit_;
  bool tty_;
  uint64_t first_done_ = UINT64_MAX;
  std::chrono::steady_clock::time_point start_ = std::chrono::steady_clock::now();
  std::chrono::steady_clock::time_point last_{};
};

}  // namespace dspipe::cli
