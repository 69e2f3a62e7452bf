// Rounding float32 values to the reduced formats of mixed-precision GEMMs,
// with the results kept as float32. The CPU backend multiplies such rounded
// values in float32, which is what tensor cores compute from fp16 and bf16
// inputs (exact products, float32 accumulation), so both backends see the
// same inputs; the test suite also uses these as the reference.
#ifndef PS_WORKER_REDUCED_PRECISION_H_
#define PS_WORKER_REDUCED_PRECISION_H_

#include <bit>
#include <cmath>
#include <cstdint>

#include "worker/model/backend.h"

namespace ps {

// The bfloat16 value nearest to x (ties to even), as a float. NaN stays NaN;
// values beyond bfloat16's largest finite value become +-inf.
inline float RoundToBf16(float x) {
  if (std::isnan(x)) return x;
  uint32_t bits = std::bit_cast<uint32_t>(x);
  bits += 0x7fffu + ((bits >> 16) & 1u);
  return std::bit_cast<float>(bits & 0xffff0000u);
}

// The IEEE half value nearest to x (ties to even), as a float: 11
// significant bits for |x| >= 2^-14, multiples of 2^-24 below (subnormals),
// +-inf beyond 65504 (from 65520 on, as the rounding reaches 65536).
inline float RoundToFp16(float x) {
  if (std::isnan(x) || std::isinf(x)) return x;
  constexpr float kMinNormal = 6.103515625e-05f;  // 2^-14.
  constexpr float kMaxFinite = 65504.0f;
  if (std::fabs(x) < kMinNormal) {
    // Round to a multiple of 2^-24; scaling by a power of two is exact and
    // nearbyint rounds to nearest even in the default rounding mode.
    constexpr float kQuantum = 5.9604644775390625e-08f;  // 2^-24.
    return std::nearbyint(x / kQuantum) * kQuantum;
  }
  uint32_t bits = std::bit_cast<uint32_t>(x);
  // Keep 10 of float's 23 mantissa bits.
  bits += 0xfffu + ((bits >> 13) & 1u);
  const float rounded = std::bit_cast<float>(bits & 0xffffe000u);
  if (std::fabs(rounded) > kMaxFinite) return std::copysign(INFINITY, x);
  return rounded;
}

// x rounded to `precision` (x itself for kFp32).
inline float RoundToPrecision(float x, Precision precision) {
  switch (precision) {
    case Precision::kFp16:
      return RoundToFp16(x);
    case Precision::kBf16:
      return RoundToBf16(x);
    case Precision::kFp32:
      break;
  }
  return x;
}

}  // namespace ps

#endif  // PS_WORKER_REDUCED_PRECISION_H_
