// The CTR model's backend operations on every backend: the CPU backend, and
// the CUDA backend where the build has it and a GPU is present (otherwise
// its cases skip, saying why). Hand-computed and naive double-precision
// expectations; then a CtrModel step on the backend against the CPU
// backend's (tolerances as backend_conformance_test's). Quick (tiny sizes) and
// self-contained: run it on a GPU machine with `unit_worker_tests
// --gtest_filter='*CtrBackend*'`.
#include <algorithm>
#include <cmath>
#include <functional>
#include <memory>
#include <ostream>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testing/backend_fixture.h"
#include "tests/unit/worker/ctr_test_util.h"
#include "worker/model/backend.h"
#include "worker/model/cpu/cpu_backend.h"
#include "worker/model/ctr_model.h"
#include "worker/model/cuda/cuda_backend.h"

namespace ps {
namespace {

using ::testing::ElementsAre;
using ::testing::FloatNear;
using ::testing::Pointwise;
using testing::RandomVector;

// The CTR operations on every backend (tests/testing/backend_fixture.h).
class CtrBackendTest : public testing::BackendFixture {};

TEST_P(CtrBackendTest, GatherRowsHandComputed) {
  // 3 rows of dim 2; batch 2 x 2 fields into a matrix of stride 5 (one
  // leading and one trailing column untouched).
  DeviceBuffer table = ToDevice({1, 2, 3, 4, 5, 6});
  DeviceBuffer out = ToDevice(std::vector<float>(10, -1));
  const std::vector<int32_t> rows = {2, 0, 1, 2};
  backend_->GatherRows(table.data(), rows.data(), 2, 2, 2, out.data() + 1, 5);
  EXPECT_THAT(ToHost(out), ElementsAre(-1, 5, 6, 1, 2,  //
                                       -1, 3, 4, 5, 6));
}

TEST_P(CtrBackendTest, ScatterAddRowsHandComputed) {
  // grad [2 x 2 fields x dim 2], stride 4; rows {1, 1, 0, 1}: row 2 gets
  // nothing and is zeroed.
  DeviceBuffer grad = ToDevice({1, 2, 10, 20,  //
                                100, 200, 1000, 2000});
  DeviceBuffer out = ToDevice(std::vector<float>(6, 7));
  const std::vector<int32_t> rows = {1, 1, 0, 1};
  backend_->ScatterAddRows(grad.data(), 4, rows.data(), 2, 2, 2, 3, out.data());
  EXPECT_THAT(ToHost(out), ElementsAre(100, 200, 1011, 2022, 0, 0));
}

// <GatherRows(T), G> = <T, ScatterAddRows(G)> on random data, with many
// repeats of few rows (the scatter's segments are long).
TEST_P(CtrBackendTest, ScatterAddRowsIsTheAdjointOfGatherRows) {
  std::mt19937 rng(3);
  const int64_t batch = 300, fields = 5, dim = 7, num_rows = 11;
  std::vector<int32_t> rows(batch * fields);
  for (int32_t& r : rows) r = static_cast<int32_t>(rng() % num_rows);
  const std::vector<float> table = RandomVector(num_rows * dim, &rng);
  const std::vector<float> grad = RandomVector(batch * fields * dim, &rng);
  DeviceBuffer table_d = ToDevice(table);
  DeviceBuffer grad_d = ToDevice(grad);
  DeviceBuffer gathered = backend_->Allocate(batch * fields * dim);
  DeviceBuffer scattered = backend_->Allocate(num_rows * dim);
  backend_->GatherRows(table_d.data(), rows.data(), batch, fields, dim,
                       gathered.data(), fields * dim);
  backend_->ScatterAddRows(grad_d.data(), fields * dim, rows.data(), batch,
                           fields, dim, num_rows, scattered.data());
  const std::vector<float> g = ToHost(gathered);
  const std::vector<float> s = ToHost(scattered);
  double left = 0, right = 0;
  for (size_t i = 0; i < g.size(); ++i) left += double{g[i]} * grad[i];
  for (size_t i = 0; i < s.size(); ++i) right += double{s[i]} * table[i];
  EXPECT_NEAR(left, right, 1e-3);
  // Exact per row against a double sum in (b, f) order.
  std::vector<double> expected(num_rows * dim, 0);
  for (int i = 0; i < batch * fields; ++i) {
    for (int k = 0; k < dim; ++k)
      expected[rows[i] * dim + k] += grad[i * dim + k];
  }
  for (size_t i = 0; i < s.size(); ++i) EXPECT_NEAR(s[i], expected[i], 1e-4);
}

TEST_P(CtrBackendTest, PairwiseDotsHandComputed) {
  // One sample, 3 vectors of dim 2: pairs (0,1), (0,2), (1,2), written at
  // column 1 of a stride-4 row.
  DeviceBuffer z = ToDevice({1, 2, 3, 4, 5, 6});
  DeviceBuffer out = ToDevice({-1, -1, -1, -1});
  backend_->PairwiseDots(z.data(), 1, 3, 2, out.data() + 1, 4);
  EXPECT_THAT(ToHost(out), ElementsAre(-1, 11, 17, 39));
}

TEST_P(CtrBackendTest, PairwiseDotsAndGradMatchNaive) {
  std::mt19937 rng(9);
  const int64_t batch = 7, vectors = 6, dim = 5;
  const int64_t pairs = vectors * (vectors - 1) / 2;
  const int64_t ld = pairs + 3;
  const std::vector<float> z = RandomVector(batch * vectors * dim, &rng);
  const std::vector<float> g = RandomVector(batch * ld, &rng);
  DeviceBuffer z_d = ToDevice(z);
  DeviceBuffer g_d = ToDevice(g);
  DeviceBuffer out = ToDevice(std::vector<float>(batch * ld, 0));
  DeviceBuffer grad_z = ToDevice(std::vector<float>(z.size(), 99));
  backend_->PairwiseDots(z_d.data(), batch, vectors, dim, out.data(), ld);
  backend_->PairwiseDotsGrad(z_d.data(), g_d.data(), ld, batch, vectors, dim,
                             grad_z.data());
  const std::vector<float> dots = ToHost(out);
  const std::vector<float> gz = ToHost(grad_z);
  auto at = [&](int b, int v, int k) {
    return double{z[(b * vectors + v) * dim + k]};
  };
  for (int b = 0; b < batch; ++b) {
    std::vector<double> expected_gz(vectors * dim, 0);
    int p = 0;
    for (int i = 0; i < vectors; ++i) {
      for (int j = i + 1; j < vectors; ++j, ++p) {
        double dot = 0;
        for (int k = 0; k < dim; ++k) dot += at(b, i, k) * at(b, j, k);
        EXPECT_NEAR(dots[b * ld + p], dot, 1e-5);
        const double gp = g[b * ld + p];
        for (int k = 0; k < dim; ++k) {
          expected_gz[i * dim + k] += gp * at(b, j, k);
          expected_gz[j * dim + k] += gp * at(b, i, k);
        }
      }
    }
    for (int i = 0; i < vectors * dim; ++i) {
      EXPECT_NEAR(gz[b * vectors * dim + i], expected_gz[i], 1e-5);
    }
  }
}

TEST_P(CtrBackendTest, CopyMatrixCopiesAndAccumulatesStridedBlocks) {
  DeviceBuffer src = ToDevice({1, 2, 3, 4, 5, 6});        // 2 x 3, stride 3.
  DeviceBuffer dst = ToDevice({0, 0, 0, 0, 0, 0, 0, 0});  // 2 x 4.
  backend_->CopyMatrix(src.data() + 1, 3, 2, 2, dst.data() + 1, 4, false);
  EXPECT_THAT(ToHost(dst), ElementsAre(0, 2, 3, 0, 0, 5, 6, 0));
  backend_->CopyMatrix(src.data(), 3, 2, 3, dst.data(), 4, true);
  EXPECT_THAT(ToHost(dst), ElementsAre(1, 4, 6, 0, 4, 10, 12, 0));
}

TEST_P(CtrBackendTest, SigmoidCrossEntropyHandComputedAndStable) {
  const std::vector<float> logits = {0.0f, 2.0f, -3.0f, 1000.0f, -1000.0f};
  const std::vector<int32_t> labels = {1, 0, 0, 0, 0};
  DeviceBuffer x = ToDevice(logits);
  DeviceBuffer grad = backend_->Allocate(5);
  const float loss =
      backend_->SigmoidCrossEntropy(x.data(), labels.data(), 5, grad.data());
  // log 2, 2 + log(1 + e^-2), log(1 + e^-3), 1000, 0.
  const double expected = (std::log(2.0) + 2 + std::log1p(std::exp(-2.0)) +
                           std::log1p(std::exp(-3.0)) + 1000 + 0) /
                          5;
  EXPECT_NEAR(loss, expected, 1e-4);
  auto sigmoid = [](double v) { return 1 / (1 + std::exp(-v)); };
  EXPECT_THAT(
      ToHost(grad),
      Pointwise(FloatNear(1e-6),
                std::vector<float>{(0.5f - 1) / 5, float(sigmoid(2) / 5),
                                   float(sigmoid(-3) / 5), 1.0f / 5, 0.0f}));
}

// A CtrModel step and prediction on this backend give the CPU backend's
// loss, dense gradients, row gradients and probabilities (for the CPU
// backend this compares it with itself; ctr_model_test checks it against
// finite differences).
TEST_P(CtrBackendTest, CtrModelStepMatchesTheCpuBackend) {
  std::unique_ptr<CpuBackend> cpu = CpuBackend::Create({});
  for (auto interaction : {v1::CtrModelSpec::DOT, v1::CtrModelSpec::CONCAT}) {
    SCOPED_TRACE(v1::CtrModelSpec::Interaction_Name(interaction));
    const v1::ModelSpec spec = ctr_test::TinySpec(interaction);
    auto model = CtrModel::Create(spec, backend_.get());
    auto reference = CtrModel::Create(spec, cpu.get());
    ASSERT_TRUE(model.ok() && reference.ok());
    std::mt19937 rng(17);
    // Two batches: the second larger, so the buffers grow.
    for (int batch_size : {5, 37}) {
      const ctr_test::OwnedBatch batch =
          ctr_test::RandomBatch(batch_size, 5, 3, &rng);
      const SparseBatch& sparse = (*model)->Prepare(batch.view());
      (*reference)->Prepare(batch.view());
      const auto params =
          ctr_test::RandomValues(ctr_test::TensorSizes(**model), 0.5f, &rng);
      const auto rows = ctr_test::RandomValues(
          ctr_test::RowSizes(**model, sparse), 0.5f, &rng);
      ASSERT_TRUE((*model)->SetParameters(params).ok());
      ASSERT_TRUE((*reference)->SetParameters(params).ok());
      std::vector<std::vector<float>> grads, row_grads, want, want_rows;
      auto loss =
          (*model)->ComputeGradients(batch.view(), rows, &grads, &row_grads);
      auto want_loss =
          (*reference)->ComputeGradients(batch.view(), rows, &want, &want_rows);
      ASSERT_TRUE(loss.ok() && want_loss.ok());
      EXPECT_NEAR(*loss, *want_loss, 1e-5);
      // 1e-4 of the largest gradient (float32 sums in another order), as
      // backend_conformance_test's model step.
      double max_grad = 0;
      for (const auto* set : {&want, &want_rows}) {
        for (const auto& g : *set) {
          for (float v : g) max_grad = std::max(max_grad, double{std::abs(v)});
        }
      }
      const float tolerance = static_cast<float>(1e-4 * max_grad);
      ASSERT_EQ(grads.size(), want.size());
      for (size_t t = 0; t < grads.size(); ++t) {
        EXPECT_THAT(grads[t], Pointwise(FloatNear(tolerance), want[t]))
            << (*model)->tensors()[t].name;
      }
      ASSERT_EQ(row_grads.size(), want_rows.size());
      for (size_t t = 0; t < row_grads.size(); ++t) {
        EXPECT_THAT(row_grads[t], Pointwise(FloatNear(tolerance), want_rows[t]))
            << "table " << t;
      }
      std::vector<float> p(batch_size), want_p(batch_size);
      ASSERT_TRUE((*model)->Predict(batch.view(), rows, p.data()).ok());
      ASSERT_TRUE(
          (*reference)->Predict(batch.view(), rows, want_p.data()).ok());
      EXPECT_THAT(p, Pointwise(FloatNear(1e-5), want_p));
    }
  }
}

// The CPU backend's vectorized interaction kernels give the bits of the
// plain loops they replaced (a pair's dot summed over k in order; a
// vector's gradient summed over the pairs in (i, j) order), for widths that
// do and do not fill its 4-float lanes.
TEST(CpuCtrKernelsTest, PairwiseDotsAndGradEqualThePlainLoopsBitForBit) {
  std::unique_ptr<CpuBackend> cpu = CpuBackend::Create({});
  std::mt19937 rng(17);
  for (const auto& [vectors, dim] :
       {std::pair{27, 16}, std::pair{6, 5}, std::pair{2, 1}, std::pair{9, 7}}) {
    SCOPED_TRACE(::testing::Message() << vectors << " vectors of " << dim);
    const int batch = 5;
    const int64_t pairs = int64_t{vectors} * (vectors - 1) / 2;
    const int64_t ld = pairs + 2;
    const std::vector<float> z = RandomVector(batch * vectors * dim, &rng);
    const std::vector<float> g = RandomVector(batch * ld, &rng);
    std::vector<float> dots(batch * ld, -7), gz(z.size(), -7);
    cpu->PairwiseDots(z.data(), batch, vectors, dim, dots.data(), ld);
    cpu->PairwiseDotsGrad(z.data(), g.data(), ld, batch, vectors, dim,
                          gz.data());
    std::vector<float> want_dots(batch * ld, -7), want_gz(z.size(), 0);
    for (int b = 0; b < batch; ++b) {
      const float* zb = z.data() + b * vectors * dim;
      float* o = want_dots.data() + b * ld;
      const float* gb = g.data() + b * ld;
      float* gzb = want_gz.data() + b * vectors * dim;
      for (int i = 0; i < vectors; ++i) {
        for (int j = i + 1; j < vectors; ++j) {
          float sum = 0.0f;
          for (int k = 0; k < dim; ++k)
            sum += zb[i * dim + k] * zb[j * dim + k];
          *o++ = sum;
          const float gp = *gb++;
          for (int k = 0; k < dim; ++k) {
            gzb[i * dim + k] += gp * zb[j * dim + k];
            gzb[j * dim + k] += gp * zb[i * dim + k];
          }
        }
      }
    }
    EXPECT_EQ(dots, want_dots);
    EXPECT_EQ(gz, want_gz);
  }
}

// The interaction kernels in 4 lanes (the baseline's, wide_lanes = false)
// and in the widest lanes this CPU has (8 with AVX2) give the same bits,
// for widths around both lane counts and the kernels' groups of up to 4
// registers (vector counts past 33, dims past 32).
TEST(CpuCtrKernelsTest, FourLanesEqualTheWidestLanesBitForBit) {
  std::unique_ptr<CpuBackend> widest = CpuBackend::Create({});
  std::unique_ptr<CpuBackend> four = CpuBackend::Create({.wide_lanes = false});
  std::mt19937 rng(23);
  for (const auto& [vectors, dim] :
       {std::pair{27, 16}, std::pair{2, 1}, std::pair{3, 8}, std::pair{9, 12},
        std::pair{40, 33}, std::pair{70, 4}, std::pair{17, 72}}) {
    SCOPED_TRACE(::testing::Message() << vectors << " vectors of " << dim);
    const int batch = 3;
    const int64_t ld = int64_t{vectors} * (vectors - 1) / 2 + 3;
    const std::vector<float> z = RandomVector(batch * vectors * dim, &rng);
    const std::vector<float> g = RandomVector(batch * ld, &rng);
    std::vector<float> dots4(batch * ld, -7), dots(batch * ld, -7);
    std::vector<float> gz4(z.size(), -7), gz(z.size(), -7);
    four->PairwiseDots(z.data(), batch, vectors, dim, dots4.data(), ld);
    widest->PairwiseDots(z.data(), batch, vectors, dim, dots.data(), ld);
    four->PairwiseDotsGrad(z.data(), g.data(), ld, batch, vectors, dim,
                           gz4.data());
    widest->PairwiseDotsGrad(z.data(), g.data(), ld, batch, vectors, dim,
                             gz.data());
    EXPECT_EQ(dots4, dots);
    EXPECT_EQ(gz4, gz);
    // The 3 values past each sample's pairs are left alone.
    for (int b = 0; b < batch; ++b) {
      for (int64_t p = ld - 3; p < ld; ++p) EXPECT_EQ(dots[b * ld + p], -7);
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Backends, CtrBackendTest,
                         ::testing::ValuesIn(testing::Backends()),
                         testing::BackendName);

}  // namespace
}  // namespace ps
