// Snapshots of tiered tables (docs/sparse.md, "Snapshots of a tiered
// table"): a view of the tier lists exactly the rows written before it,
// whatever is written after, queued or ingested; and a table's cut, encoded
// later from the view of the same moment while the table goes on changing,
// is byte for byte the snapshot a twin without a budget takes at the cut,
// whole or streamed a bucket at a time.
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <map>
#include <memory>
#include <random>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "common/sparse_keys.h"
#include "gtest/gtest.h"
#include "server/sparse_snapshot_stream.h"
#include "server/sparse_table.h"
#include "server/sparse_tier.h"
#include "tests/testing/test_tier.h"

namespace ps {
namespace {

using Model = testing::TierModel;

Model Listed(const SparseTier::View& view, uint32_t table) {
  return testing::ListedTierRows(view, table, 3);
}

// The view's rows of `table` read a bucket at a time (View::Rows), as
// ForEach lists them: buckets ascending, ids ascending in each, each row in
// its own bucket of `num_buckets`.
Model Streamed(const SparseTier::View& view, uint32_t table,
               uint32_t num_buckets) {
  Model listed;
  absl::StatusOr<std::unique_ptr<SparseTier::View::Rows>> rows =
      view.RowsOf(table);
  EXPECT_TRUE(rows.ok()) << rows.status();
  if (!rows.ok()) return listed;
  std::pair<uint32_t, uint64_t> last{0, 0};
  bool first = true;
  for (uint32_t b = 0; b <= num_buckets; ++b) {
    EXPECT_TRUE(
        (*rows)
            ->Through(
                b == num_buckets ? ~uint32_t{0} : b,
                [&](uint32_t bucket, uint64_t id, std::string_view value) {
                  EXPECT_EQ(bucket, b);
                  EXPECT_EQ(bucket, BucketOfId(id, table, num_buckets));
                  EXPECT_TRUE(first || std::pair(bucket, id) > last);
                  first = false;
                  last = {bucket, id};
                  float back[3];
                  int64_t clock, updates;
                  ASSERT_TRUE(
                      SparseTier::Decode(value, 3, &clock, &updates, back));
                  listed[id] = back[0];
                })
            .ok());
  }
  return listed;
}

// Random puts and deletes with views taken between them: with the writer
// paused for a while (the views' markers behind queued batches, later
// batches behind them), running, and with a 2 KiB queue (writes that wait
// for room, batches too large for the queue written at once); the tables
// of one bucket (the rows in id order) and of 8. Every view lists exactly
// the rows written before it, checked long after, when many more writes
// are in RocksDB, and streams them a bucket at a time in the snapshot's
// order; another table's rows are not listed.
TEST(SparseTierViewTest, AViewListsTheRowsWrittenBeforeItOnly) {
  for (const auto& [queue, buckets] :
       {std::pair(size_t{8} << 20, 1u), std::pair(size_t{2048}, 1u),
        std::pair(size_t{8} << 20, 8u), std::pair(size_t{2048}, 8u)}) {
    std::unique_ptr<SparseTier> tier =
        testing::OpenTestTier({.queue_bytes = queue});
    ASSERT_NE(tier, nullptr);
    if (buckets > 1) {
      tier->SetBuckets(1, buckets);
      tier->SetBuckets(2, buckets * 2);
    }
    Model model;
    std::vector<std::pair<std::unique_ptr<SparseTier::View>, Model>> views;
    std::mt19937_64 rng(queue + 1);
    const std::vector<uint64_t> ids = testing::TestTierIds();
    for (int round = 0; round < 60; ++round) {
      tier->PauseWriterForTest(queue > 4096 && round >= 10 && round < 30);
      SparseTier::Batch batch =
          testing::RandomTierBatch(rng, ids, round, &model, /*other_table=*/2);
      ASSERT_TRUE(tier->Write(batch).ok());
      if (round % 3 == 0) views.emplace_back(tier->ViewNow(), model);
      // A view dropped before the writer comes to it takes nothing.
      if (round % 5 == 0) tier->ViewNow().reset();
    }
    tier->PauseWriterForTest(false);
    ASSERT_TRUE(tier->Drain().ok());
    for (size_t v = 0; v < views.size(); ++v) {
      EXPECT_EQ(Listed(*views[v].first, 1), views[v].second)
          << "queue " << queue << ", view " << v;
      EXPECT_EQ(Streamed(*views[v].first, 1, buckets), views[v].second)
          << "queue " << queue << ", buckets " << buckets << ", view " << v;
    }
    // Reads find every row in its bucket too, queued or not.
    for (const uint64_t id : testing::TestTierIds()) {
      std::vector<std::string> values;
      ASSERT_TRUE(tier->MultiGet(1, {&id, 1}, &values).ok());
      EXPECT_EQ(values[0].empty(), !model.contains(id)) << id;
    }
  }
}

v1::SparseTableSpec Spec() {
  v1::SparseTableSpec spec;
  spec.set_name("emb");
  spec.set_dim(4);
  spec.set_num_buckets(16);
  spec.mutable_optimizer()->mutable_rowwise_adagrad()->set_learning_rate(0.1f);
  spec.mutable_optimizer()->mutable_rowwise_adagrad()->set_epsilon(1e-8f);
  // Admission counts are part of a snapshot; idle rows are deleted.
  spec.mutable_admission()->set_min_count(2);
  spec.mutable_eviction()->set_max_idle_clocks(12);
  return spec;
}

// One clock of a worker: a pull, then a push of the same ids (a few hot,
// many drawn from a wider range).
void Step(SparseTable& table, std::mt19937_64& rng, int64_t clock) {
  std::vector<uint64_t> keys;
  while (keys.size() < 24) {
    const uint64_t id = rng() % 8 == 0 ? rng() % 8 : 100 + rng() % 400;
    if (std::find(keys.begin(), keys.end(), id) == keys.end()) {
      keys.push_back(id);
    }
  }
  std::vector<float> rows(keys.size() * 4);
  table.Read(keys, rows.data());
  std::vector<float> grads(keys.size() * 4);
  for (float& g : grads) g = static_cast<float>(rng() % 100) / 50 - 1;
  table.Apply(keys, grads, clock, 1.0f);
}

void ExpectSameBlocks(const std::vector<StoredBlock>& got,
                      const std::vector<StoredBlock>& want) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    EXPECT_EQ(got[i].key, want[i].key) << "block " << i;
    EXPECT_EQ(got[i].rows, want[i].rows) << "block " << i;
    EXPECT_TRUE(got[i].values.empty() && got[i].optimizer_state.empty());
    EXPECT_EQ(got[i].optimizer_step, 0);
  }
}

