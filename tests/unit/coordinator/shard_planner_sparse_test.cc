// Sparse tables' buckets in the shard map: each placed exactly once, with
// its expected load, balanced together with the dense blocks, the map in key
// order (docs/architecture.md, "The shard map's shape").
#include <algorithm>
#include <cstdint>
#include <set>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "common/job_spec.h"
#include "common/model_layout.h"
#include "common/sparse_keys.h"
#include "common/sparse_spec.h"
#include "coordinator/shard_planner.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace ps {
namespace {

std::vector<std::string> Servers(int n) {
  std::vector<std::string> servers;
  for (int i = 0; i < n; ++i) {
    servers.push_back("10.0.0." + std::to_string(i + 1) + ":7000");
  }
  return servers;
}

// An EXTERNAL model with a dense part (a 4096-value tensor and a bias) and
// three tables of different sizes and optimizers, defaults applied for
// `servers` servers.
v1::JobSpec SparseSpec(int servers) {
  v1::JobSpec spec;
  v1::ModelSpec* model = spec.mutable_model();
  model->set_kind(v1::ModelSpec::EXTERNAL);
  v1::TensorDecl* w = model->add_tensors();
  w->set_name("top.weight");
  w->add_shape(64);
  w->add_shape(64);
  v1::TensorDecl* b = model->add_tensors();
  b->set_name("top.bias");
  b->add_shape(64);
  struct Table {
    const char* name;
    int dim;
    int64_t rows;
  };
  for (const Table& t : {Table{"users", 16, 50000}, Table{"items", 8, 3000},
                         Table{"ads", 32, 1000}}) {
    v1::SparseTableSpec* table = model->add_sparse_tables();
    table->set_name(t.name);
    table->set_dim(t.dim);
    table->set_expected_rows(t.rows);
  }
  auto* tables = model->mutable_sparse_tables();
  (*tables)[0]
      .mutable_optimizer()
      ->mutable_rowwise_adagrad()
      ->set_learning_rate(0.1f);
  (*tables)[1].mutable_optimizer()->mutable_lazy_adam()->set_learning_rate(
      0.01f);
  (*tables)[2].mutable_optimizer()->mutable_ftrl()->set_alpha(0.1f);
  (*tables)[2].set_num_buckets(4);  // Explicit: few, large buckets.
  spec.set_epochs(1);
  spec.set_batch_size(32);
  spec.mutable_optimizer()->mutable_sgd()->set_learning_rate(0.1f);
  spec.set_num_workers(1);
  spec.set_num_servers(servers);
  spec.set_block_elems(1024);
  ApplyJobSpecDefaults(&spec);
  EXPECT_TRUE(ValidateJobSpec(spec).ok()) << ValidateJobSpec(spec);
  return spec;
}

TEST(ShardPlannerSparseTest, PlacesEveryBucketOnceWithItsExpectedLoad) {
  for (int n : {1, 2, 3, 5}) {
    SCOPED_TRACE(testing::Message() << n << " servers");
    const v1::JobSpec spec = SparseSpec(n);
    auto map = PlanShards(spec, Servers(n), 3);
    ASSERT_TRUE(map.ok()) << map.status();
    EXPECT_EQ(map->version(), 3);
    auto tensors = ModelTensors(spec.model());
    ASSERT_TRUE(tensors.ok());
    const std::vector<BlockSpec> blocks =
        SplitIntoBlocks(*tensors, spec.block_elems());
    // The blocks first, as without tables, then every table's buckets.
    std::vector<uint64_t> expected_keys;
    for (const BlockSpec& b : blocks) expected_keys.push_back(b.key);
    const auto& tables = spec.model().sparse_tables();
    for (int t = 0; t < tables.size(); ++t) {
      for (int32_t k = 0; k < tables[t].num_buckets(); ++k) {
        expected_keys.push_back(BucketKey(t, k));
      }
    }
    std::vector<uint64_t> keys;
    for (const v1::BlockPlacement& p : map->blocks()) {
      keys.push_back(p.key());
      EXPECT_GE(p.server(), 0);
      EXPECT_LT(p.server(), n);
      if (IsBucketKey(p.key())) {
        EXPECT_EQ(p.num_elems(), BucketLoad(tables[BucketTable(p.key())]));
      }
    }
    EXPECT_EQ(keys, expected_keys);
    EXPECT_TRUE(std::is_sorted(keys.begin(), keys.end()));
    EXPECT_EQ(std::set<uint64_t>(keys.begin(), keys.end()).size(), keys.size());
  }
  // users: 64 buckets a server by default; 50000 rows over 64 buckets is
  // 782 a bucket (rounded up) of 16 values and 1 of row-wise Adagrad state.
  const v1::JobSpec one = SparseSpec(1);
  EXPECT_EQ(one.model().sparse_tables(0).num_buckets(), 64);
  EXPECT_EQ(BucketLoad(one.model().sparse_tables(0)), 782 * 17);
  // ads: 4 buckets of 250 rows of 32 values and 64 of FTRL state.
  EXPECT_EQ(BucketLoad(one.model().sparse_tables(2)), 250 * 96);
}

TEST(ShardPlannerSparseTest, BlocksAndBucketsAreBalancedTogether) {
  for (int n : {2, 3, 4, 7, 8}) {
    SCOPED_TRACE(testing::Message() << n << " servers");
    auto map = PlanShards(SparseSpec(n), Servers(n), 1);
    ASSERT_TRUE(map.ok()) << map.status();
    std::vector<int64_t> load(n, 0);
    int64_t total = 0, largest = 0;
    for (const v1::BlockPlacement& p : map->blocks()) {
      load[p.server()] += p.num_elems();
      total += p.num_elems();
      largest = std::max(largest, p.num_elems());
    }
    // Within one unit of the mean: max - total / n <= largest.
    for (int s = 0; s < n; ++s) {
      EXPECT_LE(load[s] * n - total, largest * n)
          << "server " << s << " holds " << load[s] << " of " << total;
    }
  }
}

TEST(ShardPlannerSparseTest, ManySmallBucketsBalanceClosely) {
  // The example CTR layout's sparse part: 26 tables of dim 16, row-wise
  // Adagrad, default buckets for 4 servers, on an EXTERNAL model.
  v1::JobSpec spec = SparseSpec(4);
  spec.mutable_model()->clear_sparse_tables();
  for (int f = 0; f < 26; ++f) {
    v1::SparseTableSpec* t = spec.mutable_model()->add_sparse_tables();
    t->set_name("C" + std::to_string(f + 1));
    t->set_dim(16);
    t->set_expected_rows(int64_t{10000} * (f + 1));  // Uneven tables.
    t->mutable_optimizer()->mutable_rowwise_adagrad()->set_learning_rate(0.1f);
  }
  ApplyJobSpecDefaults(&spec);
  auto map = PlanShards(spec, Servers(4), 1);
  ASSERT_TRUE(map.ok()) << map.status();
  EXPECT_EQ(map->blocks_size(), 4 + 1 + 26 * 256);  // 4 + 1 blocks.
  std::vector<int64_t> load(4, 0);
  int64_t total = 0;
  for (const v1::BlockPlacement& p : map->blocks()) {
    load[p.server()] += p.num_elems();
    total += p.num_elems();
  }
  // Within 0.1 % of a fair share.
  for (int64_t l : load) EXPECT_LE(l * 4 * 1000, total * 1001);
}

TEST(ShardPlannerSparseTest, IsDeterministic) {
  auto a = PlanShards(SparseSpec(3), Servers(3), 1);
  auto b = PlanShards(SparseSpec(3), Servers(3), 1);
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_EQ(a->SerializeAsString(), b->SerializeAsString());
}

TEST(ShardPlannerSparseTest, DenseOnlyMapsHoldNoBuckets) {
  v1::JobSpec spec = SparseSpec(2);
  spec.mutable_model()->clear_sparse_tables();
  auto map = PlanShards(spec, Servers(2), 1);
  ASSERT_TRUE(map.ok()) << map.status();
  EXPECT_EQ(map->blocks_size(), 5);
  for (const v1::BlockPlacement& p : map->blocks()) {
    EXPECT_FALSE(IsBucketKey(p.key()));
  }
}

TEST(ShardPlannerSparseTest, ATableWithoutBucketsIsAnError) {
  v1::JobSpec spec = SparseSpec(2);
  spec.mutable_model()->mutable_sparse_tables(1)->set_num_buckets(0);
  auto map = PlanShards(spec, Servers(2), 1);
  EXPECT_EQ(map.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(map.status().message()),
              ::testing::StartsWith("model.sparse_tables[1].num_buckets"));
}

}  // namespace
}  // namespace ps
