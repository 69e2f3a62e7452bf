// SparseTable: rows created from the initializer, admission, eviction, BSP
// averaging, and the bucket snapshot round trip. Every test runs without a
// memory budget and under tiny ones (a few rows in memory, or none, the rest
// in a RocksDB tier): the rows must behave the same.
#include "server/sparse_table.h"

#include <stdlib.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <iterator>
#include <memory>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "common/sparse_keys.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/memory_shard_store.h"
#include "server/sparse_tier.h"

namespace ps {
namespace {

using testing::ElementsAre;
using testing::HasSubstr;

constexpr uint64_t kSeed = 42;

// The memory cap of the tables the running test makes (-1: no tier), and the
// tiers made for them (one per table: tables of one test share indexes).
int64_t g_cap_bytes = -1;
std::vector<std::unique_ptr<SparseTier>>* g_tiers = nullptr;

class SparseTableTest : public testing::TestWithParam<int64_t> {
 protected:
  void SetUp() override {
    g_cap_bytes = GetParam();
    g_tiers = &tiers_;
  }
  void TearDown() override {
    g_tiers = nullptr;
    g_cap_bytes = -1;
  }
  std::vector<std::unique_ptr<SparseTier>> tiers_;
};

// A memory setting for a new table under the running test's budget.
SparseTableMemory TestMemory() {
  if (g_cap_bytes < 0 || g_tiers == nullptr) return {};
  std::string dir = testing::TempDir() + "sparse_tier_XXXXXX";
  EXPECT_NE(mkdtemp(dir.data()), nullptr);
  auto tier = SparseTier::Open({.path = dir});  // Removed with the tier.
  EXPECT_TRUE(tier.ok()) << tier.status();
  if (!tier.ok()) return {};
  g_tiers->push_back(*std::move(tier));
  return {.tier = g_tiers->back().get(), .cap_bytes = g_cap_bytes};
}

v1::SparseTableSpec Spec(int dim, int num_buckets = 8) {
  v1::SparseTableSpec spec;
  spec.set_name("emb");
  spec.set_dim(dim);
  spec.set_num_buckets(num_buckets);
  spec.mutable_optimizer()->mutable_sgd()->set_learning_rate(0.5f);
  return spec;
}

std::unique_ptr<SparseTable> Make(const v1::SparseTableSpec& spec,
                                  uint32_t table_index = 3,
                                  uint64_t seed = kSeed) {
  auto table = SparseTable::Create(spec, table_index, seed, true, TestMemory());
  EXPECT_TRUE(table.ok()) << table.status();
  return table.ok() ? std::move(*table) : nullptr;
}

std::vector<float> ReadRows(const SparseTable& table,
                            const std::vector<uint64_t>& keys) {
  std::vector<float> out(keys.size() * static_cast<size_t>(table.dim()));
  table.Read(keys, out.data());
  return out;
}

// Applies gradient `g` to every value of the rows of `keys`.
void ApplyConst(SparseTable& table, const std::vector<uint64_t>& keys,
                int64_t clock, float g = 1.0f) {
  std::vector<float> grads(keys.size() * static_cast<size_t>(table.dim()), g);
  table.Apply(keys, grads, clock, 1.0f);
}

TEST_P(SparseTableTest, BadSpecsAreInvalidNamingTheField) {
  struct Case {
    v1::SparseTableSpec spec;
    const char* field;
  };
  std::vector<Case> cases;
  cases.push_back({Spec(0), "dim"});
  cases.push_back({Spec(1025), "dim"});
  cases.push_back({Spec(4, 3), "num_buckets"});
  cases.push_back({Spec(4, 0), "num_buckets"});
  Case no_optimizer{Spec(4), "optimizer"};
  no_optimizer.spec.clear_optimizer();
  cases.push_back(no_optimizer);
  Case both{Spec(4), "at most one"};
  both.spec.mutable_admission()->set_min_count(2);
  both.spec.mutable_admission()->set_probability(0.5f);
  cases.push_back(both);
  Case scale{Spec(4), "init.scale"};
  scale.spec.mutable_init()->set_scale(-1.0f);
  cases.push_back(scale);
  for (const Case& c : cases) {
    auto table = SparseTable::Create(c.spec, 0, kSeed, false);
    ASSERT_FALSE(table.ok()) << c.field;
    EXPECT_EQ(table.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(table.status().message(), HasSubstr(c.field));
  }
}

TEST_P(SparseTableTest, InitializerIsTheSameRowWhateverTheTableHolds) {
  v1::SparseTableSpec spec = Spec(16);
  auto a = Make(spec);
  auto b = Make(spec);
  // a holds ids 0..199, b ids 1000..1099: different buckets and orders.
  std::vector<uint64_t> a_ids, b_ids;
  for (uint64_t id = 0; id < 200; ++id) a_ids.push_back(id);
  for (uint64_t id = 1099; id >= 1000; --id) b_ids.push_back(id);
  ApplyConst(*a, a_ids, 1, 0.0f);  // Zero gradients: rows stay initial.
  ApplyConst(*b, b_ids, 1, 0.0f);
  const std::vector<uint64_t> probe = {5, 77, 1003, 1050, 123456789};
  const std::vector<float> from_a = ReadRows(*a, probe);
  const std::vector<float> from_b = ReadRows(*b, probe);
  EXPECT_EQ(
      std::memcmp(from_a.data(), from_b.data(), from_a.size() * sizeof(float)),
      0);
  // UNIFORM's default scale 1/sqrt(16): every value within +-0.25, spread.
  const std::vector<float> rows = ReadRows(*a, a_ids);
  float lo = 1, hi = -1;
  for (float v : rows) {
    EXPECT_LE(std::fabs(v), 0.25f);
    lo = std::min(lo, v);
    hi = std::max(hi, v);
  }
  EXPECT_LT(lo, -0.2f);
  EXPECT_GT(hi, 0.2f);
  // Another table index or seed gives other rows.
  auto other_index = Make(spec, 4);
  auto other_seed = Make(spec, 3, kSeed + 1);
  EXPECT_NE(ReadRows(*other_index, probe), from_a);
  EXPECT_NE(ReadRows(*other_seed, probe), from_a);
}

TEST_P(SparseTableTest, NormalInitializerHasTheScale) {
  v1::SparseTableSpec spec = Spec(64);
  spec.mutable_init()->set_kind(v1::SparseInit::NORMAL);
  spec.mutable_init()->set_scale(0.5f);
  auto table = Make(spec);
  std::vector<uint64_t> ids;
  for (uint64_t id = 0; id < 500; ++id) ids.push_back(id * 7919);
  const std::vector<float> rows = ReadRows(*table, ids);  // 32000 values.
  double sum = 0, squares = 0;
  for (float v : rows) {
    sum += v;
    squares += double{v} * v;
  }
  const double mean = sum / rows.size();
  const double sd = std::sqrt(squares / rows.size() - mean * mean);
  EXPECT_NEAR(mean, 0.0, 0.02);
  EXPECT_NEAR(sd, 0.5, 0.02);
  EXPECT_EQ(table->num_rows(), 0);  // Reads never create rows.
}

TEST_P(SparseTableTest, ApplyCreatesTheRowThenSteps) {
  v1::SparseTableSpec spec = Spec(4);
  auto table = Make(spec);
  const std::vector<float> initial = ReadRows(*table, {9});
  table->Apply(std::vector<uint64_t>{9}, std::vector<float>{1, 2, 3, 4}, 1,
               0.5f);
  const std::vector<float> row = ReadRows(*table, {9});
  for (int i = 0; i < 4; ++i) {
    EXPECT_EQ(row[i], initial[i] - 0.5f * 0.5f * static_cast<float>(i + 1));
  }
  EXPECT_EQ(table->num_rows(), 1);
  EXPECT_EQ(table->admissions(), 1);
}

TEST_P(SparseTableTest, LazyAdamChangesOnlyTheRowsNamed) {
  v1::SparseTableSpec spec = Spec(8);
  auto* adam = spec.mutable_optimizer()->mutable_lazy_adam();
  adam->set_learning_rate(0.01f);
  adam->set_beta1(0.9f);
  adam->set_beta2(0.999f);
  adam->set_epsilon(1e-8f);
  auto table = Make(spec);
  ApplyConst(*table, {1, 2}, 1, 0.5f);
  const std::vector<float> row1 = ReadRows(*table, {1});
  ApplyConst(*table, {2}, 2, 0.5f);
  ApplyConst(*table, {2}, 3, 0.5f);
  EXPECT_EQ(ReadRows(*table, {1}), row1);  // No decay, no momentum.
  // Row 1's next step is its own step 2 (bias correction), as row 2's was.
  auto fresh = Make(spec);
  ApplyConst(*fresh, {2}, 1, 0.5f);
  ApplyConst(*fresh, {2}, 2, 0.5f);
  ApplyConst(*table, {1}, 4, 0.5f);
  const std::vector<float> row1_after = ReadRows(*table, {1});
  const std::vector<float> init1 = ReadRows(*Make(spec), {1});
  const std::vector<float> init2 = ReadRows(*Make(spec), {2});
  const std::vector<float> fresh2 = ReadRows(*fresh, {2});
  for (int i = 0; i < 8; ++i) {
    // Same gradients and steps: the same change from each initial value.
    EXPECT_NEAR(row1_after[i] - init1[i], fresh2[i] - init2[i], 1e-6);
  }
}

TEST_P(SparseTableTest, FtrlWithL1ReadsExactZeros) {
  v1::SparseTableSpec spec = Spec(4);
  spec.mutable_init()->set_kind(v1::SparseInit::ZEROS);
  auto* ftrl = spec.mutable_optimizer()->mutable_ftrl();
  ftrl->set_alpha(0.1f);
  ftrl->set_beta(1.0f);
  ftrl->set_l1(0.5f);
  auto table = Make(spec);
  table->Apply(std::vector<uint64_t>{7}, std::vector<float>{0.1f, -0.2f, 3, -3},
               1, 1.0f);
  const std::vector<float> row = ReadRows(*table, {7});
  EXPECT_EQ(row[0], 0.0f);
  EXPECT_EQ(row[1], 0.0f);
  EXPECT_LT(row[2], 0.0f);
  EXPECT_GT(row[3], 0.0f);
}

TEST_P(SparseTableTest, AdmissionByCountAdmitsAtTheMinCountthUpdate) {
  v1::SparseTableSpec spec = Spec(2);
  spec.mutable_admission()->set_min_count(3);
  auto table = Make(spec);
  auto reference = Make(Spec(2));  // Unconditional: reads the initializer.
  const std::vector<float> initial = ReadRows(*reference, {11});
  for (int64_t clock = 1; clock <= 2; ++clock) {
    table->Apply(std::vector<uint64_t>{11}, std::vector<float>{100, 100}, clock,
                 1.0f);
    EXPECT_FALSE(table->Contains(11));
    EXPECT_THAT(ReadRows(*table, {11}), ElementsAre(0.0f, 0.0f));
  }
  EXPECT_EQ(table->rejections(), 2);
  table->Apply(std::vector<uint64_t>{11}, std::vector<float>{1, 2}, 3, 1.0f);
  EXPECT_TRUE(table->Contains(11));
  EXPECT_EQ(table->admissions(), 1);
  // Only the third gradient reached the row.
  EXPECT_THAT(ReadRows(*table, {11}),
              ElementsAre(initial[0] - 0.5f, initial[1] - 1.0f));
}

TEST_P(SparseTableTest, ARepeatedIdInOnePushCountsAndStepsEachTime) {
  v1::SparseTableSpec spec = Spec(1);
  spec.mutable_admission()->set_min_count(2);
  auto table = Make(spec);
  const float initial = ReadRows(*Make(Spec(1)), {5})[0];
  table->Apply(std::vector<uint64_t>{5, 5, 5}, std::vector<float>{1, 2, 4}, 1,
               1.0f);
  // The first is counted and dropped, the second admits, the third steps.
  EXPECT_EQ(table->rejections(), 1);
  EXPECT_EQ(table->admissions(), 1);
  EXPECT_THAT(ReadRows(*table, {5}),
              ElementsAre((initial - 0.5f * 2) - 0.5f * 4));
}

TEST_P(SparseTableTest, AdmissionByProbabilityIsDeterministicAndAboutP) {
  v1::SparseTableSpec spec = Spec(1);
  spec.mutable_admission()->set_probability(0.25f);
  auto a = Make(spec);
  auto b = Make(spec);
  std::vector<uint64_t> ids;
  for (uint64_t id = 0; id < 8000; ++id) ids.push_back(id * 1000003);
  ApplyConst(*a, ids, 5);
  std::vector<uint64_t> reversed(ids.rbegin(), ids.rend());
  ApplyConst(*b, reversed, 5);
  EXPECT_EQ(a->num_rows(), b->num_rows());
  for (uint64_t id : ids) ASSERT_EQ(a->Contains(id), b->Contains(id)) << id;
  // 8000 draws at p = 0.25: 2000 expected, sd about 39.
  EXPECT_GT(a->num_rows(), 1800);
  EXPECT_LT(a->num_rows(), 2200);
  EXPECT_EQ(a->admissions() + a->rejections(), 8000);
  // Not admitted: reads zeros.
  for (uint64_t id : ids) {
    if (!a->Contains(id)) {
      EXPECT_THAT(ReadRows(*a, {id}), ElementsAre(0.0f));
      break;
    }
  }
}

TEST_P(SparseTableTest, IdleRowsAreEvicted) {
  v1::SparseTableSpec spec = Spec(2);
  spec.mutable_eviction()->set_max_idle_clocks(2);
  auto table = Make(spec);
  ApplyConst(*table, {1}, 1);
  ApplyConst(*table, {2}, 2);
  ApplyConst(*table, {3}, 3);
  EXPECT_EQ(table->num_rows(), 3);
  ApplyConst(*table, {4}, 4);  // Deletes rows last updated before clock 2.
  EXPECT_FALSE(table->Contains(1));
  EXPECT_TRUE(table->Contains(2));
  ApplyConst(*table, {2}, 5);  // Deletes before clock 3: none.
  EXPECT_TRUE(table->Contains(3));
  ApplyConst(*table, {}, 6);  // Deletes before clock 4: row 3.
  EXPECT_TRUE(table->Contains(2));
  EXPECT_FALSE(table->Contains(3));
  EXPECT_TRUE(table->Contains(4));
  EXPECT_EQ(table->evictions(), 2);
}

TEST_P(SparseTableTest, CapacityEvictsLeastRecentlyUpdatedThenSmallerId) {
  v1::SparseTableSpec spec = Spec(2);
  spec.mutable_eviction()->set_max_rows_per_server(3);
  auto table = Make(spec);
  ApplyConst(*table, {1, 2}, 1);
  ApplyConst(*table, {3}, 2);
  ApplyConst(*table, {1}, 3);
  ApplyConst(*table, {4}, 4);  // Row 2 (clock 1) goes.
  EXPECT_FALSE(table->Contains(2));
  ApplyConst(*table, {5}, 5);  // Row 3 (clock 2) goes.
  EXPECT_FALSE(table->Contains(3));
  EXPECT_EQ(table->num_rows(), 3);
  // A tie in clock: the smaller id goes first.
  // Rows 1, 4 and 5 go, then of the rows of clock 6 the smallest id.
  ApplyConst(*table, {20, 10, 40, 30}, 6);
  EXPECT_EQ(table->num_rows(), 3);
  EXPECT_TRUE(table->Contains(20));
  EXPECT_TRUE(table->Contains(30));
  EXPECT_TRUE(table->Contains(40));
  EXPECT_FALSE(table->Contains(10));
  EXPECT_EQ(table->evictions(), 6);  // 2, 3, then 1, 4, 5, 10.
}

TEST_P(SparseTableTest, CapacityEvictsLeastFrequentlyUpdatedThenLru) {
  v1::SparseTableSpec spec = Spec(2);
  spec.mutable_eviction()->set_max_rows_per_server(3);
  spec.mutable_eviction()->set_policy(v1::EvictionSpec::LFU);
  auto table = Make(spec);
  ApplyConst(*table, {1, 2, 3}, 1);
  ApplyConst(*table, {1, 3}, 2);
  ApplyConst(*table, {1}, 3);  // Counts: 1 -> 3, 2 -> 1, 3 -> 2.
  ApplyConst(*table, {4}, 4);  // 2 and 4 have one update; 2 is older.
  EXPECT_FALSE(table->Contains(2));
  EXPECT_TRUE(table->Contains(4));
  ApplyConst(*table, {5}, 5);  // 4 (one update, clock 4) goes before 5.
  EXPECT_FALSE(table->Contains(4));
  EXPECT_TRUE(table->Contains(1));
  EXPECT_TRUE(table->Contains(3));
  EXPECT_TRUE(table->Contains(5));
}

TEST_P(SparseTableTest, AveragedRowsAreSumsOverWorkersKeysAscending) {
  auto table = Make(Spec(2));
  table->Accumulate(std::vector<uint64_t>{5, 3},
                    std::vector<float>{1, 2, 3, 4});
  table->Accumulate(std::vector<uint64_t>{5}, std::vector<float>{3, 4});
  SparseTable::RowsView view = table->AveragedRows(2);
  EXPECT_THAT(view.keys, ElementsAre(3u, 5u));
  EXPECT_THAT(view.values, ElementsAre(1.5f, 2.0f, 2.0f, 3.0f));
  table->ClearAccumulated();
  EXPECT_TRUE(table->AveragedRows(2).keys.empty());
  EXPECT_EQ(table->num_rows(), 0);  // Accumulating changes no rows.
}

// Each clock's sums start from zero (0 + g: a -0 gradient sums to +0),
// whatever the last clock summed; many keys (spread and clustered) come out
// ascending.
TEST_P(SparseTableTest, AveragedRowsStartEachClockFromZero) {
  auto table = Make(Spec(2));
  table->Accumulate(std::vector<uint64_t>{3, 9},
                    std::vector<float>{5, 6, 7, 8});
  EXPECT_EQ(table->AveragedRows(1).keys.size(), 2u);
  table->ClearAccumulated();
  table->Accumulate(std::vector<uint64_t>{4}, std::vector<float>{1, -0.0f});
  SparseTable::RowsView view = table->AveragedRows(1);
  EXPECT_THAT(view.keys, ElementsAre(4u));
  ASSERT_EQ(view.values.size(), 2u);
  EXPECT_EQ(view.values[0], 1.0f);
  EXPECT_FALSE(std::signbit(view.values[1]));
  table->ClearAccumulated();
  std::vector<uint64_t> keys;
  for (uint64_t i = 0; i < 3000; ++i) {
    keys.push_back(i % 2 == 0 ? i * 0x9e3779b97f4a7c15ULL : 1000 + i);
  }
  table->Accumulate(keys, std::vector<float>(keys.size() * 2, 1.0f));
  table->Accumulate(std::vector<uint64_t>(keys.begin(), keys.begin() + 10),
                    std::vector<float>(20, 2.0f));
  view = table->AveragedRows(2);
  std::vector<uint64_t> sorted = keys;
  std::sort(sorted.begin(), sorted.end());
  ASSERT_TRUE(std::equal(view.keys.begin(), view.keys.end(), sorted.begin(),
                         sorted.end()));
  for (size_t i = 0; i < sorted.size(); ++i) {
    const bool twice = std::find(keys.begin(), keys.begin() + 10, sorted[i]) !=
                       keys.begin() + 10;
    EXPECT_EQ(view.values[i * 2], twice ? 1.5f : 0.5f) << sorted[i];
  }
}

// A table with every kind of state: Adagrad, admission counts pending, LFU
// capacity and idle eviction.
v1::SparseTableSpec RichSpec() {
  v1::SparseTableSpec spec = Spec(3, 16);
  spec.mutable_optimizer()->mutable_adagrad()->set_learning_rate(0.1f);
  spec.mutable_optimizer()->mutable_adagrad()->set_epsilon(1e-6f);
  spec.mutable_admission()->set_min_count(2);
  spec.mutable_eviction()->set_max_rows_per_server(60);
  spec.mutable_eviction()->set_max_idle_clocks(6);
  spec.mutable_eviction()->set_policy(v1::EvictionSpec::LFU);
  return spec;
}

void RandomPushes(SparseTable& table, int64_t first_clock, int clocks,
                  uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<uint64_t> id(0, 150);
  std::normal_distribution<float> grad(0, 1);
  for (int64_t clock = first_clock; clock < first_clock + clocks; ++clock) {
    std::vector<uint64_t> keys(40);
    for (uint64_t& key : keys) key = id(rng) * 0x9e3779b97f4a7c15ULL;
    std::vector<float> grads(keys.size() * 3);
    for (float& g : grads) g = grad(rng);
    table.Apply(keys, grads, clock, 1.0f);
  }
}

std::vector<uint64_t> AllIds() {
  std::vector<uint64_t> ids;
  for (uint64_t i = 0; i <= 150; ++i) ids.push_back(i * 0x9e3779b97f4a7c15ULL);
  return ids;
}

TEST_P(SparseTableTest, SnapshotRestoreContinuesBitForBit) {
  auto live = Make(RichSpec());
  RandomPushes(*live, 1, 20, 7);
  ASSERT_GT(live->evictions(), 0);
  std::vector<StoredBlock> blocks = live->Snapshot();
  // Through a real store, restored in reverse order into a fresh table.
  auto store = MemoryShardStore::Create();
  ShardWrite write{.job_id = "job"};
  for (const StoredBlock& block : blocks) {
    EXPECT_EQ(BucketTable(block.key), 3u);
    write.blocks.push_back({.key = block.key, .rows = block.rows});
  }
  ASSERT_TRUE(store->Write(write).ok());
  absl::StatusOr<StoredJob> stored = store->Load("job");
  ASSERT_TRUE(stored.ok()) << stored.status();
  auto restored = Make(RichSpec());
  for (auto it = stored->blocks.rbegin(); it != stored->blocks.rend(); ++it) {
    const absl::Status st = restored->Restore(*it);
    ASSERT_TRUE(st.ok()) << st;
  }
  EXPECT_EQ(restored->num_rows(), live->num_rows());
  for (int round = 0; round < 2; ++round) {
    const std::vector<float> a = ReadRows(*live, AllIds());
    const std::vector<float> b = ReadRows(*restored, AllIds());
    ASSERT_EQ(std::memcmp(a.data(), b.data(), a.size() * sizeof(float)), 0);
    const std::vector<StoredBlock> sa = live->Snapshot();
    const std::vector<StoredBlock> sb = restored->Snapshot();
    ASSERT_EQ(sa.size(), sb.size());
    for (size_t i = 0; i < sa.size(); ++i) {
      EXPECT_EQ(sa[i].key, sb[i].key);
      EXPECT_EQ(sa[i].rows, sb[i].rows);
    }
    RandomPushes(*live, 21, 15, 8);  // The same further pushes on both.
    RandomPushes(*restored, 21, 15, 8);
  }
}

// ServerJob::SnapshotLocked encodes a snapshot into the blocks of the last
// one written (SnapshotInto): whatever those held (other buckets' rows,
// longer or shorter, a dense block's values, blocks to spare), the blocks
// written are the snapshot's, byte for byte, and restore the same rows.
TEST_P(SparseTableTest, SnapshotIntoTheLastSnapshotsBlocksIsTheSnapshot) {
  auto live = Make(RichSpec());
  RandomPushes(*live, 1, 4, 11);
  std::vector<StoredBlock> reused = live->Snapshot();  // Fewer rows.
  reused.insert(reused.begin(), StoredBlock{.key = 7,
                                            .values = {1.0f, 2.0f},
                                            .optimizer_state = {3.0f},
                                            .optimizer_step = 5});
  reused.push_back(StoredBlock{.key = 9, .rows = std::string(4096, 'x')});
  for (int round = 0; round < 3; ++round) {
    RandomPushes(*live, 5 + 20 * round, 20, 12 + round);  // Rows come, go.
    const std::vector<StoredBlock> fresh = live->Snapshot();
    size_t next = 1;  // After a dense block, as in SnapshotLocked.
    live->SnapshotInto(&reused, &next);
    ASSERT_EQ(next, 1 + fresh.size());
    EXPECT_EQ(reused[0].key, 7u);  // Not written over.
    for (size_t i = 0; i < fresh.size(); ++i) {
      const StoredBlock& got = reused[1 + i];
      EXPECT_EQ(got.key, fresh[i].key);
      EXPECT_EQ(got.rows, fresh[i].rows) << "block " << i;
      EXPECT_TRUE(got.values.empty());
      EXPECT_TRUE(got.optimizer_state.empty());
      EXPECT_EQ(got.optimizer_step, 0);
    }
    auto restored = Make(RichSpec());
    for (size_t i = 1; i < next; ++i) {
      const absl::Status st = restored->Restore(reused[i]);
      ASSERT_TRUE(st.ok()) << st;
    }
    const std::vector<float> a = ReadRows(*live, AllIds());
    const std::vector<float> b = ReadRows(*restored, AllIds());
    ASSERT_EQ(std::memcmp(a.data(), b.data(), a.size() * sizeof(float)), 0);
    reused.resize(next + round);  // Spare blocks past the end, or none.
  }
}

TEST_P(SparseTableTest, EvictedBucketsSnapshotAsEmptyBlocks) {
  v1::SparseTableSpec spec = Spec(2, 4);
  spec.mutable_eviction()->set_max_idle_clocks(1);
  auto table = Make(spec);
  ApplyConst(*table, {77}, 1);
  ApplyConst(*table, {}, 5);  // Row 77 idle: evicted.
  EXPECT_EQ(table->num_rows(), 0);
  std::vector<StoredBlock> blocks = table->Snapshot();
  ASSERT_EQ(blocks.size(), 1u);
  EXPECT_EQ(blocks[0].key, BucketKey(3, BucketOfId(77, 3, 4)));
  EXPECT_EQ(blocks[0].rows, "");
  auto restored = Make(spec);
  EXPECT_TRUE(restored->Restore(blocks[0]).ok());
  EXPECT_EQ(restored->num_rows(), 0);
}

// A bucket whose rows a Restore brought emptied by eviction: its block is
// empty (the store holds the restored rows); a Restore of an empty block
// brings nothing to clear.
TEST_P(SparseTableTest, RestoredBucketsEmptiedByEvictionSnapshotAsEmpty) {
  v1::SparseTableSpec spec = Spec(2, 4);
  spec.mutable_eviction()->set_max_idle_clocks(1);
  auto source = Make(spec);
  ApplyConst(*source, {77}, 1);
  const std::vector<StoredBlock> stored = source->Snapshot();
  ASSERT_EQ(stored.size(), 1u);
  ASSERT_FALSE(stored[0].rows.empty());
  auto table = Make(spec);
  ASSERT_TRUE(table->Restore(stored[0]).ok());
  const uint32_t other = (BucketIndex(stored[0].key) + 1) % 4;
  ASSERT_TRUE(table->Restore(StoredBlock{.key = BucketKey(3, other)}).ok());
  EXPECT_EQ(table->Snapshot().size(), 1u);  // The row; nothing for `other`.
  ApplyConst(*table, {}, 5);                // Row 77 idle: evicted.
  EXPECT_EQ(table->num_rows(), 0);
  const std::vector<StoredBlock> blocks = table->Snapshot();
  ASSERT_EQ(blocks.size(), 1u);
  EXPECT_EQ(blocks[0].key, stored[0].key);
  EXPECT_EQ(blocks[0].rows, "");
}

// The empty blocks of snapshot `blocks` are the buckets of `held` that hold
// nothing, and every bucket with rows is one of `held`.
void ExpectEmptyBlocksAre(const std::vector<StoredBlock>& blocks,
                          const std::set<uint32_t>& held) {
  std::set<uint32_t> empty;
  std::set<uint32_t> full;
  for (const StoredBlock& block : blocks) {
    (block.rows.empty() ? empty : full).insert(BucketIndex(block.key));
  }
  EXPECT_EQ(empty.size() + full.size(), blocks.size());
  EXPECT_TRUE(
      std::includes(held.begin(), held.end(), full.begin(), full.end()));
  std::set<uint32_t> expected;
  std::set_difference(held.begin(), held.end(), full.begin(), full.end(),
                      std::inserter(expected, expected.end()));
  EXPECT_EQ(empty, expected);
}

// Writes snapshot `blocks` over what `store` holds of job "job"; with
// `check`, the store's blocks then restore a table of `spec` whose snapshot
// is the blocks with rows of `blocks`, byte for byte.
void WriteAndCheckStore(ShardStore& store, const v1::SparseTableSpec& spec,
                        const std::vector<StoredBlock>& blocks, bool check) {
  ShardWrite write{.job_id = "job"};
  for (const StoredBlock& block : blocks) {
    write.blocks.push_back({.key = block.key, .rows = block.rows});
  }
  ASSERT_TRUE(store.Write(write).ok());
  if (!check) return;
  absl::StatusOr<StoredJob> stored = store.Load("job");
  ASSERT_TRUE(stored.ok()) << stored.status();
  auto restored = Make(spec);
  for (const StoredBlock& block : stored->blocks) {
    ASSERT_TRUE(restored->Restore(block).ok());
  }
  std::vector<StoredBlock> full;
  for (const StoredBlock& block : blocks) {
    if (!block.rows.empty()) full.push_back(block);
  }
  const std::vector<StoredBlock> again = restored->Snapshot();
  ASSERT_EQ(again.size(), full.size());
  for (size_t i = 0; i < again.size(); ++i) {
    EXPECT_EQ(again[i].key, full[i].key);
    EXPECT_EQ(again[i].rows, full[i].rows);
  }
}

// Random changes of a table for the test below, and the buckets it was
// given anything in: ids of a pool of 41 pushed (each enters as a row or an
// admission count), every row made idle (evicted), or a block of another
// table's snapshot restored (often old rows, sometimes an empty block).
class HeldScenario {
 public:
  HeldScenario(const v1::SparseTableSpec& spec, uint32_t seed)
      : live_(Make(spec)), other_(Make(spec)), rng_(seed) {}

  SparseTable& live() { return *live_; }
  const std::set<uint32_t>& held() const { return held_; }

  void Step() {
    const uint32_t op = rng_() % 8;
    if (op < 5) {
      const std::vector<uint64_t> ids = RandomIds();
      for (uint64_t id : ids) {
        held_.insert(BucketOfId(id, 3, live_->num_buckets()));
      }
      ApplyConst(*live_, ids, ++clock_);
    } else if (op == 5) {
      clock_ += 5;
      ApplyConst(*live_, {}, clock_);
    } else {
      const auto back = static_cast<int64_t>(rng_() % 6);
      ApplyConst(*other_, RandomIds(), std::max<int64_t>(0, clock_ - back));
      const std::vector<StoredBlock> blocks = other_->Snapshot();
      const StoredBlock& block = blocks[rng_() % blocks.size()];
      ASSERT_TRUE(live_->Restore(block).ok());
      if (!block.rows.empty()) held_.insert(BucketIndex(block.key));
    }
  }

 private:
  std::vector<uint64_t> RandomIds() {
    std::vector<uint64_t> ids(1 + rng_() % 5);
    for (uint64_t& id : ids) id = (rng_() % 41) * 0x9e3779b97f4a7c15ULL;
    return ids;
  }

  std::unique_ptr<SparseTable> live_;
  std::unique_ptr<SparseTable> other_;
  std::mt19937 rng_;
  std::set<uint32_t> held_;
  int64_t clock_ = 0;
};

// Snapshot's empty blocks are exactly the buckets that held something (a
// row or an admission count) since Create and hold nothing now, whatever
// emptied them (idle or capacity eviction of rows pushed or restored, hot or
// cold) and whenever (before the last snapshot or since); a bucket that only
// took empty blocks in Restores has none. Each snapshot written over the
// last in a store restores the live table: its empty blocks clear what the
// store held.
TEST_P(SparseTableTest, EmptyBlocksAreTheBucketsThatHeldSomethingAndNoLonger) {
  for (const int min_count : {0, 3}) {
    SCOPED_TRACE(min_count);
    v1::SparseTableSpec spec = Spec(2, 16);
    spec.mutable_admission()->set_min_count(min_count);
    spec.mutable_eviction()->set_max_idle_clocks(4);
    spec.mutable_eviction()->set_max_rows_per_server(10);
    HeldScenario scenario(spec, static_cast<uint32_t>(5 + min_count));
    auto store = MemoryShardStore::Create();
    for (int step = 0; step < 80; ++step) {
      SCOPED_TRACE(step);
      scenario.Step();
      const std::vector<StoredBlock> blocks = scenario.live().Snapshot();
      ExpectEmptyBlocksAre(blocks, scenario.held());
      WriteAndCheckStore(*store, spec, blocks, step % 10 == 9);
      ASSERT_FALSE(HasFailure());
    }
    EXPECT_GT(scenario.live().evictions(), 10);
  }
}

TEST_P(SparseTableTest, MalformedBucketsAreDataLoss) {
  auto live = Make(RichSpec());
  RandomPushes(*live, 1, 5, 9);
  StoredBlock good;
  for (const StoredBlock& block : live->Snapshot()) {
    if (!block.rows.empty()) good = block;
  }
  ASSERT_FALSE(good.rows.empty());
  auto expect_loss = [](const StoredBlock& block, const char* what) {
    auto table = Make(RichSpec());
    absl::Status status = table->Restore(block);
    EXPECT_EQ(status.code(), absl::StatusCode::kDataLoss) << what;
    EXPECT_EQ(table->num_rows(), 0) << what;  // Nothing changed.
  };
  StoredBlock truncated = good;
  truncated.rows.pop_back();
  expect_loss(truncated, "truncated");
  StoredBlock longer = good;
  longer.rows.push_back('\0');
  expect_loss(longer, "one byte more");
  StoredBlock version = good;
  version.rows[0] = 9;
  expect_loss(version, "version");
  StoredBlock kind = good;
  kind.rows[1] = 1;  // SGD's rows into an Adagrad table.
  expect_loss(kind, "optimizer kind");
  StoredBlock short_header = good;
  short_header.rows.resize(5);
  expect_loss(short_header, "short header");
  StoredBlock other_bucket = good;  // Another bucket's key for these rows.
  other_bucket.key = BucketKey(3, (BucketIndex(good.key) + 1) % 16);
  expect_loss(other_bucket, "ids of another bucket");
  StoredBlock dense = good;
  dense.values = {1.0f};
  expect_loss(dense, "dense values");
  StoredBlock foreign = good;
  foreign.key = BucketKey(4, 0);
  EXPECT_EQ(Make(RichSpec())->Restore(foreign).code(),
            absl::StatusCode::kInvalidArgument);
}

// No tier; every row cold (cap 0); about 10 rows in memory (fewer than one
// push names: rows stepped outside memory); about 60.
INSTANTIATE_TEST_SUITE_P(Budgets, SparseTableTest,
                         testing::Values(-1, 0, 1024, 4096),
                         [](const testing::TestParamInfo<int64_t>& info) {
                           return info.param < 0
                                      ? std::string("Unlimited")
                                      : "Cap" + std::to_string(info.param);
                         });

}  // namespace
}  // namespace ps
