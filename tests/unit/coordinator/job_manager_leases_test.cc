// Leases in JobManager: lost nodes leave vacant places (in the status with
// their address and deadline) that free nodes take or that fail the job after
// the grace, heartbeats keep the lease, places survive a coordinator restart,
// and a lost server comes back with or without the job's shards.
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/unit/coordinator/job_manager_test_fixture.h"

namespace ps::job_manager_test {
namespace {

using ::testing::HasSubstr;
using ::testing::IsEmpty;
using ::testing::SizeIs;

TEST_F(JobManagerTest, LostNodesLeaveVacantPlacesAndTheJobFailsAfterTheGrace) {
  timing_.lease = absl::Seconds(2);
  timing_.recovery_grace = absl::Seconds(10);
  CreateManager();
  const std::string id = Submit();
  StartJob(id);
  const std::string idle = Register(v1::WORKER);
  // Still within the lease: nothing happens.
  manager_->Tick(absl::Now() + absl::Seconds(1));
  EXPECT_EQ(State(id), v1::RUNNING);
  // Every node lost its lease: their places are vacant, the job waits.
  const absl::Time expired = absl::Now() + timing_.lease + absl::Seconds(1);
  manager_->Tick(expired);
  EXPECT_EQ(State(id), v1::RUNNING);
  for (const std::string& node : {server_, workers_[0], workers_[1], idle}) {
    EXPECT_EQ(manager_->Heartbeat(node).status().code(),
              absl::StatusCode::kNotFound)
        << node;
  }
  EXPECT_EQ(metrics_.leases_expired.Value(), 4);
  // Nobody came back within the grace.
  manager_->Tick(expired + timing_.recovery_grace + absl::Seconds(1));
  auto status = manager_->Get(id);
  ASSERT_TRUE(status.ok());
  EXPECT_EQ(status->state(), v1::FAILED);
  EXPECT_THAT(status->message(), HasSubstr("was lost and not"));
  EXPECT_THAT(status->message(), HasSubstr("within 10s"));
}

// Leases are real time: expire one node by letting it miss heartbeats while
// the others keep theirs.
TEST_F(JobManagerTest, AFreeWorkerTakesALostWorkersPlace) {
  timing_.lease = absl::Seconds(2);
  CreateManager();
  const std::string id = Submit();
  StartJob(id);
  absl::SleepFor(absl::Milliseconds(1500));
  for (const std::string& node : {server_, workers_[0]}) {
    ASSERT_TRUE(manager_->Heartbeat(node).ok());
  }
  absl::SleepFor(absl::Milliseconds(1000));
  manager_->Tick(absl::Now());  // workers_[1] is 2.5 s silent, others 1 s.
  EXPECT_EQ(manager_->Heartbeat(workers_[1]).status().code(),
            absl::StatusCode::kNotFound);
  ASSERT_TRUE(manager_->Heartbeat(workers_[0]).ok());
  EXPECT_EQ(State(id), v1::RUNNING);
  // A new worker registers and is given worker 1's place at once.
  const std::string replacement = Register(v1::WORKER);
  auto assignments = Assignments(replacement);
  ASSERT_THAT(assignments, SizeIs(1));
  EXPECT_EQ(assignments[0].job_id(), id);
  EXPECT_EQ(assignments[0].index(), 1);
  // Its reports count for worker 1; the lost node's do not.
  v1::ProgressReport report = Report(id, 1);
  EXPECT_EQ(Send(report).status().code(), absl::StatusCode::kPermissionDenied);
  report.set_node_id(replacement);
  EXPECT_TRUE(Send(report).ok());
}

TEST_F(JobManagerTest, NodesGetTheirPlacesBackAfterACoordinatorRestart) {
  const std::string running = Submit();
  const std::string pending = Submit();
  StartJob(running);
  const std::string finished = Submit();
  ASSERT_TRUE(manager_->Cancel(finished).ok());

  CreateManager();  // A new coordinator on the same table.
  const std::vector<v1::JobStatus> jobs = manager_->List();
  ASSERT_THAT(jobs, SizeIs(3));
  EXPECT_EQ(State(running), v1::RUNNING);
  EXPECT_EQ(State(pending), v1::PENDING);
  EXPECT_EQ(State(finished), v1::CANCELLED);
  // The old nodes are unknown; ids are never reused.
  EXPECT_EQ(manager_->Heartbeat(server_).status().code(),
            absl::StatusCode::kNotFound);
  EXPECT_EQ(Submit(), "job-000004");

  // The server registers again on its address; the workers say what they hold.
  const std::string server = Register(v1::SERVER, "10.0.0.1:7000");
  std::vector<std::string> workers;
  for (int i : {1, 0}) {
    v1::RegisterRequest request;
    request.set_role(v1::WORKER);
    v1::HeldAssignment* held = request.add_held();
    held->set_job_id(running);
    held->set_index(i);
    auto response = manager_->Register(request);
    ASSERT_TRUE(response.ok());
    workers.push_back(response->node_id());
  }
  manager_->Tick(absl::Now());
  auto server_assignment = Assignments(server);
  ASSERT_THAT(server_assignment, SizeIs(1));
  EXPECT_EQ(server_assignment[0].job_id(), running);
  EXPECT_EQ(server_assignment[0].index(), 0);
  EXPECT_EQ(server_assignment[0].shard_map().servers(0), "10.0.0.1:7000");
  for (int k = 0; k < 2; ++k) {
    auto a = Assignments(workers[k]);
    ASSERT_THAT(a, SizeIs(1));
    EXPECT_EQ(a[0].job_id(), running);
    EXPECT_EQ(a[0].index(), 1 - k);
  }
  EXPECT_EQ(State(running), v1::RUNNING);
  EXPECT_EQ(State(pending), v1::PENDING);  // Its nodes are busy.

  // The pending job starts on nodes that are free.
  Register(v1::SERVER, "10.0.0.9:7000");
  Register(v1::WORKER);
  Register(v1::WORKER);
  manager_->Tick(absl::Now());
  EXPECT_EQ(State(pending), v1::RUNNING);
}

TEST_F(JobManagerTest, HeartbeatsKeepTheLease) {
  // Two nodes register before `start`; only one heartbeats, at least 150 ms
  // later. At start + 250 ms the silent one's lease (200 ms from its
  // registration) has expired and the other's (200 ms from its heartbeat)
  // has not, however slowly the test runs: only a renewal keeps it.
  timing_.lease = absl::Milliseconds(200);
  CreateManager();
  const std::string kept = Register(v1::WORKER);
  const std::string silent = Register(v1::WORKER);
  const absl::Time start = absl::Now();
  absl::SleepFor(absl::Milliseconds(150));
  ASSERT_TRUE(manager_->Heartbeat(kept).ok());
  manager_->Tick(start + absl::Milliseconds(250));
  EXPECT_TRUE(manager_->Heartbeat(kept).ok());
  EXPECT_EQ(manager_->Heartbeat(silent).status().code(),
            absl::StatusCode::kNotFound);
}

TEST_F(JobManagerTest, AServerBackWithoutTheJobsShardsFailsTheJobSayingSo) {
  timing_.lease = absl::Seconds(2);
  CreateManager();
  const std::string id = Submit(Spec(/*servers=*/1, /*workers=*/2));
  ASSERT_TRUE(
      ServerComesBack(id, "an-emptied-data-directory", /*holds=*/false).ok());
  const v1::JobStatus status = Status(id);
  EXPECT_EQ(status.state(), v1::FAILED);
  EXPECT_EQ(status.message(),
            "server 0 at 10.0.0.1:7000 came back without job " + id +
                "'s shards (data directory lost or replaced)");
}

TEST_F(JobManagerTest, AServerBackWithTheJobsShardsGetsItsPlace) {
  timing_.lease = absl::Seconds(2);
  CreateManager();
  const std::string id = Submit(Spec(/*servers=*/1, /*workers=*/2));
  auto server = ServerComesBack(id, StorageOf("10.0.0.1:7000"), /*holds=*/true);
  ASSERT_TRUE(server.ok()) << server.status();
  EXPECT_EQ(State(id), v1::RUNNING);
  EXPECT_THAT(Assignments(server->node_id()), SizeIs(1));
}

TEST_F(JobManagerTest, VacantPlacesAreInTheStatusWithTheirAddressAndDeadline) {
  timing_.lease = absl::Seconds(2);
  timing_.recovery_grace = absl::Seconds(10);
  CreateManager();
  const std::string id = Submit(Spec(/*servers=*/1, /*workers=*/2));
  StartJob(id);
  EXPECT_THAT(Status(id).vacant(), IsEmpty());
  const absl::Time expired = absl::Now() + timing_.lease + absl::Seconds(1);
  manager_->Tick(expired);
  const v1::JobStatus status = Status(id);
  ASSERT_EQ(status.state(), v1::RUNNING);
  ASSERT_THAT(status.vacant(), SizeIs(3));
  const v1::VacantPlace& server = status.vacant(0);
  EXPECT_EQ(server.role(), "server");
  EXPECT_EQ(server.index(), 0);
  EXPECT_EQ(server.last_node_id(), server_);
  EXPECT_EQ(server.last_address(), "10.0.0.1:7000");
  EXPECT_EQ(server.vacant_since_ms(), absl::ToUnixMillis(expired));
  EXPECT_EQ(server.deadline_ms(),
            absl::ToUnixMillis(expired + timing_.recovery_grace));
  EXPECT_EQ(status.vacant(1).role(), "worker");
  EXPECT_EQ(metrics_.vacant_places("server").Value(), 1);
  EXPECT_EQ(metrics_.vacant_places("worker").Value(), 2);
  EXPECT_EQ(metrics_.recovery_deadline.Value(),
            absl::ToUnixMillis(expired + timing_.recovery_grace) / 1000.0);
  // Filled places leave the list.
  Register(v1::SERVER, "10.0.0.1:7000");
  EXPECT_THAT(Status(id).vacant(), SizeIs(2));
  EXPECT_EQ(metrics_.vacant_places("server").Value(), 0);
  // The failure names the address.
  manager_->Tick(expired + timing_.recovery_grace + absl::Seconds(1));
  EXPECT_EQ(State(id), v1::FAILED);
  EXPECT_THAT(Status(id).vacant(), IsEmpty());
  EXPECT_EQ(metrics_.vacant_places("worker").Value(), 0);
  EXPECT_EQ(metrics_.recovery_deadline.Value(), 0);
}

TEST_F(JobManagerTest, ALostServersFailureNamesItsAddress) {
  timing_.lease = absl::Seconds(2);
  timing_.recovery_grace = absl::Seconds(10);
  CreateManager();
  const std::string id = Submit(Spec(/*servers=*/1, /*workers=*/2));
  StartJob(id);
  const absl::Time expired = absl::Now() + timing_.lease + absl::Seconds(1);
  manager_->Tick(expired);
  manager_->Tick(expired + timing_.recovery_grace + absl::Seconds(1));
  EXPECT_EQ(Status(id).message(),
            "server 0 (10.0.0.1:7000) was lost and not back within 10s");
}

}  // namespace
}  // namespace ps::job_manager_test
