// ps-sparse-bench: SparseTable::Apply and Read of one push of 50,000 rows of
// dim 16 (docs/sparse.md, "Rows, optimizers, admission and eviction"), beside
// a baseline in the same run: the same SGD step over a contiguous array of
// the same floats (what a dense block of that size costs).
#include <benchmark/benchmark.h>

#include <algorithm>
#include <cstdint>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "server/sparse_table.h"

namespace ps {
namespace {

constexpr int kDim = 16;
constexpr int kPushRows = 50000;
constexpr uint64_t kPoolRows = 1000000;

enum Kind { kSgd, kAdagrad, kRowwise, kAdam, kFtrl };

v1::SparseTableSpec Spec(int kind, int64_t max_rows) {
  v1::SparseTableSpec spec;
  spec.set_name("bench");
  spec.set_dim(kDim);
  spec.set_num_buckets(64);
  auto* o = spec.mutable_optimizer();
  switch (kind) {
    case kSgd:
      o->mutable_sgd()->set_learning_rate(0.01f);
      break;
    case kAdagrad:
      o->mutable_adagrad()->set_learning_rate(0.01f);
      o->mutable_adagrad()->set_epsilon(1e-10f);
      break;
    case kRowwise:
      o->mutable_rowwise_adagrad()->set_learning_rate(0.01f);
      o->mutable_rowwise_adagrad()->set_epsilon(1e-10f);
      break;
    case kAdam:
      o->mutable_lazy_adam()->set_learning_rate(0.01f);
      o->mutable_lazy_adam()->set_beta1(0.9f);
      o->mutable_lazy_adam()->set_beta2(0.999f);
      o->mutable_lazy_adam()->set_epsilon(1e-8f);
      break;
    default:
      o->mutable_ftrl()->set_alpha(0.05f);
      o->mutable_ftrl()->set_beta(1.0f);
      o->mutable_ftrl()->set_l1(0.01f);
      break;
  }
  spec.mutable_eviction()->set_max_rows_per_server(max_rows);
  return spec;
}

// A push: kPushRows distinct ids drawn from the pool, ascending (as
// AveragedRows gives them), and gradients.
struct Push {
  std::vector<uint64_t> keys;
  std::vector<float> grads;
};

Push MakePush(uint32_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<uint64_t> id(0, kPoolRows - 1);
  std::vector<bool> taken(kPoolRows, false);
  Push push;
  while (push.keys.size() < kPushRows) {
    const uint64_t key = id(rng);
    if (taken[key]) continue;
    taken[key] = true;
    push.keys.push_back(key);
  }
  std::sort(push.keys.begin(), push.keys.end());
  std::normal_distribution<float> grad(0, 0.1f);
  push.grads.resize(push.keys.size() * kDim);
  for (float& g : push.grads) g = grad(rng);
  return push;
}

// Apply of a push whose rows mostly exist (the table holds every pool id
// first). Args: optimizer kind, max_rows_per_server (0: no eviction).
void BM_Apply(benchmark::State& state) {
  auto table = SparseTable::Create(
      Spec(static_cast<int>(state.range(0)), state.range(1)), 0, 1, false);
  if (!table.ok()) {
    state.SkipWithError(std::string(table.status().message()).c_str());
    return;
  }
  std::vector<Push> pushes;
  for (uint32_t i = 0; i < 4; ++i) pushes.push_back(MakePush(i));
  std::vector<uint64_t> all(kPoolRows);
  for (uint64_t i = 0; i < kPoolRows; ++i) all[i] = i;
  (*table)->Apply(all, std::vector<float>(all.size() * kDim, 0.0f), 0, 1.0f);
  int64_t clock = 1;
  for (auto _ : state) {
    const Push& push = pushes[clock % pushes.size()];
    (*table)->Apply(push.keys, push.grads, clock++, 1.0f);
  }
  state.SetItemsProcessed(state.iterations() * kPushRows);
  state.counters["rows_held"] = static_cast<double>((*table)->num_rows());
}
BENCHMARK(BM_Apply)
    ->ArgNames({"optimizer", "max_rows"})
    ->Args({kSgd, 0})
    ->Args({kAdagrad, 0})
    ->Args({kRowwise, 0})
    ->Args({kAdam, 0})
    ->Args({kFtrl, 0})
    ->Args({kSgd, 500000})
    ->Args({kSgd, 100000})
    ->Unit(benchmark::kMillisecond);

// Apply of a push of ids the table has never seen: every row is created
// from the initializer.
void BM_ApplyNewRows(benchmark::State& state) {
  auto table = SparseTable::Create(Spec(kAdagrad, 0), 0, 1, false);
  Push push = MakePush(7);
  int64_t clock = 0;
  for (auto _ : state) {
    state.PauseTiming();
    for (uint64_t& key : push.keys) key += kPoolRows;  // Unseen ids.
    state.ResumeTiming();
    (*table)->Apply(push.keys, push.grads, clock++, 1.0f);
  }
  state.SetItemsProcessed(state.iterations() * kPushRows);
}
BENCHMARK(BM_ApplyNewRows)->Unit(benchmark::kMillisecond);

// Read of a push's rows, held.
void BM_Read(benchmark::State& state) {
  auto table = SparseTable::Create(Spec(kAdagrad, 0), 0, 1, false);
  Push push = MakePush(3);
  (*table)->Apply(push.keys, push.grads, 0, 1.0f);
  std::vector<float> out(push.keys.size() * kDim);
  for (auto _ : state) {
    (*table)->Read(push.keys, out.data());
    benchmark::DoNotOptimize(out.data());
  }
  state.SetItemsProcessed(state.iterations() * kPushRows);
}
BENCHMARK(BM_Read)->Unit(benchmark::kMillisecond);

// The baseline: SGD over kPushRows * kDim contiguous floats.
void BM_DenseSgdBaseline(benchmark::State& state) {
  std::vector<float> values(size_t{kPushRows} * kDim, 0.5f);
  const Push push = MakePush(5);
  for (auto _ : state) {
    for (size_t i = 0; i < values.size(); ++i) {
      values[i] -= 0.01f * push.grads[i];
    }
    benchmark::DoNotOptimize(values.data());
  }
  state.SetItemsProcessed(state.iterations() * kPushRows);
}
BENCHMARK(BM_DenseSgdBaseline)->Unit(benchmark::kMillisecond);

}  // namespace
}  // namespace ps

BENCHMARK_MAIN();
