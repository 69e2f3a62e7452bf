// float32 <-> the 16-bit formats gradients may travel in (docs/compute.md,
// "Gradients on the wire"): IEEE binary16 ("fp16": 5 exponent bits, 11
// significant bits) and bfloat16 (float32's 8 exponent bits, 8 significant
// bits), as uint16_t bit patterns. Encoding rounds to nearest, ties to even,
// and saturates: a finite value beyond the format's largest finite one becomes
// that value, never Inf (a gradient that is finite in float32 stays finite on
// the wire, so the server's NaN/Inf policy sees exactly the NaN and Inf the
// worker computed). NaN stays NaN (quieted, sign and the payload's top bits
// kept) and +-Inf stays +-Inf. Decoding is exact (a NaN is quieted). Bit for
// bit what x86's F16C instructions (vcvtps2ph, vcvtph2ps) give, saturation
// aside.
//
// The scalar functions are branch-free (selects, integer arithmetic and one
// float add or convert), so the span loops in half_codec.cc vectorise at -O2
// without any instruction-set flags; on x86-64 those loops pick F16C or AVX2
// code at run time where the CPU has it. Thread-safe (no state).
#ifndef PS_COMMON_HALF_CODEC_H_
#define PS_COMMON_HALF_CODEC_H_

#include <algorithm>
#include <bit>
#include <cstdint>
#include <span>

namespace ps {

// Largest finite fp16 (65504) and bfloat16 (about 3.39e38) values, as bits.
inline constexpr uint16_t kFp16MaxFinite = 0x7bff;
inline constexpr uint16_t kBf16MaxFinite = 0x7f7f;

// `a` if `condition`, else `b`, as a mask rather than a branch: both sides
// are computed whatever the condition, so that GCC vectorises the loops
// around it (with a ?: it keeps a branch around float arithmetic, which
// -ftrapping-math forbids it to run unconditionally).
namespace half_codec_internal {
inline uint32_t Select(bool condition, uint32_t a, uint32_t b) {
  const uint32_t mask = 0u - static_cast<uint32_t>(condition);
  return (a & mask) | (b & ~mask);
}
}  // namespace half_codec_internal

// The fp16 value nearest to x (ties to even), saturating at +-65504.
inline uint16_t FloatToFp16(float x) {
  using half_codec_internal::Select;
  const uint32_t bits = std::bit_cast<uint32_t>(x);
  const uint32_t sign = (bits >> 16) & 0x8000u;
  const uint32_t abs = bits & 0x7fffffffu;
  // |x| >= 2^-14 (an fp16 normal): rebias the exponent (127 -> 15) and drop
  // 13 significand bits, rounding to nearest even; a carry out of the
  // significand correctly bumps the exponent. Wraps (unused) for small |x|.
  uint32_t normal = (abs - 0x38000000u + 0xfffu + ((abs >> 13) & 1u)) >> 13;
  normal = std::min(normal, uint32_t{kFp16MaxFinite});
  // |x| < 2^-14 (fp16 subnormal or zero): adding 0.5f, whose ulp is 2^-24
  // (fp16's smallest subnormal), rounds |x| to a multiple of 2^-24 (nearest
  // even, the default rounding mode); the multiple is in the low bits. A
  // result of 2^-14 gives 0x400, the smallest normal: also right.
  const uint32_t subnormal =
      std::bit_cast<uint32_t>(std::bit_cast<float>(abs) + 0.5f) - 0x3f000000u;
  uint32_t h = Select(abs < 0x38800000u, subnormal, normal);
  h = Select(abs == 0x7f800000u, 0x7c00u, h);                          // +-Inf.
  h = Select(abs > 0x7f800000u, 0x7e00u | ((abs >> 13) & 0x3ffu), h);  // NaN.
  return static_cast<uint16_t>(h | sign);
}

// The float32 value of fp16 bits (exact).
inline float Fp16ToFloat(uint16_t h) {
  using half_codec_internal::Select;
  const uint32_t sign = (uint32_t{h} & 0x8000u) << 16;
  const uint32_t em = uint32_t{h} & 0x7fffu;  // Exponent and significand.
  const uint32_t normal = (em << 13) + 0x38000000u;  // Rebias 15 -> 127.
  // Inf; NaN with its payload, quieted.
  const uint32_t special =
      (em << 13) | 0x7f800000u | Select(em > 0x7c00u, 0x00400000u, 0u);
  // Subnormal: em * 2^-24, exact (em < 1024; the product is a float normal).
  const uint32_t subnormal = std::bit_cast<uint32_t>(
      static_cast<float>(static_cast<int32_t>(em)) * 0x1p-24f);
  uint32_t f = Select(em < 0x400u, subnormal, normal);
  f = Select(em >= 0x7c00u, special, f);
  return std::bit_cast<float>(f | sign);
}

// The bfloat16 value nearest to x (ties to even), saturating at +-3.3895e38.
inline uint16_t FloatToBf16(float x) {
  const uint32_t bits = std::bit_cast<uint32_t>(x);
  const uint32_t sign = (bits >> 16) & 0x8000u;
  const uint32_t abs = bits & 0x7fffffffu;
  uint32_t b = (abs + 0x7fffu + ((abs >> 16) & 1u)) >> 16;
  b = std::min(b, uint32_t{kBf16MaxFinite});
  b = abs == 0x7f800000u ? 0x7f80u : b;               // +-Inf.
  b = abs > 0x7f800000u ? (abs >> 16) | 0x0040u : b;  // NaN, quieted.
  return static_cast<uint16_t>(b | sign);
}

// The float32 value of bfloat16 bits (exact; a NaN keeps its bits).
inline float Bf16ToFloat(uint16_t b) {
  return std::bit_cast<float>(uint32_t{b} << 16);
}

// The same over arrays: `out` holds in.size() values and must not overlap
// `in`. Vectorised.
void EncodeFp16(std::span<const float> in, uint16_t* out);
void DecodeFp16(std::span<const uint16_t> in, float* out);
void EncodeBf16(std::span<const float> in, uint16_t* out);
void DecodeBf16(std::span<const uint16_t> in, float* out);

namespace half_codec_internal {
// EncodeFp16 and DecodeFp16 without the run-time choice of F16C (tests).
void EncodeFp16Portable(std::span<const float> in, uint16_t* out);
void DecodeFp16Portable(std::span<const uint16_t> in, float* out);
}  // namespace half_codec_internal

// True when no value is NaN or Inf (exponent bits not all ones). Vectorised:
// an integer reduction on the bits, like AllFinite for float32.
bool AllFiniteFp16(std::span<const uint16_t> values);
bool AllFiniteBf16(std::span<const uint16_t> values);

}  // namespace ps

#endif  // PS_COMMON_HALF_CODEC_H_
