// ps-ctr-step-bench: the C++ worker's CTR step without the cluster
// (docs/benchmarks.md, "CTR: where a step's time goes"): the model of
// deploy/jobs/criteo-ctr.json (26 tables of dim 16, bottom MLP 13-64-16, DOT
// interaction, top MLP 367-64-32-1) on one batch of 2048 samples whose ids
// are Zipf-distributed per field, as bench/criteo_gen.py writes them (about
// 45 % of a batch's ids distinct). Times the whole step (the batch's
// deduplication, SetParameters, forward and backward, the row gradients
// copied out) and each CTR kernel on the CPU backend, one OpenBLAS thread.
//
//   build/bench/ps-ctr-step-bench [--benchmark_repetitions=5
//                                  --benchmark_report_aggregates_only=true]
#include <cmath>
#include <cstdint>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "benchmark/benchmark.h"
#include "common/logging.h"
#include "common/sparse_keys.h"
#include "ps/v1/cluster.pb.h"
#include "ps/v1/job.pb.h"
#include "worker/model/cpu/cpu_backend.h"
#include "worker/model/ctr_model.h"
#include "worker/sparse_router.h"

namespace ps {
namespace {

constexpr int kBatch = 2048;
constexpr int kFields = 26;
constexpr int kDim = 16;
constexpr int kDense = 13;

v1::ModelSpec CriteoSpec() {
  v1::ModelSpec model;
  model.set_kind(v1::ModelSpec::CTR);
  model.set_input_dim(kDense);
  model.set_num_classes(2);
  for (int t = 0; t < kFields; ++t) {
    v1::SparseTableSpec* table = model.add_sparse_tables();
    table->set_name("C" + std::to_string(t + 1));
    table->set_dim(kDim);
  }
  v1::CtrModelSpec* ctr = model.mutable_ctr();
  ctr->set_num_fields(kFields);
  ctr->add_bottom_mlp(64);
  ctr->add_bottom_mlp(kDim);
  ctr->add_top_mlp(64);
  ctr->add_top_mlp(32);
  ctr->set_pooling(v1::CtrModelSpec::SUM);
  ctr->set_interaction(v1::CtrModelSpec::DOT);
  return model;
}

// One batch and its storage: dense values in [0, 3] (log1p of counts),
// ids of field f drawn from Zipf(0.9) over a cardinality that grows with f
// (10 to 10 million, as criteo_gen.py's defaults), labels about 25 % ones.
struct Batch {
  std::vector<float> dense;
  std::vector<uint64_t> ids;
  std::vector<int32_t> labels;
  CtrBatch view() const {
    return {kBatch, dense.data(), ids.data(), labels.data()};
  }
};

Batch MakeBatch(uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> unit(0.0f, 1.0f);
  Batch b;
  b.dense.resize(kBatch * kDense);
  for (float& v : b.dense) v = 3.0f * unit(rng);
  b.ids.resize(kBatch * kFields);
  for (int f = 0; f < kFields; ++f) {
    const double card = std::pow(10.0, 1.0 + 6.0 * f / (kFields - 1));
    for (int i = 0; i < kBatch; ++i) {
      // Inverse CDF of a continuous power law with exponent 0.9 on
      // [1, card + 1): rank = ((card + 1)^0.1 - 1) u + 1)^10.
      const double u = unit(rng);
      const double rank = std::pow((std::pow(card + 1, 0.1) - 1) * u + 1, 10.0);
      b.ids[i * kFields + f] = (uint64_t{static_cast<uint32_t>(f)} << 40) |
                               static_cast<uint64_t>(rank);
    }
  }
  for (int i = 0; i < kBatch; ++i) b.labels.push_back(unit(rng) < 0.25f);
  return b;
}

std::vector<float> Random(int64_t n, float scale, std::mt19937* rng) {
  std::uniform_real_distribution<float> value(-scale, scale);
  std::vector<float> v(n);
  for (float& x : v) x = value(*rng);
  return v;
}

// The model, a prepared batch, its rows and the parameters.
struct Fixture {
  Fixture() : backend(CpuBackend::Create({.num_threads = 1})) {
    auto created = CtrModel::Create(CriteoSpec(), backend.get());
    PS_CHECK(created.ok(), created.status().ToString());
    model = *std::move(created);
    batch = MakeBatch(1);
    std::mt19937 rng(2);
    for (const TensorSpec& t : model->tensors()) {
      params.push_back(Random(t.num_elems(), 0.1f, &rng));
    }
    const SparseBatch& sparse = model->Prepare(batch.view());
    for (int t = 0; t < model->num_tables(); ++t) {
      rows.push_back(
          Random(static_cast<int64_t>(sparse.unique_ids(t).size()) * kDim,
                 0.05f, &rng));
      ids.push_back(sparse.unique_ids(t));
    }
  }
  std::unique_ptr<CpuBackend> backend;
  std::unique_ptr<CtrModel> model;
  Batch batch;
  std::vector<std::vector<float>> params, rows, grads, row_grads;
  std::vector<std::vector<uint64_t>> ids;
};

Fixture& TheFixture() {
  static Fixture* fixture = new Fixture();
  return *fixture;
}

// SetParameters, ComputeGradients on the prepared batch.
void BM_Step(benchmark::State& state) {
  Fixture& f = TheFixture();
  for (auto _ : state) {
    PS_CHECK(f.model->SetParameters(f.params).ok());
    auto loss = f.model->ComputeGradients(f.batch.view(), f.rows, &f.grads,
                                          &f.row_grads);
    PS_CHECK(loss.ok(), loss.status().ToString());
    benchmark::DoNotOptimize(*loss);
  }
  state.counters["unique_rows"] =
      static_cast<double>(f.model->Prepare(f.batch.view()).total_unique());
}
BENCHMARK(BM_Step)->Unit(benchmark::kMillisecond);

// The forward pass alone (Predict).
void BM_Predict(benchmark::State& state) {
  Fixture& f = TheFixture();
  std::vector<float> probabilities(kBatch);
  for (auto _ : state) {
    PS_CHECK(
        f.model->Predict(f.batch.view(), f.rows, probabilities.data()).ok());
    benchmark::DoNotOptimize(probabilities.data());
  }
}
BENCHMARK(BM_Predict)->Unit(benchmark::kMillisecond);

// The batch's deduplication (PrepareInto: SparseBatch::Build).
void BM_Prepare(benchmark::State& state) {
  Fixture& f = TheFixture();
  SparseBatch sparse;
  for (auto _ : state) {
    f.model->PrepareInto(f.batch.view(), &sparse);
    benchmark::DoNotOptimize(sparse.total_unique());
  }
}
BENCHMARK(BM_Prepare)->Unit(benchmark::kMillisecond);

// The kernels on the step's shapes: z is [batch x 27 x 16].
void BM_PairwiseDots(benchmark::State& state) {
  Fixture& f = TheFixture();
  std::mt19937 rng(3);
  const int vectors = kFields + 1;
  const std::vector<float> z =
      Random(int64_t{kBatch} * vectors * kDim, 1, &rng);
  const int pairs = vectors * (vectors - 1) / 2;
  std::vector<float> out(int64_t{kBatch} * (pairs + kDim));
  for (auto _ : state) {
    f.backend->PairwiseDots(z.data(), kBatch, vectors, kDim, out.data() + kDim,
                            pairs + kDim);
    benchmark::DoNotOptimize(out.data());
  }
}
BENCHMARK(BM_PairwiseDots)->Unit(benchmark::kMillisecond);

void BM_PairwiseDotsGrad(benchmark::State& state) {
  Fixture& f = TheFixture();
  std::mt19937 rng(4);
  const int vectors = kFields + 1;
  const int pairs = vectors * (vectors - 1) / 2;
  const std::vector<float> z =
      Random(int64_t{kBatch} * vectors * kDim, 1, &rng);
  const std::vector<float> g =
      Random(int64_t{kBatch} * (pairs + kDim), 1, &rng);
  std::vector<float> grad_z(z.size());
  for (auto _ : state) {
    f.backend->PairwiseDotsGrad(z.data(), g.data() + kDim, pairs + kDim, kBatch,
                                vectors, kDim, grad_z.data());
    benchmark::DoNotOptimize(grad_z.data());
  }
}
BENCHMARK(BM_PairwiseDotsGrad)->Unit(benchmark::kMillisecond);

// Cutting a step's unique ids per server (SparseRouter::Route), 2 servers.
void BM_Route(benchmark::State& state) {
  Fixture& f = TheFixture();
  v1::Assignment assignment;
  *assignment.mutable_spec()->mutable_model() = CriteoSpec();
  for (auto& table :
       *assignment.mutable_spec()->mutable_model()->mutable_sparse_tables()) {
    table.set_num_buckets(64);
  }
  assignment.mutable_shard_map()->add_servers("127.0.0.1:1");
  assignment.mutable_shard_map()->add_servers("127.0.0.1:2");
  for (uint32_t t = 0; t < kFields; ++t) {
    for (uint32_t b = 0; b < 64; ++b) {
      v1::BlockPlacement* p = assignment.mutable_shard_map()->add_blocks();
      p->set_key(BucketKey(t, b));
      p->set_server(static_cast<int>(b % 2));
    }
  }
  auto router = SparseRouter::Create(assignment);
  PS_CHECK(router.ok(), router.status().ToString());
  for (auto _ : state) {
    auto parts = router->Route(f.ids, 2);
    PS_CHECK(parts.ok());
    benchmark::DoNotOptimize(parts->data());
  }
}
BENCHMARK(BM_Route)->Unit(benchmark::kMillisecond);

}  // namespace
}  // namespace ps

BENCHMARK_MAIN();
