// FormatNodesTable (client/nodes.h): psctl nodes' table.
#include "client/nodes.h"

#include <string>
#include <vector>

#include "absl/time/time.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace ps {
namespace {

TEST(FormatNodesTableTest, NoNodes) {
  EXPECT_EQ(FormatNodesTable({}), "no nodes registered\n");
}

TEST(FormatNodesTableTest, OneAlignedRowPerNode) {
  const absl::Time now = absl::FromUnixMillis(1'000'000);
  v1::NodeInfo server;
  server.set_node_id("server-1");
  server.set_role(v1::SERVER);
  server.set_address("10.0.0.2:7100");
  server.set_state(v1::NODE_ASSIGNED);
  server.set_job_id("job-000004");
  server.set_index(0);
  server.set_last_heartbeat_unix_ms(1'000'000 - 200);
  v1::NodeInfo worker;
  worker.set_node_id("worker-a");
  worker.set_role(v1::WORKER);
  worker.set_peer_host("10.0.0.9");
  worker.set_state(v1::NODE_IDLE);
  worker.set_index(-1);
  worker.set_last_heartbeat_unix_ms(1'000'000 - 1500);
  EXPECT_EQ(FormatNodesTable({server, worker}, now),
            "NODE      ROLE    ADDRESS        STATE     JOB         INDEX  "
            "LAST HEARTBEAT\n"
            "server-1  server  10.0.0.2:7100  assigned  job-000004  0      "
            "0.2s ago\n"
            "worker-a  worker  10.0.0.9       idle      -           -      "
            "1.5s ago\n");
}

}  // namespace
}  // namespace ps
