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
#include "ps/v1/job.pb.h"
#include "tests/testing/backend_fixture.h"
#include "worker/model/backend.h"
#include "worker/model/cpu/cpu_backend.h"
#include "worker/model/cuda/cuda_backend.h"
#include "worker/model/model.h"
#include "worker/model/reduced_precision.h"

namespace ps {
namespace {

using testing::RandomVector;

// Every test on every backend (tests/testing/backend_fixture.h).
class BackendTest : public testing::BackendFixture {};

using ::testing::ElementsAre;
using ::testing::FloatNear;
using ::testing::Pointwise;

// The backend conformance suite: every Backend implementation must pass it.
// Tolerances: 1e-6 for element-wise kernels on values of order 1 (a few
// float32 ulps); 1e-5 for GEMMs of up to 130 products of values in [-1, 1]
// (float32 accumulation in an implementation-defined order; 1e-6 * k for
// longer sums); exact equality
// for copies, im2col and pooling, which only move values.

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
  backend_->Gemm(true, false, 2, 2, 2, 1.0f, a.data(), b.data(), 0.0f, c.data(),
                 Precision::kFp32);
  EXPECT_THAT(ToHost(c), ElementsAre(26, 30, 38, 44));
  // Accumulate: C = 2 * A B^T + 1 * C; A B^T = [17 23; 39 53].
  backend_->Gemm(false, true, 2, 2, 2, 2.0f, a.data(), b.data(), 1.0f, c.data(),
                 Precision::kFp32);
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

TEST_P(BackendTest, ReducedPrecisionGemmMatchesRoundedReference) {
  // Products of fp16 (11-bit) or bf16 (8-bit) significands are exact in
  // float32, so the result is the float32 product of the rounded inputs up to
  // accumulation order: k float32 additions of sums of order sqrt(k), so a
  // tolerance of 1e-6 * k (at least 1e-5).
  std::mt19937 rng(9);
  const std::vector<std::tuple<int, int, int>> shapes = {
      {7, 13, 5}, {1, 1, 1}, {13, 1, 7}, {67, 129, 33}, {33, 65, 130}};
  for (Precision precision : {Precision::kFp16, Precision::kBf16}) {
    for (const auto& [m, n, k] : shapes) {
      for (bool ta : {false, true}) {
        for (bool tb : {false, true}) {
          SCOPED_TRACE(::testing::Message()
                       << PrecisionName(precision) << " m=" << m << " n=" << n
                       << " k=" << k << " ta=" << ta << " tb=" << tb);
          const std::vector<float> a = RandomVector(m * k, &rng);
          const std::vector<float> b = RandomVector(k * n, &rng);
          const std::vector<float> c = RandomVector(m * n, &rng);
          std::vector<float> ra = a, rb = b;
          for (float& v : ra) v = RoundToPrecision(v, precision);
          for (float& v : rb) v = RoundToPrecision(v, precision);
          const std::vector<float> expected =
              NaiveGemm(ta, tb, m, n, k, 1.5f, ra, rb, 0.5f, c);
          DeviceBuffer da = ToDevice(a), db = ToDevice(b), dc = ToDevice(c);
          backend_->Gemm(ta, tb, m, n, k, 1.5f, da.data(), db.data(), 0.5f,
                         dc.data(), precision);
          EXPECT_THAT(ToHost(dc),
                      Pointwise(FloatNear(1e-6f * std::max(k, 10)), expected));
        }
      }
    }
  }
}

TEST_P(BackendTest, ReducedPrecisionGemmRoundsItsInputs) {
  // 1 + 2^-12 is a float32 but neither an fp16 (10-bit mantissa) nor a bf16
  // (7-bit): both round it to 1. 70000 overflows fp16 (inf) and is 70144 in
  // bf16 (steps of 512 there).
  DeviceBuffer a = ToDevice({1.0f + 1.0f / 4096, 70000.0f});
  DeviceBuffer b = ToDevice({1.0f});
  DeviceBuffer c = backend_->Allocate(2);
  backend_->Gemm(false, false, 2, 1, 1, 1.0f, a.data(), b.data(), 0.0f,
                 c.data(), Precision::kFp32);
  EXPECT_THAT(ToHost(c), ElementsAre(1.0f + 1.0f / 4096, 70000.0f));
  backend_->Gemm(false, false, 2, 1, 1, 1.0f, a.data(), b.data(), 0.0f,
                 c.data(), Precision::kBf16);
  EXPECT_THAT(ToHost(c), ElementsAre(1.0f, 70144.0f));
  backend_->Gemm(false, false, 2, 1, 1, 1.0f, a.data(), b.data(), 0.0f,
                 c.data(), Precision::kFp16);
  EXPECT_THAT(ToHost(c),
              ElementsAre(1.0f, std::numeric_limits<float>::infinity()));
}

TEST_P(BackendTest, GemmWithEmptyInnerDimensionScalesC) {
  DeviceBuffer c = ToDevice({std::nanf(""), 1.0f});
  backend_->Gemm(false, false, 1, 2, 0, 1.0f, nullptr, nullptr, 0.0f, c.data(),
                 Precision::kFp32);
  EXPECT_THAT(ToHost(c), ElementsAre(0.0f, 0.0f));
  DeviceBuffer d = ToDevice({2.0f, 3.0f});
  backend_->Gemm(false, false, 1, 2, 0, 1.0f, nullptr, nullptr, 0.5f, d.data(),
                 Precision::kFp32);
  EXPECT_THAT(ToHost(d), ElementsAre(1.0f, 1.5f));
}

TEST_P(BackendTest, Scale) {
  DeviceBuffer x = ToDevice({1.0f, -2.0f, 0.0f, 1e-30f});
  backend_->Scale(x.data(), 4, 4.0f);
  EXPECT_THAT(ToHost(x), ElementsAre(4.0f, -8.0f, 0.0f, 4e-30f));
  backend_->Scale(x.data(), 0, 100.0f);  // n = 0 does nothing.
  EXPECT_THAT(ToHost(x), ElementsAre(4.0f, -8.0f, 0.0f, 4e-30f));
}

TEST_P(BackendTest, LargeCopiesRoundTrip) {
  // Larger than any staging buffer (4 MiB): copies go in several pieces.
  std::mt19937 rng(3);
  const std::vector<float> values = RandomVector(3'000'001, &rng);
  EXPECT_EQ(ToHost(ToDevice(values)), values);
}

TEST_P(BackendTest, CopyToHostAsyncIsFinalAfterSynchronize) {
  std::mt19937 rng(5);
  const std::vector<int64_t> sizes = {1, 1000, 1'500'000, 7};
  std::vector<std::vector<float>> values;
  std::vector<DeviceBuffer> buffers;
  for (int64_t n : sizes) {
    values.push_back(RandomVector(n, &rng));
    buffers.push_back(ToDevice(values.back()));
  }
  // Work issued after a copy, on another buffer, runs beside it (as a
  // model's backward pass computes the next layer's gradient while the last
  // one's is copied out); a buffer is written again only after Synchronize,
  // which the contract asks for.
  DeviceBuffer scratch = ToDevice(RandomVector(1'500'000, &rng));
  std::vector<std::vector<float>> hosts(sizes.size());
  for (int round = 0; round < 2; ++round) {  // The staging is reused.
    for (size_t i = 0; i < sizes.size(); ++i) {
      hosts[i].assign(sizes[i], -1.0f);
      backend_->CopyToHostAsync(buffers[i].data(), sizes[i], hosts[i].data());
      backend_->Scale(scratch.data(), 1'500'000, 0.5f);
    }
    // Waiting for the kernels alone leaves the copies to Synchronize.
    backend_->SynchronizeCompute();
    backend_->Synchronize();
    for (size_t i = 0; i < sizes.size(); ++i) {
      EXPECT_EQ(hosts[i], values[i]) << "round " << round << " buffer " << i;
      for (float& v : values[i]) v *= 2.0f;
      backend_->Scale(buffers[i].data(), sizes[i], 2.0f);
    }
  }
}

// Reference im2col (HWC, "same" padding, stride 1).
std::vector<float> NaiveIm2Col(const std::vector<float>& x, int batch, int h,
                               int w, int c, int k) {
  std::vector<float> cols;
  const int pad = k / 2;
  for (int b = 0; b < batch; ++b) {
    for (int oh = 0; oh < h; ++oh) {
      for (int ow = 0; ow < w; ++ow) {
        for (int kh = 0; kh < k; ++kh) {
          for (int kw = 0; kw < k; ++kw) {
            for (int ch = 0; ch < c; ++ch) {
              const int ih = oh + kh - pad, iw = ow + kw - pad;
              const bool inside = ih >= 0 && ih < h && iw >= 0 && iw < w;
              cols.push_back(inside ? x[((b * h + ih) * w + iw) * c + ch] : 0);
            }
          }
        }
      }
    }
  }
  return cols;
}

TEST_P(BackendTest, Im2ColHandComputed) {
  // One 3x3 single-channel image, kernel 3: the centre pixel's window is the
  // image; the top-left one has zeros above and to the left.
  DeviceBuffer x = ToDevice({1, 2, 3, 4, 5, 6, 7, 8, 9});
  DeviceBuffer cols = backend_->Allocate(9 * 9);
  backend_->Im2Col(x.data(), 1, 3, 3, 1, 3, cols.data());
  const std::vector<float> all = ToHost(cols);
  EXPECT_THAT(std::vector<float>(all.begin(), all.begin() + 9),
              ElementsAre(0, 0, 0, 0, 1, 2, 0, 4, 5));
  EXPECT_THAT(std::vector<float>(all.begin() + 36, all.begin() + 45),
              ElementsAre(1, 2, 3, 4, 5, 6, 7, 8, 9));
}

TEST_P(BackendTest, Im2ColMatchesNaive) {
  std::mt19937 rng(13);
  for (const auto& [batch, h, w, c, k] :
       std::vector<std::tuple<int, int, int, int, int>>{{2, 5, 4, 3, 3},
                                                        {1, 7, 7, 1, 5},
                                                        {3, 4, 6, 2, 1},
                                                        {1, 2, 3, 5, 7}}) {
    SCOPED_TRACE(::testing::Message()
                 << "batch=" << batch << " h=" << h << " w=" << w << " c=" << c
                 << " k=" << k);
    const std::vector<float> x = RandomVector(batch * h * w * c, &rng);
    const std::vector<float> expected = NaiveIm2Col(x, batch, h, w, c, k);
    DeviceBuffer dx = ToDevice(x);
    DeviceBuffer cols = backend_->Allocate(expected.size());
    backend_->Im2Col(dx.data(), batch, h, w, c, k, cols.data());
    EXPECT_EQ(ToHost(cols), expected);
  }
}

TEST_P(BackendTest, Col2ImIsTheAdjointOfIm2Col) {
  // <Im2Col(x), y> == <x, Col2Im(y)> for every x and y defines the adjoint.
  std::mt19937 rng(17);
  for (const auto& [batch, h, w, c, k] :
       std::vector<std::tuple<int, int, int, int, int>>{
           {2, 5, 4, 3, 3}, {1, 7, 7, 1, 5}, {3, 4, 6, 2, 1}}) {
    SCOPED_TRACE(::testing::Message()
                 << "batch=" << batch << " h=" << h << " w=" << w << " c=" << c
                 << " k=" << k);
    const std::vector<float> x = RandomVector(batch * h * w * c, &rng);
    const std::vector<float> y =
        RandomVector(int64_t{batch} * h * w * k * k * c, &rng);
    const std::vector<float> cols = NaiveIm2Col(x, batch, h, w, c, k);
    DeviceBuffer dy = ToDevice(y), dx = ToDevice(x);  // dx is overwritten.
    backend_->Col2Im(dy.data(), batch, h, w, c, k, dx.data());
    const std::vector<float> back = ToHost(dx);
    double lhs = 0, rhs = 0, scale = 0;
    for (size_t i = 0; i < y.size(); ++i) {
      lhs += double{cols[i]} * y[i];
      scale += std::abs(double{cols[i]} * y[i]);
    }
    for (size_t i = 0; i < x.size(); ++i) rhs += double{x[i]} * back[i];
    EXPECT_NEAR(lhs, rhs, 1e-6 * scale);
  }
}

TEST_P(BackendTest, MaxPoolHandComputed) {
  // One 3x5 image with 2 channels (channel 1 = -channel 0): the last row
  // and column are dropped, leaving a 1x2 output.
  std::vector<float> x;
  const std::vector<float> plane = {1, 5, 2, 0, 9,  //
                                    3, 4, 8, 1, 9,  //
                                    9, 9, 9, 9, 9};
  for (float v : plane) {
    x.push_back(v);
    x.push_back(-v);
  }
  DeviceBuffer dx = ToDevice(x), y = backend_->Allocate(4);
  backend_->MaxPool2x2(dx.data(), 1, 3, 5, 2, y.data());
  EXPECT_THAT(ToHost(y), ElementsAre(5, -1, 8, 0));

  // The gradient goes to each window's maximum; the dropped values get 0.
  DeviceBuffer grad_y = ToDevice({10, 20, 30, 40}), grad_x = ToDevice(x);
  backend_->MaxPool2x2Grad(dx.data(), y.data(), grad_y.data(), 1, 3, 5, 2,
                           grad_x.data());
  std::vector<float> expected(x.size(), 0.0f);
  expected[2 * 1] = 10;      // 5 at (0, 1), channel 0.
  expected[2 * 0 + 1] = 20;  // -1 at (0, 0), channel 1.
  expected[2 * 7] = 30;      // 8 at (1, 2), channel 0.
  expected[2 * 3 + 1] = 40;  // -0 at (0, 3), channel 1.
  EXPECT_EQ(ToHost(grad_x), expected);
}

TEST_P(BackendTest, MaxPoolGradientGoesToTheFirstOfTiedMaxima) {
  // A 2x2 window of equal values: only the first (top-left) gets it.
  DeviceBuffer x = ToDevice({7, 7, 7, 7}), y = backend_->Allocate(1);
  backend_->MaxPool2x2(x.data(), 1, 2, 2, 1, y.data());
  DeviceBuffer grad_y = ToDevice({3}), grad_x = backend_->Allocate(4);
  backend_->MaxPool2x2Grad(x.data(), y.data(), grad_y.data(), 1, 2, 2, 1,
                           grad_x.data());
  EXPECT_THAT(ToHost(grad_x), ElementsAre(3, 0, 0, 0));
  // Bottom-right ties with bottom-left: bottom-left comes first.
  DeviceBuffer x2 = ToDevice({1, 2, 5, 5});
  backend_->MaxPool2x2(x2.data(), 1, 2, 2, 1, y.data());
  backend_->MaxPool2x2Grad(x2.data(), y.data(), grad_y.data(), 1, 2, 2, 1,
                           grad_x.data());
  EXPECT_THAT(ToHost(grad_x), ElementsAre(0, 0, 3, 0));
}

// Returns a model spec for each kind: softmax regression, an MLP and a CNN.
std::vector<std::pair<std::string, v1::ModelSpec>> ModelKinds() {
  v1::ModelSpec softmax;
  softmax.set_kind(v1::ModelSpec::SOFTMAX_REGRESSION);
  softmax.set_input_dim(64);
  softmax.set_num_classes(10);
  v1::ModelSpec mlp = softmax;
  mlp.set_kind(v1::ModelSpec::MLP);
  mlp.add_hidden_layers(33);
  mlp.add_hidden_layers(17);
  mlp.set_activation(v1::TANH);
  v1::ModelSpec cnn = softmax;
  cnn.set_kind(v1::ModelSpec::CNN);
  cnn.set_activation(v1::RELU);
  cnn.mutable_image()->set_height(8);
  cnn.mutable_image()->set_width(8);
  cnn.mutable_image()->set_channels(1);
  for (int filters : {5, 7}) {
    v1::ConvLayer* conv = cnn.add_conv_layers();
    conv->set_filters(filters);
    conv->set_kernel_size(3);
  }
  cnn.add_hidden_layers(12);
  return {{"softmax", softmax}, {"mlp", mlp}, {"cnn", cnn}};
}

// A whole training step (forward, loss, backward, gradients copied out) of
// each model in each precision gives the CPU backend's loss and gradients.
// On the CPU backend this compares it with itself; its own correctness is
// checked against finite differences in model_test and cnn_model_test.
// Tolerances, relative to the largest gradient: 1e-4 in fp32 (summation
// order); 2e-3 in fp16 and 2e-2 in bf16, where a float32 difference in an
// activation can round to a neighbouring fp16 / bf16 value in the next GEMM.
TEST_P(BackendTest, ModelTrainingStepMatchesTheCpuBackend) {
  std::unique_ptr<CpuBackend> cpu = CpuBackend::Create({});
  std::mt19937 rng(23);
  const int batch = 13;  // Not a multiple of 8.
  const std::vector<float> features = RandomVector(batch * 64, &rng);
  std::vector<int32_t> labels(batch);
  for (int i = 0; i < batch; ++i) labels[i] = (i * 7) % 10;
  for (const auto& [kind, spec] : ModelKinds()) {
    for (const auto& [precision, tolerance] :
         std::vector<std::pair<Precision, double>>{{Precision::kFp32, 1e-4},
                                                   {Precision::kFp16, 2e-3},
                                                   {Precision::kBf16, 2e-2}}) {
      SCOPED_TRACE(kind + " " + PrecisionName(precision));
      ModelOptions options;
      options.precision = precision;
      options.initial_loss_scale = 1024;
      auto model = Model::Create(spec, backend_.get(), options);
      auto reference = Model::Create(spec, cpu.get(), options);
      ASSERT_TRUE(model.ok()) << model.status();
      ASSERT_TRUE(reference.ok()) << reference.status();
      std::vector<std::vector<float>> params;
      for (const TensorSpec& t : (*model)->tensors()) {
        params.push_back(RandomVector(t.num_elems(), &rng));
        for (float& v : params.back()) v *= 0.5f;
      }
      ASSERT_TRUE((*model)->SetParameters(params).ok());
      ASSERT_TRUE((*reference)->SetParameters(params).ok());
      std::vector<std::vector<float>> grads, expected;
      absl::StatusOr<float> loss = (*model)->ComputeGradients(
          features.data(), labels.data(), batch, &grads);
      absl::StatusOr<float> expected_loss =
          (*reference)
              ->ComputeGradients(features.data(), labels.data(), batch,
                                 &expected);
      ASSERT_TRUE(loss.ok() && expected_loss.ok());
      EXPECT_NEAR(*loss, *expected_loss, tolerance * *expected_loss);
      double max_grad = 0;
      for (const auto& g : expected) {
        for (float v : g) max_grad = std::max(max_grad, double{std::abs(v)});
      }
      ASSERT_EQ(grads.size(), expected.size());
      for (size_t t = 0; t < grads.size(); ++t) {
        EXPECT_THAT(grads[t],
                    Pointwise(FloatNear(tolerance * max_grad), expected[t]))
            << (*model)->tensors()[t].name;
      }
      // The same predictions on the batch.
      EXPECT_EQ(
          *(*model)->CountCorrect(features.data(), labels.data(), batch),
          *(*reference)->CountCorrect(features.data(), labels.data(), batch));
    }
  }
}

// The CPU backend, and the CUDA backend where the build has it and a GPU is
// present (otherwise its tests skip, saying why).

INSTANTIATE_TEST_SUITE_P(Backends, BackendTest,
                         ::testing::ValuesIn(testing::Backends()),
                         testing::BackendName);

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
