// psctl nodes against a real in-process cluster: a coordinator with a token
// file, a parameter server and two workers on loopback. JobService.ListNodes
// lists each with its role, address and job, and is authorized as the other
// reads.
#include "client/nodes.h"

#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "client/job_client.h"
#include "coordinator/coordinator.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/parameter_server.h"
#include "tests/testing/fashion_mnist.h"
#include "tests/testing/scoped_temp_dir.h"
#include "tests/testing/test_certs.h"
#include "worker/model/cpu/cpu_backend.h"
#include "worker/worker_node.h"

namespace ps {
namespace {

using ::testing::HasSubstr;

constexpr char kToken[] = "nodes-token-0123456789abcdef";

class NodesTest : public ::testing::Test {
 protected:
  void SetUp() override {
    testing::WriteTestFile(dir_.File("tokens"), kToken);
    CoordinatorOptions coordinator;
    coordinator.data_dir = dir_.File("coordinator");
    coordinator.auth_token_file = dir_.File("tokens");
    coordinator.timing.heartbeat_interval = absl::Milliseconds(50);
    coordinator_ = std::make_unique<Coordinator>(coordinator);
    ASSERT_TRUE(coordinator_->Start().ok());
    const std::string address =
        absl::StrCat("127.0.0.1:", coordinator_->port());
    ParameterServerOptions server;
    server.coordinator = address;
    server_ = std::make_unique<ParameterServer>(server);
    ASSERT_TRUE(server_->Start().ok());
    for (int i = 0; i < 2; ++i) {
      WorkerNodeOptions worker;
      worker.coordinator = address;
      workers_.push_back(std::make_unique<WorkerNode>(
          worker, CpuBackend::Create({.num_threads = 1})));
      ASSERT_TRUE(workers_.back()->Start().ok());
    }
    client_options_.coordinator = address;
    client_options_.token = kToken;
  }

  void TearDown() override {
    for (auto& worker : workers_) worker->Stop();
    if (server_) server_->Stop();
    if (coordinator_) coordinator_->Stop();
  }

  // ListNodes until `done(nodes)` holds or 20 s pass; the last list.
  std::vector<v1::NodeInfo> ListUntil(
      const std::function<bool(const std::vector<v1::NodeInfo>&)>& done) {
    const absl::Time deadline = absl::Now() + absl::Seconds(20);
    std::vector<v1::NodeInfo> nodes;
    while (absl::Now() < deadline) {
      auto listed = ListNodes(client_options_);
      EXPECT_TRUE(listed.ok()) << listed.status();
      if (!listed.ok()) return {};
      nodes = *std::move(listed);
      if (done(nodes)) break;
      absl::SleepFor(absl::Milliseconds(50));
    }
    return nodes;
  }

  testing::ScopedTempDir dir_{"ps-nodes"};
  std::unique_ptr<Coordinator> coordinator_;
  std::unique_ptr<ParameterServer> server_;
  std::vector<std::unique_ptr<WorkerNode>> workers_;
  JobClientOptions client_options_;
};

TEST_F(NodesTest, ListsEveryNodeWithItsRoleAddressAndState) {
  const std::vector<v1::NodeInfo> nodes =
      ListUntil([](const auto& nodes) { return nodes.size() == 3; });
  ASSERT_EQ(nodes.size(), 3u);
  EXPECT_EQ(nodes[0].role(), v1::SERVER);
  EXPECT_EQ(nodes[0].address(), server_->address());
  EXPECT_FALSE(nodes[0].durable());  // No data directory.
  for (const v1::NodeInfo& node : nodes) {
    EXPECT_EQ(node.state(), v1::NODE_IDLE) << node.node_id();
    EXPECT_EQ(node.peer_host(), "127.0.0.1") << node.node_id();
    EXPECT_GT(node.lease_expires_unix_ms(), node.last_heartbeat_unix_ms());
    // Heartbeats every 50 ms.
    EXPECT_GT(node.last_heartbeat_unix_ms(),
              absl::ToUnixMillis(absl::Now() - absl::Seconds(2)));
  }
  EXPECT_EQ(nodes[1].role(), v1::WORKER);
  EXPECT_EQ(nodes[2].role(), v1::WORKER);
  const std::string table = FormatNodesTable(nodes);
  EXPECT_THAT(table, HasSubstr(server_->address()));
  EXPECT_THAT(table, HasSubstr(nodes[2].node_id()));
}

TEST_F(NodesTest, NeedsATokenAsTheOtherReads) {
  JobClientOptions anonymous = client_options_;
  anonymous.token.clear();
  auto refused = ListNodes(anonymous);
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kUnauthenticated)
      << refused.status();
  EXPECT_EQ(JobClient(anonymous).List().status().code(),
            absl::StatusCode::kUnauthenticated);
  JobClientOptions wrong = client_options_;
  wrong.token = "not-the-token-0123456789";
  EXPECT_EQ(ListNodes(wrong).status().code(),
            absl::StatusCode::kUnauthenticated);
}

TEST_F(NodesTest, ARunningJobsNodesAreAssignedToIt) {
  if (!testing::HaveFashionMnist()) {
    GTEST_SKIP() << "Fashion-MNIST not installed";
  }
  v1::JobSpec spec = testing::FashionMnistMlpJob("nodes", 16, 2000, 100);
  spec.set_epochs(1000);  // Runs until cancelled.
  spec.set_num_servers(1);
  spec.set_num_workers(1);
  spec.set_durability(v1::MEMORY);  // The server has no data directory.
  JobClient client(client_options_);
  auto id = client.Submit(spec);
  ASSERT_TRUE(id.ok()) << id.status();
  const std::vector<v1::NodeInfo> nodes = ListUntil([&](const auto& nodes) {
    int assigned = 0;
    for (const v1::NodeInfo& node : nodes) {
      if (node.state() == v1::NODE_ASSIGNED) ++assigned;
    }
    return nodes.size() == 3 && assigned == 2;
  });
  ASSERT_EQ(nodes.size(), 3u);
  int idle = 0;
  for (const v1::NodeInfo& node : nodes) {
    if (node.state() == v1::NODE_IDLE) {
      ++idle;
      EXPECT_EQ(node.role(), v1::WORKER);
      continue;
    }
    EXPECT_EQ(node.state(), v1::NODE_ASSIGNED) << node.node_id();
    EXPECT_EQ(node.job_id(), *id) << node.node_id();
    EXPECT_EQ(node.index(), 0) << node.node_id();
  }
  EXPECT_EQ(idle, 1);
  EXPECT_THAT(FormatNodesTable(nodes), HasSubstr(*id));
  ASSERT_TRUE(client.Cancel(*id).ok());
}

}  // namespace
}  // namespace ps
