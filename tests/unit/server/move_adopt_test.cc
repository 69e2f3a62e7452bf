// The receiving end of a server move in ParameterManager, without gRPC
// (docs/durability.md, "A server move"): server 0 holds a BSP job alone
// under map 1 and keeps half of its blocks under map 2 (the other half goes
// to a server 1 that is not run here). It stages its units at the boundary
// (a local FetchUnits), opens the job from the staged copy once map 2 is in
// effect, takes a push under it, and the staged copy is deleted off the
// serving path (UnitMover::Adopted). A restart that finds the staged copy
// still there (a crash before that deletion) reopens the job from its own
// state, with the push taken after the move, not from the copy. A move
// abandoned after its copy was staged leaves no copy in the store and the
// job trains on under map 1. Against both stores.
#include <algorithm>
#include <cstring>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "common/model_layout.h"
#include "gtest/gtest.h"
#include "server/parameter_manager.h"
#include "server/unit_mover.h"
#include "tests/testing/server_job_store_fixture.h"
#include "tests/testing/tiny_assignment.h"

namespace ps {
namespace {

constexpr char kJobId[] = "job-000042";

// Map 1: server 0 holds every block. Map 2 (version 2): server 0 keeps the
// blocks at even positions, server 1 takes the others.
v1::Assignment MakeAssignment(int64_t version) {
  v1::Assignment a = testing::TinyAssignment(
      kJobId, 4, 3, 4, 1, "127.0.0.1:1", [](v1::JobSpec* spec) {
        spec->mutable_optimizer()->mutable_adam()->set_learning_rate(0.05f);
        spec->mutable_consistency()->set_model(v1::ConsistencySpec::BSP);
        spec->set_seed(11);
      });
  v1::ShardMap* map = a.mutable_shard_map();
  map->set_version(version);
  if (version > 1) {
    map->add_servers("127.0.0.1:2");
    for (int i = 0; i < map->blocks_size(); ++i) {
      map->mutable_blocks(i)->set_server(i % 2);
    }
  }
  return a;
}

// Map 1 with the move to map 2 in progress, its boundary at `boundary`.
v1::Assignment Moving(int64_t boundary) {
  v1::Assignment a = MakeAssignment(1);
  v1::ShardMapChange* change = a.mutable_map_change();
  change->set_version(2);
  change->set_reason("scale 1 -> 2 servers");
  change->set_boundary_set(true);
  change->set_boundary_clock(boundary);
  *change->mutable_shard_map() = MakeAssignment(2).shard_map();
  return a;
}

// Server 0's blocks under `map`, in map order.
std::vector<const v1::BlockPlacement*> Held(const v1::ShardMap& map) {
  std::vector<const v1::BlockPlacement*> held;
  for (const v1::BlockPlacement& b : map.blocks()) {
    if (b.server() == 0) held.push_back(&b);
  }
  return held;
}

class MoveAdoptTest : public testing::ServerJobStoreFixture {
 protected:
  // A push of worker 0 at `clock` under map `version`: every block server
  // 0 holds there, gradients from the clock.
  absl::Status Push(ParameterManager& manager, int64_t clock, int64_t version) {
    v1::PushRequest push;
    push.set_job_id(kJobId);
    push.set_worker_index(0);
    push.set_clock(clock);
    push.set_map_version(version);
    const v1::Assignment a = MakeAssignment(version);
    for (const v1::BlockPlacement* b : Held(a.shard_map())) {
      std::vector<float> g(b->num_elems());
      for (size_t i = 0; i < g.size(); ++i) {
        g[i] = 0.01f * static_cast<float>((clock * 7 + i) % 11) - 0.05f;
      }
      v1::Block* block = push.add_gradients();
      block->set_key(b->key());
      block->set_data(std::string(reinterpret_cast<const char*>(g.data()),
                                  g.size() * sizeof(float)));
    }
    absl::Mutex mu;
    std::optional<absl::Status> result;
    manager.Push(push, [&](absl::StatusOr<v1::PushResponse> reply) {
      absl::MutexLock lock(&mu);
      result = reply.status();
    });
    absl::MutexLock lock(&mu);
    mu.AwaitWithTimeout(
        absl::Condition(
            +[](std::optional<absl::Status>* r) { return r->has_value(); },
            &result),
        absl::Seconds(30));
    return result.value_or(absl::DeadlineExceededError("no answer"));
  }

  // Server 0's values under map `version` read at `clock`, by key.
  absl::StatusOr<std::vector<std::pair<uint64_t, std::string>>> Values(
      ParameterManager& manager, int64_t clock, int64_t version) {
    v1::PullRequest pull;
    pull.set_job_id(kJobId);
    pull.set_clock(clock);
    pull.set_map_version(version);
    absl::Mutex mu;
    std::optional<absl::StatusOr<v1::PullResponse>> result;
    manager.Pull(pull, [&](absl::StatusOr<v1::PullResponse> reply) {
      absl::MutexLock lock(&mu);
      result = std::move(reply);
    });
    absl::MutexLock lock(&mu);
    mu.AwaitWithTimeout(
        absl::Condition(
            +[](std::optional<absl::StatusOr<v1::PullResponse>>* r) {
              return r->has_value();
            },
            &result),
        absl::Seconds(30));
    if (!result.has_value()) return absl::DeadlineExceededError("no answer");
    if (!result->ok()) return result->status();
    std::vector<std::pair<uint64_t, std::string>> values;
    for (const v1::Block& b : (*result)->blocks()) {
      values.emplace_back(b.key(), b.data());
    }
    std::sort(values.begin(), values.end());
    return values;
  }

