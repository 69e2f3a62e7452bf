// SparseTable on a HugePagePool (server/huge_pages.h): a table whose index
// arrays and row chunks come from pre-faulted huge pages holds the same rows,
// bit for bit, as one whose memory is faulted by its first writes — through
// growth past the small chunks, updates, capacity eviction (freed slots
// reused) and a snapshot; and tables that reuse the blocks other tables
// free hold the same rows too.
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <memory>
#include <random>
#include <vector>

#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "gtest/gtest.h"
#include "server/huge_pages.h"
#include "server/sparse_table.h"

namespace ps {
namespace {

v1::SparseTableSpec Spec(int64_t max_rows) {
  v1::SparseTableSpec spec;
  spec.set_name("emb");
  spec.set_dim(16);
  spec.set_num_buckets(64);
  spec.mutable_optimizer()->mutable_rowwise_adagrad()->set_learning_rate(0.05f);
  spec.mutable_eviction()->set_max_rows_per_server(max_rows);
  return spec;
}

// A table of at most `max_rows` rows (the first test's 150,000: past
// capacity from clock 11 on).
std::unique_ptr<SparseTable> Make(HugePagePool* pool,
                                  int64_t max_rows = 150'000) {
  auto table = SparseTable::Create(Spec(max_rows), 2, 7, /*accumulate=*/false,
                                   {.pages = pool});
  EXPECT_TRUE(table.ok()) << table.status();
  return table.ok() ? *std::move(table) : nullptr;
}

// Push `clock`: 20,000 distinct ids, half of them new (the table grows
// past its four small chunks; about 15,000 rows a clock).
void Push(SparseTable& table, int64_t clock) {
  std::mt19937_64 rng(static_cast<uint64_t>(clock));
  std::vector<uint64_t> keys;
  for (uint64_t i = 0; i < 10'000; ++i) {
    keys.push_back(static_cast<uint64_t>(clock) * 10'000 + i);  // New.
    keys.push_back(rng() % (static_cast<uint64_t>(clock) * 10'000 + 1) +
                   (uint64_t{1} << 40));  // Old ids of another range.
  }
  std::sort(keys.begin(), keys.end());
  keys.erase(std::unique(keys.begin(), keys.end()), keys.end());
  std::vector<float> grads(keys.size() * 16);
  for (size_t i = 0; i < grads.size(); ++i) {
    grads[i] = static_cast<float>(rng() % 2001) / 1000.0f - 1.0f;
  }
  table.Apply(keys, grads, clock, 1.0f);
}

// Bit for bit the same rows and snapshot, and the same reads, from `a` and
// `b`.
void ExpectSameRows(SparseTable& a, SparseTable& b) {
  ASSERT_EQ(a.num_rows(), b.num_rows());
  const std::vector<StoredBlock> sa = a.Snapshot();
  const std::vector<StoredBlock> sb = b.Snapshot();
  ASSERT_EQ(sa.size(), sb.size());
  for (size_t i = 0; i < sa.size(); ++i) {
    EXPECT_EQ(sa[i].key, sb[i].key);
    ASSERT_EQ(sa[i].rows, sb[i].rows) << "bucket block " << i;
  }
  std::vector<uint64_t> ids;
  for (uint64_t id = 0; id < 210'000; id += 7) ids.push_back(id);
  std::vector<float> ra(ids.size() * 16), rb(ids.size() * 16);
  a.Read(ids, ra.data());
  b.Read(ids, rb.data());
  EXPECT_EQ(std::memcmp(ra.data(), rb.data(), ra.size() * sizeof(float)), 0);
}

TEST(SparseTablePagesTest, PrefaultedPagesHoldTheSameRows) {
  HugePagePool pool({.max_ready_bytes = 16 * kHugePageBytes});
  auto plain = Make(nullptr);
  auto pooled = Make(&pool);
  ASSERT_NE(plain, nullptr);
  ASSERT_NE(pooled, nullptr);
  for (int64_t clock = 1; clock <= 20; ++clock) {
    Push(*plain, clock);
    Push(*pooled, clock);
    // Once the table maps huge pages (its thread started), some units ready
    // before the next growth (the thread runs on otherwise idle CPU: a
    // generous bound, not a timing check).
    const absl::Time deadline = absl::Now() + absl::Seconds(120);
    while (pool.counts().bytes_mapped > 0 && pool.counts().units_ready == 0 &&
           absl::Now() < deadline) {
      absl::SleepFor(absl::Milliseconds(5));
    }
  }
  EXPECT_GT(pool.counts().units_taken, 0);
  EXPECT_GT(pooled->evictions(), 0);
  EXPECT_EQ(pooled->evictions(), plain->evictions());
  ExpectSameRows(*plain, *pooled);
}

// Two tables growing in turn on one pool that keeps freed blocks (no
// thread: Map zeroes the recycled units it takes, so the test does not
// depend on idle CPU): an index's old arrays, given back as it doubles, are
// taken by the other table's index and row chunks, and every row is the same
// as without the pool.
TEST(SparseTablePagesTest, RecycledPagesHoldTheSameRows) {
  HugePagePool pool(
      {.max_ready_bytes = 0, .max_recycled_bytes = 8 * kHugePageBytes});
  // Room for 300,000 rows: at clock 16 a table passes 229,376 (7/8 of
  // 262,143), and its index's array of that capacity (3.4 MB of 13-byte
  // entries, the first past kHugePageBytes) goes back to the pool.
  auto plain_a = Make(nullptr, 300'000);
  auto plain_b = Make(nullptr, 300'000);
  auto pooled_a = Make(&pool, 300'000);
  auto pooled_b = Make(&pool, 300'000);
  ASSERT_NE(plain_a, nullptr);
  ASSERT_NE(plain_b, nullptr);
  ASSERT_NE(pooled_a, nullptr);
  ASSERT_NE(pooled_b, nullptr);
  for (int64_t clock = 1; clock <= 20; ++clock) {
    Push(*plain_a, clock);
    Push(*pooled_a, clock);
    Push(*plain_b, clock + 100);
    Push(*pooled_b, clock + 100);
  }
  const HugePagePool::Counts counts = pool.counts();
  EXPECT_GT(counts.units_recycled, 0);
  EXPECT_GT(counts.units_taken, 0);
  EXPECT_EQ(counts.units_faulted, 0);
  EXPECT_EQ(counts.units_zeroed, 0);
  EXPECT_LE(counts.units_ready, 8);
  ExpectSameRows(*plain_a, *pooled_a);
  ExpectSameRows(*plain_b, *pooled_b);
}

}  // namespace
}  // namespace ps
