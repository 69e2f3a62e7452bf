#include "server/optimizer.h"

#include <cmath>
#include <cstdint>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testing/optimizer_testing.h"

namespace ps {
namespace {

using ::testing::HasSubstr;

v1::OptimizerSpec Sgd(float lr, float momentum = 0, float weight_decay = 0) {
  v1::OptimizerSpec spec;
  spec.mutable_sgd()->set_learning_rate(lr);
  spec.mutable_sgd()->set_momentum(momentum);
  spec.mutable_sgd()->set_weight_decay(weight_decay);
  return spec;
}

v1::OptimizerSpec Adam(float lr, float beta1 = 0, float beta2 = 0,
                       float epsilon = 0, float weight_decay = 0) {
  v1::OptimizerSpec spec;
  v1::AdamOptions* adam = spec.mutable_adam();
  adam->set_learning_rate(lr);
  adam->set_beta1(beta1);
  adam->set_beta2(beta2);
  adam->set_epsilon(epsilon);
  adam->set_weight_decay(weight_decay);
  return spec;
}

using testing::MustCreate;

// Reference optimizers in double precision, written straight from the
// formulas (no shared code with server/optimizer.cc).
struct ReferenceSgd {
  double lr, momentum, weight_decay;
  std::vector<double> buf{};

  void Step(std::vector<double>& p, const std::vector<float>& g) {
    buf.resize(p.size(), 0.0);
    for (size_t i = 0; i < p.size(); ++i) {
      const double grad = g[i] + weight_decay * p[i];
      if (momentum > 0) {
        buf[i] = momentum * buf[i] + grad;
        p[i] -= lr * buf[i];
      } else {
        p[i] -= lr * grad;
      }
    }
  }
};

struct ReferenceAdam {
  double lr, beta1, beta2, epsilon, weight_decay;
  std::vector<double> m{}, v{};
  int t = 0;

