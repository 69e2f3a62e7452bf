// ps-sparse-tier-bench: a CTR-like step on one sparse table under a memory
// budget against the same table without one (docs/sparse.md, "Memory: the
// budget and the estimate"): a pull of 2,048 ids, most of them new (a
// power-law stream over 4 million ids), then their push, dim 16, row-wise
// Adagrad. Arg: the cap in MiB (0: no budget, no tier).
#include <benchmark/benchmark.h>
#include <stdlib.h>

#include <cmath>
#include <cstdint>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "absl/container/flat_hash_set.h"
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
  std::vector<float> rows(kBatch * kDim);
  const std::vector<float> grads(kBatch * kDim, 0.01f);
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

}  // namespace
}  // namespace ps

BENCHMARK_MAIN();
