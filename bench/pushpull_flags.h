// ps-bench's command line (bench/pushpull_bench.cc has its usage).
#ifndef PS_BENCH_PUSHPULL_FLAGS_H_
#define PS_BENCH_PUSHPULL_FLAGS_H_

#include <vector>

#include "ps/v1/job.pb.h"

namespace ps::pushpull {

// What ps-bench measures and how often.
struct Flags {
  bool quick = false;
  int reps = 5;
  std::vector<int> sizes_mib = {1, 16, 64};
  std::vector<int> servers = {1, 2, 4};
  std::vector<int> workers = {1, 2, 4};
  // Bytes each repetition moves (all workers together), at least one call per
  // worker.
  double target_mib = 96;
  bool sparse = true;
  bool echo = true;
  bool wal = false;
  // 16-bit gradient encodings to measure besides FP32 (--wire).
  std::vector<v1::Precision> wire;
};

// The flags of the command line; exits with status 2 on an unknown flag or a
// bad --wire. --quick cuts the matrix to one small configuration.
Flags ParseFlags(int argc, char** argv);

}  // namespace ps::pushpull

#endif  // PS_BENCH_PUSHPULL_FLAGS_H_
