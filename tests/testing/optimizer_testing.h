// Building optimizers in the server's unit tests (optimizer_test,
// optimizer_kinds_test).
#ifndef PS_TESTS_TESTING_OPTIMIZER_TESTING_H_
#define PS_TESTS_TESTING_OPTIMIZER_TESTING_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "common/optimizer_spec.h"
#include "gtest/gtest.h"
#include "server/optimizer.h"

namespace ps::testing {

// Optimizer::Create(spec) after the defaults the coordinator applies at
// submit (ApplyOptimizerDefaults: an unset beta1 is 0.9 and so on), as the
// servers receive it.
inline absl::StatusOr<std::unique_ptr<Optimizer>> CreateWithDefaults(
    v1::OptimizerSpec spec) {
  ApplyOptimizerDefaults(&spec);
  return Optimizer::Create(spec);
}

// CreateWithDefaults, failing the test (and returning null) on an error.
inline std::unique_ptr<Optimizer> MustCreate(const v1::OptimizerSpec& spec) {
  absl::StatusOr<std::unique_ptr<Optimizer>> optimizer =
      CreateWithDefaults(spec);
  EXPECT_TRUE(optimizer.ok()) << optimizer.status();
  return optimizer.ok() ? *std::move(optimizer) : nullptr;
}

// `n` deterministic values in [-1, 1), no two equal (xorshift32 from a
// start that `seed` shifts): the gradients and values optimizer tests feed.
inline std::vector<float> OptimizerTestData(size_t n, int seed) {
  std::vector<float> out(n);
  uint32_t x = 2463534242u + seed;
  for (float& value : out) {
    x ^= x << 13;
    x ^= x >> 17;
    x ^= x << 5;
    value = static_cast<float>(x % 20000) / 10000.0f - 1.0f;
  }
  return out;
}

}  // namespace ps::testing

#endif  // PS_TESTS_TESTING_OPTIMIZER_TESTING_H_
