// A sparse tables' disk tier (server/sparse_tier.h) in a fresh temporary
// directory, for tests: the tier empties its directory when opened and
// removes it when it closes, so nothing is left behind.
#ifndef PS_TESTS_TESTING_TEST_TIER_H_
#define PS_TESTS_TESTING_TEST_TIER_H_

#include <stdlib.h>

#include <memory>
#include <string>
#include <utility>

#include "gtest/gtest.h"
#include "server/sparse_tier.h"

namespace ps::testing {

// Opens a tier with `options` (its path replaced by a new directory under
// the test's temporary directory). A failure is a test failure and null.
inline std::unique_ptr<SparseTier> OpenTestTier(
    SparseTierOptions options = {}) {
  options.path = ::testing::TempDir() + "sparse_tier_XXXXXX";
  EXPECT_NE(mkdtemp(options.path.data()), nullptr) << options.path;
  auto tier = SparseTier::Open(options);
  EXPECT_TRUE(tier.ok()) << tier.status();
  return tier.ok() ? *std::move(tier) : nullptr;
}

}  // namespace ps::testing

#endif  // PS_TESTS_TESTING_TEST_TIER_H_
