// ps-sparse-memory-bench: the new memory a parameter server touches per new
// sparse row (docs/sparse.md, "Row layout and memory"). 26 tables of dim 16
// with row-wise Adagrad on one HugePagePool (as a job's SparseTableSet has)
// grow from empty to --rows rows over --steps pushes of new ids (about
// 10,500 a step by default), each table's share of the rows as in the CTR
// table-scaling benchmark's large run (its server 0's final rows per table,
// bench/ctr_table_scaling.sh). Prints the process's minor page faults and,
// with transparent huge pages off for the process (--thp=false, the
// default: every fault is one 4 KiB page), the bytes first touched per row,
// the pool's counters, its resident memory and its CPU time per step.
//
//   ps-sparse-memory-bench [--rows=3380000] [--steps=320] [--pool_mib=32]
//                          [--recycled_mib=32] [--thp=false]
#include <sys/prctl.h>
#include <sys/resource.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "server/huge_pages.h"
#include "server/sparse_table.h"

ABSL_FLAG(int64_t, rows, 3'380'000, "Rows of all tables at the end.");
ABSL_FLAG(int, steps, 320, "Pushes of new rows.");
ABSL_FLAG(int, pool_mib, 32,
          "The pool's max_ready_bytes in MiB (0 with --recycled_mib=0: no "
          "pool, MapHugePages).");
ABSL_FLAG(int, recycled_mib, 32,
          "The pool's max_recycled_bytes in MiB (0: freed blocks unmapped).");
ABSL_FLAG(bool, thp, false,
          "Leave transparent huge pages on (faults then count 2 MiB pages).");

namespace ps {
namespace {

// Server 0's rows per table at the end of the large run of
// bench/ctr_table_scaling.sh (2026-11-27): 3.38M rows in all.
constexpr int64_t kShares[26] = {
    48,     86,     163,    256,    462,    794,    1414,   2426,   4137,
    7127,   12640,  21739,  37464,  61173,  92397,  128978, 165127, 194867,
    240981, 260576, 293181, 322424, 357334, 364525, 383700, 422411};

v1::SparseTableSpec Spec(int t) {
  v1::SparseTableSpec spec;
  spec.set_name("C" + std::to_string(t + 1));
  spec.set_dim(16);
  spec.set_num_buckets(1024);
  spec.mutable_optimizer()->mutable_rowwise_adagrad()->set_learning_rate(0.01f);
  spec.mutable_optimizer()->mutable_rowwise_adagrad()->set_epsilon(1e-8f);
  return spec;
}

uint64_t Mix(uint64_t x) {  // splitmix64's finalizer: ids spread as hashes.
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

struct Usage {
  int64_t minflt = 0;
  double cpu_s = 0;
};

Usage Now() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return {.minflt = u.ru_minflt,
          .cpu_s = static_cast<double>(u.ru_utime.tv_sec + u.ru_stime.tv_sec) +
                   1e-6 * static_cast<double>(u.ru_utime.tv_usec +
                                              u.ru_stime.tv_usec)};
}

// A line of /proc/self/status ("VmRSS", "VmHWM") in KiB.
int64_t StatusKib(const std::string& key) {
  std::ifstream in("/proc/self/status");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind(key + ":", 0) == 0) {
      return std::stoll(line.substr(key.size() + 1));
    }
  }
  return -1;
}

// /proc/vmstat's thp_fault_alloc: huge pages faulted in, machine-wide.
int64_t ThpFaults() {
  std::ifstream in("/proc/vmstat");
  std::string key;
  int64_t value = 0;
  while (in >> key >> value) {
    if (key == "thp_fault_alloc") return value;
  }
  return -1;
}

