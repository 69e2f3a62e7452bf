// JobManager::ListNodes (coordinator/job_manager_nodes.cc): the registry as
// psctl nodes shows it.
#include <string>
#include <vector>

#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "coordinator/job_manager.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testing/job_manager_fixture.h"

namespace ps {
namespace {

using ::testing::IsEmpty;
using ::testing::SizeIs;

class JobManagerNodesTest : public testing::JobManagerFixture {};

TEST_F(JobManagerNodesTest, NoNodesListsNothing) {
  EXPECT_THAT(manager_->ListNodes(), IsEmpty());
}

TEST_F(JobManagerNodesTest, ListsServersFirstWithTheirJobAndPlace) {
  const absl::Time before = absl::Now();
  const std::string w0 = Register(v1::WORKER);
  const std::string s0 = Register(v1::SERVER, "10.0.0.1:7000");
  const std::string idle = Register(v1::WORKER);
  // Only one worker is needed: the other stays idle.
  auto id = manager_->Submit(testing::TinyJobSpec(/*servers=*/1,
                                                  /*workers=*/1));
  ASSERT_TRUE(id.ok()) << id.status();
  manager_->Tick(absl::Now());

  const std::vector<v1::NodeInfo> nodes = manager_->ListNodes();
  ASSERT_THAT(nodes, SizeIs(3));
  const v1::NodeInfo& server = nodes[0];
  EXPECT_EQ(server.node_id(), s0);
  EXPECT_EQ(server.role(), v1::SERVER);
  EXPECT_EQ(server.address(), "10.0.0.1:7000");
  EXPECT_TRUE(server.durable());
  EXPECT_EQ(server.state(), v1::NODE_ASSIGNED);
  EXPECT_EQ(server.job_id(), *id);
  EXPECT_EQ(server.index(), 0);
  EXPECT_GE(server.last_heartbeat_unix_ms(), absl::ToUnixMillis(before));
  EXPECT_EQ(server.lease_expires_unix_ms() - server.last_heartbeat_unix_ms(),
            absl::ToInt64Milliseconds(timing_.lease));

  // Workers in node id order; one runs the job, the other is idle.
  int assigned = 0;
  for (int i = 1; i < 3; ++i) {
    const v1::NodeInfo& worker = nodes[i];
    EXPECT_EQ(worker.role(), v1::WORKER);
    EXPECT_EQ(worker.address(), "");
    if (worker.state() == v1::NODE_ASSIGNED) {
      ++assigned;
      EXPECT_EQ(worker.job_id(), *id);
      EXPECT_EQ(worker.index(), 0);
    } else {
      EXPECT_EQ(worker.state(), v1::NODE_IDLE);
      EXPECT_EQ(worker.job_id(), "");
      EXPECT_EQ(worker.index(), -1);
    }
  }
  EXPECT_EQ(assigned, 1);
  EXPECT_LT(nodes[1].node_id(), nodes[2].node_id());
  EXPECT_THAT(
      (std::vector<std::string>{nodes[1].node_id(), nodes[2].node_id()}),
      ::testing::UnorderedElementsAre(w0, idle));
}

TEST_F(JobManagerNodesTest,
       AHeartbeatMovesTheLastHeartbeatAndANodeWithoutOneIsDropped) {
  const std::string w0 = Register(v1::WORKER);
  const int64_t registered = manager_->ListNodes()[0].last_heartbeat_unix_ms();
  absl::SleepFor(absl::Milliseconds(5));
  ASSERT_TRUE(manager_->Heartbeat(w0).ok());
  EXPECT_GT(manager_->ListNodes()[0].last_heartbeat_unix_ms(), registered);
  // Past its lease the node is no longer registered.
  manager_->Tick(absl::Now() + timing_.lease + absl::Seconds(1));
  EXPECT_THAT(manager_->ListNodes(), IsEmpty());
}

}  // namespace
}  // namespace ps
