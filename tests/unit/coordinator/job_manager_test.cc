// JobManager over a real JobTable: submitting, registering nodes, starting a
// job once enough nodes are free (and only on nodes that fit it), cancelling
// and watching.
#include "coordinator/job_manager.h"

#include <set>
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

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;
using ::testing::SizeIs;
using ::testing::StartsWith;

TEST_F(JobManagerTest, SubmitInvalidIsInvalidArgumentNamingTheField) {
  v1::JobSpec spec = Spec();
  spec.set_batch_size(0);
  auto id = manager_->Submit(spec);
  EXPECT_EQ(id.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(id.status().message()), StartsWith("batch_size: "));
  EXPECT_THAT(manager_->List(), IsEmpty());
}

TEST_F(JobManagerTest, SubmitQueuesAPendingJob) {
  const std::string id = Submit();
  EXPECT_EQ(id, "job-000001");
  auto status = manager_->Get(id);
  ASSERT_TRUE(status.ok()) << status.status();
  EXPECT_EQ(status->job_id(), id);
  EXPECT_EQ(status->state(), v1::PENDING);
  EXPECT_EQ(status->spec().name(), "tiny");
  // Stored with its defaults applied.
  EXPECT_EQ(status->spec().consistency().model(), v1::ConsistencySpec::BSP);
  EXPECT_EQ(status->spec().durability(), v1::WAL);
  EXPECT_EQ(status->progress().total_epochs(), 3);
  EXPECT_EQ(status->progress().test_accuracy(), -1);
  EXPECT_GT(status->create_time_ms(), 0);
  EXPECT_EQ(Submit(), "job-000002");
  EXPECT_THAT(manager_->List(), SizeIs(2));
}

TEST_F(JobManagerTest, GetUnknownIsNotFound) {
  EXPECT_EQ(manager_->Get("job-999999").status().code(),
            absl::StatusCode::kNotFound);
  EXPECT_EQ(manager_->Cancel("job-999999").status().code(),
            absl::StatusCode::kNotFound);
  EXPECT_EQ(manager_->Watch("job-999999", [](const v1::JobStatus&) {})
                .status()
                .code(),
            absl::StatusCode::kNotFound);
}

TEST_F(JobManagerTest, RegisterChecksTheRequest) {
  v1::RegisterRequest request;
  EXPECT_EQ(manager_->Register(request).status().code(),
            absl::StatusCode::kInvalidArgument);
  request.set_role(v1::SERVER);  // A server needs an address.
  EXPECT_EQ(manager_->Register(request).status().code(),
            absl::StatusCode::kInvalidArgument);
  request.set_address("10.0.0.1:7000");
  auto response = manager_->Register(request);
  ASSERT_TRUE(response.ok()) << response.status();
  EXPECT_FALSE(response->node_id().empty());
  EXPECT_EQ(response->lease_ms(), 5000);
  EXPECT_EQ(response->heartbeat_interval_ms(), 100);
  // Node ids are unique.
  EXPECT_NE(Register(v1::SERVER, "10.0.0.2:7000"), response->node_id());
  // A free node has no assignment.
  EXPECT_THAT(Assignments(response->node_id()), IsEmpty());
  EXPECT_EQ(manager_->Heartbeat("worker-unknown").status().code(),
            absl::StatusCode::kNotFound);
}

TEST_F(JobManagerTest, JobStartsOnceEnoughNodesRegistered) {
  const std::string id = Submit(Spec(/*servers=*/2, /*workers=*/2));
  const std::string s0 = Register(v1::SERVER, "10.0.0.1:7000");
  const std::string w0 = Register(v1::WORKER);
  const std::string w1 = Register(v1::WORKER);
  manager_->Tick(absl::Now());
  EXPECT_EQ(State(id), v1::PENDING);  // One server short.
  EXPECT_THAT(Assignments(w0), IsEmpty());
  const std::string s1 = Register(v1::SERVER, "10.0.0.2:7000");
  manager_->Tick(absl::Now());
  auto status = manager_->Get(id);
  ASSERT_TRUE(status.ok());
  EXPECT_EQ(status->state(), v1::RUNNING);
  EXPECT_GT(status->start_time_ms(), 0);

  std::set<int> server_indices, worker_indices;
  std::set<std::string> addresses;
  v1::ShardMap map;
  for (const std::string& node : {s0, s1, w0, w1}) {
    auto assignments = Assignments(node);
    ASSERT_THAT(assignments, SizeIs(1)) << node;
    const v1::Assignment& a = assignments[0];
    EXPECT_EQ(a.job_id(), id);
    EXPECT_EQ(a.num_workers(), 2);
    EXPECT_EQ(a.spec().name(), "tiny");
    EXPECT_EQ(a.shard_map().version(), 1);
    if (node == s0 || node == s1) {
      server_indices.insert(a.index());
      addresses.insert(a.shard_map().servers(a.index()));
      // The server's own address is at its index.
      EXPECT_EQ(a.shard_map().servers(a.index()),
                node == s0 ? "10.0.0.1:7000" : "10.0.0.2:7000");
    } else {
      worker_indices.insert(a.index());
    }
    if (map.blocks_size() == 0) map = a.shard_map();
    EXPECT_EQ(a.shard_map().SerializeAsString(), map.SerializeAsString());
  }
  EXPECT_THAT(server_indices, ElementsAre(0, 1));
  EXPECT_THAT(worker_indices, ElementsAre(0, 1));
  // The map places every block of the model (weight 12 + bias 3 in blocks of
  // 5).
  ASSERT_EQ(map.servers_size(), 2);
  auto tensors = ModelTensors(Spec().model());
  ASSERT_TRUE(tensors.ok());
  std::set<uint64_t> expected, placed;
  for (const BlockSpec& b : SplitIntoBlocks(*tensors, 5))
    expected.insert(b.key);
  for (const auto& p : map.blocks()) {
    placed.insert(p.key());
    EXPECT_TRUE(p.server() == 0 || p.server() == 1);
  }
  EXPECT_EQ(placed, expected);
  EXPECT_EQ(placed.size(), 4u);
}

