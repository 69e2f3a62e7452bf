// Server moves in the coordinator (coordinator/job_manager_scale.cc): the
// answer to Scale comes once the proposal is durable; the job's servers and
// workers are told to heartbeat fast until the move ends; the current map's
// servers are told to freeze only once all of them heartbeat fast; the
// boundary is the largest frontier; the commit comes once every server of
// the new map staged its units; a coordinator restart before it abandons
// the move.
#include <string>
#include <vector>

#include "absl/time/clock.h"
#include "common/model_layout.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testing/job_manager_fixture.h"

namespace ps {
namespace {

using ::testing::HasSubstr;
using ::testing::SizeIs;

constexpr int64_t kMoveHeartbeatMs = 30;

class ServerMoveTest : public testing::JobManagerFixture {
 protected:
  ServerMoveTest() {
    timing_.lease = absl::Seconds(60);
    timing_.heartbeat_interval = absl::Milliseconds(500);
    timing_.move_heartbeat_interval = absl::Milliseconds(kMoveHeartbeatMs);
  }

  // A running job on two servers and one worker, and a free third server.
  std::string Start() {
    CreateManager();
    v1::JobSpec spec = testing::TinyJobSpec(2, 1);
    spec.set_block_elems(5);  // 4 blocks.
    auto id = manager_->Submit(spec);
    EXPECT_TRUE(id.ok()) << id.status();
    servers_ = {Register(v1::SERVER, "10.0.0.1:7000"),
                Register(v1::SERVER, "10.0.0.2:7000")};
    worker_ = Register(v1::WORKER);
    manager_->Tick(absl::Now());
    free_ = Register(v1::SERVER, "10.0.0.3:7000");
    for (const std::string& s : servers_) Beat(s);
    Beat(worker_);
    return id.value_or("");
  }

  // A heartbeat of `node`, with a server's report on the move if given.
  v1::HeartbeatResponse Beat(const std::string& node,
                             const v1::HeldAssignment* held = nullptr) {
    v1::HeartbeatRequest request;
    request.set_node_id(node);
    if (held != nullptr) *request.add_held() = *held;
    auto response = manager_->Heartbeat(request);
    EXPECT_TRUE(response.ok()) << response.status();
    return response.ok() ? *response : v1::HeartbeatResponse();
  }

  static bool ToldOfMove(const v1::HeartbeatResponse& r) {
    return r.assignments_size() == 1 &&
           r.assignments(0).map_change().version() != 0;
  }

  v1::JobStatus Job(const std::string& id) {
    auto job = manager_->Get(id);
    EXPECT_TRUE(job.ok()) << job.status();
    return job.ok() ? *job : v1::JobStatus();
  }

