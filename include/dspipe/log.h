// SPDX-License-Identifier: Apache-2.0
// Minimal leveled logging to stderr. Thread-safe (one line per call, whole).
// Level from the DSPIPE_LOG_LEVEL environment variable (debug|info|warn|error|off; default info).
#pragma once

#include <string_view>

namespace dspipe {

enum class LogLevel : int { kDebug = 0, kInfo = 1, kWarn = 2, kError = 3, kOff = 4 };

void SetLogLevel(LogLevel level);
LogLevel GetLogLevel();
void Log(LogLevel level, std::string_view message);

}  // namespace dspipe
