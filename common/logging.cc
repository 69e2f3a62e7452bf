#include "common/logging.h"

#include <cstdio>
#include <cstdlib>

#include "absl/time/clock.h"
#include "absl/time/time.h"

namespace ps {

void LogLine(LogSeverity severity, std::string_view message) {
  static constexpr char kLetters[] = {'I', 'W', 'E', 'F'};
  const std::string line = absl::StrCat(
      absl::FormatTime("%Y-%m-%dT%H:%M:%E3S", absl::Now(), absl::UTCTimeZone()),
      " ", std::string(1, kLetters[static_cast<int>(severity)]), " ",
      absl::string_view(message.data(), message.size()), "\n");
  // One fwrite per line keeps lines from different threads whole.
  std::fwrite(line.data(), 1, line.size(), stderr);
  if (severity == LogSeverity::kFatal) std::abort();
}

}  // namespace ps
