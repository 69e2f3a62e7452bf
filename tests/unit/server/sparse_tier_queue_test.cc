// The memory tier's write queue and clean rows (docs/sparse.md, "Memory:
// the budget and the estimate", "Threading"): reads see every write before
// them whether the writer has applied it or not, the queue stays within its
// bound, a snapshot taken with demotions still queued holds every row, a
// row read from the tier and demoted unchanged is not written again, and a
// row promoted and then evicted leaves nothing in the tier.
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "server/sparse_table.h"
#include "server/sparse_tier.h"
#include "tests/testing/test_tier.h"

namespace ps {
namespace {

v1::SparseTableSpec Spec() {
  v1::SparseTableSpec spec;
  spec.set_name("emb");
  spec.set_dim(4);
  spec.set_num_buckets(8);
  spec.mutable_optimizer()->mutable_rowwise_adagrad()->set_learning_rate(0.1f);
  spec.mutable_optimizer()->mutable_rowwise_adagrad()->set_epsilon(1e-8f);
  return spec;
}

// Random puts and deletes of 64 ids, each batch read back at once: with the
// writer paused (every read from the queue), running (queue or RocksDB),
// and a 2 KiB queue (Write waits for room; a larger batch is written at
// once). Every read matches a model of the writes, and ForEach (after the
// queue drains) lists exactly the model's rows.
TEST(SparseTierQueueTest, ReadsSeeEveryEarlierWrite) {
  for (const size_t queue : {size_t{8} << 20, size_t{2048}}) {
    std::unique_ptr<SparseTier> tier =
        testing::OpenTestTier({.queue_bytes = queue});
    ASSERT_NE(tier, nullptr);
    testing::TierModel model;
    std::mt19937_64 rng(queue);
    const std::vector<uint64_t> ids = testing::TestTierIds();
    for (int round = 0; round < 60; ++round) {
      // Paused for the first rounds with the large queue only (the small
      // one would wait for room forever).
      tier->PauseWriterForTest(queue > 4096 && round < 20);
      SparseTier::Batch batch =
          testing::RandomTierBatch(rng, ids, round, &model);
      ASSERT_TRUE(tier->Write(batch).ok());
      EXPECT_TRUE(batch.empty());
      EXPECT_LE(tier->queued_bytes(), queue);
      std::vector<std::string> values;
      ASSERT_TRUE(tier->MultiGet(1, ids, &values).ok());
      for (size_t i = 0; i < ids.size(); ++i) {
        auto it = model.find(ids[i]);
        if (it == model.end()) {
          EXPECT_TRUE(values[i].empty()) << "round " << round << " id " << i;
          continue;
        }
        float back[3];
        int64_t clock, updates;
        ASSERT_TRUE(SparseTier::Decode(values[i], 3, &clock, &updates, back))
            << "round " << round << " id " << i;
        EXPECT_EQ(back[0], it->second) << "round " << round << " id " << i;
      }
      // Another table's rows are not this one's.
      ASSERT_TRUE(tier->MultiGet(2, ids, &values).ok());
      for (const std::string& v : values) EXPECT_TRUE(v.empty());
    }
    tier->PauseWriterForTest(false);
    EXPECT_EQ(testing::ListedTierRows(*tier, 1, 3), model);
    EXPECT_EQ(tier->queued_bytes(), 0u);
  }
}

// A table whose memory holds a few rows, against a twin without a budget:
// with the writer paused, every demotion stays queued, and pulls of rows
// demoted a push ago read them from the queue, the same bits as the twin;
// the snapshot, taken as the writer resumes, is byte for byte the twin's.
TEST(SparseTierQueueTest, PullsReadQueuedDemotionsAndSnapshotsHoldThem) {
  std::unique_ptr<SparseTier> tier =
      testing::OpenTestTier({.queue_bytes = size_t{64} << 20});
  ASSERT_NE(tier, nullptr);
  const v1::SparseTableSpec spec = Spec();
  auto tiered = SparseTable::Create(spec, 0, 5, false,
                                    {.tier = tier.get(), .cap_bytes = 2048});
  auto plain = SparseTable::Create(spec, 0, 5, false);
  ASSERT_TRUE(tiered.ok() && plain.ok());
  tier->PauseWriterForTest(true);
  std::mt19937_64 rng(7);
  std::vector<uint64_t> seen;
  for (int clock = 0; clock < 40; ++clock) {
    std::vector<uint64_t> keys;
    for (int k = 0; k < 12; ++k) {
      const uint64_t id = rng() % 200;
      if (std::find(keys.begin(), keys.end(), id) == keys.end()) {
        keys.push_back(id);
      }
    }
    std::vector<float> a(keys.size() * 4), b(keys.size() * 4);
    (*tiered)->Read(keys, a.data());
    (*plain)->Read(keys, b.data());
    ASSERT_EQ(std::memcmp(a.data(), b.data(), a.size() * sizeof(float)), 0)
        << "clock " << clock;
    std::vector<float> grads(keys.size() * 4);
    for (float& g : grads) g = static_cast<float>(rng() % 100) / 50 - 1;
    (*tiered)->Apply(keys, grads, clock, 1.0f);
    (*plain)->Apply(keys, grads, clock, 1.0f);
    seen.insert(seen.end(), keys.begin(), keys.end());
  }
  EXPECT_GT(tier->queued_bytes(), 0u);
  EXPECT_GT((*tiered)->tier_counts().cold_rows, 0);
  std::vector<float> a(seen.size() * 4), b(seen.size() * 4);
  (*tiered)->Read(seen, a.data());
  (*plain)->Read(seen, b.data());
  EXPECT_EQ(std::memcmp(a.data(), b.data(), a.size() * sizeof(float)), 0);
  tier->PauseWriterForTest(false);
  const std::vector<StoredBlock> got = (*tiered)->Snapshot();
  const std::vector<StoredBlock> want = (*plain)->Snapshot();
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    EXPECT_EQ(got[i].key, want[i].key);
    EXPECT_EQ(got[i].rows, want[i].rows) << "bucket block " << i;
  }
  EXPECT_EQ((*tiered)->num_rows(), (*plain)->num_rows());
}

// Rows read back by a pull and demoted again unchanged are not written
// again (their copy in the tier is still their value); reads stay those of
// the twin without a budget.
TEST(SparseTierQueueTest, CleanRowsAreNotWrittenAgain) {
  std::unique_ptr<SparseTier> tier =
      testing::OpenTestTier({.queue_bytes = size_t{8} << 20});
  ASSERT_NE(tier, nullptr);
  const v1::SparseTableSpec spec = Spec();
  auto tiered = SparseTable::Create(spec, 0, 5, false,
                                    {.tier = tier.get(), .cap_bytes = 2048});
  auto plain = SparseTable::Create(spec, 0, 5, false);
  ASSERT_TRUE(tiered.ok() && plain.ok());
  const int64_t hot = (*tiered)->max_hot_rows();
  ASSERT_GT(hot, 2);
  // 4 × hot rows pushed: most of them cold.
  std::vector<uint64_t> all;
  for (int64_t i = 0; i < 4 * hot; ++i) all.push_back(1000 + i);
  const std::vector<float> grads(all.size() * 4, 0.25f);
  (*tiered)->Apply(all, grads, 0, 1.0f);
  (*plain)->Apply(all, grads, 0, 1.0f);
  // Pull every row a few times, a push of another id between (rows a call
  // touched stay until the next push): each pull promotes cold rows and
  // demotes the ones the last pull promoted, unchanged.
  std::vector<float> a(all.size() * 4), b(all.size() * 4);
  for (int pass = 0; pass < 3; ++pass) {
    const std::vector<uint64_t> other = {7};
    const std::vector<float> g(4, 0.5f);
    (*tiered)->Apply(other, g, pass + 1, 1.0f);
    (*plain)->Apply(other, g, pass + 1, 1.0f);
    (*tiered)->Read(all, a.data());
    (*plain)->Read(all, b.data());
    ASSERT_EQ(std::memcmp(a.data(), b.data(), a.size() * sizeof(float)), 0)
        << "pass " << pass;
  }
  const SparseTierCounts counts = (*tiered)->tier_counts();
  EXPECT_GT(counts.clean_demotions, 0);
  EXPECT_EQ((*tiered)->num_rows(), (*plain)->num_rows());
}

// A row promoted by a pull keeps a stale copy in the tier; when the row is
// evicted (idle too long) the copy goes too: the table no longer holds it,
// as the twin without a budget, and a snapshot lists the same rows.
TEST(SparseTierQueueTest, EvictingAPromotedRowLeavesNothingInTheTier) {
  std::unique_ptr<SparseTier> tier =
      testing::OpenTestTier({.queue_bytes = size_t{8} << 20});
  ASSERT_NE(tier, nullptr);
  v1::SparseTableSpec spec = Spec();
  spec.mutable_eviction()->set_max_idle_clocks(2);
  auto tiered = SparseTable::Create(spec, 0, 5, false,
                                    {.tier = tier.get(), .cap_bytes = 2048});
  auto plain = SparseTable::Create(spec, 0, 5, false);
  ASSERT_TRUE(tiered.ok() && plain.ok());
  const int64_t hot = (*tiered)->max_hot_rows();
  std::vector<uint64_t> first;
  for (int64_t i = 0; i < 3 * hot; ++i) first.push_back(5000 + i);
  const std::vector<float> g1(first.size() * 4, 0.5f);
  (*tiered)->Apply(first, g1, 0, 1.0f);
  (*plain)->Apply(first, g1, 0, 1.0f);
  // A push of another id, then a pull of cold rows: promoted into memory
  // (their copies stay in the tier).
  const std::vector<uint64_t> other = {1};
  const std::vector<float> g(4, 0.1f);
  (*tiered)->Apply(other, g, 1, 1.0f);
  (*plain)->Apply(other, g, 1, 1.0f);
  const int64_t cold_before = (*tiered)->tier_counts().cold_rows;
  std::vector<uint64_t> pulled(first.end() - hot / 2, first.end());
  std::vector<float> rows(pulled.size() * 4);
  (*tiered)->Read(pulled, rows.data());
  EXPECT_GT((*tiered)->tier_counts().disk_reads, 0);
  EXPECT_EQ((*tiered)->tier_counts().cold_rows, cold_before);  // Swapped.
  // Later clocks touch other ids only: every row of clock 0 goes idle.
  for (int clock = 2; clock < 7; ++clock) {
    const std::vector<uint64_t> keys = {static_cast<uint64_t>(clock)};
    const std::vector<float> g(4, 0.1f);
    (*tiered)->Apply(keys, g, clock, 1.0f);
    (*plain)->Apply(keys, g, clock, 1.0f);
  }
  EXPECT_EQ((*tiered)->num_rows(), (*plain)->num_rows());
  for (uint64_t id : first) {
    EXPECT_EQ((*tiered)->Contains(id), (*plain)->Contains(id)) << id;
    EXPECT_FALSE((*tiered)->Contains(id)) << id;
  }
  const std::vector<StoredBlock> got = (*tiered)->Snapshot();
  const std::vector<StoredBlock> want = (*plain)->Snapshot();
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    EXPECT_EQ(got[i].rows, want[i].rows) << "bucket block " << i;
  }
}

}  // namespace
}  // namespace ps
