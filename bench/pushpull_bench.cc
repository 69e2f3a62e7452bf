// ps-bench: the push/pull data path against a raw gRPC baseline, side by side
// in one process on loopback (docs/benchmarks.md, issue #6).
//
// Ours: in-process ParameterServers (durability MEMORY unless --wal) holding a
// SOFTMAX_REGRESSION job whose parameters are exactly 1/16/64 MiB, ASP so no
// worker waits on another, and one ParameterClient per worker thread. Push and
// Pull are measured in separate phases; bytes/s is model bytes moved by all
// workers over the phase's wall time.
//
// Baseline: the same number of gRPC servers running a callback service
// (BenchEcho) built with the same ServerBuilder settings; each worker thread
// sends the same payload split over the servers in parallel: Send (payload in,
// empty reply) is Push's baseline, Fetch (small request, payload back) is
// Pull's, Echo (payload both ways) is reported for reference.
//
// Sparse: a model of 60,001 blocks of 64 floats; each request pushes or pulls
// 10,000 random keys (PullRequest.keys / a subset of PushRequest.gradients).
//
// Wire gradients: --wire=FP16,BF16 adds, for each dense configuration, a
// push phase of the same job with mixed_precision.wire_gradients set to each
// (2 bytes a value on the wire), on the same servers and interleaved with the
// FP32 push; its row's ratio is against that FP32 push. MB/s there is still
// float32 gradient bytes delivered per second (twice the wire bytes). The
// same jobs set mixed_precision.wire_parameters to the format too, and a
// pull phase of each (16-bit replies) is measured against the FP32 pull.
//
// The pieces: pushpull_flags (the command line), pushpull_measure (phases,
// medians, the report's rows), pushpull_baseline (the BenchEcho servers and
// clients), pushpull_ours (our servers and ParameterClients),
// pushpull_dense and pushpull_sparse (the two measurements).
//
// Usage: ps-bench [--quick] [--reps=N] [--sizes=1,16,64] [--servers=1,2,4]
//                 [--workers=1,2,4] [--target_mib=M] [--no_sparse]
//                 [--no_echo] [--wal] [--wire=FP16,BF16]
#include <stdlib.h>

#include <cstdio>
#include <thread>
#include <vector>

#include "bench/pushpull_flags.h"
#include "bench/pushpull_measure.h"
#include "bench/pushpull_runs.h"

int main(int argc, char** argv) {
  const ps::pushpull::Flags flags = ps::pushpull::ParseFlags(argc, argv);
  const auto start = ps::pushpull::Clock::now();
  double load[3] = {0, 0, 0};
  if (getloadavg(load, 3) < 0) load[0] = -1;
  std::printf(
      "ps-bench: reps=%d (medians), target %.0f MiB per repetition, "
      "%u hardware threads, load average %.2f %.2f %.2f\n",
      flags.reps, flags.target_mib, std::thread::hardware_concurrency(),
      load[0], load[1], load[2]);
  std::printf(
      "MB/s = 10^6 payload bytes per second, all workers summed; ratio = "
      "ours / baseline (push vs Send, pull vs Fetch).\n");
  std::vector<ps::pushpull::Row> rows;
  ps::pushpull::RunDense(flags, &rows);
  if (flags.sparse) ps::pushpull::RunSparse(flags, &rows);
  if (getloadavg(load, 3) < 0) load[0] = -1;
  std::printf("\ndone in %.1f s; load average at end %.2f %.2f %.2f\n",
              ps::pushpull::Seconds(ps::pushpull::Clock::now() - start),
              load[0], load[1], load[2]);
  return 0;
}
