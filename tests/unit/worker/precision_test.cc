// Rounding to fp16 / bf16 (worker/reduced_precision.h) and dynamic loss
// scaling (worker/loss_scaler.h).
#include <cmath>
#include <limits>

#include "gtest/gtest.h"
#include "worker/model/loss_scaler.h"
#include "worker/model/reduced_precision.h"

namespace ps {
namespace {

TEST(RoundToFp16Test, NormalValuesKeepElevenSignificantBits) {
  EXPECT_EQ(RoundToFp16(1.0f), 1.0f);
  EXPECT_EQ(RoundToFp16(-2.5f), -2.5f);
  EXPECT_EQ(RoundToFp16(1.0f + 1.0f / 1024), 1.0f + 1.0f / 1024);  // Exact.
  // Halfway between 1 and 1 + 2^-10: ties to even (1).
  EXPECT_EQ(RoundToFp16(1.0f + 1.0f / 2048), 1.0f);
  // Halfway between 1 + 2^-10 (odd) and 1 + 2^-9 (even): up.
  EXPECT_EQ(RoundToFp16(1.0f + 3.0f / 2048), 1.0f + 1.0f / 512);
  EXPECT_EQ(RoundToFp16(0.1f), 0.0999755859375f);
}

TEST(RoundToFp16Test, RangeEnds) {
  EXPECT_EQ(RoundToFp16(65504.0f), 65504.0f);  // Largest finite.
  EXPECT_EQ(RoundToFp16(65519.0f), 65504.0f);
  EXPECT_EQ(RoundToFp16(65520.0f), std::numeric_limits<float>::infinity());
  EXPECT_EQ(RoundToFp16(-1e6f), -std::numeric_limits<float>::infinity());
  EXPECT_EQ(RoundToFp16(6.103515625e-05f), 6.103515625e-05f);  // 2^-14.
  // Subnormals are multiples of 2^-24; half of one ties to 0 (even).
  const float quantum = std::ldexp(1.0f, -24);
  EXPECT_EQ(RoundToFp16(quantum), quantum);
  EXPECT_EQ(RoundToFp16(quantum / 2), 0.0f);
  EXPECT_EQ(RoundToFp16(quantum * 1.5f), 2 * quantum);
  EXPECT_EQ(RoundToFp16(1e-10f), 0.0f);
  EXPECT_TRUE(std::isnan(RoundToFp16(std::nanf(""))));
}

TEST(RoundToBf16Test, KeepsEightSignificantBitsAndFloatRange) {
  EXPECT_EQ(RoundToBf16(1.0f), 1.0f);
  EXPECT_EQ(RoundToBf16(1.0f + 1.0f / 128), 1.0f + 1.0f / 128);  // Exact.
  EXPECT_EQ(RoundToBf16(1.0f + 1.0f / 256), 1.0f);               // Tie to even.
  EXPECT_EQ(RoundToBf16(1.0f + 3.0f / 256), 1.0f + 1.0f / 64);
  EXPECT_EQ(RoundToBf16(70000.0f), 70144.0f);
  // Far beyond fp16's range: finite, within half a bf16 ulp (2^-8 relative).
  EXPECT_NEAR(RoundToBf16(1e30f), 1e30f, 1e30f / 256);
  EXPECT_EQ(RoundToBf16(std::numeric_limits<float>::max()),
            std::numeric_limits<float>::infinity());
  EXPECT_TRUE(std::isnan(RoundToBf16(std::nanf(""))));
}

TEST(RoundToPrecisionTest, Fp32IsIdentity) {
  EXPECT_EQ(RoundToPrecision(0.1f, Precision::kFp32), 0.1f);
  EXPECT_EQ(RoundToPrecision(0.1f, Precision::kFp16), RoundToFp16(0.1f));
  EXPECT_EQ(RoundToPrecision(0.1f, Precision::kBf16), RoundToBf16(0.1f));
}

TEST(LossScalerTest, OverflowHalvesAndAsksForARecompute) {
  LossScaler scaler(1024.0f, 3);
  EXPECT_EQ(scaler.scale(), 1024.0f);
  EXPECT_TRUE(scaler.Update(false));
  EXPECT_EQ(scaler.scale(), 512.0f);
  EXPECT_EQ(scaler.overflows(), 1);
}

TEST(LossScalerTest, FiniteStepsInARowDoubleIt) {
  LossScaler scaler(8.0f, 3);
  EXPECT_FALSE(scaler.Update(true));
  EXPECT_FALSE(scaler.Update(true));
  EXPECT_EQ(scaler.scale(), 8.0f);
  EXPECT_FALSE(scaler.Update(true));
  EXPECT_EQ(scaler.scale(), 16.0f);
  // An overflow restarts the count.
  scaler.Update(true);
  scaler.Update(true);
  scaler.Update(false);
  EXPECT_EQ(scaler.scale(), 8.0f);
  scaler.Update(true);
  scaler.Update(true);
  EXPECT_EQ(scaler.scale(), 8.0f);
}

TEST(LossScalerTest, BoundedBetweenOneAndTwoToThe24) {
  LossScaler low(1.0f, 1);
  EXPECT_FALSE(low.Update(false));  // Nothing left to try: keep the step.
  EXPECT_EQ(low.scale(), 1.0f);
  LossScaler high(LossScaler::kMaxScale, 1);
  high.Update(true);
  EXPECT_EQ(high.scale(), LossScaler::kMaxScale);
  EXPECT_EQ(LossScaler(0.25f, 1).scale(), 1.0f);
}

}  // namespace
}  // namespace ps
