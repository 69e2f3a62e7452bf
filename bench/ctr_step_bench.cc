// ps-ctr-step-bench: the C++ worker's CTR step without the cluster
// (docs/benchmarks.md, "CTR: where a step's time goes"): the model and batch
// size of a CTR job spec, by default deploy/jobs/criteo-ctr.json, the job
// the cluster benchmarks run (26 tables of dim 16, bottom MLP 13-64-16, DOT
// interaction, top MLP 367-64-32-1, batches of 2048), on one batch whose
// ids are Zipf-distributed per field, as bench/criteo_gen.py writes them
// (about 45 % of a batch's ids distinct). Times the whole step (the batch's
// deduplication, SetParameters, forward and backward, the row gradients
// copied out) and each CTR kernel on the CPU backend, one OpenBLAS thread.
//
//   build/bench/ps-ctr-step-bench [--job=JOB.json]
//       [--benchmark_repetitions=5 --benchmark_report_aggregates_only=true]
//
// --job: the job spec (Protobuf's JSON mapping, read as psctl submit reads
// it, the coordinator's defaults applied); its model must be CTR with
// tables of one dim. Exit status 1 with the error on stderr otherwise.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <memory>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "benchmark/benchmark.h"
#include "common/job_spec.h"
#include "common/logging.h"
#include "common/sparse_keys.h"
#include "common/status_macros.h"
#include "ps/v1/cluster.pb.h"
#include "ps/v1/job.pb.h"
#include "worker/model/cpu/cpu_backend.h"
#include "worker/model/ctr_model.h"
#include "worker/sparse_router.h"

namespace ps {
namespace {

// The job the benchmarks run (main reads it before they run) and the
// shapes they take from it.
struct Job {
  v1::JobSpec spec;
  int batch = 0;   // batch_size
  int fields = 0;  // model.ctr.num_fields
  int dim = 0;     // Every table's dim.
  int dense = 0;   // model.input_dim
};

Job& TheJob() {
  static Job* job = new Job();
  return *job;
}

// Reads the job at `path`: its defaults applied, validated, a CTR model
// whose tables all have one dim.
absl::StatusOr<Job> ReadJob(const std::string& path) {
  PS_ASSIGN_OR_RETURN(v1::JobSpec spec, JobSpecFromFile(path));
  ApplyJobSpecDefaults(&spec);
  if (absl::Status s = ValidateJobSpec(spec); !s.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": ", s.message()));
  }
  const v1::ModelSpec& model = spec.model();
  if (model.kind() != v1::ModelSpec::CTR || model.sparse_tables().empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, ": not a CTR model with sparse tables"));
  }
  for (const v1::SparseTableSpec& table : model.sparse_tables()) {
    if (table.dim() != model.sparse_tables(0).dim()) {
      return absl::InvalidArgumentError(
          absl::StrCat(path, ": the tables' dims differ"));
    }
  }
  Job job;
  job.batch = spec.batch_size();
  job.fields = model.ctr().num_fields();
  job.dim = model.sparse_tables(0).dim();
  job.dense = model.input_dim();
  job.spec = std::move(spec);
  return job;
}

// One batch and its storage: dense values in [0, 3] (log1p of counts),
// ids of field f drawn from Zipf(0.9) over a cardinality that grows with f
// (10 to 10 million, as criteo_gen.py's defaults), labels about 25 % ones.
struct Batch {
  int size = 0;
  std::vector<float> dense;
  std::vector<uint64_t> ids;
  std::vector<int32_t> labels;
  CtrBatch view() const {
    return {size, dense.data(), ids.data(), labels.data()};
  }
};

Batch MakeBatch(const Job& job, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> unit(0.0f, 1.0f);
  const int fields = job.fields;
  Batch b;
  b.size = job.batch;
  b.dense.resize(static_cast<size_t>(b.size) * job.dense);
  for (float& v : b.dense) v = 3.0f * unit(rng);
  b.ids.resize(static_cast<size_t>(b.size) * fields);
  for (int f = 0; f < fields; ++f) {
    const double card = std::pow(10.0, 1.0 + 6.0 * f / std::max(1, fields - 1));
    for (int i = 0; i < b.size; ++i) {
      // Inverse CDF of a continuous power law with exponent 0.9 on
      // [1, card + 1): rank = ((card + 1)^0.1 - 1) u + 1)^10.
      const double u = unit(rng);
      const double rank = std::pow((std::pow(card + 1, 0.1) - 1) * u + 1, 10.0);
      b.ids[static_cast<size_t>(i) * fields + f] =
          (uint64_t{static_cast<uint32_t>(f)} << 40) |
          static_cast<uint64_t>(rank);
    }
  }
  for (int i = 0; i < b.size; ++i) b.labels.push_back(unit(rng) < 0.25f);
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
  explicit Fixture(const Job& job)
      : job(job), backend(CpuBackend::Create({.num_threads = 1})) {
    auto created = CtrModel::Create(job.spec.model(), backend.get());
    PS_CHECK(created.ok(), created.status().ToString());
    model = *std::move(created);
    batch = MakeBatch(job, 1);
    std::mt19937 rng(2);
    for (const TensorSpec& t : model->tensors()) {
      params.push_back(Random(t.num_elems(), 0.1f, &rng));
    }
    const SparseBatch& sparse = model->Prepare(batch.view());
    for (int t = 0; t < model->num_tables(); ++t) {
      rows.push_back(
          Random(static_cast<int64_t>(sparse.unique_ids(t).size()) * job.dim,
                 0.05f, &rng));
      ids.push_back(sparse.unique_ids(t));
    }
  }
  const Job& job;
  std::unique_ptr<CpuBackend> backend;
  std::unique_ptr<CtrModel> model;
  Batch batch;
  std::vector<std::vector<float>> params, rows, grads, row_grads;
  std::vector<std::vector<uint64_t>> ids;
};

