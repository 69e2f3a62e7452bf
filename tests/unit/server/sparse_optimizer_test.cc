// Each sparse optimizer against a double-precision reference of the formulas
// in proto/ps/v1/job.proto (SparseOptimizerSpec, FtrlOptions).
#include "server/sparse_optimizer.h"

#include <cmath>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace ps {
namespace {

using testing::HasSubstr;

constexpr int kDim = 4;
constexpr int kSteps = 6;
// float32 against double over kSteps steps: relative 1e-5 of the value, or
// 1e-6 absolute near zero.
constexpr double kRelTolerance = 1e-5;
constexpr double kAbsTolerance = 1e-6;

// Gradient of step t (1-based), value i: mixed signs and magnitudes.
double Grad(int t, int i) {
  return 0.3 * std::sin(1.7 * t + 0.9 * i) + 0.05 * (i - 1.5);
}

std::vector<double> InitialValues() { return {0.5, -0.25, 0.125, 0.0}; }

// Runs the optimizer for kSteps on one row from InitialValues, with
// lr_factor 0.5 on even steps, and checks it against `reference`, which
// updates p (double) for step t with learning-rate factor f.
template <typename Reference>
void ExpectMatches(const SparseOptimizer& opt, Reference reference) {
  std::vector<double> expected = InitialValues();
  std::vector<float> values(expected.begin(), expected.end());
  std::vector<float> state(static_cast<size_t>(opt.state_floats()), 0.0f);
  for (int t = 1; t <= kSteps; ++t) {
    const float factor = t % 2 == 0 ? 0.5f : 1.0f;
    std::vector<float> grad(kDim);
    std::vector<double> g(kDim);
    for (int i = 0; i < kDim; ++i) {
      g[i] = static_cast<float>(Grad(t, i));  // The float the table sees.
      grad[i] = static_cast<float>(g[i]);
    }
    opt.Step(values.data(), state.data(), grad.data(), t, factor);
    reference(expected, g, t, static_cast<double>(factor));
    for (int i = 0; i < kDim; ++i) {
      EXPECT_NEAR(values[i], expected[i],
                  kAbsTolerance + kRelTolerance * std::fabs(expected[i]))
          << "step " << t << " value " << i;
    }
  }
}

TEST(SparseOptimizerTest, SgdMatchesTheReference) {
  v1::SparseOptimizerSpec spec;
  spec.mutable_sgd()->set_learning_rate(0.1f);
  auto opt = SparseOptimizer::Create(spec, kDim);
  ASSERT_TRUE(opt.ok()) << opt.status();
  EXPECT_EQ(opt->state_floats(), 0);
  ExpectMatches(*opt, [](std::vector<double>& p, const std::vector<double>& g,
                         int, double f) {
    for (int i = 0; i < kDim; ++i) p[i] -= 0.1 * f * g[i];
  });
}

TEST(SparseOptimizerTest, AdagradMatchesTheReference) {
  v1::SparseOptimizerSpec spec;
  auto* a = spec.mutable_adagrad();
  a->set_learning_rate(0.2f);
  a->set_epsilon(1e-3f);
  a->set_weight_decay(0.01f);
  a->set_initial_accumulator_value(0.1f);
  auto opt = SparseOptimizer::Create(spec, kDim);
  ASSERT_TRUE(opt.ok()) << opt.status();
  EXPECT_EQ(opt->state_floats(), kDim);
  std::vector<double> s(kDim, 0.1);
  ExpectMatches(*opt, [&](std::vector<double>& p, const std::vector<double>& g,
                          int, double f) {
    for (int i = 0; i < kDim; ++i) {
      const double gi = g[i] + 0.01 * p[i];
      s[i] += gi * gi;
      p[i] -= 0.2 * f * gi / (std::sqrt(s[i]) + 1e-3);
    }
  });
}

TEST(SparseOptimizerTest, RowwiseAdagradMatchesTheReference) {
  v1::SparseOptimizerSpec spec;
  auto* a = spec.mutable_rowwise_adagrad();
  a->set_learning_rate(0.2f);
  a->set_epsilon(1e-3f);
  a->set_initial_accumulator_value(0.05f);
  auto opt = SparseOptimizer::Create(spec, kDim);
  ASSERT_TRUE(opt.ok()) << opt.status();
  EXPECT_EQ(opt->state_floats(), 1);
  double s = 0.05;
  ExpectMatches(*opt, [&](std::vector<double>& p, const std::vector<double>& g,
                          int, double f) {
    double sum = 0;
    for (int i = 0; i < kDim; ++i) sum += g[i] * g[i];
    s += sum / kDim;
    for (int i = 0; i < kDim; ++i) {
      p[i] -= 0.2 * f * g[i] / (std::sqrt(s) + 1e-3);
    }
  });
}

TEST(SparseOptimizerTest, LazyAdamMatchesTheReference) {
  v1::SparseOptimizerSpec spec;
  auto* a = spec.mutable_lazy_adam();
  a->set_learning_rate(0.01f);
  a->set_beta1(0.9f);
  a->set_beta2(0.999f);
  a->set_epsilon(1e-8f);
  auto opt = SparseOptimizer::Create(spec, kDim);
  ASSERT_TRUE(opt.ok()) << opt.status();
  EXPECT_EQ(opt->state_floats(), 2 * kDim);
  std::vector<double> m(kDim, 0), v(kDim, 0);
  const double b1 = 0.9f, b2 = 0.999f;  // The float betas, widened.
  ExpectMatches(*opt, [&](std::vector<double>& p, const std::vector<double>& g,
                          int t, double f) {
    for (int i = 0; i < kDim; ++i) {
      m[i] = b1 * m[i] + (1 - b1) * g[i];
      v[i] = b2 * v[i] + (1 - b2) * g[i] * g[i];
      const double m_hat = m[i] / (1 - std::pow(b1, t));
      const double v_hat = v[i] / (1 - std::pow(b2, t));
      p[i] -= 0.01 * f * m_hat / (std::sqrt(v_hat) + 1e-8);
    }
  });
}

TEST(SparseOptimizerTest, FtrlMatchesTheReference) {
  v1::SparseOptimizerSpec spec;
  auto* o = spec.mutable_ftrl();
  o->set_alpha(0.5f);
  o->set_beta(1.0f);
  o->set_l1(0.05f);
  o->set_l2(0.1f);
  auto opt = SparseOptimizer::Create(spec, kDim);
  ASSERT_TRUE(opt.ok()) << opt.status();
  EXPECT_EQ(opt->state_floats(), 2 * kDim);
  std::vector<double> z(kDim, 0), n(kDim, 0);
  const double l1 = 0.05f, l2 = 0.1f;
  ExpectMatches(*opt, [&](std::vector<double>& w, const std::vector<double>& g,
                          int, double f) {
    const double alpha = 0.5 * f;
    for (int i = 0; i < kDim; ++i) {
      const double sigma =
          (std::sqrt(n[i] + g[i] * g[i]) - std::sqrt(n[i])) / alpha;
      z[i] += g[i] - sigma * w[i];
      n[i] += g[i] * g[i];
      w[i] = std::fabs(z[i]) <= l1 ? 0.0
                                   : -(z[i] - std::copysign(l1, z[i])) /
                                         ((1.0 + std::sqrt(n[i])) / alpha + l2);
    }
  });
}

TEST(SparseOptimizerTest, FtrlWithL1GivesExactZeros) {
  v1::SparseOptimizerSpec spec;
  spec.mutable_ftrl()->set_alpha(0.1f);
  spec.mutable_ftrl()->set_beta(1.0f);
  spec.mutable_ftrl()->set_l1(1.0f);
  auto opt = SparseOptimizer::Create(spec, 2);
  ASSERT_TRUE(opt.ok()) << opt.status();
  std::vector<float> w = {0.3f, -0.2f};  // An initializer's values.
  std::vector<float> state(4, 0.0f);
  // Small gradients keep |z| <= l1 on value 0; a large one passes it on 1.
  for (int t = 1; t <= 3; ++t) {
    const float g[2] = {0.01f, 2.0f};
    opt->Step(w.data(), state.data(), g, t, 1.0f);
    EXPECT_EQ(w[0], 0.0f) << "step " << t;
    EXPECT_FALSE(std::signbit(w[0]));
    EXPECT_NE(w[1], 0.0f) << "step " << t;
  }
}

TEST(SparseOptimizerTest, FtrlAtRateZeroLeavesTheRow) {
  v1::SparseOptimizerSpec spec;
  spec.mutable_ftrl()->set_alpha(0.1f);
  auto opt = SparseOptimizer::Create(spec, 2);
  ASSERT_TRUE(opt.ok()) << opt.status();
  std::vector<float> w = {0.3f, -0.2f};
  std::vector<float> state = {0.5f, 0.25f, 1.0f, 2.0f};
  const float g[2] = {1.0f, -1.0f};
  opt->Step(w.data(), state.data(), g, 1, 0.0f);
  EXPECT_THAT(w, testing::ElementsAre(0.3f, -0.2f));
  EXPECT_THAT(state, testing::ElementsAre(0.5f, 0.25f, 1.0f, 2.0f));
}

TEST(SparseOptimizerTest, BadSpecsAreInvalidNamingTheField) {
  struct Case {
    v1::SparseOptimizerSpec spec;
    const char* field;
  };
  std::vector<Case> cases(6);
  cases[0].field = "needs one";
  cases[1].spec.mutable_sgd()->set_learning_rate(0);
  cases[1].field = "sgd.learning_rate";
  cases[2].spec.mutable_sgd()->set_learning_rate(0.1f);
  cases[2].spec.mutable_sgd()->set_momentum(0.9f);
  cases[2].field = "sgd.momentum";
  cases[3].spec.mutable_lazy_adam()->set_learning_rate(0.1f);
  cases[3].spec.mutable_lazy_adam()->set_weight_decay(0.1f);
  cases[3].field = "lazy_adam.weight_decay";
  cases[4].spec.mutable_lazy_adam()->set_learning_rate(0.1f);
  cases[4].spec.mutable_lazy_adam()->set_beta1(1.0f);
  cases[4].field = "lazy_adam.beta1";
  cases[5].spec.mutable_ftrl()->set_alpha(0.1f);
  cases[5].spec.mutable_ftrl()->set_l1(-1.0f);
  cases[5].field = "ftrl.l1";
  for (const Case& c : cases) {
    auto opt = SparseOptimizer::Create(c.spec, kDim);
    ASSERT_FALSE(opt.ok()) << c.field;
    EXPECT_EQ(opt.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(opt.status().message(), HasSubstr(c.field));
  }
}

}  // namespace
}  // namespace ps