// A table holding a few rows in memory and hundreds in the tier, beside a
// twin without a budget driven by the same steps. At several cuts the
// tiered table's cut and the tier's view are taken, and the twin's snapshot;
// the tiered table then goes on (demoting, promoting, evicting: writes to
// the tier after the cut, some queued behind the cut's marker with the
// writer paused); the cut, encoded afterwards over spare blocks of other
// contents, is the twin's snapshot at the cut byte for byte, and its
// rows_bytes those blocks' rows. The tables' own snapshots agree too.
TEST(SparseTableCutTest, ACutEncodedLaterIsTheTableAtTheCut) {
  std::unique_ptr<SparseTier> tier =
      testing::OpenTestTier({.queue_bytes = size_t{64} << 20});
  ASSERT_NE(tier, nullptr);
  auto tiered = SparseTable::Create(Spec(), 3, 5, false,
                                    {.tier = tier.get(), .cap_bytes = 4096});
  auto plain = SparseTable::Create(Spec(), 3, 5, false);
  ASSERT_TRUE(tiered.ok() && plain.ok());
  std::mt19937_64 rng_a(9);
  std::mt19937_64 rng_b(9);
  int64_t clock = 0;
  for (int cut_at : {40, 25, 30}) {
    for (int i = 0; i < cut_at; ++i, ++clock) {
      Step(**tiered, rng_a, clock);
      Step(**plain, rng_b, clock);
    }
    ASSERT_GT((*tiered)->tier_counts().cold_rows, 50);
    const bool paused = cut_at == 25;
    tier->PauseWriterForTest(paused);
    // The tier's batches queued before the cut, with the writer paused.
    for (int i = 0; i < 3; ++i, ++clock) {
      Step(**tiered, rng_a, clock);
      Step(**plain, rng_b, clock);
    }
    const SparseTableCut cut = (*tiered)->Cut();
    const std::unique_ptr<SparseTier::View> view = tier->ViewNow();
    const std::vector<StoredBlock> want = (*plain)->Snapshot();
    // Both go on: the tier changes after the cut.
    for (int i = 0; i < 8; ++i, ++clock) {
      Step(**tiered, rng_a, clock);
      Step(**plain, rng_b, clock);
    }
    tier->PauseWriterForTest(false);
    // Every write after the cut in RocksDB too, where the view must not
    // see it.
    ASSERT_TRUE(tier->Drain().ok());
    std::vector<StoredBlock> got(3);
    for (StoredBlock& spare : got) {
      spare.key = 77;
      spare.values.assign(5, 1.0f);
      spare.rows.assign(4000, 'x');
    }
    size_t next = 1;  // A block before the table's, left as it is.
    ASSERT_TRUE(cut.EncodeInto(*view, &got, &next).ok());
    EXPECT_EQ(got[0].rows, std::string(4000, 'x'));
    got.erase(got.begin());
    got.resize(next - 1);
    ExpectSameBlocks(got, want);
    // Streamed a bucket at a time: the same buckets, the same bytes.
    SparseSnapshotStream stream(*view, std::span(&cut, 1));
    ASSERT_EQ(stream.buckets().size(), want.size());
    for (size_t i = 0; i < want.size(); ++i) {
      EXPECT_EQ(stream.buckets()[i].key, want[i].key);
      EXPECT_EQ(stream.buckets()[i].rows, want[i].rows.size());
      if (want[i].rows.empty()) continue;
      absl::StatusOr<std::string_view> rows = stream.Next();
      ASSERT_TRUE(rows.ok()) << rows.status();
      EXPECT_EQ(*rows, want[i].rows) << "block " << i;
    }
    EXPECT_FALSE(stream.Next().ok());  // Past the last.
    int64_t rows_bytes = 0;
    for (const StoredBlock& b : want) {
      rows_bytes += static_cast<int64_t>(b.rows.size());
    }
    EXPECT_EQ(cut.rows_bytes(), rows_bytes);
    ExpectSameBlocks((*tiered)->Snapshot(), (*plain)->Snapshot());
  }
}

}  // namespace
}  // namespace ps
