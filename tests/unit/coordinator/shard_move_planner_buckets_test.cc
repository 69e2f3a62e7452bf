// A server move's plan (PlanMove) for a job with sparse tables: the map of
// PlanShards (dense blocks and every table's buckets, weighed by expected
// load) moved 2 -> 3 -> 2 servers keeps every unit once, in order, moves
// few of them (only the leaving server's on a scale-down), and leaves no
// unit on the most loaded server that would narrow the spread; a map of
// 2^18 equal buckets is planned too (the refinement is O(moves log units)).
#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <vector>

#include "common/job_spec.h"
#include "common/sparse_keys.h"
#include "coordinator/shard_move_planner.h"
#include "coordinator/shard_planner.h"
#include "gtest/gtest.h"

namespace ps {
namespace {

std::vector<std::string> Servers(int n) {
  std::vector<std::string> servers;
  servers.reserve(n);
  for (int i = 0; i < n; ++i) {
    servers.push_back("10.0.0." + std::to_string(i + 1) + ":7000");
  }
  return servers;
}

// A CTR-like EXTERNAL model: a dense MLP and 26 tables of dim 16.
v1::JobSpec Spec() {
  v1::JobSpec spec;
  v1::ModelSpec* model = spec.mutable_model();
  model->set_kind(v1::ModelSpec::EXTERNAL);
  v1::TensorDecl* w = model->add_tensors();
  w->set_name("mlp.weight");
  w->add_shape(256);
  w->add_shape(128);
  for (int t = 0; t < 26; ++t) {
    v1::SparseTableSpec* table = model->add_sparse_tables();
    table->set_name("C" + std::to_string(t + 1));
    table->set_dim(16);
    table->set_expected_rows(int64_t{10000} * (t % 5 + 1));
    table->mutable_optimizer()->mutable_rowwise_adagrad()->set_learning_rate(
        0.1f);
  }
  spec.set_name("ctr");
  spec.set_epochs(1);
  spec.set_batch_size(32);
  spec.mutable_optimizer()->mutable_sgd()->set_learning_rate(0.1f);
  spec.set_num_workers(2);
  spec.set_num_servers(2);
  spec.set_block_elems(4096);  // 8 dense blocks.
  ApplyJobSpecDefaults(&spec);
  return spec;
}

std::vector<int64_t> Loads(const v1::ShardMap& map) {
  std::vector<int64_t> loads(map.servers_size(), 0);
  for (const v1::BlockPlacement& b : map.blocks()) {
    loads[b.server()] += b.num_elems();
  }
  return loads;
}

// No unit of the most loaded server is smaller than the spread (moving one
// would narrow it): PlanMove's end condition.
void ExpectNarrow(const v1::ShardMap& map) {
  const std::vector<int64_t> loads = Loads(map);
  const auto most = std::max_element(loads.begin(), loads.end());
  const int64_t gap = *most - *std::min_element(loads.begin(), loads.end());
  for (const v1::BlockPlacement& b : map.blocks()) {
    if (b.server() == most - loads.begin()) {
      EXPECT_GE(b.num_elems(), gap) << "unit " << b.key();
    }
  }
}

// The same units in the same order, each on a server of the map.
void ExpectSameUnits(const v1::ShardMap& from, const v1::ShardMap& to) {
  ASSERT_EQ(from.blocks_size(), to.blocks_size());
  for (int u = 0; u < to.blocks_size(); ++u) {
    EXPECT_EQ(to.blocks(u).key(), from.blocks(u).key());
    EXPECT_EQ(to.blocks(u).num_elems(), from.blocks(u).num_elems());
    EXPECT_GE(to.blocks(u).server(), 0);
    EXPECT_LT(to.blocks(u).server(), to.servers_size());
  }
}

TEST(ShardMovePlannerBucketsTest, BucketsMoveTwoToThreeToTwo) {
  const v1::JobSpec spec = Spec();
  auto start = PlanShards(spec, Servers(2), 1);
  ASSERT_TRUE(start.ok()) << start.status();
  int buckets = 0;
  for (const v1::BlockPlacement& b : start->blocks()) {
    buckets += IsBucketKey(b.key()) ? 1 : 0;
  }
  ASSERT_EQ(buckets, 26 * 128);

  auto up = PlanMove(*start, Servers(3), 2);
  ASSERT_TRUE(up.ok()) << up.status();
  ExpectSameUnits(*start, *up);
  ExpectNarrow(*up);
  EXPECT_EQ(up->version(), 2);
  // About a third of the load moves to the new server, and no more units
  // than it holds.
  int on_new = 0;
  for (const v1::BlockPlacement& b : up->blocks()) on_new += b.server() == 2;
  EXPECT_GT(on_new, 0);
  EXPECT_EQ(UnitsMoved(*start, *up), on_new);
  const std::vector<int64_t> loads = Loads(*up);
  const int64_t total = loads[0] + loads[1] + loads[2];
  EXPECT_GT(loads[2] * 4, total);  // More than a quarter.

  auto down = PlanMove(*up, Servers(2), 3);
  ASSERT_TRUE(down.ok()) << down.status();
  ExpectSameUnits(*up, *down);
  ExpectNarrow(*down);
  // Only the leaving server's units move.
  for (int u = 0; u < down->blocks_size(); ++u) {
    if (up->blocks(u).server() != 2) {
      EXPECT_EQ(down->blocks(u).server(), up->blocks(u).server()) << u;
    }
  }
  EXPECT_EQ(UnitsMoved(*up, *down), on_new);
}

TEST(ShardMovePlannerBucketsTest, ManyEqualBucketsArePlanned) {
  v1::ShardMap map;
  map.set_version(1);
  for (const std::string& s : Servers(2)) map.add_servers(s);
  constexpr uint32_t kBuckets = 1 << 18;
  for (uint32_t b = 0; b < kBuckets; ++b) {
    v1::BlockPlacement* p = map.add_blocks();
    p->set_key(BucketKey(0, b));
    p->set_server(static_cast<int32_t>(b % 2));
    p->set_num_elems(17);
  }
  auto up = PlanMove(map, Servers(3), 2);
  ASSERT_TRUE(up.ok()) << up.status();
  const std::vector<int64_t> loads = Loads(*up);
  // Equal units: every server within one unit of the others.
  EXPECT_LE(*std::max_element(loads.begin(), loads.end()) -
                *std::min_element(loads.begin(), loads.end()),
            17);
  // The added server takes a third of the units, give or take one.
  const int64_t third = kBuckets / 3;
  EXPECT_LE(std::abs(UnitsMoved(map, *up) - third), 1);
}

}  // namespace
}  // namespace ps