  // Waits until the manager reports the units of map 2 staged.
  static bool WaitStaged(ParameterManager& manager) {
    const absl::Time deadline = absl::Now() + absl::Seconds(30);
    while (absl::Now() < deadline) {
      for (const v1::HeldAssignment& held : manager.MoveReports()) {
        if (held.job_id() == kJobId && held.map_staged_version() == 2) {
          return true;
        }
      }
      absl::SleepFor(absl::Milliseconds(5));
    }
    return false;
  }

  // Whether the store holds a staged copy of map 2, polled until it equals
  // `want` or 30 s pass.
  bool WaitStagedStored(bool want) {
    const std::string id = UnitMover::StagedId(kJobId, 2);
    const absl::Time deadline = absl::Now() + absl::Seconds(30);
    bool stored = !want;
    while (absl::Now() < deadline) {
      auto ids = store_->ListJobs();
      stored =
          ids.ok() && std::find(ids->begin(), ids->end(), id) != ids->end();
      if (stored == want) break;
      absl::SleepFor(absl::Milliseconds(5));
    }
    return stored;
  }
};

TEST_P(MoveAdoptTest, ARestartAfterTheTakeOverKeepsThePushesTakenSince) {
  std::vector<std::pair<uint64_t, std::string>> after_move;
  StoredJob staged_copy;
  {
    ParameterManager manager(store_.get(), &metrics_);
    ASSERT_TRUE(manager.SyncAssignments({MakeAssignment(1)}).empty());
    for (int64_t clock = 0; clock < 3; ++clock) {
      ASSERT_EQ(Push(manager, clock, 1), absl::OkStatus()) << clock;
    }
    // The move stops at clock 3; server 0 stages its units of map 2.
    ASSERT_TRUE(manager.SyncAssignments({Moving(3)}).empty());
    ASSERT_TRUE(WaitStaged(manager));
    auto stored = store_->Load(UnitMover::StagedId(kJobId, 2));
    ASSERT_TRUE(stored.ok()) << stored.status();
    staged_copy = *std::move(stored);
    ASSERT_EQ(staged_copy.blocks.size(),
              Held(MakeAssignment(2).shard_map()).size());

    // Map 2 in effect: the job opens from the copy and takes clock 3.
    ASSERT_TRUE(manager.SyncAssignments({MakeAssignment(2)}).empty());
    ASSERT_TRUE(Push(manager, 3, 2).ok());
    auto values = Values(manager, 4, 2);
    ASSERT_TRUE(values.ok()) << values.status();
    after_move = *std::move(values);
    // The copy goes off the serving path.
    EXPECT_FALSE(WaitStagedStored(false));
    manager.Shutdown();
  }
  ASSERT_EQ(after_move.size(), Held(MakeAssignment(2).shard_map()).size());

  // As if the server had crashed before deleting the copy: it is there
  // again beside the job's own state.
  ShardWrite again{.job_id = UnitMover::StagedId(kJobId, 2), .sync = true};
  for (const StoredBlock& b : staged_copy.blocks) {
    again.blocks.push_back({.key = b.key,
                            .values = b.values,
                            .optimizer_state = b.optimizer_state,
                            .optimizer_step = b.optimizer_step});
  }
  for (const auto& [place, clock] : staged_copy.worker_clocks) {
    again.worker_clocks.emplace_back(place, clock);
  }
  ASSERT_TRUE(store_->Write(again).ok());
  ReopenStore();
  ASSERT_TRUE(WaitStagedStored(true));

  ParameterManager restarted(store_.get(), &metrics_);
  const std::vector<absl::Status> errors =
      restarted.SyncAssignments({MakeAssignment(2)});
  ASSERT_TRUE(errors.empty()) << errors[0];
  // Clock 3's push is kept (a second take-over from the copy would have
  // lost it: the read at clock 4 would wait, and the values differ).
  auto values = Values(restarted, 4, 2);
  ASSERT_TRUE(values.ok()) << values.status();
  EXPECT_EQ(*values, after_move);
  EXPECT_FALSE(WaitStagedStored(false));
  // And it goes on: clock 4 is new, clock 3 a duplicate.
  EXPECT_TRUE(Push(restarted, 4, 2).ok());
  restarted.Shutdown();
}

TEST_P(MoveAdoptTest, AnAbandonedMoveLeavesNoCopyAndTheJobGoesOn) {
  ParameterManager manager(store_.get(), &metrics_);
  ASSERT_TRUE(manager.SyncAssignments({MakeAssignment(1)}).empty());
  for (int64_t clock = 0; clock < 2; ++clock) {
    ASSERT_EQ(Push(manager, clock, 1), absl::OkStatus()) << clock;
  }
  ASSERT_TRUE(manager.SyncAssignments({Moving(2)}).empty());
  ASSERT_TRUE(WaitStaged(manager));
  ASSERT_TRUE(WaitStagedStored(true));
  // Abandoned: the assignment lists no change any more.
  ASSERT_TRUE(manager.SyncAssignments({MakeAssignment(1)}).empty());
  EXPECT_FALSE(WaitStagedStored(false));
  EXPECT_TRUE(Push(manager, 2, 1).ok());
  auto values = Values(manager, 3, 1);
  ASSERT_TRUE(values.ok()) << values.status();
  EXPECT_EQ(values->size(),
            size_t(MakeAssignment(1).shard_map().blocks_size()));
  manager.Shutdown();
}

INSTANTIATE_TEST_SUITE_P(Stores, MoveAdoptTest,
                         ::testing::Values(testing::StoreKind::kMemory,
                                           testing::StoreKind::kRocksDb),
                         testing::StoreKindName);

}  // namespace
}  // namespace ps
