// SparseTable's per-clock fast paths against their plain definitions: the
// snapshot's buckets are byte for byte the format's reference encoding (the
// Append* writers over the rows in id order), restore gives the same bytes
// back, an Apply that mixes new, repeated and rejected ids equals one Apply
// per id, AveragedRowsInto equals AveragedRows, and the initializer's values
// are the ones this format has always had. Without a tier and under a tiny
// memory cap (most rows cold).
#include <stdlib.h>

#include <algorithm>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "common/sparse_keys.h"
#include "gtest/gtest.h"
#include "server/sparse_bucket_codec.h"
#include "server/sparse_table.h"
#include "server/sparse_tier.h"

namespace ps {
namespace {

constexpr uint64_t kSeed = 7;
constexpr uint32_t kTable = 2;

class SparseTableEncodeTest : public testing::TestWithParam<int64_t> {
 protected:
  // A table of `spec`; under the parameter's cap (>= 0) with a tier.
  std::unique_ptr<SparseTable> Make(const v1::SparseTableSpec& spec) {
    SparseTableMemory memory;
    if (GetParam() >= 0) {
      std::string dir = testing::TempDir() + "sparse_encode_XXXXXX";
      EXPECT_NE(mkdtemp(dir.data()), nullptr);
      auto tier = SparseTier::Open({.path = dir});
      EXPECT_TRUE(tier.ok()) << tier.status();
      if (!tier.ok()) return nullptr;
      tiers_.push_back(*std::move(tier));
      memory = {.tier = tiers_.back().get(), .cap_bytes = GetParam()};
    }
    auto table = SparseTable::Create(spec, kTable, kSeed, true, memory);
    EXPECT_TRUE(table.ok()) << table.status();
    return table.ok() ? *std::move(table) : nullptr;
  }
  std::vector<std::unique_ptr<SparseTier>> tiers_;
};

v1::SparseTableSpec Spec(int min_count) {
  v1::SparseTableSpec spec;
  spec.set_name("emb");
  spec.set_dim(5);
  spec.set_num_buckets(16);
  spec.mutable_optimizer()->mutable_rowwise_adagrad()->set_learning_rate(0.1f);
  spec.mutable_admission()->set_min_count(min_count);
  spec.mutable_eviction()->set_max_idle_clocks(6);
  return spec;
}

// Clocks 1..clocks of random pushes over `pool` ids (some repeated within a
// push), gradients from `seed`.
void Pushes(SparseTable& table, int clocks, uint64_t pool, uint32_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> grad(0, 0.3f);
  for (int64_t clock = 1; clock <= clocks; ++clock) {
    std::vector<uint64_t> keys;
    for (int i = 0; i < 60; ++i) keys.push_back(rng() % pool * 977 + 5);
    std::vector<float> grads(keys.size() * 5);
    for (float& g : grads) g = grad(rng);
    table.Apply(keys, grads, clock, 1.0f);
  }
}

// The reference encoding of one decoded bucket (what the snapshot wrote
// before it encoded buckets in place).
std::string Reference(const SparseBucket& b) {
  std::string out;
  AppendSparseBucketHeader(b.optimizer_kind, b.dim, b.state_floats,
                           static_cast<uint32_t>(b.ids.size()),
                           static_cast<uint32_t>(b.pending_ids.size()), &out);
  const size_t stride = size_t{b.dim} + b.state_floats;
  for (size_t i = 0; i < b.ids.size(); ++i) {
    AppendSparseBucketRow(b.ids[i], b.last_clocks[i], b.update_counts[i],
                          b.floats.data() + i * stride, stride, &out);
  }
  for (size_t i = 0; i < b.pending_ids.size(); ++i) {
    AppendSparseBucketPending(b.pending_ids[i], b.pending_counts[i], &out);
  }
  return out;
}

TEST_P(SparseTableEncodeTest, SnapshotIsTheReferenceEncodingAndRestoresBytes) {
  auto table = Make(Spec(2));
  ASSERT_NE(table, nullptr);
  Pushes(*table, 12, 400, 1);
  ASSERT_GT(table->num_rows(), 100);
  const std::vector<StoredBlock> blocks = table->Snapshot();
  ASSERT_FALSE(blocks.empty());
  int64_t rows = 0;
  size_t pending = 0;
  uint64_t last_key = 0;
  for (const StoredBlock& block : blocks) {
    EXPECT_TRUE(block.key > last_key || &block == &blocks.front());
    last_key = block.key;
    EXPECT_EQ(BucketTable(block.key), kTable);
    if (block.rows.empty()) continue;
    absl::StatusOr<SparseBucket> b = DecodeSparseBucket(block.rows);
    ASSERT_TRUE(b.ok()) << b.status();
    EXPECT_EQ(block.rows, Reference(*b));
    EXPECT_TRUE(std::is_sorted(b->ids.begin(), b->ids.end()));
    // Every row's values are what a pull reads, bit for bit.
    std::vector<float> read(b->ids.size() * 5);
    table->Read(b->ids, read.data());
    for (size_t i = 0; i < b->ids.size(); ++i) {
      EXPECT_EQ(BucketOfId(b->ids[i], kTable, 16), BucketIndex(block.key));
      EXPECT_EQ(std::memcmp(read.data() + i * 5, b->floats.data() + i * 6,
                            5 * sizeof(float)),
                0);
    }
    rows += static_cast<int64_t>(b->ids.size());
    pending += b->pending_ids.size();
  }
  EXPECT_EQ(rows, table->num_rows());
  EXPECT_GT(pending, 0u);  // Ids seen once wait for their second update.
  auto restored = Make(Spec(2));
  ASSERT_NE(restored, nullptr);
  for (const StoredBlock& block : blocks) {
    ASSERT_TRUE(restored->Restore(block).ok());
  }
  const std::vector<StoredBlock> again = restored->Snapshot();
  ASSERT_EQ(again.size(), blocks.size());
  for (size_t i = 0; i < blocks.size(); ++i) {
    EXPECT_EQ(again[i].key, blocks[i].key);
    EXPECT_EQ(again[i].rows, blocks[i].rows);
  }
}

TEST_P(SparseTableEncodeTest, LargeBucketsAreInIdOrderWhateverTheIds) {
  // One bucket of thousands of rows (the snapshot's sort groups ids by
  // their leading bits): ids spread over 64 bits as hashed ids are,
  // consecutive ids with two far away, and ids apart in their top bits only.
  std::mt19937_64 rng(3);
  std::vector<std::vector<uint64_t>> sets(3);
  for (uint64_t i = 0; i < 3000; ++i) {
    sets[0].push_back(rng());
    sets[1].push_back(i + 1000);
    sets[2].push_back((i << 50) | 7);
  }
  sets[1].push_back(uint64_t{1} << 40);
  sets[1].push_back(~uint64_t{0} - 5);
  for (std::vector<uint64_t>& ids : sets) {
    std::sort(ids.begin(), ids.end());
    ids.erase(std::unique(ids.begin(), ids.end()), ids.end());
    std::vector<uint64_t> shuffled = ids;
    std::shuffle(shuffled.begin(), shuffled.end(), rng);
    v1::SparseTableSpec spec = Spec(1);
    spec.set_num_buckets(1);
    auto table = Make(spec);
    ASSERT_NE(table, nullptr);
    table->Apply(shuffled, std::vector<float>(shuffled.size() * 5, 0.01f), 1,
                 1.0f);
    const std::vector<StoredBlock> blocks = table->Snapshot();
    ASSERT_EQ(blocks.size(), 1u);
    absl::StatusOr<SparseBucket> b = DecodeSparseBucket(blocks[0].rows);
    ASSERT_TRUE(b.ok()) << b.status();
    EXPECT_EQ(b->ids, ids);
    EXPECT_EQ(blocks[0].rows, Reference(*b));
  }
}

TEST_P(SparseTableEncodeTest, OneApplyOfManyIdsIsOneApplyPerId) {
  // New ids, ids repeated in the push, ids not admitted yet (min_count 3).
  auto together = Make(Spec(3));
  auto apart = Make(Spec(3));
  ASSERT_NE(together, nullptr);
  ASSERT_NE(apart, nullptr);
  std::mt19937_64 rng(3);
  for (int64_t clock = 1; clock <= 5; ++clock) {
    std::vector<uint64_t> keys;
    for (int i = 0; i < 40; ++i) keys.push_back(rng() % 30 + 100);
    std::vector<float> grads(keys.size() * 5);
    for (size_t i = 0; i < grads.size(); ++i) grads[i] = 0.01f * (i % 17);
    together->Apply(keys, grads, clock, 0.5f);
    for (size_t i = 0; i < keys.size(); ++i) {
      apart->Apply({&keys[i], 1}, {grads.data() + i * 5, 5}, clock, 0.5f);
    }
  }
  EXPECT_EQ(together->num_rows(), apart->num_rows());
  EXPECT_EQ(together->admissions(), apart->admissions());
  EXPECT_EQ(together->rejections(), apart->rejections());
  EXPECT_GT(together->rejections(), 0);
  const std::vector<StoredBlock> a = together->Snapshot();
  const std::vector<StoredBlock> b = apart->Snapshot();
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) EXPECT_EQ(a[i].rows, b[i].rows);
}

TEST_P(SparseTableEncodeTest, AveragedRowsIntoIsAveragedRowsClockAfterClock) {
  auto table = Make(Spec(1));
  ASSERT_NE(table, nullptr);
  std::mt19937_64 rng(5);
  for (int clock = 0; clock < 3; ++clock) {
    for (int worker = 0; worker < 3; ++worker) {
      std::vector<uint64_t> keys;
      for (uint64_t k = 0; k < 300; ++k) {
        if (rng() % 3 != 0) keys.push_back(k * 1000003 + worker);
      }
      std::vector<float> grads(keys.size() * 5);
      for (float& g : grads) g = static_cast<float>(rng() % 1000) / 7.0f;
      table->Accumulate(keys, grads);
    }
    std::vector<uint64_t> keys;
    std::vector<float> values;
    table->AveragedRowsInto(3, &keys, &values);
    const SparseTable::RowsView view = table->AveragedRows(3);
    ASSERT_EQ(keys, std::vector<uint64_t>(view.keys.begin(), view.keys.end()));
    ASSERT_EQ(values.size(), view.values.size());
    EXPECT_EQ(std::memcmp(values.data(), view.values.data(),
                          values.size() * sizeof(float)),
              0);
    EXPECT_TRUE(std::is_sorted(keys.begin(), keys.end()));
    table->ClearAccumulated();
    EXPECT_TRUE(table->AveragedRows(3).keys.empty());
  }
}

TEST_P(SparseTableEncodeTest, InitialRowsKeepTheirValues) {
  // The initializer's values (seed 7, table 2, dim 5) as its definition
  // gives them (SparseHashCombine of the stream, the id and the index;
  // computed apart from this code, in Python), which every stored row,
  // replay and export depends on: they must not change.
  v1::SparseTableSpec spec = Spec(1);
  auto uniform = Make(spec);
  spec.mutable_init()->set_kind(v1::SparseInit::NORMAL);
  auto normal = Make(spec);
  ASSERT_NE(uniform, nullptr);
  ASSERT_NE(normal, nullptr);
  const std::vector<uint64_t> ids = {0, 77, 123456789012345ULL};
  std::vector<float> u(ids.size() * 5);
  std::vector<float> n(ids.size() * 5);
  uniform->Read(ids, u.data());
  normal->Read(ids, n.data());
  const std::vector<uint32_t> want_u = {
      0xbcf28a51, 0x3eaf94d4, 0xbeb8df93, 0xbe2919ba, 0xbecd044b,
      0x3dbcc03e, 0x3ea3b0c8, 0xbebd23bc, 0x3e996139, 0xbebbd93a,
      0xbe8450f5, 0xbcf6dad4, 0xbe8118dd, 0xbd90fda4, 0x3e1315ac};
  const std::vector<uint32_t> want_n = {
      0xbbad20e0, 0x3c3f227b, 0xbad2bc46, 0xbc0b8f09, 0x3afb8082,
      0x3c50c974, 0x3bf818b9, 0x3af104ec, 0x3c8e38c6, 0x3b12850b,
      0x3be10fb8, 0xbbbada3c, 0xbbd45a13, 0x3c2a5f01, 0x3c309c37};
  for (size_t i = 0; i < u.size(); ++i) {
    uint32_t bits_u = 0;
    uint32_t bits_n = 0;
    std::memcpy(&bits_u, &u[i], 4);
    std::memcpy(&bits_n, &n[i], 4);
    EXPECT_EQ(bits_u, want_u[i]) << i;
    EXPECT_EQ(bits_n, want_n[i]) << i;
  }
}

INSTANTIATE_TEST_SUITE_P(Budgets, SparseTableEncodeTest,
                         testing::Values(-1, 0, 512),
                         [](const testing::TestParamInfo<int64_t>& info) {
                           return info.param < 0
                                      ? std::string("Unlimited")
                                      : "Cap" + std::to_string(info.param);
                         });

}  // namespace
}  // namespace ps
