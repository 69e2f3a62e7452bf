// Gradient clipping on the worker against hand-computed values.
#include "worker/gradient_clipping.h"

#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace ps {
namespace {

using ::testing::ElementsAre;
using ::testing::FloatEq;

v1::GradientClippingSpec Clip(float max_value, float max_global_norm) {
  v1::GradientClippingSpec spec;
  spec.set_max_value(max_value);
  spec.set_max_global_norm(max_global_norm);
  return spec;
}

TEST(GradientClippingTest, OffChangesNothing) {
  std::vector<std::vector<float>> g = {{30.0f, -40.0f}, {1e6f}};
  const auto before = g;
  const ClipResult result = ClipGradients(Clip(0, 0), &g);
  EXPECT_EQ(g, before);
  EXPECT_EQ(result.values_clipped, 0);
  EXPECT_FALSE(result.scaled);
}

TEST(GradientClippingTest, GlobalNormSpansEveryTensor) {
  // [3, 0] and [4]: the norm over the model is 5, though no tensor's is.
  std::vector<std::vector<float>> g = {{3.0f, 0.0f}, {4.0f}};
  const ClipResult result = ClipGradients(Clip(0, 1.0f), &g);
  EXPECT_DOUBLE_EQ(result.norm, 5.0);
  EXPECT_TRUE(result.scaled);
  EXPECT_THAT(g[0], ElementsAre(FloatEq(0.6f), FloatEq(0.0f)));
  EXPECT_THAT(g[1], ElementsAre(FloatEq(0.8f)));
}

TEST(GradientClippingTest, NormBelowTheBoundIsKept) {
  std::vector<std::vector<float>> g = {{3.0f, 0.0f}, {-4.0f}};
  const ClipResult result = ClipGradients(Clip(0, 5.0f), &g);
  EXPECT_DOUBLE_EQ(result.norm, 5.0);
  EXPECT_FALSE(result.scaled);
  EXPECT_THAT(g[1], ElementsAre(-4.0f));
}

TEST(GradientClippingTest, ValuesAreClampedBeforeTheNormIsTaken) {
  // Clamp to 2: [2, -1] and [-2]; norm 3; scaled by 1.5 / 3.
  std::vector<std::vector<float>> g = {{5.0f, -1.0f}, {-7.0f}};
  const ClipResult result = ClipGradients(Clip(2.0f, 1.5f), &g);
  EXPECT_EQ(result.values_clipped, 2);
  EXPECT_DOUBLE_EQ(result.norm, 3.0);
  EXPECT_THAT(g[0], ElementsAre(FloatEq(1.0f), FloatEq(-0.5f)));
  EXPECT_THAT(g[1], ElementsAre(FloatEq(-1.0f)));
  // Value clipping alone.
  std::vector<std::vector<float>> h = {{0.5f, -3.0f, 3.0f}};
  ClipGradients(Clip(1.0f, 0), &h);
  EXPECT_THAT(h[0], ElementsAre(0.5f, -1.0f, 1.0f));
}

}  // namespace
}  // namespace ps
