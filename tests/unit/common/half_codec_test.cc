// float32 <-> fp16 and bfloat16 (common/half_codec.h): exact decoding of
// every bit pattern, round to nearest even against a reference computed in
// double, saturation, NaN and Inf, subnormals, and the span functions with
// lengths that leave vector tails.
#include "common/half_codec.h"

#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <vector>

#include "gtest/gtest.h"

namespace ps {
namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();
constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();

float FromBits(uint32_t bits) { return std::bit_cast<float>(bits); }

// The value of fp16 bits, from the format's definition.
double Fp16Value(uint16_t h) {
  const int exponent = (h >> 10) & 0x1f;
  const int significand = h & 0x3ff;
  double v;
  if (exponent == 0) {
    v = std::ldexp(significand, -24);
  } else if (exponent == 31) {
    v = significand == 0 ? INFINITY : NAN;
  } else {
    v = std::ldexp(1024 + significand, exponent - 25);
  }
  return (h & 0x8000) ? -v : v;
}

// x rounded to nearest, ties to even, to `bits` significant bits with
// `min_exponent` the exponent of the smallest normal (below it, multiples of
// the smallest subnormal), then saturated at `max`. For finite x.
double RoundReference(float x, int bits, int min_exponent, double max) {
  int exponent;
  std::frexp(static_cast<double>(x), &exponent);  // |x| in [2^(e-1), 2^e).
  const int quantum_exponent = std::max(exponent - 1, min_exponent) - bits + 1;
  // x / quantum is exact in double; nearbyint rounds ties to even.
  const double r = std::ldexp(
      std::nearbyint(std::ldexp(static_cast<double>(x), -quantum_exponent)),
      quantum_exponent);
  return std::clamp(r, -max, max);
}

double Fp16Reference(float x) { return RoundReference(x, 11, -14, 65504.0); }
double Bf16Reference(float x) {
  return RoundReference(x, 8, -126, Bf16ToFloat(kBf16MaxFinite));
}

TEST(HalfCodecTest, Fp16DecodesEveryPatternExactlyAndReencodesIt) {
  for (uint32_t h = 0; h <= 0xffff; ++h) {
    const float f = Fp16ToFloat(static_cast<uint16_t>(h));
    const double want = Fp16Value(static_cast<uint16_t>(h));
    if (std::isnan(want)) {
      ASSERT_TRUE(std::isnan(f)) << std::hex << h;
      EXPECT_EQ(std::signbit(f), (h & 0x8000) != 0) << std::hex << h;
      continue;
    }
    ASSERT_EQ(static_cast<double>(f), want) << std::hex << h;
    EXPECT_EQ(std::signbit(f), (h & 0x8000) != 0) << std::hex << h;
    EXPECT_EQ(FloatToFp16(f), h) << std::hex << h;
  }
}

TEST(HalfCodecTest, Bf16DecodesEveryPatternExactlyAndReencodesIt) {
  for (uint32_t b = 0; b <= 0xffff; ++b) {
    const float f = Bf16ToFloat(static_cast<uint16_t>(b));
    EXPECT_EQ(std::bit_cast<uint32_t>(f), b << 16);
    if (!std::isnan(f)) {
      EXPECT_EQ(FloatToBf16(f), b) << std::hex << b;
    }
  }
}

// Encoding, over a million float32 bit patterns spread over all of them
// (every sign, exponent and significand region), agrees with the reference.
TEST(HalfCodecTest, EncodingRoundsToNearestEvenAndSaturates) {
  constexpr uint32_t kStep = 4099;  // Prime: hits every low-bit pattern.
  int checked = 0;
  for (uint64_t bits = 0; bits <= 0xffffffffu; bits += kStep) {
    const float x = FromBits(static_cast<uint32_t>(bits));
    if (!std::isfinite(x)) continue;
    ASSERT_EQ(static_cast<double>(Fp16ToFloat(FloatToFp16(x))),
              Fp16Reference(x))
        << std::hexfloat << x;
    ASSERT_EQ(static_cast<double>(Bf16ToFloat(FloatToBf16(x))),
              Bf16Reference(x))
        << std::hexfloat << x;
    ++checked;
  }
  EXPECT_GT(checked, 1000000);
}

TEST(HalfCodecTest, Fp16EdgeCases) {
  struct Case {
    float x;
    uint16_t bits;
  };
  const Case cases[] = {
      {0.0f, 0x0000},
      {-0.0f, 0x8000},
      {1.0f, 0x3c00},
      {1.0f + 0x1p-11f, 0x3c00},             // Tie: to even (down).
      {1.0f + 3 * 0x1p-11f, 0x3c02},         // Tie: to even (up).
      {1.0f + 0x1p-11f + 0x1p-20f, 0x3c01},  // Just above the tie.
      {65504.0f, 0x7bff},
      {65519.0f, 0x7bff},
      {65520.0f, 0x7bff},  // Rounds to 65536 (Inf): saturated.
      {1e9f, 0x7bff},
      {-1e9f, 0xfbff},
      {std::numeric_limits<float>::max(), 0x7bff},
      {kInf, 0x7c00},
      {-kInf, 0xfc00},
      {0x1p-14f, 0x0400},             // Smallest normal.
      {0x1p-14f - 0x1p-26f, 0x0400},  // Rounds up into the normals.
      {0x1p-24f, 0x0001},             // Smallest subnormal.
      {0x1p-25f, 0x0000},             // Tie: to even (zero).
      {0x1p-25f + 0x1p-40f, 0x0001},  // Just above the tie.
      {3 * 0x1p-25f, 0x0002},         // Tie: to even (up).
      {-5 * 0x1p-24f, 0x8005},
      {std::numeric_limits<float>::denorm_min(), 0x0000},
      {-std::numeric_limits<float>::denorm_min(), 0x8000},
  };
  for (const Case& c : cases) {
    EXPECT_EQ(FloatToFp16(c.x), c.bits) << std::hexfloat << c.x;
  }
  EXPECT_EQ(FloatToFp16(kNaN) & 0x7e00, 0x7e00);  // A quiet NaN.
  EXPECT_TRUE(std::isnan(Fp16ToFloat(FloatToFp16(kNaN))));
  EXPECT_TRUE(std::isnan(Fp16ToFloat(FloatToFp16(-kNaN))));
  EXPECT_TRUE(std::signbit(Fp16ToFloat(FloatToFp16(-kNaN))));
  // A signalling NaN whose payload is in the bits fp16 drops stays a NaN.
  EXPECT_TRUE(std::isnan(Fp16ToFloat(FloatToFp16(FromBits(0x7f800001u)))));
}

TEST(HalfCodecTest, Bf16EdgeCases) {
  EXPECT_EQ(FloatToBf16(1.0f), 0x3f80);
  EXPECT_EQ(FloatToBf16(1.0f + 0x1p-8f), 0x3f80);      // Tie: to even.
  EXPECT_EQ(FloatToBf16(1.0f + 3 * 0x1p-8f), 0x3f82);  // Tie: to even.
  EXPECT_EQ(FloatToBf16(-0.0f), 0x8000);
  EXPECT_EQ(FloatToBf16(1e9f), 0x4e6e);
  // Beyond the largest bfloat16 (rounding would give Inf): saturated.
  EXPECT_EQ(FloatToBf16(std::numeric_limits<float>::max()), kBf16MaxFinite);
  EXPECT_EQ(FloatToBf16(-std::numeric_limits<float>::max()), 0xff7f);
  EXPECT_EQ(FloatToBf16(kInf), 0x7f80);
  EXPECT_EQ(FloatToBf16(-kInf), 0xff80);
  // float32 subnormals keep their top bits (bfloat16 has them too).
  EXPECT_EQ(FloatToBf16(FromBits(0x00010000u)), 0x0001);
  EXPECT_EQ(FloatToBf16(FromBits(0x00008000u)), 0x0000);  // Tie: to even.
  EXPECT_EQ(FloatToBf16(FromBits(0x00018000u)), 0x0002);  // Tie: to even.
  // NaN stays NaN even when rounding its payload would carry into Inf.
  EXPECT_TRUE(std::isnan(Bf16ToFloat(FloatToBf16(FromBits(0x7f800001u)))));
  EXPECT_TRUE(std::isnan(Bf16ToFloat(FloatToBf16(FromBits(0xffffffffu)))));
  EXPECT_TRUE(std::isnan(Bf16ToFloat(FloatToBf16(kNaN))));
}

// The span functions equal the scalar ones at lengths around the vector
// width and at unaligned starts.
TEST(HalfCodecTest, SpanFunctionsMatchTheScalarOnesAtAnyLength) {
  std::mt19937 rng(3);
  std::vector<float> values(1100);
  for (float& v : values) v = FromBits(static_cast<uint32_t>(rng()));
  values[5] = kNaN;
  values[6] = -kInf;
  values[7] = 1e30f;
  for (size_t n : {0, 1, 7, 15, 16, 17, 31, 33, 100, 1001}) {
    for (size_t start : {0, 1, 3}) {
      const std::span<const float> in(values.data() + start, n);
      std::vector<uint16_t> fp16(n + 1, 0xabcd), bf16(n + 1, 0xabcd);
      EncodeFp16(in, fp16.data());
      EncodeBf16(in, bf16.data());
      EXPECT_EQ(fp16[n], 0xabcd) << "wrote past the end";
      EXPECT_EQ(bf16[n], 0xabcd) << "wrote past the end";
      std::vector<float> from_fp16(n + 1, -7.0f), from_bf16(n + 1, -7.0f);
      DecodeFp16({fp16.data(), n}, from_fp16.data());
      DecodeBf16({bf16.data(), n}, from_bf16.data());
      EXPECT_EQ(from_fp16[n], -7.0f) << "wrote past the end";
      for (size_t i = 0; i < n; ++i) {
        ASSERT_EQ(fp16[i], FloatToFp16(in[i])) << n << " " << i;
        ASSERT_EQ(bf16[i], FloatToBf16(in[i])) << n << " " << i;
        ASSERT_EQ(std::bit_cast<uint32_t>(from_fp16[i]),
                  std::bit_cast<uint32_t>(Fp16ToFloat(fp16[i])));
        ASSERT_EQ(std::bit_cast<uint32_t>(from_bf16[i]),
                  std::bit_cast<uint32_t>(Bf16ToFloat(bf16[i])));
      }
    }
  }
}

// The run-time choice (F16C where the CPU has it) gives the portable code's
// bits exactly: every fp16 pattern decoded, and float32 patterns of every
// kind (NaN payloads included) encoded.
TEST(HalfCodecTest, HardwareAndPortableConversionsAgreeBitForBit) {
  std::vector<uint16_t> all(65536);
  for (uint32_t h = 0; h <= 0xffff; ++h) all[h] = static_cast<uint16_t>(h);
  std::vector<float> a(all.size()), b(all.size());
  DecodeFp16(all, a.data());
  half_codec_internal::DecodeFp16Portable(all, b.data());
  for (size_t i = 0; i < all.size(); ++i) {
    ASSERT_EQ(std::bit_cast<uint32_t>(a[i]), std::bit_cast<uint32_t>(b[i]))
        << std::hex << i;
  }
  std::mt19937 rng(11);
  std::vector<float> values(1 << 20);
  for (float& v : values) v = FromBits(static_cast<uint32_t>(rng()));
  for (uint32_t i = 0; i < 65536; ++i) {
    values[i] = FromBits(0x7f800000u | (i << 7) | (i & 1));  // NaN payloads.
    values[65536 + i] = FromBits(0x47000000u + (i << 7));    // 32768 and up.
  }
  std::vector<uint16_t> x(values.size()), y(values.size());
  EncodeFp16(values, x.data());
  half_codec_internal::EncodeFp16Portable(values, y.data());
  for (size_t i = 0; i < values.size(); ++i) {
    ASSERT_EQ(x[i], y[i]) << std::hexfloat << values[i];
  }
}

TEST(HalfCodecTest, AllFiniteFindsEveryNaNAndInfAndNothingElse) {
  // Finite extremes of each format: largest, smallest normal, subnormals.
  const std::vector<uint16_t> finite_fp16 = {0x7bff, 0xfbff, 0x0400, 0x0001,
                                             0x8001, 0x0000, 0x8000, 0x3c00};
  const std::vector<uint16_t> finite_bf16 = {0x7f7f, 0xff7f, 0x0080, 0x0001,
                                             0x8001, 0x0000, 0x8000, 0x3f80};
  const std::vector<uint16_t> bad_fp16 = {0x7c00, 0xfc00, 0x7e00, 0x7c01,
                                          0xffff};
  const std::vector<uint16_t> bad_bf16 = {0x7f80, 0xff80, 0x7fc0, 0x7f81,
                                          0xffff};
  for (size_t n : {0, 1, 15, 16, 17, 33, 100}) {
    std::vector<uint16_t> fp16(n), bf16(n);
    for (size_t i = 0; i < n; ++i) {
      fp16[i] = finite_fp16[i % finite_fp16.size()];
      bf16[i] = finite_bf16[i % finite_bf16.size()];
    }
    EXPECT_TRUE(AllFiniteFp16(fp16)) << n;
    EXPECT_TRUE(AllFiniteBf16(bf16)) << n;
    for (size_t at = 0; at < n; ++at) {
      for (size_t k = 0; k < bad_fp16.size(); ++k) {
        std::vector<uint16_t> with_fp16 = fp16, with_bf16 = bf16;
        with_fp16[at] = bad_fp16[k];
        with_bf16[at] = bad_bf16[k];
        EXPECT_FALSE(AllFiniteFp16(with_fp16)) << n << " " << at;
        EXPECT_FALSE(AllFiniteBf16(with_bf16)) << n << " " << at;
      }
    }
  }
  // Every fp16 pattern on its own: non-finite exactly when its decoding is.
  for (uint32_t h = 0; h <= 0xffff; ++h) {
    const uint16_t one = static_cast<uint16_t>(h);
    EXPECT_EQ(AllFiniteFp16({&one, 1}), std::isfinite(Fp16ToFloat(one)));
    EXPECT_EQ(AllFiniteBf16({&one, 1}), std::isfinite(Bf16ToFloat(one)));
  }
}

}  // namespace
}  // namespace ps
