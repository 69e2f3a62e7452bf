// The memory tier of sparse tables (docs/sparse.md, "Memory: the budget and
// the estimate"): the budget is a hard bound on a table's memory, rows read
// and snapshot the same as without a budget, the server's budget is shared
// by its jobs, and the tier's store round-trips rows and removes its files.
#include "server/sparse_tier.h"

#include <stdlib.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <memory>
#include <random>
#include <span>
#include <string>
#include <vector>

#include "common/sparse_keys.h"
#include "common/sparse_memory.h"
#include "gtest/gtest.h"
#include "server/sparse_table.h"
#include "server/sparse_table_set.h"
#include "tests/testing/test_tier.h"

namespace ps {
namespace {

std::string TempDir() {
  std::string dir = ::testing::TempDir() + "sparse_tier_test_XXXXXX";
  EXPECT_NE(mkdtemp(dir.data()), nullptr);
  return dir;
}

v1::SparseTableSpec CtrSpec(v1::EvictionSpec::Policy policy) {
  v1::SparseTableSpec spec;
  spec.set_name("emb");
  spec.set_dim(16);
  spec.set_num_buckets(64);
  spec.mutable_optimizer()->mutable_rowwise_adagrad()->set_learning_rate(0.1f);
  spec.mutable_optimizer()->mutable_rowwise_adagrad()->set_epsilon(1e-8f);
  spec.mutable_eviction()->set_policy(policy);
  return spec;
}

// Power-law ids as a CTR field draws them: a few hot, a long tail.
std::vector<uint64_t> ZipfBatch(std::mt19937_64& rng, int n, uint64_t range) {
  std::vector<uint64_t> ids;
  std::uniform_real_distribution<double> u(0, 1);
  std::vector<bool> seen(range, false);
  while (static_cast<int>(ids.size()) < n) {
    const auto rank =
        static_cast<uint64_t>(std::pow(static_cast<double>(range), u(rng)) - 1);
    if (rank < range && !seen[rank]) {
      seen[rank] = true;
      ids.push_back(rank * 0x9e3779b97f4a7c15ULL + 7);
    }
  }
  return ids;
}

class SparseTierBoundTest
    : public ::testing::TestWithParam<v1::EvictionSpec::Policy> {};

// Far more rows than the budget holds: the table's accounted memory never
// exceeds the cap, every row reads the same bits as without a budget, and
// the snapshots are byte for byte the same.
TEST_P(SparseTierBoundTest, BudgetIsAHardBoundAndRowsAreUnchanged) {
  constexpr int64_t kCap = 64 << 10;  // 64 KiB: about 450 rows of dim 16.
  const v1::SparseTableSpec spec = CtrSpec(GetParam());
  std::unique_ptr<SparseTier> tier = testing::OpenTestTier();
  ASSERT_NE(tier, nullptr);
  auto tiered = SparseTable::Create(spec, 2, 9, false,
                                    {.tier = tier.get(), .cap_bytes = kCap});
  auto plain = SparseTable::Create(spec, 2, 9, false);
  ASSERT_TRUE(tiered.ok() && plain.ok());
  const int64_t max_hot = (*tiered)->max_hot_rows();
  EXPECT_GT(max_hot, 300);
  std::mt19937_64 rng(5);
  std::normal_distribution<float> grad(0, 1);
  std::vector<uint64_t> every;
  for (int64_t clock = 1; clock <= 120; ++clock) {
    const std::vector<uint64_t> ids = ZipfBatch(rng, 256, 20000);
    every.insert(every.end(), ids.begin(), ids.end());
    std::vector<float> g(ids.size() * 16);
    for (float& x : g) x = grad(rng);
    // A pull before the push, as a worker's step does.
    std::vector<float> a(ids.size() * 16), b(ids.size() * 16);
    (*tiered)->Read(ids, a.data());
    (*plain)->Read(ids, b.data());
    ASSERT_EQ(std::memcmp(a.data(), b.data(), a.size() * sizeof(float)), 0)
        << "clock " << clock;
    (*tiered)->Apply(ids, g, clock, 1.0f);
    (*plain)->Apply(ids, g, clock, 1.0f);
    ASSERT_LE((*tiered)->memory_bytes(), kCap) << "clock " << clock;
    ASSERT_LE((*tiered)->tier_counts().hot_rows, max_hot);
  }
  ASSERT_TRUE((*tiered)->tier_status().ok()) << (*tiered)->tier_status();
  EXPECT_EQ((*tiered)->num_rows(), (*plain)->num_rows());
  const SparseTierCounts counts = (*tiered)->tier_counts();
  EXPECT_GT((*tiered)->num_rows(), 10 * max_hot);
  EXPECT_EQ(counts.hot_rows + counts.cold_rows, (*tiered)->num_rows());
  EXPECT_GT(counts.disk_reads, 0);
  EXPECT_GT(counts.hits, 0);
  EXPECT_GT(counts.demotions, 0);
  // Filled to its plan: exactly the plan's bytes, within the cap.
  EXPECT_EQ(counts.memory_bytes,
            PlanSparseHotRows(kCap, SparseSlotBytes(16, 1)).bytes);
  std::sort(every.begin(), every.end());
  every.erase(std::unique(every.begin(), every.end()), every.end());
  std::vector<float> a(every.size() * 16), b(every.size() * 16);
  (*tiered)->Read(every, a.data());
  (*plain)->Read(every, b.data());
  EXPECT_EQ(std::memcmp(a.data(), b.data(), a.size() * sizeof(float)), 0);
  const std::vector<StoredBlock> sa = (*tiered)->Snapshot();
  const std::vector<StoredBlock> sb = (*plain)->Snapshot();
  ASSERT_EQ(sa.size(), sb.size());
  for (size_t i = 0; i < sa.size(); ++i) {
    EXPECT_EQ(sa[i].key, sb[i].key);
    EXPECT_EQ(sa[i].rows, sb[i].rows) << "bucket " << i;
  }
}

INSTANTIATE_TEST_SUITE_P(Policies, SparseTierBoundTest,
                         ::testing::Values(v1::EvictionSpec::LRU,
                                           v1::EvictionSpec::LFU));

// The plan fits its cap and is the largest that does, for small and large
// caps and rows.
TEST(SparseHotPlanTest, PlanIsTheLargestThatFits) {
  for (int64_t slot : {24, 84, 276, 4116}) {
    for (int64_t cap : {0, 100, 1000, 5000, 65536, 1 << 20, 64 << 20}) {
      const SparseHotPlan plan = PlanSparseHotRows(cap, slot);
      EXPECT_LE(plan.bytes, cap) << slot << " " << cap;
      const SparseHotPlan more = PlanSparseHotRows(cap + 100000000, slot);
      EXPECT_GT(more.hot_rows, plan.hot_rows);
    }
  }
  EXPECT_EQ(PlanSparseHotRows(0, 84).hot_rows, 0);
  // 256 MiB of dim-16 row-wise Adagrad rows: about 125 bytes a row.
  const SparseHotPlan big = PlanSparseHotRows(int64_t{256} << 20, 84);
  EXPECT_GT(big.hot_rows, 1800000);
  EXPECT_EQ(big.chunk_log2, 12);
}

// A server's budget is shared: a second job's tables get what the first
// left, and everything comes back when the sets go.
TEST(SparseMemoryBudgetTest, JobsShareTheServersBudget) {
  SparseMemoryBudget budget(100000);
  EXPECT_EQ(budget.Reserve(60000), 60000);
  EXPECT_EQ(budget.Reserve(60000), 40000);
  EXPECT_EQ(budget.Reserve(1), 0);
  budget.Release(100000);
  EXPECT_EQ(budget.reserved(), 0);

  v1::Assignment assignment;
  assignment.set_index(0);
  for (int t = 0; t < 2; ++t) {
    v1::SparseTableSpec* spec =
        assignment.mutable_spec()->mutable_model()->add_sparse_tables();
    *spec = CtrSpec(v1::EvictionSpec::LRU);
    spec->set_name(t == 0 ? "a" : "b");
    spec->set_num_buckets(4);
    spec->set_expected_rows(t == 0 ? 3000 : 1000);
    for (int b = 0; b < 4; ++b) {
      v1::BlockPlacement* p = assignment.mutable_shard_map()->add_blocks();
      p->set_key(BucketKey(t, b));
      p->set_server(0);
    }
  }
  std::unique_ptr<SparseTier> tier = testing::OpenTestTier();
  {
    auto first = SparseTableSet::Create(
        assignment, false,
        {.tier = tier.get(), .budget_bytes = 80000, .server_budget = &budget});
    ASSERT_TRUE(first.ok()) << first.status();
    EXPECT_GE(budget.reserved(), 80000 - 2);  // Shares round down.
    EXPECT_LE(budget.reserved(), 80000);
    auto second = SparseTableSet::Create(
        assignment, false,
        {.tier = tier.get(), .budget_bytes = 80000, .server_budget = &budget});
    ASSERT_TRUE(second.ok()) << second.status();
    EXPECT_EQ(budget.reserved(), 100000);  // The rest, not more.
    // Nothing is allocated before rows arrive.
    EXPECT_EQ(
        (*second)->TierCounts(0).memory_bytes,
        SparseIndexBytes(SparseIndexCapacity(
            PlanSparseHotRows(20000, SparseSlotBytes(16, 1)).hot_rows)) +
            4 * PlanSparseHotRows(20000, SparseSlotBytes(16, 1)).hot_rows);
  }
  EXPECT_EQ(budget.reserved(), 0);
}

// psctl estimate's memory per table (common/sparse_memory.h) is what a
// table of that many rows allocates, with and without a budget.
TEST(SparseEstimateTest, MemoryIsWhatTheTableAllocates) {
  constexpr int64_t kRows = 10000;
  v1::JobSpec spec;
  spec.set_num_servers(1);
  *spec.mutable_model()->add_sparse_tables() = CtrSpec(v1::EvictionSpec::LRU);
  spec.mutable_model()->mutable_sparse_tables(0)->set_expected_rows(kRows);
  std::vector<uint64_t> ids;
  for (int64_t i = 0; i < kRows; ++i) ids.push_back(i * 7919 + 3);
  const std::vector<float> grads(ids.size() * 16, 0.5f);
  for (int64_t budget : {int64_t{0}, int64_t{256} << 10}) {
    const SparseServerEstimate estimate = EstimateSparseServer(spec, 0, budget);
    ASSERT_EQ(estimate.tables.size(), 1u);
    std::unique_ptr<SparseTier> tier =
        budget > 0 ? testing::OpenTestTier() : nullptr;
    auto table = SparseTable::Create(spec.model().sparse_tables(0), 0, 1, false,
                                     {.tier = tier.get(), .cap_bytes = budget});
    ASSERT_TRUE(table.ok());
    for (size_t i = 0; i < ids.size(); i += 1000) {
      (*table)->Apply(std::span(ids).subspan(i, 1000),
                      std::span(grads).subspan(i * 16, 16000), 1, 1.0f);
    }
    EXPECT_EQ((*table)->num_rows(), kRows);
    EXPECT_EQ(estimate.tables[0].memory_bytes, (*table)->memory_bytes())
        << "budget " << budget;
    EXPECT_EQ(estimate.tables[0].hot_rows, (*table)->tier_counts().hot_rows);
  }
}

TEST(SparseTierStoreTest, RowsRoundTripAndTheDirectoryGoes) {
  const std::string dir = TempDir();
  {
    auto tier = SparseTier::Open({.path = dir});
    ASSERT_TRUE(tier.ok()) << tier.status();
    SparseTier::Batch batch;
    const float row[3] = {1.5f, -2.0f, 3.25f};
    batch.Put(1, 42, 7, 3, row, 3);
    batch.Put(1, 5, 8, 1, row, 3);
    batch.Put(2, 42, 9, 2, row, 3);
    ASSERT_TRUE((*tier)->Write(batch).ok());
    std::vector<std::string> values;
    const std::vector<uint64_t> ids = {42, 6, 5};
    ASSERT_TRUE((*tier)->MultiGet(1, ids, &values).ok());
    int64_t clock = 0, updates = 0;
    float back[3];
    ASSERT_TRUE(SparseTier::Decode(values[0], 3, &clock, &updates, back));
    EXPECT_EQ(clock, 7);
    EXPECT_EQ(updates, 3);
    for (int i = 0; i < 3; ++i) {
      EXPECT_EQ(std::bit_cast<uint32_t>(back[i]),
                std::bit_cast<uint32_t>(row[i]))
          << i;
    }
    EXPECT_TRUE(values[1].empty());
    std::vector<uint64_t> seen;
    ASSERT_TRUE(
        (*tier)
            ->ForEach(1, [&seen](uint64_t id,
                                 std::string_view) { seen.push_back(id); })
            .ok());
    EXPECT_EQ(seen, (std::vector<uint64_t>{5, 42}));
    batch.Delete(1, 42);
    ASSERT_TRUE((*tier)->Write(batch).ok());
    ASSERT_TRUE((*tier)->MultiGet(1, ids, &values).ok());
    EXPECT_TRUE(values[0].empty());
  }
  EXPECT_FALSE(std::filesystem::exists(dir));
}

}  // namespace
}  // namespace ps
