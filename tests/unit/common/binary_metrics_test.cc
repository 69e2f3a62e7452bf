// BinaryAuc against the brute-force pairwise definition on random scores
// with many ties, and known values of both metrics.
#include "common/binary_metrics.h"

#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include "gtest/gtest.h"

namespace ps {
namespace {

// The definition: over every (positive, negative) pair, 1 when the positive
// scores higher, 1/2 on a tie.
double PairwiseAuc(const std::vector<float>& scores,
                   const std::vector<int32_t>& labels) {
  double wins = 0, pairs = 0;
  for (size_t i = 0; i < scores.size(); ++i) {
    if (labels[i] == 0) continue;
    for (size_t j = 0; j < scores.size(); ++j) {
      if (labels[j] != 0) continue;
      pairs += 1;
      if (scores[i] > scores[j]) wins += 1;
      if (scores[i] == scores[j]) wins += 0.5;
    }
  }
  return wins / pairs;
}

TEST(BinaryAucTest, EqualsThePairwiseDefinitionOnRandomDataWithTies) {
  std::mt19937 rng(27);
  for (int trial = 0; trial < 50; ++trial) {
    const int n = 1 + static_cast<int>(rng() % 400);
    // Few distinct scores for some trials: many ties.
    const int levels = trial % 3 == 0 ? 3 : trial % 3 == 1 ? 20 : 1 << 20;
    std::vector<float> scores(n);
    std::vector<int32_t> labels(n);
    for (int i = 0; i < n; ++i) {
      labels[i] = rng() % 3 == 0 ? 1 : 0;
      scores[i] = static_cast<float>(rng() % levels) / levels +
                  (labels[i] ? 0.1f : 0.0f) * (trial % 2);
    }
    labels[0] = 1;
    if (n > 1) labels[1] = 0;
    if (n < 2) continue;
    EXPECT_NEAR(BinaryAuc(scores, labels), PairwiseAuc(scores, labels), 1e-12)
        << "trial " << trial << " n " << n;
  }
}

TEST(BinaryAucTest, KnownValues) {
  // Perfect, reversed, all tied.
  EXPECT_DOUBLE_EQ(BinaryAuc(std::vector<float>{0.1f, 0.2f, 0.8f, 0.9f},
                             std::vector<int32_t>{0, 0, 1, 1}),
                   1.0);
  EXPECT_DOUBLE_EQ(BinaryAuc(std::vector<float>{0.9f, 0.8f, 0.2f, 0.1f},
                             std::vector<int32_t>{0, 0, 1, 1}),
                   0.0);
  EXPECT_DOUBLE_EQ(BinaryAuc(std::vector<float>{0.5f, 0.5f, 0.5f},
                             std::vector<int32_t>{1, 0, 0}),
                   0.5);
  // sklearn's roc_auc_score example: y = [0, 0, 1, 1],
  // scores = [0.1, 0.4, 0.35, 0.8] gives 0.75.
  EXPECT_DOUBLE_EQ(BinaryAuc(std::vector<float>{0.1f, 0.4f, 0.35f, 0.8f},
                             std::vector<int32_t>{0, 0, 1, 1}),
                   0.75);
  // One tie between a positive and a negative: (3 + 0.5) / 4.
  EXPECT_DOUBLE_EQ(BinaryAuc(std::vector<float>{0.1f, 0.5f, 0.5f, 0.9f},
                             std::vector<int32_t>{0, 0, 1, 1}),
                   0.875);
}

TEST(BinaryAucTest, UndefinedWithOneClassOrNaN) {
  EXPECT_TRUE(std::isnan(
      BinaryAuc(std::vector<float>{0.1f, 0.2f}, std::vector<int32_t>{1, 1})));
  EXPECT_TRUE(std::isnan(
      BinaryAuc(std::vector<float>{0.1f, 0.2f}, std::vector<int32_t>{0, 0})));
  EXPECT_TRUE(std::isnan(BinaryAuc({}, {})));
  EXPECT_TRUE(std::isnan(
      BinaryAuc(std::vector<float>{0.1f, NAN}, std::vector<int32_t>{0, 1})));
}

TEST(BinaryLogLossTest, KnownValuesAndClipping) {
  EXPECT_NEAR(
      BinaryLogLoss(std::vector<float>{0.5f, 0.5f}, std::vector<int32_t>{1, 0}),
      std::log(2.0), 1e-12);
  // -(log 0.8 + log(1 - 0.25)) / 2.
  EXPECT_NEAR(BinaryLogLoss(std::vector<float>{0.8f, 0.25f},
                            std::vector<int32_t>{1, 0}),
              -(std::log(static_cast<double>(0.8f)) + std::log(0.75)) / 2,
              1e-12);
  // Certain mistakes cost -log(1e-7), not infinity; certain hits cost
  // -log(1 - 1e-7).
  EXPECT_NEAR(
      BinaryLogLoss(std::vector<float>{0.0f, 1.0f}, std::vector<int32_t>{1, 0}),
      -std::log(1e-7), 1e-9);
  EXPECT_NEAR(
      BinaryLogLoss(std::vector<float>{1.0f, 0.0f}, std::vector<int32_t>{1, 0}),
      -std::log1p(-1e-7), 1e-15);
  EXPECT_TRUE(std::isnan(BinaryLogLoss({}, {})));
  EXPECT_TRUE(std::isnan(
      BinaryLogLoss(std::vector<float>{NAN}, std::vector<int32_t>{1})));
}

}  // namespace
}  // namespace ps
