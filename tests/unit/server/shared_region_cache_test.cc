#include "server/shared_region_cache.h"

#include <memory>
#include <vector>

#include "gtest/gtest.h"

namespace ps {
namespace {

TEST(SharedRegionCacheTest, MapsARegionOnceAndChecksSpans) {
  auto region = SharedRegion::Create(1000);
  ASSERT_TRUE(region.ok());
  (*region)->data()[10] = 42;
  SharedRegionCache cache;
  auto span = cache.Get((*region)->name(), 10, 990);
  ASSERT_TRUE(span.ok()) << span.status();
  EXPECT_EQ(span->size, 990u);
  EXPECT_EQ(span->data[0], 42);
  auto again = cache.Get((*region)->name(), 0, 1000);
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(again->region, span->region);  // The same mapping.

  EXPECT_TRUE(
      absl::IsOutOfRange(cache.Get((*region)->name(), 10, 991).status()));
  EXPECT_TRUE(
      absl::IsOutOfRange(cache.Get((*region)->name(), 1001, 0).status()));
  EXPECT_TRUE(
      absl::IsOutOfRange(cache.Get((*region)->name(), 1, UINT64_MAX).status()));
  EXPECT_TRUE(absl::IsInvalidArgument(cache.Get("/etc/passwd", 0, 1).status()));
  EXPECT_TRUE(
      absl::IsNotFound(cache.Get("ps-shm-1-0123456789abcdef", 0, 1).status()));
}

TEST(SharedRegionCacheTest, KeepsAtMostItsCapacityMapped) {
  SharedRegionCache cache(2);
  std::vector<std::unique_ptr<SharedRegion>> regions;
  for (int i = 0; i < 3; ++i) {
    auto region = SharedRegion::Create(64);
    ASSERT_TRUE(region.ok());
    regions.push_back(*std::move(region));
  }
  auto first = cache.Get(regions[0]->name(), 0, 64);
  ASSERT_TRUE(first.ok());
  std::weak_ptr<SharedRegion> first_mapping = first->region;
  first = absl::UnknownError("released");
  ASSERT_TRUE(cache.Get(regions[1]->name(), 0, 64).ok());
  EXPECT_FALSE(first_mapping.expired());
  ASSERT_TRUE(cache.Get(regions[2]->name(), 0, 64).ok());
  EXPECT_TRUE(first_mapping.expired());  // The least recently used went.
  // Mapped again on demand.
  EXPECT_TRUE(cache.Get(regions[0]->name(), 0, 64).ok());
}

}  // namespace
}  // namespace ps
