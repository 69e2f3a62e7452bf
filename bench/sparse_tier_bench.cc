// ps-sparse-tier-bench: a CTR-like step on one sparse table under a memory
// budget against the same table without one (docs/sparse.md, "Memory: the
// budget and the estimate"): a pull of 2,048 ids, most of them new (a
// power-law stream over 4 million ids), then their push, dim 16, row-wise
// Adagrad. Arg: the cap in MiB (0: no budget, no tier). And a snapshot of a
// table ten times its budget: the whole, the part a job's lock holds (the
// cut; docs/sparse.md, "Snapshots of a tiered table"), and the snapshot
// written to a store's rows file encoded whole (the writer before) or
// streamed a bucket at a time (the writer now), with the memory it takes
// beyond the process's before it.
#include <benchmark/benchmark.h>
#include <stdlib.h>
#include <sys/resource.h>

#include <chrono>
#include <cmath>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <memory>
#include <random>
#include <span>
#include <string>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "server/rocksdb_shard_store.h"
#include "server/sparse_snapshot_stream.h"
#include "server/sparse_table.h"
#include "server/sparse_tier.h"

namespace ps {
namespace {

constexpr int kDim = 16;
constexpr int kBatch = 2048;

void BM_PullPush(benchmark::State& state) {
  const int64_t cap = state.range(0) << 20;
  v1::SparseTableSpec spec;
  spec.set_name("bench");
  spec.set_dim(kDim);
  spec.set_num_buckets(64);
  spec.mutable_optimizer()->mutable_rowwise_adagrad()->set_learning_rate(0.01f);
  spec.mutable_optimizer()->mutable_rowwise_adagrad()->set_epsilon(1e-8f);
  std::unique_ptr<SparseTier> tier;
  if (cap > 0) {
    std::string dir = "/tmp/ps-sparse-tier-bench-XXXXXX";
    if (mkdtemp(dir.data()) == nullptr) std::abort();
    tier = *SparseTier::Open({.path = dir});
  }
  auto table = *SparseTable::Create(spec, 0, 1, false,
                                    {.tier = tier.get(), .cap_bytes = cap});
  std::mt19937_64 rng(1);
  std::uniform_real_distribution<double> u(0, 1);
  std::vector<uint64_t> ids;
  std::vector<float> rows(size_t{kBatch} * kDim);
  const std::vector<float> grads(size_t{kBatch} * kDim, 0.01f);
  int64_t clock = 0;
  for (auto _ : state) {
    state.PauseTiming();
    absl::flat_hash_set<uint64_t> seen;
    ids.clear();
    while (ids.size() < kBatch) {
      const auto id = static_cast<uint64_t>(std::pow(4e6, u(rng)));
      if (seen.insert(id).second) ids.push_back(id * 0x9e3779b97f4a7c15ULL);
    }
    state.ResumeTiming();
    table->Read(ids, rows.data());
    table->Apply(ids, grads, clock++, 1.0f);
  }
  state.counters["rows"] = static_cast<double>(table->num_rows());
  state.counters["hot"] = static_cast<double>(table->tier_counts().hot_rows);
  if (tier != nullptr) {
    // Ids that went to the tier (past the cold-id filter), rows found there,
    // and the table files the writer ingested.
    state.counters["looked_up"] = static_cast<double>(tier->keys_looked_up());
    state.counters["read"] =
        static_cast<double>(table->tier_counts().disk_reads);
    state.counters["files"] = static_cast<double>(tier->files_ingested());
  }
  state.SetItemsProcessed(state.iterations() * kBatch);
}
BENCHMARK(BM_PullPush)
    ->Arg(0)
    ->Arg(16)
    ->Unit(benchmark::kMillisecond)
    ->Iterations(400);

// A table of 1,000,000 rows (dim 16, row-wise Adagrad, 1,024 buckets)
// whose budget (14 MiB) holds about a tenth of them, its tier drained.
std::unique_ptr<SparseTable> TenTimesItsBudget(
    std::unique_ptr<SparseTier>* tier) {
  constexpr int64_t kRows = 1000000;
  v1::SparseTableSpec spec;
  spec.set_name("bench");
  spec.set_dim(kDim);
  spec.set_num_buckets(1024);
  spec.mutable_optimizer()->mutable_rowwise_adagrad()->set_learning_rate(0.01f);
  spec.mutable_optimizer()->mutable_rowwise_adagrad()->set_epsilon(1e-8f);
  std::string dir = "/tmp/ps-sparse-tier-bench-XXXXXX";
  if (mkdtemp(dir.data()) == nullptr) std::abort();
  *tier = *SparseTier::Open({.path = dir});
  auto table = *SparseTable::Create(
      spec, 0, 1, false, {.tier = tier->get(), .cap_bytes = int64_t{14} << 20});
  std::vector<uint64_t> ids(8192);
  const std::vector<float> grads(ids.size() * kDim, 0.01f);
  for (int64_t done = 0, clock = 0; done < kRows; ++clock) {
    for (uint64_t& id : ids) {
      id = static_cast<uint64_t>(done++) * 0x9e3779b97f4a7c15ULL;
    }
    table->Apply(ids, grads, clock, 1.0f);
  }
  if (!(*tier)->Drain().ok()) std::abort();
  return table;
}

void Report(benchmark::State& state, const SparseTable& table) {
  state.counters["hot"] = static_cast<double>(table.tier_counts().hot_rows);
  state.counters["rows"] = static_cast<double>(table.num_rows());
  struct rusage usage {};
  getrusage(RUSAGE_SELF, &usage);
  state.counters["peak_rss_mib"] = static_cast<double>(usage.ru_maxrss) / 1024;
}

// The whole snapshot of that table, encoded at once (SparseTable::Snapshot;
// the last build's durable snapshot did all of it under the job's lock).
// Run alone for its peak RSS (the table's build included).
void BM_TieredSnapshotWhole(benchmark::State& state) {
  std::unique_ptr<SparseTier> tier;
  const std::unique_ptr<SparseTable> table = TenTimesItsBudget(&tier);
  for (auto _ : state) {
    std::vector<StoredBlock> blocks = table->Snapshot();
    benchmark::DoNotOptimize(blocks.data());
  }
  Report(state, *table);
}
BENCHMARK(BM_TieredSnapshotWhole)->Unit(benchmark::kMillisecond)->Iterations(5);

// The same snapshot as a durable job takes it: the cut under the job's lock
// (hot rows copied, the tier's view taken: lock_ms), then the encoding off
// the lock (the cold rows read from the view and merged: encode_ms).
void BM_TieredSnapshotCut(benchmark::State& state) {
  std::unique_ptr<SparseTier> tier;
  const std::unique_ptr<SparseTable> table = TenTimesItsBudget(&tier);
  double lock_s = 0;
  double encode_s = 0;
  using Clock = std::chrono::steady_clock;
  for (auto _ : state) {
    const auto start = Clock::now();
    const SparseTableCut cut = table->Cut();
    const std::unique_ptr<SparseTier::View> view = tier->ViewNow();
    const auto cut_end = Clock::now();
    std::vector<StoredBlock> blocks;
    size_t next = 0;
    if (!cut.EncodeInto(*view, &blocks, &next).ok()) std::abort();
    benchmark::DoNotOptimize(blocks.data());
    lock_s += std::chrono::duration<double>(cut_end - start).count();
    encode_s += std::chrono::duration<double>(Clock::now() - cut_end).count();
  }
  const auto n = static_cast<double>(state.iterations());
  state.counters["lock_ms"] = 1e3 * lock_s / n;
  state.counters["encode_ms"] = 1e3 * encode_s / n;
  Report(state, *table);
}
BENCHMARK(BM_TieredSnapshotCut)->Unit(benchmark::kMillisecond)->Iterations(5);

// The process's resident and peak resident MiB (/proc/self/status).
std::pair<double, double> ResidentMib() {
  std::ifstream status("/proc/self/status");
  std::string line;
  double rss = 0;
  double hwm = 0;
  while (std::getline(status, line)) {
    if (line.rfind("VmRSS:", 0) == 0) rss = std::stod(line.substr(6)) / 1024;
    if (line.rfind("VmHWM:", 0) == 0) hwm = std::stod(line.substr(6)) / 1024;
  }
  return {rss, hwm};
}

// A durable snapshot of that table as the update log's writer writes it
// into a store whose every snapshot's rows go to a rows file: with
// `streamed`, pulled a bucket at a time from the cut and the view
// (ShardStore::WriteStreamed: this build's writer); else encoded whole into
// blocks first, then written (the writer before). rss_before_mib: resident
// before the snapshots (the table built); snapshot_peak_mib: the peak
// resident during them (the peak reset first: /proc/self/clear_refs);
// above_mib: the difference, the snapshot's own memory (and the budget's
// 14 MiB is inside rss_before_mib).
void TieredSnapshotToRowsFile(benchmark::State& state, bool streamed) {
  std::unique_ptr<SparseTier> tier;
  const std::unique_ptr<SparseTable> table = TenTimesItsBudget(&tier);
  std::string dir = "/tmp/ps-sparse-tier-bench-store-XXXXXX";
  if (mkdtemp(dir.data()) == nullptr) std::abort();
  auto store = RocksDbShardStore::Open({.path = dir, .rows_file_bytes = 0});
  if (!store.ok()) std::abort();
  const double before = ResidentMib().first;
  { std::ofstream("/proc/self/clear_refs") << "5"; }  // Resets VmHWM.
  const ShardWrite write{.job_id = "bench"};
  for (auto _ : state) {
    const SparseTableCut cut = table->Cut();
    const std::unique_ptr<SparseTier::View> view = tier->ViewNow();
    if (streamed) {
      SparseSnapshotStream stream(*view, std::span(&cut, 1));
      if (!(*store)->WriteStreamed(write, stream).ok()) std::abort();
      state.counters["held_kib"] =
          static_cast<double>(stream.max_held_bytes()) / 1024;
    } else {
      std::vector<StoredBlock> blocks;
      size_t next = 0;
      if (!cut.EncodeInto(*view, &blocks, &next).ok()) std::abort();
      ShardWrite whole = write;
      for (const StoredBlock& b : blocks) {
        whole.blocks.push_back({.key = b.key, .rows = b.rows});
      }
      if (!(*store)->Write(whole).ok()) std::abort();
    }
  }
  const double peak = ResidentMib().second;
  state.counters["rss_before_mib"] = before;
  state.counters["snapshot_peak_mib"] = peak;
  state.counters["above_mib"] = peak - before;
  Report(state, *table);
  store->reset();
  std::error_code ignored;
  std::filesystem::remove_all(dir, ignored);
}

void BM_TieredSnapshotWholeToFile(benchmark::State& state) {
  TieredSnapshotToRowsFile(state, false);
}
BENCHMARK(BM_TieredSnapshotWholeToFile)
    ->Unit(benchmark::kMillisecond)
    ->Iterations(5);

void BM_TieredSnapshotStreamed(benchmark::State& state) {
  TieredSnapshotToRowsFile(state, true);
}
BENCHMARK(BM_TieredSnapshotStreamed)
    ->Unit(benchmark::kMillisecond)
    ->Iterations(5);

}  // namespace
}  // namespace ps

BENCHMARK_MAIN();
