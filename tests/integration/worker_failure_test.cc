// How workers fail and stop: a push a retry cannot fix fails the job at once
// with its cause, and a worker whose server stops answering in the middle of
// a push still stops promptly (its calls in flight are cancelled) and keeps
// heartbeating. A coordinator, two parameter servers and two workers in one
// process on loopback port 0.
#include <atomic>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "client/job_client.h"
#include "common/grpc_util.h"
#include "coordinator/coordinator.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "ps/v1/cluster.grpc.pb.h"
#include "server/parameter_server.h"
#include "tests/testing/cluster_fixture.h"
#include "tests/testing/fashion_mnist.h"
#include "tests/testing/freezable_proxy.h"
#include "tests/testing/parameter_server_test_peer.h"
#include "worker/model/cpu/cpu_backend.h"
#include "worker/worker_node.h"

namespace ps {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

using testing::FreezableProxy;
using testing::HaveFashionMnist;

v1::JobSpec TwoWorkerJob(v1::ConsistencySpec::Model model) {
  v1::JobSpec spec = testing::FashionMnistMlpJob("failures", 64, 4000, 500);
  spec.set_epochs(20);  // Longer than any test waits: it never ends by itself.
  spec.mutable_consistency()->set_model(model);
  spec.set_num_workers(2);
  spec.set_num_servers(2);
  spec.set_block_elems(16384);
  spec.set_durability(v1::MEMORY);  // The servers have no data directory.
  return spec;
}

class WorkerFailureTest : public testing::ClusterFixture {
 protected:
  void SetUp() override {
    if (!HaveFashionMnist()) GTEST_SKIP() << "Fashion-MNIST not installed";
    ASSERT_NO_FATAL_FAILURE(StartCoordinator("worker-failure"));
  }

  // Starts two servers (pushes go through `push_faults`) and two workers.
  // `behind_proxies`: workers reach each server through a FreezableProxy (the
  // server advertises 127.0.0.2 and its port, where the proxy listens).
  void StartNodes(const PushFaultInjector& push_faults,
                  const TrainerOptions& trainer, bool behind_proxies = false) {
    for (int i = 0; i < 2; ++i) {
      ParameterServerOptions server;
      server.coordinator = address_;
      if (behind_proxies) server.advertise_host = "127.0.0.2";
      servers_.push_back(
          ParameterServerTestPeer::WithPushFaults(server, push_faults));
      ASSERT_TRUE(servers_.back()->Start().ok());
      if (behind_proxies) {
        auto proxy =
            FreezableProxy::Start("127.0.0.2", servers_.back()->port());
        ASSERT_TRUE(proxy.ok()) << proxy.status();
        proxies_.push_back(*std::move(proxy));
      }
    }
    StartWorkers(2, trainer);
  }

  void TearDown() override {
    StopWorkers();
    proxies_.clear();
    StopServersAndCoordinator();
  }

