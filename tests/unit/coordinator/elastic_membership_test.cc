// Elastic workers in the coordinator (coordinator/job_manager_elastic.cc):
// a lost worker not replaced within the grace is dropped while min_workers
// remain, a free worker joins below max_workers, each change in two steps
// (proposal, commit at the servers' largest frontier), kept in the job's
// history.
#include <map>
#include <string>
#include <vector>

#include "absl/time/clock.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testing/job_manager_fixture.h"

namespace ps {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::SizeIs;

class ElasticMembershipTest : public testing::JobManagerFixture {
 protected:
  ElasticMembershipTest() {
    timing_ = {.lease = absl::Seconds(1),
               .heartbeat_interval = absl::Milliseconds(100),
               .recovery_grace = absl::ZeroDuration()};
  }

  // Starts an elastic job of `workers` (min `min`, max `max`) on one server;
  // fills workers_ by place.
  std::string Start(int workers, int min, int max) {
    CreateManager();
    v1::JobSpec spec = testing::TinyJobSpec(1, workers);
    spec.set_epochs(3);
    spec.set_block_elems(5);
    spec.set_min_workers(min);
    spec.set_max_workers(max);
    auto id = manager_->Submit(spec);
    EXPECT_TRUE(id.ok()) << id.status();
    server_ = Register(v1::SERVER, "10.0.0.1:7000");
    std::vector<std::string> nodes;
    for (int w = 0; w < workers; ++w) nodes.push_back(Register(v1::WORKER));
    manager_->Tick(absl::Now());
    workers_.assign(workers, "");
    for (const std::string& node : nodes) {
      const v1::Assignment a = Assignment(node);
      workers_[a.index()] = node;
    }
    return id.value_or("");
  }

  v1::Assignment Assignment(const std::string& node) {
    auto response = manager_->Heartbeat(node);
    EXPECT_TRUE(response.ok()) << response.status();
    EXPECT_THAT(response->assignments(), SizeIs(1));
    return response->assignments().empty() ? v1::Assignment()
                                           : response->assignments(0);
  }

  // The server reports the proposal in its heartbeat.
  void ServerReports(const std::string& job_id, int64_t version,
                     int64_t frontier, const std::vector<int64_t>& leaving) {
    v1::HeartbeatRequest request;
    request.set_node_id(server_);
    v1::HeldAssignment* held = request.add_held();
    held->set_job_id(job_id);
    held->set_membership_version(version);
    held->set_frontier_clock(frontier);
    for (int64_t c : leaving) held->add_leaving_clocks(c);
    ASSERT_TRUE(manager_->Heartbeat(request).ok());
  }

  // A joining worker says it is ready for change `version`.
  void WorkerReady(const std::string& node, const std::string& job_id,
                   int place, int64_t version) {
    v1::HeartbeatRequest request;
    request.set_node_id(node);
    v1::HeldAssignment* held = request.add_held();
    held->set_job_id(job_id);
    held->set_index(place);
    held->set_membership_version(version);
    ASSERT_TRUE(manager_->Heartbeat(request).ok());
  }

  v1::JobStatus Status(const std::string& id) {
    auto status = manager_->Get(id);
    EXPECT_TRUE(status.ok());
    return status.value_or(v1::JobStatus());
  }

