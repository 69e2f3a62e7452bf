// A lost server's place rebuilt from shared storage, in the coordinator
// (coordinator/server_rebuild.h, coordinator/job_manager_rebuild.cc): the
// choice of the server that takes the place, the map it makes, the
// assignment that tells it where to import from, and that the lost server,
// registering again, gets no place back; without a free server on the same
// shared storage a surviving server of the job hosts the place beside its
// own; without either the job fails after the grace, saying why.
#include "coordinator/server_rebuild.h"

#include <string>
#include <vector>

#include "absl/time/clock.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testing/job_manager_fixture.h"

namespace ps {
namespace {

using ::testing::HasSubstr;

v1::ShardMap TwoServerMap() {
  v1::ShardMap map;
  map.set_version(3);
  map.add_servers("10.0.0.1:7000");
  map.add_servers("10.0.0.2:7000");
  for (int b = 0; b < 4; ++b) {
    v1::BlockPlacement* p = map.add_blocks();
    p->set_key(b);
    p->set_server(b % 2);
    p->set_num_elems(10 + b);
  }
  return map;
}

v1::ServerStorage Shared(const std::string& root, const std::string& dir) {
  v1::ServerStorage s;
  s.set_shared_data_root(root);
  s.set_data_dir(dir);
  return s;
}

TEST(ServerRebuildTest, ValidatesTheAnnouncedStorage) {
  v1::RegisterRequest r;
  EXPECT_TRUE(ValidateSharedStorage(r).ok());
  r.set_shared_data_root("/shared");
  r.set_data_dir("/shared/a");
  EXPECT_TRUE(ValidateSharedStorage(r).ok());
  r.set_data_dir("/sharedx/a");
  EXPECT_THAT(ValidateSharedStorage(r).message(), HasSubstr("not under"));
  r.set_data_dir("/shared");
  EXPECT_THAT(ValidateSharedStorage(r).message(), HasSubstr("not under"));
  r.set_data_dir("/shared/../etc");
  EXPECT_THAT(ValidateSharedStorage(r).message(), HasSubstr(".."));
  r.set_shared_data_root("shared");
  r.set_data_dir("shared/a");
  EXPECT_THAT(ValidateSharedStorage(r).message(), HasSubstr("absolute"));
  r.clear_shared_data_root();
  EXPECT_EQ(ValidateSharedStorage(r).code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(ServerRebuildTest, ChoosesTheFirstFreeServerOnTheSameSharedStorage) {
  const v1::ShardMap map = TwoServerMap();
  const v1::ServerStorage lost = Shared("/shared/", "/shared/s1");
  const std::vector<RebuildCandidate> candidates = {
      {"10.0.0.3:7000", "/other"},
      {"10.0.0.1:7000", "/shared"},  // Already in the map.
      {"10.0.0.4:7000", "/shared"},
      {"10.0.0.5:7000", "/shared"}};
  auto chosen = ChooseReplacement(lost, candidates, map);
  ASSERT_TRUE(chosen.ok()) << chosen.status();
  EXPECT_EQ(*chosen, 2);

  auto none = ChooseReplacement(lost, {candidates[0], candidates[1]}, map);
  EXPECT_EQ(none.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(none.status().message(),
              HasSubstr("no free server with shared data root /shared"));
  auto own = ChooseReplacement(v1::ServerStorage(), candidates, map);
  EXPECT_THAT(own.status().message(), HasSubstr("not on shared storage"));
}

TEST(ServerRebuildTest, ASurvivorOnTheSameStorageHostingFewestPlacesIsChosen) {
  v1::ShardMap map = TwoServerMap();
  map.add_servers("10.0.0.3:7000");
  map.set_servers(1, "10.0.0.3:7000");  // Server 2 hosts place 1 already.
  const v1::ServerStorage lost = Shared("/shared", "/shared/b");
  std::vector<SurvivorCandidate> survivors = {{.place = 0,
                                               .address = "10.0.0.1:7000",
                                               .shared_data_root = "/other",
                                               .durable = true},
                                              {.place = 2,
                                               .address = "10.0.0.3:7000",
                                               .shared_data_root = "/shared",
                                               .durable = true},
                                              {.place = 3,
                                               .address = "10.0.0.4:7000",
                                               .shared_data_root = "/shared/",
                                               .durable = true}};
  // Server 2 already hosts two places; server 3 one.
  map.add_servers("10.0.0.4:7000");
  auto chosen = ChooseSurvivor(lost, survivors, map);
  ASSERT_TRUE(chosen.ok()) << chosen.status();
  EXPECT_EQ(*chosen, 2);
  // On a tie, the lowest place.
  survivors[2].place = 5;
  map.set_servers(1, "10.0.0.2:7000");
  chosen = ChooseSurvivor(lost, survivors, map);
  ASSERT_TRUE(chosen.ok());
  EXPECT_EQ(*chosen, 1);
  // A server without a data directory cannot host.
  survivors[1].durable = false;
  survivors[2].durable = false;
  auto none = ChooseSurvivor(lost, survivors, map);
  EXPECT_EQ(none.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(none.status().message(),
              HasSubstr("no surviving server of the job has shared data root "
                        "/shared (3 surviving servers)"));
  EXPECT_THAT(ChooseSurvivor(Shared("", ""), survivors, map).status().message(),
              HasSubstr("not on shared storage"));
}

TEST(ServerRebuildTest, TheReplacementTakesThePlaceAndEveryUnitOfIt) {
  const v1::ShardMap map = TwoServerMap();
  auto next = PlanRebuild(map, 1, "10.0.0.4:7000");
  ASSERT_TRUE(next.ok()) << next.status();
  EXPECT_EQ(next->version(), 4);
  ASSERT_EQ(next->servers_size(), 2);
  EXPECT_EQ(next->servers(0), "10.0.0.1:7000");
  EXPECT_EQ(next->servers(1), "10.0.0.4:7000");
  ASSERT_EQ(next->blocks_size(), map.blocks_size());
  for (int b = 0; b < map.blocks_size(); ++b) {
    EXPECT_EQ(next->blocks(b).SerializeAsString(),
              map.blocks(b).SerializeAsString());
  }
  EXPECT_EQ(UnitsOn(*next, 1), 2);
  EXPECT_EQ(PlanRebuild(map, 2, "x:1").status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(ServerRebuildTest, TheSourceIsTheLastRebuildOfThePlaceSinceTheLastMove) {
  v1::JobStatus status;
  EXPECT_EQ(RebuildSourceOf(status, 0), nullptr);
  v1::ShardMapMove* scale = status.add_map_moves();
  scale->set_version(2);
  v1::ShardMapMove* first = status.add_map_moves();
  first->set_version(3);
  first->set_rebuild(true);
  first->set_rebuilt_server(1);
  first->set_rebuilt_from_data_dir("/shared/s1");
  v1::ShardMapMove* other = status.add_map_moves();
  other->set_version(4);
  other->set_rebuild(true);
  other->set_rebuilt_server(0);
  other->set_rebuilt_from_data_dir("/shared/s0");
  ASSERT_NE(RebuildSourceOf(status, 1), nullptr);
  EXPECT_EQ(RebuildSourceOf(status, 1)->version(), 3);
  EXPECT_EQ(RebuildSourceOf(status, 0)->rebuilt_from_data_dir(), "/shared/s0");
  status.add_map_moves()->set_version(5);  // A scale re-stages every unit.
  EXPECT_EQ(RebuildSourceOf(status, 1), nullptr);
}

class RebuildJobTest : public testing::JobManagerFixture {
 protected:
  RebuildJobTest() {
    timing_.lease = absl::Milliseconds(1500);
    timing_.recovery_grace = absl::Milliseconds(300);
    timing_.heartbeat_interval = absl::Milliseconds(50);
  }

  std::string RegisterShared(const std::string& address,
                             const std::string& root) {
    v1::RegisterRequest request;
    request.set_role(v1::SERVER);
    request.set_address(address);
    request.set_durable(true);
    request.set_storage_id(StorageOf(address));
    if (!root.empty()) {
      request.set_shared_data_root(root);
      request.set_data_dir(root + "/" + StorageOf(address));
    }
    auto response = manager_->Register(request);
    EXPECT_TRUE(response.ok()) << response.status();
    return response.ok() ? response->node_id() : "";
  }

  // Heartbeats `alive` (real time) until `lost` lost its lease and the
  // grace passed, ticking.
  void LoseOne(const std::string& lost, const std::vector<std::string>& alive,
               const std::string& job) {
    const absl::Time end =
        absl::Now() + timing_.lease + timing_.recovery_grace * 3;
    while (absl::Now() < end) {
      for (const std::string& node : alive) {
        EXPECT_TRUE(manager_->Heartbeat(node).ok()) << node;
      }
      manager_->Tick(absl::Now());
      auto status = manager_->Get(job);
      if (status.ok() &&
          (status->state() != v1::RUNNING || status->map_moves_size() > 0)) {
        return;
      }
      absl::SleepFor(absl::Milliseconds(20));
    }
    (void)lost;
  }

  // A running job on two servers (server 0 on `survivor_root`, default
  // `root`; server 1 on `root`) and one worker; a free third server of
  // `free_root` registered after it started (none if it is "-").
  std::string Start(const std::string& root, const std::string& free_root,
                    std::string survivor_root = "=") {
    if (survivor_root == "=") survivor_root = root;
    CreateManager();
    v1::JobSpec spec = testing::TinyJobSpec(2, 1);
    spec.set_block_elems(5);  // 4 blocks.
    auto id = manager_->Submit(spec);
    EXPECT_TRUE(id.ok()) << id.status();
    servers_ = {RegisterShared("10.0.0.1:7000", survivor_root),
                RegisterShared("10.0.0.2:7000", root)};
    worker_ = Register(v1::WORKER);
    manager_->Tick(absl::Now());
    if (free_root != "-") free_ = RegisterShared("10.0.0.3:7000", free_root);
    return id.value_or("");
  }

  std::vector<std::string> servers_;
  std::string worker_;
  std::string free_;
};

TEST_F(RebuildJobTest, AFreeServerOnTheSharedStorageRebuildsTheLostPlace) {
  const std::string id = Start("/shared", "/shared");
  ASSERT_EQ(manager_->Get(id)->state(), v1::RUNNING);
  LoseOne(servers_[1], {servers_[0], worker_, free_}, id);
  auto status = manager_->Get(id);
  ASSERT_TRUE(status.ok());
  ASSERT_EQ(status->state(), v1::RUNNING) << status->message();
  EXPECT_EQ(status->shard_map().version(), 2);
  EXPECT_EQ(status->shard_map().servers(0), "10.0.0.1:7000");
  EXPECT_EQ(status->shard_map().servers(1), "10.0.0.3:7000");
  EXPECT_EQ(status->vacant_size(), 0);
  ASSERT_EQ(status->map_moves_size(), 1);
  const v1::ShardMapMove& move = status->map_moves(0);
  EXPECT_TRUE(move.rebuild());
  EXPECT_FALSE(move.rebuilt_onto_survivor());  // The free server first.
  EXPECT_EQ(move.rebuilt_server(), 1);
  EXPECT_EQ(move.rebuilt_from_address(), "10.0.0.2:7000");
  EXPECT_EQ(move.rebuilt_from_data_dir(), "/shared/storage-10.0.0.2-7000");
  EXPECT_EQ(move.units_moved(), UnitsOn(status->shard_map(), 1));
  ASSERT_EQ(status->server_storage_size(), 2);
  EXPECT_EQ(status->server_storage(1).data_dir(),
            "/shared/storage-10.0.0.3-7000");

  // The replacement is told where to import from; the survivor is not.
  auto beat = manager_->Heartbeat(free_);
  ASSERT_TRUE(beat.ok());
  ASSERT_EQ(beat->assignments_size(), 1);
  EXPECT_EQ(beat->assignments(0).index(), 1);
  EXPECT_EQ(beat->assignments(0).rebuild_from_data_dir(),
            "/shared/storage-10.0.0.2-7000");
  EXPECT_EQ(beat->assignments(0).rebuild_map_version(), 2);
  auto survivor = manager_->Heartbeat(servers_[0]);
  ASSERT_TRUE(survivor.ok());
  ASSERT_EQ(survivor->assignments_size(), 1);
  EXPECT_TRUE(survivor->assignments(0).rebuild_from_data_dir().empty());

  // The lost server comes back: its place is gone; it stays free.
  const std::string back = RegisterShared("10.0.0.2:7000", "/shared");
  auto again = manager_->Heartbeat(back);
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(again->assignments_size(), 0);
  EXPECT_EQ(manager_->Get(id)->state(), v1::RUNNING);
  EXPECT_EQ(manager_->Get(id)->shard_map().servers(1), "10.0.0.3:7000");
}

TEST_F(RebuildJobTest, WithoutAFreeServerOnThatStorageTheJobFailsSayingWhy) {
  // The survivor is on other storage: it cannot host the place either.
  const std::string id = Start("/shared", "/elsewhere", "/other");
  LoseOne(servers_[1], {servers_[0], worker_, free_}, id);
  auto status = manager_->Get(id);
  ASSERT_TRUE(status.ok());
  EXPECT_EQ(status->state(), v1::FAILED);
  EXPECT_THAT(status->message(), HasSubstr("was lost and not back"));
  EXPECT_THAT(status->message(),
              HasSubstr("not rebuilt: no free server with shared data root "
                        "/shared"));
  EXPECT_THAT(status->message(),
              HasSubstr("no surviving server of the job has shared data "
                        "root /shared (1 surviving server)"));
}

TEST_F(RebuildJobTest, WithoutAFreeServerTheSurvivorHostsTheLostPlace) {
  const std::string id = Start("/shared", "/elsewhere");
  LoseOne(servers_[1], {servers_[0], worker_, free_}, id);
  auto status = manager_->Get(id);
  ASSERT_TRUE(status.ok());
  ASSERT_EQ(status->state(), v1::RUNNING) << status->message();
  // The map names the survivor for both places: one server process.
  EXPECT_EQ(status->shard_map().version(), 2);
  EXPECT_EQ(status->shard_map().servers(0), "10.0.0.1:7000");
  EXPECT_EQ(status->shard_map().servers(1), "10.0.0.1:7000");
  EXPECT_EQ(status->vacant_size(), 0);
  ASSERT_EQ(status->map_moves_size(), 1);
  const v1::ShardMapMove& move = status->map_moves(0);
  EXPECT_TRUE(move.rebuild());
  EXPECT_TRUE(move.rebuilt_onto_survivor());
  EXPECT_FALSE(move.rebuilt_from_hosted());
  EXPECT_EQ(move.rebuilt_server(), 1);
  EXPECT_EQ(move.rebuilt_from_data_dir(), "/shared/storage-10.0.0.2-7000");
  EXPECT_TRUE(IsHostedPlace(*status, 1));
  EXPECT_FALSE(IsHostedPlace(*status, 0));
  // The place's state lives in the host's directory from now on.
  EXPECT_EQ(status->server_storage(1).data_dir(),
            "/shared/storage-10.0.0.1-7000");

  // The survivor gets its own place and the hosted one.
  auto beat = manager_->Heartbeat(servers_[0]);
  ASSERT_TRUE(beat.ok());
  ASSERT_EQ(beat->assignments_size(), 2);
  EXPECT_EQ(beat->assignments(0).index(), 0);
  EXPECT_FALSE(beat->assignments(0).hosted());
  EXPECT_TRUE(beat->assignments(0).rebuild_from_data_dir().empty());
  EXPECT_EQ(beat->assignments(1).index(), 1);
  EXPECT_TRUE(beat->assignments(1).hosted());
  EXPECT_EQ(beat->assignments(1).rebuild_from_data_dir(),
            "/shared/storage-10.0.0.2-7000");
  EXPECT_EQ(beat->assignments(1).rebuild_map_version(), 2);

  // Moving such a job's servers is refused, saying why.
  auto scaled = manager_->Scale(id, 1);
  EXPECT_EQ(scaled.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(scaled.status().message(), HasSubstr("is hosted by another"));
}

TEST_F(RebuildJobTest, TheHostLostTooIsRebuiltOnAFreeServerPlaceByPlace) {
  const std::string id = Start("/shared", "/elsewhere");
  LoseOne(servers_[1], {servers_[0], worker_, free_}, id);
  ASSERT_TRUE(IsHostedPlace(*manager_->Get(id), 1));
  // A free server on the shared storage comes; then the host is lost: both
  // of its places are vacant. Its own place is rebuilt on the free server
  // (the first choice), which then hosts the other, imported from the lost
  // host's directory under the place's hosted id.
  const std::string spare = RegisterShared("10.0.0.4:7000", "/shared");
  const absl::Time end =
      absl::Now() + timing_.lease + timing_.recovery_grace * 3;
  while (absl::Now() < end) {
    EXPECT_TRUE(manager_->Heartbeat(worker_).ok());
    EXPECT_TRUE(manager_->Heartbeat(spare).ok());
    manager_->Tick(absl::Now());
    auto status = manager_->Get(id);
    if (status->state() != v1::RUNNING || status->map_moves_size() >= 3) break;
    absl::SleepFor(absl::Milliseconds(20));
  }
  auto status = manager_->Get(id);
  ASSERT_TRUE(status.ok());
  ASSERT_EQ(status->state(), v1::RUNNING) << status->message();
  ASSERT_EQ(status->map_moves_size(), 3);
  EXPECT_EQ(status->shard_map().servers(0), "10.0.0.4:7000");
  EXPECT_EQ(status->shard_map().servers(1), "10.0.0.4:7000");
  const v1::ShardMapMove& hosted = status->map_moves(2);
  EXPECT_EQ(hosted.rebuilt_server(), 1);
  EXPECT_TRUE(hosted.rebuilt_onto_survivor());
  EXPECT_TRUE(hosted.rebuilt_from_hosted());
  EXPECT_EQ(hosted.rebuilt_from_data_dir(), "/shared/storage-10.0.0.1-7000");
  auto beat = manager_->Heartbeat(spare);
  ASSERT_TRUE(beat.ok());
  ASSERT_EQ(beat->assignments_size(), 2);
  EXPECT_TRUE(beat->assignments(1).hosted());
  EXPECT_TRUE(beat->assignments(1).rebuild_from_hosted());
}

TEST_F(RebuildJobTest, AServerOnItsOwnStorageFailsTheJobAsBefore) {
  const std::string id = Start("", "/shared");
  LoseOne(servers_[1], {servers_[0], worker_, free_}, id);
  auto status = manager_->Get(id);
  ASSERT_TRUE(status.ok());
  EXPECT_EQ(status->state(), v1::FAILED);
  EXPECT_THAT(status->message(), HasSubstr("was lost and not back"));
  EXPECT_THAT(status->message(), ::testing::Not(HasSubstr("rebuilt")));
}

}  // namespace
}  // namespace ps
