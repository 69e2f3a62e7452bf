// A flood of submits while many jobs end at once (issue 26): 200 concurrent
// SubmitJob calls while 100 pending jobs are cancelled and retention deletes
// the excess ended jobs, over real gRPC on an in-process coordinator with its
// job table in a temporary directory. Every caller's answer must be true
// (an OK means the job exists, with the caller's spec, also after a restart;
// an error means no such job exists), and the registered servers and workers
// keep their leases throughout. Also: a job table that fails a write turns
// the coordinator's health NOT_SERVING.
#include <atomic>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "client/job_client.h"
#include "coordinator/coordinator.h"
#include "grpc/health/v1/health.grpc.pb.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "ps/v1/cluster.grpc.pb.h"
#include "tests/testing/failing_file_system.h"
#include "tests/testing/scoped_temp_dir.h"
#include "tests/testing/tiny_assignment.h"

namespace ps {
namespace {

constexpr int kFlood = 200;
constexpr int kCancelled = 100;
constexpr int kEndedBefore = 50;

// A valid in-memory job on 1 server and 1 worker named `name`.
v1::JobSpec FloodSpec(const std::string& name) {
  v1::JobSpec spec = testing::TinySpec(4, 3);
  spec.set_name(name);
  spec.mutable_optimizer()->mutable_sgd()->set_learning_rate(0.1f);
  spec.set_durability(v1::MEMORY);
  spec.set_num_servers(1);
  spec.set_num_workers(1);
  return spec;
}

class SubmitFloodTest : public ::testing::Test {
 protected:
  void TearDown() override {
    if (coordinator_) coordinator_->Stop();
    coordinator_.reset();
  }

  void StartCoordinator(JobTableOptions table = {}) {
    CoordinatorOptions options;
    options.data_dir = dir_.File("coordinator");
    options.table = std::move(table);
    options.job_limits.max_jobs = kFlood + kCancelled + 50;
    coordinator_ = std::make_unique<Coordinator>(options);
    ASSERT_TRUE(coordinator_->Start().ok());
    address_ = absl::StrCat("127.0.0.1:", coordinator_->port());
  }

  // Jobs by name (each name must be there at most once).
  std::map<std::string, std::vector<v1::JobStatus>> JobsByName() {
    JobClient client(JobClientOptions{address_});
    auto jobs = client.List();
    EXPECT_TRUE(jobs.ok()) << jobs.status();
    std::map<std::string, std::vector<v1::JobStatus>> by_name;
    if (!jobs.ok()) return by_name;
    for (v1::JobStatus& job : *jobs) {
      by_name[job.spec().name()].push_back(std::move(job));
    }
    return by_name;
  }

