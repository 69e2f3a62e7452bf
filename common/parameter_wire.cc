#include "common/parameter_wire.h"

#include <cstring>

namespace ps {

// A value is NaN or Inf exactly when its exponent bits are all ones. The bits
// are reduced in 16 independent lanes of fixed width: integer arithmetic that
// GCC's -O2 vectorises (a float sum would be one serial chain of adds, about
// 4 cycles a value, and slow on denormals). (bits & 0x7f800000) + 0x00800000
// reaches bit 31 exactly when the exponent is all ones.
bool AllFinite(std::span<const float> values) {
  constexpr size_t kLanes = 16;
  constexpr uint32_t kExponent = 0x7f800000u;
  constexpr uint32_t kCarry = 0x00800000u;
  uint32_t lanes[kLanes] = {};
  const float* const p = values.data();
  const size_t n = values.size();
  size_t i = 0;
  for (; i + kLanes <= n; i += kLanes) {
    uint32_t bits[kLanes];
    std::memcpy(bits, p + i, sizeof(bits));
    for (size_t j = 0; j < kLanes; ++j) {
      lanes[j] |= (bits[j] & kExponent) + kCarry;
    }
  }
  uint32_t any = 0;
  for (; i < n; ++i) {
    uint32_t bits;
    std::memcpy(&bits, p + i, sizeof(bits));
    any |= (bits & kExponent) + kCarry;
  }
  for (uint32_t lane : lanes) any |= lane;
  return (any & 0x80000000u) == 0;
}

bool AllFinite(const WireBytes& bytes) {
  bool finite = true;
  ForEachFloatRun(bytes, [&](size_t, std::span<const float> run) {
    finite = finite && AllFinite(run);
  });
  return finite;
}

bool AllFinite(const WireBytes& bytes, v1::Precision encoding) {
  if (encoding == v1::FP32) return AllFinite(bytes);
  bool finite = true;
  ForEachRun<uint16_t>(bytes, [&](size_t, std::span<const uint16_t> run) {
    finite = finite &&
             (encoding == v1::FP16 ? AllFiniteFp16(run) : AllFiniteBf16(run));
  });
  return finite;
}

std::string WireBytes::ToString() const {
  std::string out;
  out.reserve(size_);
  for (std::string_view p : pieces_) out.append(p);
  return out;
}

v1::PushRequest PushView::Header() const {
  v1::PushRequest header;
  header.set_job_id(job_id);
  header.set_worker_index(worker_index);
  header.set_clock(clock);
  header.set_map_version(map_version);
  header.set_gradient_encoding(gradient_encoding);
  header.set_membership_version(membership_version);
  if (place.has_value()) header.set_place(*place);
  return header;
}

}  // namespace ps
