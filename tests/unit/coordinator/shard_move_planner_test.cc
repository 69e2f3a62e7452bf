// The server-move planner (coordinator/shard_move_planner.h): the units of
// servers that leave are placed, the spread narrowed, few units moved,
// deterministically; refusals.
#include "coordinator/shard_move_planner.h"

#include <algorithm>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "gmock/gmock.h"
#include "google/protobuf/util/message_differencer.h"
#include "gtest/gtest.h"

namespace ps {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

// A map of units of `sizes` on servers `owners` (one per unit), with
// `num_servers` servers "s0:1", "s1:1", ...
v1::ShardMap Map(const std::vector<int64_t>& sizes,
                 const std::vector<int>& owners, int num_servers) {
  v1::ShardMap map;
  map.set_version(1);
  for (int s = 0; s < num_servers; ++s) {
    map.add_servers("s" + std::to_string(s) + ":1");
  }
  for (size_t u = 0; u < sizes.size(); ++u) {
    v1::BlockPlacement* b = map.add_blocks();
    b->set_key(uint64_t{u} << 32);
    b->set_num_elems(sizes[u]);
    b->set_server(owners[u]);
  }
  return map;
}

std::vector<std::string> Servers(int n) {
  std::vector<std::string> servers;
  servers.reserve(n);
  for (int s = 0; s < n; ++s) servers.push_back("s" + std::to_string(s) + ":1");
  return servers;
}

std::vector<int64_t> Loads(const v1::ShardMap& map) {
  std::vector<int64_t> loads(map.servers_size(), 0);
  for (const v1::BlockPlacement& b : map.blocks()) {
    loads[b.server()] += b.num_elems();
  }
  return loads;
}

std::vector<int> Owners(const v1::ShardMap& map) {
  std::vector<int> owners;
  for (const v1::BlockPlacement& b : map.blocks()) owners.push_back(b.server());
  return owners;
}

// The planner's stopping rule holds: the most loaded server (the first of
// the largest) holds no unit smaller than its gap to the least loaded.
void ExpectNarrowed(const v1::ShardMap& map) {
  const std::vector<int64_t> loads = Loads(map);
  const int most = static_cast<int>(
      std::max_element(loads.begin(), loads.end()) - loads.begin());
  const int least = static_cast<int>(
      std::min_element(loads.begin(), loads.end()) - loads.begin());
  const int64_t gap = loads[most] - loads[least];
  for (const v1::BlockPlacement& b : map.blocks()) {
    if (b.server() == most) {
      EXPECT_GE(b.num_elems(), gap) << "unit " << b.key() << " could move";
    }
  }
}

TEST(ShardMovePlannerTest, ScaleUpMovesOnlyToTheAddedServer) {
  // Six equal units, three on each of two servers: a third server takes one
  // from each, and nothing else moves.
  const v1::ShardMap current = Map({8, 8, 8, 8, 8, 8}, {0, 0, 0, 1, 1, 1}, 2);
  auto next = PlanMove(current, Servers(3), 2);
  ASSERT_TRUE(next.ok()) << next.status();
  EXPECT_EQ(next->version(), 2);
  EXPECT_THAT(next->servers(), ElementsAre("s0:1", "s1:1", "s2:1"));
  EXPECT_THAT(Loads(*next), ElementsAre(16, 16, 16));
  EXPECT_EQ(UnitsMoved(current, *next), 2);
  for (int u = 0; u < next->blocks_size(); ++u) {
    // Units keep their order and keys; a moved unit went to the new server.
    EXPECT_EQ(next->blocks(u).key(), current.blocks(u).key());
    EXPECT_EQ(next->blocks(u).num_elems(), current.blocks(u).num_elems());
    if (next->blocks(u).server() != current.blocks(u).server()) {
      EXPECT_EQ(next->blocks(u).server(), 2) << "unit " << u;
    }
  }
}

TEST(ShardMovePlannerTest, ScaleDownEmptiesTheLeavingServers) {
  // Three servers to two: only the third server's units move, largest first
  // to the least loaded.
  const v1::ShardMap current =
      Map({10, 10, 10, 10, 7, 3}, {0, 0, 1, 1, 2, 2}, 3);
  auto next = PlanMove(current, Servers(2), 3);
  ASSERT_TRUE(next.ok()) << next.status();
  EXPECT_THAT(next->servers(), ElementsAre("s0:1", "s1:1"));
  for (const v1::BlockPlacement& b : next->blocks()) {
    EXPECT_LT(b.server(), 2);
  }
  EXPECT_EQ(UnitsMoved(current, *next), 2);
  EXPECT_THAT(Owners(*next), ElementsAre(0, 0, 1, 1, 0, 1));
  EXPECT_THAT(Loads(*next), ElementsAre(27, 23));
  ExpectNarrowed(*next);
}

TEST(ShardMovePlannerTest, ScaleDownToOneServer) {
  const v1::ShardMap current = Map({4, 5, 6}, {0, 1, 2}, 3);
  auto next = PlanMove(current, Servers(1), 2);
  ASSERT_TRUE(next.ok()) << next.status();
  EXPECT_THAT(Owners(*next), ElementsAre(0, 0, 0));
  EXPECT_EQ(UnitsMoved(current, *next), 2);
}

TEST(ShardMovePlannerTest, ABalancedMapDoesNotMove) {
  // Same servers, loads within a unit of each other: nothing moves.
  const v1::ShardMap current = Map({5, 5, 5, 5, 5}, {0, 1, 0, 1, 0}, 2);
  auto next = PlanMove(current, Servers(2), 2);
  ASSERT_TRUE(next.ok()) << next.status();
  EXPECT_EQ(UnitsMoved(current, *next), 0);
  EXPECT_EQ(next->version(), 2);
}

TEST(ShardMovePlannerTest, AUnitLargerThanTheGapStays) {
  // One big unit on server 0 and a small one on server 1: moving the big
  // unit would not narrow the spread (it would only swap the loads).
  const v1::ShardMap current = Map({100, 10}, {0, 1}, 2);
  auto next = PlanMove(current, Servers(2), 2);
  ASSERT_TRUE(next.ok()) << next.status();
  EXPECT_EQ(UnitsMoved(current, *next), 0);
  // Scaling up, the empty new server's gap to the big unit's server is 100,
  // not more than the unit: nothing moves (units move only from the most
  // loaded server).
  auto up = PlanMove(current, Servers(3), 3);
  ASSERT_TRUE(up.ok()) << up.status();
  EXPECT_EQ(UnitsMoved(current, *up), 0);
  ExpectNarrowed(*up);
}

TEST(ShardMovePlannerTest, NarrowsASkewedMapWithTheLargestUsefulUnits) {
  // Everything on server 0 of two: the largest unit smaller than the gap
  // moves first, and here it alone evens the loads (one move, not four).
  const v1::ShardMap current = Map({8, 4, 2, 1, 1}, {0, 0, 0, 0, 0}, 2);
  auto next = PlanMove(current, Servers(2), 2);
  ASSERT_TRUE(next.ok()) << next.status();
  EXPECT_THAT(Loads(*next), ElementsAre(8, 8));
  EXPECT_THAT(Owners(*next), ElementsAre(1, 0, 0, 0, 0));
  EXPECT_EQ(UnitsMoved(current, *next), 1);
  // Skewed otherwise: 20 + 1 + 1 against 2: the 20 would only swap the
  // loads, so the two small units move.
  const v1::ShardMap skewed = Map({20, 1, 1, 2}, {0, 0, 0, 1}, 2);
  auto narrowed = PlanMove(skewed, Servers(2), 2);
  ASSERT_TRUE(narrowed.ok()) << narrowed.status();
  EXPECT_THAT(Owners(*narrowed), ElementsAre(0, 1, 1, 1));
  ExpectNarrowed(*narrowed);
}

TEST(ShardMovePlannerTest, DeterministicAndNarrowedOnRandomMaps) {
  std::mt19937 rng(29);
  for (int trial = 0; trial < 200; ++trial) {
    const int old_n = 1 + static_cast<int>(rng() % 5);
    const int new_n = 1 + static_cast<int>(rng() % 5);
    const int units = 1 + static_cast<int>(rng() % 40);
    std::vector<int64_t> sizes;
    std::vector<int> owners;
    for (int u = 0; u < units; ++u) {
      sizes.push_back(1 + static_cast<int64_t>(rng() % 1000));
      owners.push_back(static_cast<int>(rng() % old_n));
    }
    const v1::ShardMap current = Map(sizes, owners, old_n);
    auto next = PlanMove(current, Servers(new_n), 2);
    ASSERT_TRUE(next.ok()) << next.status();
    ASSERT_EQ(next->blocks_size(), units);
    int homeless = 0;
    for (int u = 0; u < units; ++u) {
      ASSERT_GE(next->blocks(u).server(), 0);
      ASSERT_LT(next->blocks(u).server(), new_n);
      if (owners[u] >= new_n) ++homeless;
    }
    // Every unit of a leaving server moves; the narrowing moves each unit
    // at most once per round, and never more units than there are.
    EXPECT_GE(UnitsMoved(current, *next), homeless) << "trial " << trial;
    EXPECT_LE(UnitsMoved(current, *next), units) << "trial " << trial;
    ExpectNarrowed(*next);
    auto again = PlanMove(current, Servers(new_n), 2);
    ASSERT_TRUE(again.ok());
    EXPECT_TRUE(
        google::protobuf::util::MessageDifferencer::Equals(*next, *again))
        << "trial " << trial;
  }
}

TEST(ShardMovePlannerTest, RefusesNoServers) {
  const v1::ShardMap current = Map({1, 2}, {0, 1}, 2);
  auto next = PlanMove(current, {}, 2);
  EXPECT_TRUE(absl::IsInvalidArgument(next.status())) << next.status();
  EXPECT_THAT(next.status().message(), HasSubstr("num_servers"));
}

TEST(ShardMovePlannerTest, UnitsMovedCountsChangedOwners) {
  const v1::ShardMap a = Map({1, 1, 1}, {0, 1, 0}, 2);
  const v1::ShardMap b = Map({1, 1, 1}, {0, 0, 1}, 2);
  EXPECT_EQ(UnitsMoved(a, a), 0);
  EXPECT_EQ(UnitsMoved(a, b), 2);
}

}  // namespace
}  // namespace ps