  testing::ScopedTempDir dir_{"ps-submit-flood"};
  std::string address_;
  std::unique_ptr<Coordinator> coordinator_;
};

// Registers `role` nodes and heartbeats them every 200 ms until `stop`;
// counts heartbeats refused (a lost lease answers NOT_FOUND).
void KeepNodes(const std::string& address, const std::atomic<bool>& stop,
               std::atomic<int>& refused, std::atomic<int>& registered) {
  auto stub = v1::ClusterService::NewStub(
      grpc::CreateChannel(address, grpc::InsecureChannelCredentials()));
  std::vector<std::string> ids;
  for (int i = 0; i < 4; ++i) {
    v1::RegisterRequest request;
    request.set_role(i < 2 ? v1::SERVER : v1::WORKER);
    if (i < 2) request.set_address(absl::StrCat("127.0.0.1:", 7100 + i));
    v1::RegisterResponse response;
    grpc::ClientContext ctx;
    if (!stub->Register(&ctx, request, &response).ok()) {
      ++refused;
      return;
    }
    ids.push_back(response.node_id());
  }
  registered = static_cast<int>(ids.size());
  while (!stop.load()) {
    for (const std::string& id : ids) {
      v1::HeartbeatRequest request;
      request.set_node_id(id);
      v1::HeartbeatResponse response;
      grpc::ClientContext ctx;
      if (!stub->Heartbeat(&ctx, request, &response).ok()) ++refused;
    }
    absl::SleepFor(absl::Milliseconds(200));
  }
}

TEST_F(SubmitFloodTest, EveryAnswerIsTrueAndNoLeaseIsLost) {
  StartCoordinator();
  std::atomic<bool> stop{false};
  std::atomic<int> refused{0}, registered{0};
  std::thread nodes([&] { KeepNodes(address_, stop, refused, registered); });
  while (registered.load() == 0 && refused.load() == 0) {
    absl::SleepFor(absl::Milliseconds(10));
  }
  // 150 jobs; 50 end now, 100 are cancelled during the flood: 150 ended,
  // and retention (100 kept) then deletes 50 at once.
  JobManager* manager = coordinator_->manager();
  std::vector<std::string> to_cancel;
  for (int i = 0; i < kEndedBefore + kCancelled; ++i) {
    auto id = manager->Submit(FloodSpec(absl::StrCat("old-", i)));
    ASSERT_TRUE(id.ok()) << id.status();
    if (i < kEndedBefore) {
      ASSERT_TRUE(manager->Cancel(*id).ok());
    } else {
      to_cancel.push_back(*id);
    }
  }

  absl::Mutex mu;
  std::map<int, absl::StatusOr<std::string>> answers;
  std::vector<std::thread> threads;
  threads.emplace_back([&] {
    JobClient client(JobClientOptions{address_});
    for (const std::string& id : to_cancel) {
      auto cancelled = client.Cancel(id);
      // The first job may have started (it then ends CANCELLED as well).
      EXPECT_TRUE(cancelled.ok()) << id << ": " << cancelled.status();
    }
  });
  for (int i = 0; i < kFlood; ++i) {
    threads.emplace_back([&, i] {
      JobClient client(JobClientOptions{address_});
      auto id = client.Submit(FloodSpec(absl::StrCat("flood-", i)));
      absl::MutexLock lock(&mu);
      answers.emplace(i, std::move(id));
    });
  }
  for (std::thread& t : threads) t.join();

  // Retention runs about once a second: wait until it has kept 100 ended.
  for (int tries = 0; tries < 100; ++tries) {
    int ended = 0;
    for (const auto& [name, jobs] : JobsByName()) {
      for (const v1::JobStatus& job : jobs) ended += IsTerminal(job.state());
    }
    if (ended <= 100) break;
    absl::SleepFor(absl::Milliseconds(100));
  }
  stop = true;
  nodes.join();
  EXPECT_EQ(refused.load(), 0) << "a node lost its lease or was refused";

  for (bool restarted : {false, true}) {
    if (restarted) {
      coordinator_->Stop();
      StartCoordinator();
    }
    auto by_name = JobsByName();
    int acknowledged = 0;
    for (const auto& [i, answer] : answers) {
      const auto& jobs = by_name[absl::StrCat("flood-", i)];
      ASSERT_LE(jobs.size(), 1u) << "flood-" << i << " exists twice";
      if (answer.ok()) {
        ++acknowledged;
        ASSERT_EQ(jobs.size(), 1u) << "flood-" << i << " was acknowledged";
        EXPECT_EQ(jobs[0].job_id(), *answer);
      } else {
        EXPECT_TRUE(jobs.empty())
            << "flood-" << i << " exists, but its caller was told "
            << answer.status();
      }
    }
    EXPECT_EQ(acknowledged, kFlood) << "restarted: " << restarted;
  }
}

// psctl's way: one fresh request id per invocation, the same on its
// retries; a retry after a restart still gets the first job.
TEST_F(SubmitFloodTest, ARequestIdNamesOneJobAcrossARestart) {
  const std::string request_id = NewRequestId();
  EXPECT_EQ(request_id.size(), 32u);
  EXPECT_NE(NewRequestId(), request_id);
  StartCoordinator();
  auto first = JobClient(JobClientOptions{address_})
                   .Submit(FloodSpec("once"), request_id);
  ASSERT_TRUE(first.ok()) << first.status();
  coordinator_->Stop();
  StartCoordinator();
  JobClient client(JobClientOptions{address_});
  auto retried = client.Submit(FloodSpec("once"), request_id);
  ASSERT_TRUE(retried.ok()) << retried.status();
  EXPECT_EQ(*retried, *first);
  auto jobs = client.List();
  ASSERT_TRUE(jobs.ok()) << jobs.status();
  EXPECT_EQ(jobs->size(), 1u);
}

TEST_F(SubmitFloodTest, AFailedWriteTurnsHealthNotServing) {
  auto fs = std::make_shared<testing::FailingFileSystem>();
  JobTableOptions table;
  table.env = testing::FailingFileSystem::EnvOver(fs);
  StartCoordinator(std::move(table));
  auto health = grpc::health::v1::Health::NewStub(
      grpc::CreateChannel(address_, grpc::InsecureChannelCredentials()));
  auto status = [&] {
    grpc::health::v1::HealthCheckRequest request;
    grpc::health::v1::HealthCheckResponse response;
    grpc::ClientContext ctx;
    EXPECT_TRUE(health->Check(&ctx, request, &response).ok());
    return response.status();
  };
  EXPECT_EQ(status(), grpc::health::v1::HealthCheckResponse::SERVING);
  JobClient client(JobClientOptions{address_});
  ASSERT_TRUE(client.Submit(FloodSpec("kept")).ok());

  fs->SetFailing(true);
  auto lost = client.Submit(FloodSpec("lost"));
  EXPECT_EQ(lost.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_NE(lost.status().message().find("not created"), std::string::npos)
      << lost.status();
  // The ticker reports the failure within a tick or so.
  auto serving = grpc::health::v1::HealthCheckResponse::SERVING;
  for (int tries = 0;
       tries < 100 && serving == grpc::health::v1::HealthCheckResponse::SERVING;
       ++tries) {
    absl::SleepFor(absl::Milliseconds(50));
    serving = status();
  }
  EXPECT_EQ(serving, grpc::health::v1::HealthCheckResponse::NOT_SERVING);
  auto jobs = client.List();
  ASSERT_TRUE(jobs.ok()) << jobs.status();
  ASSERT_EQ(jobs->size(), 1u);
  EXPECT_EQ((*jobs)[0].spec().name(), "kept");
  fs->SetFailing(false);
}

}  // namespace
}  // namespace ps
