#include "worker/shared_region_pool.h"

#include <filesystem>
#include <string>

#include "gtest/gtest.h"

namespace ps {
namespace {

TEST(SharedRegionPoolTest, ReusesTheSmallestIdleRegionThatFits) {
  SharedRegionPool pool;
  auto small = pool.Acquire(100);
  auto large = pool.Acquire(10000);
  ASSERT_TRUE(small.ok() && large.ok());
  const std::string small_name = (*small)->name();
  const std::string large_name = (*large)->name();
  pool.Release(*std::move(large));
  pool.Release(*std::move(small));

  auto fits_small = pool.Acquire(50);
  ASSERT_TRUE(fits_small.ok());
  EXPECT_EQ((*fits_small)->name(), small_name);
  auto needs_large = pool.Acquire(5000);
  ASSERT_TRUE(needs_large.ok());
  EXPECT_EQ((*needs_large)->name(), large_name);
  auto fresh = pool.Acquire(20000);  // Nothing idle fits.
  ASSERT_TRUE(fresh.ok());
  EXPECT_GE((*fresh)->size(), 20000u);
  EXPECT_NE((*fresh)->name(), large_name);
}

TEST(SharedRegionPoolTest, RemovesRegionsBeyondItsIdleLimit) {
  SharedRegionPool pool(/*max_idle=*/1);
  auto a = pool.Acquire(64);
  auto b = pool.Acquire(64);
  ASSERT_TRUE(a.ok() && b.ok());
  const std::string b_name = (*b)->name();
  pool.Release(*std::move(a));
  pool.Release(*std::move(b));  // Over the limit: removed.
  EXPECT_FALSE(std::filesystem::exists("/dev/shm/" + b_name));
}

}  // namespace
}  // namespace ps
