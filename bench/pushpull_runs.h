// The two measurements of ps-bench (bench/pushpull_bench.cc), each printing
// its table as it goes and appending its rows.
#ifndef PS_BENCH_PUSHPULL_RUNS_H_
#define PS_BENCH_PUSHPULL_RUNS_H_

#include <vector>

#include "bench/pushpull_flags.h"
#include "bench/pushpull_measure.h"

namespace ps::pushpull {

// Dense push and pull (bench/pushpull_dense.cc): whole models of each of
// flags.sizes_mib on each count of servers and workers, against the baseline
// (and WAL and 16-bit wire variants as the flags ask).
void RunDense(const Flags& flags, std::vector<Row>* rows);

// Sparse push and pull (bench/pushpull_sparse.cc): 10,000 random keys of 64
// floats per request through the raw stubs, against the baseline moving the
// same float bytes.
void RunSparse(const Flags& flags, std::vector<Row>* rows);

}  // namespace ps::pushpull

#endif  // PS_BENCH_PUSHPULL_RUNS_H_