Fixture& TheFixture() {
  static Fixture* fixture = new Fixture(TheJob());
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
  std::vector<float> probabilities(f.job.batch);
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

// The DOT interaction's shapes: z is [batch x (fields + 1) x dim] (the
// fields' vectors and the bottom MLP's), its output row the bottom MLP's
// dim values followed by the pairs' dot products.
struct Interaction {
  explicit Interaction(const Job& job)
      : batch(job.batch),
        dim(job.dim),
        vectors(job.fields + 1),
        pairs(vectors * (vectors - 1) / 2),
        width(pairs + dim) {}
  const int batch, dim, vectors, pairs;
  const int width;  // Of an output row.
};

// The kernels on the step's shapes.
void BM_PairwiseDots(benchmark::State& state) {
  Fixture& f = TheFixture();
  const Interaction x(f.job);
  std::mt19937 rng(3);
  const std::vector<float> z =
      Random(int64_t{x.batch} * x.vectors * x.dim, 1, &rng);
  std::vector<float> out(int64_t{x.batch} * x.width);
  for (auto _ : state) {
    f.backend->PairwiseDots(z.data(), x.batch, x.vectors, x.dim,
                            out.data() + x.dim, x.width);
    benchmark::DoNotOptimize(out.data());
  }
}
BENCHMARK(BM_PairwiseDots)->Unit(benchmark::kMillisecond);

void BM_PairwiseDotsGrad(benchmark::State& state) {
  Fixture& f = TheFixture();
  const Interaction x(f.job);
  std::mt19937 rng(4);
  const std::vector<float> z =
      Random(int64_t{x.batch} * x.vectors * x.dim, 1, &rng);
  const std::vector<float> g = Random(int64_t{x.batch} * x.width, 1, &rng);
  std::vector<float> grad_z(z.size());
  for (auto _ : state) {
    f.backend->PairwiseDotsGrad(z.data(), g.data() + x.dim, x.width, x.batch,
                                x.vectors, x.dim, grad_z.data());
    benchmark::DoNotOptimize(grad_z.data());
  }
}
BENCHMARK(BM_PairwiseDotsGrad)->Unit(benchmark::kMillisecond);

// Cutting a step's unique ids per server (SparseRouter::Route), 2 servers,
// 64 buckets a table placed on them alternately.
void BM_Route(benchmark::State& state) {
  Fixture& f = TheFixture();
  v1::Assignment assignment;
  *assignment.mutable_spec()->mutable_model() = f.job.spec.model();
  for (auto& table :
       *assignment.mutable_spec()->mutable_model()->mutable_sparse_tables()) {
    table.set_num_buckets(64);
  }
  assignment.mutable_shard_map()->add_servers("127.0.0.1:1");
  assignment.mutable_shard_map()->add_servers("127.0.0.1:2");
  for (uint32_t t = 0; t < static_cast<uint32_t>(f.model->num_tables()); ++t) {
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

// Google Benchmark's flags, then --job.
void PrintHelp() {
  benchmark::PrintDefaultHelp();
  std::fprintf(stdout,
               "  [--job=JOB.json]  the CTR job whose model and batch size "
               "are timed\n                    (default %s)\n",
               PS_CTR_STEP_BENCH_JOB);
}

}  // namespace
}  // namespace ps

int main(int argc, char** argv) {
  benchmark::Initialize(&argc, argv, ps::PrintHelp);
  std::string path = PS_CTR_STEP_BENCH_JOB;
  int kept = 1;
  for (int i = 1; i < argc; ++i) {
    const absl::string_view arg = argv[i];
    if (absl::StartsWith(arg, "--job=")) {
      path = std::string(arg.substr(6));
    } else {
      argv[kept++] = argv[i];
    }
  }
  argc = kept;
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  absl::StatusOr<ps::Job> job = ps::ReadJob(path);
  if (!job.ok()) {
    std::fprintf(stderr, "ps-ctr-step-bench: %s\n",
                 std::string(job.status().message()).c_str());
    return 1;
  }
  ps::TheJob() = *std::move(job);
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
