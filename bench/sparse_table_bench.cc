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

#include "common/sparse_keys.h"
#include "server/sparse_row_init.h"
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

// SparseRowInit::Fill of 4,096 new rows (UNIFORM, the default scale) into
// one buffer, as a pull's ids without rows and a push's new rows are filled.
// Args: dim, the kernel (SparseFillPath: 0 scalar, 1 AVX2, 2 AVX-512;
// skipped where the CPU lacks it). Counter per_row: CPU time per row.
void BM_Fill(benchmark::State& state) {
  constexpr size_t kRows = 4096;
  const auto dim = static_cast<size_t>(state.range(0));
  const auto path = static_cast<SparseFillPath>(state.range(1));
  if (!SparseFillPathAvailable(path)) {
    state.SkipWithError("this CPU lacks the kernel");
    return;
  }
  auto init =
      SparseRowInit::Create(v1::SparseInit(), static_cast<int>(dim), 42, 3);
  if (!init.ok()) {
    state.SkipWithError(std::string(init.status().message()).c_str());
    return;
  }
  const SparseRowInit with_path = init->WithPath(path);
  std::vector<float> out(kRows * dim);
  uint64_t first = 0;
  for (auto _ : state) {
    for (size_t r = 0; r < kRows; ++r) {
      with_path.Fill(first + r * 2654435761u,
                     std::span<float>(out.data() + r * dim, dim));
    }
    first += kRows;
    benchmark::DoNotOptimize(out.data());
  }
  state.SetLabel(SparseFillPathName(path));
  state.counters["per_row"] =
      benchmark::Counter(kRows, benchmark::Counter::kIsIterationInvariantRate |
                                    benchmark::Counter::kInvert);
}
BENCHMARK(BM_Fill)
    ->ArgNames({"dim", "path"})
    ->ArgsProduct({{16, 64, 13}, {0, 1, 2}});

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

// A large table (args: millions of rows held; the pull: 12,500 ids, 30 %
// of them not yet held), as a server of a CTR job with a 10x id space sees.
std::unique_ptr<SparseTable> LargeTable(int64_t millions, uint32_t seed) {
  auto table = SparseTable::Create(Spec(kRowwise, 0), 0, 1, true);
  const uint64_t rows = static_cast<uint64_t>(millions) * 1000000;
  std::vector<uint64_t> keys;
  std::vector<float> zeros;
  for (uint64_t first = 0; first < rows; first += 100000) {
    keys.clear();
    for (uint64_t i = first; i < first + 100000 && i < rows; ++i) {
      keys.push_back(i * 2654435761u + seed);
    }
    zeros.assign(keys.size() * kDim, 0.0f);
    (*table)->Apply(keys, zeros, 0, 1.0f);
  }
  return *std::move(table);
}

std::vector<uint64_t> PullIds(int64_t millions, uint32_t seed) {
  std::mt19937_64 rng(seed);
  const uint64_t rows = static_cast<uint64_t>(millions) * 1000000;
  std::uniform_int_distribution<uint64_t> held(0, rows - 1);
  std::vector<uint64_t> ids;
  ids.reserve(12500);
  for (int i = 0; i < 12500; ++i) {
    ids.push_back(i % 10 < 7 ? held(rng) * 2654435761u + 1
                             : rng() | (uint64_t{1} << 63));
  }
  std::sort(ids.begin(), ids.end());
  ids.erase(std::unique(ids.begin(), ids.end()), ids.end());
  return ids;
}

void BM_ReadLarge(benchmark::State& state) {
  std::unique_ptr<SparseTable> table = LargeTable(state.range(0), 1);
  const std::vector<uint64_t> ids = PullIds(state.range(0), 2);
  std::vector<float> out(ids.size() * kDim);
  for (auto _ : state) {
    table->Read(ids, out.data());
    benchmark::DoNotOptimize(out.data());
  }
  state.SetItemsProcessed(state.iterations() *
                          static_cast<int64_t>(ids.size()));
}
BENCHMARK(BM_ReadLarge)->Arg(1)->Arg(3)->Unit(benchmark::kMillisecond);

