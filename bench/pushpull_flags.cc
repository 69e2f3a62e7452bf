#include "bench/pushpull_flags.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "common/logging.h"

namespace ps::pushpull {
namespace {

std::vector<int> ParseList(const std::string& s) {
  std::vector<int> out;
  for (absl::string_view part : absl::StrSplit(s, ',', absl::SkipEmpty())) {
    int v;
    PS_CHECK(absl::SimpleAtoi(part, &v));
    out.push_back(v);
  }
  return out;
}

}  // namespace

Flags ParseFlags(int argc, char** argv) {
  Flags f;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto value = [&](const char* name) -> const char* {
      const size_t n = std::strlen(name);
      if (a.compare(0, n, name) == 0 && a.size() > n && a[n] == '=') {
        return argv[i] + n + 1;
      }
      return nullptr;
    };
    if (a == "--quick") {
      f.quick = true;
    } else if (a == "--no_sparse") {
      f.sparse = false;
    } else if (a == "--no_echo") {
      f.echo = false;
    } else if (a == "--wal") {
      f.wal = true;
    } else if (const char* v = value("--reps")) {
      f.reps = std::atoi(v);
    } else if (const char* v = value("--sizes")) {
      f.sizes_mib = ParseList(v);
    } else if (const char* v = value("--servers")) {
      f.servers = ParseList(v);
    } else if (const char* v = value("--workers")) {
      f.workers = ParseList(v);
    } else if (const char* v = value("--target_mib")) {
      f.target_mib = std::atof(v);
    } else if (const char* v = value("--wire")) {
      for (absl::string_view part : absl::StrSplit(v, ',', absl::SkipEmpty())) {
        v1::Precision p;
        if (!v1::Precision_Parse(absl::AsciiStrToUpper(part), &p) ||
            p == v1::FP32) {
          std::fprintf(stderr, "--wire: %s is not FP16 or BF16\n",
                       std::string(part).c_str());
          std::exit(2);
        }
        f.wire.push_back(p);
      }
    } else {
      std::fprintf(stderr, "unknown flag %s\n", argv[i]);
      std::exit(2);
    }
  }
  if (f.quick) {
    f.reps = std::min(f.reps, 2);
    f.sizes_mib = {1};
    f.servers = {2};
    f.workers = {2};
    f.target_mib = 8;
  }
  return f;
}

}  // namespace ps::pushpull