int Main() {
  if (!absl::GetFlag(FLAGS_thp)) (void)prctl(PR_SET_THP_DISABLE, 1, 0, 0, 0);
  const int64_t total_rows = absl::GetFlag(FLAGS_rows);
  const int steps = absl::GetFlag(FLAGS_steps);
  int64_t share_sum = 0;
  for (int64_t s : kShares) share_sum += s;
  std::vector<int64_t> final_rows(26);
  for (int t = 0; t < 26; ++t) {
    final_rows[t] = kShares[t] * total_rows / share_sum;
  }
  const int pool_mib = absl::GetFlag(FLAGS_pool_mib);
  std::unique_ptr<HugePagePool> pool;
  if (pool_mib > 0 || absl::GetFlag(FLAGS_recycled_mib) > 0) {
    pool = std::make_unique<HugePagePool>(HugePagePoolOptions{
        .max_ready_bytes = static_cast<size_t>(pool_mib) << 20,
        .max_recycled_bytes =
            static_cast<size_t>(absl::GetFlag(FLAGS_recycled_mib)) << 20});
  }
  std::vector<std::unique_ptr<SparseTable>> tables;
  for (int t = 0; t < 26; ++t) {
    tables.push_back(*SparseTable::Create(Spec(t), static_cast<uint32_t>(t), 1,
                                          false, {.pages = pool.get()}));
  }
  // Scratch sized for the largest push up front: its pages are not counted.
  int64_t most = 0;
  for (int64_t r : final_rows) most = std::max(most, r / steps + 2);
  std::vector<uint64_t> keys(static_cast<size_t>(most));
  std::vector<float> grads(static_cast<size_t>(most) * 16, 0.0f);
  for (size_t i = 0; i < grads.size(); ++i) {
    grads[i] =
        static_cast<float>(static_cast<int>(Mix(i) % 2001) - 1000) / 1000.0f;
  }
  const int64_t thp_before = ThpFaults();
  const Usage before = Now();
  int64_t rows = 0;
  for (int step = 0; step < steps; ++step) {
    for (int t = 0; t < 26; ++t) {
      const int64_t from = final_rows[t] * step / steps;
      const int64_t to = final_rows[t] * (step + 1) / steps;
      keys.resize(static_cast<size_t>(to - from));
      for (int64_t i = from; i < to; ++i) {
        keys[static_cast<size_t>(i - from)] =
            Mix((static_cast<uint64_t>(t) << 40) + static_cast<uint64_t>(i));
      }
      std::sort(keys.begin(), keys.end());
      tables[t]->Apply(keys,
                       std::span<const float>(grads.data(), keys.size() * 16),
                       step + 1, 1.0f);
      rows += to - from;
    }
  }
  const Usage after = Now();
  const int64_t thp_faults = ThpFaults() - thp_before;
  int64_t held = 0;
  int64_t memory = 0;
  for (const auto& table : tables) {
    held += table->num_rows();
    memory += table->memory_bytes();
  }
  const int64_t faults = after.minflt - before.minflt;
  std::printf("rows %lld (held %lld), steps %d, pool %d MiB, thp %s\n",
              static_cast<long long>(rows), static_cast<long long>(held), steps,
              pool_mib, absl::GetFlag(FLAGS_thp) ? "on" : "off");
  std::printf("minor faults %lld", static_cast<long long>(faults));
  if (!absl::GetFlag(FLAGS_thp)) {
    std::printf(" = %.1f MiB first touched, %.1f bytes per row",
                static_cast<double>(faults) * 4096 / (1 << 20),
                static_cast<double>(faults) * 4096 / static_cast<double>(rows));
  }
  if (absl::GetFlag(FLAGS_thp)) {
    std::printf(
        ", of which about %lld huge pages (the machine's "
        "thp_fault_alloc)",
        static_cast<long long>(thp_faults));
  }
  std::printf("\ntables' memory_bytes %.1f MiB (%.1f bytes per row)\n",
              static_cast<double>(memory) / (1 << 20),
              static_cast<double>(memory) / static_cast<double>(held));
  if (pool != nullptr) {
    const HugePagePool::Counts c = pool->counts();
    std::printf(
        "pool units: faulted %lld, recycled %lld (zeroed by its thread "
        "%lld), taken %lld, ready %lld; bytes mapped %.1f MiB\n",
        static_cast<long long>(c.units_faulted),
        static_cast<long long>(c.units_recycled),
        static_cast<long long>(c.units_zeroed),
        static_cast<long long>(c.units_taken),
        static_cast<long long>(c.units_ready),
        static_cast<double>(c.bytes_mapped) / (1 << 20));
  }
  std::printf("VmRSS %lld KiB, VmHWM %lld KiB, CPU %.3f s (%.2f ms per step)\n",
              static_cast<long long>(StatusKib("VmRSS")),
              static_cast<long long>(StatusKib("VmHWM")),
              after.cpu_s - before.cpu_s,
              1e3 * (after.cpu_s - before.cpu_s) / steps);
  return 0;
}

}  // namespace
}  // namespace ps

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  return ps::Main();
}
