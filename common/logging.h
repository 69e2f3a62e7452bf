// Minimal logging and invariant checks. Debian's Abseil (20220623) predates
// absl/log, so the project logs through this one header.
#ifndef PS_COMMON_LOGGING_H_
#define PS_COMMON_LOGGING_H_

#include <string>
#include <string_view>

#include "absl/strings/str_cat.h"

namespace ps {

enum class LogSeverity { kInfo, kWarning, kError, kFatal };

// `message` with its control bytes escaped as C escapes (\n, \r, \t, \xNN)
// and backslashes doubled, so that text from a client (a job name, a worker's
// error) can never start a forged log line.
std::string EscapeForLog(std::string_view message);

// Writes one line "<time> <severity> <message>" to stderr, `message` escaped
// by EscapeForLog; thread-safe. kFatal aborts the process after writing.
void LogLine(LogSeverity severity, std::string_view message);

}  // namespace ps

#define PS_LOG_INFO(...) \
  ::ps::LogLine(::ps::LogSeverity::kInfo, absl::StrCat(__VA_ARGS__))
#define PS_LOG_WARNING(...) \
  ::ps::LogLine(::ps::LogSeverity::kWarning, absl::StrCat(__VA_ARGS__))
#define PS_LOG_ERROR(...) \
  ::ps::LogLine(::ps::LogSeverity::kError, absl::StrCat(__VA_ARGS__))

// Aborts with a message when a programmer's invariant does not hold.
#define PS_CHECK(cond, ...)                                                  \
  do {                                                                       \
    if (!(cond)) {                                                           \
      ::ps::LogLine(::ps::LogSeverity::kFatal,                               \
                    absl::StrCat(__FILE__, ":", __LINE__, " check failed: ", \
                                 #cond, " " __VA_OPT__(, ) __VA_ARGS__));    \
    }                                                                        \
  } while (0)

#endif  // PS_COMMON_LOGGING_H_
