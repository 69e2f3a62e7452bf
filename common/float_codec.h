// Tensor payloads on the wire: raw little-endian float32 bytes
// (docs/architecture.md, "Model, blocks and the shard map").
#ifndef PS_COMMON_FLOAT_CODEC_H_
#define PS_COMMON_FLOAT_CODEC_H_

#include <bit>
#include <cstring>
#include <span>
#include <string>
#include <string_view>

namespace ps {

static_assert(std::endian::native == std::endian::little,
              "wire format is little-endian float32; add byte swapping here");

// Writes `values` as raw bytes into `out` (replacing its contents).
inline void EncodeFloats(std::span<const float> values, std::string* out) {
  out->assign(reinterpret_cast<const char*>(values.data()),
              values.size() * sizeof(float));
}

// Number of floats in `bytes`, or -1 if its size is not a multiple of 4.
inline int64_t FloatCount(std::string_view bytes) {
  return bytes.size() % sizeof(float) ? -1 : bytes.size() / sizeof(float);
}

// Copies raw bytes into `out`, which must hold FloatCount(bytes) floats.
inline void DecodeFloats(std::string_view bytes, std::span<float> out) {
  std::memcpy(out.data(), bytes.data(), out.size() * sizeof(float));
}

}  // namespace ps

#endif  // PS_COMMON_FLOAT_CODEC_H_
