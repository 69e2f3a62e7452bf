// SparseBatch: a batch's ids deduplicated per table, in first-appearance
// order, and each (sample, field) mapped back to its unique row.
#include "worker/model/sparse_batch.h"

#include <algorithm>
#include <cstdint>
#include <random>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace ps {
namespace {

using ::testing::ElementsAre;
using ::testing::IsEmpty;

TEST(SparseBatchTest, DeduplicatesPerTableInFirstAppearanceOrder) {
  // 3 samples x 3 fields; fields 0 and 2 share table 0, field 1 reads
  // table 2; table 1 is unused.
  const std::vector<uint64_t> ids = {7, 100, 9,   // sample 0
                                     9, 100, 7,   // sample 1
                                     5, 200, 7};  // sample 2
  SparseBatch sparse;
  sparse.Build(ids.data(), 3, {0, 2, 0}, 3);
  EXPECT_EQ(sparse.batch(), 3);
  EXPECT_EQ(sparse.num_fields(), 3);
  EXPECT_EQ(sparse.num_tables(), 3);
  EXPECT_THAT(sparse.unique_ids(0), ElementsAre(7, 9, 5));
  EXPECT_THAT(sparse.unique_ids(1), IsEmpty());
  EXPECT_THAT(sparse.unique_ids(2), ElementsAre(100, 200));
  EXPECT_THAT(sparse.rows(), ElementsAre(0, 0, 1,  //
                                         1, 0, 0,  //
                                         2, 1, 0));
  EXPECT_EQ(sparse.offset(0), 0);
  EXPECT_EQ(sparse.offset(1), 3);
  EXPECT_EQ(sparse.offset(2), 3);
  EXPECT_EQ(sparse.offset(3), 5);
  EXPECT_EQ(sparse.total_unique(), 5);
}

TEST(SparseBatchTest, SameIdInTwoTablesIsTwoRows) {
  const std::vector<uint64_t> ids = {42, 42};
  SparseBatch sparse;
  sparse.Build(ids.data(), 1, {0, 1}, 2);
  EXPECT_THAT(sparse.unique_ids(0), ElementsAre(42));
  EXPECT_THAT(sparse.unique_ids(1), ElementsAre(42));
  EXPECT_THAT(sparse.rows(), ElementsAre(0, 0));
  EXPECT_EQ(sparse.total_unique(), 2);
}

// Rebuilding reuses the buffers: a large batch, then a small one, then a
// random one checked against the definition; nothing of an earlier batch
// remains.
TEST(SparseBatchTest, RebuildsFromScratchEachBatch) {
  SparseBatch sparse;
  std::vector<uint64_t> big(2000);
  for (size_t i = 0; i < big.size(); ++i) big[i] = i;
  sparse.Build(big.data(), 1000, {0, 1}, 2);
  EXPECT_EQ(sparse.total_unique(), 2000);

  const std::vector<uint64_t> small = {3, 4};
  sparse.Build(small.data(), 1, {0, 0}, 1);
  EXPECT_EQ(sparse.num_tables(), 1);
  EXPECT_THAT(sparse.unique_ids(0), ElementsAre(3, 4));
  EXPECT_THAT(sparse.rows(), ElementsAre(0, 1));

  std::mt19937_64 rng(5);
  const int batch = 257;
  const std::vector<int> field_tables = {0, 1, 1, 0};
  std::vector<uint64_t> ids(batch * field_tables.size());
  for (uint64_t& id : ids) id = rng() % 50 + (rng() % 2 == 0 ? 0 : ~0ull - 60);
  sparse.Build(ids.data(), batch, field_tables, 2);
  ASSERT_EQ(sparse.rows().size(), ids.size());
  for (size_t i = 0; i < ids.size(); ++i) {
    const int t = field_tables[i % field_tables.size()];
    const std::vector<uint64_t>& unique = sparse.unique_ids(t);
    ASSERT_LT(sparse.rows()[i], static_cast<int32_t>(unique.size()));
    EXPECT_EQ(unique[sparse.rows()[i]], ids[i]);
  }
  for (int t = 0; t < 2; ++t) {
    std::vector<uint64_t> unique = sparse.unique_ids(t);
    std::sort(unique.begin(), unique.end());
    EXPECT_EQ(std::adjacent_find(unique.begin(), unique.end()), unique.end());
  }
}

TEST(SparseBatchTest, EmptyBatch) {
  SparseBatch sparse;
  sparse.Build(nullptr, 0, {0}, 1);
  EXPECT_THAT(sparse.unique_ids(0), IsEmpty());
  EXPECT_THAT(sparse.rows(), IsEmpty());
  EXPECT_EQ(sparse.total_unique(), 0);
}

}  // namespace
}  // namespace ps
