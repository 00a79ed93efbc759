// SPDX-License-Identifier: Apache-2.0
#include "dspipe/log.h"

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <string>

namespace dspipe {
namespace {

LogLevel LevelFromEnv() {
  const char* v = std::getenv("DSPIPE_LOG_LEVEL");
  if (v == nullptr) return LogLevel::kInfo;
  if (std::strcmp(v, "debug") == 0) return LogLevel::kDebug;
  if (std::strcmp(v, "warn") == 0) return LogLevel::kWarn;
  if (std::strcmp(v, "error") == 0) return LogLevel::kError;
  if (std::strcmp(v, "off") == 0) return LogLevel::kOff;
  return LogLevel::kInfo;
}

std::atomic<int>& LevelRef() {
  static std::atomic<int> level{static_cast<int>(LevelFromEnv())};
  return level;
}

}  // namespace

void SetLogLevel(LogLevel level) { LevelRef().store(static_cast<int>(level)); }
LogLevel GetLogLevel() { return static_cast<LogLevel>(LevelRef().load()); }

void Log(LogLevel level, std::string_view message) {
  if (static_cast<int>(level) < LevelRef().load() || level == LogLevel::kOff) return;
  static const char* kNames[] = {"debug", "info", "warn", "error"};
  std::string line = "[dspipe ";
  line += kNames[static_cast<int>(level)];
  line += "] ";
  line += message;
  line += '\n';
  static std::mutex mu;
  std::lock_guard<std::mutex> lock(mu);
  std::fwrite(line.data(), 1, line.size(), stderr);
}

}  // namespace dspipe