// A BSP clock on a large table: two workers' sums, their average, Apply
// (30 % new rows), as ApplyBspClockLocked does it.
void BM_BspClockLarge(benchmark::State& state) {
  std::unique_ptr<SparseTable> table = LargeTable(state.range(0), 1);
  std::vector<uint64_t> a = PullIds(state.range(0), 3);
  std::vector<uint64_t> b = PullIds(state.range(0), 4);
  std::vector<float> ga(a.size() * kDim, 0.01f);
  std::vector<float> gb(b.size() * kDim, -0.02f);
  int64_t clock = 1;
  for (auto _ : state) {
    state.PauseTiming();
    for (uint64_t& id : a) id += uint64_t{1} << 40;  // New ids stay new.
    state.ResumeTiming();
    table->Accumulate(a, ga);
    table->Accumulate(b, gb);
    const SparseTable::RowsView avg = table->AveragedRows(2);
    std::vector<uint64_t> keys(avg.keys.begin(), avg.keys.end());
    std::vector<float> values(avg.values.begin(), avg.values.end());
    table->Apply(keys, values, clock++, 1.0f);
    table->ClearAccumulated();
  }
  state.SetItemsProcessed(state.iterations() *
                          static_cast<int64_t>(a.size() + b.size()));
}
BENCHMARK(BM_BspClockLarge)->Arg(1)->Unit(benchmark::kMillisecond);

// A table growing as a CTR job's does on one server, every id new: a BSP
// clock of two workers' pushes of 4,096 ids each (half of them shared),
// summed, averaged and applied (rowwise Adagrad, dim 16, 1,024 buckets),
// 6,144 new rows a clock. A fixed 200 clocks from an empty table (1.2M
// rows at the end), so that every run and build grows the same table.
// Counter new_rows_per_s.
void BM_GrowTableBsp(benchmark::State& state) {
  v1::SparseTableSpec spec = Spec(kRowwise, 0);
  spec.set_num_buckets(1024);
  auto table = SparseTable::Create(spec, 0, 1, true);
  constexpr uint64_t kWorkerRows = 4096;
  std::vector<uint64_t> a(kWorkerRows);
  std::vector<uint64_t> b(kWorkerRows);
  std::vector<float> ga(a.size() * kDim, 0.01f);
  std::vector<float> gb(b.size() * kDim, -0.02f);
  std::vector<uint64_t> keys;
  std::vector<float> values;
  uint64_t next = 0;
  int64_t clock = 0;
  for (auto _ : state) {
    state.PauseTiming();
    for (uint64_t i = 0; i < kWorkerRows; ++i) {
      a[i] = (next + i) * 0x9e3779b97f4a7c15ULL;
      b[i] = (next + kWorkerRows / 2 + i) * 0x9e3779b97f4a7c15ULL;
    }
    next += kWorkerRows * 3 / 2;
    state.ResumeTiming();
    (*table)->Accumulate(a, ga);
    (*table)->Accumulate(b, gb);
    (*table)->AveragedRowsInto(2, &keys, &values);
    (*table)->Apply(keys, values, clock++, 1.0f);
    (*table)->ClearAccumulated();
  }
  state.counters["new_rows_per_s"] = benchmark::Counter(
      static_cast<double>((*table)->num_rows()), benchmark::Counter::kIsRate);
}
BENCHMARK(BM_GrowTableBsp)->Iterations(200)->Unit(benchmark::kMillisecond);

// A snapshot of a table of `millions` of rows (every bucket encoded).
void BM_SnapshotLarge(benchmark::State& state) {
  std::unique_ptr<SparseTable> table = LargeTable(state.range(0), 1);
  for (auto _ : state) {
    std::vector<StoredBlock> blocks = table->Snapshot();
    benchmark::DoNotOptimize(blocks.data());
  }
  state.SetItemsProcessed(state.iterations() * table->num_rows());
}
BENCHMARK(BM_SnapshotLarge)->Arg(1)->Unit(benchmark::kMillisecond);

// The same snapshot encoded into the last one's blocks (SnapshotInto, as
// ServerJob::SnapshotLocked does with the writer's spare blocks).
void BM_SnapshotLargeReused(benchmark::State& state) {
  std::unique_ptr<SparseTable> table = LargeTable(state.range(0), 1);
  std::vector<StoredBlock> blocks;
  for (auto _ : state) {
    size_t next = 0;
    table->SnapshotInto(&blocks, &next);
    blocks.resize(next);
    benchmark::DoNotOptimize(blocks.data());
  }
  state.SetItemsProcessed(state.iterations() * table->num_rows());
}
BENCHMARK(BM_SnapshotLargeReused)->Arg(1)->Unit(benchmark::kMillisecond);

// The bucket of one id (every key of a pull, a push, a new row and a
// snapshot's row is hashed once or more): kPushRows ids in a row.
void BM_BucketOfId(benchmark::State& state) {
  const Push push = MakePush(7);
  for (auto _ : state) {
    uint32_t sum = 0;
    for (uint64_t id : push.keys) sum += BucketOfId(id, 3, 1024);
    benchmark::DoNotOptimize(sum);
  }
  state.SetItemsProcessed(state.iterations() * kPushRows);
}
BENCHMARK(BM_BucketOfId)->Unit(benchmark::kMicrosecond);

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