  void Step(std::vector<double>& p, const std::vector<float>& g) {
    m.resize(p.size(), 0.0);
    v.resize(p.size(), 0.0);
    ++t;
    for (size_t i = 0; i < p.size(); ++i) {
      const double grad = g[i] + weight_decay * p[i];
      m[i] = beta1 * m[i] + (1 - beta1) * grad;
      v[i] = beta2 * v[i] + (1 - beta2) * grad * grad;
      const double m_hat = m[i] / (1 - std::pow(beta1, t));
      const double v_hat = v[i] / (1 - std::pow(beta2, t));
      p[i] -= lr * m_hat / (std::sqrt(v_hat) + epsilon);
    }
  }
};

void ExpectNear(const std::vector<float>& actual,
                const std::vector<double>& expected, double tolerance) {
  ASSERT_EQ(actual.size(), expected.size());
  for (size_t i = 0; i < actual.size(); ++i) {
    EXPECT_NEAR(actual[i], expected[i], tolerance) << "at " << i;
  }
}

TEST(OptimizerTest, SgdTakesOneStepAgainstTheGradient) {
  std::unique_ptr<Optimizer> sgd = MustCreate(Sgd(0.1f));
  ASSERT_NE(sgd, nullptr);
  EXPECT_EQ(sgd->state_slots(), 0);
  std::vector<float> p = {1.0f, -2.0f, 0.0f};
  const std::vector<float> g = {0.5f, -1.0f, 2.0f};
  int64_t step = 0;
  sgd->Apply(p, g, {}, &step);
  EXPECT_EQ(step, 1);
  EXPECT_FLOAT_EQ(p[0], 0.95f);  // 1 - 0.1 * 0.5
  EXPECT_FLOAT_EQ(p[1], -1.9f);  // -2 - 0.1 * -1
  EXPECT_FLOAT_EQ(p[2], -0.2f);  // 0 - 0.1 * 2
}

TEST(OptimizerTest, SgdWeightDecayAddsToTheGradient) {
  std::unique_ptr<Optimizer> sgd = MustCreate(Sgd(0.1f, 0, 0.01f));
  ASSERT_NE(sgd, nullptr);
  std::vector<float> p = {1.0f, -2.0f};
  const std::vector<float> g = {0.5f, 0.0f};
  int64_t step = 0;
  sgd->Apply(p, g, {}, &step);
  EXPECT_FLOAT_EQ(p[0], 0.949f);   // 1 - 0.1 * (0.5 + 0.01 * 1)
  EXPECT_FLOAT_EQ(p[1], -1.998f);  // -2 - 0.1 * (0 + 0.01 * -2)
}

TEST(OptimizerTest, SgdMomentumAccumulatesVelocity) {
  std::unique_ptr<Optimizer> sgd = MustCreate(Sgd(0.1f, 0.9f));
  ASSERT_NE(sgd, nullptr);
  EXPECT_EQ(sgd->state_slots(), 1);
  std::vector<float> p = {1.0f};
  std::vector<float> state = {0.0f};
  const std::vector<float> g = {0.5f};
  int64_t step = 0;
  sgd->Apply(p, g, state, &step);
  EXPECT_FLOAT_EQ(state[0], 0.5f);
  EXPECT_FLOAT_EQ(p[0], 0.95f);  // 1 - 0.1 * 0.5
  sgd->Apply(p, g, state, &step);
  EXPECT_FLOAT_EQ(state[0], 0.95f);  // 0.9 * 0.5 + 0.5
  EXPECT_FLOAT_EQ(p[0], 0.855f);     // 0.95 - 0.1 * 0.95
  EXPECT_EQ(step, 2);
}

TEST(OptimizerTest, SgdMatchesReferenceOnLongBlocks) {
  // 1000 = 62 whole chunks of 16 plus a tail of 8, in the kernels.
  for (float momentum : {0.0f, 0.5f}) {
    std::unique_ptr<Optimizer> sgd = MustCreate(Sgd(0.05f, momentum, 0.1f));
    ASSERT_NE(sgd, nullptr);
    std::vector<float> p = testing::OptimizerTestData(1000, 1);
    std::vector<double> expected(p.begin(), p.end());
    std::vector<float> state(sgd->state_slots() * p.size(), 0.0f);
    ReferenceSgd reference{
        .lr = 0.05, .momentum = momentum, .weight_decay = 0.1};
    int64_t step = 0;
    for (int i = 0; i < 3; ++i) {
      const std::vector<float> g = testing::OptimizerTestData(p.size(), 10 + i);
      sgd->Apply(p, g, state, &step);
      reference.Step(expected, g);
    }
    EXPECT_EQ(step, 3);
    ExpectNear(p, expected, 1e-5);
  }
}

TEST(OptimizerTest, AdamMatchesHandComputedSteps) {
  // lr 0.1 with the default betas and epsilon; p = 1, g = 0.5, 0.25, -1.
  std::unique_ptr<Optimizer> adam = MustCreate(Adam(0.1f));
  ASSERT_NE(adam, nullptr);
  EXPECT_EQ(adam->state_slots(), 2);
  std::vector<float> p = {1.0f};
  std::vector<float> state = {0.0f, 0.0f};
  int64_t step = 0;

  const std::vector<float> g1 = {0.5f};
  adam->Apply(p, g1, state, &step);
  // m = 0.05, v = 0.00025; m_hat = 0.5, v_hat = 0.25: p = 1 - 0.1 * 0.5 /
  // (0.5 + 1e-8).
  EXPECT_FLOAT_EQ(state[0], 0.05f);
  // 1 - 0.999f is 0.00099998713 in float: v is exact to about 1e-5.
  EXPECT_NEAR(state[1], 0.00025, 1e-8);
  EXPECT_NEAR(p[0], 0.9000000020, 1e-6);

  const std::vector<float> g2 = {0.25f};
  adam->Apply(p, g2, state, &step);
  // m = 0.07, v = 0.00031225; m_hat = 0.07 / 0.19, v_hat = 0.00031225 /
  // 0.001999.
  EXPECT_FLOAT_EQ(state[0], 0.07f);
  EXPECT_NEAR(state[1], 0.00031225, 1e-8);
  EXPECT_NEAR(p[0], 0.8067820405, 1e-6);

  const std::vector<float> g3 = {-1.0f};
  adam->Apply(p, g3, state, &step);
  EXPECT_NEAR(p[0], 0.8274177429, 1e-6);
  EXPECT_EQ(step, 3);
}

TEST(OptimizerTest, AdamWithExplicitHyperparametersAndWeightDecay) {
  // lr 0.01, beta1 0.5, beta2 0.75, epsilon 1e-3, weight decay 0.1; p = 2.
  std::unique_ptr<Optimizer> adam =
      MustCreate(Adam(0.01f, 0.5f, 0.75f, 1e-3f, 0.1f));
  ASSERT_NE(adam, nullptr);
  std::vector<float> p = {2.0f};
  std::vector<float> state = {0.0f, 0.0f};
  int64_t step = 0;
  const std::vector<float> g1 = {1.0f};
  adam->Apply(p, g1, state, &step);
  EXPECT_NEAR(p[0], 1.9900083264, 1e-6);
  const std::vector<float> g2 = {-2.0f};
  adam->Apply(p, g2, state, &step);
  EXPECT_NEAR(p[0], 1.9950989573, 1e-6);
}

TEST(OptimizerTest, AdamMatchesReferenceOnLongBlocks) {
  std::unique_ptr<Optimizer> adam =
      MustCreate(Adam(0.001f, 0.8f, 0.99f, 1e-6f, 0.01f));
  ASSERT_NE(adam, nullptr);
  std::vector<float> p = testing::OptimizerTestData(1000, 2);
  std::vector<double> expected(p.begin(), p.end());
  std::vector<float> state(2 * p.size(), 0.0f);
  ReferenceAdam reference{.lr = 0.001,
                          .beta1 = 0.8,
                          .beta2 = 0.99,
                          .epsilon = 1e-6,
                          .weight_decay = 0.01};
  int64_t step = 0;
  for (int i = 0; i < 3; ++i) {
    const std::vector<float> g = testing::OptimizerTestData(p.size(), 20 + i);
    adam->Apply(p, g, state, &step);
    reference.Step(expected, g);
  }
  ExpectNear(p, expected, 1e-6);
  // State layout: m for every parameter, then v for every parameter.
  for (size_t i = 0; i < p.size(); ++i) {
    EXPECT_NEAR(state[i], reference.m[i], 1e-6) << i;
    EXPECT_NEAR(state[p.size() + i], reference.v[i], 1e-6) << i;
  }
}

TEST(OptimizerTest, AdamDefaultsBetasAndEpsilon) {
  std::unique_ptr<Optimizer> adam = MustCreate(Adam(0.1f));
  ASSERT_NE(adam, nullptr);
  std::vector<float> p = testing::OptimizerTestData(37, 3);
  std::vector<double> expected(p.begin(), p.end());
  std::vector<float> state(2 * p.size(), 0.0f);
  ReferenceAdam reference{.lr = 0.1,
                          .beta1 = 0.9,
                          .beta2 = 0.999,
                          .epsilon = 1e-8,
                          .weight_decay = 0};
  int64_t step = 0;
  for (int i = 0; i < 2; ++i) {
    const std::vector<float> g = testing::OptimizerTestData(p.size(), 30 + i);
    adam->Apply(p, g, state, &step);
    reference.Step(expected, g);
  }
  ExpectNear(p, expected, 1e-5);

  // A gradient as small as epsilon halves the first step: the default
  // epsilon is 1e-8.
  std::vector<float> q = {1.0f};
  std::vector<float> q_state = {0.0f, 0.0f};
  const std::vector<float> tiny = {1e-8f};
  int64_t q_step = 0;
  adam->Apply(q, tiny, q_state, &q_step);
  EXPECT_NEAR(q[0], 1.0 - 0.1 * 0.5, 1e-4);
}

TEST(OptimizerTest, AdamResumesFromAStoredStep) {
  // Bias correction depends on *step: resuming at step 2 with the state of
  // two steps continues exactly as an uninterrupted run.
  std::unique_ptr<Optimizer> adam = MustCreate(Adam(0.05f));
  ASSERT_NE(adam, nullptr);
  std::vector<float> p = testing::OptimizerTestData(20, 4);
  std::vector<float> state(2 * p.size(), 0.0f);
  int64_t step = 0;
  for (int i = 0; i < 2; ++i)
    adam->Apply(p, testing::OptimizerTestData(20, 40 + i), state, &step);
  std::vector<float> resumed_p = p;
  std::vector<float> resumed_state = state;
  int64_t resumed_step = 2;
  adam->Apply(p, testing::OptimizerTestData(20, 42), state, &step);
  adam->Apply(resumed_p, testing::OptimizerTestData(20, 42), resumed_state,
              &resumed_step);
  EXPECT_EQ(p, resumed_p);
  EXPECT_EQ(resumed_step, 3);
}

TEST(OptimizerTest, EmptyBlockOnlyCountsTheStep) {
  std::unique_ptr<Optimizer> adam = MustCreate(Adam(0.1f));
  ASSERT_NE(adam, nullptr);
  int64_t step = 5;
  adam->Apply({}, {}, {}, &step);
  EXPECT_EQ(step, 6);
}

struct InvalidCase {
  std::string name;
  v1::OptimizerSpec spec;
  std::string field;  // Expected in the message.
};

TEST(OptimizerTest, InvalidSpecsNameTheField) {
  const float nan = std::nanf("");
  const std::vector<InvalidCase> cases = {
      {"unset", v1::OptimizerSpec(), "optimizer: set one of"},
      {"sgd lr 0", Sgd(0), "optimizer.sgd.learning_rate"},
      {"sgd lr < 0", Sgd(-0.1f), "optimizer.sgd.learning_rate"},
      {"sgd lr nan", Sgd(nan), "optimizer.sgd.learning_rate"},
      {"sgd lr inf", Sgd(INFINITY), "optimizer.sgd.learning_rate"},
      {"sgd momentum 1", Sgd(0.1f, 1.0f), "optimizer.sgd.momentum"},
      {"sgd momentum < 0", Sgd(0.1f, -0.5f), "optimizer.sgd.momentum"},
      {"sgd weight decay < 0", Sgd(0.1f, 0, -1e-4f),
       "optimizer.sgd.weight_decay"},
      {"adam lr 0", Adam(0), "optimizer.adam.learning_rate"},
      {"adam beta1 1", Adam(0.1f, 1.0f), "optimizer.adam.beta1"},
      {"adam beta1 < 0", Adam(0.1f, -0.9f), "optimizer.adam.beta1"},
      {"adam beta2 > 1", Adam(0.1f, 0, 1.5f), "optimizer.adam.beta2"},
      {"adam epsilon < 0", Adam(0.1f, 0, 0, -1e-8f), "optimizer.adam.epsilon"},
      {"adam weight decay nan", Adam(0.1f, 0, 0, 0, nan),
       "optimizer.adam.weight_decay"},
  };
  for (const InvalidCase& c : cases) {
    absl::StatusOr<std::unique_ptr<Optimizer>> optimizer =
        testing::CreateWithDefaults(c.spec);
    ASSERT_FALSE(optimizer.ok()) << c.name;
    EXPECT_EQ(optimizer.status().code(), absl::StatusCode::kInvalidArgument)
        << c.name;
    EXPECT_THAT(optimizer.status().message(), HasSubstr(c.field)) << c.name;
  }
}

TEST(OptimizerTest, ApplyIsSafeFromManyThreadsOnDifferentBlocks) {
  std::unique_ptr<Optimizer> adam = MustCreate(Adam(0.01f));
  ASSERT_NE(adam, nullptr);
  constexpr int kBlocks = 4;
  std::vector<std::vector<float>> params(kBlocks,
                                         testing::OptimizerTestData(64, 5));
  std::vector<std::vector<float>> states(kBlocks,
                                         std::vector<float>(128, 0.0f));
  std::vector<int64_t> steps(kBlocks, 0);
  const std::vector<float> g = testing::OptimizerTestData(64, 6);
  std::vector<std::thread> threads;
  for (int b = 0; b < kBlocks; ++b) {
    threads.emplace_back([&, b] {
      for (int i = 0; i < 10; ++i)
        adam->Apply(params[b], g, states[b], &steps[b]);
    });
  }
  for (std::thread& thread : threads) thread.join();
  for (int b = 1; b < kBlocks; ++b) {
    EXPECT_EQ(params[b], params[0]);
    EXPECT_EQ(steps[b], 10);
  }
}

// A server applies a block range by range, straight from the buffers the
// gradient arrived in: the result must be bit-identical to one Apply.
TEST(OptimizerTest, ApplyRangeByRangeEqualsOneApply) {
  const size_t n = 1000;  // Ranges below are not multiples of the kernels' 16.
  const std::vector<size_t> cuts = {0, 7, 23, 512, 513, 999, 1000};
  for (const v1::OptimizerSpec& spec :
       {Sgd(0.1f), Sgd(0.1f, 0.9f, 0.01f), Adam(0.01f, 0.8f, 0.99f, 1e-6f),
        Adam(0.01f, 0, 0, 0, 0.05f)}) {
    SCOPED_TRACE(spec.ShortDebugString());
    std::unique_ptr<Optimizer> opt = MustCreate(spec);
    ASSERT_NE(opt, nullptr);
    std::vector<float> whole = testing::OptimizerTestData(n, 1), ranged = whole;
    std::vector<float> whole_state(n * opt->state_slots(), 0.0f);
    std::vector<float> ranged_state = whole_state;
    int64_t whole_step = 0, ranged_step = 0;
    for (int update = 0; update < 3; ++update) {
      const std::vector<float> grad =
          testing::OptimizerTestData(n, 10 + update);
      opt->Apply(whole, grad, whole_state, &whole_step);
      for (size_t c = 0; c + 1 < cuts.size(); ++c) {
        opt->ApplyRange(ranged,
                        std::span<const float>(grad).subspan(
                            cuts[c], cuts[c + 1] - cuts[c]),
                        cuts[c], ranged_state, ranged_step);
      }
      ++ranged_step;
    }
    EXPECT_EQ(whole_step, ranged_step);
    EXPECT_EQ(whole, ranged);
    EXPECT_EQ(whole_state, ranged_state);
  }
}

}  // namespace
}  // namespace ps