TEST_F(JobManagerTest, BusyNodesAreNotSharedAndExtraNodesStayFree) {
  const std::string id = Submit();
  StartJob(id);
  const std::string spare = Register(v1::WORKER);
  const std::string second = Submit();
  manager_->Tick(absl::Now());
  EXPECT_EQ(State(second), v1::PENDING);  // Needs a server and two workers.
  EXPECT_THAT(Assignments(spare), IsEmpty());
}

TEST_F(JobManagerTest, AJobThatCannotFitDoesNotHoldBackLaterJobs) {
  const std::string big = Submit(Spec(/*servers=*/1, /*workers=*/3));
  const std::string small = Submit(Spec(/*servers=*/1, /*workers=*/2));
  Register(v1::SERVER, "10.0.0.1:7000");
  Register(v1::WORKER);
  Register(v1::WORKER);
  manager_->Tick(absl::Now());
  EXPECT_EQ(State(big), v1::PENDING);
  EXPECT_EQ(Status(big).message(), "waiting for 3 workers, 2 registered");
  EXPECT_EQ(State(small), v1::RUNNING);
  EXPECT_EQ(Status(small).message(), "");
  // Once a third worker registers, the big job waits for busy nodes and holds
  // back the jobs queued after it, so that it is never starved.
  Register(v1::WORKER);
  const std::string later = Submit(Spec(/*servers=*/1, /*workers=*/1));
  Register(v1::SERVER, "10.0.0.2:7000");
  manager_->Tick(absl::Now());
  EXPECT_EQ(State(big), v1::PENDING);
  EXPECT_THAT(Status(big).message(),
              HasSubstr("waiting for busy nodes to free up"));
  EXPECT_EQ(State(later), v1::PENDING);
  EXPECT_THAT(Status(later).message(), HasSubstr("queued behind " + big));
}

TEST_F(JobManagerTest, DurableJobsRunOnlyOnServersWithADataDirectory) {
  const std::string durable = Submit(Spec(/*servers=*/1, /*workers=*/1));
  v1::RegisterRequest in_memory;
  in_memory.set_role(v1::SERVER);
  in_memory.set_address("10.0.0.1:7000");
  in_memory.set_storage_id("memory-1");
  ASSERT_TRUE(manager_->Register(in_memory).ok());
  Register(v1::WORKER);
  manager_->Tick(absl::Now());
  EXPECT_EQ(State(durable), v1::PENDING);
  EXPECT_EQ(Status(durable).message(),
            "waiting for 1 server with a data directory (durability WAL), 0 "
            "registered (1 server in all)");
  // A MEMORY job may use it.
  v1::JobSpec spec = Spec(/*servers=*/1, /*workers=*/1);
  spec.set_durability(v1::MEMORY);
  const std::string memory = Submit(spec);
  manager_->Tick(absl::Now());
  EXPECT_EQ(State(memory), v1::RUNNING);
  EXPECT_EQ(State(durable), v1::PENDING);
}

TEST_F(JobManagerTest, TwoLiveServersCannotShareAnAddress) {
  Register(v1::SERVER, "10.0.0.1:7000");
  v1::RegisterRequest other;
  other.set_role(v1::SERVER);
  other.set_address("10.0.0.1:7000");
  other.set_durable(true);
  other.set_storage_id("another-storage");
  auto refused = manager_->Register(other);
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kAlreadyExists);
  EXPECT_THAT(refused.status().message(),
              HasSubstr("10.0.0.1:7000 is already registered by server"));
  EXPECT_THAT(refused.status().message(), HasSubstr("--advertise_host"));
  // Once the first one's lease has expired, the address is free.
  manager_->Tick(absl::Now() + timing_.lease + absl::Seconds(1));
  EXPECT_TRUE(manager_->Register(other).ok());
}