  std::vector<std::string> servers_;
  std::string worker_;
  std::string free_;
};

TEST_F(ServerMoveTest, ScaleUpRunsOnFastHeartbeatsAndCommits) {
  const std::string id = Start();
  ASSERT_EQ(Job(id).state(), v1::RUNNING);
  // No move: the registered interval.
  EXPECT_EQ(Beat(servers_[0]).heartbeat_interval_ms(), 0);

  auto scaled = manager_->Scale(id, 3);
  ASSERT_TRUE(scaled.ok()) << scaled.status();
  EXPECT_EQ(scaled->map_change().version(), 2);
  EXPECT_THAT(scaled->map_change().shard_map().servers(), SizeIs(3));
  // The answer came once the record was durable: the table holds the
  // proposal already (no flush asked).
  auto stored = table_->LoadAll();
  ASSERT_TRUE(stored.ok()) << stored.status();
  bool found = false;
  for (const v1::JobStatus& job : *stored) {
    if (job.job_id() != id) continue;
    found = true;
    EXPECT_EQ(job.map_change().version(), 2);
  }
  EXPECT_TRUE(found);

  // The added server learns of the move at once (it freezes nothing).
  const v1::HeartbeatResponse added = Beat(free_);
  EXPECT_TRUE(ToldOfMove(added));
  EXPECT_EQ(added.assignments(0).index(), 2);
  EXPECT_EQ(added.heartbeat_interval_ms(), kMoveHeartbeatMs);
  // Server 0 is told to heartbeat fast, not yet to freeze: server 1 is not
  // on the fast interval yet.
  v1::HeartbeatResponse first = Beat(servers_[0]);
  EXPECT_EQ(first.heartbeat_interval_ms(), kMoveHeartbeatMs);
  EXPECT_FALSE(ToldOfMove(first));
  // Server 1, the last one alerted, is told to freeze in the same answer;
  // server 0 on its next (fast) heartbeat.
  v1::HeartbeatResponse second = Beat(servers_[1]);
  EXPECT_EQ(second.heartbeat_interval_ms(), kMoveHeartbeatMs);
  EXPECT_TRUE(ToldOfMove(second));
  first = Beat(servers_[0]);
  EXPECT_TRUE(ToldOfMove(first));
  // Workers heartbeat fast too (they wait for the new map).
  EXPECT_EQ(Beat(worker_).heartbeat_interval_ms(), kMoveHeartbeatMs);

  // Frontiers 7 and 9: the boundary is 9.
  v1::HeldAssignment held;
  held.set_job_id(id);
  held.set_map_change_version(2);
  held.set_map_frontier_clock(7);
  Beat(servers_[0], &held);
  EXPECT_FALSE(Job(id).map_change().boundary_set());
  held.set_map_frontier_clock(9);
  Beat(servers_[1], &held);
  EXPECT_TRUE(Job(id).map_change().boundary_set());
  EXPECT_EQ(Job(id).map_change().boundary_clock(), 9);

  // Staged on every server of the new map: committed, then (once durable)
  // the new map is in effect.
  v1::HeldAssignment staged;
  staged.set_job_id(id);
  staged.set_map_staged_version(2);
  Beat(servers_[0], &staged);
  Beat(servers_[1], &staged);
  EXPECT_FALSE(Job(id).map_change().committed());
  Beat(free_, &staged);
  manager_->FlushStore();
  const v1::JobStatus done = Job(id);
  EXPECT_EQ(done.map_change().version(), 0);
  EXPECT_EQ(done.shard_map().version(), 2);
  EXPECT_THAT(done.shard_map().servers(), SizeIs(3));
  ASSERT_THAT(done.map_moves(), SizeIs(1));
  EXPECT_EQ(done.map_moves(0).clock(), 9);
  // The move ended: the registered interval again.
  EXPECT_EQ(Beat(servers_[0]).heartbeat_interval_ms(), 0);
  EXPECT_EQ(Beat(worker_).heartbeat_interval_ms(), 0);
  EXPECT_EQ(Beat(free_).assignments(0).shard_map().version(), 2);
}

TEST_F(ServerMoveTest, ARestartBeforeTheCommitAbandonsTheDurableProposal) {
  const std::string id = Start();
  auto scaled = manager_->Scale(id, 3);
  ASSERT_TRUE(scaled.ok()) << scaled.status();
  // The coordinator restarts: the proposal was durable, and is abandoned.
  CreateManager();
  const v1::JobStatus job = Job(id);
  EXPECT_EQ(job.map_change().version(), 0);
  EXPECT_EQ(job.shard_map().version(), 1);
  EXPECT_THAT(job.shard_map().servers(), SizeIs(2));
}

TEST_F(ServerMoveTest, RefusesASecondMoveAndAnswersASameSizeScale) {
  const std::string id = Start();
  auto same = manager_->Scale(id, 2);
  ASSERT_TRUE(same.ok()) << same.status();
  EXPECT_EQ(same->map_change().version(), 0);
  ASSERT_TRUE(manager_->Scale(id, 3).ok());
  auto again = manager_->Scale(id, 1);
  EXPECT_TRUE(absl::IsFailedPrecondition(again.status())) << again.status();
  EXPECT_THAT(again.status().message(), HasSubstr("in progress"));
  auto unknown = manager_->Scale("job-404", 3);
  EXPECT_TRUE(absl::IsNotFound(unknown.status())) << unknown.status();
}

// A job of an EXTERNAL model (Python SDK workers, which follow a map change
// as ps-worker does: python/paramserver/torch/_follow.py) moves like any
// other: the change is proposed, the current map kept until it commits.
TEST_F(ServerMoveTest, MovesAJobOfAnExternalModel) {
  CreateManager();
  v1::JobSpec spec = testing::TinyJobSpec(2, 1);
  spec.clear_dataset();
  v1::ModelSpec* model = spec.mutable_model();
  model->Clear();
  model->set_kind(v1::ModelSpec::EXTERNAL);
  v1::TensorDecl* weight = model->add_tensors();
  weight->set_name("linear.weight");
  weight->add_shape(4);
  weight->add_shape(3);
  spec.set_block_elems(4);  // 3 blocks: enough units for 3 servers.
  auto id = manager_->Submit(spec);
  ASSERT_TRUE(id.ok()) << id.status();
  Register(v1::SERVER, "10.0.0.1:7000");
  Register(v1::SERVER, "10.0.0.2:7000");
  // A Python worker: its module's digest matches the job's tensors.
  auto tensors = ModelTensors(spec.model());
  ASSERT_TRUE(tensors.ok()) << tensors.status();
  v1::RegisterRequest python_worker;
  python_worker.set_role(v1::WORKER);
  python_worker.set_model_digest(ModelDigest(*tensors, spec.model()));
  ASSERT_TRUE(manager_->Register(python_worker).ok());
  manager_->Tick(absl::Now());
  Register(v1::SERVER, "10.0.0.3:7000");
  ASSERT_EQ(Job(*id).state(), v1::RUNNING) << Job(*id).message();
  auto scaled = manager_->Scale(*id, 3);
  ASSERT_TRUE(scaled.ok()) << scaled.status();
  EXPECT_EQ(scaled->map_change().version(), 2);
  EXPECT_THAT(scaled->map_change().shard_map().servers(), SizeIs(3));
  EXPECT_EQ(Job(*id).shard_map().version(), 1);
}

}  // namespace
}  // namespace ps
