// ps-criteo-read-bench: how fast ReadCriteoFile reads a Criteo file
// (docs/benchmarks.md, "CTR data").
//
//   ps-criteo-read-bench FILE [REPS]
//
// reads FILE (plain or gzip) REPS times (default 1) and prints, per read,
// the rows, the seconds and the lines per second.
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "common/criteo_reader.h"

int main(int argc, char** argv) {
  if (argc < 2 || argc > 3) {
    std::fprintf(stderr, "usage: %s FILE [REPS]\n", argv[0]);
    return 2;
  }
  const std::string path = argv[1];
  const int reps = argc == 3 ? std::atoi(argv[2]) : 1;
  for (int rep = 0; rep < reps; ++rep) {
    const auto start = std::chrono::steady_clock::now();
    auto data = ps::ReadCriteoFile(path);
    const double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start)
            .count();
    if (!data.ok()) {
      std::fprintf(stderr, "%s\n", data.status().ToString().c_str());
      return 1;
    }
    std::printf("%s: %lld rows in %.2f s: %.0f lines/s\n", path.c_str(),
                static_cast<long long>(data->size()), seconds,
                static_cast<double>(data->size()) / seconds);
  }
  return 0;
}