  std::string server_;
  std::vector<std::string> workers_;
};

TEST_F(ElasticMembershipTest, TwoLostWorkersAreDroppedAtOneClock) {
  const std::string id = Start(4, 2, 4);
  v1::JobStatus status = Status(id);
  ASSERT_THAT(status.membership(), SizeIs(1));
  EXPECT_THAT(status.membership(0).places(), ElementsAre(0, 1, 2, 3));
  // Places 2 and 3 stop heartbeating; 0, 1 and the server go on.
  absl::SleepFor(absl::Milliseconds(600));
  for (const std::string& n : {server_, workers_[0], workers_[1]}) {
    ASSERT_TRUE(manager_->Heartbeat(n).ok());
  }
  absl::SleepFor(absl::Milliseconds(600));
  manager_->Tick(absl::Now());  // Leases of 2 and 3 expire: vacant.
  manager_->Tick(absl::Now() + absl::Milliseconds(10));  // Past the grace.
  status = Status(id);
  ASSERT_EQ(status.state(), v1::RUNNING) << status.message();
  EXPECT_EQ(status.membership_pending().version(), 1);
  EXPECT_THAT(status.membership_pending().leaving(), ElementsAre(2, 3));
  EXPECT_THAT(status.vacant(), SizeIs(0));  // Removed places are not vacant.
  // The server's assignment carries the proposal; it reports its frontier.
  v1::Assignment server = Assignment(server_);
  EXPECT_EQ(server.membership_pending().version(), 1);
  ServerReports(id, 1, 7, {6, 5});
  manager_->Tick(absl::Now());
  status = Status(id);
  ASSERT_THAT(status.membership(), SizeIs(2));
  const v1::MembershipChange& change = status.membership(1);
  EXPECT_EQ(change.version(), 1);
  EXPECT_EQ(change.clock(), 7);
  EXPECT_THAT(change.places(), ElementsAre(0, 1));
  EXPECT_THAT(change.left(), ElementsAre(2, 3));
  EXPECT_THAT(change.left_clocks(), ElementsAre(6, 5));
  EXPECT_THAT(change.reason(), HasSubstr("lost"));
  EXPECT_EQ(status.membership_pending().version(), 0);
  EXPECT_THAT(Assignment(workers_[0]).membership(), SizeIs(2));
  // The job ends when its members finish; the dropped places count no more.
  for (int w : {0, 1}) {
    v1::ProgressReport report;
    report.set_node_id(workers_[w]);
    report.set_job_id(id);
    report.set_worker_index(w);
    report.set_test_accuracy(w == 0 ? 0.5f : -1);
    report.set_finished(true);
    ASSERT_TRUE(manager_->ReportProgress(report).ok());
  }
  EXPECT_EQ(Status(id).state(), v1::SUCCEEDED);
}

TEST_F(ElasticMembershipTest, BelowMinWorkersTheJobFails) {
  const std::string id = Start(3, 2, 3);
  absl::SleepFor(absl::Milliseconds(600));
  ASSERT_TRUE(manager_->Heartbeat(server_).ok());
  ASSERT_TRUE(manager_->Heartbeat(workers_[0]).ok());
  absl::SleepFor(absl::Milliseconds(600));
  manager_->Tick(absl::Now());
  manager_->Tick(absl::Now() + absl::Milliseconds(10));
  const v1::JobStatus status = Status(id);
  EXPECT_EQ(status.state(), v1::FAILED);
  EXPECT_THAT(status.message(), HasSubstr("was lost and not replaced"));
}

TEST_F(ElasticMembershipTest, AFreeWorkerJoinsBelowMaxWorkers) {
  const std::string id = Start(2, 1, 3);
  const std::string extra = Register(v1::WORKER);
  v1::JobStatus status = Status(id);
  EXPECT_EQ(status.membership_pending().version(), 1);
  EXPECT_THAT(status.membership_pending().joining(), ElementsAre(2));
  // The new worker holds place 2 at once, planned from the commit.
  const v1::Assignment joined = Assignment(extra);
  EXPECT_EQ(joined.index(), 2);
  EXPECT_EQ(joined.num_workers(), 3);
  EXPECT_EQ(joined.membership_pending().version(), 1);
  // Servers are told only once the joining worker is ready (data loaded).
  EXPECT_EQ(Assignment(server_).membership_pending().version(), 0);
  WorkerReady(extra, id, 2, 1);
  EXPECT_EQ(Assignment(server_).membership_pending().version(), 1);
  ServerReports(id, 1, 12, {});
  manager_->Tick(absl::Now());
  status = Status(id);
  ASSERT_THAT(status.membership(), SizeIs(2));
  EXPECT_EQ(status.membership(1).clock(), 12);
  EXPECT_THAT(status.membership(1).places(), ElementsAre(0, 1, 2));
  EXPECT_THAT(status.membership(1).joined(), ElementsAre(2));
  // At max_workers: a further free worker stays free.
  const std::string spare = Register(v1::WORKER);
  EXPECT_THAT(manager_->Heartbeat(spare)->assignments(), SizeIs(0));
  // A coordinator restart keeps the history and the places.
  CreateManager();
  status = Status(id);
  EXPECT_THAT(status.membership(), SizeIs(2));
}

TEST_F(ElasticMembershipTest, AJoinerLostBeforeItIsReadyWithdrawsTheChange) {
  timing_.lease = absl::Milliseconds(800);
  const std::string id = Start(2, 1, 3);
  const std::string extra = Register(v1::WORKER);
  EXPECT_EQ(Status(id).membership_pending().version(), 1);
  // The joiner never heartbeats again; the others do.
  absl::SleepFor(absl::Milliseconds(500));
  for (const std::string& n : {server_, workers_[0], workers_[1]}) {
    ASSERT_TRUE(manager_->Heartbeat(n).ok());
  }
  absl::SleepFor(absl::Milliseconds(500));
  manager_->Tick(absl::Now());
  const v1::JobStatus status = Status(id);
  EXPECT_EQ(status.state(), v1::RUNNING);
  EXPECT_EQ(status.membership_pending().version(), 0);
  EXPECT_THAT(status.membership(), SizeIs(1));
  EXPECT_THAT(status.vacant(), SizeIs(0));
  // A later free worker joins with a new place (2 is closed for good).
  const std::string next = Register(v1::WORKER);
  EXPECT_EQ(Assignment(next).index(), 3);
}

TEST_F(ElasticMembershipTest, AFixedSizeJobHasNoHistory) {
  CreateManager();
  auto id = manager_->Submit(testing::TinyJobSpec(1, 1));
  ASSERT_TRUE(id.ok());
  Register(v1::SERVER, "10.0.0.1:7000");
  Register(v1::WORKER);
  manager_->Tick(absl::Now());
  EXPECT_EQ(Status(*id).state(), v1::RUNNING);
  EXPECT_THAT(Status(*id).membership(), SizeIs(0));
}

}  // namespace
}  // namespace ps
