// Logging to stderr: `LOG(INFO) << "loaded " << n << " tensors";`
//
// Lines look like `I 12:34:56.789 loader.cc:42] loaded 272 tensors`. The threshold is set once at
// start-up (SetLogLevel, or KILN_LOG_LEVEL=debug|info|warning|error read by InitLoggingFromEnv);
// LOG(FATAL) aborts after printing. Thread-safe: each line is written with one call.
#pragma once

#include <sstream>
#include <string_view>

#include "core/status.h"

namespace kiln {

enum class LogLevel : int { kDebug = 0, kInfo = 1, kWarning = 2, kError = 3, kFatal = 4 };

void SetLogLevel(LogLevel level);
LogLevel GetLogLevel();
// Parses "debug", "info", "warning", "error" (case-insensitive).
Result<LogLevel> ParseLogLevel(std::string_view name);
// Applies KILN_LOG_LEVEL if set and valid; returns the error if it is set but invalid.
Status InitLoggingFromEnv();

namespace internal {

class LogMessage {
 public:
  LogMessage(LogLevel level, const char* file, int line);
  ~LogMessage();  // writes the line; aborts for kFatal
  std::ostream& stream() { return stream_; }

 private:
  LogLevel level_;
  std::ostringstream stream_;
};

}  // namespace internal
}  // namespace kiln

#define KILN_LOG_DEBUG ::kiln::LogLevel::kDebug
#define KILN_LOG_INFO ::kiln::LogLevel::kInfo
#define KILN_LOG_WARNING ::kiln::LogLevel::kWarning
#define KILN_LOG_ERROR ::kiln::LogLevel::kError
#define KILN_LOG_FATAL ::kiln::LogLevel::kFatal

#define LOG(severity)                                \
  if (KILN_LOG_##severity < ::kiln::GetLogLevel()) { \
  } else                                             \
    ::kiln::internal::LogMessage(KILN_LOG_##severity, __FILE__, __LINE__).stream()