  std::vector<std::unique_ptr<FreezableProxy>> proxies_;
};

// A learning rate of 1e30 makes the first update blow the parameters up; the
// next gradients hold NaN or Inf and the servers refuse them
// (NON_FINITE_REFUSE, the default). The worker's clock can then never
// advance, and its pull made ahead of the refused push must not wait for it:
// the job fails at once with the servers' reason, not after the pull's
// retries with "pull failed after retrying".
TEST_F(WorkerFailureTest, RefusedGradientFailsTheJobWithItsCause) {
  TrainerOptions trainer;
  // Short, so that a job waiting out its retries fails this test in seconds
  // rather than minutes.
  trainer.parameter_client.pull_timeout = absl::Seconds(5);
  trainer.parameter_client.retry_window = absl::Seconds(15);
  StartNodes(nullptr, trainer);
  for (auto model : {v1::ConsistencySpec::BSP, v1::ConsistencySpec::SSP}) {
    v1::JobSpec spec = TwoWorkerJob(model);
    spec.mutable_consistency()->set_staleness(
        model == v1::ConsistencySpec::SSP ? 1 : 0);
    spec.mutable_optimizer()->mutable_sgd()->set_learning_rate(1e30f);
    auto id = client_->Submit(spec);
    ASSERT_TRUE(id.ok()) << id.status();
    auto job = client_->Watch(*id, [](const v1::JobStatus&) {});
    ASSERT_TRUE(job.ok()) << job.status();
    EXPECT_EQ(job->state(), v1::FAILED);
    EXPECT_THAT(job->message(), HasSubstr("NaN or Inf"))
        << v1::ConsistencySpec::Model_Name(model);
    EXPECT_THAT(job->message(), HasSubstr("push of clock"));
    EXPECT_THAT(job->message(), Not(HasSubstr("retrying")));
  }
}

// Both servers stop answering (their proxies freeze) once the workers push
// clock 3, so each worker waits on a push (or a pull) in flight when the job
// is cancelled. Each worker must drop the job at once (its trainer's calls
// are cancelled; the heartbeat thread never waits for a trainer), keep
// answering and heartbeating, and stop within seconds.
TEST_F(WorkerFailureTest, WorkerStopsPromptlyWhileItsServersDoNotAnswer) {
  std::atomic<int> reached{0};
  PushFaultInjector count = [&](const v1::PushRequest& push) {
    if (push.clock() >= 3) ++reached;
    return PushFault();
  };
  TrainerOptions trainer;
  // Longer than this test waits for anything: a call to a server that does
  // not answer is never simply timed out, nor closed by keepalive.
  trainer.parameter_client.push_timeout = absl::Seconds(60);
  trainer.parameter_client.pull_timeout = absl::Seconds(60);
  trainer.parameter_client.connection.keepalive_time = absl::Seconds(60);
  StartNodes(count, trainer, /*behind_proxies=*/true);
  auto id = client_->Submit(TwoWorkerJob(v1::ConsistencySpec::ASP));
  ASSERT_TRUE(id.ok()) << id.status();
  const absl::Time give_up = absl::Now() + absl::Seconds(60);
  while (reached.load() == 0 && absl::Now() < give_up) {
    absl::SleepFor(absl::Milliseconds(10));
  }
  ASSERT_GT(reached.load(), 0) << "the pushes did not reach clock 3";
  for (auto& proxy : proxies_) proxy->Freeze();
  absl::SleepFor(absl::Milliseconds(500));  // Calls are now in flight.

  auto cancelled = client_->Cancel(*id);
  ASSERT_TRUE(cancelled.ok()) << cancelled.status();

  // Each worker drops the job: its status (which takes the node's lock)
  // answers, and soon names no job, though the servers still do not answer.
  for (auto& worker : workers_) {
    auto stub = v1::WorkerService::NewStub(
        CreateChannel(absl::StrCat("127.0.0.1:", worker->port())));
    const absl::Time deadline = absl::Now() + absl::Seconds(10);
    std::string job = *id;
    while (!job.empty() && absl::Now() < deadline) {
      grpc::ClientContext ctx;
      SetDeadline(&ctx, absl::Seconds(1));
      v1::WorkerStatus status;
      grpc::Status s =
          stub->GetWorkerStatus(&ctx, v1::WorkerStatusRequest(), &status);
      if (s.ok()) job = status.job_id();
      if (!job.empty()) absl::SleepFor(absl::Milliseconds(50));
    }
    EXPECT_EQ(job, "") << "the worker still holds the cancelled job";
  }
  // Heartbeats go on: after more than a lease (5 s) the coordinator still
  // counts both workers as members, and a new job gets them at once.
  absl::SleepFor(absl::Seconds(6));
  v1::JobSpec next = TwoWorkerJob(v1::ConsistencySpec::ASP);
  auto next_id = client_->Submit(next);
  ASSERT_TRUE(next_id.ok()) << next_id.status();
  const absl::Time running_by = absl::Now() + absl::Seconds(20);
  v1::JobStatus status;
  while (absl::Now() < running_by) {
    auto got = client_->Get(*next_id);
    ASSERT_TRUE(got.ok()) << got.status();
    status = *got;
    if (status.state() != v1::PENDING) break;
    absl::SleepFor(absl::Milliseconds(100));
  }
  EXPECT_EQ(status.state(), v1::RUNNING) << status.message();
  ASSERT_TRUE(client_->Cancel(*next_id).ok());

  // Stopping a worker ends its trainer's calls rather than waiting for them.
  for (auto& worker : workers_) {
    const absl::Time start = absl::Now();
    worker->Stop();
    EXPECT_LT(absl::Now() - start, absl::Seconds(5));
  }
}

}  // namespace
}  // namespace ps
