// ps-bench's measurement (bench/pushpull_bench.cc): a phase is every worker
// thread making `calls` calls, its figure bytes moved over wall time, with
// each call's latency kept; phases of one configuration run interleaved over
// repetitions (ours and the baseline side by side) and are reported as
// medians in rows of a Markdown table.
#ifndef PS_BENCH_PUSHPULL_MEASURE_H_
#define PS_BENCH_PUSHPULL_MEASURE_H_

#include <atomic>
#include <chrono>
#include <functional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "common/logging.h"

namespace ps::pushpull {

using Clock = std::chrono::steady_clock;

// `d` in seconds.
inline double Seconds(Clock::duration d) {
  return std::chrono::duration<double>(d).count();
}

// One phase's wall time, bytes moved, and per-call latencies.
struct Phase {
  double seconds = 0;
  double bytes = 0;
  std::vector<double> latencies;  // Seconds per call, all workers.
};

// Runs `call(worker, i)` `calls` times on each of `workers` threads, all
// starting together. `call` returns false on error (the bench aborts).
template <typename Call>
Phase RunPhase(int workers, int calls, double bytes_per_call, Call call) {
  Phase phase;
  std::vector<std::vector<double>> lat(workers);
  std::atomic<int> ready{0};
  std::atomic<bool> go{false};
  std::vector<std::thread> threads;
  Clock::time_point start;
  for (int w = 0; w < workers; ++w) {
    threads.emplace_back([&, w] {
      ready.fetch_add(1);
      while (!go.load()) std::this_thread::yield();
      for (int i = 0; i < calls; ++i) {
        const auto t0 = Clock::now();
        PS_CHECK(call(w, i));
        lat[w].push_back(Seconds(Clock::now() - t0));
      }
    });
  }
  while (ready.load() < workers) std::this_thread::yield();
  start = Clock::now();
  go.store(true);
  for (auto& t : threads) t.join();
  phase.seconds = Seconds(Clock::now() - start);
  phase.bytes = bytes_per_call * workers * calls;
  for (auto& l : lat) {
    phase.latencies.insert(phase.latencies.end(), l.begin(), l.end());
  }
  return phase;
}

// The `p` quantile (0..1) of `v`; 0 for none.
double Percentile(std::vector<double> v, double p);

// The median of `v`.
double Median(std::vector<double> v);

// Medians over repetitions of a phase.
struct Result {
  double rate = 0;  // Median of bytes (or keys) per second.
  double p50 = 0;   // Seconds, over all calls of all repetitions.
  double p99 = 0;
};

// The phases of one configuration, run in turn within every repetition
// (ours and the baseline side by side, so load changes on this shared machine
// hit both alike); one Result per phase, its rate in units of
// `units_per_byte` per second.
std::vector<Result> Interleave(int reps, double units_per_byte,
                               const std::vector<std::function<Phase()>>& runs);

// One row of the report: ours, and the figure it is compared with.
struct Row {
  Row(std::string config, std::string unit)
      : config(std::move(config)), unit(std::move(unit)) {}
  std::string config;
  std::string unit;  // "MB/s" or "keys/s"
  Result ours;
  Result base;
  bool has_base = false;
};

// A row of `ours` with its ratio to `base`.
Row Compared(std::string config, std::string unit, const Result& ours,
             const Result& base);

// Prints the header of a table in `unit`.
void PrintHeader(const char* unit);

// Prints `r` as a row of the table (flushed at once).
void PrintRow(const Row& r);

// Prints `row` and appends it to `rows`.
void Emit(const Row& row, std::vector<Row>* rows);

}  // namespace ps::pushpull

#endif  // PS_BENCH_PUSHPULL_MEASURE_H_
