// The memory tier's policies (docs/sparse.md, "Memory: the budget and the
// estimate"): the budget's max-min fair split among tables, the share that
// holds a table's rows, the segmented LRU that keeps rows updated more than
// once ahead of a stream of new ids, and the cold-id filter that spares new
// ids a lookup in the tier.
#include <cstdint>
#include <memory>
#include <numeric>
#include <string>
#include <vector>

#include "common/sparse_memory.h"
#include "gtest/gtest.h"
#include "server/sparse_table.h"
#include "server/sparse_tier.h"
#include "tests/testing/test_tier.h"

namespace ps {
namespace {

v1::SparseTableSpec Spec(v1::EvictionSpec::Policy policy) {
  v1::SparseTableSpec spec;
  spec.set_name("emb");
  spec.set_dim(16);
  spec.set_num_buckets(16);
  spec.mutable_optimizer()->mutable_rowwise_adagrad()->set_learning_rate(0.1f);
  spec.mutable_optimizer()->mutable_rowwise_adagrad()->set_epsilon(1e-8f);
  spec.mutable_eviction()->set_policy(policy);
  return spec;
}

// Small tables get what they need, the large ones split the rest equally,
// and the shares never sum past the budget.
TEST(SparseBudgetSharesTest, MaxMinFair) {
  const std::vector<int64_t> shares =
      SparseBudgetShares(1000, {100, 50, 5000, 2000});
  EXPECT_EQ(shares, (std::vector<int64_t>{100, 50, 425, 425}));
  // Every table fits: each gets its need, the rest stays unreserved.
  EXPECT_EQ(SparseBudgetShares(1000, {100, 200}),
            (std::vector<int64_t>{100, 200}));
  // A table of no rows here gets nothing; all zero: equal shares.
  EXPECT_EQ(SparseBudgetShares(1000, {0, 5000}),
            (std::vector<int64_t>{0, 1000}));
  EXPECT_EQ(SparseBudgetShares(1000, {0, 0}), (std::vector<int64_t>{500, 500}));
  // Needs that cascade: 300 fits a third, then 400 fits half the rest.
  const std::vector<int64_t> cascade =
      SparseBudgetShares(1500, {300, 400, 9000, 9000});
  EXPECT_EQ(cascade, (std::vector<int64_t>{300, 400, 400, 400}));
  for (const auto& s : {shares, cascade}) {
    EXPECT_LE(std::accumulate(s.begin(), s.end(), int64_t{0}), 1500);
  }
}

// A table's need is a share whose plan holds all its rows.
TEST(SparseBudgetSharesTest, NeedHoldsTheRows) {
  for (int64_t slot : {24, 84, 276}) {
    for (int64_t rows : {1, 15, 1000, 4097, 123457}) {
      const int64_t need = SparseNeedBytes(rows, slot);
      EXPECT_GE(PlanSparseHotRows(need, slot).hot_rows, rows)
          << slot << " " << rows;
    }
  }
  EXPECT_EQ(SparseNeedBytes(0, 84), 0);
}

// LRU, segmented: rows updated twice stay in memory while a stream of new
// ids (each updated once) passes through; plain recency would have demoted
// them. LFU keeps them too (by count). Either way every value is exact: the
// bound test in sparse_tier_test.cc compares bit for bit.
TEST(SparseTierPolicyTest, FrequentRowsOutliveAStreamOfNewIds) {
  for (auto policy : {v1::EvictionSpec::LRU, v1::EvictionSpec::LFU}) {
    std::unique_ptr<SparseTier> tier = testing::OpenTestTier();
    ASSERT_NE(tier, nullptr);
    auto table = SparseTable::Create(
        Spec(policy), 0, 1, false, {.tier = tier.get(), .cap_bytes = 64 << 10});
    ASSERT_TRUE(table.ok());
    const int64_t max_hot = (*table)->max_hot_rows();
    ASSERT_GT(max_hot, 200);
    // 64 frequent ids, updated twice.
    std::vector<uint64_t> frequent;
    for (uint64_t i = 0; i < 64; ++i) frequent.push_back(1000000 + i);
    std::vector<float> grads(frequent.size() * 16, 0.5f);
    (*table)->Apply(frequent, grads, 1, 1.0f);
    (*table)->Apply(frequent, grads, 2, 1.0f);
    // New ids, each once, in batches: three times the memory in all, fewer
    // updates than the 64 a frequent row outlives them by.
    uint64_t next = 1;
    int64_t clock = 3;
    while (next < static_cast<uint64_t>(3 * max_hot)) {
      std::vector<uint64_t> fresh(64);
      std::iota(fresh.begin(), fresh.end(), next);
      next += fresh.size();
      std::vector<float> g(fresh.size() * 16, 0.25f);
      (*table)->Apply(fresh, g, clock++, 1.0f);
    }
    ASSERT_LT(clock, 64);
    ASSERT_GT((*table)->tier_counts().demotions, 2 * max_hot);
    const int64_t reads_before = (*table)->tier_counts().disk_reads;
    std::vector<float> out(frequent.size() * 16);
    (*table)->Read(frequent, out.data());
    EXPECT_EQ((*table)->tier_counts().disk_reads, reads_before)
        << "policy " << policy;
    ASSERT_TRUE((*table)->tier_status().ok());
  }
}

// A pull of ids never written to the tier does not look them up there;
// ids that were demoted are looked up and read back.
TEST(SparseTierPolicyTest, NewIdsSkipTheTier) {
  std::unique_ptr<SparseTier> tier = testing::OpenTestTier();
  ASSERT_NE(tier, nullptr);
  auto table = SparseTable::Create(Spec(v1::EvictionSpec::LRU), 0, 1, false,
                                   {.tier = tier.get(), .cap_bytes = 32 << 10});
  ASSERT_TRUE(table.ok());
  const int64_t max_hot = (*table)->max_hot_rows();
  std::vector<uint64_t> stored;
  for (uint64_t i = 0; i < static_cast<uint64_t>(4 * max_hot); ++i) {
    stored.push_back(i * 7919 + 11);
  }
  std::vector<float> grads(stored.size() * 16, 0.5f);
  (*table)->Apply(stored, grads, 1, 1.0f);
  const int64_t cold = (*table)->tier_counts().cold_rows;
  ASSERT_GT(cold, 2 * max_hot);
  // New ids: a few may be false positives of the filter, not more.
  std::vector<uint64_t> fresh;
  for (uint64_t i = 0; i < 2000; ++i) fresh.push_back((i + 1) << 40);
  const int64_t before = tier->keys_looked_up();
  std::vector<float> out(fresh.size() * 16);
  (*table)->Read(fresh, out.data());
  EXPECT_LT(tier->keys_looked_up() - before, 200);
  // Rows in the tier are all looked up, found and exact (the filter has no
  // false negatives).
  std::vector<float> back(stored.size() * 16);
  const int64_t reads = (*table)->tier_counts().disk_reads;
  (*table)->Read(stored, back.data());
  EXPECT_EQ((*table)->tier_counts().disk_reads - reads, cold);
  auto plain = SparseTable::Create(Spec(v1::EvictionSpec::LRU), 0, 1, false);
  ASSERT_TRUE(plain.ok());
  (*plain)->Apply(stored, grads, 1, 1.0f);
  std::vector<float> expected(stored.size() * 16);
  (*plain)->Read(stored, expected.data());
  EXPECT_EQ(back, expected);
  EXPECT_TRUE((*table)->tier_status().ok());
}

}  // namespace
}  // namespace ps
