// Progress display for long CLI jobs: a redrawn bar with rate and ETA on a terminal, a plain
// line every few seconds otherwise (logs, notebooks, CI).
#pragma once

#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <string>

namespace dspipe::cli {

class Progress {
 public:
  explicit Progress(std::string what) : what_(std::move(what)), tty_(::isatty(2)) {}

  void Update(uint64_t done, uint64_t total) {
    if (first_done_ == UINT64_MAX) {  // the starting point (resumed builds start past 0)
      first_done_ = done;
      start_ = last_ = std::chrono::steady_clock::now();
      return;
    }
    const auto now = std::chrono::steady_clock::now();
    const double since_print = std::chrono::duration<double>(now - last_).count();
    if (done < total && since_print < (tty_ ? 0.2 : 5.0)) return;
    last_ = now;
    const double secs = std::chrono::duration<double>(now - start_).count();
    const double rate = secs > 0 ? static_cast<double>(done - first_done_) / secs : 0;
    const double eta = rate > 0 ? static_cast<double>(total - done) / rate : 0;
    const double frac = total ? static_cast<double>(done) / static_cast<double>(total) : 1;
    if (tty_) {
      const int width = 30, filled = static_cast<int>(frac * width);
      std::fprintf(stderr, "\r%s [%.*s%*s] %llu/%llu %5.1f%% %.0f/s ETA %.0fs   ", what_.c_str(),
                   filled, "##############################", width - filled, "",
                   static_cast<unsigned long long>(done), static_cast<unsigned long long>(total),
                   100 * frac, rate, eta);
      if (done >= total) std::fputc('\n', stderr);
    } else {
      std::fprintf(stderr, "%s: %llu/%llu (%.1f%%) %.0f/s ETA %.0fs\n", what_.c_str(),
                   static_cast<unsigned long long>(done), static_cast<unsigned long long>(total),
                   100 * frac, rate, eta);
    }
    std::fflush(stderr);
  }

 private:
  std::string what_;
  bool tty_;
  uint64_t first_done_ = UINT64_MAX;
  std::chrono::steady_clock::time_point start_ = std::chrono::steady_clock::now();
  std::chrono::steady_clock::time_point last_{};
};

}  // namespace dspipe::cli
