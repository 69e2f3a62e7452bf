#include "common/half_codec.h"

#include <cstring>

namespace ps {
namespace {

// Loops run in blocks of kLanes with a scalar tail: GCC's -O2 vectorises only
// loops whose vector code replaces the scalar code entirely (its "very cheap"
// cost model), which a fixed trip count of kLanes guarantees.
constexpr size_t kLanes = 16;

template <typename In, typename Out, typename Fn>
inline void Convert(std::span<const In> in, Out* __restrict out, Fn fn) {
  const In* __restrict p = in.data();
  const size_t n = in.size();
  size_t i = 0;
  for (; i + kLanes <= n; i += kLanes) {
    for (size_t j = 0; j < kLanes; ++j) out[i + j] = fn(p[i + j]);
  }
  for (; i < n; ++i) out[i] = fn(p[i]);
}

// A value is NaN or Inf exactly when its exponent bits (`exponent`) are all
// ones, that is when (bits & exponent) + (lowest exponent bit) reaches bit 15.
// Reduced in kLanes independent lanes (integer arithmetic, vectorised).
template <uint16_t kExponent>
bool AllFinite16(std::span<const uint16_t> values) {
  constexpr uint16_t kCarry = kExponent & (~kExponent + 1);  // Lowest bit.
  uint16_t lanes[kLanes] = {};
  const uint16_t* const p = values.data();
  const size_t n = values.size();
  size_t i = 0;
  for (; i + kLanes <= n; i += kLanes) {
    uint16_t bits[kLanes];
    std::memcpy(bits, p + i, sizeof(bits));
    for (size_t j = 0; j < kLanes; ++j) {
      lanes[j] |= static_cast<uint16_t>((bits[j] & kExponent) + kCarry);
    }
  }
  uint16_t any = 0;
  for (; i < n; ++i) any |= static_cast<uint16_t>((p[i] & kExponent) + kCarry);
  for (uint16_t lane : lanes) any |= lane;
  return (any & 0x8000u) == 0;
}

}  // namespace

void EncodeFp16(std::span<const float> in, uint16_t* out) {
  Convert(in, out, FloatToFp16);
}

void DecodeFp16(std::span<const uint16_t> in, float* out) {
  Convert(in, out, Fp16ToFloat);
}

void EncodeBf16(std::span<const float> in, uint16_t* out) {
  Convert(in, out, FloatToBf16);
}

void DecodeBf16(std::span<const uint16_t> in, float* out) {
  Convert(in, out, Bf16ToFloat);
}

bool AllFiniteFp16(std::span<const uint16_t> values) {
  return AllFinite16<0x7c00>(values);
}

bool AllFiniteBf16(std::span<const uint16_t> values) {
  return AllFinite16<0x7f80>(values);
}

}  // namespace ps