TEST_F(JobManagerTest, AServerRegisteringAgainWithItsStorageReplacesItself) {
  const std::string id = Submit(Spec(/*servers=*/1, /*workers=*/2));
  StartJob(id);
  // A restart on the same data directory (or a retried Register) before the
  // old lease expired: the same storage, so the new node takes the place.
  const std::string again = Register(v1::SERVER, "10.0.0.1:7000");
  ASSERT_NE(again, server_);
  EXPECT_EQ(manager_->Heartbeat(server_).status().code(),
            absl::StatusCode::kNotFound);
  auto assignments = Assignments(again);
  ASSERT_THAT(assignments, SizeIs(1));
  EXPECT_EQ(assignments[0].job_id(), id);
  EXPECT_EQ(State(id), v1::RUNNING);
  EXPECT_EQ(metrics_.nodes("server").Value(), 1);
}

TEST_F(JobManagerTest, ALoopbackAddressFromAnotherHostIsRefused) {
  v1::RegisterRequest request;
  request.set_role(v1::SERVER);
  request.set_address("127.0.0.1:7100");
  auto refused = manager_->Register(request, "10.0.0.5");
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(refused.status().message(),
              HasSubstr("loopback address, but registers from 10.0.0.5"));
  EXPECT_TRUE(manager_->Register(request, "127.0.0.1").ok());
}

TEST_F(JobManagerTest, CancelEndsARunningJobOnce) {
  const std::string id = Submit();
  StartJob(id);
  auto cancelled = manager_->Cancel(id);
  ASSERT_TRUE(cancelled.ok()) << cancelled.status();
  EXPECT_EQ(cancelled->state(), v1::CANCELLED);
  EXPECT_EQ(State(id), v1::CANCELLED);
  EXPECT_THAT(Assignments(server_), IsEmpty());
  EXPECT_EQ(manager_->Cancel(id).status().code(),
            absl::StatusCode::kFailedPrecondition);
  auto stop = Send(Report(id, 0));
  ASSERT_TRUE(stop.ok());
  EXPECT_TRUE(stop->stop());
}

TEST_F(JobManagerTest, CancelPendingJob) {
  const std::string id = Submit();
  auto cancelled = manager_->Cancel(id);
  ASSERT_TRUE(cancelled.ok()) << cancelled.status();
  EXPECT_EQ(cancelled->state(), v1::CANCELLED);
  // A cancelled job never starts.
  Register(v1::SERVER, "10.0.0.1:7000");
  Register(v1::WORKER);
  Register(v1::WORKER);
  manager_->Tick(absl::Now());
  EXPECT_EQ(State(id), v1::CANCELLED);
}

TEST_F(JobManagerTest, WatchSeesTheCurrentStatusAndLaterChanges) {
  const std::string id = Submit();
  std::vector<v1::JobState> seen;
  auto token = manager_->Watch(
      id, [&seen](const v1::JobStatus& s) { seen.push_back(s.state()); });
  ASSERT_TRUE(token.ok()) << token.status();
  EXPECT_THAT(seen, ElementsAre(v1::PENDING));
  StartJob(id);
  ASSERT_FALSE(seen.empty());
  EXPECT_EQ(seen.back(), v1::RUNNING);
  const size_t before = seen.size();
  v1::ProgressReport r0 = Report(id, 0);
  r0.set_clock(3);
  ASSERT_TRUE(Send(r0).ok());
  EXPECT_EQ(seen.size(), before + 1);
  manager_->Unwatch(*token);
  ASSERT_TRUE(manager_->Cancel(id).ok());
  EXPECT_EQ(seen.size(), before + 1);
  EXPECT_EQ(seen.back(), v1::RUNNING);
}

TEST_F(JobManagerTest, WatchersSeeOnlyTheirJob) {
  const std::string a = Submit();
  const std::string b = Submit();
  int calls_a = 0, calls_b = 0;
  ASSERT_TRUE(
      manager_->Watch(a, [&calls_a](const v1::JobStatus&) { ++calls_a; }).ok());
  ASSERT_TRUE(
      manager_->Watch(b, [&calls_b](const v1::JobStatus&) { ++calls_b; }).ok());
  ASSERT_TRUE(manager_->Cancel(b).ok());
  EXPECT_EQ(calls_a, 1);
  EXPECT_EQ(calls_b, 2);
}

}  // namespace
}  // namespace ps::job_manager_test
