#include "worker/cpu/cpu_backend.h"

#include <cblas.h>

#include <cmath>
#include <functional>
#include <limits>
#include <memory>
#include <ostream>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "worker/backend.h"

namespace ps {
namespace {

using ::testing::ElementsAre;
using ::testing::FloatNear;
using ::testing::Pointwise;

// A named way to make a backend. The suite only uses the Backend interface,
// so another implementation (CUDA) can be instantiated with it later.
struct BackendFactory {
  std::string name;
  std::function<std::unique_ptr<Backend>()> make;
};
void PrintTo(const BackendFactory& factory, std::ostream* os) {
  *os << factory.name;
}

class BackendTest : public ::testing::TestWithParam<BackendFactory> {
 protected:
  void SetUp() override { backend_ = GetParam().make(); }

  DeviceBuffer ToDevice(const std::vector<float>& host) {
    DeviceBuffer buffer = backend_->Allocate(host.size());
    backend_->CopyToDevice(host.data(), host.size(), buffer.data());
    return buffer;
  }
  std::vector<float> ToHost(const DeviceBuffer& buffer) {
    std::vector<float> host(buffer.size());
    backend_->CopyToHost(buffer.data(), buffer.size(), host.data());
    return host;
  }

  std::unique_ptr<Backend> backend_;
};

std::vector<float> RandomVector(int64_t n, std::mt19937* rng) {
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  std::vector<float> v(n);
  for (float& x : v) x = dist(*rng);
  return v;
}

TEST_P(BackendTest, AllocateAndCopyRoundTrip) {
  const std::vector<float> values = {1.5f, -2.0f, 0.0f, 3.25f, 1e-30f};
  DeviceBuffer buffer = ToDevice(values);
  EXPECT_EQ(buffer.size(), 5);
  EXPECT_NE(buffer.data(), nullptr);
  EXPECT_EQ(ToHost(buffer), values);

  DeviceBuffer moved = std::move(buffer);
  EXPECT_EQ(buffer.data(), nullptr);  // NOLINT(bugprone-use-after-move)
  EXPECT_EQ(buffer.size(), 0);        // NOLINT(bugprone-use-after-move)
  EXPECT_EQ(ToHost(moved), values);
  moved.Reset();
  EXPECT_EQ(moved.size(), 0);

  DeviceBuffer empty = backend_->Allocate(0);
  EXPECT_EQ(empty.size(), 0);
  EXPECT_FALSE(backend_->name().empty());
}

// Reference C = alpha * op(A) op(B) + beta * C in double.
std::vector<float> NaiveGemm(bool ta, bool tb, int m, int n, int k, float alpha,
                             const std::vector<float>& a,
                             const std::vector<float>& b, float beta,
                             std::vector<float> c) {
  for (int i = 0; i < m; ++i) {
    for (int j = 0; j < n; ++j) {
      double sum = 0;
      for (int p = 0; p < k; ++p) {
        const double av = ta ? a[p * m + i] : a[i * k + p];
        const double bv = tb ? b[j * k + p] : b[p * n + j];
        sum += av * bv;
      }
      const double old = beta == 0.0f ? 0.0 : double{beta} * c[i * n + j];
      c[i * n + j] = static_cast<float>(alpha * sum + old);
    }
  }
  return c;
}

TEST_P(BackendTest, GemmMatchesNaiveForAllTransposes) {
  std::mt19937 rng(7);
  const std::vector<std::tuple<int, int, int>> shapes = {
      {7, 13, 5}, {1, 17, 1}, {1, 1, 1},    {13, 1, 7},
      {5, 7, 13}, {3, 4, 1},  {67, 129, 33}};
  for (const auto& [m, n, k] : shapes) {
    for (bool ta : {false, true}) {
      for (bool tb : {false, true}) {
        for (float beta : {0.0f, 0.5f}) {
          SCOPED_TRACE(::testing::Message()
                       << "m=" << m << " n=" << n << " k=" << k << " ta=" << ta
                       << " tb=" << tb << " beta=" << beta);
          const std::vector<float> a = RandomVector(m * k, &rng);
          const std::vector<float> b = RandomVector(k * n, &rng);
          std::vector<float> c = RandomVector(m * n, &rng);
          const std::vector<float> expected =
              NaiveGemm(ta, tb, m, n, k, 0.75f, a, b, beta, c);
          // With beta == 0 the old C must be ignored, even NaN.
          if (beta == 0.0f) {
            std::fill(c.begin(), c.end(),
                      std::numeric_limits<float>::quiet_NaN());
          }
          DeviceBuffer da = ToDevice(a), db = ToDevice(b), dc = ToDevice(c);
          backend_->Gemm(ta, tb, m, n, k, 0.75f, da.data(), db.data(), beta,
                         dc.data(), Precision::kFp32);
          EXPECT_THAT(ToHost(dc), Pointwise(FloatNear(1e-5f), expected));
        }
      }
    }
  }
}

TEST_P(BackendTest, GemmHandComputed) {
  // [1 2; 3 4] * [5 6; 7 8] = [19 22; 43 50]; A^T * B = [26 30; 38 44].
  DeviceBuffer a = ToDevice({1, 2, 3, 4}), b = ToDevice({5, 6, 7, 8});
  DeviceBuffer c = backend_->Allocate(4);
  backend_->Gemm(false, false, 2, 2, 2, 1.0f, a.data(), b.data(), 0.0f,
                 c.data(), Precision::kFp32);
  EXPECT_THAT(ToHost(c), ElementsAre(19, 22, 43, 50));
  backend_->Gemm(true, false, 2, 2, 2, 1.0f, a.data(), b.data(), 0.0f,
                 c.data(), Precision::kFp32);
  EXPECT_THAT(ToHost(c), ElementsAre(26, 30, 38, 44));
  // Accumulate: C = 2 * A B^T + 1 * C; A B^T = [17 23; 39 53].
  backend_->Gemm(false, true, 2, 2, 2, 2.0f, a.data(), b.data(), 1.0f,
                 c.data(), Precision::kFp32);
  EXPECT_THAT(ToHost(c), ElementsAre(26 + 34, 30 + 46, 38 + 78, 44 + 106));
}

TEST_P(BackendTest, BiasActivationHandComputed) {
  const std::vector<float> x = {-1.0f, 0.0f, 2.0f, 0.5f, -2.0f, 1.0f};
  const std::vector<float> bias = {0.5f, -0.5f, 1.0f};
  // Pre-activations: [-0.5 -0.5 3; 1 -2.5 2].
  const std::vector<std::pair<Activation, std::vector<float>>> cases = {
      {Activation::kIdentity, {-0.5f, -0.5f, 3.0f, 1.0f, -2.5f, 2.0f}},
      {Activation::kRelu, {0.0f, 0.0f, 3.0f, 1.0f, 0.0f, 2.0f}},
      {Activation::kTanh,
       {-0.46211716f, -0.46211716f, 0.99505475f, 0.76159416f, -0.98661430f,
        0.96402758f}},
      {Activation::kSigmoid,
       {0.37754067f, 0.37754067f, 0.95257413f, 0.73105858f, 0.07585818f,
        0.88079708f}},
  };
  DeviceBuffer b = ToDevice(bias);
  for (const auto& [act, expected] : cases) {
    SCOPED_TRACE(ActivationName(act));
    DeviceBuffer in = ToDevice(x), out = backend_->Allocate(6);
    backend_->BiasActivation(in.data(), b.data(), 2, 3, act, out.data());
    EXPECT_THAT(ToHost(out), Pointwise(FloatNear(1e-6f), expected));
    backend_->BiasActivation(in.data(), b.data(), 2, 3, act, in.data());
    EXPECT_THAT(ToHost(in), Pointwise(FloatNear(1e-6f), expected));
  }
}

TEST_P(BackendTest, ActivationGradHandComputed) {
  const std::vector<float> grad_out = {1.0f, 2.0f, -3.0f, 4.0f};
  const std::vector<float> out = {0.5f, 0.0f, 0.25f, 0.9f};
  const std::vector<std::pair<Activation, std::vector<float>>> cases = {
      {Activation::kIdentity, {1.0f, 2.0f, -3.0f, 4.0f}},
      {Activation::kRelu, {1.0f, 0.0f, -3.0f, 4.0f}},
      // 1 - out^2 = [0.75, 1, 0.9375, 0.19].
      {Activation::kTanh, {0.75f, 2.0f, -2.8125f, 0.76f}},
      // out (1 - out) = [0.25, 0, 0.1875, 0.09].
      {Activation::kSigmoid, {0.25f, 0.0f, -0.5625f, 0.36f}},
  };
  DeviceBuffer o = ToDevice(out);
  for (const auto& [act, expected] : cases) {
    SCOPED_TRACE(ActivationName(act));
    DeviceBuffer g = ToDevice(grad_out), result = backend_->Allocate(4);
    backend_->ActivationGrad(g.data(), o.data(), 4, act, result.data());
    EXPECT_THAT(ToHost(result), Pointwise(FloatNear(1e-6f), expected));
    backend_->ActivationGrad(g.data(), o.data(), 4, act, g.data());
    EXPECT_THAT(ToHost(g), Pointwise(FloatNear(1e-6f), expected));
  }
}

TEST_P(BackendTest, ActivationGradMatchesFiniteDifferences) {
  const std::vector<float> pre = {-2.0f, -0.7f, -0.1f, 0.3f, 1.1f, 2.5f};
  const std::vector<float> zero = {0.0f};
  const float h = 1e-3f;
  DeviceBuffer bias = ToDevice(zero);
  for (Activation act : {Activation::kIdentity, Activation::kRelu,
                         Activation::kTanh, Activation::kSigmoid}) {
    SCOPED_TRACE(ActivationName(act));
    // Apply act to a column vector (cols = 1, bias 0).
    auto apply = [&](std::vector<float> x) {
      DeviceBuffer d = ToDevice(x);
      backend_->BiasActivation(d.data(), bias.data(), x.size(), 1, act,
                               d.data());
      return ToHost(d);
    };
    std::vector<float> plus = pre, minus = pre;
    for (float& v : plus) v += h;
    for (float& v : minus) v -= h;
    const std::vector<float> fp = apply(plus), fm = apply(minus);
    DeviceBuffer out = ToDevice(apply(pre));
    DeviceBuffer ones = ToDevice(std::vector<float>(pre.size(), 1.0f));
    DeviceBuffer grad = backend_->Allocate(pre.size());
    backend_->ActivationGrad(ones.data(), out.data(), pre.size(), act,
                             grad.data());
    const std::vector<float> analytic = ToHost(grad);
    for (size_t i = 0; i < pre.size(); ++i) {
      EXPECT_NEAR(analytic[i], (fp[i] - fm[i]) / (2 * h), 2e-3f) << "i=" << i;
    }
  }
}

TEST_P(BackendTest, SoftmaxCrossEntropyHandComputed) {
  // Row 0: logits [0 0 0], label 1: p = 1/3 each, loss ln 3.
  // Row 1: logits [0, ln 2, ln 5], label 2: p = [1/8, 2/8, 5/8], loss ln 8/5.
  const std::vector<float> logits = {0.0f, 0.0f,           0.0f,
                                     0.0f, std::log(2.0f), std::log(5.0f)};
  const std::vector<int32_t> labels = {1, 2};
  DeviceBuffer x = ToDevice(logits), grad = backend_->Allocate(6);
  const float loss =
      backend_->SoftmaxCrossEntropy(x.data(), labels.data(), 2, 3, grad.data());
  EXPECT_NEAR(loss, (std::log(3.0) + std::log(8.0 / 5.0)) / 2, 1e-6);
  const std::vector<float> expected = {1.0f / 6,  (1.0f / 3 - 1) / 2,
                                       1.0f / 6,  1.0f / 16,
                                       2.0f / 16, (5.0f / 8 - 1) / 2};
  EXPECT_THAT(ToHost(grad), Pointwise(FloatNear(1e-6f), expected));

  // In place gives the same.
  const float loss2 =
      backend_->SoftmaxCrossEntropy(x.data(), labels.data(), 2, 3, x.data());
  EXPECT_FLOAT_EQ(loss2, loss);
  EXPECT_THAT(ToHost(x), Pointwise(FloatNear(1e-6f), expected));
}

TEST_P(BackendTest, SoftmaxCrossEntropyIsStableForHugeLogits) {
  // exp(1000) overflows float: only a max-subtracting softmax survives.
  const std::vector<float> logits = {1000.0f, 0.0f, -1000.0f,
                                     1000.0f, 0.0f, -1000.0f};
  const std::vector<int32_t> labels = {0, 2};
  DeviceBuffer x = ToDevice(logits), grad = backend_->Allocate(6);
  const float loss =
      backend_->SoftmaxCrossEntropy(x.data(), labels.data(), 2, 3, grad.data());
  // Row 0 loss ~ 0, row 1 loss = 2000.
  EXPECT_NEAR(loss, 1000.0f, 1e-3f);
  EXPECT_THAT(ToHost(grad), Pointwise(FloatNear(1e-6f),
                                      {0.0f, 0.0f, 0.0f, 0.5f, 0.0f, -0.5f}));
}

TEST_P(BackendTest, SoftmaxCrossEntropyMatchesFiniteDifferences) {
  std::mt19937 rng(11);
  const int rows = 4, cols = 5;
  std::vector<float> logits = RandomVector(rows * cols, &rng);
  for (float& v : logits) v *= 3.0f;
  const std::vector<int32_t> labels = {0, 4, 2, 2};
  auto loss_of = [&](const std::vector<float>& x) {
    DeviceBuffer d = ToDevice(x), g = backend_->Allocate(x.size());
    return backend_->SoftmaxCrossEntropy(d.data(), labels.data(), rows, cols,
                                         g.data());
  };
  DeviceBuffer d = ToDevice(logits), g = backend_->Allocate(rows * cols);
  backend_->SoftmaxCrossEntropy(d.data(), labels.data(), rows, cols, g.data());
  const std::vector<float> analytic = ToHost(g);
  const float h = 1e-2f;
  for (int i = 0; i < rows * cols; ++i) {
    std::vector<float> plus = logits, minus = logits;
    plus[i] += h;
    minus[i] -= h;
    const double numeric =
        (double{loss_of(plus)} - double{loss_of(minus)}) / (2 * h);
    // Float loss rounding (~1e-7 * loss / h) plus O(h^2) truncation.
    EXPECT_NEAR(analytic[i], numeric, 1e-4) << "i=" << i;
  }
  // Each row's gradient sums to zero.
  for (int r = 0; r < rows; ++r) {
    double sum = 0;
    for (int c = 0; c < cols; ++c) sum += analytic[r * cols + c];
    EXPECT_NEAR(sum, 0.0, 1e-6);
  }
}

TEST_P(BackendTest, ColumnSums) {
  DeviceBuffer x = ToDevice({1, 2, 3, 4, 5, 6, -7, 0.5f, 0}),
               out = ToDevice({9, 9, 9});
  backend_->ColumnSums(x.data(), 3, 3, out.data());
  EXPECT_THAT(ToHost(out), ElementsAre(-2.0f, 7.5f, 9.0f));
  // One row: the sums are the row itself; rows = 0 clears the output.
  DeviceBuffer row = backend_->Allocate(9);
  backend_->ColumnSums(x.data(), 1, 9, row.data());
  EXPECT_THAT(ToHost(row), ElementsAre(1, 2, 3, 4, 5, 6, -7, 0.5f, 0));
  backend_->ColumnSums(x.data(), 0, 3, out.data());
  EXPECT_THAT(ToHost(out), ElementsAre(0, 0, 0));
}

TEST_P(BackendTest, ArgmaxRows) {
  // Ties pick the first; all-negative rows work.
  DeviceBuffer x = ToDevice({0.1f, 0.9f, 0.3f,     //
                             -5.0f, -1.0f, -2.0f,  //
                             2.0f, 2.0f, 1.0f,     //
                             0.0f, 0.0f, 3.0f});
  std::vector<int32_t> out(4, -1);
  backend_->ArgmaxRows(x.data(), 4, 3, out.data());
  EXPECT_THAT(out, ElementsAre(1, 1, 0, 2));
}

INSTANTIATE_TEST_SUITE_P(
    Backends, BackendTest,
    ::testing::Values(BackendFactory{
        "cpu",
        [] { return std::unique_ptr<Backend>(CpuBackend::Create({})); }}),
    [](const ::testing::TestParamInfo<BackendFactory>& info) {
      return info.param.name;
    });

TEST(CpuBackendTest, SetsThreadCount) {
  const int before = openblas_get_num_threads();
  std::unique_ptr<CpuBackend> backend = CpuBackend::Create({.num_threads = 1});
  ASSERT_NE(backend, nullptr);
  EXPECT_EQ(backend->name(), "cpu");
  EXPECT_EQ(openblas_get_num_threads(), 1);
  // 0 keeps the current setting.
  CpuBackend::Create({});
  EXPECT_EQ(openblas_get_num_threads(), 1);
  openblas_set_num_threads(before);
}

}  // namespace
}  // namespace ps
