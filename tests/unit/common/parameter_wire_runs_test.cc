// ForEachRun (common/parameter_wire.h) reads a piece's aligned values where
// they lie and copies only what is misaligned or cut between pieces; either
// way every value arrives once, in order, in runs of at most kFloatRun.
#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>
#include <vector>

#include "common/parameter_wire.h"
#include "gtest/gtest.h"

namespace ps {
namespace {

std::vector<float> Values(size_t n) {
  std::vector<float> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = static_cast<float>(i) * 0.25f - 7.0f;
  return v;
}

TEST(ForEachRunTest, AnAlignedPieceIsReadInPlace) {
  const std::vector<float> values = Values(3 * kFloatRun + 5);
  WireBytes bytes(std::string_view(reinterpret_cast<const char*>(values.data()),
                                   values.size() * sizeof(float)));
  size_t expected_first = 0;
  ForEachFloatRun(bytes, [&](size_t first, std::span<const float> run) {
    EXPECT_EQ(first, expected_first);
    EXPECT_LE(run.size(), kFloatRun);
    // The run is the array itself, not a copy of it.
    EXPECT_EQ(run.data(), values.data() + first);
    expected_first = first + run.size();
  });
  EXPECT_EQ(expected_first, values.size());
}

TEST(ForEachRunTest, MisalignedAndCutPiecesGiveTheSameValues) {
  const std::vector<float> values = Values(2 * kFloatRun + 3);
  // The same bytes at every offset modulo 4 in a buffer, cut into pieces at
  // places that split values, so that pieces start aligned and not.
  for (size_t shift = 0; shift < 4; ++shift) {
    std::string buffer(shift + values.size() * sizeof(float) + 8, '\0');
    std::memcpy(buffer.data() + shift, values.data(),
                values.size() * sizeof(float));
    const std::string_view all(buffer.data() + shift,
                               values.size() * sizeof(float));
    for (size_t cut : {size_t{0}, size_t{4}, size_t{6}, 4 * kFloatRun + 2}) {
      WireBytes bytes;
      bytes.Append(all.substr(0, cut));
      bytes.Append(all.substr(cut));
      std::vector<float> seen(values.size(), -1.0f);
      size_t expected_first = 0;
      ForEachFloatRun(bytes, [&](size_t first, std::span<const float> run) {
        EXPECT_EQ(first, expected_first);
        EXPECT_LE(run.size(), kFloatRun);
        std::memcpy(seen.data() + first, run.data(), run.size_bytes());
        expected_first = first + run.size();
      });
      EXPECT_EQ(seen, values) << "shift " << shift << ", cut " << cut;
    }
  }
}

}  // namespace
}  // namespace ps
