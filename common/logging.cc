#include "common/logging.h"

#include <cstdio>
#include <cstdlib>
#include <string>

#include "absl/time/clock.h"
#include "absl/time/time.h"

namespace ps {

std::string EscapeForLog(std::string_view message) {
  std::string out;
  out.reserve(message.size());
  for (char c : message) {
    const unsigned char u = static_cast<unsigned char>(c);
    if (c == '\n') {
      out += "\\n";
    } else if (c == '\r') {
      out += "\\r";
    } else if (c == '\t') {
      out += "\\t";
    } else if (c == '\\') {
      out += "\\\\";
    } else if (u < 0x20 || u == 0x7f) {
      static constexpr char kHex[] = "0123456789abcdef";
      out += "\\x";
      out += kHex[u >> 4];
      out += kHex[u & 0xf];
    } else {
      out += c;
    }
  }
  return out;
}

void LogLine(LogSeverity severity, std::string_view message) {
  static constexpr char kLetters[] = {'I', 'W', 'E', 'F'};
  const std::string line = absl::StrCat(
      absl::FormatTime("%Y-%m-%dT%H:%M:%E3S", absl::Now(), absl::UTCTimeZone()),
      " ", std::string(1, kLetters[static_cast<int>(severity)]), " ",
      EscapeForLog(message), "\n");
  // One fwrite per line keeps lines from different threads whole.
  std::fwrite(line.data(), 1, line.size(), stderr);
  if (severity == LogSeverity::kFatal) std::abort();
}

}  // namespace ps
