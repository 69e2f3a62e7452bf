// A whole cluster in one process, for the integration tests that train
// (cluster_test, export_test, scale_test, scale_sparse_test,
// worker_failure_test): a coordinator
// on loopback port 0 with its data in a temporary directory (a heartbeat
// every 50 ms, a 5 s lease), parameter servers with RocksDB in that
// directory, workers on the CPU backend, and a JobClient. Real gRPC.
#ifndef PS_TESTS_TESTING_CLUSTER_FIXTURE_H_
#define PS_TESTS_TESTING_CLUSTER_FIXTURE_H_

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "client/job_client.h"
#include "coordinator/coordinator.h"
#include "gtest/gtest.h"
#include "server/parameter_server.h"
#include "tests/testing/scoped_temp_dir.h"
#include "worker/model/cpu/cpu_backend.h"
#include "worker/trainer.h"
#include "worker/worker_node.h"

namespace ps::testing {

// Each Start* ASSERTs that what it starts started: call it in
// ASSERT_NO_FATAL_FAILURE. TearDown stops what was started.
class ClusterFixture : public ::testing::Test {
 protected:
  // Makes dir_ (ps-<name>-XXXXXX in the temporary directory), starts the
  // coordinator with its data in dir_/coordinator and coordinator_timing_,
  // and makes client_.
  void StartCoordinator(const std::string& name) {
    dir_.emplace("ps-" + name);
    CoordinatorOptions coordinator;
    coordinator.data_dir = dir_->File("coordinator");
    coordinator.timing = coordinator_timing_;
    coordinator_ = std::make_unique<Coordinator>(coordinator);
    ASSERT_TRUE(coordinator_->Start().ok());
    address_ = absl::StrCat("127.0.0.1:", coordinator_->port());
    client_ = std::make_unique<JobClient>(JobClientOptions{address_});
  }

  // Starts `count` parameter servers with the options `base` (its
  // coordinator and data_dir replaced), server i with its data in
  // dir_/server<i>.
  void StartServers(int count, const ParameterServerOptions& base = {}) {
    for (int i = 0; i < count; ++i) {
      ParameterServerOptions server = base;
      server.coordinator = address_;
      server.data_dir = absl::StrCat(dir_->path(), "/server", i);
      servers_.push_back(std::make_unique<ParameterServer>(server));
      ASSERT_TRUE(servers_.back()->Start().ok());
    }
  }

  // Starts `count` workers on the CPU backend (one thread each) that train
  // with `trainer`.
  void StartWorkers(int count, const TrainerOptions& trainer = {}) {
    for (int i = 0; i < count; ++i) {
      WorkerNodeOptions worker;
      worker.coordinator = address_;
      worker.trainer = trainer;
      workers_.push_back(std::make_unique<WorkerNode>(
          worker, CpuBackend::Create({.num_threads = 1})));
      ASSERT_TRUE(workers_.back()->Start().ok());
    }
  }

  // Polls job `id` until `done` holds for its status, it ended, or `timeout`
  // passed; returns the last status.
  v1::JobStatus WaitFor(const std::string& id,
                        const std::function<bool(const v1::JobStatus&)>& done,
                        absl::Duration timeout = absl::Seconds(60)) {
    const absl::Time deadline = absl::Now() + timeout;
    v1::JobStatus status;
    while (absl::Now() < deadline) {
      auto got = client_->Get(id);
      if (got.ok()) {
        status = *got;
        if (done(status) || status.state() == v1::SUCCEEDED ||
            status.state() == v1::FAILED || status.state() == v1::CANCELLED) {
          return status;
        }
      }
      absl::SleepFor(absl::Milliseconds(5));
    }
    return status;
  }

  // WaitFor the job's end.
  v1::JobStatus WaitEnd(const std::string& id,
                        absl::Duration timeout = absl::Seconds(60)) {
    return WaitFor(
        id, [](const v1::JobStatus&) { return false; }, timeout);
  }

  void TearDown() override {
    StopWorkers();
    StopServersAndCoordinator();
  }
  void StopWorkers() {
    for (auto& w : workers_) w->Stop();
  }
  // Stops the servers and the coordinator and removes dir_.
  void StopServersAndCoordinator() {
    for (auto& s : servers_) s->Stop();
    if (coordinator_) coordinator_->Stop();
    dir_.reset();
  }

  // The coordinator's timing (StartCoordinator): a heartbeat every 50 ms, a
  // 5 s lease.
  MembershipTiming coordinator_timing_ = [] {
    MembershipTiming timing;
    timing.heartbeat_interval = absl::Milliseconds(50);
    timing.lease = absl::Seconds(5);
    return timing;
  }();
  std::optional<ScopedTempDir> dir_;  // Made by StartCoordinator.
  std::string address_;               // The coordinator's.
  std::unique_ptr<Coordinator> coordinator_;
  std::vector<std::unique_ptr<ParameterServer>> servers_;
  std::vector<std::unique_ptr<WorkerNode>> workers_;
  std::unique_ptr<JobClient> client_;
};

}  // namespace ps::testing

#endif  // PS_TESTS_TESTING_CLUSTER_FIXTURE_H_
