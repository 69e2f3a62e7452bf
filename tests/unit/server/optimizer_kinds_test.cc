// AdamW, RMSprop, Adagrad and LAMB against values computed by hand and
// against double-precision references written straight from the formulas in
// docs/training.md (no code shared with server/optimizer*.cc); and the
// learning rate a caller passes (the schedule's) in place of the spec's.
#include <cmath>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "server/optimizer.h"
#include "tests/testing/optimizer_testing.h"

namespace ps {
namespace {

using testing::MustCreate;

v1::OptimizerSpec AdamW(float lr, float wd, float beta1 = 0, float beta2 = 0,
                        float epsilon = 0) {
  v1::OptimizerSpec spec;
  auto* o = spec.mutable_adamw();
  o->set_learning_rate(lr);
  o->set_weight_decay(wd);
  o->set_beta1(beta1);
  o->set_beta2(beta2);
  o->set_epsilon(epsilon);
  return spec;
}

v1::OptimizerSpec Rmsprop(float lr, float alpha, float epsilon,
                          float momentum = 0, float wd = 0) {
  v1::OptimizerSpec spec;
  auto* o = spec.mutable_rmsprop();
  o->set_learning_rate(lr);
  o->set_alpha(alpha);
  o->set_epsilon(epsilon);
  o->set_momentum(momentum);
  o->set_weight_decay(wd);
  return spec;
}

v1::OptimizerSpec Adagrad(float lr, float epsilon, float initial = 0,
                          float wd = 0) {
  v1::OptimizerSpec spec;
  auto* o = spec.mutable_adagrad();
  o->set_learning_rate(lr);
  o->set_epsilon(epsilon);
  o->set_initial_accumulator_value(initial);
  o->set_weight_decay(wd);
  return spec;
}

v1::OptimizerSpec Lamb(float lr, float wd = 0, float beta1 = 0, float beta2 = 0,
                       float epsilon = 0) {
  v1::OptimizerSpec spec;
  auto* o = spec.mutable_lamb();
  o->set_learning_rate(lr);
  o->set_weight_decay(wd);
  o->set_beta1(beta1);
  o->set_beta2(beta2);
  o->set_epsilon(epsilon);
  return spec;
}

// --- Double-precision references. ---

struct RefAdamW {
  double beta1, beta2, epsilon, wd;
  std::vector<double> m{}, v{};
  int t = 0;
  void Step(std::vector<double>& p, const std::vector<float>& g, double lr) {
    m.resize(p.size(), 0.0);
    v.resize(p.size(), 0.0);
    ++t;
    for (size_t i = 0; i < p.size(); ++i) {
      m[i] = beta1 * m[i] + (1 - beta1) * g[i];
      v[i] = beta2 * v[i] + (1 - beta2) * g[i] * g[i];
      const double m_hat = m[i] / (1 - std::pow(beta1, t));
      const double v_hat = v[i] / (1 - std::pow(beta2, t));
      p[i] -= lr * (m_hat / (std::sqrt(v_hat) + epsilon) + wd * p[i]);
    }
  }
};

struct RefRmsprop {
  double alpha, epsilon, momentum, wd;
  std::vector<double> v{}, buf{};
  void Step(std::vector<double>& p, const std::vector<float>& g, double lr) {
    v.resize(p.size(), 0.0);
    buf.resize(p.size(), 0.0);
    for (size_t i = 0; i < p.size(); ++i) {
      const double grad = g[i] + wd * p[i];
      v[i] = alpha * v[i] + (1 - alpha) * grad * grad;
      const double d = grad / (std::sqrt(v[i]) + epsilon);
      if (momentum > 0) {
        buf[i] = momentum * buf[i] + d;
        p[i] -= lr * buf[i];
      } else {
        p[i] -= lr * d;
      }
    }
  }
};

struct RefAdagrad {
  double epsilon, initial, wd;
  std::vector<double> s{};
  void Step(std::vector<double>& p, const std::vector<float>& g, double lr) {
    s.resize(p.size(), initial);
    for (size_t i = 0; i < p.size(); ++i) {
      const double grad = g[i] + wd * p[i];
      s[i] += grad * grad;
      p[i] -= lr * grad / (std::sqrt(s[i]) + epsilon);
    }
  }
};

struct RefLamb {
  double beta1, beta2, epsilon, wd;
  std::vector<double> m{}, v{};
  int t = 0;
  void Step(std::vector<double>& p, const std::vector<float>& g, double lr) {
    m.resize(p.size(), 0.0);
    v.resize(p.size(), 0.0);
    ++t;
    std::vector<double> r(p.size());
    double pn = 0, rn = 0;
    for (size_t i = 0; i < p.size(); ++i) {
      m[i] = beta1 * m[i] + (1 - beta1) * g[i];
      v[i] = beta2 * v[i] + (1 - beta2) * g[i] * g[i];
      const double m_hat = m[i] / (1 - std::pow(beta1, t));
      const double v_hat = v[i] / (1 - std::pow(beta2, t));
      r[i] = m_hat / (std::sqrt(v_hat) + epsilon) + wd * p[i];
      pn += p[i] * p[i];
      rn += r[i] * r[i];
    }
    const double trust = pn > 0 && rn > 0 ? std::sqrt(pn) / std::sqrt(rn) : 1;
    for (size_t i = 0; i < p.size(); ++i) p[i] -= lr * trust * r[i];
  }
};

// Runs `optimizer` and `reference` for five steps of different gradients at
// a learning rate that changes every step (as a schedule does), then
// compares.
template <typename Ref>
void ExpectMatchesReference(const v1::OptimizerSpec& spec, Ref reference,
                            size_t n, double tolerance) {
  SCOPED_TRACE(spec.ShortDebugString());
  std::unique_ptr<Optimizer> opt = MustCreate(spec);
  ASSERT_NE(opt, nullptr);
  std::vector<float> p = testing::OptimizerTestData(n, 1);
  std::vector<double> expected(p.begin(), p.end());
  std::vector<float> state(opt->state_slots() * n, 0.0f);
  int64_t step = 0;
  for (int i = 0; i < 5; ++i) {
    const std::vector<float> g = testing::OptimizerTestData(n, 100 + i);
    const float lr = opt->learning_rate() * (1.0f - 0.15f * i);
    opt->Apply(p, g, state, &step, lr);
    reference.Step(expected, g, lr);
  }
  EXPECT_EQ(step, 5);
  double largest_move = 0;
  const std::vector<float> initial = testing::OptimizerTestData(n, 1);
  for (size_t i = 0; i < n; ++i) {
    ASSERT_NEAR(p[i], expected[i], tolerance) << "at " << i;
    largest_move = std::max(largest_move, std::abs(expected[i] - initial[i]));
  }
  // The comparison means something: the parameters moved well beyond it.
  EXPECT_GT(largest_move, 100 * tolerance);
}

TEST(OptimizerKindsTest, AdamWDecaysTheWeightsApartFromTheMoments) {
  // lr 0.1, wd 0.1, default betas and epsilon; p = 1, g = 0.5: m_hat = 0.5,
  // v_hat = 0.25, so p = 1 - 0.1 * (0.5 / (0.5 + 1e-8) + 0.1 * 1) = 0.89.
  // Adam with the same L2 coefficient adds it to the gradient, which the
  // normalisation then cancels: p = 1 - 0.1 * 0.6 / 0.6 = 0.9.
  std::unique_ptr<Optimizer> adamw = MustCreate(AdamW(0.1f, 0.1f));
  ASSERT_NE(adamw, nullptr);
  EXPECT_EQ(adamw->state_slots(), 2);
  std::vector<float> p = {1.0f}, state = {0.0f, 0.0f};
  int64_t step = 0;
  const std::vector<float> g = {0.5f};
  adamw->Apply(p, g, state, &step);
  EXPECT_NEAR(p[0], 0.89, 1e-6);
  EXPECT_FLOAT_EQ(state[0], 0.05f);  // m never sees the decay.
  v1::OptimizerSpec adam_spec;
  adam_spec.mutable_adam()->set_learning_rate(0.1f);
  adam_spec.mutable_adam()->set_weight_decay(0.1f);
  std::unique_ptr<Optimizer> adam = MustCreate(adam_spec);
  std::vector<float> q = {1.0f}, q_state = {0.0f, 0.0f};
  int64_t q_step = 0;
  adam->Apply(q, g, q_state, &q_step);
  EXPECT_NEAR(q[0], 0.9, 1e-6);
}

TEST(OptimizerKindsTest, RmspropMatchesHandComputedSteps) {
  // lr 0.01, alpha 0.9, eps 1e-8; p = 1, g = 2: v = 0.1 * 4 = 0.4,
  // p = 1 - 0.01 * 2 / sqrt(0.4) = 0.968377223.
  std::unique_ptr<Optimizer> rms = MustCreate(Rmsprop(0.01f, 0.9f, 1e-8f));
  ASSERT_NE(rms, nullptr);
  EXPECT_EQ(rms->state_slots(), 1);
  std::vector<float> p = {1.0f}, state = {0.0f};
  int64_t step = 0;
  const std::vector<float> g = {2.0f};
  rms->Apply(p, g, state, &step);
  EXPECT_NEAR(state[0], 0.4, 1e-7);
  EXPECT_NEAR(p[0], 0.968377223, 1e-6);

  // With momentum 0.5, a second step of g = 2: v = 0.76, d = 2 / sqrt(0.76)
  // = 2.294157339, buf = 0.5 * 3.16227766 + d = 3.875296169,
  // p = 0.968377223 - 0.03875296169 = 0.929624262.
  std::unique_ptr<Optimizer> mom =
      MustCreate(Rmsprop(0.01f, 0.9f, 1e-8f, 0.5f));
  ASSERT_NE(mom, nullptr);
  EXPECT_EQ(mom->state_slots(), 2);
  std::vector<float> q = {1.0f}, q_state = {0.0f, 0.0f};
  int64_t q_step = 0;
  mom->Apply(q, g, q_state, &q_step);
  EXPECT_NEAR(q[0], 0.968377223, 1e-6);
  mom->Apply(q, g, q_state, &q_step);
  EXPECT_NEAR(q_state[0], 0.76, 1e-6);
  EXPECT_NEAR(q_state[1], 3.875296169, 1e-5);
  EXPECT_NEAR(q[0], 0.929624262, 1e-6);
}

TEST(OptimizerKindsTest, AdagradMatchesHandComputedSteps) {
  // lr 0.1, eps 1e-10, initial accumulator 0.1; p = 1, g = 1 twice:
  // s = 1.1, p = 1 - 0.1 / sqrt(1.1) = 0.904653741;
  // s = 2.1, p -= 0.1 / sqrt(2.1): 0.835647185.
  std::unique_ptr<Optimizer> adagrad = MustCreate(Adagrad(0.1f, 1e-10f, 0.1f));
  ASSERT_NE(adagrad, nullptr);
  EXPECT_EQ(adagrad->state_slots(), 1);
  std::vector<float> p = {1.0f}, state = {0.0f};
  int64_t step = 0;
  const std::vector<float> g = {1.0f};
  adagrad->Apply(p, g, state, &step);
  EXPECT_NEAR(p[0], 0.904653741, 1e-6);
  adagrad->Apply(p, g, state, &step);
  EXPECT_NEAR(p[0], 0.835647185, 1e-6);
  EXPECT_FLOAT_EQ(state[0], 2.0f);  // The state leaves out the 0.1.
}

TEST(OptimizerKindsTest, LambScalesTheStepByTheBlocksTrustRatio) {
  // p = [3, 4] (norm 5), g = [1, 1], lr 0.1: r = g / (|g| + eps), and the
  // trust ratio 5 / ||r|| cancels eps: p -= 0.1 * 5 * [1, 1] / sqrt(2).
  std::unique_ptr<Optimizer> lamb = MustCreate(Lamb(0.1f));
  ASSERT_NE(lamb, nullptr);
  EXPECT_FALSE(lamb->range_wise());
  EXPECT_EQ(lamb->state_slots(), 2);
  std::vector<float> p = {3.0f, 4.0f}, state(4, 0.0f);
  int64_t step = 0;
  const std::vector<float> g = {1.0f, 1.0f};
  lamb->Apply(p, g, state, &step);
  EXPECT_NEAR(p[0], 3.0 - 0.5 / std::sqrt(2.0), 1e-6);
  EXPECT_NEAR(p[1], 4.0 - 0.5 / std::sqrt(2.0), 1e-6);

  // Parameters of norm 0 take the plain step (trust ratio 1): r = [1, -1]
  // less eps, so p = [-0.1, 0.1].
  std::vector<float> zero = {0.0f, 0.0f}, zero_state(4, 0.0f);
  int64_t zero_step = 0;
  const std::vector<float> opposite = {1.0f, -1.0f};
  lamb->Apply(zero, opposite, zero_state, &zero_step);
  EXPECT_NEAR(zero[0], -0.1, 1e-6);
  EXPECT_NEAR(zero[1], 0.1, 1e-6);
}

TEST(OptimizerKindsTest, LambNeedsWholeBlocks) {
  std::unique_ptr<Optimizer> lamb = MustCreate(Lamb(0.1f));
  ASSERT_NE(lamb, nullptr);
  std::vector<float> p = {1.0f, 2.0f}, state(4, 0.0f);
  const std::vector<float> g = {1.0f};
  EXPECT_DEATH(lamb->ApplyRange(p, g, 1, state, 0), "whole blocks");
}

TEST(OptimizerKindsTest, EachMatchesItsDoubleReferenceOverSeveralSteps) {
  ExpectMatchesReference(AdamW(0.01f, 0.05f, 0.8f, 0.99f, 1e-6f),
                         RefAdamW{0.8, 0.99, 1e-6, 0.05}, 1000, 2e-6);
  ExpectMatchesReference(AdamW(0.01f, 0.01f), RefAdamW{0.9, 0.999, 1e-8, 0.01},
                         333, 2e-6);
  ExpectMatchesReference(Rmsprop(0.001f, 0.9f, 1e-6f),
                         RefRmsprop{0.9, 1e-6, 0, 0}, 1000, 2e-6);
  ExpectMatchesReference(Rmsprop(0.001f, 0.99f, 1e-8f, 0.9f, 0.01f),
                         RefRmsprop{0.99, 1e-8, 0.9, 0.01}, 1000, 2e-5);
  ExpectMatchesReference(Adagrad(0.05f, 1e-10f), RefAdagrad{1e-10, 0, 0}, 1000,
                         2e-6);
  ExpectMatchesReference(Adagrad(0.05f, 1e-6f, 0.1f, 0.01f),
                         RefAdagrad{1e-6, 0.1, 0.01}, 1000, 2e-6);
  ExpectMatchesReference(Lamb(0.01f, 0.01f), RefLamb{0.9, 0.999, 1e-6, 0.01},
                         1000, 2e-6);
  ExpectMatchesReference(Lamb(0.02f, 0, 0.8f, 0.99f, 1e-4f),
                         RefLamb{0.8, 0.99, 1e-4, 0}, 77, 2e-6);
}

TEST(OptimizerKindsTest, DefaultsAreTheDocumentedOnes) {
  // Unset betas, epsilon and alpha take their defaults: the results equal
  // those of the explicit values.
  const std::vector<std::pair<v1::OptimizerSpec, v1::OptimizerSpec>> pairs = {
      {AdamW(0.01f, 0.01f), AdamW(0.01f, 0.01f, 0.9f, 0.999f, 1e-8f)},
      {Lamb(0.01f), Lamb(0.01f, 0, 0.9f, 0.999f, 1e-6f)},
      {Rmsprop(0.01f, 0, 0), Rmsprop(0.01f, 0.99f, 1e-8f)},
      {Adagrad(0.01f, 0), Adagrad(0.01f, 1e-10f)},
  };
  for (const auto& [implicit, explicit_values] : pairs) {
    std::unique_ptr<Optimizer> a = MustCreate(implicit);
    std::unique_ptr<Optimizer> b = MustCreate(explicit_values);
    ASSERT_NE(a, nullptr);
    ASSERT_NE(b, nullptr);
    std::vector<float> pa = testing::OptimizerTestData(50, 7), pb = pa;
    std::vector<float> sa(a->state_slots() * 50, 0.0f), sb = sa;
    int64_t ta = 0, tb = 0;
    for (int i = 0; i < 3; ++i) {
      a->Apply(pa, testing::OptimizerTestData(50, 8 + i), sa, &ta);
      b->Apply(pb, testing::OptimizerTestData(50, 8 + i), sb, &tb);
    }
    EXPECT_EQ(pa, pb) << implicit.ShortDebugString();
  }
}

TEST(OptimizerKindsTest, TheGivenLearningRateReplacesTheSpecs) {
  // SGD with lr 0.5 in the spec, applied at 0.125 (a schedule's rate).
  v1::OptimizerSpec spec;
  spec.mutable_sgd()->set_learning_rate(0.5f);
  std::unique_ptr<Optimizer> sgd = MustCreate(spec);
  ASSERT_NE(sgd, nullptr);
  EXPECT_FLOAT_EQ(sgd->learning_rate(), 0.5f);
  std::vector<float> p = {1.0f};
  int64_t step = 0;
  const std::vector<float> g = {2.0f};
  sgd->Apply(p, g, {}, &step, 0.125f);
  EXPECT_FLOAT_EQ(p[0], 0.75f);
  sgd->Apply(p, g, {}, &step);  // The spec's rate.
  EXPECT_FLOAT_EQ(p[0], -0.25f);
}

// Range-wise optimizers give bit for bit the same result applied range by
// range as in one Apply (the server applies gradients as they arrive).
TEST(OptimizerKindsTest, RangeByRangeEqualsOneApply) {
  const size_t n = 1000;
  const std::vector<size_t> cuts = {0, 7, 23, 512, 513, 999, 1000};
  for (const v1::OptimizerSpec& spec :
       {AdamW(0.01f, 0.1f), Rmsprop(0.01f, 0.9f, 1e-6f),
        Rmsprop(0.01f, 0.9f, 1e-6f, 0.9f, 0.01f), Adagrad(0.1f, 1e-8f, 0.1f)}) {
    SCOPED_TRACE(spec.ShortDebugString());
    std::unique_ptr<Optimizer> opt = MustCreate(spec);
    ASSERT_NE(opt, nullptr);
    ASSERT_TRUE(opt->range_wise());
    std::vector<float> whole = testing::OptimizerTestData(n, 1), ranged = whole;
    std::vector<float> whole_state(n * opt->state_slots(), 0.0f);
    std::vector<float> ranged_state = whole_state;
    int64_t whole_step = 0, ranged_step = 0;
    for (int update = 0; update < 3; ++update) {
      const std::vector<float> grad =
          testing::OptimizerTestData(n, 10 + update);
      opt->Apply(whole, grad, whole_state, &whole_step, 0.003f);
      for (size_t c = 0; c + 1 < cuts.size(); ++c) {
        opt->ApplyRange(ranged,
                        std::span<const float>(grad).subspan(
                            cuts[c], cuts[c + 1] - cuts[c]),
                        cuts[c], ranged_state, ranged_step, 0.003f);
      }
      ++ranged_step;
    }
    EXPECT_EQ(whole, ranged);
    EXPECT_EQ(whole_state, ranged_state);
  }
}

}  // namespace
}  // namespace ps
