#include "coordinator/node_registry.h"

#include "absl/strings/match.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace ps {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;

const absl::Time kStart = absl::FromUnixSeconds(1000);
const absl::Duration kLease = absl::Seconds(5);

NodeRecord Server(const std::string& address, bool durable,
                  const std::string& storage = "") {
  NodeRecord node;
  node.role = v1::SERVER;
  node.address = address;
  node.durable = durable;
  node.storage_id = storage;
  node.last_seen = kStart;
  return node;
}

NodeRecord Worker(absl::Time last_seen = kStart) {
  NodeRecord node;
  node.role = v1::WORKER;
  node.last_seen = last_seen;
  return node;
}

v1::RegisterRequest ServerRequest(const std::string& address,
                                  const std::string& storage) {
  v1::RegisterRequest request;
  request.set_role(v1::SERVER);
  request.set_address(address);
  request.set_storage_id(storage);
  return request;
}

TEST(NodeRegistryTest, IdsNameTheRoleAndAreNeverReused) {
  NodeRegistry registry(kLease);
  const std::string server = registry.Add(Server("10.0.0.1:1", true));
  const std::string worker = registry.Add(Worker());
  EXPECT_TRUE(absl::StartsWith(server, "server-")) << server;
  EXPECT_TRUE(absl::StartsWith(worker, "worker-")) << worker;
  registry.Erase(worker);
  EXPECT_EQ(registry.Find(worker), nullptr);
  EXPECT_NE(registry.Add(Worker()), worker);
}

TEST(NodeRegistryTest, FreeListsLiveNodesWithoutAJobThatTheFilterAccepts) {
  NodeRegistry registry(kLease);
  const std::string durable = registry.Add(Server("10.0.0.1:1", true));
  const std::string in_memory = registry.Add(Server("10.0.0.2:1", false));
  const std::string busy = registry.Add(Server("10.0.0.3:1", true));
  registry.Find(busy)->job_id = "job-000001";
  const std::string stale =
      registry.Add(Worker(kStart - kLease - absl::Seconds(1)));
  const std::string fresh = registry.Add(Worker());

  NodeRegistry::Filter servers;
  servers.role = v1::SERVER;
  EXPECT_THAT(registry.Free(servers, kStart), ElementsAre(durable, in_memory));
  EXPECT_EQ(registry.CountLive(servers, kStart), 3);
  servers.durable_only = true;
  EXPECT_THAT(registry.Free(servers, kStart), ElementsAre(durable));
  EXPECT_EQ(registry.CountLive(servers, kStart), 2);

  NodeRegistry::Filter workers;
  workers.role = v1::WORKER;
  EXPECT_THAT(registry.Free(workers, kStart), ElementsAre(fresh));
  workers.accepts = [&](const NodeRecord&) { return false; };
  EXPECT_THAT(registry.Free(workers, kStart), IsEmpty());
  EXPECT_EQ(registry.Count(v1::WORKER), 2);  // The stale one too.
  (void)stale;
}

TEST(NodeRegistryTest, ReleaseFreesOnlyThePlaceOfTheGivenJob) {
  NodeRegistry registry(kLease);
  const std::string id = registry.Add(Worker());
  registry.Find(id)->job_id = "job-000001";
  registry.Find(id)->index = 1;
  registry.Release(id, "job-000002");
  EXPECT_EQ(registry.Find(id)->job_id, "job-000001");
  registry.Release(id, "job-000001");
  EXPECT_EQ(registry.Find(id)->job_id, "");
  EXPECT_EQ(registry.Find(id)->index, -1);
  registry.Release("worker-unknown");  // No node: nothing happens.
}

TEST(NodeRegistryTest, ExpireLeasesRemovesExactlyTheNodesPastTheirLease) {
  NodeRegistry registry(kLease);
  const std::string at_lease = registry.Add(Worker(kStart - kLease));
  const std::string past =
      registry.Add(Worker(kStart - kLease - absl::Milliseconds(1)));
  auto expired = registry.ExpireLeases(kStart);
  ASSERT_EQ(expired.size(), 1u);
  EXPECT_EQ(expired[0].first, past);
  EXPECT_NE(registry.Find(at_lease), nullptr);
  EXPECT_EQ(registry.Find(past), nullptr);
}

TEST(NodeRegistryTest, AServerAddressIsReplacedOnlyBySameStorageOrAfterLease) {
  NodeRegistry registry(kLease);
  const std::string id = registry.Add(Server("10.0.0.1:7001", true, "disk-a"));

  auto same = registry.ServerToReplace(ServerRequest("10.0.0.1:7001", "disk-a"),
                                       "10.0.0.1", kStart);
  ASSERT_TRUE(same.ok()) << same.status();
  EXPECT_EQ(same->value_or(""), id);

  auto other = registry.ServerToReplace(
      ServerRequest("10.0.0.1:7001", "disk-b"), "10.0.0.1", kStart);
  EXPECT_EQ(other.status().code(), absl::StatusCode::kAlreadyExists);
  EXPECT_THAT(other.status().message(), HasSubstr(id));

  auto after_lease =
      registry.ServerToReplace(ServerRequest("10.0.0.1:7001", "disk-b"),
                               "10.0.0.1", kStart + kLease + absl::Seconds(1));
  ASSERT_TRUE(after_lease.ok()) << after_lease.status();
  EXPECT_EQ(after_lease->value_or(""), id);

  auto new_address = registry.ServerToReplace(
      ServerRequest("10.0.0.2:7001", "disk-c"), "10.0.0.2", kStart);
  ASSERT_TRUE(new_address.ok());
  EXPECT_FALSE(new_address->has_value());
}

TEST(NodeRegistryTest, ALoopbackAddressFromAnotherHostIsRefused) {
  NodeRegistry registry(kLease);
  auto refused = registry.ServerToReplace(
      ServerRequest("127.0.0.1:7001", "disk-a"), "10.0.0.9", kStart);
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(refused.status().message(), HasSubstr("--advertise_host"));
  EXPECT_TRUE(registry
                  .ServerToReplace(ServerRequest("127.0.0.1:7001", "disk-a"),
                                   "127.0.0.1", kStart)
                  .ok());
}

}  // namespace
}  // namespace ps
