// The values of a parsed PushRequest's gradients (common/parameter_wire.h):
// bytes per value of each encoding, 16-bit runs decoded and float runs
// covering every value whatever the split, and the finiteness checks that
// find every NaN and Inf in place.
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <limits>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "common/parameter_wire.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/unit/common/parameter_wire_fixture.h"

namespace ps::parameter_wire_test {
namespace {

TEST(PushWireTest, WireValueBytesPerEncoding) {
  EXPECT_EQ(WireValueBytes(v1::FP32), 4u);
  EXPECT_EQ(WireValueBytes(v1::FP16), 2u);
  EXPECT_EQ(WireValueBytes(v1::BF16), 2u);
  EXPECT_EQ(WireValueBytes(static_cast<v1::Precision>(3)), 0u);
  EXPECT_EQ(WireValueBytes(static_cast<v1::Precision>(-1)), 0u);
}

// 16-bit gradients cut anywhere, mid-value included, decode to the values
// the codec gives, in runs that cover every value once.
TEST(PushWireTest, GradientRunsDecodeSixteenBitValuesWhateverTheSplit) {
  std::vector<float> values(2 * kFloatRun + 7);  // Odd: a short last run.
  for (size_t i = 0; i < values.size(); ++i) {
    values[i] = (i % 3 ? -1.0f : 1.0f) * (0.001f + 0.37f * i);
  }
  values[9] = 1e-7f;  // An fp16 subnormal.
  values[10] = 1e6f;  // Beyond fp16: saturated.
  for (v1::Precision encoding : {v1::FP16, v1::BF16}) {
    std::vector<uint16_t> bits(values.size());
    if (encoding == v1::FP16) {
      EncodeFp16(values, bits.data());
    } else {
      EncodeBf16(values, bits.data());
    }
    const std::string bytes(reinterpret_cast<const char*>(bits.data()),
                            bits.size() * 2);
    for (const std::vector<size_t>& cuts :
         std::vector<std::vector<size_t>>{{},
                                          {1, 3, 2 * kFloatRun + 1},
                                          {2 * kFloatRun, 4 * kFloatRun + 5}}) {
      WireBytes wire;
      for (std::string_view piece : Split(bytes, cuts)) wire.Append(piece);
      std::vector<float> seen(values.size(), -1.0f);
      size_t expected_first = 0;
      ForEachGradientRun(
          wire, encoding, [&](size_t first, std::span<const float> run) {
            EXPECT_EQ(first, expected_first);
            EXPECT_LE(run.size(), kFloatRun);
            std::copy(run.begin(), run.end(), seen.begin() + first);
            expected_first = first + run.size();
          });
      EXPECT_EQ(expected_first, values.size());
      for (size_t i = 0; i < values.size(); ++i) {
        ASSERT_EQ(seen[i], encoding == v1::FP16 ? Fp16ToFloat(bits[i])
                                                : Bf16ToFloat(bits[i]))
            << i;
      }
      EXPECT_EQ(seen[10], encoding == v1::FP16 ? 65504.0f : 999424.0f);
      EXPECT_GT(seen[9], 0.0f);
    }
  }
  // FP32 through the same function: the floats themselves.
  const std::string bytes = FloatBytes(values);
  std::vector<float> seen(values.size());
  ForEachGradientRun(WireBytes(bytes), v1::FP32,
                     [&](size_t first, std::span<const float> run) {
                       std::copy(run.begin(), run.end(), seen.begin() + first);
                     });
  EXPECT_EQ(seen, values);
}

TEST(PushWireTest, AllFiniteChecksSixteenBitGradientsInPlace) {
  for (v1::Precision encoding : {v1::FP16, v1::BF16}) {
    const uint16_t inf = encoding == v1::FP16 ? 0x7c00 : 0x7f80;
    const uint16_t one = encoding == v1::FP16 ? 0x3c00 : 0x3f80;
    std::vector<uint16_t> bits(3 * kFloatRun, one);
    bits[2 * kFloatRun + 7] = inf;
    std::string bytes(reinterpret_cast<const char*>(bits.data()),
                      bits.size() * 2);
    WireBytes wire;
    for (std::string_view piece : Split(bytes, {3, 4097, 2 * kFloatRun + 15})) {
      wire.Append(piece);
    }
    EXPECT_FALSE(AllFinite(wire, encoding));
    // Read as float32 the fp16 bits are finite: the encoding decides.
    if (encoding == v1::FP16) {
      EXPECT_TRUE(AllFinite(wire, v1::FP32));
    }
    bits[2 * kFloatRun + 7] = one;
    bytes.assign(reinterpret_cast<const char*>(bits.data()), bits.size() * 2);
    EXPECT_TRUE(AllFinite(WireBytes(bytes), encoding));
  }
}

TEST(PushWireTest, FloatRunsCoverEveryValueWhateverTheSplit) {
  std::vector<float> values(3 * kFloatRun + 5);
  for (size_t i = 0; i < values.size(); ++i) values[i] = i * 0.5f;
  const std::string bytes = FloatBytes(values);
  for (const std::vector<size_t>& cuts :
       std::vector<std::vector<size_t>>{{},
                                        {1, 2, 3, 7, 4 * kFloatRun + 1},
                                        {4 * kFloatRun, 8 * kFloatRun + 3}}) {
    WireBytes wire;
    for (std::string_view piece : Split(bytes, cuts)) wire.Append(piece);
    std::vector<float> seen(values.size(), -1.0f);
    size_t expected_first = 0;
    ForEachFloatRun(wire, [&](size_t first, std::span<const float> run) {
      EXPECT_EQ(first, expected_first);
      EXPECT_LE(run.size(), kFloatRun);
      std::copy(run.begin(), run.end(), seen.begin() + first);
      expected_first = first + run.size();
    });
    EXPECT_EQ(seen, values);
  }
}

TEST(PushWireTest, AllFiniteFindsEveryNaNAndInfAndNothingElse) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const float inf = std::numeric_limits<float>::infinity();
  // Finite extremes: largest, smallest normal, denormals, zeros.
  const std::vector<float> finite = {std::numeric_limits<float>::max(),
                                     -std::numeric_limits<float>::max(),
                                     std::numeric_limits<float>::min(),
                                     std::numeric_limits<float>::denorm_min(),
                                     -std::numeric_limits<float>::denorm_min(),
                                     0.0f,
                                     -0.0f,
                                     1.0f};
  uint32_t payload_nan_bits = 0x7f800001u;  // A signalling NaN.
  float payload_nan;
  std::memcpy(&payload_nan, &payload_nan_bits, sizeof(float));
  for (size_t n : {0, 1, 15, 16, 17, 33, 100}) {
    std::vector<float> values(n);
    for (size_t i = 0; i < n; ++i) values[i] = finite[i % finite.size()];
    EXPECT_TRUE(AllFinite(values)) << n;
    for (size_t at = 0; at < n; ++at) {
      for (float bad : {nan, -nan, inf, -inf, payload_nan}) {
        std::vector<float> with = values;
        with[at] = bad;
        EXPECT_FALSE(AllFinite(with)) << n << " " << at << " " << bad;
      }
    }
  }
  // In place, over pieces cut mid-float.
  std::vector<float> values(3 * kFloatRun, 0.25f);
  values[2 * kFloatRun + 7] = -inf;
  const std::string bytes = FloatBytes(values);
  WireBytes wire;
  for (std::string_view piece : Split(bytes, {3, 4097, 5 * kFloatRun + 1})) {
    wire.Append(piece);
  }
  EXPECT_FALSE(AllFinite(wire));
  values[2 * kFloatRun + 7] = 1;
  const std::string good = FloatBytes(values);
  EXPECT_TRUE(AllFinite(WireBytes(good)));
}

}  // namespace
}  // namespace ps::parameter_wire_test
